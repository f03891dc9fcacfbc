/* The engine's tick times (model/engine/tick-times.c, ppx_engine_tick_times in personaplex.h): the window's
 * figures (median, p99 by nearest rank but never the largest below 100 ticks, max) over a window that wraps,
 * the counts since the engine was made (buckets, overruns, sum),
 * and the PPX_DEBUG_TICK_DELAY schedule: its steps apply from their tick on, a malformed value is refused
 * with a warning. No model: ticks are recorded with a start time in the past. The engine's use of it (every
 * tick measured, the delay inside the tick) is in test-engine's /engine/tick-times. */
#include <string.h>

#include "tick-times.h"

/* Records a tick of @ms milliseconds (it started that long ago). */
static void
add_ms (PpxTickTimes *t, double ms)
{
  ppx_tick_times_add (t, g_get_monotonic_time () - (gint64) (ms * 1000));
}

/* Recorded values are the requested ones plus the microseconds between the two clock reads. */
#define assert_ms(got, want) g_assert_cmpfloat_with_epsilon ((got), (want), 0.5)

static void
test_empty (void)
{
  PpxTickTimes *t = ppx_tick_times_new (80);
  PpxEngineTickTimes s;
  ppx_tick_times_get (t, &s);
  g_assert_cmpuint (s.n, ==, 0);
  g_assert_cmpuint (s.ticks, ==, 0);
  g_assert_cmpfloat (s.p99_ms, ==, 0);
  g_assert_cmpfloat (s.max_ms, ==, 0);
  add_ms (t, 7);
  ppx_tick_times_get (t, &s);
  g_assert_cmpuint (s.n, ==, 1); /* one tick: it is every figure */
  assert_ms (s.p50_ms, 7);
  assert_ms (s.p99_ms, 7);
  assert_ms (s.max_ms, 7);
  assert_ms (s.last_ms, 7);
  ppx_tick_times_free (t);
}

/* Below 100 ticks the nearest-rank p99 would be the largest tick: it is the second largest, so that one slow
 * tick (a cold first tick) does not make it; two do. */
static void
test_outlier (void)
{
  PpxTickTimes *t = ppx_tick_times_new (80);
  PpxEngineTickTimes s;
  add_ms (t, 90); /* the cold first tick */
  for (int i = 0; i < 40; i++)
    add_ms (t, 2 + (i % 3));
  ppx_tick_times_get (t, &s);
  g_assert_cmpuint (s.n, ==, 41);
  assert_ms (s.max_ms, 90);
  assert_ms (s.p99_ms, 4);
  assert_ms (s.p50_ms, 3);
  add_ms (t, 50);
  ppx_tick_times_get (t, &s);
  assert_ms (s.p99_ms, 50);
  assert_ms (s.last_ms, 50);
  ppx_tick_times_free (t);
}

/* The window holds the last PPX_ENGINE_TICK_WINDOW ticks: their nearest-rank p99 is the third largest of 256
 * (rank 254); older ticks are forgotten. */
static void
test_window (void)
{
  PpxTickTimes *t = ppx_tick_times_new (80);
  PpxEngineTickTimes s;
  for (int i = 0; i < 10; i++)
    add_ms (t, 60);
  for (int i = 0; i < PPX_ENGINE_TICK_WINDOW - 3; i++)
    add_ms (t, 1);
  ppx_tick_times_get (t, &s);
  g_assert_cmpuint (s.n, ==, PPX_ENGINE_TICK_WINDOW);
  assert_ms (s.p99_ms, 60); /* the first 7 ticks are gone; three 60 ms ticks are left, the third is the p99 */
  add_ms (t, 20);
  add_ms (t, 30);
  add_ms (t, 40);
  for (int i = 0; i < 7; i++)
    add_ms (t, 1); /* the 60 ms ticks leave the window */
  ppx_tick_times_get (t, &s);
  g_assert_cmpuint (s.n, ==, PPX_ENGINE_TICK_WINDOW);
  g_assert_cmpuint (s.ticks, ==, PPX_ENGINE_TICK_WINDOW + 17);
  assert_ms (s.max_ms, 40);
  assert_ms (s.p99_ms, 20); /* 40, 30, 20: the third largest */
  assert_ms (s.p50_ms, 1);
  ppx_tick_times_free (t);
}

/* Every tick since the engine was made, beyond the window: a bucket each (a tick of t ms in the first bucket
 * whose bound is >= t), the overruns (over the frame given at creation), the sum. */
static void
test_since_made (void)
{
  PpxTickTimes *t = ppx_tick_times_new (80);
  PpxEngineTickTimes s;
  const double *bounds = ppx_engine_tick_bucket_bounds_ms ();
  for (int i = 1; i < PPX_ENGINE_TICK_BUCKETS; i++)
    g_assert_cmpfloat (bounds[i], >, bounds[i - 1]);
  g_assert_cmpfloat (bounds[7], ==, 80);
  ppx_tick_times_get (t, &s);
  g_assert_cmpuint (s.overruns, ==, 0);
  g_assert_cmpfloat (s.total_ms, ==, 0);
  /* exact durations (a measured one may be longer on a loaded machine); a bound belongs to its own bucket */
  const struct {
    gint64 us;
    guint bucket;
  } ticks[] = {{500, 0}, {1000, 0}, {1001, 1}, {30000, 5}, {80000, 7}, {80001, 8}, {150000, 9},
               {640000, PPX_ENGINE_TICK_BUCKETS - 1}, {700000, PPX_ENGINE_TICK_BUCKETS}};
  double total = 0;
  for (guint i = 0; i < G_N_ELEMENTS (ticks); i++) {
    ppx_tick_times_record (t, ticks[i].us);
    total += ticks[i].us / 1000.0;
  }
  for (int i = 0; i < 2 * PPX_ENGINE_TICK_WINDOW; i++) /* the window forgets them; the counts do not */
    ppx_tick_times_record (t, 3000);
  total += 2 * PPX_ENGINE_TICK_WINDOW * 3;
  ppx_tick_times_get (t, &s);
  guint64 want[PPX_ENGINE_TICK_BUCKETS + 1] = {0};
  for (guint i = 0; i < G_N_ELEMENTS (ticks); i++)
    want[ticks[i].bucket]++;
  want[2] += 2 * PPX_ENGINE_TICK_WINDOW;
  guint64 sum = 0;
  for (int b = 0; b <= PPX_ENGINE_TICK_BUCKETS; b++) {
    g_assert_cmpuint (s.buckets[b], ==, want[b]);
    sum += s.buckets[b];
  }
  g_assert_cmpuint (sum, ==, s.ticks);
  g_assert_cmpuint (s.overruns, ==, 4); /* over 80 ms: 80.001, 150, 640, 700 */
  g_assert_cmpfloat_with_epsilon (s.total_ms, total, 1e-6);
  g_assert_cmpfloat (s.max_ms, ==, 3); /* the window holds the 3 ms ticks only */
  ppx_tick_times_free (t);
}

/* How long ppx_tick_times_debug_delay slept for the tick about to be recorded (ms). */
static double
delay_ms (PpxTickTimes *t)
{
  const gint64 t0 = g_get_monotonic_time ();
  ppx_tick_times_debug_delay (t);
  const double ms = (g_get_monotonic_time () - t0) / 1000.0;
  ppx_tick_times_add (t, t0);
  return ms;
}

static void
test_delay_schedule (void)
{
  g_setenv ("PPX_DEBUG_TICK_DELAY", "2:15,4:0,5:25", TRUE);
  PpxTickTimes *t = ppx_tick_times_new (80);
  const double want[7] = {0, 0, 15, 15, 0, 25, 25};
  for (int i = 0; i < 7; i++) {
    const double got = delay_ms (t);
    /* a sleep is at least as long as asked; a busy machine may make it longer, never a no-delay tick 15 ms */
    g_assert_cmpfloat (got, >=, want[i]);
    if (want[i] == 0)
      g_assert_cmpfloat (got, <, 15);
  }
  ppx_tick_times_free (t);

  g_setenv ("PPX_DEBUG_TICK_DELAY", "12", TRUE); /* every tick */
  t = ppx_tick_times_new (80);
  g_assert_cmpfloat (delay_ms (t), >=, 12);
  ppx_tick_times_free (t);
  g_unsetenv ("PPX_DEBUG_TICK_DELAY");
}

static void
test_delay_malformed (void)
{
  const char *bad[] = {"x", "3:", ":5", "5:10,2:10", "1:5,7", "-4", "1:20000", "1:5x", "1:1,2:1,3:1,4:1,5:1,6:1,7:1,8:1,9:1"};
  for (guint i = 0; i < G_N_ELEMENTS (bad); i++) {
    g_setenv ("PPX_DEBUG_TICK_DELAY", bad[i], TRUE);
    g_test_expect_message ("personaplex", G_LOG_LEVEL_WARNING, "*PPX_DEBUG_TICK_DELAY*ignored*");
    PpxTickTimes *t = ppx_tick_times_new (80);
    g_test_assert_expected_messages ();
    g_assert_cmpfloat (delay_ms (t), <, 15);
    ppx_tick_times_free (t);
  }
  g_unsetenv ("PPX_DEBUG_TICK_DELAY");
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_unsetenv ("PPX_DEBUG_TICK_DELAY");
  g_test_add_func ("/tick-times/empty", test_empty);
  g_test_add_func ("/tick-times/outlier", test_outlier);
  g_test_add_func ("/tick-times/window", test_window);
  g_test_add_func ("/tick-times/since-made", test_since_made);
  g_test_add_func ("/tick-times/delay-schedule", test_delay_schedule);
  g_test_add_func ("/tick-times/delay-malformed", test_delay_malformed);
  return g_test_run ();
}
