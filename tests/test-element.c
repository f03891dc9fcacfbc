/* personaplexduplex element tests (GstHarness / gst-check) on a tiny random
 * model made by personaplex-make-model: framing, timestamps, latency,
 * events, properties, errors, state changes, model sharing. */
#include "test-element-util.h"

#include <string.h>

/* A tiny random model with a small tokenizer, made once in main() before
 * the fork per test. */
static char *model_dir;

/* ------------------------------------------------------------------------ */
/* Helpers                                                                  */

/* An element with default settings. */
static GstElement *
new_bare_element (void)
{
  GstElement *el = gst_element_factory_make ("personaplexduplex", NULL);

  fail_unless (el != NULL, "personaplexduplex not found (GST_PLUGIN_PATH?)");
  return el;
}

/* An element on the tiny model, greedy. */
static GstElement *
new_element (const char *instance_id)
{
  GstElement *el = new_bare_element ();

  g_object_set (el, "model-dir", model_dir, "greedy", TRUE,
      "model-instance-id", instance_id, NULL);
  return el;
}

/* A harness on sink/src, playing, with caps set. */
static GstHarness *
new_harness_for (GstElement * el, const char *caps)
{
  GstHarness *h = gst_harness_new_with_element (el, "sink", "src");

  gst_harness_set_src_caps_str (h, caps);
  return h;
}

static GstHarness *
new_harness (const char *caps)
{
  GstElement *el = new_element (NULL);
  GstHarness *h = new_harness_for (el, caps);

  gst_object_unref (el);
  return h;
}

/* Pushes the test signal in buffers of the given sizes (cycled until
 * @total samples are pushed), timestamped from the sample counter. */
static void
push_signal (GstHarness * h, guint64 start, guint64 total,
    const guint * sizes, guint n_sizes)
{
  guint64 done = 0;
  guint i = 0;

  while (done < total) {
    guint n = MIN (sizes[i % n_sizes], total - done);

    fail_unless_equals_int (gst_harness_push (h,
            ppx_test_signal_buffer (start + done, n)), GST_FLOW_OK);
    done += n;
    i++;
  }
}

/* Pulls every queued output buffer; returns the F32 samples appended in
 * order and checks each buffer's PTS/duration against the sample counter
 * starting at @start_pts. */
static GArray *
pull_all_checked (GstHarness * h, GstClockTime start_pts, guint * n_buffers)
{
  GArray *out = g_array_new (FALSE, FALSE, sizeof (float));
  guint64 samples = 0;
  GstBuffer *buf;

  *n_buffers = 0;
  while ((buf = gst_harness_try_pull (h))) {
    gsize size = gst_buffer_get_size (buf);
    guint n = size / sizeof (float);
    GstClockTime pts = start_pts +
        gst_util_uint64_scale_int (samples, GST_SECOND, PPX_RATE);
    GstClockTime end = start_pts +
        gst_util_uint64_scale_int (samples + n, GST_SECOND, PPX_RATE);
    GstMapInfo map;

    fail_unless_equals_uint64 (GST_BUFFER_PTS (buf), pts);
    fail_unless_equals_uint64 (GST_BUFFER_DURATION (buf), end - pts);
    gst_buffer_map (buf, &map, GST_MAP_READ);
    g_array_append_vals (out, map.data, n);
    gst_buffer_unmap (buf, &map);
    gst_buffer_unref (buf);
    samples += n;
    (*n_buffers)++;
  }
  return out;
}

static void
assert_same_samples (GArray * a, GArray * b)
{
  fail_unless_equals_int (a->len, b->len);
  fail_unless (memcmp (a->data, b->data, a->len * sizeof (float)) == 0,
      "outputs differ");
}

static gboolean
has_energy (GArray * a)
{
  double e = 0;
  guint i;

  for (i = 0; i < a->len; i++) {
    float x = g_array_index (a, float, i);
    fail_unless (isfinite (x), "non-finite output sample %u", i);
    e += x * x;
  }
  return e > 0;
}

/* Captures g_warning()s of the plugin's log domain. */
static gchar *last_warning;

static void
capture_warning (const gchar * domain, GLogLevelFlags level,
    const gchar * message, gpointer user_data)
{
  g_free (last_warning);
  last_warning = g_strdup (message);
}

/* Brings a bare element (with its own bus) to PAUSED, expecting failure;
 * returns the error message text. */
static gchar *
expect_start_failure (GstElement * el)
{
  GstBus *bus = gst_bus_new ();
  GstMessage *msg;
  GError *err = NULL;
  gchar *debug = NULL, *text;

  gst_element_set_bus (el, bus);
  fail_unless_equals_int (gst_element_set_state (el, GST_STATE_PAUSED),
      GST_STATE_CHANGE_FAILURE);
  msg = gst_bus_pop_filtered (bus, GST_MESSAGE_ERROR);
  fail_unless (msg != NULL, "no error message posted");
  gst_message_parse_error (msg, &err, &debug);
  GST_INFO ("error: %s (%s)", err->message, debug);
  text = g_strdup (err->message);
  g_error_free (err);
  g_free (debug);
  gst_message_unref (msg);
  fail_unless_equals_int (gst_element_set_state (el, GST_STATE_NULL),
      GST_STATE_CHANGE_SUCCESS);
  gst_element_set_bus (el, NULL);
  gst_object_unref (bus);
  return text;
}

/* ------------------------------------------------------------------------ */
/* Framing and timestamps                                                   */

/* Odd input buffer sizes give one output buffer per 80 ms frame with exact
 * PTS/duration, the same audio as frame-sized input, and after EOS a last
 * buffer truncated to the real input length. */
GST_START_TEST (test_framing_odd_sizes)
{
  static const guint odd[] = { 1, 7, 1000, 1921, 5000 };
  static const guint whole[] = { PPX_FRAME };
  const guint64 total = 3 * (1 + 7 + 1000 + 1921 + 5000);     /* 23787 */
  GstHarness *h1 = new_harness (PPX_F32_CAPS);
  GstHarness *h2 = new_harness (PPX_F32_CAPS);
  GArray *out1, *out2;
  guint n1, n2;

  push_signal (h1, 0, total, odd, G_N_ELEMENTS (odd));
  /* no output before a frame is complete, then exactly one per frame */
  fail_unless_equals_int (gst_harness_buffers_received (h1),
      total / PPX_FRAME);
  fail_unless (gst_harness_push_event (h1, gst_event_new_eos ()));
  out1 = pull_all_checked (h1, 0, &n1);
  fail_unless_equals_int (n1, (total + PPX_FRAME - 1) / PPX_FRAME);
  fail_unless_equals_int (out1->len, total);

  push_signal (h2, 0, total, whole, 1);
  fail_unless (gst_harness_push_event (h2, gst_event_new_eos ()));
  out2 = pull_all_checked (h2, 0, &n2);
  fail_unless_equals_int (n2, n1);
  assert_same_samples (out1, out2);
  fail_unless (has_energy (out1), "the model produced only silence");

  g_array_unref (out1);
  g_array_unref (out2);
  gst_harness_teardown (h1);
  gst_harness_teardown (h2);
}

GST_END_TEST;

/* Output duration equals input duration, for a stream that starts at an
 * arbitrary PTS, and output PTS follow the input's. */
GST_START_TEST (test_total_duration_and_offset)
{
  static const guint sizes[] = { 777 };
  const GstClockTime start = 10 * GST_SECOND + 40 * GST_MSECOND;
  const guint64 start_sample = gst_util_uint64_scale (start, PPX_RATE,
      GST_SECOND);
  const guint64 total = 5 * PPX_FRAME + 333;
  GstHarness *h = new_harness (PPX_F32_CAPS);
  GstClockTime in_duration, out_duration = 0;
  GstBuffer *buf;
  guint n = 0;

  push_signal (h, start_sample, total, sizes, 1);
  fail_unless (gst_harness_push_event (h, gst_event_new_eos ()));
  in_duration = gst_util_uint64_scale_int (start_sample + total, GST_SECOND,
      PPX_RATE) - start;
  while ((buf = gst_harness_try_pull (h))) {
    GstClockTime expect = start + gst_util_uint64_scale_int (n * PPX_FRAME,
        GST_SECOND, PPX_RATE);

    fail_unless_equals_uint64 (GST_BUFFER_PTS (buf), expect);
    if (n == 0)
      fail_unless (GST_BUFFER_FLAG_IS_SET (buf, GST_BUFFER_FLAG_DISCONT));
    else
      fail_if (GST_BUFFER_FLAG_IS_SET (buf, GST_BUFFER_FLAG_DISCONT));
    out_duration += GST_BUFFER_DURATION (buf);
    gst_buffer_unref (buf);
    n++;
  }
  fail_unless_equals_int (n, 6);
  fail_unless_equals_uint64 (out_duration, in_duration);
  gst_harness_teardown (h);
}

GST_END_TEST;

/* A DISCONT buffer that jumps in time: the partial frame of the old
 * timeline is answered with its real length, then timestamps resync. */
GST_START_TEST (test_discont_resync)
{
  GstHarness *h = new_harness (PPX_F32_CAPS);
  GstBuffer *buf;
  const GstClockTime jump = 10 * GST_SECOND;

  fail_unless_equals_int (gst_harness_push (h,
          ppx_test_signal_buffer (0, PPX_FRAME + PPX_FRAME / 2)), GST_FLOW_OK);
  buf = ppx_test_signal_buffer (gst_util_uint64_scale (jump, PPX_RATE,
          GST_SECOND), PPX_FRAME);
  GST_BUFFER_FLAG_SET (buf, GST_BUFFER_FLAG_DISCONT);
  fail_unless_equals_int (gst_harness_push (h, buf), GST_FLOW_OK);

  buf = gst_harness_pull (h);
  fail_unless_equals_uint64 (GST_BUFFER_PTS (buf), 0);
  fail_unless_equals_int (gst_buffer_get_size (buf), PPX_FRAME * 4);
  gst_buffer_unref (buf);
  buf = gst_harness_pull (h);
  fail_unless_equals_uint64 (GST_BUFFER_PTS (buf), PPX_FRAME_NS);
  fail_unless_equals_uint64 (GST_BUFFER_DURATION (buf), PPX_FRAME_NS / 2);
  fail_unless_equals_int (gst_buffer_get_size (buf), PPX_FRAME / 2 * 4);
  gst_buffer_unref (buf);
  buf = gst_harness_pull (h);
  fail_unless_equals_uint64 (GST_BUFFER_PTS (buf), jump);
  fail_unless_equals_uint64 (GST_BUFFER_DURATION (buf), PPX_FRAME_NS);
  fail_unless (GST_BUFFER_FLAG_IS_SET (buf, GST_BUFFER_FLAG_DISCONT));
  gst_buffer_unref (buf);
  fail_unless (gst_harness_try_pull (h) == NULL);
  gst_harness_teardown (h);
}

GST_END_TEST;

/* S16LE in, S16LE out, same framing. */
GST_START_TEST (test_s16le)
{
  GstHarness *h = new_harness (PPX_S16_CAPS);
  const guint total = PPX_FRAME + 1080;
  GstBuffer *in = gst_buffer_new_allocate (NULL, total * 2, NULL);
  GstBuffer *buf;
  GstMapInfo map;
  GstCaps *caps;
  GstAudioInfo info;
  gboolean nonzero = FALSE;
  guint i;

  gst_buffer_map (in, &map, GST_MAP_WRITE);
  for (i = 0; i < total; i++)
    ((gint16 *) map.data)[i] = (gint16) (8000 * sin (2 * G_PI * 300 * i /
            PPX_RATE));
  gst_buffer_unmap (in, &map);
  GST_BUFFER_PTS (in) = 0;
  fail_unless_equals_int (gst_harness_push (h, in), GST_FLOW_OK);
  fail_unless (gst_harness_push_event (h, gst_event_new_eos ()));

  caps = gst_pad_get_current_caps (GST_PAD_PEER (h->sinkpad));
  fail_unless (gst_audio_info_from_caps (&info, caps));
  fail_unless_equals_int (GST_AUDIO_INFO_FORMAT (&info),
      GST_AUDIO_FORMAT_S16LE);
  fail_unless_equals_int (GST_AUDIO_INFO_RATE (&info), PPX_RATE);
  gst_caps_unref (caps);

  buf = gst_harness_pull (h);
  fail_unless_equals_int (gst_buffer_get_size (buf), PPX_FRAME * 2);
  gst_buffer_map (buf, &map, GST_MAP_READ);
  for (i = 0; i < PPX_FRAME; i++)
    nonzero |= ((gint16 *) map.data)[i] != 0;
  gst_buffer_unmap (buf, &map);
  gst_buffer_unref (buf);
  buf = gst_harness_pull (h);
  fail_unless_equals_int (gst_buffer_get_size (buf), 1080 * 2);
  fail_unless_equals_uint64 (GST_BUFFER_DURATION (buf),
      gst_util_uint64_scale_int (total, GST_SECOND, PPX_RATE) - PPX_FRAME_NS);
  gst_buffer_unref (buf);
  fail_unless (nonzero, "S16 output is all zero");
  gst_harness_teardown (h);
}

GST_END_TEST;

/* 16-bit input cut at odd byte offsets (as a byte stream may be) is the
 * same conversation as the same samples in whole-sample buffers, and as
 * the same samples given as F32LE (x / 32768): same frames, same tokens;
 * the 16-bit answer is the float answer rounded to 16 bits. */
static GArray *
run_s16_bytes (const gint16 * pcm, guint total, const guint * sizes,
    guint n_sizes, GArray * tokens)
{
  GstElement *el = new_element (NULL);
  GstHarness *h;
  GstBus *bus = gst_bus_new ();
  GArray *out = g_array_new (FALSE, FALSE, sizeof (float));
  const guint8 *bytes = (const guint8 *) pcm;
  gsize done = 0;
  GstBuffer *buf;
  GstMessage *msg;
  guint i = 0;

  g_object_set (el, "frame-messages", TRUE, NULL);
  gst_element_set_bus (el, bus);
  h = new_harness_for (el, PPX_S16_CAPS);
  while (done < total * 2) {
    gsize n = MIN (sizes[i++ % n_sizes], total * 2 - done);

    fail_unless_equals_int (gst_harness_push (h,
            gst_buffer_new_memdup (bytes + done, n)), GST_FLOW_OK);
    done += n;
  }
  fail_unless (gst_harness_push_event (h, gst_event_new_eos ()));
  while ((buf = gst_harness_try_pull (h))) {
    GstMapInfo map;
    gsize k;

    gst_buffer_map (buf, &map, GST_MAP_READ);
    for (k = 0; k < map.size / 2; k++) {
      float x = ((const gint16 *) map.data)[k] / 32768.0f;
      g_array_append_val (out, x);
    }
    gst_buffer_unmap (buf, &map);
    gst_buffer_unref (buf);
  }
  while ((msg = ppx_test_pop_element_message (bus, "personaplex-frame", 0))) {
    const GValue *v = gst_structure_get_value (gst_message_get_structure
        (msg), "tokens");
    guint k;

    for (k = 0; k < gst_value_array_get_size (v); k++) {
      gint t = g_value_get_int (gst_value_array_get_value (v, k));
      g_array_append_val (tokens, t);
    }
    gst_message_unref (msg);
  }
  gst_element_set_bus (el, NULL);
  gst_object_unref (bus);
  gst_harness_teardown (h);
  gst_object_unref (el);
  return out;
}

GST_START_TEST (test_s16le_odd_bytes)
{
  static const guint whole[] = { 2 * 1500 };
  static const guint odd[] = { 1001, 3, 4095, 1 };
  const guint total = 5 * PPX_FRAME + 333;
  gint16 *pcm = g_new (gint16, total);
  GArray *tok_whole = g_array_new (FALSE, FALSE, sizeof (gint));
  GArray *tok_odd = g_array_new (FALSE, FALSE, sizeof (gint));
  GArray *tok_f32 = g_array_new (FALSE, FALSE, sizeof (gint));
  GArray *a, *b, *f;
  GstElement *el;
  GstHarness *h;
  GstBus *bus = gst_bus_new ();
  GstBuffer *buf;
  GstMapInfo map;
  GstMessage *msg;
  guint i;

  for (i = 0; i < total; i++)
    pcm[i] = (gint16) (12000 * sin (2 * G_PI * 230 * i / PPX_RATE) +
        3000 * sin (2 * G_PI * 1770 * i / PPX_RATE));
  a = run_s16_bytes (pcm, total, whole, 1, tok_whole);
  b = run_s16_bytes (pcm, total, odd, G_N_ELEMENTS (odd), tok_odd);
  fail_unless_equals_int (a->len, total);
  fail_unless (has_energy (a));
  assert_same_samples (b, a);
  fail_unless_equals_int (tok_whole->len, 6 * 17);
  fail_unless_equals_int (tok_odd->len, tok_whole->len);
  fail_unless (memcmp (tok_odd->data, tok_whole->data,
          tok_whole->len * sizeof (gint)) == 0, "tokens differ");

  /* the same samples as F32LE */
  el = new_element (NULL);
  g_object_set (el, "frame-messages", TRUE, NULL);
  gst_element_set_bus (el, bus);
  h = new_harness_for (el, PPX_F32_CAPS);
  buf = gst_buffer_new_allocate (NULL, total * sizeof (float), NULL);
  gst_buffer_map (buf, &map, GST_MAP_WRITE);
  for (i = 0; i < total; i++)
    ((float *) map.data)[i] = pcm[i] / 32768.0f;
  gst_buffer_unmap (buf, &map);
  GST_BUFFER_PTS (buf) = 0;
  fail_unless_equals_int (gst_harness_push (h, buf), GST_FLOW_OK);
  fail_unless (gst_harness_push_event (h, gst_event_new_eos ()));
  f = pull_all_checked (h, 0, &i);
  while ((msg = ppx_test_pop_element_message (bus, "personaplex-frame", 0))) {
    const GValue *v = gst_structure_get_value (gst_message_get_structure
        (msg), "tokens");
    guint k;

    for (k = 0; k < gst_value_array_get_size (v); k++) {
      gint t = g_value_get_int (gst_value_array_get_value (v, k));
      g_array_append_val (tok_f32, t);
    }
    gst_message_unref (msg);
  }
  fail_unless_equals_int (tok_f32->len, tok_whole->len);
  fail_unless (memcmp (tok_f32->data, tok_whole->data,
          tok_whole->len * sizeof (gint)) == 0,
      "16-bit input gives other tokens than float input");
  fail_unless_equals_int (f->len, a->len);
  for (i = 0; i < f->len; i++) {
    float want = CLAMP (g_array_index (f, float, i), -1.0f, 32767 / 32768.0f);

    fail_unless (fabsf (g_array_index (a, float, i) - want) <= 0.5f / 32768,
        "sample %u: 16-bit %g, float %g", i, g_array_index (a, float, i),
        g_array_index (f, float, i));
  }

  gst_element_set_bus (el, NULL);
  gst_object_unref (bus);
  gst_harness_teardown (h);
  gst_object_unref (el);
  g_array_unref (a);
  g_array_unref (b);
  g_array_unref (f);
  g_array_unref (tok_whole);
  g_array_unref (tok_odd);
  g_array_unref (tok_f32);
  g_free (pcm);
}

GST_END_TEST;

/* Both audio pads carry one format: what downstream accepts narrows what
 * the sink pad offers upstream, and the other way round. */
GST_START_TEST (test_caps_query)
{
  GstElement *el = new_element (NULL);
  GstHarness *h = gst_harness_new_with_element (el, "sink", "src");
  GstCaps *caps, *s16 = gst_caps_from_string (PPX_S16_CAPS);
  GstCaps *f32 = gst_caps_from_string (PPX_F32_CAPS);
  GstPad *sinkpad = GST_PAD_PEER (h->srcpad);
  GstPad *srcpad = GST_PAD_PEER (h->sinkpad);

  /* unconstrained: both formats */
  caps = gst_pad_query_caps (sinkpad, NULL);
  fail_unless (gst_caps_can_intersect (caps, s16));
  fail_unless (gst_caps_can_intersect (caps, f32));
  gst_caps_unref (caps);

  /* downstream takes S16LE only: so does the sink pad */
  gst_harness_set_sink_caps (h, gst_caps_ref (s16));
  caps = gst_pad_query_caps (sinkpad, NULL);
  fail_unless (gst_caps_can_intersect (caps, s16));
  fail_if (gst_caps_can_intersect (caps, f32), "%" GST_PTR_FORMAT, caps);
  gst_caps_unref (caps);
  fail_if (gst_pad_query_accept_caps (sinkpad, f32));

  /* upstream offers F32LE only: so does src */
  gst_harness_set_src_caps (h, gst_caps_ref (f32));
  caps = gst_pad_query_caps (srcpad, NULL);
  fail_unless (gst_caps_can_intersect (caps, f32));
  fail_if (gst_caps_can_intersect (caps, s16), "%" GST_PTR_FORMAT, caps);
  gst_caps_unref (caps);

  gst_caps_unref (s16);
  gst_caps_unref (f32);
  gst_harness_teardown (h);
  gst_object_unref (el);
}

GST_END_TEST;

/* NaN/Inf input is replaced by silence: the output stays finite. */
GST_START_TEST (test_nan_input)
{
  GstHarness *h = new_harness (PPX_F32_CAPS);
  GstBuffer *in = gst_buffer_new_allocate (NULL, PPX_FRAME * 4, NULL);
  GArray *out;
  GstMapInfo map;
  guint i, n;

  gst_buffer_map (in, &map, GST_MAP_WRITE);
  for (i = 0; i < PPX_FRAME; i++)
    ((float *) map.data)[i] = i % 3 ? NAN : INFINITY;
  gst_buffer_unmap (in, &map);
  GST_BUFFER_PTS (in) = 0;
  fail_unless_equals_int (gst_harness_push (h, in), GST_FLOW_OK);
  out = pull_all_checked (h, 0, &n);
  fail_unless_equals_int (n, 1);
  has_energy (out);             /* checks finiteness */
  g_array_unref (out);
  gst_harness_teardown (h);
}

GST_END_TEST;

/* ------------------------------------------------------------------------ */
/* Latency, events                                                          */

GST_START_TEST (test_latency)
{
  GstHarness *h = new_harness (PPX_F32_CAPS);
  GstHarness *th = gst_harness_new_with_element (h->element, NULL,
      "text_src");
  GstQuery *q;
  gboolean live;
  GstClockTime min, max;

  gst_harness_set_upstream_latency (h, 20 * GST_MSECOND);
  /* upstream + one 80 ms frame + processing-deadline (80 ms default) */
  fail_unless_equals_uint64 (gst_harness_query_latency (h),
      20 * GST_MSECOND + 160 * GST_MSECOND);

  g_object_set (h->element, "processing-deadline", 10 * GST_MSECOND, NULL);
  fail_unless_equals_uint64 (gst_harness_query_latency (h),
      20 * GST_MSECOND + 90 * GST_MSECOND);

  /* the text pad reports the same */
  q = gst_query_new_latency ();
  fail_unless (gst_pad_peer_query (th->sinkpad, q));
  gst_query_parse_latency (q, &live, &min, &max);
  fail_unless (live);
  fail_unless_equals_uint64 (min, 110 * GST_MSECOND);
  gst_query_unref (q);

  gst_harness_teardown (th);
  gst_harness_teardown (h);
}

GST_END_TEST;

/* A GAP event becomes silence frames: output keeps flowing with contiguous
 * timestamps, and text_src gets a buffer or a GAP for every frame. */
GST_START_TEST (test_gap)
{
  GstHarness *h = new_harness (PPX_F32_CAPS);
  GstHarness *th = gst_harness_new_with_element (h->element, NULL,
      "text_src");
  GstEvent *ev;
  GArray *out;
  guint n, text_frames = 0;
  GstBuffer *tb;

  fail_unless_equals_int (gst_harness_push (h,
          ppx_test_signal_buffer (0, PPX_FRAME)), GST_FLOW_OK);
  fail_unless (gst_harness_push_event (h, gst_event_new_gap (PPX_FRAME_NS,
              3 * PPX_FRAME_NS)));
  fail_unless_equals_int (gst_harness_push (h,
          ppx_test_signal_buffer (4 * PPX_FRAME, PPX_FRAME)), GST_FLOW_OK);

  out = pull_all_checked (h, 0, &n);
  fail_unless_equals_int (n, 5);
  fail_unless (has_energy (out));
  g_array_unref (out);

  /* text_src has a thread of its own: the EOS after the frames tells when
   * they have all arrived */
  fail_unless (gst_harness_push_event (h, gst_event_new_eos ()));
  while ((ev = gst_harness_pull_event (th))
      && GST_EVENT_TYPE (ev) != GST_EVENT_EOS) {
    if (GST_EVENT_TYPE (ev) == GST_EVENT_GAP) {
      GstClockTime ts, dur;

      gst_event_parse_gap (ev, &ts, &dur);
      fail_unless_equals_uint64 (ts % PPX_FRAME_NS, 0);
      fail_unless_equals_uint64 (dur, PPX_FRAME_NS);
      text_frames++;
    }
    gst_event_unref (ev);
  }
  fail_unless (ev != NULL, "no EOS on text_src");
  gst_event_unref (ev);
  while ((tb = gst_harness_try_pull (th))) {
    fail_unless_equals_uint64 (GST_BUFFER_DURATION (tb), PPX_FRAME_NS);
    gst_buffer_unref (tb);
    text_frames++;
  }
  fail_unless_equals_int (text_frames, 5);
  gst_harness_teardown (th);
  gst_harness_teardown (h);
}

GST_END_TEST;

/* text_src: derived stream-start "<id>/text" with the same group id, utf8
 * caps, the segment, then for every frame either a text buffer or a GAP
 * with the frame's timestamps; each text buffer is also posted as a
 * personaplex-text message with the same text and PTS. Sampling (not greedy)
 * so that the random model emits text ids that the tokenizer knows. */
GST_START_TEST (test_text_pad)
{
  const guint n_frames = 40;
  GstElement *el = new_element (NULL);
  GstHarness *h, *th;
  GstBus *bus = gst_bus_new ();
  GstEvent *ev;
  GstBuffer *tb;
  gchar *audio_id, *expect_id;
  gboolean seen_start = FALSE, seen_caps = FALSE, seen_segment = FALSE;
  guint gaps = 0, texts = 0, messages = 0;
  GPtrArray *buffer_texts = g_ptr_array_new_with_free_func (g_free);
  GArray *buffer_pts = g_array_new (FALSE, FALSE, sizeof (guint64));
  GstMessage *msg;

  g_object_set (el, "greedy", FALSE, "seed", (guint64) 7, NULL);
  gst_element_set_bus (el, bus);
  h = new_harness_for (el, PPX_F32_CAPS);
  th = gst_harness_new_with_element (h->element, NULL, "text_src");
  fail_unless_equals_int (gst_harness_push (h,
          ppx_test_signal_buffer (0, n_frames * PPX_FRAME)), GST_FLOW_OK);
  fail_unless (gst_harness_push_event (h, gst_event_new_eos ()));

  /* text_src has a thread of its own: wait for its EOS */
  audio_id = gst_pad_get_stream_id (h->element->sinkpads->data);
  expect_id = g_strdup_printf ("%s/text", audio_id);
  while ((ev = gst_harness_pull_event (th))) {
    gboolean eos = GST_EVENT_TYPE (ev) == GST_EVENT_EOS;

    switch (GST_EVENT_TYPE (ev)) {
      case GST_EVENT_STREAM_START:{
        const gchar *id;

        gst_event_parse_stream_start (ev, &id);
        fail_unless_equals_string (id, expect_id);
        seen_start = TRUE;
        break;
      }
      case GST_EVENT_CAPS:{
        GstCaps *caps;

        gst_event_parse_caps (ev, &caps);
        fail_unless (gst_structure_has_name (gst_caps_get_structure (caps,
                    0), "text/x-raw"));
        fail_unless_equals_string (gst_structure_get_string
            (gst_caps_get_structure (caps, 0), "format"), "utf8");
        fail_unless (seen_start);
        seen_caps = TRUE;
        break;
      }
      case GST_EVENT_SEGMENT:
        fail_unless (seen_caps);
        seen_segment = TRUE;
        break;
      case GST_EVENT_GAP:{
        GstClockTime ts, dur;

        fail_unless (seen_segment);
        gst_event_parse_gap (ev, &ts, &dur);
        fail_unless_equals_uint64 (ts % PPX_FRAME_NS, 0);
        fail_unless_equals_uint64 (dur, PPX_FRAME_NS);
        gaps++;
        break;
      }
      default:
        break;
    }
    gst_event_unref (ev);
    if (eos)
      break;
  }
  fail_unless (ev != NULL, "no EOS on text_src");
  while ((tb = gst_harness_try_pull (th))) {
    GstMapInfo map;
    guint64 pts = GST_BUFFER_PTS (tb);

    gst_buffer_map (tb, &map, GST_MAP_READ);
    fail_unless (map.size > 0);
    fail_unless (g_utf8_validate ((const gchar *) map.data, map.size, NULL));
    g_ptr_array_add (buffer_texts, g_strndup ((const gchar *) map.data,
            map.size));
    gst_buffer_unmap (tb, &map);
    fail_unless_equals_uint64 (pts % PPX_FRAME_NS, 0);
    fail_unless_equals_uint64 (GST_BUFFER_DURATION (tb), PPX_FRAME_NS);
    g_array_append_val (buffer_pts, pts);
    gst_buffer_unref (tb);
    texts++;
  }
  while ((msg = ppx_test_pop_element_message (bus, "personaplex-text", 0))) {
    const GstStructure *s = gst_message_get_structure (msg);
    guint64 pts, frame;

    fail_unless (messages < texts, "more text messages than text buffers");
    fail_unless_equals_string (gst_structure_get_string (s, "text"),
        g_ptr_array_index (buffer_texts, messages));
    fail_unless (gst_structure_get_uint64 (s, "pts", &pts));
    fail_unless_equals_uint64 (pts, g_array_index (buffer_pts, guint64,
            messages));
    fail_unless (gst_structure_get_uint64 (s, "frame", &frame));
    fail_unless_equals_uint64 (frame * PPX_FRAME_NS, pts);
    gst_message_unref (msg);
    messages++;
  }
  GST_INFO ("%u text pieces, %u gaps", texts, gaps);
  fail_unless_equals_int (gaps + texts, n_frames);
  fail_unless (texts > 0, "no text piece in %u sampled frames", n_frames);
  fail_unless_equals_int (messages, texts);

  g_ptr_array_unref (buffer_texts);
  g_array_unref (buffer_pts);
  g_free (audio_id);
  g_free (expect_id);
  gst_element_set_bus (el, NULL);
  gst_object_unref (bus);
  gst_harness_teardown (th);
  gst_harness_teardown (h);
  gst_object_unref (el);
}

GST_END_TEST;

/* An unlinked text_src is not an error: the same sampled conversation as
 * in test_text_pad (text pieces included) flows with only src linked. */
GST_START_TEST (test_text_pad_unlinked)
{
  GstElement *el = new_element (NULL);
  GstHarness *h;
  GstBus *bus = gst_bus_new ();
  GstMessage *msg;
  guint i, messages = 0;

  g_object_set (el, "greedy", FALSE, "seed", (guint64) 7, NULL);
  gst_element_set_bus (el, bus);
  h = new_harness_for (el, PPX_F32_CAPS);
  for (i = 0; i < 40; i++)
    fail_unless_equals_int (gst_harness_push (h,
            ppx_test_signal_buffer (i * PPX_FRAME, PPX_FRAME)), GST_FLOW_OK);
  fail_unless_equals_int (gst_harness_buffers_received (h), 40);
  while ((msg = ppx_test_pop_element_message (bus, "personaplex-text", 0))) {
    gst_message_unref (msg);
    messages++;
  }
  fail_unless (messages > 0, "no text was produced, the test proves nothing");
  gst_element_set_bus (el, NULL);
  gst_object_unref (bus);
  gst_harness_teardown (h);
  gst_object_unref (el);
}

GST_END_TEST;

/* text-prompt goes through the model's tokenizer. */
GST_START_TEST (test_text_prompt)
{
  GstElement *el = new_element (NULL);
  GstHarness *h;
  GArray *out;
  guint n;

  g_object_set (el, "text-prompt", "You enjoy having a good conversation.",
      NULL);
  h = new_harness_for (el, PPX_F32_CAPS);
  fail_unless_equals_int (gst_harness_push (h,
          ppx_test_signal_buffer (0, PPX_FRAME)), GST_FLOW_OK);
  out = pull_all_checked (h, 0, &n);
  fail_unless_equals_int (n, 1);
  g_array_unref (out);
  gst_harness_teardown (h);
  gst_object_unref (el);
}

GST_END_TEST;

/* FLUSH resets the conversation: the same input after a flush gives the
 * same output as a fresh element (greedy decoding). */
GST_START_TEST (test_flush_resets_conversation)
{
  static const guint sizes[] = { 1500 };
  GstHarness *h = new_harness (PPX_F32_CAPS);
  GstHarness *fresh = new_harness (PPX_F32_CAPS);
  GstSegment segment;
  GArray *first, *after_flush, *reference;
  guint n;

  push_signal (h, 0, 4 * PPX_FRAME + 100, sizes, 1);
  first = pull_all_checked (h, 0, &n);
  fail_unless_equals_int (n, 4);

  /* a partial frame is pending; the flush drops it */
  fail_unless (gst_harness_push_event (h, gst_event_new_flush_start ()));
  fail_unless (gst_harness_push_event (h, gst_event_new_flush_stop (TRUE)));
  gst_segment_init (&segment, GST_FORMAT_TIME);
  fail_unless (gst_harness_push_event (h, gst_event_new_segment (&segment)));
  push_signal (h, 0, 4 * PPX_FRAME, sizes, 1);
  after_flush = pull_all_checked (h, 0, &n);
  fail_unless_equals_int (n, 4);

  push_signal (fresh, 0, 4 * PPX_FRAME, sizes, 1);
  reference = pull_all_checked (fresh, 0, &n);

  assert_same_samples (first, reference);
  assert_same_samples (after_flush, reference);
  g_array_unref (first);
  g_array_unref (after_flush);
  g_array_unref (reference);
  gst_harness_teardown (h);
  gst_harness_teardown (fresh);
}

GST_END_TEST;

/* Waits (up to the harness's 60 s) for EOS among @h's events. */
static gboolean
pull_until_eos (GstHarness * h)
{
  GstEvent *ev;
  gboolean eos = FALSE;

  while (!eos && (ev = gst_harness_pull_event (h))) {
    eos = GST_EVENT_TYPE (ev) == GST_EVENT_EOS;
    gst_event_unref (ev);
  }
  return eos;
}

/* EOS drains the partial frame and reaches both source pads, after the
 * last buffer. */
GST_START_TEST (test_eos_both_pads)
{
  GstHarness *h = new_harness (PPX_F32_CAPS);
  GstHarness *th = gst_harness_new_with_element (h->element, NULL,
      "text_src");

  fail_unless_equals_int (gst_harness_push (h,
          ppx_test_signal_buffer (0, PPX_FRAME + 10)), GST_FLOW_OK);
  fail_unless_equals_int (gst_harness_buffers_received (h), 1);
  fail_unless (gst_harness_push_event (h, gst_event_new_eos ()));
  fail_unless_equals_int (gst_harness_buffers_received (h), 2);
  fail_unless (pull_until_eos (h), "no EOS on src");
  fail_unless (pull_until_eos (th), "no EOS on text_src");
  gst_harness_teardown (th);
  gst_harness_teardown (h);
}

GST_END_TEST;

/* Equal caps again are accepted; another format mid-stream is refused
 * with a clear error. */
GST_START_TEST (test_caps_change)
{
  GstHarness *h = new_harness (PPX_F32_CAPS);
  GstBus *bus = gst_bus_new ();
  GstMessage *msg;
  GError *err = NULL;
  GstCaps *caps;

  gst_element_set_bus (h->element, bus);
  fail_unless_equals_int (gst_harness_push (h,
          ppx_test_signal_buffer (0, PPX_FRAME)), GST_FLOW_OK);
  caps = gst_caps_from_string (PPX_F32_CAPS);
  fail_unless (gst_harness_push_event (h, gst_event_new_caps (caps)));
  gst_caps_unref (caps);
  /* the harness stores the sticky event whatever the element answers */
  caps = gst_caps_from_string (PPX_S16_CAPS);
  gst_harness_push_event (h, gst_event_new_caps (caps));
  gst_caps_unref (caps);
  fail_unless_equals_int (gst_harness_push (h, ppx_test_signal_buffer
          (PPX_FRAME, PPX_FRAME)), GST_FLOW_NOT_NEGOTIATED);
  msg = gst_bus_pop_filtered (bus, GST_MESSAGE_ERROR);
  fail_unless (msg != NULL);
  gst_message_parse_error (msg, &err, NULL);
  fail_unless (strstr (err->message, "F32LE") && strstr (err->message,
          "S16LE"), "unclear message: %s", err->message);
  g_error_free (err);
  gst_message_unref (msg);
  gst_element_set_bus (h->element, NULL);
  gst_object_unref (bus);
  gst_harness_teardown (h);
}

GST_END_TEST;

/* ------------------------------------------------------------------------ */
/* Messages and stats                                                       */

static void
check_stats_fields (const GstStructure * s)
{
  static const struct
  {
    const gchar *name;
    GType type;
  } fields[] = {
    {"frames", G_TYPE_UINT64}, {"mean-step-ms", G_TYPE_DOUBLE},
    {"max-step-ms", G_TYPE_DOUBLE}, {"overruns", G_TYPE_UINT64},
    {"memory-bytes", G_TYPE_UINT64}, {"backend", G_TYPE_STRING},
    {"quantization", G_TYPE_STRING}, {"model-users", G_TYPE_UINT},
    {"timestamp", G_TYPE_UINT64}, {"running-time", G_TYPE_UINT64},
  };
  guint i;

  fail_unless (gst_structure_has_name (s, "personaplex-stats"));
  for (i = 0; i < G_N_ELEMENTS (fields); i++)
    fail_unless (gst_structure_has_field_typed (s, fields[i].name,
            fields[i].type), "field %s", fields[i].name);
}

GST_START_TEST (test_stats)
{
  GstElement *el = new_element (NULL);
  GstHarness *h;
  GstBus *bus = gst_bus_new ();
  GstMessage *msg;
  const GstStructure *s;
  GstStructure *prop;
  guint64 frames, memory;
  gdouble mean, max;
  guint count = 0;

  g_object_set (el, "stats-interval", 2, NULL);
  gst_element_set_bus (el, bus);
  h = new_harness_for (el, PPX_F32_CAPS);
  fail_unless_equals_int (gst_harness_push (h,
          ppx_test_signal_buffer (0, 5 * PPX_FRAME)), GST_FLOW_OK);
  while ((msg = ppx_test_pop_element_message (bus, "personaplex-stats", 0))) {
    s = gst_message_get_structure (msg);
    check_stats_fields (s);
    fail_unless (gst_structure_get_uint64 (s, "frames", &frames));
    fail_unless_equals_uint64 (frames, 2 * (count + 1));
    gst_message_unref (msg);
    count++;
  }
  fail_unless_equals_int (count, 2);

  /* one more at EOS, with everything */
  fail_unless (gst_harness_push_event (h, gst_event_new_eos ()));
  msg = ppx_test_pop_element_message (bus, "personaplex-stats", 0);
  fail_unless (msg != NULL);
  s = gst_message_get_structure (msg);
  check_stats_fields (s);
  fail_unless (gst_structure_get_uint64 (s, "frames", &frames));
  fail_unless_equals_uint64 (frames, 5);
  fail_unless (gst_structure_get_double (s, "mean-step-ms", &mean));
  fail_unless (gst_structure_get_double (s, "max-step-ms", &max));
  fail_unless (mean > 0 && max >= mean);
  fail_unless (gst_structure_get_uint64 (s, "memory-bytes", &memory));
  fail_unless (memory > 0);
  gst_message_unref (msg);

  /* the property has the same structure */
  prop = ppx_test_stats (el);
  check_stats_fields (prop);
  fail_unless (gst_structure_get_uint64 (prop, "frames", &frames));
  fail_unless_equals_uint64 (frames, 5);
  gst_structure_free (prop);

  gst_element_set_bus (el, NULL);
  gst_object_unref (bus);
  gst_object_unref (el);
  gst_harness_teardown (h);
}

GST_END_TEST;

/* frame-messages=true: one personaplex-frame per frame with 17 tokens. */
GST_START_TEST (test_frame_messages)
{
  GstElement *el = new_element (NULL);
  GstHarness *h;
  GstBus *bus = gst_bus_new ();
  GstMessage *msg;
  guint count = 0;

  g_object_set (el, "frame-messages", TRUE, NULL);
  gst_element_set_bus (el, bus);
  h = new_harness_for (el, PPX_F32_CAPS);
  fail_unless_equals_int (gst_harness_push (h,
          ppx_test_signal_buffer (0, 3 * PPX_FRAME)), GST_FLOW_OK);
  while ((msg = ppx_test_pop_element_message (bus, "personaplex-frame", 0))) {
    const GstStructure *s = gst_message_get_structure (msg);
    const GValue *tokens = gst_structure_get_value (s, "tokens");
    guint64 frame, pts;
    gdouble step_ms;

    fail_unless (tokens != NULL && GST_VALUE_HOLDS_ARRAY (tokens));
    fail_unless_equals_int (gst_value_array_get_size (tokens), 17);
    fail_unless (G_VALUE_HOLDS_INT (gst_value_array_get_value (tokens, 0)));
    fail_unless (gst_structure_get_uint64 (s, "frame", &frame));
    fail_unless_equals_uint64 (frame, count);
    fail_unless (gst_structure_get_uint64 (s, "pts", &pts));
    fail_unless_equals_uint64 (pts, count * PPX_FRAME_NS);
    fail_unless (gst_structure_get_double (s, "step-ms", &step_ms));
    fail_unless (gst_structure_has_field (s, "text"));
    gst_message_unref (msg);
    count++;
  }
  fail_unless_equals_int (count, 3);
  gst_element_set_bus (el, NULL);
  gst_object_unref (bus);
  gst_object_unref (el);
  gst_harness_teardown (h);
}

GST_END_TEST;

/* ------------------------------------------------------------------------ */
/* Properties and errors                                                    */

GST_START_TEST (test_property_validation)
{
  GstElement *el = new_bare_element ();
  gint q, topk;
  gchar *tokens;
  guint handler = g_log_set_handler (G_LOG_DOMAIN, G_LOG_LEVEL_WARNING,
      capture_warning, NULL);

  /* enums by nick; a bad nick leaves the value alone */
  gst_util_set_object_arg (G_OBJECT (el), "quantization", "int8");
  g_object_get (el, "quantization", &q, NULL);
  fail_unless_equals_int (q, 2);
  gst_util_set_object_arg (G_OBJECT (el), "quantization", "int3");
  g_object_get (el, "quantization", &q, NULL);
  fail_unless_equals_int (q, 2);
  gst_util_set_object_arg (G_OBJECT (el), "backend", "cpu");
  g_object_get (el, "backend", &q, NULL);
  fail_unless_equals_int (q, 1);

  /* out of range */
  ASSERT_WARNING (g_object_set (el, "topk-audio", 0, NULL));
  g_object_get (el, "topk-audio", &topk, NULL);
  fail_unless_equals_int (topk, 250);

  /* text-prompt-tokens: kept as given, checked when starting
   * (test_bad_text_prompt_tokens) */
  g_object_set (el, "text-prompt-tokens", " 1, 529 ,2047", NULL);
  g_object_get (el, "text-prompt-tokens", &tokens, NULL);
  fail_unless_equals_string (tokens, " 1, 529 ,2047");
  g_free (tokens);

  g_log_remove_handler (G_LOG_DOMAIN, handler);
  gst_object_unref (el);
}

GST_END_TEST;

/* Settings applied at start cannot change in PAUSED/PLAYING. */
GST_START_TEST (test_property_refused_when_playing)
{
  GstHarness *h = new_harness (PPX_F32_CAPS);
  gchar *dir;
  gboolean greedy;
  guint interval;
  guint handler = g_log_set_handler (G_LOG_DOMAIN, G_LOG_LEVEL_WARNING,
      capture_warning, NULL);

  g_clear_pointer (&last_warning, g_free);
  g_object_set (h->element, "model-dir", "/somewhere/else", NULL);
  fail_unless (last_warning != NULL && strstr (last_warning, "model-dir"));
  g_object_get (h->element, "model-dir", &dir, NULL);
  fail_unless_equals_string (dir, model_dir);
  g_free (dir);

  g_clear_pointer (&last_warning, g_free);
  g_object_set (h->element, "greedy", FALSE, NULL);
  fail_unless (last_warning != NULL);
  g_object_get (h->element, "greedy", &greedy, NULL);
  fail_unless (greedy);

  /* mutable-playing ones do change */
  g_clear_pointer (&last_warning, g_free);
  g_object_set (h->element, "stats-interval", 7, NULL);
  fail_unless (last_warning == NULL);
  g_object_get (h->element, "stats-interval", &interval, NULL);
  fail_unless_equals_int (interval, 7);

  g_log_remove_handler (G_LOG_DOMAIN, handler);
  g_clear_pointer (&last_warning, g_free);
  gst_harness_teardown (h);
}

GST_END_TEST;

GST_START_TEST (test_missing_model_dir)
{
  GstElement *el = new_bare_element ();
  gchar *msg;

  /* unset */
  msg = expect_start_failure (el);
  fail_unless (strstr (msg, "model-dir") != NULL, "message: %s", msg);
  g_free (msg);

  /* absent */
  g_object_set (el, "model-dir", "/nonexistent/ppx-model", NULL);
  msg = expect_start_failure (el);
  fail_unless (strstr (msg, "/nonexistent/ppx-model") != NULL,
      "message does not name the directory: %s", msg);
  g_free (msg);

  /* and the element is still usable: NULL <-> READY */
  fail_unless_equals_int (gst_element_set_state (el, GST_STATE_READY),
      GST_STATE_CHANGE_SUCCESS);
  fail_unless_equals_int (gst_element_set_state (el, GST_STATE_NULL),
      GST_STATE_CHANGE_SUCCESS);
  gst_object_unref (el);
}

GST_END_TEST;

/* A bad text-prompt-tokens list is an error the application sees: the
 * start fails with an element error naming the item, for each bad item;
 * the element starts once the list is good. */
GST_START_TEST (test_bad_text_prompt_tokens)
{
  static const struct
  {
    const gchar *tokens, *item;
  } bad[] = {
    {"1,abc,3", "item 2 ('abc')"},
    {"1,-2", "item 2 ('-2')"},
    {"7,,9", "item 2 ('')"},
    {"99999999999", "item 1 ('99999999999')"},
  };
  GstElement *el = new_element (NULL);
  guint i;

  for (i = 0; i < G_N_ELEMENTS (bad); i++) {
    gchar *msg;

    g_object_set (el, "text-prompt-tokens", bad[i].tokens, NULL);
    msg = expect_start_failure (el);
    fail_unless (strstr (msg, "text-prompt-tokens") != NULL
        && strstr (msg, bad[i].item) != NULL,
        "'%s': the message does not name the item: %s", bad[i].tokens, msg);
    g_free (msg);
  }
  g_object_set (el, "text-prompt-tokens", " 1, 2 ,3", NULL);
  fail_unless (gst_element_set_state (el, GST_STATE_PAUSED) !=
      GST_STATE_CHANGE_FAILURE);
  fail_unless_equals_int (gst_element_set_state (el, GST_STATE_NULL),
      GST_STATE_CHANGE_SUCCESS);
  gst_object_unref (el);
}

GST_END_TEST;

static void
copy_file (const char *from, const char *to)
{
  gchar *data;
  gsize len;

  fail_unless (g_file_get_contents (from, &data, &len, NULL));
  fail_unless (g_file_set_contents (to, data, len, NULL));
  g_free (data);
}

GST_START_TEST (test_corrupt_model)
{
  GError *err = NULL;
  gchar *dir = g_dir_make_tmp ("ppx-corrupt-XXXXXX", &err);
  const char *names[] = { "config.json",
    "tokenizer-e351c8d8-checkpoint125.safetensors"
  };
  gchar *lm = g_build_filename (dir, "model.safetensors", NULL);
  GstElement *el = new_bare_element ();
  gchar *msg;
  guint i;

  for (i = 0; i < G_N_ELEMENTS (names); i++) {
    gchar *from = g_build_filename (model_dir, names[i], NULL);
    gchar *to = g_build_filename (dir, names[i], NULL);

    copy_file (from, to);
    g_free (from);
    g_free (to);
  }
  /* a header length far beyond the file */
  fail_unless (g_file_set_contents (lm, "\xff\xff\xff\x00\x00\x00\x00\x00{}",
          10, NULL));
  g_object_set (el, "model-dir", dir, NULL);
  msg = expect_start_failure (el);
  fail_unless (strstr (msg, "model.safetensors") != NULL,
      "message does not name the file: %s", msg);
  g_free (msg);

  /* a truncated real checkpoint */
  {
    gchar *from = g_build_filename (model_dir, "model.safetensors", NULL);
    gchar *data;
    gsize len;

    fail_unless (g_file_get_contents (from, &data, &len, NULL));
    fail_unless (g_file_set_contents (lm, data, len / 2, NULL));
    g_free (data);
    g_free (from);
  }
  msg = expect_start_failure (el);
  fail_unless (strstr (msg, "model.safetensors") != NULL,
      "message does not name the file: %s", msg);
  g_free (msg);

  gst_object_unref (el);
  g_free (lm);
  ppx_test_remove_dir (dir);
  g_free (dir);
}

GST_END_TEST;

/* NULL <-> PLAYING cycles from another thread. */
GST_START_TEST (test_stress_state_changes)
{
  GstHarness *h = new_harness (PPX_F32_CAPS);
  GstHarnessThread *t = gst_harness_stress_statechange_start (h);

  g_usleep (G_USEC_PER_SEC);
  fail_unless (gst_harness_stress_thread_stop (t) > 2);
  gst_harness_teardown (h);
}

GST_END_TEST;

/* ------------------------------------------------------------------------ */
/* Model sharing                                                            */

GST_START_TEST (test_shared_model)
{
  static const guint sizes[] = { 999 };
  GstElement *a = new_element ("test-shared");
  GstElement *b = new_element ("test-shared");
  GstElement *c = new_element ("test-shared");
  GstElement *d = new_element ("test-other");
  GstHarness *ha, *hb, *hd;
  GArray *outa, *outb;
  gchar *msg;
  guint n;

  ha = new_harness_for (a, PPX_F32_CAPS);
  fail_unless_equals_int (ppx_test_stats_uint (a, "model-users"), 1);
  hb = new_harness_for (b, PPX_F32_CAPS);
  /* one load, two users */
  fail_unless_equals_int (ppx_test_stats_uint (a, "model-users"), 2);
  fail_unless_equals_int (ppx_test_stats_uint (b, "model-users"), 2);
  /* another id is another model */
  hd = new_harness_for (d, PPX_F32_CAPS);
  fail_unless_equals_int (ppx_test_stats_uint (d, "model-users"), 1);

  /* independent conversations: the same input gives the same output */
  push_signal (ha, 0, 3 * PPX_FRAME, sizes, 1);
  push_signal (hb, 0, 2 * PPX_FRAME, sizes, 1);
  push_signal (hb, 2 * PPX_FRAME, PPX_FRAME, sizes, 1);
  outa = pull_all_checked (ha, 0, &n);
  outb = pull_all_checked (hb, 0, &n);
  assert_same_samples (outa, outb);

  /* same id, different settings: refused, naming the id */
  g_object_set (c, "quantization", 2 /* int8 */ , NULL);
  msg = expect_start_failure (c);
  fail_unless (strstr (msg, "test-shared") != NULL, "message: %s", msg);
  g_free (msg);

  gst_harness_teardown (hb);
  fail_unless_equals_int (ppx_test_stats_uint (a, "model-users"), 1);

  g_array_unref (outa);
  g_array_unref (outb);
  gst_harness_teardown (ha);
  gst_harness_teardown (hd);
  gst_object_unref (a);
  gst_object_unref (b);
  gst_object_unref (c);
  gst_object_unref (d);
}

GST_END_TEST;

static Suite *
personaplexduplex_suite (void)
{
  Suite *s = suite_create ("personaplexduplex");
  TCase *tc = tcase_create ("general");

  tcase_set_timeout (tc, 120);
  suite_add_tcase (s, tc);
  tcase_add_test (tc, test_framing_odd_sizes);
  tcase_add_test (tc, test_total_duration_and_offset);
  tcase_add_test (tc, test_discont_resync);
  tcase_add_test (tc, test_s16le);
  tcase_add_test (tc, test_s16le_odd_bytes);
  tcase_add_test (tc, test_caps_query);
  tcase_add_test (tc, test_nan_input);
  tcase_add_test (tc, test_latency);
  tcase_add_test (tc, test_gap);
  tcase_add_test (tc, test_text_pad);
  tcase_add_test (tc, test_text_pad_unlinked);
  tcase_add_test (tc, test_text_prompt);
  tcase_add_test (tc, test_flush_resets_conversation);
  tcase_add_test (tc, test_eos_both_pads);
  tcase_add_test (tc, test_caps_change);
  tcase_add_test (tc, test_stats);
  tcase_add_test (tc, test_frame_messages);
  tcase_add_test (tc, test_property_validation);
  tcase_add_test (tc, test_property_refused_when_playing);
  tcase_add_test (tc, test_missing_model_dir);
  tcase_add_test (tc, test_bad_text_prompt_tokens);
  tcase_add_test (tc, test_corrupt_model);
  tcase_add_test (tc, test_stress_state_changes);
  tcase_add_test (tc, test_shared_model);
  return s;
}

int
main (int argc, char **argv)
{
  int failures;

  gst_check_init (&argc, &argv);
  model_dir = ppx_test_make_tiny_model ();
  ppx_test_add_tokenizer (model_dir);
  failures = gst_check_run_suite (personaplexduplex_suite (),
      "personaplexduplex", __FILE__);
  ppx_test_remove_dir (model_dir);
  g_free (model_dir);
  return failures;
}
