/* The golden conversation end to end on the GPU: tokens exactly, PCM and logits within bounds. */
#include "cuda-test.h"
#include "golden-model.h"

/* ---- end to end: the golden conversation on the GPU ---- */

void
test_golden (void)
{
  if (!ppx_test_golden_dir ()) {
    g_test_skip ("golden data not found (set PPX_GOLDEN_DIR)");
    return;
  }
  GoldenModel G;
  golden_model_setup (&G);
  g_autoptr (GError) err = NULL;
  PpxModelParams mp;
  ppx_model_params_init (&mp);
  mp.model_dir = G.dir;
  mp.backend = PPX_BACKEND_CUDA;
  PpxModel *model = ppx_model_load (&mp, &err);
  g_assert_no_error (err);
  g_assert_cmpstr (ppx_model_backend_name (model), ==, "cuda");
  PpxSessionParams p;
  ppx_session_params_init (&p);
  p.voice_prompt = G.voice_wav;
  p.voice_normalize = FALSE;
  p.text_prompt_tokens = G.text_tokens;
  p.n_text_prompt_tokens = G.n_text_tokens;
  p.greedy = TRUE;
  p.kv_format = PPX_KV_F32; /* the golden reference computes in f32 */
  PpxSession *s = ppx_session_new (model, &p, &err);
  g_assert_no_error (err);
  g_assert_cmpint (ppx_session_lmgen (s)->offset, ==, G.prompt_offset);
  ppx_session_lmgen (s)->full_depformer = TRUE; /* every depformer step's logits, to compare them all */
  const PpxStTensor *user = ppx_st_find (G.golden, "user_pcm"), *tok = ppx_st_find (G.golden, "lm_run_out_tokens"),
                    *pcm = ppx_st_find (G.golden, "lm_run_pcm"), *tl = ppx_st_find (G.golden, "lm_run_text_logits"),
                    *al = ppx_st_find (G.golden, "lm_run_audio_logits");
  g_assert_true (user && tok && pcm && tl && al);
  const int fs = ppx_model_frame_size (model), T = (int) tok->shape[0], V = (int) tl->shape[1];
  const int card = (int) al->shape[2], nsteps = (int) al->shape[1];
  const gint64 S = user->shape[0];
  g_autofree float *in = g_new (float, fs), *out = g_new (float, fs), *logit = g_new (float, MAX (V, card));
  int mismatches = 0;
  double pcm_err = 0, text_rel = 0, audio_rel = 0;
  gint64 t0 = g_get_monotonic_time ();
  for (int t = 0; t < T; t++) {
    gint64 n = MIN (fs, S - (gint64) t * fs);
    memset (in, 0, fs * sizeof (float));
    if (n > 0)
      memcpy (in, (const float *) user->data + (gsize) t * fs, n * sizeof (float));
    PpxFrameResult fr;
    g_assert_true (ppx_session_step (s, in, out, &fr, &err));
    g_assert_no_error (err);
    for (int k = 0; k < 17; k++)
      if (fr.tokens[k] != ((const int64_t *) tok->data)[t * 17 + k]) {
        if (mismatches < 8)
          g_printerr ("frame %d stream %d: got %d expected %" G_GINT64_FORMAT "\n", t, k, fr.tokens[k],
                      ((const int64_t *) tok->data)[t * 17 + k]);
        mismatches++;
      }
    for (int i = 0; i < fs; i++)
      pcm_err = MAX (pcm_err, fabs (out[i] - ((const float *) pcm->data)[(gsize) t * fs + i]));
    if (t < tl->shape[0]) {
      ppx_session_text_logits (s, logit);
      text_rel = MAX (text_rel, golden_rel_err (logit, (const float *) tl->data + (gsize) t * V, V));
      for (int st = 0; st < nsteps; st++) {
        ppx_session_audio_logits (s, st, logit);
        audio_rel = MAX (audio_rel, golden_rel_err (logit, (const float *) al->data + ((gsize) t * nsteps + st) * card, card));
      }
    }
  }
  double secs = (g_get_monotonic_time () - t0) / 1e6;
  g_printerr ("  golden on %s: %d frames in %.2f s, %d token mismatches, pcm max abs err %.3g, text logits rel %.3g, "
              "audio logits rel %.3g\n",
              ppx_backend_cuda_device_name (gpu), T, secs, mismatches, pcm_err, text_rel, audio_rel);
  g_assert_cmpint (mismatches, ==, 0);
  g_assert_cmpfloat (pcm_err, <, 1e-4);
  g_assert_cmpfloat (text_rel, <, 1e-3);
  g_assert_cmpfloat (audio_rel, <, 1e-3);
  ppx_session_free (s);
  ppx_model_unref (model);
  golden_model_teardown (&G);
}
