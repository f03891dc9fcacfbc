/* The personaplex-server tests' shared parts (server-fixture.h). */
#define _GNU_SOURCE /* memmem */
#include "server-fixture.h"

#include <glib/gstdio.h>
#include <gst/gst.h>
#include <libsoup/soup.h>
#include <math.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>

#include "../pt-fixtures.h"
#include "../test-util.h"
#include "audio-io.h"
#include "chat-client-private.h"
#include "chat-protocol.h"

static char *model_dir;

static const char *
env_or_fail (const char *name)
{
  const char *v = g_getenv (name);
  if (!v || !*v)
    g_error ("%s is not set (tests/meson.build sets it)", name);
  return v;
}

/* ---- speech ---- */

static float *speech;
static gsize speech_len;

static void
load_speech (void)
{
  if (speech)
    return;
  const char *data = ppx_test_data_dir ();
  g_autofree char *path = data ? g_build_filename (data, "input_assistant.wav", NULL) : NULL;
  if (path && g_file_test (path, G_FILE_TEST_EXISTS))
    speech = ppx_audio_read (path, PPX_CHAT_RATE, &speech_len, NULL);
  if (speech && speech_len >= (gsize) PPX_CHAT_RATE * 20)
    return;
  /* no speech at hand: a voice-like signal (harmonics of a gliding pitch, syllable-rate envelope) */
  g_free (speech);
  speech_len = (gsize) PPX_CHAT_RATE * 90;
  speech = g_new (float, speech_len);
  double phase = 0;
  for (gsize i = 0; i < speech_len; i++) {
    double t = (double) i / PPX_CHAT_RATE, f0 = 140 + 30 * sin (2 * G_PI * 0.3 * t);
    phase += 2 * G_PI * f0 / PPX_CHAT_RATE;
    double v = 0;
    for (int h = 1; h <= 8; h++)
      v += sin (h * phase) / h;
    speech[i] = (float) (0.15 * v * (0.55 + 0.45 * sin (2 * G_PI * 4 * t)));
  }
}

static float *
speech_slice (double offset, double seconds, gsize *n)
{
  load_speech ();
  gsize start = (gsize) (offset * PPX_CHAT_RATE) % speech_len;
  *n = (gsize) (seconds * PPX_CHAT_RATE);
  float *out = g_new (float, *n);
  for (gsize i = 0; i < *n; i++)
    out[i] = speech[(start + i) % speech_len];
  return out;
}

PpxChatAudio *
fixture_speech (double offset, double seconds)
{
  gsize n;
  g_autofree float *pcm = speech_slice (offset, seconds, &n);
  g_autoptr (GError) error = NULL;
  PpxChatAudio *audio = ppx_chat_audio_new_from_samples (pcm, n, &error);
  g_assert_no_error (error);
  return audio;
}

/* ---- the model directory ---- */

static void
write_voice_wav (const char *dir, const char *name, double offset, double seconds)
{
  gsize n;
  g_autofree float *pcm = speech_slice (offset, seconds, &n);
  g_autofree char *path = g_build_filename (dir, name, NULL);
  g_autoptr (GError) error = NULL;
  g_assert_true (ppx_audio_write_f32 (path, pcm, n, PPX_CHAT_RATE, &error));
}

/* A voice .pt as the published ones are: "embeddings" bf16 [frames, 1, 1, dim], "cache" int64 [1, 17, 4]. */
static void
write_voice_pt (const char *dir, const char *name, int frames, int dim)
{
  PtFixtureTensor tensors[] = {
    {"embeddings", "BFloat16Storage", "0", (gint64) frames * dim, 0, 4, {frames, 1, 1, dim}, {dim, dim, dim, 1}},
    {"cache", "LongStorage", "1", 68, 0, 3, {1, 17, 4}, {68, 4, 1}},
  };
  g_autoptr (GBytes) pickle = pt_fixture_pickle (tensors, G_N_ELEMENTS (tensors));
  guint16 *emb = g_new (guint16, (gsize) frames * dim);
  for (int i = 0; i < frames * dim; i++) {
    float v = (float) (0.05 * sin (0.37 * i));
    guint32 bits;
    memcpy (&bits, &v, 4);
    emb[i] = GUINT16_TO_LE ((guint16) (bits >> 16));
  }
  gint64 *cache = g_new (gint64, 68);
  for (int i = 0; i < 68; i++)
    cache[i] = GINT64_TO_LE (i % 4 == 3 ? -1 : (i * 7) % 100);
  g_autoptr (GBytes) e = g_bytes_new_take (emb, (gsize) frames * dim * 2);
  g_autoptr (GBytes) c = g_bytes_new_take (cache, 68 * 8);
  const char *keys[] = {"0", "1"};
  GBytes *storages[] = {e, c};
  g_autoptr (GBytes) file = pt_fixture_file (pickle, 2, keys, storages);
  g_autofree char *path = g_build_filename (dir, name, NULL);
  g_autoptr (GError) error = NULL;
  g_assert_true (g_file_set_contents (path, g_bytes_get_data (file, NULL), (gssize) g_bytes_get_size (file), &error));
}

static void
remove_model_dir (void)
{
  if (!model_dir)
    return;
  const char *argv[] = {"rm", "-rf", model_dir, NULL};
  g_spawn_sync (NULL, (char **) argv, NULL, G_SPAWN_SEARCH_PATH, NULL, NULL, NULL, NULL, NULL, NULL);
}

static void
run (const char *const *argv)
{
  g_autoptr (GError) error = NULL;
  int status;
  g_assert_true (g_spawn_sync (NULL, (char **) argv, NULL, G_SPAWN_STDOUT_TO_DEV_NULL | G_SPAWN_STDERR_TO_DEV_NULL,
                               NULL, NULL, NULL, NULL, &status, &error));
  g_assert_no_error (error);
  g_assert_true (g_spawn_check_wait_status (status, NULL));
}

const char *
fixture_model_dir (void)
{
  if (model_dir)
    return model_dir;
  g_autoptr (GError) error = NULL;
  model_dir = g_dir_make_tmp ("ppx-server-test-XXXXXX", &error);
  g_assert_no_error (error);
  atexit (remove_model_dir);
  const char *make[] = {env_or_fail ("PPX_MAKE_MODEL"), "--preset", "tiny", "--output-dir", model_dir, NULL};
  run (make);
  const char *tok[] = {env_or_fail ("PPX_MAKE_TOKENIZER"), model_dir, NULL};
  run (tok);
  g_autofree char *voices = g_build_filename (model_dir, "voices", NULL);
  g_assert_cmpint (g_mkdir (voices, 0755), ==, 0);
  write_voice_wav (voices, "VOICE1.wav", 2.0, 1.5);
  write_voice_wav (voices, "VOICE2.wav", 7.0, 1.0);
  write_voice_wav (voices, "LONG.wav", 0.0, 60.0);
  write_voice_pt (voices, "NATF0.pt", 12, 64);
  return model_dir;
}

void
fixture_test_init (int *argc, char ***argv)
{
  gst_init (argc, argv);
  g_test_init (argc, argv, NULL);
  fixture_model_dir ();
}

/* ---- the server ---- */

static gboolean
drain_stderr (FixtureServer *s)
{
  GObject *stream = G_OBJECT (s->err);
  char buf[4096];
  gssize n;
  while ((n = g_pollable_input_stream_read_nonblocking (G_POLLABLE_INPUT_STREAM (stream), buf, sizeof buf, NULL,
                                                        NULL)) > 0)
    g_string_append_len (s->log, buf, n);
  return n == 0 ? G_SOURCE_REMOVE : G_SOURCE_CONTINUE;
}

static gboolean
on_stderr (GObject *stream, gpointer user_data)
{
  return drain_stderr (user_data);
}

/* A test that fails (abort) must not leave its server running. */
static void
die_with_parent (gpointer nofile)
{
  prctl (PR_SET_PDEATHSIG, SIGKILL);
  if (GPOINTER_TO_UINT (nofile)) {
    struct rlimit limit = {GPOINTER_TO_UINT (nofile), GPOINTER_TO_UINT (nofile)};
    setrlimit (RLIMIT_NOFILE, &limit);
  }
}

FixtureServer *
fixture_server_start (const char *const *args)
{
  return fixture_server_start_with (args, NULL, 0);
}

FixtureServer *
fixture_server_start_with (const char *const *args, const char *const *env, guint nofile)
{
  g_autoptr (GPtrArray) argv = g_ptr_array_new ();
  g_ptr_array_add (argv, (gpointer) env_or_fail ("PPX_SERVER"));
  g_ptr_array_add (argv, "--model-dir");
  g_ptr_array_add (argv, (gpointer) fixture_model_dir ());
  g_ptr_array_add (argv, "--port");
  g_ptr_array_add (argv, "0");
  gboolean admission = FALSE;
  for (guint i = 0; args && args[i]; i++) {
    g_ptr_array_add (argv, (gpointer) args[i]);
    admission |= g_str_has_prefix (args[i], "--admission");
  }
  /* admission by memory unless the test asks: on this shared machine other work slows the ticks, and a server
   * admitting by its tick (the default, server.md "Admission") would refuse the tests' calls now and then */
  if (!admission) {
    g_ptr_array_add (argv, "--admission");
    g_ptr_array_add (argv, "memory");
  }
  g_ptr_array_add (argv, NULL);
  FixtureServer *s = g_new0 (FixtureServer, 1);
  s->log = g_string_new (NULL);
  g_autoptr (GError) error = NULL;
  g_autoptr (GSubprocessLauncher) launcher =
      g_subprocess_launcher_new (G_SUBPROCESS_FLAGS_STDOUT_PIPE | G_SUBPROCESS_FLAGS_STDERR_PIPE);
  g_subprocess_launcher_set_child_setup (launcher, die_with_parent, GUINT_TO_POINTER (nofile), NULL);
  for (guint i = 0; env && env[i]; i++) {
    g_auto (GStrv) kv = g_strsplit (env[i], "=", 2);
    g_subprocess_launcher_setenv (launcher, kv[0], kv[1] ? kv[1] : "", TRUE);
  }
  s->proc = g_subprocess_launcher_spawnv (launcher, (const char *const *) argv->pdata, &error);
  g_assert_no_error (error);
  s->err = g_subprocess_get_stderr_pipe (s->proc);
  GSource *src = g_pollable_input_stream_create_source (G_POLLABLE_INPUT_STREAM (s->err), NULL);
  g_source_set_callback (src, G_SOURCE_FUNC (on_stderr), s, NULL);
  g_source_attach (src, NULL);
  g_source_unref (src);
  GPollableInputStream *out = G_POLLABLE_INPUT_STREAM (g_subprocess_get_stdout_pipe (s->proc));
  g_autoptr (GString) line = g_string_new (NULL);
  gint64 deadline = g_get_monotonic_time () + 60 * G_USEC_PER_SEC;
  while (!strchr (line->str, '\n') && g_get_monotonic_time () < deadline) {
    char buf[512];
    gssize n = g_pollable_input_stream_read_nonblocking (out, buf, sizeof buf, NULL, NULL);
    if (n > 0)
      g_string_append_len (line, buf, n);
    else if (n == 0)
      break;
    else
      g_main_context_iteration (NULL, FALSE), g_usleep (5000);
  }
  const char *at = strstr (line->str, "serving ");
  if (!at) {
    fixture_server_log (s);
    g_error ("the server did not start: %s\n%s", line->str, s->log->str);
  }
  g_auto (GStrv) words = g_strsplit (at + 8, " ", 2);
  s->url = g_strdup (words[0]);
  g_autoptr (GUri) uri = g_uri_parse (s->url, G_URI_FLAGS_NONE, NULL);
  s->port = (guint) g_uri_get_port (uri);
  s->ws_url = g_strdup_printf ("%s://127.0.0.1:%u/api/chat", g_str_has_prefix (s->url, "https") ? "wss" : "ws",
                               s->port);
  return s;
}

const char *
fixture_server_log (FixtureServer *s)
{
  while (g_main_context_iteration (NULL, FALSE))
    ;
  drain_stderr (s);
  return s->log->str;
}

guint
fixture_server_log_count (FixtureServer *s, const char *needle)
{
  g_auto (GStrv) lines = g_strsplit (fixture_server_log (s), "\n", -1);
  guint n = 0;
  for (guint i = 0; lines[i]; i++)
    n += strstr (lines[i], needle) != NULL;
  return n;
}

gboolean
fixture_server_wait_log_count (FixtureServer *s, const char *needle, guint n, guint timeout_ms)
{
  gint64 deadline = g_get_monotonic_time () + (gint64) timeout_ms * 1000;
  while (fixture_server_log_count (s, needle) < n) {
    if (g_get_monotonic_time () > deadline)
      return FALSE;
    g_usleep (10000);
  }
  return TRUE;
}

gboolean
fixture_server_wait_log (FixtureServer *s, const char *needle, guint timeout_ms)
{
  return fixture_server_wait_log_count (s, needle, 1, timeout_ms);
}

void
fixture_server_signal (FixtureServer *s, int signum)
{
  g_subprocess_send_signal (s->proc, signum);
}

static void
on_exited (GObject *proc, GAsyncResult *result, gpointer flag)
{
  g_subprocess_wait_finish (G_SUBPROCESS (proc), result, NULL);
  *(gboolean *) flag = TRUE;
}

int
fixture_server_wait_exit (FixtureServer *s, guint timeout_ms)
{
  gboolean exited = FALSE;
  g_subprocess_wait_async (s->proc, NULL, on_exited, &exited);
  gint64 deadline = g_get_monotonic_time () + (gint64) timeout_ms * 1000;
  while (!exited && g_get_monotonic_time () < deadline) {
    g_main_context_iteration (NULL, FALSE);
    g_usleep (5000);
  }
  if (!exited) {
    g_subprocess_force_exit (s->proc);
    while (!exited)
      g_main_context_iteration (NULL, TRUE);
    return -1;
  }
  fixture_server_log (s);
  return g_subprocess_get_if_exited (s->proc) ? g_subprocess_get_exit_status (s->proc) : 128;
}

int
fixture_server_stop (FixtureServer *s, guint timeout_ms)
{
  fixture_server_signal (s, SIGTERM);
  return fixture_server_wait_exit (s, timeout_ms);
}

void
fixture_server_finish (FixtureServer *s)
{
  g_assert_cmpint (fixture_server_stop (s, 20000), ==, 0);
  fixture_server_free (s);
}

void
fixture_server_free (FixtureServer *s)
{
  if (!s)
    return;
  if (g_subprocess_get_identifier (s->proc)) { /* still running */
    fixture_server_signal (s, SIGKILL);
    g_subprocess_wait (s->proc, NULL, NULL);
  }
  fixture_server_log (s);
  g_main_context_iteration (NULL, FALSE);
  g_source_remove_by_user_data (s);
  g_object_unref (s->proc);
  g_string_free (s->log, TRUE);
  g_free (s->url);
  g_free (s->ws_url);
  g_free (s);
}

guint64
fixture_server_rss_kb (FixtureServer *s)
{
  g_autofree char *path = g_strdup_printf ("/proc/%s/status", g_subprocess_get_identifier (s->proc));
  g_autofree char *text = NULL;
  if (!g_file_get_contents (path, &text, NULL, NULL))
    return 0;
  const char *at = strstr (text, "VmRSS:");
  return at ? g_ascii_strtoull (at + 6, NULL, 10) : 0;
}

guint
fixture_server_fds (FixtureServer *s)
{
  g_autofree char *path = g_strdup_printf ("/proc/%s/fd", g_subprocess_get_identifier (s->proc));
  g_autoptr (GDir) dir = g_dir_open (path, 0, NULL);
  guint n = 0;
  while (dir && g_dir_read_name (dir))
    n++;
  return n;
}

guint
fixture_server_threads (FixtureServer *s)
{
  g_autofree char *path = g_strdup_printf ("/proc/%s/status", g_subprocess_get_identifier (s->proc));
  g_autofree char *text = NULL;
  if (!g_file_get_contents (path, &text, NULL, NULL))
    return 0;
  const char *at = strstr (text, "Threads:");
  return at ? (guint) g_ascii_strtoull (at + 8, NULL, 10) : 0;
}

char *
fixture_raw_http (FixtureServer *s, const char *request, guint timeout_ms, gboolean *closed)
{
  g_autoptr (GSocketClient) client = g_socket_client_new ();
  g_autoptr (GSocketConnection) conn = g_socket_client_connect_to_host (client, "127.0.0.1", (guint16) s->port, NULL,
                                                                        NULL);
  g_assert_nonnull (conn);
  GSocket *socket = g_socket_connection_get_socket (conn);
  g_socket_send (socket, request, strlen (request), NULL, NULL);
  g_autoptr (GString) out = g_string_new (NULL);
  gint64 deadline = g_get_monotonic_time () + (gint64) timeout_ms * 1000;
  gboolean ended = FALSE;
  for (;;) {
    gint64 left = deadline - g_get_monotonic_time ();
    if (left <= 0 || !g_socket_condition_timed_wait (socket, G_IO_IN, left, NULL, NULL))
      break;
    char buf[4096];
    gssize n = g_socket_receive (socket, buf, sizeof buf, NULL, NULL);
    if (n <= 0) {
      ended = TRUE;
      break;
    }
    g_string_append_len (out, buf, n);
  }
  if (closed)
    *closed = ended;
  return g_string_free (g_steal_pointer (&out), FALSE);
}

static void
record_answer (PpxChatCall *call, const guint8 *data, gsize len, gpointer answer)
{
  if (len > 0 && data[0] == PPX_CHAT_AUDIO)
    g_byte_array_append (answer, data + 1, (guint) len - 1);
}

guint64
fixture_server_warm_rss_kb (FixtureServer *s, const char *path)
{
  guint before = fixture_server_log_count (s, "torn down");
  RawWs *ws = raw_ws_connect (s, path, NULL);
  g_usleep (500000);
  raw_ws_free (ws);
  for (int i = 0; i < 500 && (fixture_server_sessions (s) != 0 || fixture_server_log_count (s, "torn down") == before);
       i++)
    g_usleep (20000);
  g_usleep (200000);
  return fixture_server_rss_kb (s);
}

PpxChatCall *
fixture_call_new_recording (FixtureServer *s, const char *const *params, PpxChatAudio *audio, PpxChatPacing pacing,
                            gboolean end_of_stream, GByteArray *answer)
{
  PpxChatOptions o = {.url = s->ws_url, .params = params, .audio = audio, .pacing = pacing,
                      .end_of_stream = end_of_stream, .decode = TRUE, .accept_invalid_certificates = TRUE};
  PpxChatCallbacks callbacks = {.message = answer ? record_answer : NULL};
  PpxChatCall *call = ppx_chat_call_new (&o, &callbacks, answer);
  ppx_chat_call_start (call);
  return call;
}

PpxChatCall *
fixture_call_new (FixtureServer *s, const char *const *params, PpxChatAudio *audio, PpxChatPacing pacing,
                  gboolean end_of_stream)
{
  return fixture_call_new_recording (s, params, audio, pacing, end_of_stream, NULL);
}

gboolean
fixture_call_until_handshake (PpxChatCall *call, guint timeout_ms)
{
  gint64 deadline = g_get_monotonic_time () + (gint64) timeout_ms * 1000;
  while (!ppx_chat_call_get_record (call)->handshake_us && !ppx_chat_call_is_finished (call) &&
         g_get_monotonic_time () < deadline)
    g_main_context_iteration (NULL, TRUE);
  return ppx_chat_call_get_record (call)->handshake_us != 0;
}

void
fixture_call_close (PpxChatCall *call)
{
  ppx_chat_call_close (call);
  g_assert_true (ppx_chat_call_wait (call, 10000));
}

guint
fixture_server_sessions (FixtureServer *s)
{
  g_autofree char *body = NULL;
  fixture_http (s, NULL, "/health", NULL, &body, NULL);
  const char *at = strstr (body, "\"sessions\":");
  return at ? (guint) g_ascii_strtoull (at + 11, NULL, 10) : G_MAXUINT;
}

gboolean
fixture_server_wait_idle (FixtureServer *s, guint timeout_ms)
{
  gint64 deadline = g_get_monotonic_time () + (gint64) timeout_ms * 1000;
  while (fixture_server_sessions (s) != 0) {
    if (g_get_monotonic_time () > deadline)
      return FALSE;
    g_usleep (20000);
  }
  return TRUE;
}

/* ---- HTTP ---- */

static gboolean
accept_any_certificate (SoupMessage *msg, GTlsCertificate *certificate, GTlsCertificateFlags errors, gpointer data)
{
  return TRUE;
}

guint
fixture_http (FixtureServer *s, const char *method, const char *path, const char *const *headers, char **body,
              double *ms)
{
  g_autoptr (SoupSession) session = soup_session_new_with_options ("timeout", 30, NULL);
  g_autofree char *url = g_strconcat (s->url, path[0] == '/' ? path + 1 : path, NULL);
  g_autoptr (SoupMessage) msg = soup_message_new (method ? method : "GET", url);
  g_assert_nonnull (msg);
  g_signal_connect (msg, "accept-certificate", G_CALLBACK (accept_any_certificate), NULL);
  for (guint i = 0; headers && headers[i]; i++) {
    g_auto (GStrv) kv = g_strsplit (headers[i], ": ", 2);
    soup_message_headers_replace (soup_message_get_request_headers (msg), kv[0], kv[1]);
  }
  gint64 t0 = g_get_monotonic_time ();
  g_autoptr (GBytes) bytes = soup_session_send_and_read (session, msg, NULL, NULL);
  if (ms)
    *ms = (g_get_monotonic_time () - t0) / 1000.0;
  if (body)
    *body = bytes && g_bytes_get_size (bytes) ? g_strndup (g_bytes_get_data (bytes, NULL), g_bytes_get_size (bytes))
                                              : g_strdup ("");
  return soup_message_get_status (msg);
}

/* ---- the raw WebSocket client ---- */

static gboolean
read_more (RawWs *ws, guint timeout_ms)
{
  if (!g_socket_condition_timed_wait (ws->socket, G_IO_IN, (gint64) timeout_ms * 1000, NULL, NULL))
    return FALSE;
  guint8 buf[65536];
  gssize n = g_socket_receive (ws->socket, (char *) buf, sizeof buf, NULL, NULL);
  if (n <= 0)
    return FALSE;
  g_byte_array_append (ws->pending, buf, (guint) n);
  return TRUE;
}

RawWs *
raw_ws_connect (FixtureServer *s, const char *path, const char *const *extra)
{
  g_autoptr (GSocketClient) client = g_socket_client_new ();
  GSocketConnection *conn = g_socket_client_connect_to_host (client, "127.0.0.1", (guint16) s->port, NULL, NULL);
  if (!conn)
    return NULL;
  RawWs *ws = g_new0 (RawWs, 1);
  ws->conn = conn;
  ws->socket = g_socket_connection_get_socket (conn);
  ws->pending = g_byte_array_new ();
  g_autoptr (GString) req = g_string_new (NULL);
  g_string_append_printf (req, "GET %s HTTP/1.1\r\n", path);
  gboolean host = FALSE;
  for (guint i = 0; extra && extra[i]; i++) {
    host |= g_ascii_strncasecmp (extra[i], "Host:", 5) == 0;
    g_string_append_printf (req, "%s\r\n", extra[i]);
  }
  if (!host)
    g_string_append_printf (req, "Host: 127.0.0.1:%u\r\n", s->port);
  g_string_append (req, "Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\n"
                        "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n");
  g_socket_send (ws->socket, req->str, req->len, NULL, NULL);
  gint64 deadline = g_get_monotonic_time () + 30 * G_USEC_PER_SEC;
  const guint8 *end = NULL;
  while (!(end = memmem (ws->pending->data, ws->pending->len, "\r\n\r\n", 4)) && g_get_monotonic_time () < deadline)
    if (!read_more (ws, 1000) && !g_socket_condition_check (ws->socket, G_IO_IN))
      g_usleep (1000);
  if (end) {
    sscanf ((const char *) ws->pending->data, "HTTP/1.1 %u", &ws->status);
    g_byte_array_remove_range (ws->pending, 0, (guint) (end + 4 - ws->pending->data));
  }
  return ws;
}

gboolean
raw_ws_send_frame (RawWs *ws, guint8 opcode, gboolean fin, const void *payload, gsize len)
{
  guint8 header[14];
  gsize h = 0;
  header[h++] = (fin ? 0x80 : 0) | opcode;
  if (len < 126) {
    header[h++] = 0x80 | (guint8) len;
  } else if (len < 65536) {
    header[h++] = 0x80 | 126;
    header[h++] = (guint8) (len >> 8);
    header[h++] = (guint8) len;
  } else {
    header[h++] = 0x80 | 127;
    for (int i = 7; i >= 0; i--)
      header[h++] = (guint8) ((guint64) len >> (8 * i));
  }
  const guint8 mask[4] = {0x12, 0x34, 0x56, 0x78};
  memcpy (header + h, mask, 4);
  h += 4;
  g_autofree guint8 *frame = g_malloc (h + len);
  memcpy (frame, header, h);
  for (gsize i = 0; i < len; i++)
    frame[h + i] = ((const guint8 *) payload)[i] ^ mask[i & 3];
  g_autoptr (GError) error = NULL;
  gsize sent = 0;
  if (!g_socket_get_timeout (ws->socket))
    g_socket_set_timeout (ws->socket, 10);
  while (sent < h + len) {
    gssize n = g_socket_send (ws->socket, (const char *) frame + sent, h + len - sent, NULL, &error);
    if (n <= 0)
      return FALSE;
    sent += (gsize) n;
  }
  return TRUE;
}

int
raw_ws_read_frame (RawWs *ws, guint8 **out, gsize *len, guint timeout_ms)
{
  gint64 deadline = g_get_monotonic_time () + (gint64) timeout_ms * 1000;
  for (;;) {
    const guint8 *p = ws->pending->data;
    gsize have = ws->pending->len;
    if (have >= 2) {
      gsize at = 2, n = p[1] & 0x7f;
      if (n == 126 && have >= 4)
        n = ((gsize) p[2] << 8) | p[3], at = 4;
      else if (n == 127 && have >= 10) {
        n = 0;
        for (int i = 0; i < 8; i++)
          n = (n << 8) | p[2 + i];
        at = 10;
      }
      if ((p[1] & 0x7f) < 126 || at > 2) {
        if (have >= at + n) {
          int opcode = p[0] & 0x0f;
          if (out)
            *out = g_memdup2 (p + at, n);
          if (len)
            *len = n;
          g_byte_array_remove_range (ws->pending, 0, (guint) (at + n));
          return opcode;
        }
      }
    }
    gint64 left = deadline - g_get_monotonic_time ();
    if (left <= 0 || !read_more (ws, (guint) (left / 1000) + 1))
      return -1;
  }
}

int
raw_ws_wait_close (RawWs *ws, guint timeout_ms)
{
  gint64 deadline = g_get_monotonic_time () + (gint64) timeout_ms * 1000;
  for (;;) {
    gint64 left = deadline - g_get_monotonic_time ();
    if (left <= 0)
      return -1;
    guint8 *payload = NULL;
    gsize len = 0;
    int opcode = raw_ws_read_frame (ws, &payload, &len, (guint) (left / 1000) + 1);
    int code = len >= 2 ? (payload[0] << 8) | payload[1] : 1005;
    g_free (payload);
    if (opcode == 8)
      return code;
    if (opcode < 0)
      return g_get_monotonic_time () < deadline ? 1006 : -1;
  }
}

void
raw_ws_free (RawWs *ws)
{
  if (!ws)
    return;
  g_io_stream_close (G_IO_STREAM (ws->conn), NULL, NULL);
  g_object_unref (ws->conn);
  g_byte_array_unref (ws->pending);
  g_free (ws);
}

gboolean
raw_ws_send_audio (RawWs *ws, const void *ogg, gsize len)
{
  g_autofree guint8 *msg = g_malloc (len + 1);
  msg[0] = PPX_CHAT_AUDIO;
  memcpy (msg + 1, ogg, len);
  return raw_ws_send_frame (ws, 2, TRUE, msg, len + 1);
}

gboolean
raw_ws_send_page (RawWs *ws, PpxChatAudio *audio, guint i)
{
  gint64 end;
  gsize len;
  const guint8 *page = g_bytes_get_data (ppx_chat_audio_page (audio, i, &end), &len);
  return raw_ws_send_audio (ws, page, len);
}

RawWs *
raw_ws_call (FixtureServer *s, const char *path, PpxChatAudio *audio, guint32 *serial)
{
  RawWs *ws = raw_ws_connect (s, path ? path : "/api/chat", NULL);
  g_assert_cmpuint (ws->status, ==, 101);
  for (;;) {
    guint8 *payload = NULL;
    gsize len = 0;
    int opcode = raw_ws_read_frame (ws, &payload, &len, 30000);
    gboolean handshake = opcode == 2 && len == 1 && payload[0] == PPX_CHAT_HANDSHAKE;
    g_free (payload);
    g_assert_cmpint (opcode, >=, 0);
    if (handshake)
      break;
  }
  for (guint i = 0; i < 2; i++) {
    gint64 end;
    gsize len;
    const guint8 *page = g_bytes_get_data (ppx_chat_audio_page (audio, i, &end), &len);
    g_assert_true (raw_ws_send_audio (ws, page, len));
    if (serial)
      *serial = GUINT32_FROM_LE (*(const guint32 *) (page + 14)); /* the Ogg page header's serial number */
  }
  return ws;
}

double
fixture_cpu_pressure_us (void)
{
  g_autofree char *text = NULL;
  if (!g_file_get_contents ("/proc/pressure/cpu", &text, NULL, NULL))
    return 0;
  const char *total = strstr (text, "total=");
  return total ? g_ascii_strtod (total + 6, NULL) : 0;
}

double
fixture_metric (const char *text, const char *series, double missing)
{
  g_autofree char *needle = g_strdup_printf ("\n%s ", series);
  const char *at = strstr (text, needle);
  return at ? g_ascii_strtod (at + strlen (needle), NULL) : missing;
}
