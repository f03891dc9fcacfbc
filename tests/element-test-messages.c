/* personaplexduplex element tests: element messages and the stats property (with the engine's tick figures, which
 * an element of a shared engine that never steps reports too). */
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

/* The engine's tick figures in `stats`, read from the engine: an element
 * of the engine that never steps (a server's model keeper, PAUSED in a
 * pipeline of its own) reports every tick the stepping one ran, once per
 * tick, in the buckets, beside the same p99. */
GST_START_TEST (test_engine_tick_figures)
{
  GstElement *keeper = new_element ("ticks-test");
  GstElement *a = new_element ("ticks-test");
  GstElement *pipeline = gst_pipeline_new ("keeper");
  GstStructure *ks, *as;
  GstHarness *ha;
  GArray *out;
  guint n_buffers = 0;
  static const guint frame[] = { PPX_FRAME };
  const GValue *buckets, *bounds;
  guint64 ticks = 0, frames = 0, overruns = G_MAXUINT64, sum = 0;
  gdouble p50 = 0, p99k = -1, p99a = -2, total = 0;
  guint i;

  gst_bin_add (GST_BIN (pipeline), gst_object_ref (keeper));
  fail_unless (gst_element_set_state (pipeline, GST_STATE_PAUSED)
      != GST_STATE_CHANGE_FAILURE);
  ks = ppx_test_stats (keeper);
  fail_unless (gst_structure_get_uint64 (ks, "ticks", &ticks));
  fail_unless_equals_uint64 (ticks, 0);
  gst_structure_free (ks);

  ha = new_harness_for (a, PPX_F32_CAPS);
  push_signal (ha, 0, 6 * PPX_FRAME, frame, 1);
  out = pull_all_checked (ha, 0, &n_buffers);
  fail_unless_equals_int (out->len, 6 * PPX_FRAME);
  g_array_unref (out);

  ks = ppx_test_stats (keeper);
  as = ppx_test_stats (a);
  fail_unless (gst_structure_get_uint64 (as, "frames", &frames));
  fail_unless (gst_structure_get_uint64 (ks, "ticks", &ticks));
  fail_unless_equals_uint64 (frames, 6);
  fail_unless_equals_uint64 (ticks, frames);    /* one session: a tick a frame */
  fail_unless (gst_structure_get_double (ks, "tick-p50-ms", &p50) && p50 > 0);
  fail_unless (gst_structure_get_double (ks, "tick-p99-ms", &p99k));
  fail_unless (gst_structure_get_double (as, "tick-p99-ms", &p99a));
  fail_unless (p99k == p99a && p99k >= p50, "p99 %f / %f, p50 %f", p99k,
      p99a, p50);
  fail_unless (gst_structure_get_uint64 (ks, "tick-overruns", &overruns));
  fail_unless (overruns <= ticks);
  fail_unless (gst_structure_get_double (ks, "tick-total-ms", &total));
  fail_unless (total >= 6 * p50 / 2 && total > 0);
  buckets = gst_structure_get_value (ks, "tick-buckets");
  bounds = gst_structure_get_value (ks, "tick-bucket-bounds-ms");
  fail_unless (buckets != NULL && GST_VALUE_HOLDS_ARRAY (buckets));
  fail_unless (bounds != NULL && GST_VALUE_HOLDS_ARRAY (bounds));
  fail_unless_equals_int (gst_value_array_get_size (buckets), 13);
  fail_unless_equals_int (gst_value_array_get_size (bounds), 12);
  fail_unless_equals_float (g_value_get_double (gst_value_array_get_value
          (bounds, 7)), 80.0);
  for (i = 0; i < 13; i++)
    sum += g_value_get_uint64 (gst_value_array_get_value (buckets, i));
  fail_unless_equals_uint64 (sum, ticks);
  gst_structure_free (ks);
  gst_structure_free (as);

  gst_harness_teardown (ha);
  gst_element_set_state (pipeline, GST_STATE_NULL);
  gst_object_unref (pipeline);
  gst_object_unref (keeper);
  gst_object_unref (a);
}

GST_END_TEST;

void
element_test_add_messages (TCase * tc)
{
  tcase_add_test (tc, test_stats);
  tcase_add_test (tc, test_frame_messages);
  tcase_add_test (tc, test_engine_tick_figures);
}
