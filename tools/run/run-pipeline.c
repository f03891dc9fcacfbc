/* personaplex-run's processing core: one GStreamer pipeline around the personaplexduplex element,
 *
 *   uridecodebin uri=INPUT ! audioconvert ! audioresample ! audio/x-raw,format=F32LE,rate=24000,channels=1
 *       ! personaplexduplex frame-messages=true name=pp ! appsink      pp.text_src ! queue ! fakesink
 *
 * The agent's audio comes from the appsink, each frame's 17 tokens and text piece from the element's
 * personaplex-frame messages (taken in the streaming thread by a sync bus handler, placed by their frame
 * index), what ran (backend, weight format) from its stats. run-length.h keeps the element's input exactly
 * as long as the decoded input, so the output is too.
 *
 * The start is in two steps, so that an input that is not audio fails before the model is loaded: the
 * pipeline goes to PAUSED with the element's state locked and the decoded stream held at audioconvert
 * until uridecodebin has found an audio stream; then the element starts (loads the model and runs the
 * prompts), the stream is let go and the pipeline plays, as fast as the frames compute (no sync). */
#include <gst/app/gstappsink.h>

#include "ppx-common.h"
#include "run-core.h"
#include "run-element.h"
#include "run-length.h"

/* What the streaming threads collect; read by the main thread once the pipeline has stopped. */
typedef struct {
  GstElement *element;
  GByteArray *pcm;
  GArray *frames; /* RunFrame, by frame index */
  gboolean too_long;
} Collected;

#define MSG_INPUT_READY "personaplex-run-input-ready"

static GstBusSyncReply
take_frame_messages (GstBus *bus, GstMessage *msg, gpointer data)
{
  Collected *c = data;
  if (GST_MESSAGE_TYPE (msg) != GST_MESSAGE_ELEMENT || GST_MESSAGE_SRC (msg) != GST_OBJECT (c->element))
    return GST_BUS_PASS;
  const GstStructure *s = gst_message_get_structure (msg);
  guint64 index;
  const GValue *tokens = gst_structure_get_value (s, "tokens");
  if (gst_structure_has_name (s, "personaplex-frame") && gst_structure_get_uint64 (s, "frame", &index) &&
      index < G_MAXUINT && tokens && gst_value_array_get_size (tokens) == RUN_TOKENS_PER_FRAME) {
    if (index >= c->frames->len)
      g_array_set_size (c->frames, (guint) index + 1);
    RunFrame *f = &g_array_index (c->frames, RunFrame, index);
    for (guint k = 0; k < RUN_TOKENS_PER_FRAME; k++)
      f->tokens[k] = g_value_get_int (gst_value_array_get_value (tokens, k));
    g_free (f->text);
    f->text = g_strdup (gst_structure_get_string (s, "text"));
  }
  gst_message_unref (msg); /* frame, text and stats messages: one per frame, nobody else reads them */
  return GST_BUS_DROP;
}

static GstFlowReturn
take_audio (GstAppSink *sink, gpointer data)
{
  Collected *c = data;
  g_autoptr (GstSample) sample = gst_app_sink_pull_sample (sink);
  GstBuffer *buf = sample ? gst_sample_get_buffer (sample) : NULL;
  GstMapInfo map;
  if (!buf || !gst_buffer_map (buf, &map, GST_MAP_READ))
    return GST_FLOW_OK;
  if (map.size > G_MAXUINT - c->pcm->len)
    c->too_long = TRUE;
  else
    g_byte_array_append (c->pcm, map.data, (guint) map.size);
  gst_buffer_unmap (buf, &map);
  return c->too_long ? GST_FLOW_ERROR : GST_FLOW_OK;
}

/* Links the first audio stream uridecodebin exposes to audioconvert; other streams stay unlinked. */
static void
on_pad_added (GstElement *decodebin, GstPad *pad, gpointer convert)
{
  g_autoptr (GstCaps) caps = gst_pad_get_current_caps (pad);
  if (!caps)
    caps = gst_pad_query_caps (pad, NULL);
  const GstStructure *s = caps && gst_caps_get_size (caps) > 0 ? gst_caps_get_structure (caps, 0) : NULL;
  if (!s || !g_str_has_prefix (gst_structure_get_name (s), "audio/"))
    return;
  g_autoptr (GstPad) sink = gst_element_get_static_pad (GST_ELEMENT (convert), "sink");
  if (!gst_pad_is_linked (sink))
    gst_pad_link (pad, sink);
}

/* Every stream is exposed: without an audio one, say so (instead of a not-linked streaming error). */
static void
on_no_more_pads (GstElement *decodebin, gpointer convert)
{
  g_autoptr (GstPad) sink = gst_element_get_static_pad (GST_ELEMENT (convert), "sink");
  if (gst_pad_is_linked (sink))
    return;
  GError *e = g_error_new_literal (GST_STREAM_ERROR, GST_STREAM_ERROR_WRONG_TYPE, "the file has no audio stream");
  gst_element_post_message (decodebin, gst_message_new_error (GST_OBJECT (decodebin), e, NULL));
  g_error_free (e);
}

/* The decoded stream's first event (stream-start) is held here until the element has started. */
static GstPadProbeReturn
hold_input (GstPad *pad, GstPadProbeInfo *info, gpointer data)
{
  GstElement *pipeline = data;
  gst_element_post_message (pipeline, gst_message_new_application (
                                        GST_OBJECT (pipeline), gst_structure_new_empty (MSG_INPUT_READY)));
  return GST_PAD_PROBE_OK;
}

typedef struct {
  GstElement *pipeline, *convert, *element, *sink;
  RunLength *length;
} Pipeline;

static void
pipeline_clear (Pipeline *p)
{
  if (p->pipeline) {
    gst_element_set_state (p->pipeline, GST_STATE_NULL);
    gst_object_unref (p->pipeline);
  }
  run_length_free (p->length);
  memset (p, 0, sizeof *p);
}

static gboolean
make_elements (GstElement **elements, const char *const *factories, guint n, GError **error)
{
  for (guint i = 0; i < n; i++) {
    if (!(elements[i] = gst_element_factory_make (factories[i], NULL))) {
      for (guint j = 0; j < i; j++)
        gst_object_unref (elements[j]);
      g_set_error (error, PPX_ERROR, PPX_ERROR_UNSUPPORTED, "the GStreamer element %s is missing (install "
                   "gstreamer1.0-plugins-base)", factories[i]);
      return FALSE;
    }
  }
  return TRUE;
}

static gboolean
pipeline_build (Pipeline *p, const RunSettings *s, const char *uri, Collected *c, GError **error)
{
  enum { SRC, CONVERT, RESAMPLE, CAPS, ELEMENT, SINK, QUEUE, TEXT_SINK, N };
  static const char *const factories[N] = {"uridecodebin", "audioconvert", "audioresample", "capsfilter",
                                            RUN_ELEMENT_NAME, "appsink", "queue", "fakesink"};
  GstElement *e[N];
  if (!make_elements (e, factories, N, error))
    return FALSE;
  p->pipeline = gst_pipeline_new ("personaplex-run");
  gst_bin_add_many (GST_BIN (p->pipeline), e[SRC], e[CONVERT], e[RESAMPLE], e[CAPS], e[ELEMENT], e[SINK], e[QUEUE],
                    e[TEXT_SINK], NULL);
  p->convert = e[CONVERT];
  p->element = c->element = e[ELEMENT];
  p->sink = e[SINK];
  if (!run_element_configure (e[ELEMENT], s, error))
    return FALSE;
  g_autoptr (GstCaps) caps = gst_caps_new_simple ("audio/x-raw", "format", G_TYPE_STRING, "F32LE", "rate", G_TYPE_INT,
                                                  RUN_SAMPLE_RATE, "channels", G_TYPE_INT, 1, "layout", G_TYPE_STRING,
                                                  "interleaved", NULL);
  g_object_set (e[SRC], "uri", uri, NULL);
  g_object_set (e[CAPS], "caps", caps, NULL);
  g_object_set (e[SINK], "sync", FALSE, NULL);
  g_object_set (e[TEXT_SINK], "sync", FALSE, "async", FALSE, NULL);
  /* The element pushes each frame's text before its audio: the queue keeps the text branch from holding
   * the streaming thread while the appsink prerolls (docs/element.md). */
  if (!gst_element_link_many (e[CONVERT], e[RESAMPLE], e[CAPS], e[ELEMENT], e[SINK], NULL) ||
      !gst_element_link_pads (e[ELEMENT], "text_src", e[QUEUE], "sink") || !gst_element_link (e[QUEUE], e[TEXT_SINK])) {
    g_set_error (error, PPX_ERROR, PPX_ERROR_UNSUPPORTED, "the processing pipeline could not be linked");
    return FALSE;
  }
  g_signal_connect (e[SRC], "pad-added", G_CALLBACK (on_pad_added), e[CONVERT]);
  g_signal_connect (e[SRC], "no-more-pads", G_CALLBACK (on_no_more_pads), e[CONVERT]);
  GstAppSinkCallbacks callbacks = {.new_sample = take_audio};
  gst_app_sink_set_callbacks (GST_APP_SINK (e[SINK]), &callbacks, c, NULL);
  g_autoptr (GstBus) bus = gst_element_get_bus (p->pipeline);
  gst_bus_set_sync_handler (bus, take_frame_messages, c, NULL);
  g_autoptr (GstPad) decoded = gst_element_get_static_pad (e[CONVERT], "sink");
  g_autoptr (GstPad) resampled_sink = gst_element_get_static_pad (e[CAPS], "sink");
  g_autoptr (GstPad) resampled_src = gst_element_get_static_pad (e[CAPS], "src");
  p->length = run_length_new (RUN_SAMPLE_RATE);
  run_length_attach (p->length, decoded, resampled_sink, resampled_src);
  return TRUE;
}

/* The first error on the bus as the run's error: the element's names the model file or the prompt at
 * fault; any other is the input's decoding. */
static void
set_bus_error (GstMessage *msg, const Pipeline *p, const RunSettings *s, const Collected *c, GError **error)
{
  g_autoptr (GError) e = NULL;
  g_autofree char *debug = NULL;
  gst_message_parse_error (msg, &e, &debug);
  if (c->too_long)
    g_set_error (error, PPX_ERROR, PPX_ERROR_UNSUPPORTED, "%s: longer than %u samples, too long for one run",
                 s->input, G_MAXUINT / (guint) sizeof (float));
  else if (GST_MESSAGE_SRC (msg) == GST_OBJECT (p->element))
    g_set_error_literal (error, PPX_ERROR, PPX_ERROR_FORMAT, e->message);
  else
    g_set_error (error, PPX_ERROR, PPX_ERROR_FORMAT, "%s: cannot decode audio: %s", s->input, e->message);
}

/* Waits for one of `types` (or an error); FALSE with the error set if an error came first. */
static gboolean
wait_for (const Pipeline *p, GstMessageType types, const RunSettings *s, const Collected *c, GError **error)
{
  g_autoptr (GstBus) bus = gst_element_get_bus (p->pipeline);
  g_autoptr (GstMessage) msg = gst_bus_timed_pop_filtered (bus, GST_CLOCK_TIME_NONE, types | GST_MESSAGE_ERROR);
  if (GST_MESSAGE_TYPE (msg) != GST_MESSAGE_ERROR)
    return TRUE;
  set_bus_error (msg, p, s, c, error);
  return FALSE;
}

/* An error posted while a state change failed. */
static gboolean
state_change_failed (const Pipeline *p, const RunSettings *s, const Collected *c, GError **error)
{
  g_autoptr (GstBus) bus = gst_element_get_bus (p->pipeline);
  g_autoptr (GstMessage) msg = gst_bus_pop_filtered (bus, GST_MESSAGE_ERROR);
  if (msg)
    set_bus_error (msg, p, s, c, error);
  else
    g_set_error (error, PPX_ERROR, PPX_ERROR_FORMAT, "%s: the processing pipeline did not start", s->input);
  return FALSE;
}

static gboolean
pipeline_run (Pipeline *p, const RunSettings *s, const Collected *c, RunOutput *out, GError **error)
{
  g_autoptr (GstPad) decoded = gst_element_get_static_pad (p->convert, "sink");
  gulong hold = gst_pad_add_probe (decoded, GST_PAD_PROBE_TYPE_BLOCK_DOWNSTREAM, hold_input, p->pipeline, NULL);
  gst_element_set_locked_state (p->element, TRUE);
  if (gst_element_set_state (p->pipeline, GST_STATE_PAUSED) == GST_STATE_CHANGE_FAILURE)
    return state_change_failed (p, s, c, error);
  if (!wait_for (p, GST_MESSAGE_APPLICATION, s, c, error))
    return FALSE;
  gint64 t0 = g_get_monotonic_time ();
  gst_element_set_locked_state (p->element, FALSE);
  if (!gst_element_sync_state_with_parent (p->element))
    return state_change_failed (p, s, c, error);
  gst_pad_remove_probe (decoded, hold);
  if (gst_element_set_state (p->pipeline, GST_STATE_PLAYING) == GST_STATE_CHANGE_FAILURE)
    return state_change_failed (p, s, c, error);
  if (!wait_for (p, GST_MESSAGE_EOS, s, c, error))
    return FALSE;
  out->seconds = (g_get_monotonic_time () - t0) / 1e6;
  g_autoptr (GstStructure) stats = NULL;
  g_object_get (p->element, "stats", &stats, NULL);
  out->backend = g_strdup (gst_structure_get_string (stats, "backend"));
  out->quantization = g_strdup (gst_structure_get_string (stats, "quantization"));
  out->kv_cache_format = g_strdup (gst_structure_get_string (stats, "kv-cache-format"));
  return TRUE;
}

gboolean
run_conversation (const RunSettings *settings, RunOutput *out, GError **error)
{
  memset (out, 0, sizeof *out);
  g_autoptr (GError) e = NULL;
  g_autofree char *abs = g_canonicalize_filename (settings->input, NULL);
  g_autofree char *uri = gst_filename_to_uri (abs, &e);
  if (!uri) {
    g_set_error (error, PPX_ERROR, PPX_ERROR_IO, "%s: %s", settings->input, e->message);
    return FALSE;
  }
  Collected c = {.pcm = g_byte_array_new (), .frames = g_array_new (FALSE, TRUE, sizeof (RunFrame))};
  Pipeline p = {0};
  gboolean ok = pipeline_build (&p, settings, uri, &c, error) && pipeline_run (&p, settings, &c, out, error);
  pipeline_clear (&p); /* the streaming threads have stopped: what they collected is ours */
  out->n_samples = c.pcm->len / sizeof (float);
  out->pcm = (float *) g_byte_array_free (c.pcm, FALSE);
  out->n_frames = c.frames->len;
  out->frames = (RunFrame *) g_array_free (c.frames, FALSE);
  if (!ok)
    run_output_clear (out);
  return ok;
}
