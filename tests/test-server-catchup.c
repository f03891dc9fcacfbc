/* After a stall, a call's latency comes back (docs/server.md, "After a stall"), measured where a caller sees it:
 * at the client, with the reference web client's player (tools/loadgen/loadgen-playout.c) fed what arrived.
 * The engine's tick is made to cost what a GPU's does (PPX_TICK_EMULATE, docs/testing.md), two calls say 18 s of
 * speech in real time, and one stall comes:
 *   - engine-stall: one tick 700 ms longer, the engine's lock held (PPX_DEBUG_TICK_DELAY, docs/engine.md): what a
 *     GPU hiccup does; the calls' audio waits for the model meanwhile;
 *   - server-stall: the whole server stopped for 700 ms (SIGSTOP): a host that did not schedule it; the audio
 *     waits in the socket, the pages in the pacer.
 * Each call's frame latency (the chat client's, ppx_chat_record_frame_latencies) 3-7 s after the stall must be
 * within 60 ms of the 3 s before it (its p50 over each window), and the player must miss no more than the stall
 * and a re-buffer, and drop no more than it missed (after a stall the stale audio is what the player drops:
 * missed - dropped is the change of its queue). The server runs with --pacing-max-delay 300, so that a pacer that
 * took the stall for jitter (before this test: it held its largest delay, 340 ms, for the next 10 s) shows by far.
 *   - level-step: from a tick on, every tick lasts 65 ms more (the latency steps up for good, as when calls join and
 *     the tick grows): the time pages wait in the pacer (/metrics, personaplex_answer_page_stage_seconds{stage=
 *     "pace"}) 3-8 s after the step must be within 25 ms of the 4 s before it; a pacer that took the step for jitter
 *     held pages as much longer, for 10 s (the step counted twice in the latency).
 *   - some-calls-behind: 6 calls on a loaded tick (64 ms of 80), the client of 2 of them (on a thread of its own)
 *     stops 400 ms and then sends what is due: the late calls' latency 3-7 s after must be within 60 ms of before,
 *     and the others' too. Under load one tick a period steps one frame of every call: without the catch-up ticks
 *     (gstppticker.h, "Behind") the late calls kept the 400 ms for good.
 *   - loaded-stall: 12 calls on a loaded tick (60 ms of 80), the server stopped 300 ms: at most 3 catch-up ticks
 *     after it (4 before the rules of gstppticker.h "After a stall", 1 after, at 23 % CPU pressure; 16-17 vs 2-6 at
 *     20 calls in fleet-live runs), and at most 8 ticks that left a member out.
 * A shared 2-core machine stalls the server and the test for a while now and then: a run that misses the tight
 * bound while the CPU pressure (/proc/pressure/cpu) was over 40 % is taken again, 3 runs at most; looser bounds
 * (latency 150 ms, pacer 45 ms, late calls 200 ms) hold in every run, and fail the old behaviour all the same.
 * PPX_TEST_SERVER_LOG=1 prints some-calls-behind's server log (with GST_DEBUG=personaplexticker:6: every tick). */
#include <gst/gst.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loadgen-stats.h"
#include "server/server-fixture.h"

#define CALLS 2
#define SECONDS 18.0
#define STALL_MS 700
#define STALL_TICK 100      /* the stalled tick (1:1 with frames when the calls share every tick: 8 s in) */
#define STALL_AT_S 6.0      /* server-stall: seconds after the first handshake */
#define MAX_DELAY "300"     /* --pacing-max-delay */
#define STEP_MS 65
#define STEP_TICK 70        /* level-step: the first longer tick (about 6 s in) */

static int
compare_doubles (gconstpointer a, gconstpointer b)
{
  double x = *(const double *) a, y = *(const double *) b;
  return x < y ? -1 : x > y;
}

typedef struct {
  double t_s, value; /* seconds after the first handshake */
} Point;

/* Each answered frame of a call: when the page that completed its input was sent, and its latency (ms). */
static GArray *
frame_series (const PpxChatRecord *r, gint64 t0)
{
  g_autoptr (GArray) lat = ppx_chat_record_frame_latencies (r, PPX_CHAT_FRAME);
  GArray *out = g_array_new (FALSE, FALSE, sizeof (Point));
  guint s = 0;
  for (guint k = 0; k < lat->len; k++) {
    gint64 need = (gint64) (k + 1) * PPX_CHAT_FRAME;
    while (s < r->sent->len && g_array_index (r->sent, PpxChatSent, s).samples < need)
      s++;
    if (s == r->sent->len)
      break;
    Point p = {(g_array_index (r->sent, PpxChatSent, s).time_us - t0) / 1e6, g_array_index (lat, double, k)};
    g_array_append_val (out, p);
  }
  return out;
}

/* The p50 of the values in [from, to) s; NAN when none. */
static double
window_p50 (GArray *points, double from, double to)
{
  g_autoptr (GArray) v = g_array_new (FALSE, FALSE, sizeof (double));
  for (guint i = 0; i < points->len; i++) {
    const Point *p = &g_array_index (points, Point, i);
    if (p->t_s >= from && p->t_s < to)
      g_array_append_val (v, p->value);
  }
  if (v->len < 5)
    return NAN;
  g_array_sort (v, compare_doubles);
  return g_array_index (v, double, v->len / 2);
}

typedef struct {
  double growth_ms;   /* the largest, over the calls, of (p50 after the stall - p50 before) */
  double missed_ms;   /* the most a call's player missed */
  double excess_ms;   /* the most a call's player dropped beyond what it missed */
  double pressure;    /* CPU pressure over the run, % */
} StallRun;

typedef struct {
  FixtureServer *s;
  gboolean stopped;
} Stop;

static void
resume (gpointer data)
{
  Stop *st = data;
  fixture_server_signal (st->s, SIGCONT);
  st->stopped = FALSE;
}

/* n calls to s with the same audio, in real time, each until its handshake. */
static void
start_calls (FixtureServer *s, PpxChatAudio *audio, PpxChatCall **calls, guint n)
{
  for (guint i = 0; i < n; i++)
    calls[i] = fixture_call_new (s, NULL, audio, PPX_CHAT_PACE_REALTIME, TRUE);
  for (guint i = 0; i < n; i++)
    g_assert_true (fixture_call_until_handshake (calls[i], 60000));
}

/* CALLS calls through a stall of the engine's tick (`server` FALSE) or of the whole server. */
static StallRun
run_stall (gboolean server)
{
  StallRun run = {0};
  gint64 p_t0 = g_get_monotonic_time ();
  double p0 = fixture_cpu_pressure_us ();
  g_autofree char *delay = g_strdup_printf ("%d:%d,%d:0", STALL_TICK, STALL_MS, STALL_TICK + 1);
  g_autofree char *delay_env = g_strconcat ("PPX_DEBUG_TICK_DELAY=", delay, NULL);
  const char *env[] = {server ? NULL : delay_env, NULL};
  FixtureServer *s = fixture_server_start_with ((const char *const[]){"--pacing-max-delay", MAX_DELAY, NULL}, env, 0);
  g_autoptr (PpxChatAudio) audio = fixture_speech (0.0, SECONDS);
  PpxChatCall *calls[CALLS];
  start_calls (s, audio, calls, CALLS);
  gint64 t0 = ppx_chat_call_get_record (calls[0])->handshake_us;
  Stop st = {s, FALSE};
  if (server) {
    gint64 at = t0 + (gint64) (STALL_AT_S * G_USEC_PER_SEC);
    while (g_get_monotonic_time () < at)
      g_main_context_iteration (NULL, FALSE) || (g_usleep (1000), TRUE);
    fixture_server_signal (s, SIGSTOP);
    st.stopped = TRUE;
    g_timeout_add_once (STALL_MS, resume, &st);
  }
  g_assert_true (ppx_chat_calls_wait (calls, CALLS, NULL, (guint) (SECONDS * 1000) + 60000));
  g_assert_false (st.stopped);
  for (guint i = 0; i < CALLS; i++) {
    const PpxChatRecord *r = ppx_chat_call_get_record (calls[i]);
    g_assert_cmpint (r->close_code, ==, 1000);
    g_autoptr (GArray) series = frame_series (r, t0);
    g_assert_cmpuint (series->len, >, SECONDS * 12);
    /* the stall: the frame answered the latest */
    const Point *worst = &g_array_index (series, Point, 0);
    for (guint k = 1; k < series->len; k++)
      if (g_array_index (series, Point, k).value > worst->value)
        worst = &g_array_index (series, Point, k);
    double ts = worst->t_s;
    g_assert_cmpfloat (worst->value, >, STALL_MS / 2); /* it came */
    g_assert_cmpfloat (ts, >, 2.5);                    /* with time to measure before and after it */
    g_assert_cmpfloat (ts, <, SECONDS - 8);
    double before = window_p50 (series, MAX (ts - 3.0, 0.5), ts - 0.3), after = window_p50 (series, ts + 3.0, ts + 7.0);
    LoadgenCall lc = {.index = i, .record = r};
    LoadgenPlayout po;
    g_assert_true (loadgen_call_playout (&lc, t0, NULL, &po));
    g_printerr ("%s stall, call %u: at %.2f s (%.0f ms); latency p50 %.1f ms before, %.1f ms 3-7 s after; player "
                "missed %.1f ms, dropped %.1f ms, %u re-buffers\n", server ? "server" : "engine", i, ts, worst->value,
                before, after, po.missed_ms, po.dropped_ms, po.rebuffers);
    g_assert_false (isnan (before) || isnan (after));
    run.growth_ms = MAX (run.growth_ms, after - before);
    run.missed_ms = MAX (run.missed_ms, po.missed_ms);
    run.excess_ms = MAX (run.excess_ms, po.dropped_ms - po.missed_ms);
  }
  for (guint i = 0; i < CALLS; i++)
    ppx_chat_call_free (calls[i]);
  g_assert_cmpint (fixture_server_stop (s, 20000), ==, 0);
  fixture_server_free (s);
  run.pressure = 100 * (fixture_cpu_pressure_us () - p0) / (double) (g_get_monotonic_time () - p_t0);
  g_printerr ("%s stall: latency growth %.1f ms at most, missed %.1f ms, dropped beyond missed %.1f ms; CPU pressure "
              "%.0f %%\n", server ? "server" : "engine", run.growth_ms, run.missed_ms, run.excess_ms, run.pressure);
  return run;
}

static void
check_stall (gboolean server)
{
  for (int attempt = 1;; attempt++) {
    StallRun run = run_stall (server);
    /* bounds that hold however loaded the machine: the old pacer grew the latency by 300 ms for 10 s */
    g_assert_cmpfloat (run.growth_ms, <=, 150);
    g_assert_cmpfloat (run.missed_ms, <=, STALL_MS + 250);
    g_assert_cmpfloat (run.excess_ms, <=, 100);
    if (run.growth_ms <= 60)
      break;
    if (run.pressure > 40 && attempt < 3) {
      g_printerr ("NOTE: run %d: latency %.1f ms higher after the stall at CPU pressure %.0f %%: taken again\n",
                  attempt, run.growth_ms, run.pressure);
      continue;
    }
    if (run.pressure > 40) {
      g_printerr ("NOTE: every run was that loaded: judged by the looser bound alone\n");
      break;
    }
    g_assert_cmpfloat (run.growth_ms, <=, 60);
  }
}

static void
test_engine_stall (void)
{
  check_stall (FALSE);
}

static void
test_server_stall (void)
{
  check_stall (TRUE);
}

/* ---- some calls behind ---- */

#define BEHIND_CALLS 2       /* on a thread of their own, which stops for BEHIND_MS */
#define IN_TIME_CALLS 4
#define BEHIND_MS 400
#define BEHIND_AT_S 6.0

typedef struct {
  FixtureServer *s;
  PpxChatAudio *audio;
  PpxChatCall *calls[BEHIND_CALLS];
  gint64 t0;        /* the main thread's first handshake: the stall comes BEHIND_AT_S after it */
  gint64 stall_us;  /* when the thread stopped */
  gboolean ok;
} Behind;

static gpointer
behind_thread (gpointer data)
{
  Behind *b = data;
  GMainContext *ctx = g_main_context_new ();
  g_main_context_push_thread_default (ctx);
  for (guint i = 0; i < BEHIND_CALLS; i++) {
    PpxChatOptions o = {.url = b->s->ws_url, .audio = b->audio, .pacing = PPX_CHAT_PACE_REALTIME,
                        .end_of_stream = TRUE};
    b->calls[i] = ppx_chat_call_new (&o, &(PpxChatCallbacks) {0}, NULL);
    ppx_chat_call_start (b->calls[i]);
  }
  gint64 at = b->t0 + (gint64) (BEHIND_AT_S * G_USEC_PER_SEC);
  while (g_get_monotonic_time () < at)
    g_main_context_iteration (ctx, FALSE) || (g_usleep (1000), TRUE);
  /* the calls of this thread send nothing for a while (a client, or its network, that stalled), then what is due */
  b->stall_us = g_get_monotonic_time ();
  g_usleep (BEHIND_MS * 1000);
  b->ok = ppx_chat_calls_wait (b->calls, BEHIND_CALLS, ctx, (guint) (SECONDS * 1000) + 60000);
  g_main_context_pop_thread_default (ctx);
  g_main_context_unref (ctx);
  return NULL;
}

/* The p50 latency of a call's frames sent in [from, to) s after t0. */
static double
call_window_p50 (PpxChatCall *call, gint64 t0, double from, double to)
{
  g_autoptr (GArray) series = frame_series (ppx_chat_call_get_record (call), t0);
  return window_p50 (series, from, to);
}

/* Under load (the ticks on their grid), the calls whose audio came late by BEHIND_MS (their client stalled) while
 * the others' came in time: the growth of the late calls' latency (3-7 s after the stall against the 3 s before),
 * and of the others'. */
static void
run_behind (double *late_growth, double *others_growth, double *pressure)
{
  gint64 p_t0 = g_get_monotonic_time ();
  double p0 = fixture_cpu_pressure_us ();
  /* 6 calls on a tick of 4 ms + 10 ms a row: 64 ms, the engine busy 80 % of the time (loaded); a tick of the 2 late
   * calls alone lasts 24 ms (on a GPU too a tick of fewer rows is shorter): a catch-up and two full ticks fit in
   * two periods */
  const char *env[] = {"PPX_TICK_EMULATE=4,10", NULL};
  FixtureServer *s = fixture_server_start_with (NULL, env, 0);
  g_autoptr (PpxChatAudio) audio = fixture_speech (0.0, SECONDS);
  PpxChatCall *calls[IN_TIME_CALLS];
  start_calls (s, audio, calls, IN_TIME_CALLS);
  Behind b = {.s = s, .audio = audio, .t0 = ppx_chat_call_get_record (calls[0])->handshake_us};
  GThread *thread = g_thread_new ("behind", behind_thread, &b);
  g_assert_true (ppx_chat_calls_wait (calls, IN_TIME_CALLS, NULL, (guint) (SECONDS * 1000) + 60000));
  g_thread_join (thread);
  g_assert_true (b.ok);
  double ts = (b.stall_us - b.t0) / 1e6;
  *late_growth = *others_growth = -INFINITY;
  for (guint i = 0; i < IN_TIME_CALLS + BEHIND_CALLS; i++) {
    PpxChatCall *call = i < IN_TIME_CALLS ? calls[i] : b.calls[i - IN_TIME_CALLS];
    g_assert_cmpint (ppx_chat_call_get_record (call)->close_code, ==, 1000);
    double before = call_window_p50 (call, b.t0, ts - 3.0, ts - 0.3);
    double after = call_window_p50 (call, b.t0, ts + 3.0, ts + 7.0);
    g_printerr ("%s call %u: latency p50 %.1f ms before the stall, %.1f ms 3-7 s after\n",
                i < IN_TIME_CALLS ? "in-time" : "late", i, before, after);
    g_assert_false (isnan (before) || isnan (after));
    double *growth = i < IN_TIME_CALLS ? others_growth : late_growth;
    *growth = MAX (*growth, after - before);
  }
  for (guint i = 0; i < IN_TIME_CALLS; i++)
    ppx_chat_call_free (calls[i]);
  for (guint i = 0; i < BEHIND_CALLS; i++)
    ppx_chat_call_free (b.calls[i]);
  g_assert_cmpint (fixture_server_stop (s, 20000), ==, 0);
  if (g_getenv ("PPX_TEST_SERVER_LOG"))
    g_printerr ("stall at %.3f s after t0 (monotonic %.3f ms)\n%s", ts, b.stall_us / 1000.0, fixture_server_log (s));
  fixture_server_free (s);
  *pressure = 100 * (fixture_cpu_pressure_us () - p0) / (double) (g_get_monotonic_time () - p_t0);
  g_printerr ("some calls behind: the late calls' latency grew by %.1f ms at most, the others' by %.1f ms; CPU "
              "pressure %.0f %%\n", *late_growth, *others_growth, *pressure);
}

static void
test_some_behind (void)
{
  for (int attempt = 1;; attempt++) {
    double late, others, pressure;
    run_behind (&late, &others, &pressure);
    g_assert_cmpfloat (late, <=, 200); /* before the catch-up ticks: the whole stall, for good */
    g_assert_cmpfloat (others, <=, 150);
    if (late <= 60 && others <= 60)
      break;
    if (pressure > 40 && attempt < 3) {
      g_printerr ("NOTE: run %d missed the 60 ms bound at CPU pressure %.0f %%: taken again\n", attempt, pressure);
      continue;
    }
    if (pressure > 40) {
      g_printerr ("NOTE: every run was that loaded: judged by the looser bounds alone\n");
      break;
    }
    g_assert_cmpfloat (late, <=, 60);
    g_assert_cmpfloat (others, <=, 60);
  }
}

/* ---- level-step ---- */

typedef struct {
  double t_s, sum_s, count; /* the pace stage's sum and count at t_s */
} PaceSample;

static double
pace_mean_ms (GArray *samples, double from, double to)
{
  const PaceSample *a = NULL, *b = NULL;
  for (guint i = 0; i < samples->len; i++) {
    const PaceSample *p = &g_array_index (samples, PaceSample, i);
    if (!a && p->t_s >= from)
      a = p;
    if (p->t_s <= to)
      b = p;
  }
  if (!a || !b || b->count - a->count < 20)
    return NAN;
  return 1000 * (b->sum_s - a->sum_s) / (b->count - a->count);
}

static void
poll_pace (FixtureServer *s, gint64 t0, GArray *samples)
{
  g_autofree char *text = NULL;
  if (fixture_http (s, NULL, "/metrics", NULL, &text, NULL) != 200)
    return;
  PaceSample p = {(g_get_monotonic_time () - t0) / 1e6,
                  fixture_metric (text, "personaplex_answer_page_stage_seconds_sum{protocol=\"chat\",stage=\"pace\"}", NAN),
                  fixture_metric (text, "personaplex_answer_page_stage_seconds_count{protocol=\"chat\",stage=\"pace\"}", NAN)};
  if (!isnan (p.sum_s) && !isnan (p.count))
    g_array_append_val (samples, p);
}

/* One call; from tick STEP_TICK on every tick lasts STEP_MS more. The pacer's mean hold before and after. */
static double
run_step (double *pressure)
{
  gint64 p_t0 = g_get_monotonic_time ();
  double p0 = fixture_cpu_pressure_us ();
  g_autofree char *delay_env = g_strdup_printf ("PPX_DEBUG_TICK_DELAY=%d:%d", STEP_TICK, STEP_MS);
  const char *env[] = {delay_env, "PPX_TICK_EMULATE=5,0", NULL};
  FixtureServer *s = fixture_server_start_with ((const char *const[]){"--pacing-max-delay", MAX_DELAY, NULL}, env, 0);
  g_autoptr (PpxChatAudio) audio = fixture_speech (0.0, SECONDS);
  g_autoptr (PpxChatCall) call = fixture_call_new (s, NULL, audio, PPX_CHAT_PACE_REALTIME, TRUE);
  g_assert_true (fixture_call_until_handshake (call, 60000));
  gint64 t0 = ppx_chat_call_get_record (call)->handshake_us;
  g_autoptr (GArray) samples = g_array_new (FALSE, FALSE, sizeof (PaceSample));
  gint64 next = g_get_monotonic_time ();
  while (!ppx_chat_call_is_finished (call) && g_get_monotonic_time () < t0 + (gint64) (SECONDS + 60) * G_USEC_PER_SEC) {
    if (g_get_monotonic_time () >= next) {
      poll_pace (s, t0, samples);
      next += G_USEC_PER_SEC / 4;
    }
    g_main_context_iteration (NULL, FALSE) || (g_usleep (2000), TRUE);
  }
  const PpxChatRecord *r = ppx_chat_call_get_record (call);
  g_assert_cmpint (r->close_code, ==, 1000);
  /* the step: the first frame whose latency is half the step above the p50 of the first 3 s */
  g_autoptr (GArray) series = frame_series (r, t0);
  double first = window_p50 (series, 0.5, 3.0), ts = NAN;
  for (guint k = 0; k < series->len && isnan (ts); k++)
    if (g_array_index (series, Point, k).t_s > 3.0 && g_array_index (series, Point, k).value > first + STEP_MS / 2)
      ts = g_array_index (series, Point, k).t_s;
  g_assert_false (isnan (ts));
  g_assert_cmpfloat (ts, >, 4.5);
  g_assert_cmpfloat (ts, <, SECONDS - 8.5);
  double before = pace_mean_ms (samples, ts - 4.0, ts - 0.3), after = pace_mean_ms (samples, ts + 3.0, ts + 8.0);
  double lat_before = window_p50 (series, ts - 4.0, ts - 0.3), lat_after = window_p50 (series, ts + 3.0, ts + 8.0);
  g_assert_cmpint (fixture_server_stop (s, 20000), ==, 0);
  fixture_server_free (s);
  *pressure = 100 * (fixture_cpu_pressure_us () - p0) / (double) (g_get_monotonic_time () - p_t0);
  g_printerr ("level step at %.2f s: pages held %.1f ms before, %.1f ms 3-8 s after (mean); latency p50 %.1f ms "
              "before, %.1f ms after; CPU pressure %.0f %%\n", ts, before, after, lat_before, lat_after, *pressure);
  g_assert_false (isnan (before) || isnan (after));
  return after - before;
}

static void
test_level_step (void)
{
  for (int attempt = 1;; attempt++) {
    double pressure;
    double growth = run_step (&pressure);
    g_assert_cmpfloat (growth, <=, 45); /* the old pacer: +STEP_MS */
    if (growth <= 25)
      break;
    if (pressure > 40 && attempt < 3) {
      g_printerr ("NOTE: run %d: pages held %.1f ms longer at CPU pressure %.0f %%: taken again\n", attempt, growth,
                  pressure);
      continue;
    }
    if (pressure > 40) {
      g_printerr ("NOTE: every run was that loaded: judged by the looser bound alone\n");
      break;
    }
    g_assert_cmpfloat (growth, <=, 25);
  }
}

/* ---- loaded-stall ---- */

#define LOADED_CALLS 12
#define LOADED_STALL_MS 300

/* LOADED_CALLS calls on a loaded tick (30 ms + 2.5 ms a row: 60 ms of 80) through a stall of the whole server
 * (SIGSTOP, LOADED_STALL_MS): the catch-up ticks the server ran (its ticker's debug lines) and the ticks that left
 * a member out, from the stall on. Every call is behind the same after such a stall: full ticks back to back step
 * the backlog away; a catch-up of the first few members back (before the fix: one every few ticks for the rest of
 * the call, each a tick's fixed time lost, so the backlog stayed) only delays them. */
static void
run_loaded_stall (guint *catch_ups, guint *split, double *pressure)
{
  gint64 p_t0 = g_get_monotonic_time ();
  double p0 = fixture_cpu_pressure_us ();
  const char *env[] = {"PPX_TICK_EMULATE=30,2.5", "GST_DEBUG=personaplexticker:5", NULL};
  FixtureServer *s = fixture_server_start_with (NULL, env, 0);
  g_autoptr (PpxChatAudio) audio = fixture_speech (0.0, SECONDS);
  PpxChatCall *calls[LOADED_CALLS];
  start_calls (s, audio, calls, LOADED_CALLS);
  gint64 at = ppx_chat_call_get_record (calls[0])->handshake_us + (gint64) (STALL_AT_S * G_USEC_PER_SEC);
  while (g_get_monotonic_time () < at)
    g_main_context_iteration (NULL, FALSE) || (g_usleep (1000), TRUE);
  guint before_cu = fixture_server_log_count (s, "catch-up tick of");
  fixture_server_signal (s, SIGSTOP);
  Stop st = {s, TRUE};
  g_timeout_add_once (LOADED_STALL_MS, resume, &st);
  g_assert_true (ppx_chat_calls_wait (calls, LOADED_CALLS, NULL, (guint) (SECONDS * 1000) + 60000));
  g_assert_false (st.stopped);
  for (guint i = 0; i < LOADED_CALLS; i++) {
    g_assert_cmpint (ppx_chat_call_get_record (calls[i])->close_code, ==, 1000);
    ppx_chat_call_free (calls[i]);
  }
  g_assert_cmpint (fixture_server_stop (s, 20000), ==, 0);
  *catch_ups = fixture_server_log_count (s, "catch-up tick of") - before_cu;
  /* ticks (not catch-ups) that left out a member, after the stall: "tick of N rows (W waited for, M missed it" */
  *split = 0;
  const char *log = fixture_server_log (s), *p = log;
  guint ticks = 0;
  while ((p = strstr (p, "tick of ")) != NULL) {
    guint rows, waited, missed;
    if (p - log >= 9 && strncmp (p - 9, "catch-up ", 9) == 0) {
      p += 8;
      continue;
    }
    if (sscanf (p, "tick of %u rows (%u waited for, %u missed it", &rows, &waited, &missed) == 3) {
      ticks++;
      /* the calls' last seconds (they end a little apart) leave members out too: count up to the last 3 s */
      if (ticks > (STALL_AT_S - 1) * 12.5 && ticks < (SECONDS - 3) * 12.5 && missed > 0)
        (*split)++;
    }
    p += 8;
  }
  if (g_getenv ("PPX_TEST_SERVER_LOG"))
    g_printerr ("%s", log);
  fixture_server_free (s);
  *pressure = 100 * (fixture_cpu_pressure_us () - p0) / (double) (g_get_monotonic_time () - p_t0);
  g_printerr ("loaded stall: %u catch-up ticks after it, %u ticks that left a member out; CPU pressure %.0f %%\n",
              *catch_ups, *split, *pressure);
}

static void
test_loaded_stall (void)
{
  for (int attempt = 1;; attempt++) {
    guint catch_ups, split;
    double pressure;
    run_loaded_stall (&catch_ups, &split, &pressure);
    /* a split that lasts shows as many ticks a period without a member; a few are a busy machine's */
    g_assert_cmpuint (split, <=, 8);
    if (catch_ups <= 3)
      break;
    if (pressure > 40 && attempt < 3) {
      g_printerr ("NOTE: run %d: %u catch-ups, %u split ticks at CPU pressure %.0f %%: taken again\n", attempt,
                  catch_ups, split, pressure);
      continue;
    }
    if (pressure > 40) {
      /* a busy machine stalls the server's threads unevenly too: a looser bound */
      g_assert_cmpuint (catch_ups, <=, 6);
      break;
    }
    g_assert_cmpuint (catch_ups, <=, 3);
  }
}

int
main (int argc, char **argv)
{
  g_setenv ("PPX_TICK_EMULATE", "40,1", TRUE);
  g_setenv ("OMP_NUM_THREADS", "1", FALSE);
  g_setenv ("OMP_WAIT_POLICY", "PASSIVE", FALSE);
  gst_init (&argc, &argv);
  g_test_init (&argc, &argv, NULL);
  fixture_model_dir ();
  g_test_add_func ("/server-catchup/engine-stall", test_engine_stall);
  g_test_add_func ("/server-catchup/server-stall", test_server_stall);
  g_test_add_func ("/server-catchup/level-step", test_level_step);
  g_test_add_func ("/server-catchup/some-calls-behind", test_some_behind);
  g_test_add_func ("/server-catchup/loaded-stall", test_loaded_stall);
  return g_test_run ();
}
