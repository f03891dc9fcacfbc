/* personaplex-server: the page, the signalling WebSocket, and the sessions behind it. */
#include "server-http.h"

#include <libsoup/soup.h>

#include "server-webrtc-peer.h"
#include "server-signalling.h"

#define RESOURCE_PREFIX "/org/personaplex/webrtc/"
/* A page that keeps sending what the server refuses is closed after this many refusals. */
#define MAX_REFUSED_MESSAGES 20

typedef struct _Session Session;

struct _PpxServer {
  const PpxServerOptions *options;
  char *model;
  int max_calls;
  SoupServer *soup;
  GList *sessions; /* Session* */
  guint next_id;
};

struct _Session {
  PpxServer *server;
  guint id;
  SoupWebsocketConnection *ws;
  PpxWebrtcPeer *peer;
  guint refused;
};

static GQuark
server_error_quark (void)
{
  return g_quark_from_static_string ("ppx-server-server");
}

/* ---- the page ---- */

static const struct {
  const char *path, *resource, *content_type;
} page_files[] = {
  {"/", "index.html", "text/html; charset=utf-8"},
  {"/index.html", "index.html", "text/html; charset=utf-8"},
  {"/app.js", "app.js", "text/javascript; charset=utf-8"},
  {"/style.css", "style.css", "text/css; charset=utf-8"},
};

static void
serve_page (SoupServer *soup, SoupServerMessage *msg, const char *path, GHashTable *query, gpointer user_data)
{
  const char *method = soup_server_message_get_method (msg);
  if (method != SOUP_METHOD_GET && method != SOUP_METHOD_HEAD) {
    soup_server_message_set_status (msg, SOUP_STATUS_METHOD_NOT_ALLOWED, NULL);
    return;
  }
  for (guint i = 0; i < G_N_ELEMENTS (page_files); i++) {
    if (!g_str_equal (path, page_files[i].path))
      continue;
    g_autofree char *name = g_strconcat (RESOURCE_PREFIX, page_files[i].resource, NULL);
    g_autoptr (GBytes) bytes = g_resources_lookup_data (name, G_RESOURCE_LOOKUP_FLAGS_NONE, NULL);
    if (!bytes)
      break;
    SoupMessageHeaders *headers = soup_server_message_get_response_headers (msg);
    /* Everything comes from this server: no other script, style, image or connection. */
    soup_message_headers_replace (headers, "Content-Security-Policy", "default-src 'self'; connect-src 'self'");
    soup_message_headers_replace (headers, "X-Content-Type-Options", "nosniff");
    soup_message_headers_replace (headers, "Cache-Control", "no-store");
    gsize size;
    const char *data = g_bytes_get_data (bytes, &size);
    soup_server_message_set_response (msg, page_files[i].content_type, SOUP_MEMORY_COPY, data, size);
    soup_server_message_set_status (msg, SOUP_STATUS_OK, NULL);
    return;
  }
  soup_server_message_set_status (msg, SOUP_STATUS_NOT_FOUND, NULL);
}

/* ---- sessions ---- */

static void
send_json (Session *s, const char *json)
{
  if (soup_websocket_connection_get_state (s->ws) == SOUP_WEBSOCKET_STATE_OPEN)
    soup_websocket_connection_send_text (s->ws, json);
}

static void
send_error (Session *s, const char *message)
{
  g_autofree char *json = ppx_signal_error_new (message);
  send_json (s, json);
}

static void
on_peer_send (const char *json, gpointer user_data)
{
  send_json (user_data, json);
}

static void
on_peer_failed (const char *message, gpointer user_data)
{
  Session *s = user_data;
  send_error (s, message);
  if (soup_websocket_connection_get_state (s->ws) == SOUP_WEBSOCKET_STATE_OPEN)
    soup_websocket_connection_close (s->ws, SOUP_WEBSOCKET_CLOSE_SERVER_ERROR, "session failed");
}

static void
session_free (Session *s)
{
  ppx_webrtc_peer_free (s->peer);
  g_signal_handlers_disconnect_by_data (s->ws, s);
  if (soup_websocket_connection_get_state (s->ws) == SOUP_WEBSOCKET_STATE_OPEN)
    soup_websocket_connection_close (s->ws, SOUP_WEBSOCKET_CLOSE_GOING_AWAY, "server stopping");
  g_object_unref (s->ws);
  g_free (s);
}

static void
on_ws_closed (SoupWebsocketConnection *ws, gpointer user_data)
{
  Session *s = user_data;
  PpxServer *server = s->server;
  server->sessions = g_list_remove (server->sessions, s);
  g_printerr ("personaplex-server: session %u: closed by the page (code %u); tearing down, %u session(s) left\n",
              s->id, soup_websocket_connection_get_close_code (ws), g_list_length (server->sessions));
  session_free (s);
}

static void
on_ws_error (SoupWebsocketConnection *ws, GError *error, gpointer user_data)
{
  Session *s = user_data;
  g_printerr ("personaplex-server: session %u: websocket: %s\n", s->id, error->message);
}

static void
refuse (Session *s, const char *why)
{
  g_printerr ("personaplex-server: session %u: refused a message: %s\n", s->id, why);
  send_error (s, why);
  if (++s->refused >= MAX_REFUSED_MESSAGES && soup_websocket_connection_get_state (s->ws) == SOUP_WEBSOCKET_STATE_OPEN)
    soup_websocket_connection_close (s->ws, SOUP_WEBSOCKET_CLOSE_POLICY_VIOLATION, "too many refused messages");
}

static void
on_ws_message (SoupWebsocketConnection *ws, gint type, GBytes *message, gpointer user_data)
{
  Session *s = user_data;
  if (type != SOUP_WEBSOCKET_DATA_TEXT) {
    refuse (s, "binary messages are not part of the signalling");
    return;
  }
  gsize len;
  const char *data = g_bytes_get_data (message, &len);
  PpxSignalMessage msg;
  g_autoptr (GError) error = NULL;
  gboolean ok = ppx_signal_parse (data ? data : "", len, &msg, &error);
  if (ok && msg.kind == PPX_SIGNAL_ANSWER)
    ok = ppx_webrtc_peer_set_answer (s->peer, msg.sdp, &error);
  else if (ok && msg.kind == PPX_SIGNAL_ICE)
    ok = ppx_webrtc_peer_add_candidate (s->peer, msg.mline, msg.candidate, &error);
  if (!ok)
    refuse (s, error->message);
  ppx_signal_message_clear (&msg);
}

/* Pages of other sites must not open sessions: a browser's Origin has to be this server. */
static gboolean
origin_allowed (SoupServerMessage *msg)
{
  SoupMessageHeaders *headers = soup_server_message_get_request_headers (msg);
  const char *origin = soup_message_headers_get_one (headers, "Origin");
  const char *host = soup_message_headers_get_one (headers, "Host");
  if (!origin)
    return TRUE; /* not a browser */
  g_autofree char *expected = g_strconcat ("http://", host ? host : "", NULL);
  return host && g_ascii_strcasecmp (origin, expected) == 0;
}

static void
on_ws_open (SoupServer *soup, SoupServerMessage *msg, const char *path, SoupWebsocketConnection *ws,
            gpointer user_data)
{
  PpxServer *server = user_data;
  if (!origin_allowed (msg)) {
    g_printerr ("personaplex-server: refused a WebSocket from another origin\n");
    soup_websocket_connection_close (ws, SOUP_WEBSOCKET_CLOSE_POLICY_VIOLATION, "wrong origin");
    return;
  }
  soup_websocket_connection_set_max_incoming_payload_size (ws, PPX_SIGNAL_MAX_MESSAGE);
  Session *s = g_new0 (Session, 1);
  s->server = server;
  s->id = ++server->next_id;
  s->ws = g_object_ref (ws);
  if (g_list_length (server->sessions) >= (guint) server->max_calls) {
    g_printerr ("personaplex-server: session %u: refused, %d sessions already\n", s->id, server->max_calls);
    send_error (s, "the server is busy: too many sessions");
    soup_websocket_connection_close (ws, SOUP_WEBSOCKET_CLOSE_POLICY_VIOLATION, "busy");
    session_free (s);
    return;
  }
  PpxWebrtcPeerCallbacks callbacks = {on_peer_send, on_peer_failed, s};
  g_autoptr (GError) error = NULL;
  g_autofree char *welcome = ppx_signal_welcome_new (s->id, server->model);
  send_json (s, welcome);
  if (!(s->peer = ppx_webrtc_peer_new (s->id, server->options, &callbacks, &error))) {
    /* the engine itself full (its slots are still being freed by a closing session): busy too */
    gboolean busy = g_error_matches (error, PPX_WEBRTC_PEER_ERROR, PPX_WEBRTC_PEER_ERROR_BUSY);
    g_printerr ("personaplex-server: session %u: %s%s\n", s->id, busy ? "refused, the engine is full: " : "",
                error->message);
    if (busy) {
      send_error (s, "the server is busy: too many sessions");
      soup_websocket_connection_close (ws, SOUP_WEBSOCKET_CLOSE_POLICY_VIOLATION, "busy");
    } else {
      send_error (s, error->message);
      soup_websocket_connection_close (ws, SOUP_WEBSOCKET_CLOSE_SERVER_ERROR, "session failed");
    }
    session_free (s);
    return;
  }
  server->sessions = g_list_append (server->sessions, s);
  g_signal_connect (ws, "message", G_CALLBACK (on_ws_message), s);
  g_signal_connect (ws, "closed", G_CALLBACK (on_ws_closed), s);
  g_signal_connect (ws, "error", G_CALLBACK (on_ws_error), s);
  g_printerr ("personaplex-server: session %u: started, %u session(s)\n", s->id, g_list_length (server->sessions));
}

/* ---- the server ---- */

PpxServer *
ppx_server_new (const PpxServerOptions *options, const char *model, int max_calls, GError **error)
{
  PpxServer *server = g_new0 (PpxServer, 1);
  server->options = options;
  server->max_calls = max_calls;
  server->model = g_strdup (model);
  server->soup = soup_server_new ("server-header", "personaplex-server", NULL);
  /* Signalling messages are small; no compression (and no decompression of what a client sends). */
  soup_server_remove_websocket_extension (server->soup, SOUP_TYPE_WEBSOCKET_EXTENSION_DEFLATE);
  soup_server_add_handler (server->soup, NULL, serve_page, server, NULL);
  soup_server_add_websocket_handler (server->soup, "/ws", NULL, NULL, on_ws_open, server, NULL);
  g_autoptr (GInetAddress) inet = g_inet_address_new_from_string (options->address);
  g_autoptr (GSocketAddress) address = g_inet_socket_address_new (inet, (guint16) options->port);
  g_autoptr (GError) e = NULL;
  if (!soup_server_listen (server->soup, address, 0, &e)) {
    g_set_error (error, server_error_quark (), 0, "listening on %s port %d: %s", options->address, options->port,
                 e->message);
    ppx_server_free (server);
    return NULL;
  }
  return server;
}

char *
ppx_server_get_url (PpxServer *server)
{
  /* From the listening socket (soup_server_get_uris leaks its socket addresses in libsoup 3.2). */
  GSList *listeners = soup_server_get_listeners (server->soup);
  g_autoptr (GSocketAddress) address = listeners ? g_socket_get_local_address (listeners->data, NULL) : NULL;
  g_slist_free (listeners);
  if (!address || !G_IS_INET_SOCKET_ADDRESS (address))
    return g_strdup ("?");
  GInetSocketAddress *inet = G_INET_SOCKET_ADDRESS (address);
  g_autofree char *host = g_inet_address_to_string (g_inet_socket_address_get_address (inet));
  gboolean v6 = g_inet_address_get_family (g_inet_socket_address_get_address (inet)) == G_SOCKET_FAMILY_IPV6;
  return g_strdup_printf (v6 ? "http://[%s]:%u/" : "http://%s:%u/", host, g_inet_socket_address_get_port (inet));
}

void
ppx_server_free (PpxServer *server)
{
  if (!server)
    return;
  while (server->sessions) {
    Session *s = server->sessions->data;
    server->sessions = g_list_delete_link (server->sessions, server->sessions);
    session_free (s);
  }
  soup_server_disconnect (server->soup);
  g_object_unref (server->soup);
  g_free (server->model);
  g_free (server);
}
