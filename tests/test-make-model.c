/* personaplex-make-model: the directories it writes follow the manifests, are deterministic per seed and hold
 * values a forward pass can use. `test-make-model` checks the tiny preset; `test-make-model full-mimi` writes
 * and checks a full-size Mimi checkpoint (385 MB, deleted afterwards). $PPX_MAKE_MODEL names the tool. */
#include "config.h"
#include "manifest.h"
#include "safetensors.h"
#include "test-util.h"

#include <glib/gstdio.h>
#include <math.h>

#define LM_FILE "model.safetensors"
#define MIMI_FILE "tokenizer-e351c8d8-checkpoint125.safetensors"

static char *tmp_root;

static char *
run_tool (const char *name, const char *const *extra_args)
{
  const char *tool = g_getenv ("PPX_MAKE_MODEL");
  if (!tool)
    tool = PPX_BUILD_ROOT "/tools/personaplex-make-model";
  char *dir = g_build_filename (tmp_root, name, NULL);
  g_autoptr (GPtrArray) argv = g_ptr_array_new ();
  g_ptr_array_add (argv, (char *) tool);
  g_ptr_array_add (argv, "--output-dir");
  g_ptr_array_add (argv, dir);
  for (const char *const *a = extra_args; *a; a++)
    g_ptr_array_add (argv, (char *) *a);
  g_ptr_array_add (argv, NULL);
  g_autofree char *err_text = NULL;
  int status = 0;
  g_autoptr (GError) error = NULL;
  g_assert_true (g_spawn_sync (NULL, (char **) argv->pdata, NULL, G_SPAWN_DEFAULT, NULL, NULL, NULL, &err_text,
                               &status, &error));
  g_assert_no_error (error);
  if (!g_spawn_check_wait_status (status, &error))
    g_error ("%s failed: %s\n%s", tool, error->message, err_text);
  return dir;
}

static gboolean
same_file (const char *dir_a, const char *dir_b, const char *file)
{
  g_autofree char *pa = g_build_filename (dir_a, file, NULL), *pb = g_build_filename (dir_b, file, NULL);
  g_autoptr (GMappedFile) a = g_mapped_file_new (pa, FALSE, NULL), b = g_mapped_file_new (pb, FALSE, NULL);
  g_assert_true (a && b);
  return g_mapped_file_get_length (a) == g_mapped_file_get_length (b) &&
         memcmp (g_mapped_file_get_contents (a), g_mapped_file_get_contents (b), g_mapped_file_get_length (a)) == 0;
}

/* Opens a checkpoint and checks it against a manifest: names, shapes, dtype, and plausible values. */
static void
check_checkpoint (const char *dir, const char *file, GPtrArray *manifest, PpxDType dtype, gboolean check_values)
{
  g_autofree char *path = g_build_filename (dir, file, NULL);
  g_autoptr (GError) error = NULL;
  PpxSafetensors *st = ppx_st_open (path, &error);
  g_assert_no_error (error);
  g_assert_cmpuint (ppx_st_n_tensors (st), ==, manifest->len);
  g_assert_cmpstr (ppx_st_metadata (st, "generator"), ==, "personaplex-make-model");
  for (guint i = 0; i < manifest->len; i++) {
    const PpxManifestEntry *e = g_ptr_array_index (manifest, i);
    const PpxStTensor *t = ppx_st_find (st, e->name);
    if (!t)
      g_error ("%s: '%s' missing", path, e->name);
    if (!ppx_st_check (st, t, dtype, e->ndim, e->shape, &error))
      g_error ("%s", error->message);
    if (!check_values)
      continue;
    g_autofree float *v = ppx_st_load_f32 (st, e->name, e->ndim, e->shape, &error);
    g_assert_no_error (error);
    gint64 n = ppx_st_numel (t);
    double sum = 0, sum2 = 0, min = INFINITY, max = -INFINITY;
    for (gint64 k = 0; k < n; k++) {
      if (!isfinite (v[k]))
        g_error ("%s: '%s'[%" G_GINT64_FORMAT "] is not finite", path, e->name, k);
      sum += v[k];
      sum2 += (double) v[k] * v[k];
      min = MIN (min, v[k]);
      max = MAX (max, v[k]);
    }
    double mean = sum / (double) n, std = sqrt (MAX (sum2 / (double) n - mean * mean, 0));
    if (g_str_has_suffix (e->name, "._initialized") || g_str_has_suffix (e->name, ".cluster_usage")) {
      g_assert_cmpfloat (min, ==, 1.0);
      g_assert_cmpfloat (max, ==, 1.0);
    } else if (g_str_has_suffix (e->name, ".alpha") || g_str_has_suffix (e->name, "norm1.weight") ||
               g_str_has_suffix (e->name, "norm2.weight")) {
      g_assert_cmpfloat (min, >, 0.9);
      g_assert_cmpfloat (max, <, 1.1);
    } else if (strstr (e->name, "layer_scale_")) {
      g_assert_cmpfloat (min, >=, 0.0099);
      g_assert_cmpfloat (max, <=, 0.101);
    } else if (g_str_has_suffix (e->name, ".bias")) {
      g_assert_cmpfloat (MAX (fabs (min), fabs (max)), <=, 0.01);
    } else if (g_str_has_suffix (e->name, ".embedding_sum")) {
      g_assert_cmpfloat (fabs (mean), <, 0.1);
      g_assert_cmpfloat (std, >, 0.8);
      g_assert_cmpfloat (std, <, 1.2);
    } else {
      /* Weights: centred, spread out, and bounded by 1/sqrt(fan_in)-style scales. */
      g_assert_cmpfloat (std, >, 0.0);
      g_assert_cmpfloat (max, >, min);
      g_assert_cmpfloat (fabs (mean), <, 5 * std / sqrt ((double) n) + 1e-3);
      g_assert_cmpfloat (max, <=, 1.0);
    }
  }
  ppx_st_close (st);
}

static void
test_tiny (void)
{
  const char *seed7[] = {"--preset", "tiny", "--seed", "7", NULL};
  const char *seed8[] = {"--seed", "8", NULL};
  g_autofree char *a = run_tool ("tiny-a", seed7), *b = run_tool ("tiny-b", seed7), *c = run_tool ("tiny-c", seed8);

  PpxConfig cfg;
  g_autoptr (GError) error = NULL;
  g_assert_true (ppx_config_load_dir (&cfg, a, &error));
  g_assert_no_error (error);
  g_assert_cmpint (cfg.lm.dim, ==, 64);
  g_assert_cmpint (cfg.lm.ffn_hidden, ==, 176);
  g_assert_cmpint (cfg.lm.depformer_ffn_hidden, ==, 88);
  g_assert_cmpint (cfg.mimi.dimension, ==, 32);
  g_autoptr (GPtrArray) lm = ppx_manifest_lm (&cfg.lm);
  g_autoptr (GPtrArray) mimi = ppx_manifest_mimi (&cfg.mimi);
  check_checkpoint (a, LM_FILE, lm, PPX_DTYPE_BF16, TRUE);
  check_checkpoint (a, MIMI_FILE, mimi, PPX_DTYPE_F32, TRUE);

  g_assert_true (same_file (a, b, LM_FILE));
  g_assert_true (same_file (a, b, MIMI_FILE));
  g_assert_true (same_file (a, b, "config.json"));
  g_assert_false (same_file (a, c, LM_FILE));
  g_assert_false (same_file (a, c, MIMI_FILE));
  ppx_test_remove_tree (a);
  ppx_test_remove_tree (b);
  ppx_test_remove_tree (c);
}

static void
test_partial_and_config (void)
{
  g_autofree char *cfg_path = g_build_filename (tmp_root, "override.json", NULL);
  g_autoptr (GError) error = NULL;
  g_assert_true (g_file_set_contents (cfg_path, "{\"lm\": {\"num_layers\": 1, \"dep_q\": 8}}", -1, &error));
  const char *lm_only[] = {"--lm-only", "--config", cfg_path, NULL};
  const char *mimi_only[] = {"--mimi-only", NULL};
  g_autofree char *l = run_tool ("lm-only", lm_only), *m = run_tool ("mimi-only", mimi_only);
  g_autofree char *l_mimi = g_build_filename (l, MIMI_FILE, NULL), *m_lm = g_build_filename (m, LM_FILE, NULL);
  g_assert_false (g_file_test (l_mimi, G_FILE_TEST_EXISTS));
  g_assert_false (g_file_test (m_lm, G_FILE_TEST_EXISTS));

  PpxConfig cfg;
  g_assert_true (ppx_config_load_dir (&cfg, l, &error));
  g_assert_cmpint (cfg.lm.num_layers, ==, 1);
  g_assert_cmpint (cfg.lm.dep_q, ==, 8);
  g_assert_cmpint (cfg.lm.dim, ==, 64); /* the override applies over the tiny preset */
  g_autoptr (GPtrArray) manifest = ppx_manifest_lm (&cfg.lm);
  check_checkpoint (l, LM_FILE, manifest, PPX_DTYPE_BF16, FALSE);
  ppx_test_remove_tree (l);
  ppx_test_remove_tree (m);
  g_unlink (cfg_path);
}

static void
test_bad_arguments (void)
{
  const char *tool = g_getenv ("PPX_MAKE_MODEL");
  if (!tool)
    tool = PPX_BUILD_ROOT "/tools/personaplex-make-model";
  g_autofree char *dir = g_build_filename (tmp_root, "bad", NULL);
  g_autofree char *missing = g_build_filename (tmp_root, "missing.json", NULL);
  const char *cases[][6] = {
    {tool, NULL},
    {tool, "--output-dir", dir, "--preset", "huge", NULL},
    {tool, "--output-dir", dir, "--config", missing, NULL},
    {tool, "--output-dir", dir, "--lm-only", "--mimi-only", NULL},
  };
  const char *expect[] = {"--output-dir is required", "unknown preset 'huge'", missing, "excludes"};
  for (guint i = 0; i < G_N_ELEMENTS (cases); i++) {
    g_autofree char *err_text = NULL;
    int status = 0;
    g_autoptr (GError) error = NULL;
    g_assert_true (g_spawn_sync (NULL, (char **) cases[i], NULL, G_SPAWN_STDOUT_TO_DEV_NULL, NULL, NULL, NULL,
                                 &err_text, &status, &error));
    g_assert_false (g_spawn_check_wait_status (status, NULL));
    g_assert_nonnull (strstr (err_text, expect[i]));
  }
  g_assert_false (g_file_test (dir, G_FILE_TEST_EXISTS));
}

static void
test_full_mimi (void)
{
  const char *args[] = {"--preset", "full", "--mimi-only", "--seed", "1", NULL};
  g_autofree char *dir = run_tool ("full-mimi", args);
  PpxConfig cfg;
  g_autoptr (GError) error = NULL;
  g_assert_true (ppx_config_load_dir (&cfg, dir, &error));
  g_assert_cmpint (cfg.lm.dim, ==, 4096);
  g_autoptr (GPtrArray) mimi = ppx_manifest_mimi (&cfg.mimi);
  g_assert_cmpuint (mimi->len, ==, 318);
  check_checkpoint (dir, MIMI_FILE, mimi, PPX_DTYPE_F32, TRUE);
  /* 96,151,393 parameters in f32 (docs/personaplex-arch.md section 0), plus the header. */
  g_autofree char *path = g_build_filename (dir, MIMI_FILE, NULL);
  GStatBuf sb;
  g_assert_cmpint (g_stat (path, &sb), ==, 0);
  g_assert_cmpint ((gint64) sb.st_size, >, (gint64) 96151393 * 4);
  g_assert_cmpint ((gint64) sb.st_size, <, (gint64) 96151393 * 4 + 65536);
  ppx_test_remove_tree (dir);
}

/* Progress on a terminal (issue 17, defect 9): for each file, tensor i of N and MB/s on stderr when it is a
 * terminal; nothing of it otherwise. */
static void
test_progress (void)
{
  const char *tool = g_getenv ("PPX_MAKE_MODEL") ? g_getenv ("PPX_MAKE_MODEL")
                                                  : PPX_BUILD_ROOT "/tools/personaplex-make-model";
  g_autofree char *dir = g_build_filename (tmp_root, "progress", NULL), *out = NULL;
  const char *argv[] = {tool, "--output-dir", dir, "--preset", "tiny", NULL};
  g_assert_cmpint (ppx_test_run_on_terminal (argv, &out), ==, 0);
  g_test_message ("on a terminal:\n%s", out);
  PpxConfig cfg;
  g_autoptr (GError) error = NULL;
  g_assert_true (ppx_config_load_dir (&cfg, dir, &error));
  g_autoptr (GPtrArray) lm = ppx_manifest_lm (&cfg.lm);
  g_autofree char *last = g_strdup_printf ("%s: tensor %u of %u", LM_FILE, lm->len, lm->len);
  g_assert_nonnull (strstr (out, LM_FILE ": tensor 1 of"));
  g_assert_nonnull (strstr (out, last));
  g_assert_nonnull (strstr (out, MIMI_FILE ": tensor 1 of"));
  g_assert_nonnull (strstr (out, "MB/s"));
  ppx_test_remove_tree (dir);

  g_autofree char *err_text = NULL;
  g_autofree char *dir2 = g_build_filename (tmp_root, "progress-pipe", NULL);
  const char *argv2[] = {tool, "--output-dir", dir2, "--preset", "tiny", NULL};
  int status = 0;
  g_assert_true (g_spawn_sync (NULL, (char **) argv2, NULL, G_SPAWN_DEFAULT, NULL, NULL, NULL, &err_text, &status,
                               &error));
  g_assert_true (g_spawn_check_wait_status (status, &error));
  g_assert_null (strstr (err_text, "MB/s"));
  g_assert_null (strstr (err_text, "tensor 1 of"));
  ppx_test_remove_tree (dir2);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_autoptr (GError) error = NULL;
  tmp_root = g_dir_make_tmp ("ppx-test-make-model-XXXXXX", &error);
  g_assert_no_error (error);
  if (argc > 1 && strcmp (argv[1], "full-mimi") == 0) {
    g_test_add_func ("/make-model/full-mimi", test_full_mimi);
  } else {
    g_test_add_func ("/make-model/tiny", test_tiny);
    g_test_add_func ("/make-model/lm-only-mimi-only-config", test_partial_and_config);
    g_test_add_func ("/make-model/bad-arguments", test_bad_arguments);
    g_test_add_func ("/make-model/progress", test_progress);
  }
  int rc = g_test_run ();
  ppx_test_remove_tree (tmp_root);
  g_free (tmp_root);
  return rc;
}
