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
  PpxModel *model = golden_model_load (&G, PPX_BACKEND_CUDA);
  g_assert_cmpstr (ppx_model_backend_name (model), ==, "cuda");
  PpxSessionParams p;
  golden_run_params (&G, G.voice_wav, &p);
  PpxSession *s = ppx_session_new (model, &p, &err);
  g_assert_no_error (err);
  g_assert_cmpint (ppx_session_lmgen (s)->offset, ==, G.prompt_offset);
  ppx_session_lmgen (s)->full_depformer = TRUE; /* every depformer step's logits, to compare them all */
  gint64 t0 = g_get_monotonic_time ();
  GoldenRun r = golden_run_conversation (&G, s, ppx_model_frame_size (model), "lm_run_out_tokens", "lm_run_pcm", TRUE,
                                     NULL);
  double secs = (g_get_monotonic_time () - t0) / 1e6;
  g_printerr ("  golden on %s: %d frames in %.2f s, %d token mismatches, pcm max abs err %.3g, text logits rel %.3g, "
              "audio logits rel %.3g\n",
              ppx_backend_device_name (gpu), r.frames, secs, r.token_mismatches, r.pcm_err, r.text_rel,
              r.audio_rel);
  g_assert_cmpint (r.token_mismatches, ==, 0);
  g_assert_cmpfloat (r.pcm_err, <, 1e-4);
  g_assert_cmpfloat (r.text_rel, <, 1e-3);
  g_assert_cmpfloat (r.audio_rel, <, 1e-3);
  ppx_session_free (s);
  ppx_model_unref (model);
  golden_model_teardown (&G);
}
