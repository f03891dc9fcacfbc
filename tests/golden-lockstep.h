/* The golden conversation run in lockstep by a reference session and a variant (other weights or another KV
 * cache format): the variant's first divergence from the golden tokens and its text-logit and PCM error
 * against the reference before it. Shared by test-quant-conversation and test-kv-conversation. */
#ifndef PPX_GOLDEN_LOCKSTEP_H
#define PPX_GOLDEN_LOCKSTEP_H

#include <math.h>

#include "golden-model.h"
#include "personaplex-internal.h"

typedef struct {
  int frames;            /* conversation frames run */
  int first_div;         /* first frame whose tokens differ from the golden ones, -1: none */
  int mismatches;        /* tokens that differ over the run */
  double logit_at_div;   /* text-logit max rel error at the first divergence */
  double logit_before;   /* the largest before it */
  double pcm_before;     /* PCM max abs error / max |reference| before it */
} GoldenLockstep;

/* The golden conversation's session (voice WAV, text prompt, greedy) on model m with KV format kv. */
static inline PpxSession *
golden_lockstep_session (const GoldenModel *G, PpxModel *m, PpxKvFormat kv)
{
  PpxSessionParams p;
  ppx_session_params_init (&p);
  p.voice_prompt = G->voice_wav;
  p.voice_normalize = FALSE;
  p.text_prompt_tokens = G->text_tokens;
  p.n_text_prompt_tokens = G->n_text_tokens;
  p.greedy = TRUE;
  p.kv_format = kv;
  g_autoptr (GError) err = NULL;
  PpxSession *s = ppx_session_new (m, &p, &err);
  g_assert_no_error (err);
  return s;
}

static inline double
golden_lockstep_rel (const float *ref, const float *x, int n)
{
  double num = 0, den = 0;
  for (int i = 0; i < n; i++) {
    num = MAX (num, fabs (ref[i] - x[i]));
    den = MAX (den, fabs (ref[i]));
  }
  return den > 0 ? num / den : num;
}

/* Steps ref and s (frames of fs samples) through the golden user audio; every output of s must be finite. */
static inline void
golden_lockstep_run (const GoldenModel *G, int fs, PpxSession *ref, PpxSession *s, GoldenLockstep *r)
{
  const PpxStTensor *user = ppx_st_find (G->golden, "user_pcm"), *tok = ppx_st_find (G->golden, "lm_run_out_tokens");
  const PpxLmConfig *c = &ppx_session_lmgen (ref)->cfg;
  const int T = (int) tok->shape[0];
  const gint64 S = user->shape[0];
  g_autofree float *in = g_new (float, fs), *o1 = g_new (float, fs), *o2 = g_new (float, fs);
  g_autofree float *l1 = g_new (float, c->text_card), *l2 = g_new (float, c->text_card);
  *r = (GoldenLockstep){.frames = T, .first_div = -1};
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
    const double rel = golden_lockstep_rel (l1, l2, c->text_card);
    int diff = 0;
    for (int k = 0; k < 17; k++)
      diff += r2.tokens[k] != ((const int64_t *) tok->data)[t * 17 + k];
    r->mismatches += diff;
    if (diff && r->first_div < 0) {
      r->first_div = t;
      r->logit_at_div = rel;
    }
    if (r->first_div < 0) {
      r->logit_before = MAX (r->logit_before, rel);
      r->pcm_before = MAX (r->pcm_before, golden_lockstep_rel (o1, o2, fs));
    }
  }
}

/* One line: "NAME: all N frames reproduce ..." or "NAME: first divergence at ...". */
static inline void
golden_lockstep_print (const char *name, const GoldenLockstep *r)
{
  if (r->first_div < 0)
    g_printerr ("%s: all %d frames reproduce the golden tokens; text-logit max rel error %.3g, PCM %.3g\n", name,
                r->frames, r->logit_before, r->pcm_before);
  else
    g_printerr ("%s: first divergence at conversation step %d (text-logit rel error there %.3g, max before %.3g, "
                "PCM before %.3g); %d of %d tokens differ over the run\n", name, r->first_div, r->logit_at_div,
                r->logit_before, r->pcm_before, r->mismatches, r->frames * 17);
}

#endif
