/* The engine's batch-size buckets (docs/engine.md, "The GPU tick") on the CPU: a tick of every active
 * session padded to the next power of two (extra rows on free slots and free Mimi rows, results discarded,
 * a fixed number of depformer steps) must give every session exactly the tokens and PCM of the unpadded
 * tick (on the CPU a row's arithmetic does not depend on the batch), while sessions miss ticks, join (onto
 * the slot and row padding used before) and leave; and a session's prompts running while others tick
 * (its slot taken) must not be disturbed by padding. The golden tiny model, greedy and sampled sessions. */
#include <math.h>

#include "engine-internal.h"
#include "engine-schedule.h"
#include "golden-model.h"

static GoldenModel G;
static PpxModel *model;
static const float *user_pcm;
static gsize user_n;
static int fs;

static void
session_params (int i, PpxSessionParams *p)
{
  golden_session_params (&G, i, FALSE, p);
}

static void
input_frame (int i, int k, float *pcm)
{
  for (int j = 0; j < fs; j++)
    pcm[j] = user_pcm[((gsize) i * 7919 + (gsize) k * fs + j) % user_n];
}

static void
run (gboolean buckets, int n, int max_sessions, const PpxSched *sched, int ticks, PpxSchedOut *outs,
     PpxEngineTickStats *st)
{
  g_autoptr (GError) err = NULL;
  PpxEngineParams ep;
  ppx_engine_params_init (&ep);
  ep.max_sessions = max_sessions;
  PpxEngine *e = ppx_engine_new (model, &ep, &err);
  g_assert_no_error (err);
  ppx_engine_force_buckets (e, buckets);
  const PpxSchedHooks hooks = {session_params, input_frame, NULL, NULL};
  ppx_sched_run (e, n, sched, ticks, fs, &hooks, outs);
  ppx_engine_tick_stats (e, st);
  ppx_engine_unref (e);
}

static void
check (int n, int max_sessions, const PpxSched *sched, int ticks)
{
  PpxSchedOut a[8], b[8];
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
    ppx_sched_out_clear (&a[i]);
    ppx_sched_out_clear (&b[i]);
  }
  g_assert_cmpuint (sa.padded_ticks, >, 0);
  g_assert_cmpuint (sb.padded_ticks, ==, 0);
  g_assert_cmpuint (sa.graph_ticks, ==, 0); /* the CPU records no graphs */
}

static void
test_steady (void)
{
  PpxSched sched[8];
  for (int i = 0; i < 8; i++)
    sched[i] = (PpxSched){0, -1, 0};
  for (int n = 1; n <= 5; n++)
    check (n, 8, sched, 24);
  check (3, 3, sched, 20); /* max_sessions caps the bucket at 3: bucketed, no padding rows */
}

static void
test_churn (void)
{
  PpxSched sched[6] = {{0, -1, 5}, {0, 19, 0}, {0, -1, 0}, {6, -1, 0}, {9, 25, 7}, {14, -1, 0}};
  check (6, 8, sched, 34); /* joins on slots and rows that padding used; rows move as sessions leave */
  check (5, 6, sched, 30);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  golden_model_setup (&G);
  model = golden_model_load (&G, PPX_BACKEND_CPU);
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
