/* The engine's batch-size buckets (docs/engine.md, "The GPU tick") on the CPU: a tick of every active
 * session padded to the next power of two (extra rows on free slots and free Mimi rows, results discarded,
 * a fixed number of depformer steps) must give every session exactly the tokens and PCM of the unpadded
 * tick (on the CPU a row's arithmetic does not depend on the batch), while sessions miss ticks, join (onto
 * the slot and row padding used before) and leave; and a session's prompts running while others tick
 * (its slot taken) must not be disturbed by padding. The golden tiny model, greedy and sampled sessions. */
#include <math.h>

#include "engine-internal.h"
#include "golden-model.h"

static GoldenModel G;
static PpxModel *model;
static const float *user_pcm;
static gsize user_n;
static int fs;

typedef struct {
  int join, leave, skip_mod;
} Sched;

typedef struct {
  int frames;
  int *tokens;
  float *pcm;
} Out;

static void
session_params (int i, PpxSessionParams *p)
{
  ppx_session_params_init (p);
  p->voice_prompt = i % 3 == 1 ? G.voice_pt : i % 3 == 2 ? G.voice_wav : NULL;
  p->voice_normalize = FALSE;
  p->text_prompt_tokens = G.text_tokens;
  p->n_text_prompt_tokens = i % 2 ? G.n_text_tokens : MIN (2 + i, G.n_text_tokens);
  p->greedy = i % 2 == 0;
  p->seed = 77 + (guint64) i;
}

static void
run (gboolean buckets, int n, int max_sessions, const Sched *sched, int ticks, Out *outs, PpxEngineTickStats *st)
{
  g_autoptr (GError) err = NULL;
  PpxEngineParams ep;
  ppx_engine_params_init (&ep);
  ep.max_sessions = max_sessions;
  PpxEngine *e = ppx_engine_new (model, &ep, &err);
  g_assert_no_error (err);
  ppx_engine_force_buckets (e, buckets);
  PpxSession *s[8] = {NULL};
  for (int i = 0; i < n; i++)
    outs[i] = (Out){0, g_new (int, (gsize) ticks * 17), g_new (float, (gsize) ticks * fs)};
  float *in = g_new (float, (gsize) n * fs), *out = g_new (float, (gsize) n * fs);
  for (int t = 0; t < ticks; t++) {
    PpxSession *tick[8];
    int who[8], m = 0;
    for (int i = 0; i < n; i++) {
      if (t == sched[i].join) {
        PpxSessionParams p;
        session_params (i, &p);
        s[i] = ppx_engine_session_new (e, &p, &err);
        g_assert_no_error (err);
      }
      if (s[i] && t == sched[i].leave) {
        ppx_session_free (s[i]);
        s[i] = NULL;
      }
      if (!s[i] || (sched[i].skip_mod > 0 && t % sched[i].skip_mod == 2))
        continue;
      tick[m] = s[i];
      who[m++] = i;
    }
    if (m == 0)
      continue;
    const float *ins[8];
    float *outp[8];
    PpxFrameResult res[8];
    for (int j = 0; j < m; j++) {
      for (int k = 0; k < fs; k++)
        in[(gsize) j * fs + k] = user_pcm[((gsize) who[j] * 7919 + (gsize) outs[who[j]].frames * fs + k) % user_n];
      ins[j] = in + (gsize) j * fs;
      outp[j] = out + (gsize) j * fs;
    }
    g_assert_true (ppx_engine_step (e, tick, m, ins, outp, res, &err));
    g_assert_no_error (err);
    for (int j = 0; j < m; j++) {
      Out *o = &outs[who[j]];
      memcpy (o->tokens + (gsize) o->frames * 17, res[j].tokens, sizeof res[j].tokens);
      memcpy (o->pcm + (gsize) o->frames * fs, outp[j], fs * sizeof (float));
      o->frames++;
    }
  }
  ppx_engine_tick_stats (e, st);
  for (int i = 0; i < n; i++)
    ppx_session_free (s[i]);
  ppx_engine_unref (e);
  g_free (in);
  g_free (out);
}

static void
check (int n, int max_sessions, const Sched *sched, int ticks)
{
  Out a[8], b[8];
  PpxEngineTickStats sa, sb;
  run (TRUE, n, max_sessions, sched, ticks, a, &sa);
  run (FALSE, n, max_sessions, sched, ticks, b, &sb);
  g_printerr ("  N = %d of %d slots: %" G_GUINT64_FORMAT " ticks, %" G_GUINT64_FORMAT " padded to a bucket\n", n,
              max_sessions, sa.ticks, sa.padded_ticks);
  for (int i = 0; i < n; i++) {
    g_assert_cmpint (a[i].frames, ==, b[i].frames);
    for (gsize j = 0; j < (gsize) a[i].frames * 17; j++)
      g_assert_cmpint (a[i].tokens[j], ==, b[i].tokens[j]);
    for (gsize j = 0; j < (gsize) a[i].frames * fs; j++)
      g_assert_cmpfloat (a[i].pcm[j], ==, b[i].pcm[j]);
    g_free (a[i].tokens);
    g_free (a[i].pcm);
    g_free (b[i].tokens);
    g_free (b[i].pcm);
  }
  g_assert_cmpuint (sa.padded_ticks, >, 0);
  g_assert_cmpuint (sb.padded_ticks, ==, 0);
  g_assert_cmpuint (sa.graph_ticks, ==, 0); /* the CPU records no graphs */
}

static void
test_steady (void)
{
  Sched sched[8];
  for (int i = 0; i < 8; i++)
    sched[i] = (Sched){0, -1, 0};
  for (int n = 1; n <= 5; n++)
    check (n, 8, sched, 24);
  check (3, 3, sched, 20); /* max_sessions caps the bucket at 3: bucketed, no padding rows */
}

static void
test_churn (void)
{
  Sched sched[6] = {{0, -1, 5}, {0, 19, 0}, {0, -1, 0}, {6, -1, 0}, {9, 25, 7}, {14, -1, 0}};
  check (6, 8, sched, 34); /* joins on slots and rows that padding used; rows move as sessions leave */
  check (5, 6, sched, 30);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  golden_model_setup (&G);
  g_autoptr (GError) err = NULL;
  PpxModelParams mp;
  ppx_model_params_init (&mp);
  mp.model_dir = G.dir;
  mp.backend = PPX_BACKEND_CPU;
  model = ppx_model_load (&mp, &err);
  g_assert_no_error (err);
  fs = ppx_model_frame_size (model);
  const PpxStTensor *u = ppx_st_find (G.golden, "user_pcm");
  user_pcm = (const float *) u->data;
  user_n = (gsize) u->shape[0];
  g_test_add_func ("/engine-buckets/steady", test_steady);
  g_test_add_func ("/engine-buckets/churn", test_churn);
  int rc = g_test_run ();
  ppx_model_unref (model);
  golden_model_teardown (&G);
  return rc;
}
