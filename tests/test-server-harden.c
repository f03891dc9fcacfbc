/* personaplex-server over days of traffic and under the attacks of issue 25 (on 127.0.0.1, the tiny model); each
 * test failed against the server before its fix:
 *   1. every /api/chat call left its pipeline alive (its bus's two sockets among it): the fds come back;
 *   2. after one fd exhaustion the server never accepted again: it recovers, and says it ran out;
 *   3. keep-alive requests left a socket each in CLOSE-WAIT (libsoup 3.2.3): every answer closes its connection;
 *   4. request bodies were buffered whole, before any token: refused at their headers, never read;
 *   5. a blank token failed open: it is a start-up error, and an empty token never matches;
 *   6. Ogg pages with a constant granule position made the decoded audio unbounded: bounded by its size;
 *   7. an open redirect at sign-in;
 *   8. no header or TLS-handshake timeout, no bound on unauthenticated connections;
 *   9. the media timeout was evaded by a page now and then: a call whose audio falls behind real time ends. */
#include <gst/gst.h>
#include <stdio.h>
#include <string.h>
#include <glib/gstdio.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include "chat-client-private.h"
#include "ogg-page.h"
#include "server/server-fixture.h"

#define MB 1024

/* A short call (`seconds` of speech sent at once, then its end of stream), run to its end. */
static void
short_call (FixtureServer *s, double seconds)
{
  g_autoptr (PpxChatAudio) audio = fixture_speech (1.0, seconds);
  g_autoptr (PpxChatCall) call = fixture_call_new (s, NULL, audio, PPX_CHAT_PACE_FAST, TRUE);
  g_assert_true (ppx_chat_call_wait (call, 60000));
  g_assert_cmpint (ppx_chat_call_get_record (call)->close_code, ==, 1000);
}

/* Waits until every call is torn down and the server's fds settle (a closed socket goes a little after). */
static guint
settled_fds (FixtureServer *s)
{
  g_assert_true (fixture_server_wait_idle (s, 30000));
  guint fds = fixture_server_fds (s);
  for (int i = 0; i < 20; i++) {
    g_usleep (100000);
    guint now = fixture_server_fds (s);
    if (now == fds)
      break;
    fds = now;
  }
  return fds;
}

/* 1. Ten /api/chat calls, one after the other: the server's fds end where they were after the first. */
static void
test_chat_leak (void)
{
  FixtureServer *s = fixture_server_start ((const char *const[]){"--max-sessions", "2", NULL});
  short_call (s, 0.5);
  guint fds0 = settled_fds (s);
  guint64 rss0 = fixture_server_rss_kb (s);
  for (int i = 0; i < 10; i++)
    short_call (s, 0.5);
  guint fds1 = settled_fds (s);
  guint64 rss1 = fixture_server_rss_kb (s);
  g_printerr ("10 calls: fds %u -> %u, RSS %.1f -> %.1f MB\n", fds0, fds1, rss0 / 1024.0, rss1 / 1024.0);
  g_assert_cmpuint (fds1, <=, fds0 + 2);
  fixture_server_finish (s);
}

/* Idle TCP connections (they send nothing). */
static GPtrArray *
idle_connections (FixtureServer *s, guint n)
{
  GPtrArray *conns = g_ptr_array_new_with_free_func (g_object_unref);
  g_autoptr (GSocketClient) client = g_socket_client_new ();
  g_socket_client_set_timeout (client, 2); /* a server that accepts no more: its kernel queue fills */
  for (guint i = 0; i < n; i++) {
    GSocketConnection *c = g_socket_client_connect_to_host (client, "127.0.0.1", (guint16) s->port, NULL, NULL);
    if (c)
      g_ptr_array_add (conns, c);
  }
  return conns;
}

/* 2. At a 40-fd limit, 60 idle connections take every fd; once they are closed the server serves again (before:
 * libsoup's listener stopped accepting at the first failure, for good), and its log said that it ran out. */
static void
test_fd_exhaustion (void)
{
  FixtureServer *s = fixture_server_start_with ((const char *const[]){"--max-sessions", "2", NULL}, NULL, 40);
  g_autoptr (GPtrArray) conns = idle_connections (s, 60);
  gboolean said = fixture_server_wait_log (s, "out of file descriptors", 5000);
  g_printerr ("%u idle connections at a 40-fd limit: the server holds %u fds\n", conns->len, fixture_server_fds (s));
  g_ptr_array_set_size (conns, 0);
  gboolean closed = FALSE;
  gint64 t0 = g_get_monotonic_time ();
  g_autofree char *answer = fixture_raw_http (s, "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", 5000, &closed);
  g_printerr ("/health after they closed: %.0f ms: %.40s\n", (g_get_monotonic_time () - t0) / 1e3, answer);
  g_assert_true (g_str_has_prefix (answer, "HTTP/1.1 200"));
  g_assert_true (said);
  g_assert_true (fixture_server_wait_log (s, "accepting connections again", 5000));
  fixture_server_finish (s);
}

/* 3. Keep-alive requests (HTTP/1.1 without "Connection: close") of every kind of answer: the server closes each
 * connection after its answer, and its fds come back (before: each stayed in CLOSE-WAIT once the client closed). */
static void
test_keep_alive (void)
{
  FixtureServer *s = fixture_server_start ((const char *const[]){"--max-sessions", "2", "--auth-token", "T0k", NULL});
  guint fds0 = settled_fds (s);
  const char *requests[] = {
    "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
    "GET /api/chat HTTP/1.1\r\nHost: 127.0.0.1\r\nOrigin: http://evil.example\r\n\r\n", /* 403 */
    "GET /api/chat?token=T0k&seed=x HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",                /* 400 */
    "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",                                   /* 401 */
    "GET /nothing-here HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",                             /* 404 */
    "DELETE /style.css HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",                             /* 405 */
  };
  const char *statuses[] = {"200", "403", "400", "401", "404", "405"};
  for (guint round = 0; round < 5; round++)
    for (guint i = 0; i < G_N_ELEMENTS (requests); i++) {
      gboolean closed = FALSE;
      g_autofree char *answer = fixture_raw_http (s, requests[i], 3000, &closed);
      if (round == 0)
        g_printerr ("%.40s... -> %.12s, %s\n", requests[i], answer, closed ? "closed by the server" : "kept open");
      g_assert_true (g_str_has_prefix (answer, "HTTP/1.1 ") && strncmp (answer + 9, statuses[i], 3) == 0);
      g_assert_true (closed);
    }
  guint fds1 = settled_fds (s);
  g_printerr ("30 requests: fds %u -> %u\n", fds0, fds1);
  g_assert_cmpuint (fds1, <=, fds0 + 2);
  fixture_server_finish (s);
}

/* Sends `headers`, then reads the answer (it must come at the headers, before any body), then tries to send
 * `body_mb` MB of body: what the server took of it must not grow its memory. Returns the answer. */
static char *
body_attack (FixtureServer *s, const char *headers, gboolean chunked, guint body_mb, gint64 *grown_kb)
{
  guint64 rss0 = fixture_server_rss_kb (s);
  g_autoptr (GSocketClient) client = g_socket_client_new ();
  g_autoptr (GSocketConnection) conn = g_socket_client_connect_to_host (client, "127.0.0.1", (guint16) s->port, NULL,
                                                                        NULL);
  GSocket *socket = g_socket_connection_get_socket (conn);
  g_socket_set_timeout (socket, 2);
  g_socket_send (socket, headers, strlen (headers), NULL, NULL);
  char buf[4096] = "";
  gssize n = 0;
  if (g_socket_condition_timed_wait (socket, G_IO_IN, 3 * G_USEC_PER_SEC, NULL, NULL))
    n = g_socket_receive (socket, buf, sizeof buf - 1, NULL, NULL);
  buf[MAX (n, 0)] = '\0';
  g_autofree char *chunk = g_malloc0 (65536 + 16);
  gsize len = 65536;
  if (chunked) {
    int h = g_snprintf (chunk, 16, "%x\r\n", 65536 - 16);
    memset (chunk + h, 'a', 65536 - 16);
    memcpy (chunk + h + 65536 - 16, "\r\n", 2);
    len = (gsize) h + 65536 - 16 + 2;
  }
  guint64 sent = 0;
  while (sent < (guint64) body_mb << 20) {
    gssize k = g_socket_send (socket, chunk, len, NULL, NULL);
    if (k <= 0)
      break;
    sent += (guint64) k;
  }
  g_usleep (300000);
  *grown_kb = (gint64) fixture_server_rss_kb (s) - (gint64) rss0;
  g_printerr ("%.30s...: answered '%.24s' at the headers; %.1f MB of body sent; RSS grew %.1f MB\n", headers, buf,
              sent / 1048576.0, *grown_kb / 1024.0);
  return g_strdup (buf);
}

/* 4. Request bodies on a server with a token: answered at the headers (405 for POST, 413 for a GET with a body),
 * before any token, the body never read: the server's memory stays flat while the client pushes 64 MB (before:
 * every byte was kept). */
static void
test_request_body (void)
{
  FixtureServer *s = fixture_server_start ((const char *const[]){"--max-sessions", "2", "--auth-token", "T0k", NULL});
  fixture_server_warm_rss_kb (s, "/api/chat");
  gint64 grown;
  g_autofree char *a = body_attack (s, "POST /health HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 500000000\r\n\r\n",
                                    FALSE, 64, &grown);
  g_assert_true (g_str_has_prefix (a, "HTTP/1.1 405"));
  g_assert_cmpint (grown, <, 8 * MB);
  g_autofree char *b = body_attack (s, "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\n",
                                    TRUE, 64, &grown);
  g_assert_true (g_str_has_prefix (b, "HTTP/1.1 413"));
  g_assert_cmpint (grown, <, 8 * MB);
  g_assert_true (fixture_server_wait_log (s, "(a request body, not read)", 5000));
  /* the server still serves */
  g_assert_cmpuint (fixture_http (s, NULL, "/health", NULL, NULL, NULL), ==, 200);
  fixture_server_finish (s);
}

/* Runs the server with `args` and `env` until it exits (at most 20 s): its exit status, -1 when it served instead
 * (killed then); its stderr in *err. */
static int
run_until_exit (const char *const *args, const char *const *env, char **err)
{
  FixtureServer *s = NULL;
  g_autoptr (GPtrArray) argv = g_ptr_array_new ();
  g_ptr_array_add (argv, (gpointer) g_getenv ("PPX_SERVER"));
  g_ptr_array_add (argv, "--model-dir");
  g_ptr_array_add (argv, (gpointer) fixture_model_dir ());
  g_ptr_array_add (argv, "--port");
  g_ptr_array_add (argv, "0");
  for (guint i = 0; args[i]; i++)
    g_ptr_array_add (argv, (gpointer) args[i]);
  g_ptr_array_add (argv, NULL);
  g_autoptr (GSubprocessLauncher) launcher =
      g_subprocess_launcher_new (G_SUBPROCESS_FLAGS_STDOUT_SILENCE | G_SUBPROCESS_FLAGS_STDERR_PIPE);
  for (guint i = 0; env && env[i]; i++) {
    g_auto (GStrv) kv = g_strsplit (env[i], "=", 2);
    g_subprocess_launcher_setenv (launcher, kv[0], kv[1], TRUE);
  }
  g_autoptr (GSubprocess) proc = g_subprocess_launcher_spawnv (launcher, (const char *const *) argv->pdata, NULL);
  g_assert_nonnull (proc);
  (void) s;
  GInputStream *in = g_subprocess_get_stderr_pipe (proc);
  g_autoptr (GString) text = g_string_new (NULL);
  gint64 deadline = g_get_monotonic_time () + 20 * G_USEC_PER_SEC;
  gboolean serving = FALSE;
  while (g_get_monotonic_time () < deadline) {
    char buf[1024];
    gssize n = g_pollable_input_stream_read_nonblocking (G_POLLABLE_INPUT_STREAM (in), buf, sizeof buf, NULL, NULL);
    if (n == 0)
      break;
    if (n > 0)
      g_string_append_len (text, buf, n);
    else
      g_usleep (10000);
    if (strstr (text->str, "origins allowed to open calls")) {
      serving = TRUE;
      break;
    }
  }
  if (serving || g_get_monotonic_time () >= deadline) {
    g_subprocess_force_exit (proc);
    g_subprocess_wait (proc, NULL, NULL);
    *err = g_string_free (g_steal_pointer (&text), FALSE);
    return -1;
  }
  g_subprocess_wait (proc, NULL, NULL);
  *err = g_string_free (g_steal_pointer (&text), FALSE);
  return g_subprocess_get_if_exited (proc) ? g_subprocess_get_exit_status (proc) : -1;
}

/* 5. A blank token is a start-up error (exit 2), from the environment as from --auth-token (before: the server said
 * a token was required, then served, and an empty ?token= passed); an empty presented token never matches. */
static void
test_blank_token (void)
{
  struct {
    const char *args[4], *env[2];
  } cases[] = {
    {{"--address", "0.0.0.0", NULL}, {"PERSONAPLEX_AUTH_TOKEN=  ", NULL}},
    {{"--address", "0.0.0.0", NULL}, {"PERSONAPLEX_AUTH_TOKEN=", NULL}},
    {{"--auth-token", "", NULL}, {NULL}},
    {{"--auth-token", " \t ", NULL}, {NULL}},
    {{NULL}, {"PERSONAPLEX_AUTH_TOKEN= ", NULL}},
  };
  for (guint i = 0; i < G_N_ELEMENTS (cases); i++) {
    g_autofree char *err = NULL;
    int status = run_until_exit (cases[i].args, cases[i].env, &err);
    g_printerr ("case %u: exit %d: %s", i, status, err);
    g_assert_cmpint (status, ==, 2);
    g_assert_nonnull (strstr (err, "blank"));
  }
  FixtureServer *s = fixture_server_start ((const char *const[]){"--max-sessions", "2", "--auth-token", "T0k", NULL});
  g_assert_cmpuint (fixture_http (s, NULL, "/metrics?token=", NULL, NULL, NULL), ==, 401);
  g_assert_cmpuint (fixture_http (s, NULL, "/metrics", (const char *const[]){"Authorization: Bearer ", NULL}, NULL,
                                  NULL), ==, 401);
  g_assert_cmpuint (fixture_http (s, NULL, "/metrics?token=T0k", NULL, NULL, NULL), ==, 200);
  fixture_server_finish (s);
}

/* 7. Sign-in redirects stay on the server: a path with a backslash (which browsers read as a slash) or several
 * leading slashes comes back escaped (before: "Location: /\evil.example/", i.e. http://evil.example/). */
static void
test_open_redirect (void)
{
  FixtureServer *s = fixture_server_start ((const char *const[]){"--max-sessions", "2", "--auth-token", "T0k", NULL});
  const char *paths[] = {"/%5Cevil.example/?token=T0k", "/%5C%5Cevil.example/?token=T0k",
                         "//evil.example/?token=T0k", "/%2F%5Cevil.example?a=1&token=T0k", "/%09/evil.example?token=T0k"};
  for (guint i = 0; i < G_N_ELEMENTS (paths); i++) {
    g_autofree char *request = g_strdup_printf ("GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", paths[i]);
    g_autofree char *answer = fixture_raw_http (s, request, 3000, NULL);
    const char *at = strstr (answer, "Location: ");
    g_assert_nonnull (at);
    g_autofree char *location = g_strndup (at + 10, strcspn (at + 10, "\r\n"));
    g_printerr ("%s -> %.12s, Location: %s\n", paths[i], answer, location);
    g_assert_true (g_str_has_prefix (answer, "HTTP/1.1 303"));
    g_assert_true (location[0] == '/' && location[1] != '/' && location[1] != '\\');
    g_assert_null (strchr (location, '\\'));
    for (const char *c = location; *c; c++)
      g_assert_true (*c > 0x20 && *c < 0x7f);
    g_autoptr (GUri) resolved = g_uri_parse_relative (NULL, location, G_URI_FLAGS_NONE, NULL);
    g_autoptr (GUri) base = g_uri_parse ("http://127.0.0.1/", G_URI_FLAGS_NONE, NULL);
    g_autoptr (GUri) target = g_uri_parse_relative (base, location, G_URI_FLAGS_NONE, NULL);
    g_assert_nonnull (target);
    g_assert_cmpstr (g_uri_get_host (target), ==, "127.0.0.1");
  }
  fixture_server_finish (s);
}

/* Sockets that each sent `bytes` and then nothing more. */
static GPtrArray *
partial_connections (FixtureServer *s, guint n, const char *bytes, gsize len)
{
  GPtrArray *conns = idle_connections (s, n);
  for (guint i = 0; i < conns->len; i++)
    if (len)
      g_socket_send (g_socket_connection_get_socket (conns->pdata[i]), bytes, len, NULL, NULL);
  return conns;
}

/* How many of `conns` the server closed (reading them gives the end of the stream or a reset). */
static guint
closed_by_server (GPtrArray *conns)
{
  guint n = 0;
  for (guint i = 0; i < conns->len; i++) {
    GSocket *socket = g_socket_connection_get_socket (conns->pdata[i]);
    char buf[256];
    if (!g_socket_condition_check (socket, G_IO_IN | G_IO_HUP | G_IO_ERR))
      continue;
    gssize k = g_socket_receive_with_blocking (socket, buf, sizeof buf, FALSE, NULL, NULL);
    n += k <= 0;
  }
  return n;
}

static const char client_hello[] = "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\x11\x22\x33";

/* 8. 100 partial requests and 40 partial TLS ClientHellos on the plain port, then idle and partial connections on
 * a TLS port: the server holds at most PPX_LISTENER_MAX_PENDING of them at once, answers /health meanwhile, and
 * closes every one within the request timeout (before: they stayed open as long as their clients wished). */
static void
test_slow_requests (void)
{
  FixtureServer *s = fixture_server_start ((const char *const[]){"--max-sessions", "2", NULL});
  guint fds0 = settled_fds (s);
  const char *partial = "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ";
  g_autoptr (GPtrArray) a = partial_connections (s, 100, partial, strlen (partial));
  g_autoptr (GPtrArray) b = partial_connections (s, 40, client_hello, sizeof client_hello - 1);
  g_usleep (500000);
  guint fds1 = fixture_server_fds (s);
  double ms = 0;
  guint health = fixture_http (s, NULL, "/health", NULL, NULL, &ms);
  g_printerr ("140 slow connections: the server holds %u fds (%u before); /health %u in %.1f ms\n", fds1, fds0, health,
              ms);
  g_assert_cmpuint (health, ==, 200);
  g_assert_cmpuint (fds1, <=, fds0 + 64 + 8);
  gint64 t0 = g_get_monotonic_time ();
  guint closed = 0;
  while (g_get_monotonic_time () - t0 < 10 * G_USEC_PER_SEC && (closed = closed_by_server (a) + closed_by_server (b)) <
         a->len + b->len)
    g_usleep (200000);
  g_printerr ("after %.1f s the server had closed %u of %u\n", (g_get_monotonic_time () - t0) / 1e6, closed,
              a->len + b->len);
  g_assert_cmpuint (closed, ==, a->len + b->len);
  g_assert_true (fixture_server_wait_log (s, "that sent no complete request within", 5000));
  fixture_server_finish (s);
  /* TLS: idle sockets, and half a ClientHello */
  g_autofree char *ssl = g_dir_make_tmp ("ppx-harden-ssl-XXXXXX", NULL);
  s = fixture_server_start ((const char *const[]){"--max-sessions", "2", "--ssl-dir", ssl, NULL});
  g_autoptr (GPtrArray) c = partial_connections (s, 20, NULL, 0);
  g_autoptr (GPtrArray) d = partial_connections (s, 20, client_hello, sizeof client_hello - 1);
  t0 = g_get_monotonic_time ();
  while (g_get_monotonic_time () - t0 < 10 * G_USEC_PER_SEC && (closed = closed_by_server (c) + closed_by_server (d)) <
         c->len + d->len)
    g_usleep (200000);
  g_printerr ("TLS: after %.1f s the server had closed %u of %u\n", (g_get_monotonic_time () - t0) / 1e6, closed,
              c->len + d->len);
  g_assert_cmpuint (closed, ==, c->len + d->len);
  g_assert_cmpuint (fixture_http (s, NULL, "/health", NULL, NULL, NULL), ==, 200);
  fixture_server_finish (s);
  const char *rm[] = {"rm", "-rf", ssl, NULL};
  g_spawn_sync (NULL, (char **) rm, NULL, G_SPAWN_SEARCH_PATH, NULL, NULL, NULL, NULL, NULL, NULL);
}

/* Bytes sent on `socket` that the server has not read: waiting in the kernel on either side (/proc/net/tcp: the
 * client's send queue and the server's receive queue). */
static guint64
server_unread_bytes (FixtureServer *s, GSocket *socket)
{
  g_autoptr (GSocketAddress) local = g_socket_get_local_address (socket, NULL);
  guint client_port = g_inet_socket_address_get_port (G_INET_SOCKET_ADDRESS (local));
  g_autofree char *text = NULL;
  g_file_get_contents ("/proc/net/tcp", &text, NULL, NULL);
  g_auto (GStrv) lines = g_strsplit (text ? text : "", "\n", -1);
  guint64 unread = 0;
  guint found = 0;
  for (guint i = 1; lines[i]; i++) {
    guint lport = 0, rport = 0;
    unsigned long long tx = 0, rx = 0;
    if (sscanf (lines[i], " %*u: %*8x:%x %*8x:%x %*x %llx:%llx", &lport, &rport, &tx, &rx) != 4)
      continue;
    if (lport == s->port && rport == client_port)
      unread += rx, found++;
    else if (lport == client_port && rport == s->port)
      unread += tx, found++;
  }
  if (found != 2)
    g_printerr ("the connection's two ends: %u found in /proc/net/tcp\n", found);
  return unread;
}

/* 6. Pages whose granule position never moves, each of 255 two-byte Opus packets of 120 ms (30.6 s of audio in
 * 540 bytes), sent as fast as the server takes them for 6 s: the server's memory stays flat (before: it grew by
 * the decoded audio, 70 MB/s); the audio waiting for the model is bounded by its size, not by its timestamps. */
static void
test_constant_granule (void)
{
  FixtureServer *s = fixture_server_start ((const char *const[]){"--max-sessions", "2", NULL});
  guint64 rss0 = fixture_server_warm_rss_kb (s, "/api/chat");
  g_autoptr (PpxChatAudio) audio = fixture_speech (0, 0.5);
  guint32 serial = 0;
  RawWs *ws = raw_ws_call (s, NULL, audio, &serial);
  g_socket_set_timeout (ws->socket, 1);
  g_autoptr (GBytes) packet = g_bytes_new_static ("\x1b\x02", 2); /* SILK NB 60 ms, code 3: 2 frames of 0 bytes */
  const GBytes *packets[255];
  for (guint i = 0; i < 255; i++)
    packets[i] = packet;
  gint64 t0 = g_get_monotonic_time ();
  guint pages = 0;
  guint64 peak = rss0;
  while (g_get_monotonic_time () - t0 < 6 * G_USEC_PER_SEC) {
    g_autoptr (GBytes) page = ppx_ogg_page_build (serial, 2 + pages, 0, 312, packets, 255);
    if (!raw_ws_send_audio (ws, g_bytes_get_data (page, NULL), g_bytes_get_size (page))) {
      if (!g_socket_is_connected (ws->socket))
        break;
      continue; /* the server stopped reading for a moment: flow control */
    }
    pages++;
    if (pages % 50 == 0) {
      peak = MAX (peak, fixture_server_rss_kb (s));
      if (peak > rss0 + 512 * MB)
        break;
    }
  }
  peak = MAX (peak, fixture_server_rss_kb (s));
  guint64 unread = server_unread_bytes (s, ws->socket);
  g_printerr ("%u pages (%.0f s of audio by their packets) in 6 s; RSS %.1f -> peak %.1f MB; %.1f MB sent and not "
              "read by the server\n", pages, pages * 30.6, rss0 / 1024.0, peak / 1024.0, unread / 1048576.0);
  raw_ws_free (ws);
  g_assert_cmpint ((gint64) peak - (gint64) rss0, <, 32 * MB);
  /* the server stops reading (what the client sent then waits in the kernel: printed, not asserted, since the
   * server before the fix also stopped once its queue filled) by the packets' durations, and says so */
  g_assert_true (fixture_server_wait_log (s, "by its Opus packets) runs more than 60 s ahead of the model", 5000));
  g_assert_true (fixture_server_wait_idle (s, 30000));
  fixture_server_finish (s);
}

/* 9. A call that sends one 40 ms page every 2 s: its audio falls behind real time, and it is ended once that is
 * --media-timeout (3 s) (before: each page reset the timeout, and the call held its slot as long as it liked). */
static void
test_media_trickle (void)
{
  FixtureServer *s = fixture_server_start ((const char *const[]){"--max-sessions", "2", "--media-timeout", "3", NULL});
  g_autoptr (PpxChatAudio) audio = fixture_speech (0, 10);
  RawWs *ws = raw_ws_call (s, NULL, audio, NULL);
  gint64 t0 = g_get_monotonic_time ();
  int code = -1;
  for (guint i = 2; i < ppx_chat_audio_n_pages (audio) && g_get_monotonic_time () - t0 < 15 * G_USEC_PER_SEC; i++) {
    raw_ws_send_page (ws, audio, i);
    if ((code = raw_ws_wait_close (ws, 2000)) != -1)
      break;
  }
  double took = (g_get_monotonic_time () - t0) / 1e6;
  g_printerr ("a page every 2 s: closed %d after %.1f s\n", code, took);
  raw_ws_free (ws);
  g_assert_cmpint (code, ==, 1001);
  g_assert_cmpfloat (took, <, 10);
  g_assert_true (fixture_server_wait_log (s, "behind real time", 5000));
  g_assert_true (fixture_server_wait_log (s, "torn down (timeout)", 10000));
  fixture_server_finish (s);
}

/* ---- misleading messages (issue 25): one test each ---- */

/* A dropped TCP connection (no close frame) is logged as that, not as "closed by the client (code 0)". */
static void
test_msg_dropped (void)
{
  FixtureServer *s = fixture_server_start ((const char *const[]){"--max-sessions", "2", NULL});
  g_autoptr (PpxChatAudio) audio = fixture_speech (0, 0.5);
  raw_ws_free (raw_ws_call (s, NULL, audio, NULL));
  g_assert_true (fixture_server_wait_log (s, "torn down", 10000));
  g_printerr ("%s", fixture_server_log (s));
  g_assert_cmpuint (fixture_server_log_count (s, "the client's connection dropped (no close frame)"), ==, 1);
  g_assert_cmpuint (fixture_server_log_count (s, "(code 0)"), ==, 0);
  fixture_server_finish (s);
}

/* The first text frame of a /ws socket. */
static char *
first_text (RawWs *ws)
{
  for (;;) {
    guint8 *payload = NULL;
    gsize len = 0;
    int opcode = raw_ws_read_frame (ws, &payload, &len, 10000);
    if (opcode == 1)
      return g_strndup ((char *) payload, len);
    g_free (payload);
    if (opcode < 0 || opcode == 8)
      return g_strdup ("");
  }
}

/* /ws while the server drains says so, not "too many sessions". */
static void
test_msg_drain_ws (void)
{
  FixtureServer *s = fixture_server_start ((const char *const[]){"--max-sessions", "2", NULL});
  g_autoptr (PpxChatAudio) audio = fixture_speech (0, 0.5);
  RawWs *call = raw_ws_call (s, NULL, audio, NULL);
  fixture_server_signal (s, SIGTERM);
  g_assert_true (fixture_server_wait_log (s, "draining", 10000));
  /* refused before the upgrade (503, as a full server: a balancer retries it elsewhere), saying why */
  RawWs *ws = raw_ws_connect (s, "/ws", NULL);
  g_assert_cmpuint (ws->status, ==, 503);
  raw_ws_free (ws);
  g_autofree char *text = NULL;
  g_assert_cmpuint (fixture_http (s, "GET", "/ws", NULL, &text, NULL), ==, 503);
  g_printerr ("/ws while draining: %s\n", text);
  g_assert_nonnull (strstr (text, "draining"));
  g_assert_null (strstr (text, "too many sessions"));
  raw_ws_free (call);
  g_assert_cmpint (fixture_server_wait_exit (s, 30000), ==, 0);
  fixture_server_free (s);
}

/* A second BOS page in the middle of the stream is bad input (1008, counted bad_input), not "in: Internal data
 * stream error." (1011, error). */
static void
test_msg_second_bos (void)
{
  FixtureServer *s = fixture_server_start ((const char *const[]){"--max-sessions", "2", NULL});
  g_autoptr (PpxChatAudio) audio = fixture_speech (0, 1.0);
  RawWs *ws = raw_ws_call (s, NULL, audio, NULL);
  for (guint i = 2; i < 5; i++) /* three audio pages, then the OpusHead page again */
    raw_ws_send_page (ws, audio, i == 4 ? 0 : i);
  g_autofree char *error = NULL;
  int code = -1;
  for (;;) {
    guint8 *payload = NULL;
    gsize len = 0;
    int opcode = raw_ws_read_frame (ws, &payload, &len, 10000);
    if (opcode == 2 && len > 1 && payload[0] == 0x05)
      error = g_strndup ((char *) payload + 1, len - 1);
    if (opcode == 8)
      code = len >= 2 ? (payload[0] << 8) | payload[1] : 1005;
    g_free (payload);
    if (opcode < 0 || opcode == 8)
      break;
  }
  g_printerr ("a second BOS page: closed %d, \"%s\"\n", code, error ? error : "");
  raw_ws_free (ws);
  g_assert_cmpint (code, ==, 1008);
  g_assert_nonnull (error);
  g_assert_nonnull (strstr (error, "second logical stream"));
  g_assert_true (fixture_server_wait_log (s, "torn down (bad_input)", 10000));
  fixture_server_finish (s);
}

/* A voice file that does not load: the 0x05 message does not show where the server keeps its model. */
static void
test_msg_model_path (void)
{
  g_autofree char *bad = g_build_filename (fixture_model_dir (), "voices", "BROKEN.wav", NULL);
  g_assert_true (g_file_set_contents (bad, "RIFF, but not a wave file at all", -1, NULL));
  FixtureServer *s = fixture_server_start ((const char *const[]){"--max-sessions", "2", NULL});
  g_autoptr (PpxChatCall) call = fixture_call_new (s, (const char *const[]){"voice_prompt", "BROKEN.wav", NULL}, NULL,
                                                   PPX_CHAT_PACE_FAST, FALSE);
  g_assert_true (ppx_chat_call_wait (call, 30000));
  const PpxChatRecord *r = ppx_chat_call_get_record (call);
  g_assert_cmpuint (r->errors->len, ==, 1);
  g_printerr ("0x05: %s\n", (char *) r->errors->pdata[0]);
  g_assert_null (strstr (r->errors->pdata[0], fixture_model_dir ()));
  fixture_server_finish (s);
  g_unlink (bad);
}

/* The voice list follows no link out of voices/ (one within it is listed). */
static void
test_msg_voice_links (void)
{
  g_autofree char *out = g_build_filename (fixture_model_dir (), "voices", "OUTSIDE.wav", NULL);
  g_autofree char *in = g_build_filename (fixture_model_dir (), "voices", "INSIDE.wav", NULL);
  g_autofree char *target = g_build_filename (fixture_model_dir (), "secret.wav", NULL);
  g_assert_true (g_file_set_contents (target, "not for calls", -1, NULL));
  g_assert_cmpint (symlink (target, out), ==, 0);
  g_assert_cmpint (symlink ("VOICE1.wav", in), ==, 0);
  FixtureServer *s = fixture_server_start ((const char *const[]){"--max-sessions", "2", NULL});
  g_autofree char *body = NULL;
  g_assert_cmpuint (fixture_http (s, NULL, "/api/voices", NULL, &body, NULL), ==, 200);
  g_printerr ("/api/voices: %s\n", body);
  g_assert_null (strstr (body, "OUTSIDE.wav"));
  g_assert_nonnull (strstr (body, "INSIDE.wav"));
  fixture_server_finish (s);
  g_unlink (out);
  g_unlink (in);
  g_unlink (target);
}

/* Answers the /ws page sends beyond the first are refused and count toward the 20-refusal close (before: each was
 * "accepted", its refusal came later from webrtcbin and counted nowhere). */
static void
test_msg_refused_answers (void)
{
  FixtureServer *s = fixture_server_start ((const char *const[]){"--max-sessions", "2", NULL});
  RawWs *ws = raw_ws_connect (s, "/ws", NULL);
  g_assert_cmpuint (ws->status, ==, 101);
  for (gboolean offer = FALSE; !offer;) {
    g_autofree char *text = first_text (ws);
    g_assert_true (*text);
    offer = strstr (text, "\"offer\"") != NULL;
  }
  const char *answer = "{\"type\":\"answer\",\"sdp\":\"v=0\\r\\no=- 1 1 IN IP4 127.0.0.1\\r\\ns=-\\r\\nt=0 0\\r\\n"
                       "m=audio 9 UDP/TLS/RTP/SAVPF 96\\r\\nc=IN IP4 0.0.0.0\\r\\na=mid:0\\r\\n\"}";
  g_socket_set_timeout (ws->socket, 2);
  guint sent = 0;
  for (; sent < 300; sent++)
    if (!raw_ws_send_frame (ws, 1, TRUE, answer, strlen (answer)))
      break;
  int code = raw_ws_wait_close (ws, 10000);
  g_printerr ("%u answers sent: closed %d\n", sent, code);
  raw_ws_free (ws);
  g_assert_cmpint (code, ==, 1008);
  g_assert_true (fixture_server_wait_log (s, "too many refused messages", 10000));
  fixture_server_finish (s);
}

/* /health's tick times have at most 3 decimals. */
static void
test_msg_tick_decimals (void)
{
  FixtureServer *s = fixture_server_start ((const char *const[]){"--max-sessions", "2", NULL});
  short_call (s, 1.0);
  g_autofree char *body = NULL;
  fixture_http (s, NULL, "/health", NULL, &body, NULL);
  g_printerr ("/health: %s\n", body);
  const char *fields[] = {"\"tick_ms_p50\":", "\"tick_ms_p99\":"};
  for (guint i = 0; i < G_N_ELEMENTS (fields); i++) {
    const char *at = strstr (body, fields[i]);
    g_assert_nonnull (at);
    at += strlen (fields[i]);
    const char *dot = strchr (at, '.'), *end = at + strcspn (at, ",}");
    if (dot && dot < end)
      g_assert_cmpint (end - dot - 1, <=, 3);
  }
  fixture_server_finish (s);
}

/* A bad %-escape gets a 400 that says what was wrong (libsoup's own has an empty body). */
static void
test_msg_bad_escape (void)
{
  FixtureServer *s = fixture_server_start ((const char *const[]){"--max-sessions", "2", NULL});
  const char *targets[] = {"/%zz", "/api/chat?seed=%zz", "/health?x=%", "/%4"};
  for (guint i = 0; i < G_N_ELEMENTS (targets); i++) {
    g_autofree char *request = g_strdup_printf ("GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", targets[i]);
    gboolean closed = FALSE;
    g_autofree char *answer = fixture_raw_http (s, request, 3000, &closed);
    const char *body = strstr (answer, "\r\n\r\n");
    g_printerr ("%s -> %.12s ... %s", targets[i], answer, body ? body + 4 : "(no body)\n");
    g_assert_true (g_str_has_prefix (answer, "HTTP/1.1 400"));
    g_assert_nonnull (body);
    g_assert_nonnull (strstr (body, "%"));
    g_assert_true (closed);
  }
  g_assert_true (fixture_server_wait_log (s, "400 (a bad %-escape in its address)", 5000));
  g_assert_cmpuint (fixture_http (s, NULL, "/health?x=%41", NULL, NULL, NULL), ==, 200);
  fixture_server_finish (s);
}

int
main (int argc, char **argv)
{
  fixture_test_init (&argc, &argv);
  g_test_add_func ("/server-harden/chat-leak", test_chat_leak);
  g_test_add_func ("/server-harden/fd-exhaustion", test_fd_exhaustion);
  g_test_add_func ("/server-harden/keep-alive", test_keep_alive);
  g_test_add_func ("/server-harden/request-body", test_request_body);
  g_test_add_func ("/server-harden/blank-token", test_blank_token);
  g_test_add_func ("/server-harden/constant-granule", test_constant_granule);
  g_test_add_func ("/server-harden/open-redirect", test_open_redirect);
  g_test_add_func ("/server-harden/slow-requests", test_slow_requests);
  g_test_add_func ("/server-harden/media-trickle", test_media_trickle);
  g_test_add_func ("/server-harden/msg-dropped", test_msg_dropped);
  g_test_add_func ("/server-harden/msg-drain-ws", test_msg_drain_ws);
  g_test_add_func ("/server-harden/msg-second-bos", test_msg_second_bos);
  g_test_add_func ("/server-harden/msg-model-path", test_msg_model_path);
  g_test_add_func ("/server-harden/msg-voice-links", test_msg_voice_links);
  g_test_add_func ("/server-harden/msg-refused-answers", test_msg_refused_answers);
  g_test_add_func ("/server-harden/msg-tick-decimals", test_msg_tick_decimals);
  g_test_add_func ("/server-harden/msg-bad-escape", test_msg_bad_escape);
  return g_test_run ();
}
