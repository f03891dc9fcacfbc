/* The element tests' shared harness (element-harness.h). */
#include "element-harness.h"

#include <string.h>

char *model_dir;
char *golden_model_dir;

GstElement *
new_bare_element (void)
{
  GstElement *el = gst_element_factory_make ("personaplexduplex", NULL);

  fail_unless (el != NULL, "personaplexduplex not found (GST_PLUGIN_PATH?)");
  return el;
}

GstElement *
new_element (const char *instance_id)
{
  GstElement *el = new_bare_element ();

  g_object_set (el, "model-dir", model_dir, "greedy", TRUE,
      "model-instance-id", instance_id, NULL);
  return el;
}

GstHarness *
new_harness_for (GstElement * el, const char *caps)
{
  GstHarness *h = gst_harness_new_with_element (el, "sink", "src");

  gst_harness_set_src_caps_str (h, caps);
  return h;
}

GstHarness *
new_harness (const char *caps)
{
  GstElement *el = new_element (NULL);
  GstHarness *h = new_harness_for (el, caps);

  gst_object_unref (el);
  return h;
}

void
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

GArray *
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

void
assert_same_samples (GArray * a, GArray * b)
{
  fail_unless_equals_int (a->len, b->len);
  fail_unless (memcmp (a->data, b->data, a->len * sizeof (float)) == 0,
      "outputs differ");
}

gboolean
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

GError *
expect_start_error (GstElement * el)
{
  GstBus *bus = gst_bus_new ();
  GstMessage *msg;
  GError *err = NULL;
  gchar *debug = NULL;

  gst_element_set_bus (el, bus);
  fail_unless_equals_int (gst_element_set_state (el, GST_STATE_PAUSED),
      GST_STATE_CHANGE_FAILURE);
  msg = gst_bus_pop_filtered (bus, GST_MESSAGE_ERROR);
  fail_unless (msg != NULL, "no error message posted");
  gst_message_parse_error (msg, &err, &debug);
  GST_INFO ("error: %s (%s)", err->message, debug);
  g_free (debug);
  gst_message_unref (msg);
  fail_unless_equals_int (gst_element_set_state (el, GST_STATE_NULL),
      GST_STATE_CHANGE_SUCCESS);
  gst_element_set_bus (el, NULL);
  gst_object_unref (bus);
  return err;
}

void
assert_no_bus_error (GstElement * pipeline)
{
  GstBus *bus = gst_element_get_bus (pipeline);
  GstMessage *msg = gst_bus_pop_filtered (bus, GST_MESSAGE_ERROR);

  if (msg) {
    GError *err = NULL;

    gst_message_parse_error (msg, &err, NULL);
    fail ("%s: error: %s", GST_OBJECT_NAME (pipeline), err->message);
  }
  gst_object_unref (bus);
}

gchar *
expect_start_failure (GstElement * el)
{
  GError *err = expect_start_error (el);
  gchar *text = g_strdup (err->message);

  g_error_free (err);
  return text;
}

int
element_test_main (int argc, char **argv, Suite * (*make_suite) (void),
    const char *name, gboolean tokenizer, gboolean golden)
{
  const char *golden_dir = golden ? ppx_test_golden_dir () : NULL;
  int failures;

  gst_check_init (&argc, &argv);
  element_watch_start ();
  model_dir = ppx_test_make_tiny_model ();
  if (tokenizer)
    ppx_test_add_tokenizer (model_dir);
  if (golden_dir)
    golden_model_dir = ppx_test_golden_model_dir (golden_dir);
  failures = gst_check_run_suite (make_suite (), name, __FILE__);
  ppx_test_remove_tree (model_dir);
  g_free (model_dir);
  if (golden_model_dir) {
    ppx_test_remove_tree (golden_model_dir);
    g_free (golden_model_dir);
  }
  return failures;
}
