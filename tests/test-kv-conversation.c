/* The golden conversation with the temporal KV cache stored in bf16 and in fp8 (e4m3), stepped in
 * lockstep with the f32-cache run on the same weights: reports the first divergence from the golden
 * tokens and the text-logit error before it (the figures quoted in docs/quantization.md, "KV cache").
 * Every run must stay finite and end to end; the logit error before the first divergence is bounded. */
#include <math.h>

#include "golden-model.h"
#include "personaplex-internal.h"

static GoldenModel G;

static PpxSession *
open_session (PpxModel *m, PpxKvFormat kv)
{
  PpxSessionParams p;
  ppx_session_params_init (&p);
  p.voice_prompt = G.voice_wav;
  p.voice_normalize = FALSE;
  p.text_prompt_tokens = G.text_tokens;
  p.n_text_prompt_tokens = G.n_text_tokens;
  p.greedy = TRUE;
  p.kv_format = kv;
  g_autoptr (GError) err = NULL;
  PpxSession *s = ppx_session_new (m, &p, &err);
  g_assert_no_error (err);
  return s;
}

static double
rel_err (const float *ref, const float *x, int n)
{
  double num = 0, den = 0;
  for (int i = 0; i < n; i++) {
    num = MAX (num, fabs (ref[i] - x[i]));
    den = MAX (den, fabs (ref[i]));
  }
  return den > 0 ? num / den : num;
}

static void
check (PpxKvFormat kv, double bound)
{
  PpxModelParams mp;
  ppx_model_params_init (&mp);
  mp.model_dir = G.dir;
  mp.backend = PPX_BACKEND_CPU;
  g_autoptr (GError) err = NULL;
  PpxModel *m = ppx_model_load (&mp, &err);
  g_assert_no_error (err);
  PpxSession *ref = open_session (m, PPX_KV_F32), *s = open_session (m, kv);
  const PpxStTensor *user = ppx_st_find (G.golden, "user_pcm"), *tok = ppx_st_find (G.golden, "lm_run_out_tokens");
  const int fs = ppx_model_frame_size (m), T = (int) tok->shape[0];
  const gint64 S = user->shape[0];
  g_autofree float *in = g_new (float, fs), *o1 = g_new (float, fs), *o2 = g_new (float, fs);
  const PpxLmConfig *c = &ppx_session_lmgen (ref)->cfg;
  g_autofree float *l1 = g_new (float, c->text_card), *l2 = g_new (float, c->text_card);
  int first_div = -1, mismatches = 0;
  double at_div = 0, max_before = 0, pcm_before = 0;
  for (int t = 0; t < T; t++) {
    gint64 n = MIN (fs, S - (gint64) t * fs);
    memset (in, 0, fs * sizeof (float));
    if (n > 0)
      memcpy (in, (const float *) user->data + (gsize) t * fs, n * sizeof (float));
    PpxFrameResult r1, r2;
    g_assert_true (ppx_session_step (ref, in, o1, &r1, NULL));
    g_assert_true (ppx_session_step (s, in, o2, &r2, NULL));
    for (int i = 0; i < fs; i++)
      g_assert_true (isfinite (o2[i]));
    ppx_session_text_logits (ref, l1);
    ppx_session_text_logits (s, l2);
    const double rel = rel_err (l1, l2, c->text_card);
    int diff = 0;
    for (int k = 0; k < 17; k++)
      diff += r2.tokens[k] != ((const int64_t *) tok->data)[t * 17 + k];
    mismatches += diff;
    if (diff && first_div < 0) {
      first_div = t;
      at_div = rel;
    }
    if (first_div < 0) {
      max_before = MAX (max_before, rel);
      pcm_before = MAX (pcm_before, rel_err (o1, o2, fs));
    }
  }
  if (first_div < 0)
    g_printerr ("kv %s: all %d frames reproduce the golden tokens; text-logit max rel error %.3g, PCM %.3g\n",
                ppx_kv_format_name (kv), T, max_before, pcm_before);
  else
    g_printerr ("kv %s: first divergence at conversation step %d (text-logit rel error there %.3g, max before %.3g, "
                "PCM before %.3g); %d of %d tokens differ over the run\n", ppx_kv_format_name (kv), first_div, at_div,
                max_before, pcm_before, mismatches, T * 17);
  g_assert_cmpfloat (max_before, <, bound);
  ppx_session_free (ref);
  ppx_session_free (s);
  ppx_model_unref (m);
}

static void
test_bf16 (void)
{
  check (PPX_KV_BF16, 0.003);
}

static void
test_fp8 (void)
{
  check (PPX_KV_FP8, 0.05);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  golden_model_setup (&G);
  g_test_add_func ("/kv/conversation/bf16", test_bf16);
  g_test_add_func ("/kv/conversation/fp8", test_fp8);
  int rc = g_test_run ();
  golden_model_teardown (&G);
  return rc;
}
