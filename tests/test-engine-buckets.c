/* The engine's batch-size buckets (docs/engine.md, "The GPU tick") on the CPU: a tick of every active
 * session padded to its bucket (ppx_engine_bucket_rows; extra rows on free slots and free Mimi rows, results discarded,
 * a fixed number of depformer steps) must give every session exactly the tokens and PCM of the unpadded
 * tick (on the CPU a row's arithmetic does not depend on the batch), while sessions miss ticks, join (onto
 * the slot and row padding used before) and leave; and a session's prompts running while others tick
 * (its slot taken) must not be disturbed by padding. A ready session that does not tick (a server's model keeper)
 * holds no Mimi row: every tick of the others is padded, and every session, the idle one from its first tick
 * on, equals its one-session run. The golden tiny model, greedy and sampled sessions. */
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
    sched[i] = (PpxSched){0, -1, 0, 0};
  for (int n = 1; n <= 5; n++)
    check (n, 8, sched, 24);
  check (3, 3, sched, 20); /* max_sessions caps the bucket at 3: bucketed, no padding rows */
}

static void
test_churn (void)
{
  PpxSched sched[6] = {{0, -1, 5, 0}, {0, 19, 0, 0}, {0, -1, 0, 0}, {6, -1, 0, 0}, {9, 25, 7, 0}, {14, -1, 0, 0}};
  check (6, 8, sched, 34); /* joins on slots and rows that padding used; rows move as sessions leave */
  check (5, 6, sched, 30);
}

/* The bucket rule (ppx_engine_bucket_rows): powers of two to PPX_ENGINE_BUCKET_POW2_MAX rows, then multiples of
 * PPX_ENGINE_BUCKET_STEP, at most the slots; never fewer rows than the tick has, never more than a step of
 * padding past the powers of two (a tick of 65 rows ran 128 before: 63 rows of padding on the GPU); and the
 * engine's ticks take it (ppx_engine_tick_rows, as many free slots as the bucket needs). */
static void
test_rule (void)
{
  static const int want[][3] = {{1, 154, 1},   {2, 154, 2},   {3, 154, 4},   {17, 154, 32}, {32, 154, 32},
                                {33, 154, 40}, {64, 154, 64}, {65, 154, 72}, {80, 89, 80},  {81, 89, 88},
                                {88, 89, 88},  {89, 89, 89},  {129, 154, 136}, {153, 154, 154}, {5, 3, 3}};
  for (guint i = 0; i < G_N_ELEMENTS (want); i++)
    g_assert_cmpint (ppx_engine_bucket_rows (want[i][0], want[i][1]), ==, want[i][2]);
  for (int slots = 1; slots <= 200; slots += 7)
    for (int n = 1; n <= slots; n++) {
      const int b = ppx_engine_bucket_rows (n, slots);
      g_assert_cmpint (b, >=, n);
      g_assert_cmpint (b, <=, slots);
      g_assert_cmpint (b, >=, ppx_engine_bucket_rows (n - 1 > 0 ? n - 1 : 1, slots)); /* grows with n */
      if (n > PPX_ENGINE_BUCKET_POW2_MAX)
        g_assert_cmpint (b - n, <, PPX_ENGINE_BUCKET_STEP);
    }
  g_autoptr (GError) err = NULL;
  PpxEngineParams ep;
  ppx_engine_params_init (&ep);
  ep.max_sessions = 48;
  PpxEngine *e = ppx_engine_new (model, &ep, &err);
  g_assert_no_error (err);
  ppx_engine_force_buckets (e, TRUE);
  g_assert_cmpint (ppx_engine_tick_rows (e, 33), ==, 40);
  g_assert_cmpint (ppx_engine_tick_rows (e, 41), ==, 48);
  g_assert_cmpint (ppx_engine_tick_rows (e, 20), ==, 32);
  ppx_engine_unref (e);
}

/* ---- a ready session that does not tick (a server's model keeper) ---- */

typedef struct {
  int idle, start; /* the idle session, and its first tick */
  int n;           /* sessions of the schedule */
  guint64 padded;  /* padded ticks so far */
} IdleWatch;

/* After each tick: the idle session holds no Mimi row, so every tick of all the others is a tick of every row,
 * padded to its bucket (the first tick of a session runs unpadded: its codec has no frame yet). */
static void
watch_idle (PpxEngine *e, int t, void *data)
{
  IdleWatch *w = data;
  PpxEngineTickStats st;
  ppx_engine_tick_stats (e, &st);
  g_assert_cmpint (ppx_engine_active_sessions (e), ==, w->n); /* ready, with a row or not */
  g_mutex_lock (&e->lock);
  const int rows = e->n_rows;
  g_mutex_unlock (&e->lock);
  const int ticking = t < w->start ? w->n - 1 : w->n;
  g_assert_cmpint (rows, ==, ticking);
  const gboolean first = t == 0 || t == w->start; /* a fresh row: unpadded */
  g_assert_cmpuint (st.padded_ticks, ==, w->padded + !first);
  g_assert_cmpint (st.last_rows, ==, first ? ticking : ppx_engine_tick_rows (e, ticking));
  w->padded = st.padded_ticks;
}

/* The schedule's session i on an engine of its own (ppx_session_new), for its frames. */
static PpxSchedOut
run_alone (int i, int frames)
{
  g_autoptr (GError) err = NULL;
  PpxSessionParams p;
  session_params (i, &p);
  PpxSession *s = ppx_session_new (model, &p, &err);
  g_assert_no_error (err);
  PpxSchedOut o = {frames, g_new (int, (gsize) frames * 17), g_new (float, (gsize) frames * fs)};
  g_autofree float *in = g_new (float, fs);
  for (int k = 0; k < frames; k++) {
    PpxFrameResult res;
    input_frame (i, k, in);
    g_assert_true (ppx_session_step (s, in, o.pcm + (gsize) k * fs, &res, &err));
    g_assert_no_error (err);
    memcpy (o.tokens + (gsize) k * 17, res.tokens, sizeof res.tokens);
  }
  ppx_session_free (s);
  return o;
}

/* Session `idle` of n is made ready at tick 0 and ticks from tick `start` on (never when start >= ticks); the
 * others tick from tick 0. Every tick of the others while it idles is padded; every session's tokens and PCM
 * equal its own one-session run, the idle one's from its first tick too. */
static void
check_idle (int n, int idle, int start, int ticks, int slots)
{
  g_autoptr (GError) err = NULL;
  PpxSched sched[PPX_SCHED_MAX];
  for (int i = 0; i < n; i++)
    sched[i] = (PpxSched){0, -1, 0, i == idle ? start : 0};
  PpxEngineParams ep;
  ppx_engine_params_init (&ep);
  ep.max_sessions = slots;
  PpxEngine *e = ppx_engine_new (model, &ep, &err);
  g_assert_no_error (err);
  ppx_engine_force_buckets (e, TRUE);
  IdleWatch w = {idle, start, n, 0};
  const PpxSchedHooks hooks = {session_params, input_frame, watch_idle, &w};
  PpxSchedOut outs[PPX_SCHED_MAX];
  ppx_sched_run (e, n, sched, ticks, fs, &hooks, outs);
  PpxEngineTickStats st;
  ppx_engine_tick_stats (e, &st);
  g_printerr ("  N = %d, session %d idle until tick %d: %" G_GUINT64_FORMAT " ticks, %" G_GUINT64_FORMAT
              " padded to a bucket\n", n, idle, start, st.ticks, st.padded_ticks);
  ppx_engine_unref (e);
  for (int i = 0; i < n; i++) {
    g_assert_cmpint (outs[i].frames, ==, i == idle ? MAX (ticks - start, 0) : ticks);
    if (outs[i].frames > 0) {
      PpxSchedOut alone = run_alone (i, outs[i].frames);
      for (gsize j = 0; j < (gsize) alone.frames * 17; j++)
        g_assert_cmpint (outs[i].tokens[j], ==, alone.tokens[j]);
      for (gsize j = 0; j < (gsize) alone.frames * fs; j++)
        g_assert_cmpfloat (outs[i].pcm[j], ==, alone.pcm[j]);
      ppx_sched_out_clear (&alone);
    }
    ppx_sched_out_clear (&outs[i]);
  }
}

static void
test_idle_ready (void)
{
  check_idle (4, 0, 1000, 20, 8); /* a keeper: never ticks */
  check_idle (4, 2, 12, 30, 8);   /* ticks from tick 12 on: takes the row after the others' */
  check_idle (2, 1, 9, 24, 8);
  /* every slot taken (a server at --max-sessions: the keeper's slot is the engine's last): 3 ticking on 4 slots,
   * bucket 4, no free slot for its padding row: padded as far as the slots go, 3 rows */
  check_idle (4, 0, 1000, 16, 4);
  check_idle (6, 5, 1000, 16, 6);
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
  g_test_add_func ("/engine-buckets/rule", test_rule);
  g_test_add_func ("/engine-buckets/steady", test_steady);
  g_test_add_func ("/engine-buckets/churn", test_churn);
  g_test_add_func ("/engine-buckets/idle-ready", test_idle_ready);
  int rc = g_test_run ();
  ppx_model_unref (model);
  golden_model_teardown (&G);
  return rc;
}
