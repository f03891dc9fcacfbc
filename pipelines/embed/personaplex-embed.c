/* personaplex-embed: how an application embeds personaplexduplex the GObject
 * way. It needs only GStreamer (no personaplex header): the element is made
 * with gst_element_factory_make, configured with g_object_set, observed
 * through its bus messages and its `stats` property.
 *
 *   personaplex-embed --model-dir DIR [--input IN] [--output OUT.wav]
 *                     [--seconds N] [--greedy] [--text-prompt-tokens 1,2,3]
 *                     [--voice-prompt FILE|NAME] [--quantization auto|bf16|int8|int4]
 *                     [--backend auto|cpu|cuda]
 *
 * The pipeline it builds:
 *
 *   IN:  filesrc ! decodebin ! audioconvert ! audioresample ! capsfilter
 *   or:  audiotestsrc (a warbling tone, --seconds long)
 *     ! personaplexduplex ! audioconvert ! wavenc ! filesink   (or fakesink)
 *       personaplexduplex.text_src ! queue ! fakesink
 *
 * The queue on the text branch is needed whenever both source pads lead
 * to sinks: the element pushes both from one streaming thread, and a
 * prerolling sink blocks that thread (as after a demuxer).
 *
 * Text pieces are printed from `personaplex-text` messages, timing from
 * `personaplex-stats` messages, and the final `stats` property at the end.
 * Exit status: 0 after EOS, 1 on any error. */
#include <gst/gst.h>
#include <stdlib.h>

typedef struct
{
  GstElement *pipeline;
  GstElement *convert_in;       /* where decodebin's pad is linked */
} App;

static GstElement *
make (const char *factory, const char *name)
{
  GstElement *e = gst_element_factory_make (factory, name);

  if (!e) {
    g_printerr ("element '%s' not found (is GST_PLUGIN_PATH set?)\n", factory);
    exit (1);
  }
  return e;
}

static void
on_decoded_pad (GstElement * decodebin, GstPad * pad, App * app)
{
  GstPad *sink = gst_element_get_static_pad (app->convert_in, "sink");
  GstCaps *caps = gst_pad_get_current_caps (pad);

  if (!caps)
    caps = gst_pad_query_caps (pad, NULL);
  if (g_str_has_prefix (gst_structure_get_name (gst_caps_get_structure (caps,
                  0)), "audio/") && !gst_pad_is_linked (sink)
      && gst_pad_link (pad, sink) != GST_PAD_LINK_OK)
    g_printerr ("could not link the decoded audio\n");
  gst_caps_unref (caps);
  gst_object_unref (sink);
}

static void
print_stats (const char *what, const GstStructure * s)
{
  guint64 frames = 0, overruns = 0, memory = 0;
  gdouble mean = 0, max = 0;
  guint users = 0;

  gst_structure_get_uint64 (s, "frames", &frames);
  gst_structure_get_double (s, "mean-step-ms", &mean);
  gst_structure_get_double (s, "max-step-ms", &max);
  gst_structure_get_uint64 (s, "overruns", &overruns);
  gst_structure_get_uint64 (s, "memory-bytes", &memory);
  gst_structure_get_uint (s, "model-users", &users);
  g_print ("%s: %" G_GUINT64_FORMAT " frames, step mean %.2f ms max %.2f ms, "
      "%" G_GUINT64_FORMAT " overruns, backend %s, quantization %s, "
      "weights %.1f MiB, %u user(s)\n", what, frames, mean, max, overruns,
      gst_structure_get_string (s, "backend"),
      gst_structure_get_string (s, "quantization"), memory / 1048576.0, users);
}

/* Returns TRUE at EOS, FALSE on error; prints the element messages. */
static gboolean
run_bus (GstBus * bus)
{
  for (;;) {
    GstMessage *msg = gst_bus_timed_pop (bus, GST_CLOCK_TIME_NONE);
    gboolean done = FALSE, ok = TRUE;

    switch (GST_MESSAGE_TYPE (msg)) {
      case GST_MESSAGE_ERROR:{
        GError *err = NULL;
        gchar *debug = NULL;

        gst_message_parse_error (msg, &err, &debug);
        g_printerr ("error from %s: %s\n", GST_OBJECT_NAME (msg->src),
            err->message);
        if (debug)
          g_printerr ("  (%s)\n", debug);
        g_error_free (err);
        g_free (debug);
        done = TRUE;
        ok = FALSE;
        break;
      }
      case GST_MESSAGE_EOS:
        done = TRUE;
        break;
      case GST_MESSAGE_ELEMENT:{
        const GstStructure *s = gst_message_get_structure (msg);
        guint64 pts = 0;

        if (gst_structure_has_name (s, "personaplex-text")) {
          gst_structure_get_uint64 (s, "pts", &pts);
          g_print ("[%" GST_TIME_FORMAT "] %s\n", GST_TIME_ARGS (pts),
              gst_structure_get_string (s, "text"));
        } else if (gst_structure_has_name (s, "personaplex-stats")) {
          print_stats ("stats", s);
        }
        break;
      }
      default:
        break;
    }
    gst_message_unref (msg);
    if (done)
      return ok;
  }
}

int
main (int argc, char **argv)
{
  gchar *model_dir = NULL, *input = NULL, *output = NULL, *tokens = NULL;
  gchar *voice = NULL, *quantization = NULL, *backend = NULL;
  gdouble seconds = 2.0;
  gboolean greedy = FALSE;
  GOptionEntry entries[] = {
    {"model-dir", 0, 0, G_OPTION_ARG_FILENAME, &model_dir, "Model directory",
        "DIR"},
    {"input", 0, 0, G_OPTION_ARG_FILENAME, &input,
        "Audio file (any format GStreamer decodes); default: a test tone",
        "FILE"},
    {"output", 0, 0, G_OPTION_ARG_FILENAME, &output,
        "WAV file for the agent's voice; default: discard", "OUT.wav"},
    {"seconds", 0, 0, G_OPTION_ARG_DOUBLE, &seconds,
        "Length of the test tone (without --input)", "N"},
    {"greedy", 0, 0, G_OPTION_ARG_NONE, &greedy, "Greedy decoding", NULL},
    {"text-prompt-tokens", 0, 0, G_OPTION_ARG_STRING, &tokens,
        "System prompt as token ids", "1,2,3"},
    {"voice-prompt", 0, 0, G_OPTION_ARG_FILENAME, &voice, "Voice prompt",
        "FILE|NAME"},
    {"quantization", 0, 0, G_OPTION_ARG_STRING, &quantization,
        "auto, bf16, int8 or int4", "Q"},
    {"backend", 0, 0, G_OPTION_ARG_STRING, &backend, "auto, cpu or cuda",
        "B"},
    {NULL}
  };
  GOptionContext *ctx = g_option_context_new ("- run personaplexduplex "
      "from an application");
  GError *err = NULL;
  App app = { 0 };
  GstElement *src, *pp, *conv_out, *sink, *text_queue, *text_sink, *caps_in;
  GstCaps *caps;
  GstBus *bus;
  GstStructure *stats;
  gboolean ok;

  g_option_context_add_main_entries (ctx, entries, NULL);
  g_option_context_add_group (ctx, gst_init_get_option_group ());
  if (!g_option_context_parse (ctx, &argc, &argv, &err)) {
    g_printerr ("%s\n", err->message);
    return 1;
  }
  g_option_context_free (ctx);
  if (!model_dir) {
    g_printerr ("--model-dir is required\n");
    return 1;
  }

  app.pipeline = gst_pipeline_new ("embed");
  pp = make ("personaplexduplex", "pp");
  g_object_set (pp, "model-dir", model_dir, "greedy", greedy,
      "stats-interval", 25, NULL);
  if (tokens)
    g_object_set (pp, "text-prompt-tokens", tokens, NULL);
  if (voice)
    g_object_set (pp, "voice-prompt", voice, NULL);
  /* enums by their nick, as gst-launch does */
  if (quantization)
    gst_util_set_object_arg (G_OBJECT (pp), "quantization", quantization);
  if (backend)
    gst_util_set_object_arg (G_OBJECT (pp), "backend", backend);

  caps_in = make ("capsfilter", NULL);
  caps = gst_caps_from_string ("audio/x-raw,format=F32LE,rate=24000,"
      "channels=1,layout=interleaved");
  g_object_set (caps_in, "caps", caps, NULL);
  gst_caps_unref (caps);
  conv_out = make ("audioconvert", NULL);
  sink = output ? make ("wavenc", NULL) : make ("fakesink", NULL);
  text_queue = make ("queue", NULL);
  text_sink = make ("fakesink", "text_sink");
  gst_bin_add_many (GST_BIN (app.pipeline), caps_in, pp, conv_out, sink,
      text_queue, text_sink, NULL);

  if (input) {
    GstElement *filesrc = make ("filesrc", NULL);
    GstElement *decode = make ("decodebin", NULL);
    GstElement *resample = make ("audioresample", NULL);

    app.convert_in = make ("audioconvert", NULL);
    g_object_set (filesrc, "location", input, NULL);
    gst_bin_add_many (GST_BIN (app.pipeline), filesrc, decode, app.convert_in,
        resample, NULL);
    g_signal_connect (decode, "pad-added", G_CALLBACK (on_decoded_pad), &app);
    ok = gst_element_link (filesrc, decode)
        && gst_element_link_many (app.convert_in, resample, caps_in, NULL);
  } else {
    src = make ("audiotestsrc", NULL);
    g_object_set (src, "wave", 0 /* sine */ , "freq", 330.0, "volume", 0.3,
        "samplesperbuffer", 960, "num-buffers",
        (gint) (seconds * 24000 / 960 + 0.5), NULL);
    gst_bin_add (GST_BIN (app.pipeline), src);
    ok = gst_element_link_filtered (src, caps_in, NULL);
  }
  ok = ok && gst_element_link_many (caps_in, pp, conv_out, sink, NULL)
      && gst_element_link_pads (pp, "text_src", text_queue, "sink")
      && gst_element_link (text_queue, text_sink);
  if (ok && output) {
    GstElement *filesink = make ("filesink", NULL);

    g_object_set (filesink, "location", output, NULL);
    gst_bin_add (GST_BIN (app.pipeline), filesink);
    ok = gst_element_link (sink, filesink);
  }
  if (!ok) {
    g_printerr ("could not link the pipeline\n");
    gst_object_unref (app.pipeline);
    return 1;
  }

  bus = gst_element_get_bus (app.pipeline);
  ok = gst_element_set_state (app.pipeline, GST_STATE_PLAYING)
      != GST_STATE_CHANGE_FAILURE;
  ok = run_bus (bus) && ok;

  /* the stats property holds the same fields as the bus message */
  g_object_get (pp, "stats", &stats, NULL);
  print_stats ("final", stats);
  gst_structure_free (stats);

  gst_element_set_state (app.pipeline, GST_STATE_NULL);
  gst_object_unref (bus);
  gst_object_unref (app.pipeline);
  g_free (model_dir);
  g_free (input);
  g_free (output);
  g_free (tokens);
  g_free (voice);
  g_free (quantization);
  g_free (backend);
  gst_deinit ();
  return ok ? 0 : 1;
}
