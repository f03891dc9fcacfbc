/* experiment: a stall of the engine or of the server, and what a call's latency and player do after it */
#include <gst/gst.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "loadgen-stats.h"
#include "server/server-fixture.h"

static int
compare_doubles (gconstpointer a, gconstpointer b)
{
  double x = *(const double *) a, y = *(const double *) b;
  return x < y ? -1 : x > y;
}

static double
median (GArray *v)
{
  if (!v->len)
    return NAN;
  g_array_sort (v, compare_doubles);
  return g_array_index (v, double, v->len / 2);
}

/* The send time (us) of the page that completed input frame k. */
static gint64
frame_sent_us (const PpxChatRecord *r, guint k)
{
  gint64 need = (gint64) (k + 1) * PPX_CHAT_FRAME;
  for (guint s = 0; s < r->sent->len; s++)
    if (g_array_index (r->sent, PpxChatSent, s).samples >= need)
      return g_array_index (r->sent, PpxChatSent, s).time_us;
  return 0;
}

static void
stop_stall (gpointer data)
{
  FixtureServer *s = data;
  fixture_server_signal (s, SIGCONT);
}

static void
experiment (void)
{
  const char *mode = g_getenv ("X_MODE") ? g_getenv ("X_MODE") : "tick";
  guint calls = g_getenv ("X_CALLS") ? atoi (g_getenv ("X_CALLS")) : 1;
  double seconds = g_getenv ("X_SECONDS") ? atof (g_getenv ("X_SECONDS")) : 16;
  guint stall_ms = g_getenv ("X_STALL") ? atoi (g_getenv ("X_STALL")) : 300;
  double at_s = g_getenv ("X_AT") ? atof (g_getenv ("X_AT")) : 6;
  const char *extra = g_getenv ("X_ARGS");
  if (g_str_equal (mode, "tick")) {
    g_autofree char *spec = g_strdup_printf ("%u:%u,%u:0", (guint) (at_s * 12.5), stall_ms, (guint) (at_s * 12.5) + 1);
    g_setenv ("PPX_DEBUG_TICK_DELAY", spec, TRUE);
  }
  g_auto (GStrv) args = extra ? g_strsplit (extra, " ", -1) : g_new0 (char *, 1);
  FixtureServer *s = fixture_server_start ((const char *const *) args);
  g_autoptr (PpxChatAudio) audio = fixture_speech (0.0, seconds);
  PpxChatCall *c[64];
  for (guint i = 0; i < calls; i++)
    c[i] = fixture_call_new (s, NULL, audio, PPX_CHAT_PACE_REALTIME, TRUE);
  for (guint i = 0; i < calls; i++)
    g_assert_true (fixture_call_until_handshake (c[i], 60000));
  gint64 t0 = ppx_chat_call_get_record (c[0])->handshake_us;
  if (g_str_equal (mode, "stop")) {
    while (g_get_monotonic_time () < t0 + (gint64) (at_s * G_USEC_PER_SEC))
      g_main_context_iteration (NULL, FALSE), g_usleep (1000);
    fixture_server_signal (s, SIGSTOP);
    g_timeout_add_once (stall_ms, stop_stall, s);
  }
  g_assert_true (ppx_chat_calls_wait (c, calls, NULL, (guint) (seconds * 1000) + 60000));
  for (guint i = 0; i < calls; i++) {
    const PpxChatRecord *r = ppx_chat_call_get_record (c[i]);
    g_assert_cmpint (r->close_code, ==, 1000);
    g_autoptr (GArray) lat = ppx_chat_record_frame_latencies (r, PPX_CHAT_FRAME);
    /* per second p50 */
    GArray *sec[64];
    for (guint k = 0; k < 64; k++)
      sec[k] = g_array_new (FALSE, FALSE, sizeof (double));
    for (guint k = 0; k < lat->len; k++) {
      double t = (frame_sent_us (r, k) - t0) / 1e6;
      if (t >= 0 && t < 64)
        g_array_append_val (sec[(guint) t], g_array_index (lat, double, k));
    }
    LoadgenCall lc = {.index = i, .record = r};
    g_autoptr (GArray) ps = g_array_new (TRUE, TRUE, sizeof (LoadgenPlayoutSecond));
    LoadgenPlayout po;
    loadgen_call_playout (&lc, t0, ps, &po);
    g_printerr ("call %u: missed %.1f ms, dropped %.1f ms, rebuffers %u\n", i, po.missed_ms, po.dropped_ms,
                po.rebuffers);
    for (guint k = 0; k < (guint) seconds + 1 && k < 64; k++) {
      double mx = 0;
      for (guint j = 0; j < sec[k]->len; j++)
        mx = MAX (mx, g_array_index (sec[k], double, j));
      LoadgenPlayoutSecond z = {0};
      LoadgenPlayoutSecond *p = k < ps->len ? &g_array_index (ps, LoadgenPlayoutSecond, k) : &z;
      g_printerr ("  s %2u: latency p50 %6.1f max %6.1f ms (%u frames); missed %5.1f dropped %5.1f ms\n", k,
                  median (sec[k]), mx, sec[k]->len, p->missed_ms, p->dropped_ms);
      g_array_unref (sec[k]);
    }
    for (guint k = (guint) seconds + 1; k < 64; k++)
      g_array_unref (sec[k]);
  }
  for (guint i = 0; i < calls; i++)
    ppx_chat_call_free (c[i]);
  fixture_server_stop (s, 20000);
  g_printerr ("%s\n", fixture_server_log (s));
  fixture_server_free (s);
}

int
main (int argc, char **argv)
{
  g_setenv ("PPX_TICK_EMULATE", g_getenv ("X_EMULATE") ? g_getenv ("X_EMULATE") : "40,1", TRUE);
  g_setenv ("OMP_NUM_THREADS", "1", FALSE);
  g_setenv ("OMP_WAIT_POLICY", "PASSIVE", FALSE);
  gst_init (&argc, &argv);
  g_test_init (&argc, &argv, NULL);
  fixture_model_dir ();
  g_test_add_func ("/server-catchup/experiment", experiment);
  return g_test_run ();
}
