/* personaplexduplex element tests: element messages and the stats property. */
#include "element-harness.h"

#include <string.h>

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
    {"tick-ms", G_TYPE_DOUBLE}, {"tick-p99-ms", G_TYPE_DOUBLE},
    {"latency", G_TYPE_UINT64}, {"tick-p50-ms", G_TYPE_DOUBLE},
    {"tick-max-ms", G_TYPE_DOUBLE}, {"ticks", G_TYPE_UINT64},
    {"tick-overruns", G_TYPE_UINT64}, {"tick-total-ms", G_TYPE_DOUBLE},
  };
  guint i;

  fail_unless (gst_structure_has_name (s, "personaplex-stats"));
  for (i = 0; i < G_N_ELEMENTS (fields); i++)
    fail_unless (gst_structure_has_field_typed (s, fields[i].name,
            fields[i].type), "field %s", fields[i].name);
  fail_unless (gst_structure_has_field_typed (s, "tick-buckets",
          GST_TYPE_ARRAY));
  fail_unless (gst_structure_has_field_typed (s, "tick-bucket-bounds-ms",
          GST_TYPE_ARRAY));
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

void
element_test_add_messages (TCase * tc)
{
  tcase_add_test (tc, test_stats);
  tcase_add_test (tc, test_frame_messages);
}
