/* personaplexduplex element tests: latency, events: GAPs, the text pad (linked and not), text prompts, flushes,
 * EOS on both pads, caps changes. */
#include "element-harness.h"

#include <string.h>

GST_START_TEST (test_latency)
{
  GstHarness *h = new_harness (PPX_F32_CAPS);
  GstHarness *th = gst_harness_new_with_element (h->element, NULL,
      "text_src");
  GstQuery *q;
  gboolean live;
  GstClockTime min, max;

  gst_harness_set_upstream_latency (h, 20 * GST_MSECOND);
  /* upstream + one 80 ms frame + processing deadline (automatic, the default: 80 ms while the element's new
   * engine has measured no tick) */
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

void
element_test_add_events (TCase * tc)
{
  tcase_add_test (tc, test_latency);
  tcase_add_test (tc, test_gap);
  tcase_add_test (tc, test_text_pad);
  tcase_add_test (tc, test_text_pad_unlinked);
  tcase_add_test (tc, test_text_prompt);
  tcase_add_test (tc, test_flush_resets_conversation);
  tcase_add_test (tc, test_eos_both_pads);
  tcase_add_test (tc, test_caps_change);
}
