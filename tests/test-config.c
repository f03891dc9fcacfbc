/* Model configuration: built-in PersonaPlex-7B values, config.json overrides, validation, serialisation. */
#include "config.h"
#include "test-util.h"

#include <glib/gstdio.h>

static void
test_defaults (void)
{
  PpxConfig cfg;
  g_autoptr (GError) error = NULL;
  ppx_config_default (&cfg);
  g_assert_true (ppx_config_finish (&cfg, "defaults", &error));
  g_assert_no_error (error);
  const PpxLmConfig *lm = &cfg.lm;
  /* docs/personaplex-arch.md section 1.1 */
  g_assert_cmpint (lm->dim, ==, 4096);
  g_assert_cmpint (lm->num_heads, ==, 32);
  g_assert_cmpint (lm->num_layers, ==, 32);
  g_assert_cmpfloat (lm->hidden_scale, ==, 4.125);
  g_assert_cmpint (lm->context, ==, 3000);
  g_assert_cmpint (lm->text_card, ==, 32000);
  g_assert_cmpint (lm->card, ==, 2048);
  g_assert_cmpint (lm->n_q, ==, 16);
  g_assert_cmpint (lm->dep_q, ==, 16);
  g_assert_cmpint (lm->existing_text_padding_id, ==, 3);
  g_assert_cmpint (lm->max_period, ==, 10000);
  g_assert_cmpint (lm->depformer_dim, ==, 1024);
  g_assert_cmpint (lm->depformer_dim_feedforward, ==, 4224);
  g_assert_cmpint (lm->depformer_num_heads, ==, 16);
  g_assert_cmpint (lm->depformer_num_layers, ==, 6);
  g_assert_cmpint (lm->ffn_hidden, ==, 11264);
  g_assert_cmpint (lm->depformer_ffn_hidden, ==, 2816);
  g_assert_cmpint (lm->n_streams, ==, 17);
  g_assert_cmpint (lm->max_delay, ==, 1);
  static const int delays[17] = {0, 0, 1, 1, 1, 1, 1, 1, 1, 0, 1, 1, 1, 1, 1, 1, 1};
  for (int k = 0; k < 17; k++)
    g_assert_cmpint (lm->delays[k], ==, delays[k]);

  const PpxMimiConfig *m = &cfg.mimi;
  g_assert_cmpint (m->channels, ==, 1);
  g_assert_cmpint (m->dimension, ==, 512);
  g_assert_cmpint (m->n_filters, ==, 64);
  g_assert_cmpint (m->n_residual_layers, ==, 1);
  g_assert_cmpint (m->compress, ==, 2);
  g_assert_cmpint (m->dilation_base, ==, 2);
  g_assert_cmpint (m->kernel_size, ==, 7);
  g_assert_cmpint (m->residual_kernel_size, ==, 3);
  g_assert_cmpint (m->last_kernel_size, ==, 3);
  g_assert_cmpint (m->n_ratios, ==, 4);
  static const int ratios[4] = {8, 6, 5, 4};
  for (int i = 0; i < 4; i++)
    g_assert_cmpint (m->ratios[i], ==, ratios[i]);
  g_assert_cmpint (m->q_dimension, ==, 256);
  g_assert_cmpint (m->q_n_q, ==, 32);
  g_assert_cmpint (m->q_bins, ==, 2048);
  g_assert_cmpint (m->q_input_dimension, ==, 512);
  g_assert_cmpint (m->q_output_dimension, ==, 512);
  g_assert_cmpint (m->t_d_model, ==, 512);
  g_assert_cmpint (m->t_num_heads, ==, 8);
  g_assert_cmpint (m->t_num_layers, ==, 8);
  g_assert_cmpint (m->t_context, ==, 250);
  g_assert_cmpint (m->t_dim_feedforward, ==, 2048);
  g_assert_cmpint (m->t_max_period, ==, 10000);
  g_assert_cmpint (m->num_codebooks, ==, 8);
  g_assert_cmpint (m->sample_rate, ==, 24000);
  g_assert_cmpint (m->hop, ==, 960);
  g_assert_cmpint (m->frame_size, ==, 1920);
}

static void
test_golden_json (void)
{
  const char *golden = ppx_test_golden_dir ();
  if (!golden) {
    g_test_skip ("golden data not found (set PPX_GOLDEN_DIR)");
    return;
  }
  g_autofree char *path = g_build_filename (golden, "golden.json", NULL);
  g_autofree char *text = NULL;
  gsize len;
  g_autoptr (GError) error = NULL;
  g_assert_true (g_file_get_contents (path, &text, &len, &error));
  PpxConfig cfg;
  ppx_config_default (&cfg);
  g_assert_true (ppx_config_apply_json (&cfg, text, (gssize) len, path, &error));
  g_assert_no_error (error);
  g_assert_cmpint (cfg.lm.dim, ==, 64);
  g_assert_cmpint (cfg.lm.num_heads, ==, 4);
  g_assert_cmpint (cfg.lm.num_layers, ==, 2);
  g_assert_cmpint (cfg.lm.context, ==, 20);
  g_assert_cmpint (cfg.lm.text_card, ==, 2048);
  g_assert_cmpint (cfg.lm.depformer_dim, ==, 32);
  g_assert_cmpint (cfg.lm.depformer_dim_feedforward, ==, 132);
  g_assert_cmpint (cfg.lm.ffn_hidden, ==, 176);
  g_assert_cmpint (cfg.lm.depformer_ffn_hidden, ==, 88);
  g_assert_cmpint (cfg.mimi.dimension, ==, 32);
  g_assert_cmpint (cfg.mimi.n_filters, ==, 4);
  g_assert_cmpint (cfg.mimi.q_dimension, ==, 16);
  g_assert_cmpint (cfg.mimi.t_context, ==, 30);
  g_assert_cmpint (cfg.mimi.t_dim_feedforward, ==, 64);
  g_assert_cmpint (cfg.mimi.hop, ==, 960);
  g_assert_cmpint (cfg.mimi.frame_size, ==, 1920);
}

static void
test_partial_override (void)
{
  PpxConfig cfg;
  g_autoptr (GError) error = NULL;
  ppx_config_default (&cfg);
  const char *json = "{\"lm\": {\"num_layers\": 3, \"context\": 100}, \"mimi\": {\"transformer\": {\"context\": 50}}}";
  g_assert_true (ppx_config_apply_json (&cfg, json, -1, "partial", &error));
  g_assert_no_error (error);
  g_assert_cmpint (cfg.lm.num_layers, ==, 3);
  g_assert_cmpint (cfg.lm.context, ==, 100);
  g_assert_cmpint (cfg.lm.dim, ==, 4096); /* untouched keys keep the 7B values */
  g_assert_cmpint (cfg.mimi.t_context, ==, 50);
  g_assert_cmpint (cfg.mimi.t_num_layers, ==, 8);
}

/* Each invalid document must fail with PPX_ERROR_CONFIG, name the source and say what is wrong. */
typedef struct {
  const char *name, *json, *expect;
} BadConfig;

static const BadConfig bad_configs[] = {
  {"not-json", "{\"lm\": ", "not valid JSON"},
  {"top-level-array", "[1, 2]", "not a JSON object"},
  {"lm-not-object", "{\"lm\": 5}", "\"lm\" is not an object"},
  {"mimi-not-object", "{\"mimi\": [1]}", "\"mimi\" is not an object"},
  {"dim-string", "{\"lm\": {\"dim\": \"4096\"}}", "lm.dim must be an integer"},
  {"dim-fraction", "{\"lm\": {\"dim\": 64.5}}", "lm.dim must be an integer"},
  {"dim-huge", "{\"lm\": {\"dim\": 99999999999}}", "lm.dim is out of range"},
  {"dim-zero", "{\"lm\": {\"dim\": 0}}", "lm.dim = 0"},
  {"hidden-scale-string", "{\"lm\": {\"hidden_scale\": \"4\"}}", "lm.hidden_scale must be a number"},
  {"hidden-scale-negative", "{\"lm\": {\"hidden_scale\": -1}}", "lm.hidden_scale"},
  {"n-q-8", "{\"lm\": {\"n_q\": 8}}", "lm.n_q = 8"},
  {"dep-q-too-small", "{\"lm\": {\"dep_q\": 4}}", "lm.dep_q = 4"},
  {"heads-not-dividing", "{\"lm\": {\"num_heads\": 3}}", "must divide dim"},
  {"odd-head-size", "{\"lm\": {\"dim\": 96, \"num_heads\": 32}}", "even head sizes"},
  {"depformer-heads", "{\"lm\": {\"depformer_num_heads\": 5}}", "must divide depformer_dim"},
  {"delays-short", "{\"lm\": {\"delays\": [0, 1, 1]}}", "lm.delays has 3 entries, expected 1 + n_q = 17"},
  {"delays-too-long", "{\"lm\": {\"delays\": [0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0]}}", "lm.delays must be an array"},
  {"delays-not-array", "{\"lm\": {\"delays\": 1}}", "lm.delays must be an array"},
  {"delays-string-entry", "{\"lm\": {\"delays\": [0,0,\"1\",1,1,1,1,1,1,0,1,1,1,1,1,1,1]}}", "lm.delays[2]"},
  {"delay-two", "{\"lm\": {\"delays\": [0,0,2,1,1,1,1,1,1,0,1,1,1,1,1,1,1]}}", "lm.delays[2] = 2"},
  {"padding-id-out-of-vocab", "{\"lm\": {\"existing_text_padding_id\": 32000}}", "existing_text_padding_id"},
  {"stereo", "{\"mimi\": {\"seanet\": {\"channels\": 2}}}", "mono only"},
  {"ratio-zero", "{\"mimi\": {\"seanet\": {\"ratios\": [8, 0, 5, 4]}}}", "mimi.seanet.ratios[1] = 0"},
  {"ratios-empty", "{\"mimi\": {\"seanet\": {\"ratios\": []}}}", "ratios has 0 entries"},
  {"quantizer-dims", "{\"mimi\": {\"quantizer\": {\"input_dimension\": 256}}}", "must equal seanet.dimension"},
  {"d-model-mismatch", "{\"mimi\": {\"transformer\": {\"d_model\": 256}}}", "d_model = 256"},
  {"codebooks", "{\"mimi\": {\"num_codebooks\": 4}}", "num_codebooks = 4"},
  {"bins-vs-card", "{\"lm\": {\"card\": 1024}}", "must equal lm.card"},
  {"transformer-heads", "{\"mimi\": {\"transformer\": {\"num_heads\": 3}}}", "mimi.transformer.num_heads = 3"},
};

static void
test_bad_config (gconstpointer data)
{
  const BadConfig *bad = data;
  PpxConfig cfg;
  g_autoptr (GError) error = NULL;
  ppx_config_default (&cfg);
  g_assert_false (ppx_config_apply_json (&cfg, bad->json, -1, "bad.json", &error));
  g_assert_error (error, PPX_ERROR, PPX_ERROR_CONFIG);
  if (!g_str_has_prefix (error->message, "bad.json: ") || !strstr (error->message, bad->expect))
    g_error ("%s: message \"%s\" should start with \"bad.json: \" and contain \"%s\"", bad->name, error->message,
             bad->expect);
}

static void
check_same_config (const PpxConfig *a, const PpxConfig *b)
{
  g_autofree char *ja = ppx_config_to_json (a), *jb = ppx_config_to_json (b);
  g_assert_cmpstr (ja, ==, jb);
  /* Every field, derived ones included (the struct is plain ints and one double; zero-initialised). */
  g_assert_true (memcmp (&a->lm, &b->lm, sizeof a->lm) == 0);
  g_assert_true (memcmp (&a->mimi, &b->mimi, sizeof a->mimi) == 0);
}

static void
test_to_json_round_trip (void)
{
  const char *variants[] = {
    "{}",
    "{\"lm\": {\"dim\": 64, \"num_heads\": 4, \"num_layers\": 2, \"hidden_scale\": 4.125, \"context\": 20,"
    " \"text_card\": 2048, \"depformer_dim\": 32, \"depformer_dim_feedforward\": 132, \"depformer_num_heads\": 2,"
    " \"depformer_num_layers\": 2, \"delays\": [0,1,0,1,0,1,0,1,0,1,0,1,0,1,0,1,0]},"
    " \"mimi\": {\"seanet\": {\"dimension\": 32, \"n_filters\": 4, \"ratios\": [4, 3, 2]},"
    " \"quantizer\": {\"dimension\": 16, \"input_dimension\": 32, \"output_dimension\": 32},"
    " \"transformer\": {\"d_model\": 32, \"num_heads\": 2, \"num_layers\": 1, \"context\": 30,"
    " \"dim_feedforward\": 64}}}",
  };
  for (guint i = 0; i < G_N_ELEMENTS (variants); i++) {
    PpxConfig a, b;
    g_autoptr (GError) error = NULL;
    ppx_config_default (&a);
    g_assert_true (ppx_config_apply_json (&a, variants[i], -1, "variant", &error));
    g_assert_no_error (error);
    g_autofree char *json = ppx_config_to_json (&a);
    /* Applied over a deliberately different base: the output must be complete. */
    ppx_config_default (&b);
    b.lm.dim = 8;
    b.mimi.n_ratios = 1;
    g_assert_true (ppx_config_apply_json (&b, json, -1, "round-trip", &error));
    g_assert_no_error (error);
    check_same_config (&a, &b);
  }
}

static void
test_load_dir (void)
{
  g_autoptr (GError) error = NULL;
  g_autofree char *dir = g_dir_make_tmp ("ppx-test-config-XXXXXX", &error);
  g_assert_no_error (error);
  PpxConfig cfg, def;
  ppx_config_default (&def);
  g_assert_true (ppx_config_finish (&def, "defaults", &error));
  /* No config.json: the 7B defaults. */
  g_assert_true (ppx_config_load_dir (&cfg, dir, &error));
  g_assert_no_error (error);
  check_same_config (&cfg, &def);

  g_autofree char *path = g_build_filename (dir, "config.json", NULL);
  g_assert_true (g_file_set_contents (path, "{\"lm\": {\"num_layers\": 4}}", -1, &error));
  g_assert_true (ppx_config_load_dir (&cfg, dir, &error));
  g_assert_cmpint (cfg.lm.num_layers, ==, 4);

  g_assert_true (g_file_set_contents (path, "{\"lm\": {\"num_layers\": -4}}", -1, &error));
  g_assert_false (ppx_config_load_dir (&cfg, dir, &error));
  g_assert_error (error, PPX_ERROR, PPX_ERROR_CONFIG);
  g_assert_nonnull (strstr (error->message, path)); /* names the file */
  g_assert_nonnull (strstr (error->message, "num_layers"));
  g_unlink (path);
  g_rmdir (dir);
}

/* The public enums' names (ppx-types.h): every value round-trips, in value order, and unknown names and
 * values are refused. */
static void
test_enum_names (void)
{
  const char *const *q = ppx_quantization_names (), *const *b = ppx_backend_kind_names (),
                    *const *k = ppx_kv_format_names ();
  g_assert_cmpuint (g_strv_length ((char **) q), ==, 4);
  g_assert_cmpuint (g_strv_length ((char **) b), ==, 3);
  g_assert_cmpuint (g_strv_length ((char **) k), ==, 4);
  for (int i = 0; q[i]; i++) {
    PpxQuantization v = -1;
    g_assert_true (ppx_quantization_from_name (q[i], &v));
    g_assert_cmpint (v, ==, i);
    g_assert_cmpstr (ppx_quantization_name (v), ==, q[i]);
  }
  for (int i = 0; b[i]; i++) {
    PpxBackendKind v = -1;
    g_assert_true (ppx_backend_kind_from_name (b[i], &v));
    g_assert_cmpint (v, ==, i);
    g_assert_cmpstr (ppx_backend_kind_name (v), ==, b[i]);
  }
  for (int i = 0; k[i]; i++) {
    PpxKvFormat v = -1;
    g_assert_true (ppx_kv_format_from_name (k[i], &v));
    g_assert_cmpint (v, ==, i);
    g_assert_cmpstr (ppx_kv_format_name (v), ==, k[i]);
  }
  g_assert_cmpstr (ppx_quantization_name (PPX_QUANT_INT4), ==, "int4");
  g_assert_cmpstr (ppx_backend_kind_name (PPX_BACKEND_CUDA), ==, "cuda");
  g_assert_cmpstr (ppx_kv_format_name (PPX_KV_FP8), ==, "fp8");
  g_assert_cmpstr (ppx_kv_format_name (ppx_kv_format_resolve (PPX_KV_AUTO)), ==, "bf16");
  g_assert_cmpstr (ppx_kv_format_name ((PpxKvFormat) 99), ==, "?");
  PpxKvFormat kv = PPX_KV_F32;
  g_assert_false (ppx_kv_format_from_name ("FP8", &kv));
  g_assert_false (ppx_kv_format_from_name (NULL, &kv));
  g_assert_cmpint (kv, ==, PPX_KV_F32);
  g_autofree char *choice = ppx_names_choice (b);
  g_assert_cmpstr (choice, ==, "auto, cpu or cuda");
  const char *const one[] = {"x", NULL}, *const none[] = {NULL};
  g_autofree char *c1 = ppx_names_choice (one), *c0 = ppx_names_choice (none);
  g_assert_cmpstr (c1, ==, "x");
  g_assert_cmpstr (c0, ==, "");
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/config/defaults", test_defaults);
  g_test_add_func ("/config/enum-names", test_enum_names);
  g_test_add_func ("/config/golden-json", test_golden_json);
  g_test_add_func ("/config/partial-override", test_partial_override);
  g_test_add_func ("/config/to-json-round-trip", test_to_json_round_trip);
  g_test_add_func ("/config/load-dir", test_load_dir);
  for (guint i = 0; i < G_N_ELEMENTS (bad_configs); i++) {
    g_autofree char *name = g_strdup_printf ("/config/invalid/%s", bad_configs[i].name);
    g_test_add_data_func (name, &bad_configs[i], test_bad_config);
  }
  return g_test_run ();
}
