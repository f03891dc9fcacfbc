#include "codes-json.h"

#include <json-glib/json-glib.h>

#include "ppx-common.h"
#include "tool-file.h"

gboolean
codes_json_write (const char *path, const int *codes, gsize n_frames, int n_codebooks, GError **error)
{
  /* One row per line keeps the file readable and diffable without a pretty printer's indentation. */
  GString *s = g_string_new ("{\"codes\": [");
  for (gsize t = 0; t < n_frames; t++) {
    g_string_append (s, t ? ",\n  [" : "\n  [");
    for (int q = 0; q < n_codebooks; q++)
      g_string_append_printf (s, q ? ", %d" : "%d", codes[t * n_codebooks + q]);
    g_string_append_c (s, ']');
  }
  g_string_append (s, n_frames ? "\n]}\n" : "]}\n");
  gboolean ok = tool_write_file (path, s->str, s->len, error);
  g_string_free (s, TRUE);
  return ok;
}

static gboolean
is_integer (JsonNode *n)
{
  return JSON_NODE_HOLDS_VALUE (n) && json_node_get_value_type (n) == G_TYPE_INT64;
}

int *
codes_json_read (const char *path, int n_codebooks, int card, gsize *n_frames, GError **error)
{
  if (!g_file_test (path, G_FILE_TEST_IS_REGULAR)) {
    g_set_error (error, PPX_ERROR, PPX_ERROR_MISSING, "%s: no such file", path);
    return NULL;
  }
  g_autoptr (JsonParser) parser = json_parser_new ();
  g_autoptr (GError) e = NULL;
  if (!json_parser_load_from_file (parser, path, &e)) {
    /* json-glib's parse errors start with the path ("PATH:LINE:COLUMN: Parse error: ..."). */
    if (e->domain == JSON_PARSER_ERROR)
      g_set_error (error, PPX_ERROR, PPX_ERROR_FORMAT, "%s (expected {\"codes\": [[8 ids], ...]})", e->message);
    else
      g_set_error (error, PPX_ERROR, PPX_ERROR_IO, "%s: cannot read: %s", path, e->message);
    return NULL;
  }
  JsonNode *root = json_parser_get_root (parser);
  if (!root || !JSON_NODE_HOLDS_OBJECT (root)) {
    g_set_error (error, PPX_ERROR, PPX_ERROR_FORMAT, "%s: not a JSON object (expected {\"codes\": [[...], ...]})",
                 path);
    return NULL;
  }
  JsonNode *codes_node = json_object_get_member (json_node_get_object (root), "codes");
  if (!codes_node) {
    g_set_error (error, PPX_ERROR, PPX_ERROR_FORMAT, "%s: no \"codes\" member", path);
    return NULL;
  }
  if (!JSON_NODE_HOLDS_ARRAY (codes_node)) {
    g_set_error (error, PPX_ERROR, PPX_ERROR_FORMAT, "%s: \"codes\" is not an array of rows", path);
    return NULL;
  }
  JsonArray *rows = json_node_get_array (codes_node);
  guint n = json_array_get_length (rows);
  int *codes = g_new (int, MAX ((gsize) n * n_codebooks, 1));
  for (guint t = 0; t < n; t++) {
    JsonNode *row_node = json_array_get_element (rows, t);
    if (!JSON_NODE_HOLDS_ARRAY (row_node)) {
      g_set_error (error, PPX_ERROR, PPX_ERROR_FORMAT, "%s: row %u is not an array", path, t);
      goto fail;
    }
    JsonArray *row = json_node_get_array (row_node);
    if (json_array_get_length (row) != (guint) n_codebooks) {
      g_set_error (error, PPX_ERROR, PPX_ERROR_FORMAT, "%s: row %u has %u codes, expected %d", path, t,
                   json_array_get_length (row), n_codebooks);
      goto fail;
    }
    for (int q = 0; q < n_codebooks; q++) {
      JsonNode *c = json_array_get_element (row, q);
      if (!is_integer (c)) {
        g_set_error (error, PPX_ERROR, PPX_ERROR_FORMAT, "%s: row %u, code %d is not an integer", path, t, q);
        goto fail;
      }
      gint64 v = json_node_get_int (c);
      if (v < 0 || v >= card) {
        g_set_error (error, PPX_ERROR, PPX_ERROR_FORMAT, "%s: row %u, code %d: %" G_GINT64_FORMAT
                     " is outside [0, %d)", path, t, q, v, card);
        goto fail;
      }
      codes[(gsize) t * n_codebooks + q] = (int) v;
    }
  }
  *n_frames = n;
  return codes;
fail:
  g_free (codes);
  return NULL;
}
