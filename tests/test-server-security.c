/* personaplex-server under the attacks of issue 17 (on 127.0.0.1, the tiny model), on both WebSocket endpoints
 * where they apply:
 *   1. a message fragmented over many frames: closed as soon as it passes the message bound (1009), the
 *      server's memory flat while the client sends 300 MB;
 *   2. sockets that open and then never answer: the calls they hold end (pings, signalling and media timeouts)
 *      and the slots come back;
 *   3. a caller's prompts (a 60 s voice prompt) do not stall the main loop: a static file answers in a few ms;
 *   4. Origin is checked against the server's own addresses, not against the client's Host header (DNS
 *      rebinding), plus --allowed-origin;
 *   7. remote ICE candidates are capped per call;
 *   8. the ICE agent never uses UPnP. */
#include <gst/gst.h>
#include <string.h>

#include "server/server-fixture.h"
#include "server-ice.h"

#define MB 1024

/* 8. UPnP off on the libnice agent, whatever address the server listens on. */
static void
test_ice_upnp (void)
{
  const char *addresses[] = {"127.0.0.1", "0.0.0.0"};
  for (guint i = 0; i < G_N_ELEMENTS (addresses); i++) {
    GstElement *webrtc = gst_element_factory_make ("webrtcbin", NULL);
    if (!webrtc) {
      g_test_skip ("no webrtcbin");
      return;
    }
    ppx_server_ice_configure (webrtc, addresses[i]);
    GObject *ice = NULL, *agent = NULL;
    g_object_get (webrtc, "ice-agent", &ice, NULL);
    g_object_get (ice, "agent", &agent, NULL);
    gboolean upnp = TRUE;
    g_object_get (agent, "upnp", &upnp, NULL);
    g_assert_false (upnp);
    g_object_unref (agent);
    g_object_unref (ice);
    gst_object_unref (webrtc);
  }
}

/* 1. One text frame without FIN, then 65,000-byte continuation frames, up to 300 MB. */
static void
fragmented (const char *path)
{
  FixtureServer *s = fixture_server_start ((const char *const[]){"--max-sessions", "2", NULL});
  guint64 rss0 = fixture_server_warm_rss_kb (s, path);
  RawWs *ws = raw_ws_connect (s, path, NULL);
  g_assert_cmpuint (ws->status, ==, 101);
  g_autofree char *chunk = g_strnfill (65000, 'a');
  g_socket_set_timeout (ws->socket, 2);
  guint64 sent = 0;
  gboolean ok = raw_ws_send_frame (ws, 1, FALSE, chunk, 65000);
  while (ok && sent < 300ull * 1000 * 1000) {
    sent += 65000;
    ok = raw_ws_send_frame (ws, 0, FALSE, chunk, 65000);
    if (sent % (100 * 65000) == 0 && fixture_server_rss_kb (s) > rss0 + 64 * MB)
      break; /* the server keeps it all: no need to go on to 300 MB to fail */
  }
  int code = raw_ws_wait_close (ws, 10000);
  guint64 rss1 = fixture_server_rss_kb (s);
  g_printerr ("%s: the server took %.1f MB of one message before it closed (code %d); RSS %.1f -> %.1f MB\n", path,
              sent / 1e6, code, rss0 / 1024.0, rss1 / 1024.0);
  g_assert_cmpuint (sent, <, 10 * 1000 * 1000);
  g_assert_true (code == 1009 || code == 1006);
  g_assert_cmpint ((gint64) rss1 - (gint64) rss0, <, 4 * MB);
  g_assert_true (fixture_server_wait_log (s, "a message larger than 65536 bytes", 10000));
  raw_ws_free (ws);
  fixture_server_finish (s);
}

static void
test_fragmented_ws (void)
{
  fragmented ("/ws");
}

static void
test_fragmented_chat (void)
{
  fragmented ("/api/chat");
}

/* 2. Two sockets that open (one a WebRTC call, one an /api/chat call) and then never read or answer: the server
 * is full meanwhile, and the calls end within the timeouts (pings, signalling, media), the slots free again. */
static void
test_unanswered (void)
{
  FixtureServer *s = fixture_server_start ((const char *const[]){
    "--max-sessions", "2", "--join-timeout", "3", "--media-timeout", "3", "--ping-interval", "1", "--ping-timeout",
    "3", NULL});
  RawWs *a = raw_ws_connect (s, "/ws", NULL), *b = raw_ws_connect (s, "/api/chat", NULL);
  g_assert_cmpuint (a->status, ==, 101);
  g_assert_cmpuint (b->status, ==, 101);
  g_assert_cmpuint (fixture_http (s, NULL, "/health", NULL, NULL, NULL), ==, 503);
  gint64 t0 = g_get_monotonic_time ();
  fixture_server_wait_idle (s, 15000);
  double took = (g_get_monotonic_time () - t0) / 1e6;
  g_printerr ("two silent sockets held their slots %.1f s\n", took);
  g_assert_cmpuint (fixture_server_sessions (s), ==, 0);
  g_assert_cmpuint (fixture_http (s, NULL, "/health", NULL, NULL, NULL), ==, 200);
  g_assert_cmpuint (fixture_server_log_count (s, "torn down (timeout)"), ==, 2);
  raw_ws_free (a);
  raw_ws_free (b);
  fixture_server_finish (s);
}

typedef struct {
  FixtureServer *server;
  const char *path;
  gint64 start_us, joined_us; /* the connection, and the join done: the /ws offer or the /api/chat handshake */
  gint done;
} Joiner;

static gpointer
join_call (gpointer data)
{
  Joiner *j = data;
  j->start_us = g_get_monotonic_time ();
  RawWs *ws = raw_ws_connect (j->server, j->path, NULL);
  for (;;) {
    guint8 *payload = NULL;
    gsize len = 0;
    int opcode = raw_ws_read_frame (ws, &payload, &len, 60000);
    gboolean joined = (opcode == 2 && len == 1 && payload[0] == 0x00) ||
                      (opcode == 1 && g_strstr_len ((char *) payload, (gssize) len, "\"offer\""));
    g_free (payload);
    if (opcode < 0 || joined)
      break;
  }
  j->joined_us = g_get_monotonic_time ();
  raw_ws_free (ws);
  g_atomic_int_set (&j->done, 1);
  return NULL;
}

/* 3. While a call joins with a 60 s voice prompt (its prompts run: the voice read, encoded, 750 prompt frames),
 * GETs of a static file keep being answered: several during the join, none waiting for a large part of it (on a
 * busy machine a GET may wait for a CPU; a main loop running the prompts would answer none until they are done). */
static void
main_loop_free (const char *const *args, const char *path)
{
  FixtureServer *s = fixture_server_start (args);
  Joiner j = {s, path};
  g_autoptr (GArray) gets = g_array_new (FALSE, FALSE, sizeof (double) * 2); /* start (ms since the join), ms */
  GThread *thread = g_thread_new ("join", join_call, &j);
  while (!g_atomic_int_get (&j.done)) {
    double get[2], ms;
    gint64 t = g_get_monotonic_time ();
    g_assert_cmpuint (fixture_http (s, NULL, "/style.css", NULL, NULL, &ms), ==, 200);
    get[0] = (t - j.start_us) / 1000.0;
    get[1] = ms;
    g_array_append_val (gets, get);
  }
  g_thread_join (thread);
  double join_ms = (j.joined_us - j.start_us) / 1000.0, slowest = 0;
  guint during = 0;
  for (guint i = 0; i < gets->len; i++) {
    double *get = &g_array_index (gets, double, 2 * i);
    if (get[0] < 0 || get[0] > join_ms)
      continue;
    during++;
    slowest = MAX (slowest, get[1]);
  }
  g_printerr ("%s: the join took %.0f ms; %u GETs of /style.css started during it, the slowest took %.1f ms\n",
              path, join_ms, during, slowest);
  g_assert_cmpuint (during, >=, 5);
  g_assert_cmpfloat (slowest, <, join_ms / 3);
  g_assert_true (fixture_server_wait_log (s, "torn down", 30000));
  fixture_server_finish (s);
}

static void
test_main_loop_ws (void)
{
  g_autofree char *voice = g_build_filename (fixture_model_dir (), "voices", "LONG.wav", NULL);
  main_loop_free ((const char *const[]){"--max-sessions", "2", "--voice-prompt", voice, NULL}, "/ws");
}

static void
test_main_loop_chat (void)
{
  main_loop_free ((const char *const[]){"--max-sessions", "2", NULL}, "/api/chat?voice_prompt=LONG.wav");
}

/* 4. A page of attacker.example (DNS-rebound to 127.0.0.1) sends Host and Origin both attacker.example: refused
 * before the upgrade on both endpoints. The server's own origins and --allowed-origin pass; no Origin (not a
 * browser) passes. */
static void
test_origin (void)
{
  FixtureServer *s = fixture_server_start ((const char *const[]){"--max-sessions", "4", "--allowed-origin",
                                                                 "https://app.example", NULL});
  const char *paths[] = {"/ws", "/api/chat"};
  for (guint i = 0; i < G_N_ELEMENTS (paths); i++) {
    g_autofree char *host = g_strdup_printf ("Host: attacker.example:%u", s->port);
    g_autofree char *origin = g_strdup_printf ("Origin: http://attacker.example:%u", s->port);
    RawWs *rebound = raw_ws_connect (s, paths[i], (const char *const[]){host, origin, NULL});
    g_assert_cmpuint (rebound->status, ==, 403);
    raw_ws_free (rebound);
    g_autofree char *own = g_strdup_printf ("Origin: http://127.0.0.1:%u", s->port);
    g_autofree char *local = g_strdup_printf ("Origin: http://localhost:%u", s->port);
    const char *allowed[] = {own, local, "Origin: https://app.example", NULL};
    for (guint k = 0; k < G_N_ELEMENTS (allowed); k++) {
      /* the last: no Origin at all */
      RawWs *ws = raw_ws_connect (s, paths[i], allowed[k] ? (const char *const[]){allowed[k], NULL} : NULL);
      g_assert_cmpuint (ws->status, ==, 101);
      raw_ws_free (ws);
      g_assert_true (fixture_server_wait_idle (s, 10000));
    }
    g_autofree char *wrong_port = g_strdup_printf ("Origin: http://127.0.0.1:%u", s->port + 1);
    RawWs *other = raw_ws_connect (s, paths[i], (const char *const[]){wrong_port, NULL});
    g_assert_cmpuint (other->status, ==, 403);
    raw_ws_free (other);
  }
  fixture_server_finish (s);
}

/* 7. A page that sends 50,000 ICE candidates: at most --max-ice-candidates are taken, the rest refused (and the
 * page cut off after 20 refusals); the server's memory stays flat. */
static void
test_ice_flood (void)
{
  FixtureServer *s = fixture_server_start ((const char *const[]){"--max-sessions", "2", NULL});
  guint64 rss0 = fixture_server_warm_rss_kb (s, "/ws");
  RawWs *ws = raw_ws_connect (s, "/ws", NULL);
  g_assert_cmpuint (ws->status, ==, 101);
  for (gboolean offer = FALSE; !offer;) { /* the offer comes once the call's prompts are done */
    guint8 *payload = NULL;
    gsize len = 0;
    g_assert_cmpint (raw_ws_read_frame (ws, &payload, &len, 30000), ==, 1);
    offer = g_strstr_len ((char *) payload, (gssize) len, "\"offer\"") != NULL;
    g_free (payload);
  }
  g_socket_set_timeout (ws->socket, 2);
  guint sent = 0;
  for (; sent < 50000; sent++) {
    g_autofree char *msg = g_strdup_printf ("{\"type\":\"ice\",\"candidate\":\"candidate:%u 1 udp 2122260223 "
                                            "127.0.0.1 %u typ host\",\"sdpMLineIndex\":0}", sent, 10000 + sent % 50000);
    if (!raw_ws_send_frame (ws, 1, TRUE, msg, strlen (msg)))
      break;
  }
  raw_ws_wait_close (ws, 10000);
  raw_ws_free (ws);
  fixture_server_wait_log_count (s, "torn down", 2, 30000);
  g_usleep (200000);
  guint64 rss1 = fixture_server_rss_kb (s);
  g_printerr ("sent %u candidates; RSS %.1f -> %.1f MB\n", sent, rss0 / 1024.0, rss1 / 1024.0);
  g_assert_true (fixture_server_wait_log (s, "more than 50 ICE candidates", 10000));
  g_assert_cmpint ((gint64) rss1 - (gint64) rss0, <, 2 * MB);
  fixture_server_finish (s);
}

int
main (int argc, char **argv)
{
  fixture_test_init (&argc, &argv);
  g_test_add_func ("/server-security/ice-upnp", test_ice_upnp);
  g_test_add_func ("/server-security/fragmented-ws", test_fragmented_ws);
  g_test_add_func ("/server-security/fragmented-chat", test_fragmented_chat);
  g_test_add_func ("/server-security/unanswered", test_unanswered);
  g_test_add_func ("/server-security/main-loop-ws", test_main_loop_ws);
  g_test_add_func ("/server-security/main-loop-chat", test_main_loop_chat);
  g_test_add_func ("/server-security/origin", test_origin);
  g_test_add_func ("/server-security/ice-flood", test_ice_flood);
  return g_test_run ();
}
