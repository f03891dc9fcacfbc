/* Checkpoint manifests: the names and shapes ppx_manifest_* derive from a config must equal those of the real
 * PersonaPlex-7B checkpoints (listed in golden.json) and of the golden tiny checkpoints (read from the files). */
#include "config.h"
#include "manifest.h"
#include "safetensors.h"
#include "test-util.h"

#include <json-glib/json-glib.h>

static JsonParser *golden_parser;
static JsonObject *golden;
static char *golden_dir;
static char *golden_text;

/* Compares a manifest with a golden.json object {name: [shape]}, reporting every difference at once. */
static void
check_against_json (GPtrArray *manifest, const char *key, guint expected_count)
{
  JsonObject *want = json_object_get_object_member (golden, key);
  g_assert_nonnull (want);
  g_autoptr (GString) diffs = g_string_new ("");
  g_autoptr (GHashTable) seen = g_hash_table_new (g_str_hash, g_str_equal);
  for (guint i = 0; i < manifest->len; i++) {
    const PpxManifestEntry *e = g_ptr_array_index (manifest, i);
    g_autofree char *have = ppx_shape_str (e->ndim, e->shape);
    if (!g_hash_table_add (seen, e->name))
      g_string_append_printf (diffs, "  %s listed twice\n", e->name);
    JsonNode *n = json_object_get_member (want, e->name);
    if (!n || !JSON_NODE_HOLDS_ARRAY (n)) {
      g_string_append_printf (diffs, "  %s %s: not in %s\n", e->name, have, key);
      continue;
    }
    JsonArray *a = json_node_get_array (n);
    int64_t shape[PPX_ST_MAX_DIMS];
    int nd = (int) MIN (json_array_get_length (a), PPX_ST_MAX_DIMS);
    for (int d = 0; d < nd; d++)
      shape[d] = json_array_get_int_element (a, d);
    g_autofree char *expected = ppx_shape_str (nd, shape);
    if (strcmp (have, expected) != 0)
      g_string_append_printf (diffs, "  %s: manifest %s, %s %s\n", e->name, have, key, expected);
  }
  g_autoptr (GList) names = json_object_get_members (want);
  for (GList *l = names; l; l = l->next)
    if (!g_hash_table_contains (seen, l->data))
      g_string_append_printf (diffs, "  %s: in %s but not in the manifest\n", (char *) l->data, key);
  if (diffs->len)
    g_error ("manifest differs from %s:\n%s", key, diffs->str);
  g_assert_cmpuint (manifest->len, ==, json_object_get_size (want));
  if (expected_count)
    g_assert_cmpuint (manifest->len, ==, expected_count);
}

static void
full_config (PpxConfig *cfg)
{
  g_autoptr (GError) error = NULL;
  ppx_config_default (cfg);
  g_assert_true (ppx_config_finish (cfg, "defaults", &error));
}

static void
tiny_config (PpxConfig *cfg)
{
  g_autoptr (GError) error = NULL;
  ppx_config_default (cfg);
  g_assert_true (ppx_config_apply_json (cfg, golden_text, -1, "golden.json", &error));
  g_assert_no_error (error);
}

static void
test_full_lm (void)
{
  PpxConfig cfg;
  full_config (&cfg);
  g_autoptr (GPtrArray) m = ppx_manifest_lm (&cfg.lm);
  check_against_json (m, "full_lm_manifest", 475);
}

static void
test_full_mimi (void)
{
  PpxConfig cfg;
  full_config (&cfg);
  g_autoptr (GPtrArray) m = ppx_manifest_mimi (&cfg.mimi);
  check_against_json (m, "full_mimi_manifest", 318);
}

static void
test_tiny_lm (void)
{
  PpxConfig cfg;
  tiny_config (&cfg);
  g_autoptr (GPtrArray) m = ppx_manifest_lm (&cfg.lm);
  check_against_json (m, "tiny_lm_manifest", 0);
}

static void
test_tiny_mimi (void)
{
  PpxConfig cfg;
  tiny_config (&cfg);
  g_autoptr (GPtrArray) m = ppx_manifest_mimi (&cfg.mimi);
  check_against_json (m, "tiny_mimi_manifest", 0);
}

/* Every tensor of a checkpoint file is in the manifest with its shape, and vice versa. */
static void
check_file (const char *file, GPtrArray *manifest, gboolean (*dtype_ok) (PpxDType))
{
  g_autofree char *path = g_build_filename (golden_dir, file, NULL);
  g_autoptr (GError) error = NULL;
  PpxSafetensors *st = ppx_st_open (path, &error);
  g_assert_no_error (error);
  for (guint i = 0; i < manifest->len; i++) {
    const PpxManifestEntry *e = g_ptr_array_index (manifest, i);
    const PpxStTensor *t = ppx_st_find (st, e->name);
    if (!t)
      g_error ("%s: tensor '%s' of the manifest is missing", path, e->name);
    if (!ppx_st_check (st, t, t->dtype, e->ndim, e->shape, &error))
      g_error ("%s", error->message);
    if (!dtype_ok (t->dtype))
      g_error ("%s: tensor '%s' has dtype %s", path, e->name, ppx_dtype_name (t->dtype));
  }
  g_assert_cmpuint (ppx_st_n_tensors (st), ==, manifest->len);
  ppx_st_close (st);
}

static gboolean
is_bf16 (PpxDType dt)
{
  return dt == PPX_DTYPE_BF16;
}

/* The published Mimi checkpoint is F32; the golden tiny one is stored in BF16. */
static gboolean
is_float (PpxDType dt)
{
  return dt == PPX_DTYPE_F32 || dt == PPX_DTYPE_BF16 || dt == PPX_DTYPE_F16;
}

static void
test_tiny_lm_file (void)
{
  PpxConfig cfg;
  tiny_config (&cfg);
  g_autoptr (GPtrArray) m = ppx_manifest_lm (&cfg.lm);
  check_file ("model.safetensors", m, is_bf16);
}

static void
test_tiny_mimi_file (void)
{
  PpxConfig cfg;
  tiny_config (&cfg);
  g_autoptr (GPtrArray) m = ppx_manifest_mimi (&cfg.mimi);
  check_file ("mimi.safetensors", m, is_float);
}

/* The SEANet layer layout behind the Mimi manifest: strides multiply to the hop, channels chain. */
static void
test_seanet_layout (void)
{
  PpxConfig cfg;
  full_config (&cfg);
  PpxSeanetLayer layers[PPX_SEANET_MAX_LAYERS];
  for (int dec = 0; dec < 2; dec++) {
    int n = dec ? ppx_seanet_decoder_layers (&cfg.mimi, layers, PPX_SEANET_MAX_LAYERS)
                : ppx_seanet_encoder_layers (&cfg.mimi, layers, PPX_SEANET_MAX_LAYERS);
    g_assert_cmpint (n, ==, 15);
    int stride = 1, channels = dec ? cfg.mimi.dimension : 1;
    for (int i = 0; i < n; i++) {
      g_assert_cmpint (layers[i].index, ==, i);
      if (layers[i].kind == PPX_SEANET_ELU)
        continue;
      g_assert_cmpint (layers[i].c_in, ==, channels);
      channels = layers[i].c_out;
      stride *= layers[i].stride;
    }
    g_assert_cmpint (stride, ==, cfg.mimi.hop);
    g_assert_cmpint (channels, ==, dec ? 1 : cfg.mimi.dimension);
  }
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/manifest/seanet-layout", test_seanet_layout);
  const char *dir = ppx_test_golden_dir ();
  if (!dir) {
    int rc = g_test_run ();
    g_printerr ("golden data not found (set PPX_GOLDEN_DIR); skipping the manifest comparisons\n");
    return rc ? rc : PPX_TEST_SKIP;
  }
  golden_dir = g_strdup (dir);
  g_autofree char *path = g_build_filename (dir, "golden.json", NULL);
  g_autoptr (GError) error = NULL;
  golden_parser = json_parser_new ();
  if (!g_file_get_contents (path, &golden_text, NULL, &error) ||
      !json_parser_load_from_data (golden_parser, golden_text, -1, &error))
    g_error ("%s: %s", path, error->message);
  golden = json_node_get_object (json_parser_get_root (golden_parser));

  g_test_add_func ("/manifest/full-lm", test_full_lm);
  g_test_add_func ("/manifest/full-mimi", test_full_mimi);
  g_test_add_func ("/manifest/tiny-lm", test_tiny_lm);
  g_test_add_func ("/manifest/tiny-mimi", test_tiny_mimi);
  g_test_add_func ("/manifest/tiny-lm-file", test_tiny_lm_file);
  g_test_add_func ("/manifest/tiny-mimi-file", test_tiny_mimi_file);
  int rc = g_test_run ();
  g_object_unref (golden_parser);
  g_free (golden_text);
  g_free (golden_dir);
  return rc;
}
