/* personaplex-server's /api/chat, the PersonaPlex WebSocket protocol, driven by the chat client
 * (tools/chat-client.h) on the tiny model with a test tokenizer: the handshake after the prompts, the answer as
 * long as what was said (within one Ogg page) in pages of at most 2 frames, text pieces, a call's own persona,
 * voice and seed (two calls at once each equal to its run alone), and the parameters refused with 400. */
#include <gst/gst.h>
#include <string.h>

#include "ogg-page.h"
#include "server/server-fixture.h"

#define PAGE_SAMPLES 960 /* one answer page: 2 Opus frames of 20 ms at 24 kHz */

static int
compare_doubles (gconstpointer a, gconstpointer b)
{
  double x = *(const double *) a, y = *(const double *) b;
  return x < y ? -1 : x > y;
}

static const PpxChatRecord *
run_call (PpxChatCall *call, guint timeout_ms)
{
  g_assert_true (ppx_chat_call_wait (call, timeout_ms));
  return ppx_chat_call_get_record (call);
}

static const PpxChatEvent *
event (const PpxChatRecord *r, guint i)
{
  return &g_array_index (r->events, PpxChatEvent, i);
}

/* The answer's pages: at most 2 Opus packets (40 ms) each; both pages of an 80 ms model frame arrive together
 * (the second is not held back until the next frame): a page is flushed as soon as it is complete. */
static void
check_pages (const PpxChatRecord *r, GByteArray *answer)
{
  PpxOggReader *reader = ppx_ogg_reader_new ();
  ppx_ogg_reader_push (reader, answer->data, answer->len);
  PpxOggPage page;
  g_autoptr (GError) error = NULL;
  guint pages = 0;
  gint64 last = 0;
  while (ppx_ogg_reader_next (reader, &page, &error)) {
    if (pages++ < 2)
      continue; /* OpusHead, OpusTags */
    g_assert_cmpuint (page.n_packets, <=, 2);
    g_assert_cmpint (page.granule - last, <=, 2 * 960 + (last == 0 ? 312 : 0)); /* 48 kHz units, pre-skip */
    last = page.granule;
  }
  g_assert_no_error (error);
  g_assert_cmpuint (pages, >, 10);
  ppx_ogg_reader_free (reader);
  /* arrival of the audio pages (one a message; the header pages carry no samples): pages 2k and 2k+1 hold the
   * four 20 ms packets of model frame k */
  g_autoptr (GArray) times = g_array_new (FALSE, FALSE, sizeof (gint64));
  for (guint i = 0; i < r->events->len; i++) {
    const PpxChatEvent *e = &g_array_index (r->events, PpxChatEvent, i);
    if (e->kind == PPX_CHAT_AUDIO && e->samples > 0)
      g_array_append_val (times, e->time_us);
  }
  double worst = 0;
  for (guint i = 0; i + 1 < times->len; i += 2)
    worst = MAX (worst, (g_array_index (times, gint64, i + 1) - g_array_index (times, gint64, i)) / 1000.0);
  g_autoptr (GArray) lat = ppx_chat_record_frame_latencies (r, PPX_CHAT_FRAME);
  g_array_sort (lat, compare_doubles);
  g_printerr ("%u pages; the two pages of a frame arrived at most %.1f ms apart; frame latency p50 %.1f ms, max "
              "%.1f ms over %u frames\n", pages, worst, g_array_index (lat, double, lat->len / 2),
              g_array_index (lat, double, lat->len - 1), lat->len);
  g_assert_cmpfloat (worst, <, 40.0);
}

/* One call, paced in real time, ended by the Ogg end-of-stream page: the handshake first, then audio and text;
 * the answer decodes to exactly as many samples as were sent (within one page), the server closes with 1000. */
static void
test_call (void)
{
  FixtureServer *s = fixture_server_start ((const char *const[]){"--max-sessions", "2", NULL});
  g_autoptr (PpxChatAudio) audio = fixture_speech (3.0, 4.0);
  const char *params[] = {"text_prompt", "You are a friendly assistant.", "voice_prompt", "VOICE1.wav", NULL};
  g_autoptr (GByteArray) answer = g_byte_array_new ();
  g_autoptr (PpxChatCall) call = fixture_call_new_recording (s, params, audio, PPX_CHAT_PACE_REALTIME, TRUE, answer);
  const PpxChatRecord *r = run_call (call, 60000);
  if (r->errors->len || r->failure)
    g_printerr ("failure %s, error %s; server log:\n%s\n", r->failure, r->errors->len ? (char *) r->errors->pdata[0] : "",
                fixture_server_log (s));
  g_assert_null (r->failure);
  g_assert_cmpuint (r->http_status, ==, 101);
  g_assert_cmpuint (r->events->len, >, 2);
  g_assert_cmpint (event (r, 0)->kind, ==, PPX_CHAT_HANDSHAKE);
  g_assert_cmpint (r->handshake_us, >, 0);
  g_assert_cmpuint (r->n_audio, >, 10);
  g_assert_cmpuint (r->n_text, >, 0);
  g_assert_cmpuint (r->errors->len, ==, 0);
  g_assert_cmpint (r->close_code, ==, 1000);
  if (r->decode_error)
    g_printerr ("decode error: %s\n", r->decode_error);
  g_assert_null (r->decode_error);
  gsize sent = ppx_chat_audio_n_samples (audio);
  g_printerr ("sent %" G_GSIZE_FORMAT " samples, answer %" G_GINT64_FORMAT " (granules), %u decoded; join %.1f ms; "
              "%u audio messages, %u text pieces: '%s'\n", sent, r->answer_samples, r->pcm->len,
              ppx_chat_record_join_ms (r), r->n_audio, r->n_text, r->text->str);
  g_assert_cmpint (ABS ((gint64) r->pcm->len - (gint64) sent), <=, PAGE_SAMPLES);
  g_assert_cmpint (ABS (r->answer_samples - (gint64) sent), <=, PAGE_SAMPLES);
  /* the answer is not silence */
  double energy = 0;
  for (guint i = 0; i < r->pcm->len; i++)
    energy += g_array_index (r->pcm, float, i) * g_array_index (r->pcm, float, i);
  g_assert_cmpfloat (energy, >, 0);
  check_pages (r, answer);
  g_assert_cmpuint (fixture_server_log_count (s, "ended: the client's audio ended"), ==, 1);
  g_assert_cmpint (fixture_server_stop (s, 20000), ==, 0);
  fixture_server_free (s);
}

int
main (int argc, char **argv)
{
  gst_init (&argc, &argv);
  g_test_init (&argc, &argv, NULL);
  fixture_model_dir ();
  g_test_add_func ("/server-chat/call", test_call);
  return g_test_run ();
}
