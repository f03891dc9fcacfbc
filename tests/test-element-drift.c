/* personaplexduplex: calls whose sources run on clocks of their own (docs/element.md, "Clocks that drift").
 * Four live calls on one engine, their input in client pages (two 20 ms buffers every 40 ms, pushed from appsrc
 * on a schedule of the monotonic clock, stamped by their sample count as the server's decoded Ogg pages are), on
 * an emulated device whose every tick lasts at least 20 ms (PPX_TICK_EMULATE; not loaded): the first on the
 * test's clock, one whose clock runs PPM slow (a page every 40 ms x (1 + PPM/1e6)), one PPM fast, and one on the
 * test's clock whose pages come BURST_DELAY_US late for BURST_US (a loaded machine reading them late), joining
 * 400 ms after the first at its page phase. PPM is 2500 (0.2 ms a period): RUN_US of it is 55 ms of drift, as
 * 50 ppm is over 18 minutes.
 *
 * Before: the slow call's frames completed later each period and every tick waited for them, so the ticks
 * followed its clock; the others handed each frame in at once after the tick before and their latency grew at the
 * difference of the clocks, without bound. Now each aligned stream keeps its frames in the others' window: when
 * they complete after it (the slow call) a frame starts with an arrival of silence, when more than an arrival
 * before it (the fast one) its first arrival of input is dropped. Asserted: each call's latency (an answer's
 * arrival at the sink less the push of the page that completed its input) varies over the run after its first
 * 2 s (1 s medians, the burst left out) by at most 32 ms (70 ms the fast one: an arrival and the margins); the
 * calls on the test's clock are never moved (the late one was, by the first version), the slow one has silence
 * inserted and the fast one input dropped (the stats). */
#include "element-harness.h"

#include <gst/app/app.h>
#include <string.h>

#define N_CALLS 4
#define PPM 2500.0
#define JOIN_US 400000
#define RUN_US 22000000
#define SETTLE_US 2000000
#define WINDOW_US 1000000
#define MAX_PAGES 1000
#define MAX_ANSWERS 1000
/* the fourth call, on the test's clock, has its pages read late over a stretch (a loaded machine): by this much,
 * from BURST_FROM_US after its start for BURST_US */
#define BURST_DELAY_US 40000
#define BURST_FROM_US 8000000
#define BURST_US 2500000
/* a call's first page: 13.5 ms at 24 kHz (as opusdec's first buffer of a call: the pre-skip taken off) */
#define FIRST_SAMPLES 324

typedef struct
{
  GstElement *pipeline, *pp, *src;
  double ppm;
  gboolean burst;               /* its pages come BURST_DELAY_US late over a stretch */
  gint64 start_us;              /* its first page (monotonic us) */
  guint64 offset;               /* samples pushed */
  guint pages;
  gint64 page_at[MAX_PAGES];    /* when page k was pushed */
  guint64 page_end[MAX_PAGES];  /* the samples pushed after it */
  GMutex lock;                  /* the answers come on the streaming thread */
  guint answers;
  gint64 answer_at[MAX_ANSWERS];
  guint64 answer_end[MAX_ANSWERS];      /* its end, in input samples */
} Call;

static GstPadProbeReturn
on_answer (GstPad * pad, GstPadProbeInfo * info, gpointer data)
{
  Call *c = data;
  GstBuffer *buf = GST_PAD_PROBE_INFO_BUFFER (info);
  gint64 now = g_get_monotonic_time ();

  g_mutex_lock (&c->lock);
  if (c->answers < MAX_ANSWERS && GST_BUFFER_PTS_IS_VALID (buf)) {
    c->answer_at[c->answers] = now;
    c->answer_end[c->answers] = gst_util_uint64_scale_round (GST_BUFFER_PTS (buf) + GST_BUFFER_DURATION (buf),
        24000, GST_SECOND);
    c->answers++;
  }
  g_mutex_unlock (&c->lock);
  return GST_PAD_PROBE_OK;
}

/* A client page of @c: two 20 ms buffers at once (the first page: FIRST_SAMPLES), stamped by the samples
 * before them (a contiguous timeline, whatever the clock they came on). */
static void
push_page (Call * c, gint64 now)
{
  guint n = c->pages == 0 ? 1 : 2, len = c->pages == 0 ? FIRST_SAMPLES : PPX_FRAME / 4, i;

  for (i = 0; i < n; i++) {
    GstBuffer *buf = ppx_test_signal_buffer (c->offset, len);

    GST_BUFFER_PTS (buf) = gst_util_uint64_scale_int (c->offset, GST_SECOND, 24000);
    GST_BUFFER_DURATION (buf) = (GstClockTime) len * GST_SECOND / 24000;
    fail_unless_equals_int (gst_app_src_push_buffer (GST_APP_SRC (c->src), buf), GST_FLOW_OK);
    c->offset += len;
  }
  if (c->pages < MAX_PAGES) {
    c->page_at[c->pages] = now;
    c->page_end[c->pages] = c->offset;
  }
  c->pages++;
}

/* page k of @c is due at its start + k pages of 40 ms of its own clock (the burst's late) */
static gint64
page_due (const Call * c)
{
  gint64 due = (gint64) (c->pages * 40000.0 / (1 + c->ppm / 1e6));

  if (c->burst && due >= BURST_FROM_US && due < BURST_FROM_US + BURST_US)
    due += BURST_DELAY_US;
  return c->start_us + due;
}

/* The spread (max - min) of @c's 1 s medians of latency after SETTLE_US, in us, leaving out the answers that came
 * from @skip_from to @skip_to (the burst: every tick waits for the late call then); the medians in @desc. */
static gint64
latency_spread (Call * c, gint64 skip_from, gint64 skip_to, GString * desc)
{
  gint64 lo = G_MAXINT64, hi = G_MININT64, w0 = c->start_us + SETTLE_US;
  gint64 lat[MAX_ANSWERS];
  guint a, p = 0, n = 0;

  g_mutex_lock (&c->lock);
  for (a = 0; a < c->answers; a++) {
    if (c->answer_at[a] < w0 || (c->answer_at[a] >= skip_from && c->answer_at[a] < skip_to)) {
      continue;
    }
    while (p < MIN (c->pages, MAX_PAGES) && c->page_end[p] < c->answer_end[a])
      p++;
    if (p == MIN (c->pages, MAX_PAGES))
      break;
    /* the answers of one window, then their median */
    if (n > 0 && (c->answer_at[a] - w0) / WINDOW_US != (c->answer_at[a - 1] - w0) / WINDOW_US) {
      gint64 m;
      guint i, j;

      for (i = 1; i < n; i++)
        for (j = i; j > 0 && lat[j - 1] > lat[j]; j--) {
          gint64 x = lat[j];

          lat[j] = lat[j - 1];
          lat[j - 1] = x;
        }
      m = lat[n / 2];
      g_string_append_printf (desc, " %.0f", m / 1e3);
      lo = MIN (lo, m);
      hi = MAX (hi, m);
      n = 0;
    }
    lat[n++] = c->answer_at[a] - c->page_at[p];
  }
  g_mutex_unlock (&c->lock);
  return hi >= lo ? hi - lo : G_MAXINT64;
}

GST_START_TEST (test_drifting_clocks)
{
  Call calls[N_CALLS];
  GstPad *pad;
  guint i;
  gint64 b0, end, now;
  gdouble silence[N_CALLS], dropped[N_CALLS];
  gint64 spread[N_CALLS];

  g_setenv ("PPX_TICK_EMULATE", "20", TRUE);
  /* clocks of 2500 ppm followed as they are (the element bounds a rate at 500 ppm by default: a loaded machine's
   * late reads are no drift) */
  g_setenv ("PPX_DRIFT_MAX_PPM", "3000", TRUE);
  memset (calls, 0, sizeof calls);
  for (i = 0; i < N_CALLS; i++) {
    gchar *desc = g_strdup_printf ("appsrc name=src is-live=true format=time caps=\"" PPX_F32_CAPS "\" ! "
        "personaplexduplex name=pp model-dir=\"%s\" greedy=true model-instance-id=drift ! "
        "fakesink async=false pp.text_src ! fakesink async=false", model_dir);
    Call *c = &calls[i];

    g_mutex_init (&c->lock);
    c->ppm = i == 0 || i == 3 ? 0 : i == 1 ? -PPM : PPM;
    c->burst = i == 3;
    c->pipeline = gst_parse_launch (desc, NULL);
    g_free (desc);
    fail_unless (c->pipeline != NULL);
    c->pp = gst_bin_get_by_name (GST_BIN (c->pipeline), "pp");
    c->src = gst_bin_get_by_name (GST_BIN (c->pipeline), "src");
    pad = gst_element_get_static_pad (c->pp, "src");
    gst_pad_add_probe (pad, GST_PAD_PROBE_TYPE_BUFFER, on_answer, c, NULL);
    gst_object_unref (pad);
    fail_if (gst_element_set_state (c->pipeline, GST_STATE_PAUSED) == GST_STATE_CHANGE_FAILURE);
    fail_unless (gst_element_get_state (c->pipeline, NULL, NULL, 30 * GST_SECOND) != GST_STATE_CHANGE_FAILURE);
  }
  g_unsetenv ("PPX_TICK_EMULATE");      /* read when the engine was made */

  b0 = g_get_monotonic_time () + 200000;
  for (i = 0; i < N_CALLS; i++) {
    calls[i].start_us = b0 + (i ? JOIN_US : 0);
    fail_if (gst_element_set_state (calls[i].pipeline, GST_STATE_PLAYING) == GST_STATE_CHANGE_FAILURE);
  }
  end = b0 + RUN_US;
  for (;;) {
    gint64 next = G_MAXINT64;
    Call *due = NULL;

    for (i = 0; i < N_CALLS; i++)
      if (page_due (&calls[i]) < next) {
        next = page_due (&calls[i]);
        due = &calls[i];
      }
    if (next >= end)
      break;
    now = g_get_monotonic_time ();
    if (next > now)
      g_usleep (next - now);
    push_page (due, next);
  }
  g_usleep (300000);            /* the last answers */
  for (i = 0; i < N_CALLS; i++) {
    GstStructure *st = NULL;
    GString *desc = g_string_new (NULL);

    g_object_get (calls[i].pp, "stats", &st, NULL);
    fail_unless (st != NULL);
    fail_unless (gst_structure_get_double (st, "drift-silence-ms", &silence[i]));
    fail_unless (gst_structure_get_double (st, "drift-dropped-ms", &dropped[i]));
    gst_structure_free (st);
    spread[i] = latency_spread (&calls[i], calls[3].start_us + BURST_FROM_US,
        calls[3].start_us + BURST_FROM_US + BURST_US + 1000000, desc);
    GST_INFO ("call %u (%+.0f ppm): latency by second (ms):%s; spread %.1f ms; silence inserted %.0f ms, input "
        "dropped %.0f ms", i, calls[i].ppm, desc->str, spread[i] / 1e3, silence[i], dropped[i]);
    g_printerr ("call %u (%+.0f ppm): latency by second (ms):%s; spread %.1f ms; silence inserted %.0f ms, input "
        "dropped %.0f ms\n", i, calls[i].ppm, desc->str, spread[i] / 1e3, silence[i], dropped[i]);
    g_string_free (desc, TRUE);
  }
  for (i = 0; i < N_CALLS; i++) {
    assert_no_bus_error (calls[i].pipeline);
    gst_element_set_state (calls[i].pipeline, GST_STATE_NULL);
    gst_object_unref (calls[i].pp);
    gst_object_unref (calls[i].src);
    gst_object_unref (calls[i].pipeline);
    g_mutex_clear (&calls[i].lock);
  }
  /* before: the ticks followed the slow call's clock, the first call's latency grew 5 ms/s (40 ms in 8 s, two
   * runs) and the fast one's 10 ms/s (80 ms); now the first call's varies by 20-21 ms (the slow call drifting
   * through the 10 ms after the window before its silence), the fast one's by an arrival and the margins */
  fail_unless (spread[0] <= 32000 && spread[1] <= 32000, "the first calls' latency varied by %.1f and %.1f ms over "
      "the run: the ticks followed the slow call's clock", spread[0] / 1e3, spread[1] / 1e3);
  fail_unless (spread[2] <= 70000, "the fast call's latency varied by %.1f ms over the run: it was not kept in the "
      "window", spread[2] / 1e3);
  fail_unless (silence[0] == 0 && dropped[0] == 0, "the call on the test's clock was moved (%.0f ms of silence, "
      "%.0f ms dropped)", silence[0], dropped[0]);
  /* before: its frames read late 12 in a row were taken for a slow clock (the least of the last 12 arrivals) */
  fail_unless (silence[3] == 0 && dropped[3] == 0, "the call on the test's clock whose pages came %d ms late for %.1f "
      "s was moved (%.0f ms of silence, %.0f ms dropped)", BURST_DELAY_US / 1000, BURST_US / 1e6, silence[3],
      dropped[3]);
  fail_unless (silence[1] > 0 && dropped[1] == 0, "the slow call: %.0f ms of silence, %.0f ms dropped",
      silence[1], dropped[1]);
  fail_unless (silence[2] == 0 && dropped[2] > 0, "the fast call: %.0f ms of silence, %.0f ms dropped",
      silence[2], dropped[2]);
}

GST_END_TEST;

static Suite *
drift_suite (void)
{
  Suite *s = suite_create ("personaplexduplex-drift");
  /* live pipelines held to real time: not under valgrind */
  TCase *rt = element_tcase_new ("realtime", 120);

  suite_add_tcase (s, rt);
  tcase_add_test (rt, test_drifting_clocks);
  return s;
}

int
main (int argc, char **argv)
{
  return element_test_main (argc, argv, drift_suite, "personaplexduplex-drift", FALSE, FALSE);
}
