/* Writing a whole output file with a plain message on failure ("PATH: cannot write: REASON"). */
#ifndef PPX_TOOL_FILE_H
#define PPX_TOOL_FILE_H

#include <glib.h>

G_BEGIN_DECLS

gboolean tool_write_file (const char *path, const char *data, gsize len, GError **error);

G_END_DECLS
#endif
