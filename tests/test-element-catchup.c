/* personaplexduplex on a loaded shared engine: a conversation that fell behind real time catches up
 * (docs/element.md, "The tick", Catching up). Two live calls on an engine whose every tick lasts 20 ms a row
 * (PPX_TICK_EMULATE=0,20: 40 ms for both, read when the engine's first element starts); both are held back
 * 400 ms once, so the engine runs back to back and is loaded from then on (it stays so until its ticks take
 * under a quarter of the time). Then only B is held back 400 ms: its audio source makes up the lost time at
 * once, so B has five frames ready while A hands in one a period. A regular tick steps each call once, so B's
 * lag would stay 400 ms for the rest of the call (A's frames set the pace of the ticks); with catch-up ticks
 * (one row: 20 ms, in the 40 ms the engine has to spare each period) it is back within 150 ms of its lag before
 * the hold, 2.5 s after it. The lag: the clock's running time when an answer reaches the sink, less the end of
 * the answer's timestamp. On the tiny random model. */
#include "element-harness.h"

#include <string.h>

typedef struct {
  GMutex lock;
  GstElement *pipeline;
  gint64 hold_us;      /* the sink pad's next buffer waits this long first (once) */
  GArray *lags;        /* gint64 us, one an answer */
  GArray *arrivals;    /* gint64 monotonic us of each */
} Call;

static GstPadProbeReturn
hold_probe (GstPad *pad, GstPadProbeInfo *info, gpointer user_data)
{
  Call *c = user_data;
  gint64 hold;

  g_mutex_lock (&c->lock);
  hold = c->hold_us;
  c->hold_us = 0;
  g_mutex_unlock (&c->lock);
  if (hold > 0)
    g_usleep ((gulong) hold);
  return GST_PAD_PROBE_OK;
}

static GstPadProbeReturn
lag_probe (GstPad *pad, GstPadProbeInfo *info, gpointer user_data)
{
  Call *c = user_data;
  GstBuffer *buf = GST_PAD_PROBE_INFO_BUFFER (info);
  GstClock *clock = gst_element_get_clock (c->pipeline);

  if (clock && GST_BUFFER_PTS_IS_VALID (buf) && GST_BUFFER_DURATION_IS_VALID (buf)) {
    GstClockTime now = gst_clock_get_time (clock) - gst_element_get_base_time (c->pipeline);
    gint64 lag = ((gint64) now - (gint64) (GST_BUFFER_PTS (buf) + GST_BUFFER_DURATION (buf))) / 1000;
    gint64 at = g_get_monotonic_time ();

    g_mutex_lock (&c->lock);
    g_array_append_val (c->lags, lag);
    g_array_append_val (c->arrivals, at);
    g_mutex_unlock (&c->lock);
  }
  if (clock)
    gst_object_unref (clock);
  return GST_PAD_PROBE_OK;
}

static void
call_start (Call *c, guint freq)
{
  gchar *desc = g_strdup_printf ("audiotestsrc is-live=true wave=sine freq=%u volume=0.4 samplesperbuffer=480 ! "
                                 PPX_F32_CAPS " ! personaplexduplex name=pp model-dir=\"%s\" greedy=true "
                                 "model-instance-id=catchup-live align-frames=false ! fakesink name=sink "
                                 "pp.text_src ! fakesink", freq, model_dir);
  GstElement *pp, *sink;
  GstPad *pad;

  memset (c, 0, sizeof (*c));
  g_mutex_init (&c->lock);
  c->lags = g_array_new (FALSE, FALSE, sizeof (gint64));
  c->arrivals = g_array_new (FALSE, FALSE, sizeof (gint64));
  c->pipeline = gst_parse_launch (desc, NULL);
  g_free (desc);
  fail_unless (c->pipeline != NULL);
  pp = gst_bin_get_by_name (GST_BIN (c->pipeline), "pp");
  sink = gst_bin_get_by_name (GST_BIN (c->pipeline), "sink");
  pad = gst_element_get_static_pad (pp, "sink");
  gst_pad_add_probe (pad, GST_PAD_PROBE_TYPE_BUFFER, hold_probe, c, NULL);
  gst_object_unref (pad);
  pad = gst_element_get_static_pad (sink, "sink");
  gst_pad_add_probe (pad, GST_PAD_PROBE_TYPE_BUFFER, lag_probe, c, NULL);
  gst_object_unref (pad);
  gst_object_unref (sink);
  gst_object_unref (pp);
  fail_if (gst_element_set_state (c->pipeline, GST_STATE_PLAYING) == GST_STATE_CHANGE_FAILURE);
  fail_unless (gst_element_get_state (c->pipeline, NULL, NULL, 10 * GST_SECOND) == GST_STATE_CHANGE_SUCCESS);
}

static void
call_stop (Call *c)
{
  assert_no_bus_error (c->pipeline);
  gst_element_set_state (c->pipeline, GST_STATE_NULL);
  gst_object_unref (c->pipeline);
  g_array_unref (c->lags);
  g_array_unref (c->arrivals);
  g_mutex_clear (&c->lock);
}

static void
call_hold (Call *c, gint64 us)
{
  g_mutex_lock (&c->lock);
  c->hold_us = us;
  g_mutex_unlock (&c->lock);
}

static int
compare_gint64 (const void *a, const void *b)
{
  gint64 x = *(const gint64 *) a, y = *(const gint64 *) b;
  return x < y ? -1 : x > y;
}

/* The median lag (us) of the answers that reached the sink in [from, to) (monotonic us); G_MININT64 if none. */
static gint64
median_lag (Call *c, gint64 from, gint64 to)
{
  GArray *v = g_array_new (FALSE, FALSE, sizeof (gint64));
  gint64 m = G_MININT64;

  g_mutex_lock (&c->lock);
  for (guint i = 0; i < c->lags->len; i++) {
    gint64 at = g_array_index (c->arrivals, gint64, i);
    if (at >= from && at < to)
      g_array_append_val (v, g_array_index (c->lags, gint64, i));
  }
  g_mutex_unlock (&c->lock);
  if (v->len > 0) {
    qsort (v->data, v->len, sizeof (gint64), compare_gint64);
    m = g_array_index (v, gint64, v->len / 2);
  }
  g_array_unref (v);
  return m;
}

GST_START_TEST (test_behind_call_catches_up)
{
  Call a, b;
  gint64 t, before, held, after;

  g_setenv ("PPX_TICK_EMULATE", "0,20", TRUE);
  call_start (&a, 330);
  call_start (&b, 600);
  g_unsetenv ("PPX_TICK_EMULATE");
  g_usleep (G_USEC_PER_SEC);
  /* both behind: back-to-back ticks load the engine */
  call_hold (&a, 400000);
  call_hold (&b, 400000);
  g_usleep (3 * G_USEC_PER_SEC);
  t = g_get_monotonic_time ();
  before = median_lag (&b, t - G_USEC_PER_SEC, t);
  call_hold (&b, 400000);
  g_usleep (700000);
  t = g_get_monotonic_time ();
  held = median_lag (&b, t - 200000, t);
  g_usleep (1800000);
  t = g_get_monotonic_time ();
  after = median_lag (&b, t - 500000, t);
  g_printerr ("B's lag: %.1f ms before the hold, %.1f ms just after, %.1f ms 2.5 s after\n", before / 1e3, held / 1e3,
             after / 1e3);
  fail_unless (before != G_MININT64 && held != G_MININT64 && after != G_MININT64, "no answers timed");
  fail_unless (held - before > 200000, "the hold did not put B behind (lag %.1f ms before, %.1f ms after it)",
               before / 1e3, held / 1e3);
  fail_unless (after - before < 150000, "B's lag stayed: %.1f ms before the hold, %.1f ms 2.5 s after it",
               before / 1e3, after / 1e3);
  call_stop (&a);
  call_stop (&b);
}

GST_END_TEST;

static Suite *
catchup_suite (void)
{
  Suite *s = suite_create ("personaplexduplex-catchup");
  /* live pipelines held to real time: not under valgrind */
  TCase *rt = element_tcase_new ("realtime", 120);

  suite_add_tcase (s, rt);
  tcase_add_test (rt, test_behind_call_catches_up);
  return s;
}

int
main (int argc, char **argv)
{
  return element_test_main (argc, argv, catchup_suite, "personaplexduplex-catchup", FALSE, TRUE);
}
