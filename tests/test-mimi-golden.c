/* Mimi against the reference: streaming encode of the golden user audio reproduces the codes exactly
 * and the first latents to 1e-4 relative; streaming decode of those codes reproduces the PCM to 1e-4
 * max abs. Config from golden.json; nothing here depends on the tiny dimensions. */
#include <math.h>

#include "config.h"
#include "mimi.h"
#include "test-util.h"

static PpxSafetensors *golden;
static PpxConfig cfg;
static PpxBackend *be;
static PpxMimi *mimi;

static const PpxStTensor *
need (const char *name)
{
  const PpxStTensor *t = ppx_st_find (golden, name);
  g_assert_nonnull (t);
  return t;
}

static void
test_encode (void)
{
  const PpxStTensor *pcm_t = need ("user_pcm"), *codes_t = need ("mimi_encode_codes"),
                    *lat_t = need ("mimi_encode_latent_first4");
  const int fs = cfg.mimi.frame_size, nq = cfg.mimi.num_codebooks, D = cfg.mimi.dimension;
  const gint64 S = pcm_t->shape[0], T = codes_t->shape[0];
  g_assert_cmpint (T, ==, (S + fs - 1) / fs);
  g_assert_cmpint (codes_t->shape[1], ==, nq);
  g_assert_cmpint (lat_t->shape[1], ==, D);
  const float *pcm = pcm_t->data;
  const int64_t *ref = codes_t->data;
  const float *ref_lat = lat_t->data;
  g_autoptr (GError) err = NULL;
  PpxMimiState *st = ppx_mimi_state_new (mimi, &err);
  g_assert_no_error (err);
  g_autofree float *frame = g_new0 (float, fs);
  g_autofree float *lat = g_new (float, D);
  int mismatches = 0;
  double max_rel = 0.0;
  for (gint64 t = 0; t < T; t++) {
    gint64 n = MIN (fs, S - t * fs);
    memset (frame, 0, fs * sizeof (float));
    memcpy (frame, pcm + t * fs, n * sizeof (float));
    int codes[16];
    ppx_mimi_encode_host (st, frame, codes, lat);
    for (int q = 0; q < nq; q++)
      if (codes[q] != ref[t * nq + q]) {
        if (mismatches < 10)
          g_printerr ("frame %" G_GINT64_FORMAT " codebook %d: got %d expected %" G_GINT64_FORMAT "\n", t, q, codes[q],
                      ref[t * nq + q]);
        mismatches++;
      }
    if (t < lat_t->shape[0]) {
      double num = 0, den = 0;
      for (int d = 0; d < D; d++) {
        double e = lat[d] - ref_lat[t * D + d];
        num = MAX (num, fabs (e));
        den = MAX (den, fabs (ref_lat[t * D + d]));
      }
      max_rel = MAX (max_rel, num / den);
    }
  }
  g_printerr ("encode: %" G_GINT64_FORMAT " frames, %d code mismatches, latent max rel err %.3g\n", T, mismatches,
              max_rel);
  g_assert_cmpint (mismatches, ==, 0);
  g_assert_cmpfloat (max_rel, <, 1e-4);
  ppx_mimi_state_free (st);
}

static void
test_decode (void)
{
  const PpxStTensor *codes_t = need ("mimi_encode_codes"), *pcm_t = need ("mimi_decode_pcm");
  const int fs = cfg.mimi.frame_size, nq = cfg.mimi.num_codebooks;
  const gint64 T = codes_t->shape[0];
  g_assert_cmpint (pcm_t->shape[0], ==, T * fs);
  const int64_t *codes = codes_t->data;
  const float *ref = pcm_t->data;
  g_autoptr (GError) err = NULL;
  PpxMimiState *st = ppx_mimi_state_new (mimi, &err);
  g_assert_no_error (err);
  g_autofree float *out = g_new (float, fs);
  double max_err = 0, max_ref = 0;
  for (gint64 t = 0; t < T; t++) {
    int c[16];
    for (int q = 0; q < nq; q++)
      c[q] = (int) codes[t * nq + q];
    ppx_mimi_decode_host (st, c, out);
    for (int i = 0; i < fs; i++) {
      max_err = MAX (max_err, fabs (out[i] - ref[t * fs + i]));
      max_ref = MAX (max_ref, fabs (ref[t * fs + i]));
    }
  }
  g_printerr ("decode: %" G_GINT64_FORMAT " frames, max abs err %.3g (signal peak %.3g)\n", T, max_err, max_ref);
  g_assert_cmpfloat (max_err, <, 1e-4);
  ppx_mimi_state_free (st);
}

/* A reset state reproduces the same codes (streaming state is fully cleared). */
static void
test_reset (void)
{
  const PpxStTensor *pcm_t = need ("user_pcm"), *codes_t = need ("mimi_encode_codes");
  const int fs = cfg.mimi.frame_size, nq = cfg.mimi.num_codebooks;
  g_autoptr (GError) err = NULL;
  PpxMimiState *st = ppx_mimi_state_new (mimi, &err);
  g_assert_no_error (err);
  int codes[16];
  for (int t = 0; t < 3; t++)
    ppx_mimi_encode_host (st, (const float *) pcm_t->data + t * fs, codes, NULL);
  ppx_mimi_reset (st);
  for (int t = 0; t < 3; t++) {
    ppx_mimi_encode_host (st, (const float *) pcm_t->data + t * fs, codes, NULL);
    for (int q = 0; q < nq; q++)
      g_assert_cmpint (codes[q], ==, ((const int64_t *) codes_t->data)[t * nq + q]);
  }
  ppx_mimi_state_free (st);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  const char *dir = ppx_test_golden_or_skip ();
  g_autoptr (GError) err = NULL;
  g_autofree char *gpath = g_build_filename (dir, "golden.safetensors", NULL);
  g_autofree char *jpath = g_build_filename (dir, "golden.json", NULL);
  g_autofree char *mpath = g_build_filename (dir, "mimi.safetensors", NULL);
  g_autofree char *json = NULL;
  gsize len;
  golden = ppx_st_open (gpath, &err);
  g_assert_no_error (err);
  g_assert_true (g_file_get_contents (jpath, &json, &len, &err));
  ppx_config_default (&cfg);
  g_assert_true (ppx_config_apply_json (&cfg, json, (gssize) len, jpath, &err));
  PpxSafetensors *mst = ppx_st_open (mpath, &err);
  g_assert_no_error (err);
  be = ppx_backend_cpu_new (0, &err);
  mimi = ppx_mimi_load (be, &cfg.mimi, mst, &err);
  g_assert_no_error (err);
  g_test_add_func ("/mimi/golden/encode", test_encode);
  g_test_add_func ("/mimi/golden/decode", test_decode);
  g_test_add_func ("/mimi/golden/reset", test_reset);
  int rc = g_test_run ();
  ppx_mimi_free (mimi);
  ppx_backend_free (be);
  ppx_st_close (mst);
  ppx_st_close (golden);
  return rc;
}
