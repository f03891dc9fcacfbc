/* chat-client: the audio a call says, encoded once as Ogg Opus pages (chat-client.h). */
#include <gst/app/app.h>
#include <gst/gst.h>
#include <string.h>

#include "chat-client-private.h"
#include "ogg-page.h"

#define RAW_CAPS "audio/x-raw,format=F32LE,rate=24000,channels=1,layout=interleaved"
/* What the reference client's recorder sends: 24 kHz, 20 ms frames, pages of at most 2 frames (oggmux makes
 * a page of the packets within max-page-delay of its first: 20 ms gives 2 frames a page). */
#define ENCODE_CHAIN "audioconvert ! opusenc frame-size=20 audio-type=voice ! oggmux max-page-delay=20000000 max-delay=20000000"

struct _PpxChatAudio { /* in a GLib atomic reference-counted box */
  float *samples;
  gsize n_samples;
  GPtrArray *pages;   /* GBytes: one Ogg page each */
  GArray *page_ends;  /* gint64: input samples complete after each page */
};

static GQuark
audio_error_quark (void)
{
  return g_quark_from_static_string ("ppx-chat-audio");
}

/* Plays `pipeline` to its end and collects what its appsink "sink" receives. */
static gboolean
run_to_sink (GstElement *pipeline, GByteArray *out, const char *what, GError **error)
{
  g_autoptr (GstElement) sink = gst_bin_get_by_name (GST_BIN (pipeline), "sink");
  g_autoptr (GstBus) bus = gst_element_get_bus (pipeline);
  gboolean ok = gst_element_set_state (pipeline, GST_STATE_PLAYING) != GST_STATE_CHANGE_FAILURE;
  while (ok) {
    GstSample *sample = gst_app_sink_try_pull_sample (GST_APP_SINK (sink), 100 * GST_MSECOND);
    if (sample) {
      GstBuffer *buf = gst_sample_get_buffer (sample);
      GstMapInfo map;
      if (buf && gst_buffer_map (buf, &map, GST_MAP_READ)) {
        g_byte_array_append (out, map.data, (guint) map.size);
        gst_buffer_unmap (buf, &map);
      }
      gst_sample_unref (sample);
      continue;
    }
    /* an error ends the stream too: look for one before taking the end for success */
    g_autoptr (GstMessage) msg = gst_bus_pop_filtered (bus, GST_MESSAGE_ERROR);
    if (msg) {
      g_autoptr (GError) e = NULL;
      gst_message_parse_error (msg, &e, NULL);
      g_set_error (error, audio_error_quark (), 0, "%s: %s", what, e->message);
      ok = FALSE;
    } else if (gst_app_sink_is_eos (GST_APP_SINK (sink))) {
      break;
    }
  }
  if (!ok && error && !*error)
    g_set_error (error, audio_error_quark (), 0, "%s: the pipeline did not start", what);
  gst_element_set_state (pipeline, GST_STATE_NULL);
  return ok;
}

static gboolean
encode (PpxChatAudio *audio, GError **error)
{
  g_autoptr (GstElement) pipeline = gst_parse_launch ("appsrc name=src format=time caps=" RAW_CAPS " ! "
                                                      ENCODE_CHAIN " ! appsink name=sink sync=false", error);
  if (!pipeline)
    return FALSE;
  g_autoptr (GstElement) src = gst_bin_get_by_name (GST_BIN (pipeline), "src");
  GstBuffer *buf = gst_buffer_new_memdup (audio->samples, audio->n_samples * sizeof (float));
  GST_BUFFER_PTS (buf) = 0;
  GST_BUFFER_DURATION (buf) = gst_util_uint64_scale (audio->n_samples, GST_SECOND, PPX_CHAT_RATE);
  gst_app_src_push_buffer (GST_APP_SRC (src), buf);
  gst_app_src_end_of_stream (GST_APP_SRC (src));
  g_autoptr (GByteArray) ogg = g_byte_array_new ();
  if (!run_to_sink (pipeline, ogg, "encoding Ogg Opus", error))
    return FALSE;

  PpxOggReader *reader = ppx_ogg_reader_new ();
  ppx_ogg_reader_push (reader, ogg->data, ogg->len);
  PpxOggPage page;
  guint pre_skip = 0;
  gboolean ok = TRUE;
  while (ok && (ok = ppx_ogg_reader_next (reader, &page, error))) {
    if (page.flags & PPX_OGG_FLAG_BOS)
      ppx_ogg_opus_head (page.body, page.body_len, NULL, &pre_skip);
    gint64 end = page.granule > (gint64) pre_skip ? (page.granule - pre_skip) / 2 : 0;
    const guint8 *start = page.body - page.header_len;
    g_ptr_array_add (audio->pages, g_bytes_new (start, page.header_len + page.body_len));
    g_array_append_val (audio->page_ends, end);
  }
  gboolean broken = error && *error;
  ppx_ogg_reader_free (reader);
  if (!broken && audio->pages->len < 3)
    g_set_error (error, audio_error_quark (), 0, "encoding Ogg Opus gave no audio page");
  return !broken && audio->pages->len >= 3;
}

PpxChatAudio *
ppx_chat_audio_new_from_samples (const float *samples, gsize n_samples, GError **error)
{
  if (n_samples == 0) {
    g_set_error (error, audio_error_quark (), 0, "no audio samples");
    return NULL;
  }
  PpxChatAudio *audio = g_atomic_rc_box_new0 (PpxChatAudio);
  audio->samples = g_memdup2 (samples, n_samples * sizeof (float));
  audio->n_samples = n_samples;
  audio->pages = g_ptr_array_new_with_free_func ((GDestroyNotify) g_bytes_unref);
  audio->page_ends = g_array_new (FALSE, FALSE, sizeof (gint64));
  if (!encode (audio, error)) {
    ppx_chat_audio_unref (audio);
    return NULL;
  }
  return audio;
}

gboolean
ppx_chat_audio_set_opus_input_rate (PpxChatAudio *audio, guint32 rate)
{
  gsize len;
  const guint8 *data = g_bytes_get_data (g_ptr_array_index (audio->pages, 0), &len);
  /* the header page: the segment table after the 27 bytes of the header, then the OpusHead packet, whose input
   * sample rate is the little-endian 32 bits at offset 12 */
  if (len < 27 || len < 27u + data[26] + 16)
    return FALSE;
  g_autofree guint8 *page = g_memdup2 (data, len);
  guint8 *head = page + 27 + page[26];
  if (!ppx_ogg_opus_head (head, len - (head - page), NULL, NULL))
    return FALSE;
  for (int i = 0; i < 4; i++)
    head[12 + i] = (guint8) (rate >> (8 * i));
  ppx_ogg_page_update_crc (page, len);
  GBytes *old = g_ptr_array_index (audio->pages, 0);
  g_ptr_array_index (audio->pages, 0) = g_bytes_new_take (g_steal_pointer (&page), len);
  g_bytes_unref (old);
  return TRUE;
}

PpxChatAudio *
ppx_chat_audio_new_from_file (const char *path, GError **error)
{
  if (!g_file_test (path, G_FILE_TEST_IS_REGULAR)) {
    g_set_error (error, audio_error_quark (), 0, "%s: not a readable file", path);
    return NULL;
  }
  g_autoptr (GstElement) pipeline = gst_parse_launch ("filesrc name=file ! decodebin ! audioconvert ! "
                                                      "audioresample ! " RAW_CAPS " ! appsink name=sink sync=false",
                                                      error);
  if (!pipeline)
    return NULL;
  g_autoptr (GstElement) file = gst_bin_get_by_name (GST_BIN (pipeline), "file");
  g_object_set (file, "location", path, NULL);
  g_autoptr (GByteArray) pcm = g_byte_array_new ();
  g_autofree char *what = g_strdup_printf ("decoding %s", path);
  if (!run_to_sink (pipeline, pcm, what, error))
    return NULL;
  return ppx_chat_audio_new_from_samples ((const float *) pcm->data, pcm->len / sizeof (float), error);
}

PpxChatAudio *
ppx_chat_audio_ref (PpxChatAudio *audio)
{
  return g_atomic_rc_box_acquire (audio);
}

static void
chat_audio_clear (PpxChatAudio *audio)
{
  g_free (audio->samples);
  g_ptr_array_unref (audio->pages);
  g_array_unref (audio->page_ends);
}

void
ppx_chat_audio_unref (PpxChatAudio *audio)
{
  if (audio)
    g_atomic_rc_box_release_full (audio, (GDestroyNotify) chat_audio_clear);
}

gsize
ppx_chat_audio_n_samples (const PpxChatAudio *audio)
{
  return audio->n_samples;
}

const float *
ppx_chat_audio_samples (const PpxChatAudio *audio)
{
  return audio->samples;
}

guint
ppx_chat_audio_n_pages (const PpxChatAudio *audio)
{
  return audio->pages->len;
}

GBytes *
ppx_chat_audio_page (const PpxChatAudio *audio, guint i, gint64 *end_samples)
{
  *end_samples = g_array_index (audio->page_ends, gint64, i);
  return g_ptr_array_index (audio->pages, i);
}
