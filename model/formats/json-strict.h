/* Parsing untrusted JSON with json-glib safely: json-glib recurses without a depth limit, keeps the
 * last of duplicate keys silently and ignores data after the first value. This refuses all three,
 * NUL bytes and invalid UTF-8, with messages that name the source. */
#ifndef PPX_JSON_STRICT_H
#define PPX_JSON_STRICT_H

#include <json-glib/json-glib.h>

#include "ppx-common.h"

G_BEGIN_DECLS

#define PPX_JSON_MAX_NESTING 64

typedef struct {
  JsonObject *object; /* where a duplicate key was found (valid while the parser lives) */
  char *key;          /* the duplicate key, g_free'd by ppx_json_strict_clear */
} PpxJsonDuplicate;

/* Parses data[len]. On a structural problem sets `error` (PPX_ERROR_FORMAT, "LABEL: WHAT is not valid
 * JSON: ...") and returns NULL. A duplicate key does not fail the parse: it is reported in *dup (when
 * dup is NULL it is an error "LABEL: duplicate key 'K'") so callers can word the message. */
JsonParser *ppx_json_parse_strict (const char *data, gsize len, const char *label, const char *what,
                                   PpxJsonDuplicate *dup, GError **error);
void ppx_json_duplicate_clear (PpxJsonDuplicate *dup);

G_END_DECLS
#endif
