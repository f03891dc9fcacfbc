/* personaplex-server's /api/chat against bad clients: every malformed case ends only its own call, with one log
 * line (and a 0x05 message saying why where the connection still carries one); the server then serves a good
 * call. Malformed Ogg, a checksum error, a stream that is not Opus, Opus packets that do not decode, audio after
 * the end of the stream, an oversized message, a text message, an unknown kind, an empty message, a client that
 * stops reading, a disconnect during the prompts; and a full server answering 503. */
#include <gst/gst.h>
#include <string.h>
#include <sys/socket.h>

#include "chat-client-private.h"
#include "ogg-page.h"
#include "server/server-fixture.h"

static FixtureServer *server;
static guint calls_made;

/* A call that says nothing; returns once the handshake came (or the call ended). */
static PpxChatCall *
joined_call (const char *const *params)
{
  PpxChatCall *call = fixture_call_new (server, params, NULL, PPX_CHAT_PACE_FAST, FALSE);
  g_assert_true (fixture_call_until_handshake (call, 60000));
  calls_made++;
  return call;
}

/* The server's log has exactly as many "ended:" lines as calls were made, the last naming `why`. */
static void
check_ended_once (const char *why)
{
  fixture_server_wait_log_count (server, "): ended: ", calls_made, 5000);
  g_assert_cmpuint (fixture_server_log_count (server, "): ended: "), ==, calls_made);
  g_assert_cmpuint (fixture_server_log_count (server, why), >=, 1);
}

static GBytes *
header_pages (void)
{
  g_autoptr (PpxChatAudio) audio = fixture_speech (0, 0.2);
  g_autoptr (GByteArray) out = g_byte_array_new ();
  guint8 kind = PPX_CHAT_AUDIO;
  g_byte_array_append (out, &kind, 1);
  for (guint i = 0; i < 2; i++) {
    gint64 end;
    gsize len;
    const guint8 *data = g_bytes_get_data (ppx_chat_audio_page (audio, i, &end), &len);
    g_byte_array_append (out, data, (guint) len);
  }
  return g_byte_array_free_to_bytes (g_steal_pointer (&out));
}

/* 0x01 + one page of these packets. */
static GBytes *
audio_message (guint32 serial, guint32 seq, guint8 flags, gint64 granule, GBytes *packet)
{
  const GBytes *packets[] = {packet};
  g_autoptr (GBytes) page = ppx_ogg_page_build (serial, seq, flags, granule, packets, 1);
  g_autoptr (GByteArray) msg = g_byte_array_new ();
  guint8 kind = PPX_CHAT_AUDIO;
  g_byte_array_append (msg, &kind, 1);
  g_byte_array_append (msg, g_bytes_get_data (page, NULL), (guint) g_bytes_get_size (page));
  return g_byte_array_free_to_bytes (g_steal_pointer (&msg));
}

/* A call that sends `messages` (binary; a NULL entry is the text message "hello") after the handshake; it must end
 * with `close_code` (0: any), with a 0x05 message containing `error` (NULL: none expected), and the log naming
 * `why`. */
static void
bad_call (GBytes *const *messages, guint n, int close_code, const char *error, const char *why)
{
  g_autoptr (PpxChatCall) call = joined_call (NULL);
  for (guint i = 0; i < n; i++) {
    if (messages[i])
      ppx_chat_call_send_binary (call, g_bytes_get_data (messages[i], NULL), g_bytes_get_size (messages[i]));
    else
      ppx_chat_call_send_text (call, "hello");
  }
  g_assert_true (ppx_chat_call_wait (call, 30000));
  const PpxChatRecord *r = ppx_chat_call_get_record (call);
  g_printerr ("%s: closed %d, %u error message(s)%s%s\n", why, r->close_code, r->errors->len,
              r->errors->len ? ": " : "", r->errors->len ? (char *) r->errors->pdata[0] : "");
  if (close_code)
    g_assert_cmpint (r->close_code, ==, close_code);
  if (error) {
    g_assert_cmpuint (r->errors->len, ==, 1);
    g_assert_nonnull (strstr (r->errors->pdata[0], error));
  }
  check_ended_once (why);
}

static void
test_malformed_ogg (void)
{
  g_autoptr (GBytes) garbage = g_bytes_new ("\x01hello, this is not Ogg at all", 30);
  bad_call (&garbage, 1, 1008, "malformed Ogg", "malformed Ogg: not an Ogg stream: no 'OggS'");
  /* a valid stream whose next page has a flipped byte */
  g_autoptr (GBytes) head = header_pages ();
  g_autoptr (GByteArray) flipped = g_byte_array_new ();
  g_byte_array_append (flipped, g_bytes_get_data (head, NULL), (guint) g_bytes_get_size (head));
  flipped->data[flipped->len - 3] ^= 0x40;
  g_autoptr (GBytes) bad_crc = g_byte_array_free_to_bytes (g_steal_pointer (&flipped));
  bad_call (&bad_crc, 1, 1008, "checksum", "page checksum mismatch");
}

static void
test_not_opus (void)
{
  g_autoptr (GBytes) vorbis = g_bytes_new ("\x01vorbis\0\0\0\0\x01\x44\xac\0\0\0\0\0\0\x80\xbb\0\0\0\0\0\xb8\x01", 30);
  g_autoptr (GBytes) msg = audio_message (7, 0, PPX_OGG_FLAG_BOS, 0, vorbis);
  bad_call (&msg, 1, 1008, "not an Ogg Opus stream", "not an Ogg Opus stream");
}

/* Valid headers, then packets libopus refuses (code 3 with no frame): opusdec's error ends the call. */
static void
test_malformed_opus (void)
{
  g_autoptr (GBytes) head = header_pages ();
  gsize len;
  const guint8 *data = g_bytes_get_data (head, &len);
  guint32 serial = (guint32) data[1 + 14] | ((guint32) data[1 + 15] << 8) | ((guint32) data[1 + 16] << 16) |
                   ((guint32) data[1 + 17] << 24);
  g_autoptr (GBytes) packet = g_bytes_new ("\x03\x00", 2);
  GBytes *messages[6] = {head};
  for (int i = 0; i < 5; i++)
    messages[1 + i] = audio_message (serial, 2 + (guint32) i, 0, 312 + 960 * (i + 1), packet);
  bad_call (messages, 6, 1008, "malformed Ogg Opus", "malformed Ogg Opus: opusdec");
  for (int i = 0; i < 5; i++)
    g_bytes_unref (messages[1 + i]);
}

static void
test_after_end_of_stream (void)
{
  g_autoptr (PpxChatAudio) audio = fixture_speech (1, 0.3);
  g_autoptr (GByteArray) all = g_byte_array_new ();
  guint8 kind = PPX_CHAT_AUDIO;
  g_byte_array_append (all, &kind, 1);
  for (guint i = 0; i < ppx_chat_audio_n_pages (audio); i++) {
    gint64 end;
    gsize len;
    const guint8 *data = g_bytes_get_data (ppx_chat_audio_page (audio, i, &end), &len);
    g_byte_array_append (all, data, (guint) len); /* the last page is flagged end-of-stream */
  }
  g_autoptr (GBytes) stream = g_byte_array_free_to_bytes (g_steal_pointer (&all));
  g_autoptr (GBytes) more = header_pages ();
  GBytes *messages[] = {stream, more};
  bad_call (messages, 2, 1008, "after the Ogg end-of-stream", "audio after the Ogg end-of-stream page");
}

static void
test_bad_messages (void)
{
  g_autofree guint8 *big = g_malloc0 (70 * 1024);
  big[0] = PPX_CHAT_AUDIO;
  g_autoptr (GBytes) oversized = g_bytes_new_take (g_steal_pointer (&big), 70 * 1024);
  bad_call (&oversized, 1, 0, NULL, "larger than");
  GBytes *text[] = {NULL};
  bad_call (text, 1, 1008, "text message", "a text message");
  g_autoptr (GBytes) unknown = g_bytes_new ("\x07kind", 5);
  bad_call (&unknown, 1, 1008, "unknown kind 0x07", "unknown kind 0x07");
  g_autoptr (GBytes) control = g_bytes_new ("\x03\x00", 2); /* the client's "control" kind: not served here */
  bad_call (&control, 1, 1008, "unknown kind 0x03", "unknown kind 0x03");
  g_autoptr (GBytes) empty = g_bytes_new ("", 0);
  bad_call (&empty, 1, 1008, "empty message", "an empty message");
}

/* A client that keeps sending and never reads: its answer fills the kernel's buffers and then the server's bounded
 * send queue, or, once its own full receive buffer stalls TCP both ways, its audio stops coming. Either way the call
 * ends as "the client stopped reading" (before issue 25 the second way was "no audio from the client", though the
 * client had sent far more audio than the call had lasted), and the server's memory stays where it was. */
static void
test_client_stops_reading (void)
{
  FixtureServer *s = fixture_server_start ((const char *const[]){"--max-sessions", "1", "--media-timeout", "5", NULL});
  guint64 rss0 = fixture_server_warm_rss_kb (s, "/api/chat");
  /* encoded before the call (300 s take seconds to encode: a call silent that long ends for want of audio) */
  g_autoptr (PpxChatAudio) audio = fixture_speech (0, 300.0);
  RawWs *ws = raw_ws_call (s, NULL, audio, NULL);
  /* as fast as the server reads it (as fast as the model answers), without the end-of-stream page */
  /* a small receive buffer: what the server sends piles up in its own queue, not in this socket's */
  g_socket_set_option (ws->socket, SOL_SOCKET, SO_RCVBUF, 8192, NULL);
  g_socket_set_timeout (ws->socket, 20); /* a send waits while the server does not read (the model is behind) */
  for (guint i = 2; i + 1 < ppx_chat_audio_n_pages (audio); i++)
    if (!raw_ws_send_page (ws, audio, i) || fixture_server_log_count (s, "): ended: ") > 1)
      break;
  fixture_server_wait_log_count (s, "): ended: ", 2, 60000);
  if (fixture_server_log_count (s, "ended: the client stopped reading") != 1)
    g_printerr ("the server's log:\n%s\n", fixture_server_log (s)); /* how the call ended instead */
  /* it sent far more audio than the time it had: its call ends because it stopped reading, never as "no audio"
   * (issue 25) */
  g_assert_cmpuint (fixture_server_log_count (s, "ended: the client stopped reading"), ==, 1);
  g_assert_cmpuint (fixture_server_log_count (s, "no audio from the client"), ==, 0);
  g_assert_cmpuint (fixture_server_log_count (s, "): ended: "), ==, 2); /* the warm-up call's and this one */
  guint64 rss1 = fixture_server_rss_kb (s);
  g_printerr ("%s; server RSS %" G_GUINT64_FORMAT " kB before, %" G_GUINT64_FORMAT " kB after\n",
              fixture_server_log_count (s, "stopped reading") ? "the send queue filled" : "the audio stopped", rss0,
              rss1);
  g_assert_cmpint ((gint64) rss1 - (gint64) rss0, <, 8 * 1024);
  raw_ws_free (ws);
  fixture_server_finish (s);
}

/* The client leaves while its call's prompts run (a 60 s voice prompt): the call ends, its slot is freed. */
static void
test_disconnect_during_prompts (void)
{
  RawWs *ws = raw_ws_connect (server, "/api/chat?voice_prompt=LONG.wav", NULL);
  g_assert_cmpuint (ws->status, ==, 101);
  calls_made++;
  raw_ws_free (ws);
  g_assert_true (fixture_server_wait_log (server, "during the prompts", 30000));
  check_ended_once ("during the prompts");
}

/* After all of the above: a good call works, and the server holds no call. */
static void
test_good_call_after (void)
{
  g_autoptr (PpxChatAudio) audio = fixture_speech (5, 1.5);
  g_autoptr (PpxChatCall) call = fixture_call_new (server, NULL, audio, PPX_CHAT_PACE_REALTIME, TRUE);
  calls_made++;
  g_assert_true (ppx_chat_call_wait (call, 60000));
  const PpxChatRecord *r = ppx_chat_call_get_record (call);
  g_assert_cmpint (r->close_code, ==, 1000);
  g_assert_cmpuint (r->errors->len, ==, 0);
  g_assert_cmpint (ABS ((gint64) r->pcm->len - (gint64) ppx_chat_audio_n_samples (audio)), <=, 960);
  check_ended_once ("the client's audio ended");
  g_assert_true (fixture_server_wait_idle (server, 10000));
}

/* --max-sessions 1: a second call gets 503 before the upgrade (and /health says 503, free 0) while the first
 * runs; once the first is gone, a call is taken again. */
static void
test_full (void)
{
  FixtureServer *saved = server;
  server = fixture_server_start ((const char *const[]){"--max-sessions", "1", NULL});
  g_autoptr (PpxChatCall) first = joined_call (NULL);
  g_autoptr (PpxChatCall) second = fixture_call_new (server, NULL, NULL, PPX_CHAT_PACE_FAST, FALSE);
  g_assert_true (ppx_chat_call_wait (second, 10000));
  g_assert_cmpuint (ppx_chat_call_get_record (second)->http_status, ==, 503);
  g_autofree char *body = NULL;
  g_assert_cmpuint (fixture_http (server, NULL, "/health", NULL, &body, NULL), ==, 503);
  g_assert_nonnull (strstr (body, "\"free\":0"));
  fixture_call_close (first);
  g_assert_true (fixture_server_wait_log (server, "torn down", 10000));
  g_autoptr (PpxChatCall) third = joined_call (NULL);
  g_assert_cmpuint (ppx_chat_call_get_record (third)->http_status, ==, 101);
  fixture_call_close (third);
  fixture_server_finish (server);
  server = saved;
}

int
main (int argc, char **argv)
{
  fixture_test_init (&argc, &argv);
  server = fixture_server_start ((const char *const[]){"--max-sessions", "2", NULL});
  g_test_add_func ("/server-input/malformed-ogg", test_malformed_ogg);
  g_test_add_func ("/server-input/not-opus", test_not_opus);
  g_test_add_func ("/server-input/malformed-opus", test_malformed_opus);
  g_test_add_func ("/server-input/after-end-of-stream", test_after_end_of_stream);
  g_test_add_func ("/server-input/bad-messages", test_bad_messages);
  g_test_add_func ("/server-input/client-stops-reading", test_client_stops_reading);
  g_test_add_func ("/server-input/disconnect-during-prompts", test_disconnect_during_prompts);
  g_test_add_func ("/server-input/good-call-after", test_good_call_after);
  g_test_add_func ("/server-input/full", test_full);
  int rc = g_test_run ();
  fixture_server_finish (server);
  return rc;
}
