/* Calls that join and leave, heard at the reference web client's player (issue 26; docs/server.md, "Joins and
 * leaves"). The engine's tick is made to cost what a GPU's does (PPX_TICK_EMULATE, docs/testing.md: 20 ms + 3 ms a
 * row, so the tick grows by 3 ms with each call that joins and shrinks as much with each that leaves: 56 ms for
 * all 12), and CALLS calls of the chat client say speech in real time: one joins every JOIN_EVERY_S, every other
 * one says SHORT_S and leaves while the others go on (LONG_S). Each call's answer, as it arrived, is played
 * through the port of the reference client's player (tools/loadgen/loadgen-playout.c):
 *   - no call's player may drop audio beyond what it missed (within one quantum): the player drops audio when
 *     pages come earlier than those it holds allow, and the pacer now sends a page no earlier than the player has
 *     room for (pipelines/server/server-player.c), but after a gap (a stall's catch-up, where what is dropped is
 *     what was missed: docs/server.md, "After a stall"). Before, the pacer's clock moved earlier by 4 ms a page
 *     however far the latency came down (calls left and the ticks got shorter, a late tick left the delay's
 *     window), and calls dropped 11-75 ms each beyond what they missed (two runs: 125 and 23 ms dropped in all);
 *   - every call ends with 1000, its answer in full.
 * The audio missed is printed (the goal: none in 99 % of calls, no call over 40 ms) with each call's
 * latency, not judged: a shared 2-core machine stalls the server now and then (every call misses, then drops
 * about as much), which the rule above allows. */
#include <gst/gst.h>
#include <math.h>

#include "loadgen-stats.h"
#include "server/server-fixture.h"

#define CALLS 12
#define JOIN_EVERY_S 0.4
#define LONG_S 15.0
#define SHORT_S 8.0
#define QUANTUM_MS (1000.0 * LOADGEN_PLAYOUT_QUANTUM / LOADGEN_PLAYOUT_RATE)

static double
call_seconds (guint i)
{
  return i % 2 ? SHORT_S : LONG_S;
}

static void
test_joins_and_leaves (void)
{
  const char *env[] = {"PPX_TICK_EMULATE=20,3", NULL};
  FixtureServer *s = fixture_server_start_with ((const char *const[]){"--admission", "memory", NULL}, env, 0);
  g_autoptr (PpxChatAudio) long_audio = fixture_speech (0.0, LONG_S);
  g_autoptr (PpxChatAudio) short_audio = fixture_speech (0.0, SHORT_S);
  PpxChatCall *calls[CALLS];
  gint64 t0 = g_get_monotonic_time ();
  for (guint i = 0; i < CALLS; i++) {
    gint64 at = t0 + (gint64) (i * JOIN_EVERY_S * G_USEC_PER_SEC);
    while (g_get_monotonic_time () < at)
      g_main_context_iteration (NULL, FALSE) || (g_usleep (1000), TRUE);
    calls[i] = fixture_call_new (s, NULL, i % 2 ? short_audio : long_audio, PPX_CHAT_PACE_REALTIME, TRUE);
  }
  g_assert_true (ppx_chat_calls_wait (calls, CALLS, NULL, (guint) (LONG_S * 1000) + 60000));
  double missed_total = 0, dropped_total = 0, worst_excess = -INFINITY;
  guint missing = 0;
  for (guint i = 0; i < CALLS; i++) {
    const PpxChatRecord *r = ppx_chat_call_get_record (calls[i]);
    g_assert_cmpint (r->close_code, ==, 1000);
    LoadgenCall lc = {.index = i, .record = r};
    LoadgenCallStats st;
    loadgen_call_stats (&lc, 100, &st);
    g_assert_true (st.has_playout);
    g_assert_cmpfloat (st.answered_s, >=, 0.99 * call_seconds (i) - 0.1);
    g_printerr ("call %2u: joined at %4.1f s, %4.1f s long: frame latency p50 %5.1f ms, p99 %5.1f ms; player missed "
                "%5.1f ms, dropped %5.1f ms, %u re-buffers\n", i, i * JOIN_EVERY_S, call_seconds (i), st.latency_p50_ms,
                st.latency_p99_ms, st.playout.missed_ms, st.playout.dropped_ms, st.playout.rebuffers);
    missed_total += st.playout.missed_ms;
    dropped_total += st.playout.dropped_ms;
    missing += st.playout.missed_ms > 0;
    worst_excess = MAX (worst_excess, st.playout.dropped_ms - st.playout.missed_ms);
    loadgen_call_stats_clear (&st);
  }
  for (guint i = 0; i < CALLS; i++)
    ppx_chat_call_free (calls[i]);
  g_assert_cmpint (fixture_server_stop (s, 20000), ==, 0);
  if (worst_excess > QUANTUM_MS)
    g_printerr ("the server's log:\n%s\n", fixture_server_log (s)); /* the calls' drift moves among it */
  fixture_server_free (s);
  g_printerr ("%u calls: %u missed audio, %.1f ms in all; %.1f ms dropped in all, at most %.1f ms beyond what a call "
              "missed\n", CALLS, missing, missed_total, dropped_total, worst_excess);
  g_assert_cmpfloat (worst_excess, <=, QUANTUM_MS);
}

int
main (int argc, char **argv)
{
  g_setenv ("OMP_NUM_THREADS", "1", FALSE);
  g_setenv ("OMP_WAIT_POLICY", "PASSIVE", FALSE);
  gst_init (&argc, &argv);
  g_test_init (&argc, &argv, NULL);
  fixture_model_dir ();
  g_test_add_func ("/server-joins/joins-and-leaves", test_joins_and_leaves);
  return g_test_run ();
}
