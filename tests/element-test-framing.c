/* personaplexduplex element tests: framing and timestamps: frames of any buffer size, durations and offsets,
 * discontinuities, 16-bit input (odd byte counts too), caps queries, NaN input. */
#include "element-harness.h"

#include <string.h>

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

void
element_test_add_framing (TCase * tc)
{
  tcase_add_test (tc, test_framing_odd_sizes);
  tcase_add_test (tc, test_total_duration_and_offset);
  tcase_add_test (tc, test_discont_resync);
  tcase_add_test (tc, test_s16le);
  tcase_add_test (tc, test_s16le_odd_bytes);
  tcase_add_test (tc, test_caps_query);
  tcase_add_test (tc, test_nan_input);
}
