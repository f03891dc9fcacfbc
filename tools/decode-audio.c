#include "decode-audio.h"

#include <gst/app/gstappsink.h>
#include <gst/audio/audio.h>
#include <gst/gst.h>
#include <math.h>

#include "ppx-common.h"

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

/* The decoded input's duration in output samples (sum of frames * rate / input rate over its buffers),
 * counted before the resampler: the resampler's edges may add or drop a sample, the contract is the
 * input's length. */
typedef struct {
  int rate;
  double out_samples;
} InputLength;

#define MAX_EDGE_SAMPLES 256

static GstPadProbeReturn
count_input (GstPad *pad, GstPadProbeInfo *info, gpointer data)
{
  InputLength *len = data;
  GstBuffer *buf = GST_PAD_PROBE_INFO_BUFFER (info);
  g_autoptr (GstCaps) caps = gst_pad_get_current_caps (pad);
  GstAudioInfo ai;
  if (buf && caps && gst_audio_info_from_caps (&ai, caps) && ai.bpf > 0 && ai.rate > 0)
    len->out_samples += (double) (gst_buffer_get_size (buf) / ai.bpf) * len->rate / ai.rate;
  return GST_PAD_PROBE_OK;
}

static GstElement *
build_pipeline (const char *uri, int rate, InputLength *len, GstElement **appsink)
{
  GstElement *pipe = gst_pipeline_new ("decode-audio");
  GstElement *src = gst_element_factory_make ("uridecodebin", NULL);
  GstElement *convert = gst_element_factory_make ("audioconvert", NULL);
  GstElement *resample = gst_element_factory_make ("audioresample", NULL);
  GstElement *sink = gst_element_factory_make ("appsink", NULL);
  if (!src || !convert || !resample || !sink) {
    g_clear_object (&src);
    g_clear_object (&convert);
    g_clear_object (&resample);
    g_clear_object (&sink);
    gst_object_unref (pipe);
    return NULL;
  }
  g_autoptr (GstCaps) caps = gst_caps_new_simple ("audio/x-raw", "format", G_TYPE_STRING, "F32LE", "rate", G_TYPE_INT,
                                                  rate, "channels", G_TYPE_INT, 1, "layout", G_TYPE_STRING,
                                                  "interleaved", NULL);
  g_object_set (src, "uri", uri, NULL);
  g_object_set (sink, "caps", caps, "sync", FALSE, NULL);
  gst_bin_add_many (GST_BIN (pipe), src, convert, resample, sink, NULL);
  gst_element_link_many (convert, resample, sink, NULL);
  g_signal_connect (src, "pad-added", G_CALLBACK (on_pad_added), convert);
  g_signal_connect (src, "no-more-pads", G_CALLBACK (on_no_more_pads), convert);
  g_autoptr (GstPad) convert_sink = gst_element_get_static_pad (convert, "sink");
  gst_pad_add_probe (convert_sink, GST_PAD_PROBE_TYPE_BUFFER, count_input, len, NULL);
  *appsink = sink;
  return pipe;
}

/* The first error on the bus, if any. */
static gboolean
bus_error (GstBus *bus, const char *path, GError **error)
{
  g_autoptr (GstMessage) msg = gst_bus_pop_filtered (bus, GST_MESSAGE_ERROR);
  if (!msg)
    return FALSE;
  g_autoptr (GError) e = NULL;
  g_autofree char *debug = NULL;
  gst_message_parse_error (msg, &e, &debug);
  g_set_error (error, PPX_ERROR, PPX_ERROR_FORMAT, "%s: cannot decode audio: %s", path, e->message);
  return TRUE;
}

float *
decode_audio_file (const char *path, int rate, gsize *n_samples, GError **error)
{
  if (!g_file_test (path, G_FILE_TEST_IS_REGULAR)) {
    g_set_error (error, PPX_ERROR, PPX_ERROR_MISSING, "%s: no such file", path);
    return NULL;
  }
  g_autoptr (GError) e = NULL;
  g_autofree char *abs = g_canonicalize_filename (path, NULL);
  g_autofree char *uri = gst_filename_to_uri (abs, &e);
  if (!uri) {
    g_set_error (error, PPX_ERROR, PPX_ERROR_IO, "%s: %s", path, e->message);
    return NULL;
  }
  GstElement *sink = NULL;
  InputLength len = {.rate = rate};
  GstElement *pipe = build_pipeline (uri, rate, &len, &sink);
  if (!pipe) {
    g_set_error (error, PPX_ERROR, PPX_ERROR_UNSUPPORTED,
                 "GStreamer elements uridecodebin, audioconvert, audioresample or appsink are missing "
                 "(install gstreamer1.0-plugins-base)");
    return NULL;
  }
  GstBus *bus = gst_element_get_bus (pipe);
  GByteArray *pcm = g_byte_array_new ();
  gboolean failed = FALSE;
  if (gst_element_set_state (pipe, GST_STATE_PLAYING) == GST_STATE_CHANGE_FAILURE) {
    failed = TRUE;
    if (!bus_error (bus, path, error))
      g_set_error (error, PPX_ERROR, PPX_ERROR_FORMAT, "%s: cannot decode audio", path);
  }
  while (!failed) {
    if (bus_error (bus, path, error)) {
      failed = TRUE;
      break;
    }
    GstSample *sample = gst_app_sink_try_pull_sample (GST_APP_SINK (sink), 100 * GST_MSECOND);
    if (!sample) {
      if (gst_app_sink_is_eos (GST_APP_SINK (sink)))
        break;
      continue;
    }
    GstBuffer *buf = gst_sample_get_buffer (sample);
    GstMapInfo map;
    if (buf && gst_buffer_map (buf, &map, GST_MAP_READ)) {
      if (map.size > G_MAXUINT - pcm->len) {
        g_set_error (error, PPX_ERROR, PPX_ERROR_UNSUPPORTED, "%s: longer than %u samples, too long for one run",
                     path, G_MAXUINT / (guint) sizeof (float));
        failed = TRUE;
      } else {
        g_byte_array_append (pcm, map.data, (guint) map.size);
      }
      gst_buffer_unmap (buf, &map);
    }
    gst_sample_unref (sample);
  }
  failed = failed || bus_error (bus, path, error);
  gst_element_set_state (pipe, GST_STATE_NULL);
  gst_object_unref (bus);
  gst_object_unref (pipe);
  if (failed) {
    g_byte_array_free (pcm, TRUE);
    return NULL;
  }
  /* Exactly the input's duration: trim or zero-pad the resampler's edge sample(s). A larger difference
   * would mean the count is wrong, not the resampler: then the decoded samples stand as they are. */
  gsize expected = (gsize) llround (len.out_samples), have = pcm->len / sizeof (float);
  float *samples = (float *) g_byte_array_free (pcm, FALSE);
  if (expected == have || (expected > have ? expected - have : have - expected) > MAX_EDGE_SAMPLES) {
    *n_samples = have;
    return samples;
  }
  samples = g_renew (float, samples, MAX (expected, 1));
  if (expected > have)
    memset (samples + have, 0, (expected - have) * sizeof (float));
  *n_samples = expected;
  return samples;
}
