/* personaplex-run's --output-json file:
 *   {"settings": {every option}, "run": {what ran}, "frames": [{"tokens": [17 ids], "text": "piece"|null}, ...],
 *    "transcript": "every text piece, concatenated"}
 * (docs/tools.md describes each field). */
#ifndef PPX_RUN_JSON_H
#define PPX_RUN_JSON_H

#include "run-core.h"

G_BEGIN_DECLS

gboolean run_json_write (const char *path, const RunSettings *settings, const RunOutput *out, GError **error);

G_END_DECLS
#endif
