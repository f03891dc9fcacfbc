/* The chat client's parts that need no server: the Ogg page reader (protocol/ogg-page.c) and the audio a call
 * sends (protocol/chat-audio.c: Ogg Opus pages as the reference client's recorder makes them). */
#include <gst/gst.h>
#include <math.h>
#include <string.h>

#include "chat-client-private.h"
#include "ogg-page.h"

static PpxChatAudio *
make_tone (gsize n)
{
  float *pcm = g_new (float, n);
  for (gsize i = 0; i < n; i++)
    pcm[i] = 0.3f * sinf (2.0f * (float) G_PI * 440.0f * (float) i / PPX_CHAT_RATE);
  g_autoptr (GError) error = NULL;
  PpxChatAudio *audio = ppx_chat_audio_new_from_samples (pcm, n, &error);
  g_assert_no_error (error);
  g_free (pcm);
  return audio;
}

/* Every page is a valid Ogg page of at most 2 Opus packets (20 ms each), the last one flagged
 * end-of-stream, and the granule positions end exactly at the input's length. */
static void
test_audio_pages (void)
{
  const gsize n = PPX_CHAT_RATE * 2 + 1234; /* not a whole number of frames */
  g_autoptr (PpxChatAudio) audio = make_tone (n);
  guint pages = ppx_chat_audio_n_pages (audio);
  g_assert_cmpuint (pages, >=, 2 + (n / 960 + 1) / 2);
  gint64 last_end = 0;
  for (guint i = 0; i < pages; i++) {
    gint64 end;
    GBytes *bytes = ppx_chat_audio_page (audio, i, &end);
    gsize len;
    const guint8 *data = g_bytes_get_data (bytes, &len);
    PpxOggReader *r = ppx_ogg_reader_new ();
    ppx_ogg_reader_push (r, data, len);
    PpxOggPage page;
    g_autoptr (GError) error = NULL;
    g_assert_true (ppx_ogg_reader_next (r, &page, &error));
    g_assert_no_error (error);
    g_assert_cmpuint (page.header_len + page.body_len, ==, len);
    if (i == 0) {
      guint channels, pre_skip;
      g_assert_true (page.flags & PPX_OGG_FLAG_BOS);
      g_assert_true (ppx_ogg_opus_head (page.body, page.body_len, &channels, &pre_skip));
      g_assert_cmpuint (channels, ==, 1);
    }
    if (i >= 2) {
      g_assert_cmpuint (page.n_packets, >=, 1);
      g_assert_cmpuint (page.n_packets, <=, 2);
      g_assert_cmpint (end, >, last_end);
    }
    g_assert_cmpint (!!(page.flags & PPX_OGG_FLAG_EOS), ==, i + 1 == pages);
    last_end = end;
    ppx_ogg_reader_free (r);
  }
  g_assert_cmpint (last_end, ==, (gint64) n);
}

/* Pages split at any byte come out whole; a flipped byte, a wrong capture pattern or garbage is refused
 * with a message, and the reader stays refused. */
static void
test_reader (void)
{
  g_autoptr (PpxChatAudio) audio = make_tone (PPX_CHAT_RATE / 2);
  g_autoptr (GByteArray) stream = g_byte_array_new ();
  for (guint i = 0; i < ppx_chat_audio_n_pages (audio); i++) {
    gint64 end;
    gsize len;
    const guint8 *data = g_bytes_get_data (ppx_chat_audio_page (audio, i, &end), &len);
    g_byte_array_append (stream, data, (guint) len);
  }
  for (gsize piece = 1; piece <= 700; piece += 233) {
    PpxOggReader *r = ppx_ogg_reader_new ();
    guint pages = 0;
    PpxOggPage page;
    g_autoptr (GError) error = NULL;
    for (gsize at = 0; at < stream->len; at += piece) {
      ppx_ogg_reader_push (r, stream->data + at, MIN (piece, stream->len - at));
      while (ppx_ogg_reader_next (r, &page, &error))
        pages++;
      g_assert_no_error (error);
      g_assert_cmpuint (ppx_ogg_reader_pending (r), <=, PPX_OGG_MAX_PAGE + piece);
    }
    g_assert_cmpuint (pages, ==, ppx_chat_audio_n_pages (audio));
    g_assert_cmpuint (ppx_ogg_reader_pending (r), ==, 0);
    ppx_ogg_reader_free (r);
  }

  struct {
    gsize at;
    guint8 value;
    const char *message;
  } bad[] = {{40, 0, "checksum"}, {0, 'X', "capture"}, {4, 1, "version"}, {5, 0x80, "flags"}};
  for (guint i = 0; i < G_N_ELEMENTS (bad); i++) {
    g_autoptr (GByteArray) copy = g_byte_array_new ();
    g_byte_array_append (copy, stream->data, stream->len);
    copy->data[bad[i].at] ^= bad[i].value ? bad[i].value : 0x5a;
    PpxOggReader *r = ppx_ogg_reader_new ();
    ppx_ogg_reader_push (r, copy->data, copy->len);
    PpxOggPage page;
    g_autoptr (GError) error = NULL;
    g_assert_false (ppx_ogg_reader_next (r, &page, &error));
    g_assert_nonnull (error);
    g_assert_nonnull (strstr (error->message, bad[i].message));
    g_clear_error (&error);
    g_assert_false (ppx_ogg_reader_next (r, &page, &error));
    g_assert_nonnull (error);
    ppx_ogg_reader_free (r);
  }
  /* four bytes are enough to refuse something that is not Ogg */
  PpxOggReader *r = ppx_ogg_reader_new ();
  ppx_ogg_reader_push (r, (const guint8 *) "RIFF", 4);
  PpxOggPage page;
  g_autoptr (GError) error = NULL;
  g_assert_false (ppx_ogg_reader_next (r, &page, &error));
  g_assert_nonnull (error);
  ppx_ogg_reader_free (r);
}

/* The checksum of RFC 3533's example: "OggS" header fields aside, the CRC of a known string. */
static void
test_crc (void)
{
  /* CRC-32/MPEG-2 style without final xor and initial 0 ("CRC-32/BZIP2" differs): check value of "123456789" */
  g_assert_cmphex (ppx_ogg_crc ((const guint8 *) "123456789", 9), ==, 0x89a1897f);
}

int
main (int argc, char **argv)
{
  gst_init (&argc, &argv);
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/chat-client/ogg-crc", test_crc);
  g_test_add_func ("/chat-client/ogg-reader", test_reader);
  g_test_add_func ("/chat-client/audio-pages", test_audio_pages);
  return g_test_run ();
}
