/* JSON members and text as the tools' reports write them (json-glib builders): the bench's and the loadgen's. */
#ifndef PPX_TOOL_JSON_H
#define PPX_TOOL_JSON_H

#include <json-glib/json-glib.h>

G_BEGIN_DECLS

/* "key": "v", or "key": null when v is NULL. */
void tool_json_add_string (JsonBuilder *b, const char *key, const char *v);
/* "key": v */
void tool_json_add_int (JsonBuilder *b, const char *key, gint64 v);
/* The built document, indented, as text (g_free); no trailing newline. */
char *tool_json_to_text (JsonBuilder *b);

G_END_DECLS
#endif
