/* personaplex-server for operators: the token (401 before the upgrade, no model time) and the cookie a browser
 * gets for it, /health and /metrics (the
 * engine's tick figures),
 * SIGTERM drain (and a second SIGTERM), TLS with a self-signed --ssl-dir, --static web clients with their content
 * types, and the start-up checks of the new options. */
#include <gst/gst.h>
#include <glib/gstdio.h>
#include <libsoup/soup.h>
#include <sys/wait.h>
#include <signal.h>
#include <string.h>

#include "server/server-fixture.h"

static PpxChatCall *
call_with (FixtureServer *s, const char *token, gboolean in_query, const char *const *params)
{
  PpxChatOptions o = {.url = s->ws_url, .params = params, .token = token, .token_in_query = in_query,
                      .accept_invalid_certificates = TRUE};
  PpxChatCall *call = ppx_chat_call_new (&o, NULL, NULL);
  ppx_chat_call_start (call);
  return call;
}

/* A missing or wrong token gets 401 before the upgrade and no call starts; the header and the query both work;
 * /metrics needs it, /health does not. */
static void
test_token (void)
{
  g_setenv ("PERSONAPLEX_AUTH_TOKEN", "s3cret-token", TRUE);
  FixtureServer *s = fixture_server_start ((const char *const[]){"--max-sessions", "2", NULL});
  g_unsetenv ("PERSONAPLEX_AUTH_TOKEN");
  const char *wrong[] = {NULL, "s3cret", "s3cret-token-and-more", "S3CRET-TOKEN"};
  for (guint i = 0; i < G_N_ELEMENTS (wrong); i++)
    for (int q = 0; q < 2; q++) {
      g_autoptr (PpxChatCall) call = call_with (s, wrong[i], q, NULL);
      g_assert_true (ppx_chat_call_wait (call, 10000));
      g_assert_cmpuint (ppx_chat_call_get_record (call)->http_status, ==, 401);
    }
  RawWs *ws = raw_ws_connect (s, "/ws", NULL);
  g_assert_cmpuint (ws->status, ==, 401);
  raw_ws_free (ws);
  g_assert_cmpuint (fixture_server_log_count (s, "/api/chat, voice"), ==, 0); /* no model time */
  g_assert_cmpuint (fixture_server_log_count (s, "started"), ==, 0);
  for (int q = 0; q < 2; q++) {
    g_autoptr (PpxChatCall) call = call_with (s, "s3cret-token", q, NULL);
    g_assert_true (fixture_call_until_handshake (call, 60000));
    fixture_call_close (call);
  }
  ws = raw_ws_connect (s, "/ws?token=s3cret-token", NULL);
  g_assert_cmpuint (ws->status, ==, 101);
  raw_ws_free (ws);
  g_assert_cmpuint (fixture_http (s, NULL, "/metrics", NULL, NULL, NULL), ==, 401);
  g_assert_cmpuint (fixture_http (s, NULL, "/metrics", (const char *const[]){"Authorization: Bearer nope", NULL},
                                  NULL, NULL), ==, 401);
  g_assert_cmpuint (fixture_http (s, NULL, "/metrics", (const char *const[]){"Authorization: Bearer s3cret-token",
                                                                             NULL}, NULL, NULL), ==, 200);
  g_assert_cmpuint (fixture_http (s, NULL, "/api/voices", NULL, NULL, NULL), ==, 401);
  g_assert_true (fixture_server_wait_idle (s, 10000)); /* the calls above torn down */
  g_assert_cmpuint (fixture_http (s, NULL, "/health", NULL, NULL, NULL), ==, 200);
  fixture_server_finish (s);
}

static gboolean
accept_certificate (SoupMessage *msg, GTlsCertificate *certificate, GTlsCertificateFlags errors, gpointer data)
{
  return TRUE;
}

/* A GET through `session` (it follows redirects and keeps cookies, as a browser); the final status, the
 * request's URI in *final (g_free) when asked for. */
static guint
session_get (SoupSession *session, FixtureServer *s, const char *path, char **final)
{
  g_autofree char *url = g_strconcat (s->url, path + 1, NULL);
  g_autoptr (SoupMessage) msg = soup_message_new ("GET", url);
  g_signal_connect (msg, "accept-certificate", G_CALLBACK (accept_certificate), NULL);
  g_autoptr (GUri) site = g_uri_parse (s->url, G_URI_FLAGS_NONE, NULL);
  soup_message_set_site_for_cookies (msg, site); /* a same-site request, as the page's own */
  g_autoptr (GBytes) body = soup_session_send_and_read (session, msg, NULL, NULL);
  if (final)
    *final = g_uri_to_string (soup_message_get_uri (msg));
  return soup_message_get_status (msg);
}

static void
on_ws_connected (GObject *source, GAsyncResult *result, gpointer data)
{
  GError *error = NULL;
  SoupWebsocketConnection **ws = data;
  *ws = soup_session_websocket_connect_finish (SOUP_SESSION (source), result, &error);
  if (!*ws) {
    g_printerr ("WebSocket refused (as expected where no cookie is valid): %s\n", error->message);
    *ws = GINT_TO_POINTER (1); /* refused: done */
  }
  g_clear_error (&error);
}

static void
on_ws_message (SoupWebsocketConnection *ws, int type, GBytes *message, gpointer data)
{
  gsize len;
  const guint8 *bytes = g_bytes_get_data (message, &len);
  if (type == SOUP_WEBSOCKET_DATA_BINARY && len >= 1 && bytes[0] == 0x00)
    *(gboolean *) data = TRUE;
}

/* /api/chat through `session` (its cookies, none other): TRUE when the upgrade was taken and the handshake (the
 * call's prompts done) arrived; the call is then closed. */
static gboolean
session_call (SoupSession *session, FixtureServer *s)
{
  g_autoptr (SoupMessage) msg = soup_message_new ("GET", s->ws_url);
  g_autoptr (GUri) site = g_uri_parse (s->url, G_URI_FLAGS_NONE, NULL);
  soup_message_set_site_for_cookies (msg, site);
  SoupWebsocketConnection *ws = NULL;
  soup_session_websocket_connect_async (session, msg, NULL, NULL, G_PRIORITY_DEFAULT, NULL, on_ws_connected, &ws);
  gint64 end = g_get_monotonic_time () + 30 * G_USEC_PER_SEC;
  while (!ws && g_get_monotonic_time () < end)
    g_main_context_iteration (NULL, TRUE);
  if (ws == GINT_TO_POINTER (1) || !ws)
    return FALSE;
  gboolean handshake = FALSE;
  g_signal_connect (ws, "message", G_CALLBACK (on_ws_message), &handshake);
  while (!handshake && g_get_monotonic_time () < end)
    g_main_context_iteration (NULL, TRUE);
  soup_websocket_connection_close (ws, SOUP_WEBSOCKET_CLOSE_NORMAL, NULL);
  while (soup_websocket_connection_get_state (ws) != SOUP_WEBSOCKET_STATE_CLOSED && g_get_monotonic_time () < end)
    g_main_context_iteration (NULL, TRUE);
  g_object_unref (ws);
  return handshake;
}

/* The cookie of `jar` for the server, or NULL. */
static SoupCookie *
auth_cookie (SoupCookieJar *jar)
{
  SoupCookie *found = NULL;
  GSList *all = soup_cookie_jar_all_cookies (jar);
  for (GSList *l = all; l; l = l->next)
    if (!found && g_str_equal (soup_cookie_get_name (l->data), "personaplex_auth"))
      found = soup_cookie_copy (l->data);
  g_slist_free_full (all, (GDestroyNotify) soup_cookie_free);
  return found;
}

/* The Location of a GET of `path` not followed (NULL without one; g_free) and its status in *status. */
static char *
location_of (FixtureServer *s, const char *path, guint *status)
{
  g_autoptr (SoupSession) session = soup_session_new ();
  g_autofree char *url = g_strconcat (s->url, path + 1, NULL);
  g_autoptr (SoupMessage) msg = soup_message_new ("GET", url);
  soup_message_add_flags (msg, SOUP_MESSAGE_NO_REDIRECT);
  g_autoptr (GBytes) body = soup_session_send_and_read (session, msg, NULL, NULL);
  *status = soup_message_get_status (msg);
  return g_strdup (soup_message_headers_get_one (soup_message_get_response_headers (msg), "Location"));
}

/* A browser that cannot send the token (the reference web client) opens a page once with ?token=: a wrong one is
 * 401 and sets nothing; the right one sets the cookie (HttpOnly, SameSite=Strict, Path=/, Secure under TLS, its
 * value not the token) and redirects to the same page without token=, keeping the other parameters. The cookie then
 * opens /api/chat (a call to its handshake), /ws and /metrics; a forged cookie gets 401 and no model time. A cookie
 * jar as a browser keeps one (libsoup's). */
static void
test_cookie (void)
{
  const char *token = "cookie-token-42";
  g_setenv ("PERSONAPLEX_AUTH_TOKEN", token, TRUE);
  FixtureServer *s = fixture_server_start ((const char *const[]){"--max-sessions", "2", NULL});
  g_autoptr (SoupSession) session = soup_session_new ();
  g_autoptr (SoupCookieJar) jar = soup_cookie_jar_new ();
  soup_session_add_feature (session, SOUP_SESSION_FEATURE (jar));

  g_assert_cmpuint (session_get (session, s, "/?token=wrong", NULL), ==, 401);
  g_assert_null (auth_cookie (jar));
  g_assert_false (session_call (session, s));
  g_assert_cmpuint (session_get (session, s, "/metrics", NULL), ==, 401);

  g_autofree char *final = NULL;
  g_assert_cmpuint (session_get (session, s, "/webrtc/?role=a%20baker&token=cookie-token-42&voice=NATF0.pt", &final),
                    ==, 200);
  g_autofree char *want = g_strconcat (s->url, "webrtc/?role=a%20baker&voice=NATF0.pt", NULL);
  g_assert_cmpstr (final, ==, want);
  SoupCookie *cookie = auth_cookie (jar);
  g_assert_nonnull (cookie);
  g_assert_true (soup_cookie_get_http_only (cookie));
  g_assert_cmpint (soup_cookie_get_same_site_policy (cookie), ==, SOUP_SAME_SITE_POLICY_STRICT);
  g_assert_cmpstr (soup_cookie_get_path (cookie), ==, "/");
  g_assert_false (soup_cookie_get_secure (cookie));
  g_assert_null (strstr (soup_cookie_get_value (cookie), token));
  g_autofree char *header = g_strdup_printf ("Cookie: personaplex_auth=%s", soup_cookie_get_value (cookie));
  soup_cookie_free (cookie);
  g_assert_cmpuint (fixture_server_log_count (s, "signed in"), ==, 1);

  /* the Location is relative (a TLS proxy in front makes the request's own URI http://), never another host */
  const struct {
    const char *path, *location;
  } redirects[] = {{"/?token=cookie-token-42", "/"},
                   {"/assets/x.js?a=1&token=cookie-token-42&b=2", "/assets/x.js?a=1&b=2"},
                   {"//evil.example/?token=cookie-token-42", "/evil.example/"},
                   {"/?to%6Ben=cookie-token-42&x", "/?x"}};
  for (guint i = 0; i < G_N_ELEMENTS (redirects); i++) {
    guint status;
    g_autofree char *location = location_of (s, redirects[i].path, &status);
    g_assert_cmpuint (status, ==, 303);
    g_assert_cmpstr (location, ==, redirects[i].location);
  }
  g_assert_cmpuint (session_get (session, s, "/metrics", NULL), ==, 200);
  g_assert_cmpuint (session_get (session, s, "/api/voices", NULL), ==, 200);
  g_assert_true (session_call (session, s));
  RawWs *ws = raw_ws_connect (s, "/ws", (const char *const[]){header, NULL});
  g_assert_cmpuint (ws->status, ==, 101);
  raw_ws_free (ws);
  g_assert_true (fixture_server_wait_idle (s, 10000));
  guint calls = fixture_server_log_count (s, "/api/chat, voice");

  /* forged: the token itself, or anything else, as the cookie */
  const char *forged[] = {"Cookie: personaplex_auth=cookie-token-42", "Cookie: personaplex_auth=00",
                          "Cookie: other=1; personaplex_auth="};
  for (guint i = 0; i < G_N_ELEMENTS (forged); i++) {
    g_assert_cmpuint (fixture_http (s, NULL, "/metrics", (const char *const[]){forged[i], NULL}, NULL, NULL), ==,
                      401);
    ws = raw_ws_connect (s, "/api/chat", (const char *const[]){forged[i], NULL});
    g_assert_cmpuint (ws->status, ==, 401);
    raw_ws_free (ws);
  }
  g_assert_cmpuint (fixture_server_log_count (s, "/api/chat, voice"), ==, calls); /* no model time */
  fixture_server_finish (s);

  /* under TLS the cookie is Secure */
  g_autofree char *dir = g_dir_make_tmp ("ppx-server-cookie-XXXXXX", NULL);
  g_autofree char *ssl = g_build_filename (dir, "ssl", NULL);
  s = fixture_server_start ((const char *const[]){"--max-sessions", "1", "--ssl-dir", ssl, NULL});
  g_unsetenv ("PERSONAPLEX_AUTH_TOKEN");
  g_autoptr (SoupSession) tls_session = soup_session_new ();
  g_autoptr (SoupCookieJar) tls_jar = soup_cookie_jar_new ();
  soup_session_add_feature (tls_session, SOUP_SESSION_FEATURE (tls_jar));
  g_assert_cmpuint (session_get (tls_session, s, "/?token=cookie-token-42", NULL), ==, 200);
  cookie = auth_cookie (tls_jar);
  g_assert_nonnull (cookie);
  g_assert_true (soup_cookie_get_secure (cookie));
  soup_cookie_free (cookie);
  g_assert_cmpuint (session_get (tls_session, s, "/metrics", NULL), ==, 200);
  fixture_server_finish (s);
  const char *argv[] = {"rm", "-rf", dir, NULL};
  g_spawn_sync (NULL, (char **) argv, NULL, G_SPAWN_SEARCH_PATH, NULL, NULL, NULL, NULL, NULL, NULL);
}

/* /health's body, /api/voices, and /metrics's series after two calls (one refused as full). */
static void
test_health_and_metrics (void)
{
  FixtureServer *s = fixture_server_start ((const char *const[]){"--max-sessions", "1", NULL});
  g_autofree char *health = NULL, *voices = NULL, *metrics = NULL;
  g_assert_cmpuint (fixture_http (s, NULL, "/health", NULL, &health, NULL), ==, 200);
  const char *fields[] = {"\"sessions\":0", "\"capacity\":1", "\"free\":1", "\"draining\":false", "\"tick_ms_p50\":",
                          "\"tick_ms_p99\":", "\"overruns\":0", "\"backend\":\"cpu\"", "\"device\":\"cpu\"",
                          "\"quantization\":\"bf16\"", "\"kv_cache_format\":\"bf16\""};
  for (guint i = 0; i < G_N_ELEMENTS (fields); i++)
    g_assert_nonnull (strstr (health, fields[i]));
  g_assert_cmpuint (fixture_http (s, NULL, "/api/voices", NULL, &voices, NULL), ==, 200);
  g_assert_cmpstr (voices, ==, "{\"voices\":[\"LONG.wav\",\"NATF0.pt\",\"VOICE1.wav\",\"VOICE2.wav\"],"
                               "\"default\":null}");
  g_autoptr (PpxChatAudio) audio = fixture_speech (2, 1.0);
  g_autoptr (PpxChatCall) call = fixture_call_new (s, NULL, audio, PPX_CHAT_PACE_REALTIME, FALSE);
  g_assert_true (fixture_call_until_handshake (call, 60000));
  g_autoptr (PpxChatCall) refused = call_with (s, NULL, FALSE, NULL);
  g_assert_true (ppx_chat_call_wait (refused, 10000));
  g_assert_cmpuint (ppx_chat_call_get_record (refused)->http_status, ==, 503);
  g_autofree char *full = NULL;
  g_assert_cmpuint (fixture_http (s, NULL, "/health", NULL, &full, NULL), ==, 503);
  g_assert_nonnull (strstr (full, "\"sessions\":1"));
  g_assert_nonnull (strstr (full, "\"free\":0"));
  while (ppx_chat_call_get_record (call)->answer_samples < 20000 && !ppx_chat_call_is_finished (call))
    g_main_context_iteration (NULL, TRUE);
  fixture_call_close (call);
  g_assert_true (fixture_server_wait_idle (s, 10000));
  g_assert_cmpuint (fixture_http (s, NULL, "/metrics", NULL, &metrics, NULL), ==, 200);
  const char *series[] = {
    "personaplex_sessions_active 0", "personaplex_sessions_capacity 1",
    "personaplex_calls_accepted_total{protocol=\"chat\"} 1",
    "personaplex_calls_refused_total{protocol=\"chat\",reason=\"full\"} 1",
    "personaplex_calls_ended_total{protocol=\"chat\",reason=\"client_closed\"} 1",
    "personaplex_join_duration_seconds_count{protocol=\"chat\"} 1", "personaplex_overruns_total ",
    "personaplex_tick_duration_seconds_bucket{le=\"+Inf\"} ", "personaplex_device_memory_bytes{backend=\"cpu\","
    "part=\"weights\"} ", "# TYPE personaplex_tick_duration_seconds histogram"};
  for (guint i = 0; i < G_N_ELEMENTS (series); i++) {
    if (!strstr (metrics, series[i]))
      g_error ("/metrics lacks '%s':\n%s", series[i], metrics);
  }
  const char *ticks = strstr (metrics, "personaplex_tick_duration_seconds_count ");
  g_assert_nonnull (ticks);
  g_assert_cmpuint (g_ascii_strtoull (ticks + strlen ("personaplex_tick_duration_seconds_count "), NULL, 10), >=, 10);
  fixture_server_finish (s);
}

/* A series' value in /metrics text ("NAME VALUE" at the start of a line); fails when it is missing. */
static double
series_value (const char *metrics, const char *name)
{
  g_autofree char *needle = g_strdup_printf ("\n%s ", name);
  const char *at = strstr (metrics, needle);
  if (!at)
    g_error ("/metrics lacks '%s':\n%s", name, metrics);
  return g_ascii_strtod (at + strlen (needle), NULL);
}

/* The tick figures are the engine's: one observation per tick, however many calls a tick steps. Nothing before
 * the first call (the prompts are not ticks); two calls at once, each 3 s in real time: every frame of each was
 * stepped by some tick, so there are at least as many ticks as the longer call's frames, and fewer than both calls'
 * frames together, since the engine stepped the two in the same ticks (the old per-call-frame figures counted each
 * such tick twice). The histogram adds up; /health's overruns are /metrics's. */
static void
test_engine_ticks (void)
{
  FixtureServer *s = fixture_server_start ((const char *const[]){"--max-sessions", "2", NULL});
  g_autofree char *before = NULL;
  g_assert_cmpuint (fixture_http (s, NULL, "/metrics", NULL, &before, NULL), ==, 200);
  g_assert_cmpfloat (series_value (before, "personaplex_tick_duration_seconds_count"), ==, 0);
  g_autoptr (PpxChatAudio) audio = fixture_speech (2, 3.0);
  PpxChatCall *calls[2];
  for (int i = 0; i < 2; i++)
    calls[i] = fixture_call_new (s, NULL, audio, PPX_CHAT_PACE_REALTIME, TRUE);
  g_assert_true (ppx_chat_calls_wait (calls, 2, NULL, 60000));
  double frames[2];
  for (int i = 0; i < 2; i++) {
    const PpxChatRecord *r = ppx_chat_call_get_record (calls[i]);
    g_assert_cmpint (r->close_code, ==, 1000);
    frames[i] = (double) r->answer_samples / 1920;
    g_assert_cmpfloat (frames[i], >=, 37);
  }
  g_assert_true (fixture_server_wait_idle (s, 10000));
  g_autofree char *metrics = NULL, *health = NULL;
  g_assert_cmpuint (fixture_http (s, NULL, "/metrics", NULL, &metrics, NULL), ==, 200);
  g_assert_cmpuint (fixture_http (s, NULL, "/health", NULL, &health, NULL), ==, 200);
  const double ticks = series_value (metrics, "personaplex_tick_duration_seconds_count");
  g_printerr ("engine ticks %.0f for %.0f + %.0f call frames\n", ticks, frames[0], frames[1]);
  g_assert_cmpfloat (ticks, >=, MAX (frames[0], frames[1]));
  g_assert_cmpfloat (ticks, <, frames[0] + frames[1]);
  g_assert_cmpfloat (series_value (metrics, "personaplex_tick_duration_seconds_bucket{le=\"+Inf\"}"), ==, ticks);
  g_assert_cmpfloat (series_value (metrics, "personaplex_tick_duration_seconds_bucket{le=\"0.64\"}"), <=, ticks);
  g_assert_cmpfloat (series_value (metrics, "personaplex_tick_duration_seconds_sum"), >, 0);
  const double overruns = series_value (metrics, "personaplex_overruns_total");
  g_autofree char *field = g_strdup_printf ("\"overruns\":%.0f,", overruns);
  g_assert_nonnull (strstr (health, field));
  g_assert_null (strstr (health, "\"tick_ms_p50\":0,"));
  for (int i = 0; i < 2; i++)
    ppx_chat_call_free (calls[i]);
  fixture_server_finish (s);
}

/* SIGTERM: no new calls (/health 503, draining), the open call runs on for --drain-timeout and is then ended with
 * 0x05; the server exits 0. A second SIGTERM ends everything at once. */
static void
test_drain (void)
{
  FixtureServer *s = fixture_server_start ((const char *const[]){"--max-sessions", "2", "--drain-timeout", "3", NULL});
  g_autoptr (PpxChatAudio) audio = fixture_speech (2, 20.0);
  g_autoptr (PpxChatCall) call = fixture_call_new (s, NULL, audio, PPX_CHAT_PACE_REALTIME, FALSE);
  g_assert_true (fixture_call_until_handshake (call, 60000));
  fixture_server_signal (s, SIGTERM);
  g_assert_true (fixture_server_wait_log (s, "draining", 5000));
  g_autofree char *health = NULL;
  g_assert_cmpuint (fixture_http (s, NULL, "/health", NULL, &health, NULL), ==, 503);
  g_assert_nonnull (strstr (health, "\"draining\":true"));
  g_autoptr (PpxChatCall) late = call_with (s, NULL, FALSE, NULL);
  g_assert_true (ppx_chat_call_wait (late, 10000));
  g_assert_cmpuint (ppx_chat_call_get_record (late)->http_status, ==, 503);
  gint64 answered = ppx_chat_call_get_record (call)->answer_samples;
  g_assert_true (ppx_chat_call_wait (call, 20000));
  const PpxChatRecord *r = ppx_chat_call_get_record (call);
  g_assert_cmpuint (r->errors->len, ==, 1);
  g_assert_nonnull (strstr (r->errors->pdata[0], "shutting down"));
  g_assert_cmpint (r->answer_samples, >, answered); /* it ran on meanwhile */
  g_assert_cmpint (fixture_server_wait_exit (s, 20000), ==, 0);
  fixture_server_free (s);

  s = fixture_server_start ((const char *const[]){"--max-sessions", "2", NULL});
  g_autoptr (PpxChatCall) second = fixture_call_new (s, NULL, audio, PPX_CHAT_PACE_REALTIME, FALSE);
  g_assert_true (fixture_call_until_handshake (second, 60000));
  fixture_server_signal (s, SIGTERM);
  g_assert_true (fixture_server_wait_log (s, "draining", 5000));
  gint64 t0 = g_get_monotonic_time ();
  fixture_server_signal (s, SIGTERM);
  g_assert_cmpint (fixture_server_wait_exit (s, 10000), ==, 0);
  g_assert_cmpint (g_get_monotonic_time () - t0, <, 5 * G_USEC_PER_SEC);
  g_assert_true (ppx_chat_call_wait (second, 10000));
  fixture_server_free (s);
}

/* --ssl-dir makes a self-signed pair the first time and reuses it; HTTPS and WSS work. */
static void
test_tls (void)
{
  g_autofree char *dir = g_dir_make_tmp ("ppx-server-tls-XXXXXX", NULL);
  g_autofree char *ssl = g_build_filename (dir, "ssl", NULL);
  g_autofree char *cert = g_build_filename (ssl, "cert.pem", NULL);
  g_autofree char *key = g_build_filename (ssl, "key.pem", NULL);
  for (int run = 0; run < 2; run++) {
    FixtureServer *s = fixture_server_start ((const char *const[]){"--max-sessions", "1", "--ssl-dir", ssl, NULL});
    g_assert_true (g_str_has_prefix (s->url, "https://127.0.0.1:"));
    g_assert_cmpuint (fixture_server_log_count (s, "made a self-signed certificate"), ==, run == 0);
    g_assert_true (g_file_test (cert, G_FILE_TEST_IS_REGULAR) && g_file_test (key, G_FILE_TEST_IS_REGULAR));
    GStatBuf st;
    g_assert_cmpint (g_stat (key, &st), ==, 0);
    g_assert_cmpint (st.st_mode & 077, ==, 0);
    g_assert_cmpuint (fixture_http (s, NULL, "/health", NULL, NULL, NULL), ==, 200);
    g_autoptr (PpxChatCall) call = call_with (s, NULL, FALSE, NULL);
    g_assert_true (fixture_call_until_handshake (call, 60000));
    fixture_call_close (call);
    g_assert_true (fixture_server_wait_idle (s, 10000));
    fixture_server_finish (s);
  }
  g_unlink (cert);
  g_unlink (key);
  g_rmdir (ssl);
  g_rmdir (dir);
}

/* --static DIR: index.html at /, files below DIR with their content types, nothing outside it or hidden; the
 * WebRTC page stays at /webrtc/. */
static void
test_static (void)
{
  g_autofree char *dir = g_dir_make_tmp ("ppx-server-static-XXXXXX", NULL);
  g_autofree char *assets = g_build_filename (dir, "assets", NULL);
  g_mkdir (assets, 0755);
  struct {
    const char *path, *content, *type;
  } files[] = {{"index.html", "<html>client</html>", "text/html; charset=utf-8"},
               {"assets/index-1a2b.js", "console.log(1)", "text/javascript; charset=utf-8"},
               {"assets/index-3c4d.css", "body{}", "text/css; charset=utf-8"},
               {"assets/decoderWorker.min.wasm", "\0asm", "application/wasm"},
               {"assets/favicon.ico", "ico", "image/x-icon"},
               {"assets/empty.txt", "", "text/plain; charset=utf-8"}}; /* an empty file: an empty body */
  for (guint i = 0; i < G_N_ELEMENTS (files); i++) {
    g_autofree char *p = g_build_filename (dir, files[i].path, NULL);
    g_assert_true (g_file_set_contents (p, files[i].content, -1, NULL));
  }
  g_autofree char *wasm = g_build_filename (dir, "assets", "decoderWorker.min.wasm", NULL);
  g_assert_true (g_file_set_contents (wasm, "\0asm\1\0\0\0", 8, NULL));
  g_autofree char *hidden = g_build_filename (dir, ".env", NULL);
  g_file_set_contents (hidden, "SECRET=1", -1, NULL);
  FixtureServer *s = fixture_server_start ((const char *const[]){"--max-sessions", "1", "--static", dir, NULL});
  g_autoptr (SoupSession) session = soup_session_new ();
  for (guint i = 0; i < G_N_ELEMENTS (files); i++) {
    g_autofree char *url = g_strconcat (s->url, files[i].path, NULL);
    g_autoptr (SoupMessage) msg = soup_message_new ("GET", url);
    g_autoptr (GError) error = NULL;
    g_autoptr (GBytes) body = soup_session_send_and_read (session, msg, NULL, &error);
    if (error)
      g_printerr ("GET %s: %s\n", url, error->message);
    g_assert_cmpuint (soup_message_get_status (msg), ==, 200);
    g_assert_cmpstr (soup_message_headers_get_one (soup_message_get_response_headers (msg), "Content-Type"), ==,
                     files[i].type);
  }
  char *root = NULL;
  g_assert_cmpuint (fixture_http (s, NULL, "/", NULL, &root, NULL), ==, 200);
  g_assert_cmpstr (root, ==, "<html>client</html>");
  g_free (root);
  const char *missing[] = {"/.env", "/assets/../.env", "/%2e%2e/%2e%2e/etc/passwd", "/../../etc/passwd",
                           "/assets/nope.js", "/app.js"};
  for (guint i = 0; i < G_N_ELEMENTS (missing); i++)
    g_assert_cmpuint (fixture_http (s, NULL, missing[i], NULL, NULL, NULL), ==, 404);
  g_assert_cmpuint (fixture_http (s, "POST", "/", NULL, NULL, NULL), ==, 405);
  char *page = NULL;
  g_assert_cmpuint (fixture_http (s, NULL, "/webrtc/", NULL, &page, NULL), ==, 200);
  g_assert_nonnull (strstr (page, "PersonaPlex"));
  g_free (page);
  fixture_server_finish (s);
  const char *argv[] = {"rm", "-rf", dir, NULL};
  g_spawn_sync (NULL, (char **) argv, NULL, G_SPAWN_SEARCH_PATH, NULL, NULL, NULL, NULL, NULL, NULL);
}

/* Bad serving options stop the server before it listens, with exit status 2 and the option named. */
static void
test_startup_checks (void)
{
  struct {
    const char *args[6];
    const char *message;
  } cases[] = {
    {{"--address", "0.0.0.0"}, "give --auth-token"},
    {{"--address", "0.0.0.0", "--auth-token", "   "}, "--auth-token is empty or blank"},
    {{"--static", "/nonexistent-dir"}, "--static /nonexistent-dir: no index.html"},
    {{"--tls-cert", "/etc/hostname"}, "give both --tls-cert and --tls-key"},
    {{"--tls-cert", "/no/cert.pem", "--tls-key", "/no/key.pem"}, "--tls-cert /no/cert.pem: not a readable file"},
    {{"--allowed-origin", "evil.example"}, "--allowed-origin 'evil.example'"},
    {{"--ping-interval", "10", "--ping-timeout", "5"}, "--ping-timeout 5 must be longer"},
    {{"--max-ice-candidates", "0"}, "--max-ice-candidates 0"},
    {{"--drain-timeout", "-1"}, "--drain-timeout -1"},
    {{"--backend", "gpu"}, "--backend 'gpu': use auto, cpu or cuda"},
    {{"--quantization", "fp8"}, "--quantization 'fp8': use auto, bf16, int8 or int4"},
    {{"--kv-cache-format", "int4"}, "--kv-cache-format 'int4': use auto, f32, bf16 or fp8"},
    {{"--backend", "cpu", "--device", "0"}, "--device 0 names a GPU, but --backend cpu runs on the CPU"},
    {{"--device", "-1"}, "--device -1: a GPU index, 0 to 1024"},
    {{"--device", "1025"}, "--device 1025: a GPU index, 0 to 1024"},
  };
  for (guint i = 0; i < G_N_ELEMENTS (cases); i++) {
    g_autoptr (GPtrArray) argv = g_ptr_array_new ();
    g_ptr_array_add (argv, (gpointer) g_getenv ("PPX_SERVER"));
    g_ptr_array_add (argv, "--model-dir");
    g_ptr_array_add (argv, (gpointer) fixture_model_dir ());
    g_ptr_array_add (argv, "--port");
    g_ptr_array_add (argv, "0");
    for (guint k = 0; cases[i].args[k]; k++)
      g_ptr_array_add (argv, (gpointer) cases[i].args[k]);
    g_ptr_array_add (argv, NULL);
    g_autofree char *out = NULL, *err = NULL;
    int status;
    g_assert_true (g_spawn_sync (NULL, (char **) argv->pdata, NULL, G_SPAWN_DEFAULT, NULL, NULL, &out, &err, &status,
                                 NULL));
    g_printerr ("%s", err);
    g_assert_true (g_spawn_check_wait_status (status, NULL) == FALSE);
    g_assert_cmpint (WEXITSTATUS (status), ==, 2);
    g_assert_nonnull (strstr (err, cases[i].message));
    g_assert_null (strstr (out, "serving"));
  }
}

/* --device N: the GPU, for the keeper and every call. GPU 1024 exists nowhere: the server stops at start-up
 * (exit 1) saying which GPU it was asked for and why it cannot have it (on a build without CUDA, that it has
 * none; on a CUDA build, "no usable GPU" or "GPU 1024 does not exist (N present)"), and never serves on the CPU
 * instead. --help lists the option (personaplex-fleet.sh passes it). */
static void
test_device (void)
{
  const char *argv[] = {g_getenv ("PPX_SERVER"), "--model-dir", fixture_model_dir (), "--port", "0", "--device",
                        "1024", NULL};
  g_autofree char *out = NULL, *err = NULL;
  int status;
  g_assert_true (g_spawn_sync (NULL, (char **) argv, NULL, G_SPAWN_DEFAULT, NULL, NULL, &out, &err, &status, NULL));
  g_printerr ("%s", err);
  g_assert_true (WIFEXITED (status));
  g_assert_cmpint (WEXITSTATUS (status), ==, 1);
  g_assert_nonnull (strstr (err, "loading the model from"));
  g_assert_nonnull (strstr (err, "on GPU 1024 (--device 1024): "));
  g_assert_true (strstr (err, "without CUDA") || strstr (err, "no usable GPU") ||
                 strstr (err, "GPU 1024 does not exist"));
  g_assert_null (strstr (out, "serving"));
  const char *help[] = {g_getenv ("PPX_SERVER"), "--help", NULL};
  g_autofree char *usage = NULL;
  g_assert_true (g_spawn_sync (NULL, (char **) help, NULL, G_SPAWN_DEFAULT, NULL, NULL, &usage, NULL, &status, NULL));
  g_assert_nonnull (strstr (usage, "--device=N"));
  g_assert_nonnull (strstr (usage, "auto, f32, bf16 or fp8"));
}

int
main (int argc, char **argv)
{
  fixture_test_init (&argc, &argv);
  g_test_add_func ("/server-ops/token", test_token);
  g_test_add_func ("/server-ops/cookie", test_cookie);
  g_test_add_func ("/server-ops/health-and-metrics", test_health_and_metrics);
  g_test_add_func ("/server-ops/engine-ticks", test_engine_ticks);
  g_test_add_func ("/server-ops/drain", test_drain);
  g_test_add_func ("/server-ops/tls", test_tls);
  g_test_add_func ("/server-ops/static", test_static);
  g_test_add_func ("/server-ops/startup-checks", test_startup_checks);
  g_test_add_func ("/server-ops/device", test_device);
  return g_test_run ();
}
