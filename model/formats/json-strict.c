#include "json-strict.h"

static const char *
structure_problem (const char *s, gsize len)
{
  int depth = 0;
  gboolean in_string = FALSE, closed = FALSE;
  for (gsize i = 0; i < len; i++) {
    char ch = s[i];
    if (closed) {
      if (ch != ' ' && ch != '\t' && ch != '\n' && ch != '\r')
        return "unexpected data after the JSON object";
    } else if (in_string) {
      if (ch == '\\')
        i++;
      else if (ch == '"')
        in_string = FALSE;
    } else if (ch == '"') {
      in_string = TRUE;
    } else if (ch == '[' || ch == '{') {
      if (++depth > PPX_JSON_MAX_NESTING)
        return "nested more than " G_STRINGIFY (PPX_JSON_MAX_NESTING) " levels deep";
    } else if (ch == ']' || ch == '}') {
      closed = --depth <= 0;
    }
  }
  return NULL;
}

typedef struct {
  GHashTable *seen; /* JsonObject* -> members announced so far */
  PpxJsonDuplicate *dup;
} Scan;

static void
on_object_member (JsonParser *parser, JsonObject *object, const char *name, gpointer user_data)
{
  Scan *scan = user_data;
  guint n = GPOINTER_TO_UINT (g_hash_table_lookup (scan->seen, object)) + 1;
  g_hash_table_insert (scan->seen, object, GUINT_TO_POINTER (n));
  if (n > json_object_get_size (object) && !scan->dup->key) {
    scan->dup->object = object;
    scan->dup->key = g_strdup (name);
  }
}

void
ppx_json_duplicate_clear (PpxJsonDuplicate *dup)
{
  g_clear_pointer (&dup->key, g_free);
  dup->object = NULL;
}

JsonParser *
ppx_json_parse_strict (const char *data, gsize len, const char *label, const char *what, PpxJsonDuplicate *dup,
                       GError **error)
{
  const char *problem = NULL;
  if (memchr (data, 0, len) || !g_utf8_validate (data, (gssize) len, NULL))
    problem = "invalid UTF-8 or NUL byte";
  else
    problem = structure_problem (data, len);
  if (problem) {
    g_set_error (error, PPX_ERROR, PPX_ERROR_FORMAT, "%s: %s is not valid JSON: %s", label, what, problem);
    return NULL;
  }
  PpxJsonDuplicate local = {0};
  Scan scan = {g_hash_table_new (NULL, NULL), dup ? dup : &local};
  JsonParser *parser = json_parser_new_immutable ();
  gulong id = g_signal_connect (parser, "object-member", G_CALLBACK (on_object_member), &scan);
  g_autoptr (GError) jerr = NULL;
  gboolean ok = json_parser_load_from_data (parser, data, (gssize) len, &jerr);
  g_signal_handler_disconnect (parser, id);
  g_hash_table_destroy (scan.seen);
  if (!ok) {
    g_set_error (error, PPX_ERROR, PPX_ERROR_FORMAT, "%s: %s is not valid JSON: %s", label, what, jerr->message);
    ppx_json_duplicate_clear (scan.dup);
    g_object_unref (parser);
    return NULL;
  }
  if (!dup && local.key) {
    g_set_error (error, PPX_ERROR, PPX_ERROR_FORMAT, "%s: duplicate key '%s' in %s", label, local.key, what);
    ppx_json_duplicate_clear (&local);
    g_object_unref (parser);
    return NULL;
  }
  return parser;
}
