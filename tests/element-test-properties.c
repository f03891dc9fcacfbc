/* personaplexduplex element tests: properties and errors: validation, changes refused while playing, a missing
 * model directory, bad text prompt tokens, a corrupt model, fast state changes; and model sharing
 * (model-instance-id). */
#include "element-harness.h"

#include <string.h>

/* Captures g_warning()s of the plugin's log domain. */
static gchar *last_warning;

static void
capture_warning (const gchar * domain, GLogLevelFlags level,
    const gchar * message, gpointer user_data)
{
  g_free (last_warning);
  last_warning = g_strdup (message);
}

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

/* Every property reads its spec's default on a new element, and every writable one reads back a value other
 * than its default once set (the settings are one table over offsets: gstppsettings.c). */
GST_START_TEST (test_property_round_trip)
{
  GstElement *el = new_bare_element ();
  guint n, i;
  GParamSpec **specs = g_object_class_list_properties (G_OBJECT_GET_CLASS (el),
      &n);

  for (i = 0; i < n; i++) {
    GParamSpec *ps = specs[i];
    GType type = G_PARAM_SPEC_VALUE_TYPE (ps);
    GValue got = G_VALUE_INIT, want = G_VALUE_INIT;

    if (ps->owner_type != G_OBJECT_TYPE (el) || !(ps->flags & G_PARAM_WRITABLE))
      continue;
    g_value_init (&got, type);
    g_object_get_property (G_OBJECT (el), ps->name, &got);
    fail_unless (g_param_values_cmp (ps, &got,
            g_param_spec_get_default_value (ps)) == 0, "%s: not its default",
        ps->name);

    g_value_init (&want, type);
    switch (G_TYPE_FUNDAMENTAL (type)) {
      case G_TYPE_STRING:
        g_value_take_string (&want, g_strdup_printf ("x-%s", ps->name));
        break;
      case G_TYPE_BOOLEAN:
        g_value_set_boolean (&want, !g_value_get_boolean (&got));
        break;
      case G_TYPE_INT:{
        GParamSpecInt *pi = G_PARAM_SPEC_INT (ps);
        g_value_set_int (&want, g_value_get_int (&got) == pi->maximum
            ? pi->minimum : pi->maximum);
        break;
      }
      case G_TYPE_UINT:{
        GParamSpecUInt *pu = G_PARAM_SPEC_UINT (ps);
        g_value_set_uint (&want, g_value_get_uint (&got) == pu->maximum
            ? pu->minimum : pu->maximum);
        break;
      }
      case G_TYPE_UINT64:{
        GParamSpecUInt64 *pu = G_PARAM_SPEC_UINT64 (ps);
        g_value_set_uint64 (&want, g_value_get_uint64 (&got) == pu->maximum
            ? pu->minimum : pu->maximum);
        break;
      }
      case G_TYPE_FLOAT:{
        GParamSpecFloat *pf = G_PARAM_SPEC_FLOAT (ps);
        g_value_set_float (&want, g_value_get_float (&got) == pf->maximum
            ? pf->minimum : pf->maximum);
        break;
      }
      case G_TYPE_ENUM:{
        GEnumClass *ec = G_PARAM_SPEC_ENUM (ps)->enum_class;
        g_value_set_enum (&want, ec->values[ec->n_values - 1].value ==
            g_value_get_enum (&got) ? ec->values[0].value :
            ec->values[ec->n_values - 1].value);
        break;
      }
      default:
        fail ("%s: a property type this test does not know", ps->name);
    }
    fail_unless (g_param_values_cmp (ps, &want, &got) != 0, "%s", ps->name);
    g_object_set_property (G_OBJECT (el), ps->name, &want);
    g_value_reset (&got);
    g_object_get_property (G_OBJECT (el), ps->name, &got);
    fail_unless (g_param_values_cmp (ps, &got, &want) == 0,
        "%s: not the value set", ps->name);
    g_value_unset (&got);
    g_value_unset (&want);
  }
  g_free (specs);
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

/* A voice prompt that is not a file is refused saying what it is (issue 17,
 * defect 9): a directory, a device. */
GST_START_TEST (test_voice_prompt_not_a_file)
{
  static const struct
  {
    const gchar *what;
  } cases[] = { {"is a directory"}, {"not a regular file"} };
  GstElement *el = new_element (NULL);
  guint i;

  for (i = 0; i < G_N_ELEMENTS (cases); i++) {
    const gchar *path = i == 0 ? model_dir : "/dev/zero";
    gchar *msg;

    g_object_set (el, "voice-prompt", path, NULL);
    msg = expect_start_failure (el);
    fail_unless (strstr (msg, path) != NULL && strstr (msg, cases[i].what),
        "message: %s", msg);
    g_free (msg);
  }
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
  ppx_test_remove_tree (dir);
  g_free (dir);
}

GST_END_TEST;

/* NULL <-> PLAYING cycles from another thread (the harness's stress thread,
 * which also relinks the sink pad each time), for at least 1 s and at least
 * 3 cycles. The cycles are counted as they happen, from the element's
 * state-changed messages, instead of assumed from the time: each start loads
 * the model, and under valgrind on a busy machine one cycle can take more
 * than a second (1 cycle in 1 s with 20% of a core), where 1 s of stress
 * used to make too few and fail. Bounded at 120 s. */
GST_START_TEST (test_stress_state_changes)
{
  GstHarness *h = new_harness (PPX_F32_CAPS);
  GstBus *bus = gst_bus_new ();
  GstHarnessThread *t;
  gint64 start, now;
  guint played = 0, cycles;

  gst_element_set_bus (h->element, bus);
  t = gst_harness_stress_statechange_start (h);
  start = now = g_get_monotonic_time ();
  while ((played < 3 || now - start < G_USEC_PER_SEC)
      && now - start < 120 * G_USEC_PER_SEC) {
    GstMessage *msg = gst_bus_timed_pop_filtered (bus, 50 * GST_MSECOND,
        GST_MESSAGE_STATE_CHANGED);
    GstState state;

    if (msg) {
      gst_message_parse_state_changed (msg, NULL, &state, NULL);
      played += state == GST_STATE_PLAYING;
      gst_message_unref (msg);
    }
    now = g_get_monotonic_time ();
  }
  cycles = gst_harness_stress_thread_stop (t);
  gst_element_set_bus (h->element, NULL);
  gst_object_unref (bus);
  gst_harness_teardown (h);
  GST_INFO ("%u state cycles in %.1f s", cycles, (now - start) / 1e6);
  fail_unless (cycles > 2, "%u state cycles in %.1f s", cycles,
      (now - start) / 1e6);
}

GST_END_TEST;

/* GStreamer's warning of a sticky event pushed out of order, counted. */
static gboolean
count_misordering (const gchar * domain, GLogLevelFlags level,
    const gchar * message, gpointer user_data)
{
  g_atomic_int_inc ((gint *) user_data);
  GST_INFO ("%s", message);
  return TRUE;                  /* counted, not printed */
}

/* Fast restarts of an element of a shared engine (issue 17, defect 5): the
 * element goes NULL <-> PLAYING 1000 times with 0-2 ms between the changes
 * while a thread keeps pushing buffers into it, so every run re-sends the
 * sticky events as soon as the sink pad is active again, and some runs are
 * stopped while that happens. A CAPS (or STREAM_START) queued for text_src
 * after text_src was deactivated must not survive into the next run, where
 * it would be pushed ahead of that run's STREAM_START ("Sticky event
 * misordering"). Before the fix, 200 restarts showed it in half the runs
 * here and 1000 in five runs of six (PPX_TEST_CHURN_RESTARTS: another
 * count; the valgrind run takes 50). */
GST_START_TEST (test_restart_churn_sticky_order)
{
  GstElement *keep = new_element ("churn");
  GstElement *el = new_element ("churn");
  GstHarness *h;
  GstHarnessThread *t;
  GstCaps *caps = gst_caps_from_string (PPX_F32_CAPS);
  GstSegment segment;
  GstBuffer *buf;
  gint misordered = 0, upstream_races = 0, upstream_misordered = 0;
  gint src_misordered = 0;
  GstCheckLogFilter *filter, *upstream, *upstream_order, *src_order;
  const gchar *env = g_getenv ("PPX_TEST_CHURN_RESTARTS");
  const guint restarts = env ? (guint) atoi (env) : 1000;
  guint i;

  /* another session holds the model loaded, so each start is quick */
  fail_unless_equals_int (gst_element_set_state (keep, GST_STATE_PAUSED),
      GST_STATE_CHANGE_SUCCESS);
  h = new_harness_for (el, PPX_F32_CAPS);
  filter = gst_check_add_log_filter ("GStreamer", G_LOG_LEVEL_WARNING,
      g_regex_new ("text_src> Sticky event misordering", 0, 0, NULL),
      count_misordering, &misordered, NULL);
  /* The test's own race, not the element's: the pushing thread's sticky
   * events reached the sink pad just before a restart deactivated it, so the
   * core does not send them again before the next buffer (a real upstream
   * element is restarted with the pipeline). */
  upstream = gst_check_add_log_filter ("GStreamer", G_LOG_LEVEL_WARNING,
      g_regex_new (":sink> Got data flow before", 0, 0, NULL),
      count_misordering, &upstream_races, NULL);
  upstream_order = gst_check_add_log_filter ("GStreamer", G_LOG_LEVEL_WARNING,
      g_regex_new (":sink> Sticky event misordering", 0, 0, NULL),
      count_misordering, &upstream_misordered, NULL);
  /* What such a race delivers out of order (a SEGMENT re-sent into the
   * restarted sink pad before the STREAM_START whose push failed while src
   * was deactivated) the element forwards on src in that order: src then
   * warns when the STREAM_START comes. Tolerated only where the sink pad got
   * the same misordering (seen in 2 of ~10 suite runs, 2026-11-28). */
  src_order = gst_check_add_log_filter ("GStreamer", G_LOG_LEVEL_WARNING,
      g_regex_new (":src> Sticky event misordering", 0, 0, NULL),
      count_misordering, &src_misordered, NULL);
  gst_segment_init (&segment, GST_FORMAT_TIME);
  buf = ppx_test_signal_buffer (0, PPX_FRAME / 4);
  t = gst_harness_stress_push_buffer_start (h, caps, &segment, buf);
  for (i = 0; i < restarts; i++) {
    fail_unless_equals_int (gst_element_set_state (el, GST_STATE_NULL),
        GST_STATE_CHANGE_SUCCESS);
    g_usleep (g_random_int_range (0, 2001));
    fail_if (gst_element_set_state (el, GST_STATE_PLAYING) ==
        GST_STATE_CHANGE_FAILURE);
    g_usleep (g_random_int_range (0, 2001));
  }
  gst_harness_stress_thread_stop (t);
  gst_check_remove_log_filter (filter);
  gst_check_remove_log_filter (upstream);
  gst_check_remove_log_filter (upstream_order);
  gst_check_remove_log_filter (src_order);
  GST_INFO ("%d upstream races, %d misorderings at sink, %d at src",
      upstream_races, upstream_misordered, src_misordered);
  fail_unless_equals_int (g_atomic_int_get (&misordered), 0);
  fail_unless (g_atomic_int_get (&src_misordered) <=
      g_atomic_int_get (&upstream_misordered),
      "%d sticky events misordered on src, %d delivered so at sink",
      src_misordered, upstream_misordered);

  gst_buffer_unref (buf);
  gst_caps_unref (caps);
  gst_harness_teardown (h);
  gst_object_unref (el);
  gst_element_set_state (keep, GST_STATE_NULL);
  gst_object_unref (keep);
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

/* ------------------------------------------------------------------------ */
/* What a server admits by (docs/element.md, "Measuring the tick")          */

static guint
history_total (GstElement * el, guint * n, guint * last_rows, gdouble * last_ms)
{
  GstStructure *h = NULL;
  const GValue *rows, *ms;
  guint64 total = 0;

  g_object_get (el, "tick-history", &h, NULL);
  fail_unless (h != NULL && gst_structure_get_uint64 (h, "total", &total));
  rows = gst_structure_get_value (h, "rows");
  ms = gst_structure_get_value (h, "ms");
  *n = gst_value_array_get_size (rows);
  fail_unless_equals_int (gst_value_array_get_size (ms), *n);
  fail_unless_equals_int (gst_value_array_get_size (gst_structure_get_value (h,
              "age-ms")), *n);
  if (*n > 0) {
    *last_rows = g_value_get_uint (gst_value_array_get_value (rows, *n - 1));
    *last_ms = g_value_get_double (gst_value_array_get_value (ms, *n - 1));
  }
  gst_structure_free (h);
  return (guint) total;
}

/* tick-history-since @since: the ticks after the since-th, as many as the
 * total it says less @since (none past the total, at most 256); returns
 * that total. */
static guint64
history_since (GstElement * el, guint64 since)
{
  GstStructure *h = NULL;
  guint64 total = 0, want;
  const gchar *fields[] = { "rows", "ms", "age-ms" };
  guint i;

  g_signal_emit_by_name (el, "tick-history-since", since, &h);
  fail_unless (h != NULL && gst_structure_get_uint64 (h, "total", &total));
  want = total > since ? MIN (total - since, 256) : 0;
  for (i = 0; i < G_N_ELEMENTS (fields); i++)
    fail_unless_equals_int (gst_value_array_get_size (gst_structure_get_value
            (h, fields[i])), want);
  gst_structure_free (h);
  return total;
}

/* measure-tick on an engine of 3 slots (the element's own session holds
 * one) with an emulated device of 30 ms + 5 ms a row: a tick of 2 rows is
 * at least 40 ms; 3 rows do not fit; the live ticks of another element of
 * the engine show in tick-history, not the measured ones. */
GST_START_TEST (test_measure_tick)
{
  static const guint sizes[] = { 999 };
  GstElement *keep = new_element ("test-measure");
  GstElement *call = new_element ("test-measure");
  GstStructure *m = NULL;
  GstHarness *h;
  GArray *out;
  gdouble p99 = 0, emulated = 0, min = 0, last_ms = 0;
  guint rows = 0, ticks = 0, n = 0, last_rows = 0;
  guint64 total;

  g_object_set (keep, "max-sessions", 3, NULL);
  g_object_set (call, "max-sessions", 3, NULL);
  g_setenv ("PPX_TICK_EMULATE", "30,5", TRUE);  /* read when the ticker is made */
  fail_unless_equals_int (gst_element_set_state (keep, GST_STATE_PAUSED),
      GST_STATE_CHANGE_SUCCESS);
  g_unsetenv ("PPX_TICK_EMULATE");

  g_signal_emit_by_name (keep, "measure-tick", 2u, 2u, &m);
  fail_unless (m != NULL);
  fail_if (gst_structure_has_field (m, "error"), "%s",
      gst_structure_get_string (m, "error"));
  fail_unless (gst_structure_get (m, "rows", G_TYPE_UINT, &rows, "ticks",
          G_TYPE_UINT, &ticks, "p99-ms", G_TYPE_DOUBLE, &p99, "min-ms",
          G_TYPE_DOUBLE, &min, "emulated-ms", G_TYPE_DOUBLE, &emulated, NULL));
  fail_unless_equals_int (rows, 2);
  fail_unless_equals_int (ticks, 2);
  fail_unless (emulated == 40.0 && min >= 40.0 && p99 >= min,
      "emulated %f, min %f, p99 %f", emulated, min, p99);
  gst_structure_free (m);

  m = NULL;
  g_signal_emit_by_name (keep, "measure-tick", 3u, 1u, &m);
  fail_unless (m != NULL && gst_structure_has_field (m, "error"));
  fail_unless (strstr (gst_structure_get_string (m, "error"), "free") != NULL,
      "%s", gst_structure_get_string (m, "error"));
  gst_structure_free (m);
  /* the measured ticks are not live ticks */
  fail_unless_equals_int (history_total (keep, &n, &last_rows, &last_ms), 0);
  fail_unless_equals_int (n, 0);

  /* a call's frames: live ticks of 1 row, at least 35 ms each */
  h = new_harness_for (call, PPX_F32_CAPS);
  push_signal (h, 0, 2 * PPX_FRAME, sizes, 1);
  out = pull_all_checked (h, 0, &n);
  fail_unless (history_total (keep, &n, &last_rows, &last_ms) >= 2);
  fail_unless (n >= 2 && last_rows == 1 && last_ms >= 35.0,
      "%u ticks, the last of %u rows, %f ms", n, last_rows, last_ms);
  /* a reader polling the ticks gets only those it has not read */
  total = history_since (keep, 0);
  fail_unless (total >= 2);
  fail_unless (history_since (keep, total - 1) >= total);
  fail_unless (history_since (keep, total) >= total);
  fail_unless (history_since (keep, total + 5) >= total);

  g_array_unref (out);
  gst_harness_teardown (h);
  gst_object_unref (call);
  gst_element_set_state (keep, GST_STATE_NULL);
  gst_object_unref (keep);
}

GST_END_TEST;

void
element_test_add_properties (TCase * tc)
{
  tcase_add_test (tc, test_property_validation);
  tcase_add_test (tc, test_property_round_trip);
  tcase_add_test (tc, test_property_refused_when_playing);
  tcase_add_test (tc, test_missing_model_dir);
  tcase_add_test (tc, test_bad_text_prompt_tokens);
  tcase_add_test (tc, test_voice_prompt_not_a_file);
  tcase_add_test (tc, test_corrupt_model);
  tcase_add_test (tc, test_stress_state_changes);
  tcase_add_test (tc, test_restart_churn_sticky_order);
  tcase_add_test (tc, test_shared_model);
  tcase_add_test (tc, test_measure_tick);
}
