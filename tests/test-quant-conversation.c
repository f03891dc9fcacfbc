/* The golden conversation with quantized weights (quantized at load), stepped in lockstep with the
 * bf16 run: int8 must reproduce the golden tokens or the report names the first divergence and the
 * logit error there; int4 must run end to end. Prints the report quoted in docs/quantization.md. */
#include <math.h>

#include "golden-model.h"
#include "personaplex-internal.h"

static GoldenModel G;

static PpxSession *
open_session (PpxModel *m)
{
  PpxSessionParams p;
  ppx_session_params_init (&p);
  p.kv_format = PPX_KV_F32; /* the golden reference computes in f32 */
  p.voice_prompt = G.voice_wav;
  p.voice_normalize = FALSE;
  p.text_prompt_tokens = G.text_tokens;
  p.n_text_prompt_tokens = G.n_text_tokens;
  p.greedy = TRUE;
  g_autoptr (GError) err = NULL;
  PpxSession *s = ppx_session_new (m, &p, &err);
  g_assert_no_error (err);
  return s;
}

static PpxModel *
load (PpxQuantization q)
{
  PpxModelParams mp;
  ppx_model_params_init (&mp);
  mp.model_dir = G.dir;
  mp.quantization = q;
  g_autoptr (GError) err = NULL;
  PpxModel *m = ppx_model_load (&mp, &err);
  g_assert_no_error (err);
  return m;
}

static void
check (PpxQuantization q)
{
  PpxModel *ref_m = load (PPX_QUANT_BF16), *q_m = load (q);
  PpxSession *ref = open_session (ref_m), *qs = open_session (q_m);
  const PpxStTensor *user = ppx_st_find (G.golden, "user_pcm"), *tok = ppx_st_find (G.golden, "lm_run_out_tokens");
  const int fs = ppx_model_frame_size (ref_m), T = (int) tok->shape[0];
  const gint64 S = user->shape[0];
  g_autofree float *in = g_new (float, fs), *o1 = g_new (float, fs), *o2 = g_new (float, fs);
  const PpxLmConfig *c = &ppx_session_lmgen (ref)->cfg;
  g_autofree float *l1 = g_new (float, c->text_card), *l2 = g_new (float, c->text_card);
  int first_div = -1, mismatches = 0;
  double logit_err_at_div = 0, max_logit_err_before = 0;
  for (int t = 0; t < T; t++) {
    gint64 n = MIN (fs, S - (gint64) t * fs);
    memset (in, 0, fs * sizeof (float));
    if (n > 0)
      memcpy (in, (const float *) user->data + (gsize) t * fs, n * sizeof (float));
    PpxFrameResult r1, r2;
    g_assert_true (ppx_session_step (ref, in, o1, &r1, NULL));
    g_assert_true (ppx_session_step (qs, in, o2, &r2, NULL));
    for (int i = 0; i < fs; i++)
      g_assert_true (isfinite (o2[i]));
    /* relative error of the text logits at this step (same inputs until the first divergence) */
    ppx_session_text_logits (ref, l1);
    ppx_session_text_logits (qs, l2);
    double num = 0, den = 0;
    for (int i = 0; i < c->text_card; i++) {
      num = MAX (num, fabs (l1[i] - l2[i]));
      den = MAX (den, fabs (l1[i]));
    }
    double rel = num / den;
    int diff = 0;
    for (int k = 0; k < 17; k++)
      diff += r2.tokens[k] != ((const int64_t *) tok->data)[t * 17 + k];
    mismatches += diff;
    if (diff && first_div < 0) {
      first_div = t;
      logit_err_at_div = rel;
    }
    if (first_div < 0)
      max_logit_err_before = MAX (max_logit_err_before, rel);
  }
  const char *name = ppx_model_quantization_name (q_m);
  if (first_div < 0)
    g_printerr ("%s: all %d frames reproduce the golden tokens; text-logit max rel error %.3g\n", name, T,
                max_logit_err_before);
  else
    g_printerr ("%s: first divergence at conversation step %d (text-logit rel error there %.3g, max before %.3g); "
                "%d of %d tokens differ over the run\n", name, first_div, logit_err_at_div, max_logit_err_before,
                mismatches, T * 17);
  g_assert_cmpfloat (max_logit_err_before, <, q == PPX_QUANT_INT8 ? 0.05 : 0.5);
  ppx_session_free (ref);
  ppx_session_free (qs);
  ppx_model_unref (ref_m);
  ppx_model_unref (q_m);
}

static void
test_int8 (void)
{
  check (PPX_QUANT_INT8);
}

static void
test_int4 (void)
{
  check (PPX_QUANT_INT4);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  golden_model_setup (&G);
  g_test_add_func ("/quant/conversation/int8", test_int8);
  g_test_add_func ("/quant/conversation/int4", test_int4);
  int rc = g_test_run ();
  golden_model_teardown (&G);
  return rc;
}
