/* Helpers shared by the personaplexduplex element tests: model directories
 * in temporary folders, bus and harness utilities. */
#ifndef PPX_TEST_ELEMENT_UTIL_H
#define PPX_TEST_ELEMENT_UTIL_H

#include <gst/gst.h>
#include <gst/audio/audio.h>
#include <gst/check/gstcheck.h>
#include <gst/check/gstharness.h>
#include <glib/gstdio.h>
#include <json-glib/json-glib.h>
#include <math.h>
#include <unistd.h>

#include "test-tokenizer-dir.h"
#include "test-util.h"

#define PPX_RATE 24000
#define PPX_FRAME 1920
#define PPX_FRAME_NS (80 * GST_MSECOND)
#define PPX_F32_CAPS \
  "audio/x-raw,format=F32LE,rate=24000,channels=1,layout=interleaved"
#define PPX_S16_CAPS \
  "audio/x-raw,format=S16LE,rate=24000,channels=1,layout=interleaved"

/* A tiny random model made by personaplex-make-model in a new temporary
 * directory ($PPX_MAKE_MODEL, else the build tree's tool). Exits 77 when
 * the tool is missing. g_free the result; remove it with ppx_test_remove_tree. */
static inline char *
ppx_test_make_tiny_model (void)
{
  const char *env = g_getenv ("PPX_MAKE_MODEL");
  g_autofree char *tool = g_strdup (env && *env ? env
      : PPX_BUILD_ROOT "/tools/personaplex-make-model");
  g_autoptr (GError) err = NULL;
  char *dir = g_dir_make_tmp ("ppx-element-XXXXXX", &err);
  int status = 0;
  g_autofree char *out = NULL, *errout = NULL;
  char *argv[] = { tool, (char *) "--preset", (char *) "tiny",
    (char *) "--output-dir", dir, NULL };

  if (!dir) {
    g_printerr ("cannot make a temporary directory: %s\n", err->message);
    exit (1);
  }
  if (!g_file_test (tool, G_FILE_TEST_IS_EXECUTABLE)) {
    g_printerr ("%s not found; skipping\n", tool);
    ppx_test_remove_tree (dir);
    exit (PPX_TEST_SKIP);
  }
  if (!g_spawn_sync (NULL, argv, NULL, 0, NULL, NULL, &out, &errout, &status, &err)
      || !g_spawn_check_wait_status (status, &err)) {
    g_printerr ("personaplex-make-model failed: %s\n%s\n", err->message,
        errout ? errout : "");
    ppx_test_remove_tree (dir);
    exit (1);
  }
  return dir;
}

/* A model directory over the golden files: symlinks to the LM and Mimi
 * checkpoints and a config.json with golden.json's "lm" and "mimi". */
static inline char *
ppx_test_golden_model_dir (const char *golden)
{
  g_autoptr (GError) err = NULL;
  char *dir = g_dir_make_tmp ("ppx-golden-XXXXXX", &err);
  g_autofree char *json_path = g_build_filename (golden, "golden.json", NULL);
  g_autoptr (JsonParser) parser = json_parser_new ();
  g_autoptr (JsonBuilder) b = json_builder_new ();
  g_autoptr (JsonGenerator) gen = json_generator_new ();
  g_autoptr (JsonNode) root = NULL;
  g_autofree char *config = NULL;
  g_autofree char *lm_src = g_build_filename (golden, "model.safetensors", NULL);
  g_autofree char *mimi_src = g_build_filename (golden, "mimi.safetensors", NULL);
  g_autofree char *lm_dst = g_build_filename (dir, "model.safetensors", NULL);
  g_autofree char *mimi_dst = g_build_filename (dir,
      "tokenizer-e351c8d8-checkpoint125.safetensors", NULL);
  g_autofree char *config_dst = g_build_filename (dir, "config.json", NULL);
  JsonObject *o;

  g_assert_no_error (err);
  json_parser_load_from_file (parser, json_path, &err);
  g_assert_no_error (err);
  o = json_node_get_object (json_parser_get_root (parser));
  json_builder_begin_object (b);
  json_builder_set_member_name (b, "lm");
  json_builder_add_value (b, json_node_copy (json_object_get_member (o, "lm")));
  json_builder_set_member_name (b, "mimi");
  json_builder_add_value (b, json_node_copy (json_object_get_member (o, "mimi")));
  json_builder_end_object (b);
  root = json_builder_get_root (b);
  json_generator_set_root (gen, root);
  config = json_generator_to_data (gen, NULL);
  g_file_set_contents (config_dst, config, -1, &err);
  g_assert_no_error (err);
  g_assert_cmpint (symlink (lm_src, lm_dst), ==, 0);
  g_assert_cmpint (symlink (mimi_src, mimi_dst), ==, 0);
  return dir;
}

/* golden.json's text_prompt_tokens as "1,2,3". */
static inline char *
ppx_test_golden_prompt_tokens (const char *golden)
{
  g_autofree char *json_path = g_build_filename (golden, "golden.json", NULL);
  g_autoptr (JsonParser) parser = json_parser_new ();
  g_autoptr (GError) err = NULL;
  GString *s = g_string_new (NULL);
  JsonArray *a;
  guint i;

  json_parser_load_from_file (parser, json_path, &err);
  g_assert_no_error (err);
  a = json_object_get_array_member (json_node_get_object (json_parser_get_root
          (parser)), "text_prompt_tokens");
  for (i = 0; i < json_array_get_length (a); i++)
    g_string_append_printf (s, "%s%" G_GINT64_FORMAT, i ? "," : "",
        json_array_get_int_element (a, i));
  return g_string_free (s, FALSE);
}

/* A mono F32LE buffer of @n samples of a deterministic speech-like signal
 * starting at sample @offset, timestamped from the sample counter. */
static inline GstBuffer *
ppx_test_signal_buffer (guint64 offset, guint n)
{
  GstBuffer *buf = gst_buffer_new_allocate (NULL, n * sizeof (float), NULL);
  GstMapInfo map;
  guint i;

  gst_buffer_map (buf, &map, GST_MAP_WRITE);
  for (i = 0; i < n; i++) {
    double t = (double) (offset + i) / PPX_RATE;
    ((float *) map.data)[i] = (float) (0.3 * sin (2 * G_PI * 220 * t)
        * (0.5 + 0.5 * sin (2 * G_PI * 3 * t))
        + 0.05 * sin (2 * G_PI * 1234 * t));
  }
  gst_buffer_unmap (buf, &map);
  GST_BUFFER_PTS (buf) = gst_util_uint64_scale_int (offset, GST_SECOND, PPX_RATE);
  GST_BUFFER_DURATION (buf) =
      gst_util_uint64_scale_int (offset + n, GST_SECOND, PPX_RATE) - GST_BUFFER_PTS (buf);
  return buf;
}

/* Pops the next element message named @name from @bus (waiting up to
 * @timeout), or NULL. Other messages are dropped. */
static inline GstMessage *
ppx_test_pop_element_message (GstBus * bus, const char *name, GstClockTime timeout)
{
  GstMessage *msg;

  while ((msg = gst_bus_timed_pop_filtered (bus, timeout, GST_MESSAGE_ELEMENT))) {
    if (gst_message_has_name (msg, name))
      return msg;
    gst_message_unref (msg);
  }
  return NULL;
}

/* The element's `stats` property (free with gst_structure_free). */
static inline GstStructure *
ppx_test_stats (GstElement * el)
{
  GstStructure *s = NULL;

  g_object_get (el, "stats", &s, NULL);
  fail_unless (s != NULL);
  return s;
}

/* One field of the element's `stats`, of @type, into @out (a pointer to that C type); fails the test when it
 * is missing or of another type. */
static inline void
ppx_test_stats_get (GstElement * el, const char *field, GType type, gpointer out)
{
  GstStructure *s = ppx_test_stats (el);

  fail_unless (gst_structure_get (s, field, type, out, NULL), "no %s %s in stats", g_type_name (type), field);
  gst_structure_free (s);
}

/* One guint field of the element's `stats`; fails the test when it is missing. */
static inline guint
ppx_test_stats_uint (GstElement * el, const char *field)
{
  guint v = 0;

  ppx_test_stats_get (el, field, G_TYPE_UINT, &v);
  return v;
}

#endif
