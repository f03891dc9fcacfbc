/* personaplex-server: the /ws WebRTC calls (server-webrtc.h). Main thread only. */
#include "server-webrtc.h"

#include "server-signalling.h"
#include "server-webrtc-peer.h"
#include "server-ws.h"

/* Signalling messages are small; the page reads what it is sent at once. */
#define MAX_SEND_QUEUE (1024 * 1024)

typedef struct {
  guint refs; /* the WebSocket's, and the peer's until it stopped */
  PpxServer *server;
  PpxServerCall *slot;
  guint id;
  PpxCallParams params;
  PpxWs *ws;
  PpxWebrtcPeer *peer;
  guint refused;
  gboolean answered; /* the page's answer came (one per call: the server offers once) */
  guint timer;
  gint64 start_us;
  gboolean ended;
  char *end_reason;
} Session;

static void
session_unref (Session *s)
{
  if (--s->refs)
    return;
  ppx_ws_free (s->ws);
  ppx_call_params_clear (&s->params);
  g_free (s->end_reason);
  g_free (s);
}

static void
send_json (Session *s, const char *json)
{
  if (s->ws && ppx_ws_is_open (s->ws))
    ppx_ws_send_text (s->ws, json);
}

static void
send_error (Session *s, const char *message)
{
  g_autofree char *json = ppx_signal_error_new (message);
  send_json (s, json);
}

static gboolean
on_peer_stopped (gpointer data)
{
  Session *s = data;
  if (s->slot)
    ppx_server_call_remove (s->slot, s->end_reason ? s->end_reason : "error");
  s->slot = NULL;
  session_unref (s);
  return G_SOURCE_REMOVE;
}

/* Ends the call once: one log line, the page told why when `tell`, the WebSocket closed, the peer stopped. */
static void
session_end (Session *s, const char *reason, const char *why, gboolean tell, gushort code)
{
  if (s->ended)
    return;
  s->ended = TRUE;
  s->end_reason = g_strdup (reason);
  if (s->timer) {
    g_source_remove (s->timer);
    s->timer = 0;
  }
  g_printerr ("personaplex-server: session %u: %s; tearing down\n", s->id, why);
  if (tell)
    send_error (s, why);
  if (s->ws)
    ppx_ws_close (s->ws, code, NULL);
  if (s->peer) {
    PpxWebrtcPeer *peer = g_steal_pointer (&s->peer);
    ppx_webrtc_peer_stop (peer, on_peer_stopped, s); /* keeps the peer's reference until stopped */
  } else {
    on_peer_stopped (s);
  }
}

/* ---- the peer ---- */

static void
on_peer_send (const char *json, gpointer user_data)
{
  send_json (user_data, json);
}

static void
on_peer_started (gpointer user_data)
{
  Session *s = user_data;
  ppx_server_call_joined (s->slot);
  g_printerr ("personaplex-server: session %u: prompts done, offering\n", s->id);
}

static void
on_peer_failed (const char *message, gboolean busy, gpointer user_data)
{
  Session *s = user_data;
  if (busy)
    session_end (s, "engine_full", "the server is busy: too many sessions", TRUE,
                 SOUP_WEBSOCKET_CLOSE_POLICY_VIOLATION);
  else
    session_end (s, "error", message, TRUE, SOUP_WEBSOCKET_CLOSE_SERVER_ERROR);
}

static gboolean
on_timer (gpointer user_data)
{
  Session *s = user_data;
  const PpxServerOptions *o = ppx_server_get_options (s->server);
  g_autofree char *why = NULL;
  if (!s->peer)
    return G_SOURCE_CONTINUE;
  if (!ppx_webrtc_peer_connected (s->peer)) {
    if (g_get_monotonic_time () - s->start_us > (gint64) o->join_timeout * G_USEC_PER_SEC)
      why = g_strdup_printf ("the WebRTC connection was not up within %d s", o->join_timeout);
  } else if (ppx_webrtc_peer_audio_idle_us (s->peer) > (gint64) o->media_timeout * G_USEC_PER_SEC) {
    why = g_strdup_printf ("no audio from the page for %d s", o->media_timeout);
  }
  if (!why)
    return G_SOURCE_CONTINUE;
  s->timer = 0;
  session_end (s, "timeout", why, TRUE, SOUP_WEBSOCKET_CLOSE_GOING_AWAY);
  return G_SOURCE_REMOVE;
}

/* ---- the WebSocket ---- */

static void
refuse (Session *s, const char *why)
{
  g_printerr ("personaplex-server: session %u: refused a message: %s\n", s->id, why);
  send_error (s, why);
  if (++s->refused >= PPX_WEBRTC_MAX_REFUSED)
    session_end (s, "bad_input", "too many refused messages", FALSE, SOUP_WEBSOCKET_CLOSE_POLICY_VIOLATION);
}

static void
on_message (PpxWs *ws, gint type, GBytes *message, gpointer user_data)
{
  Session *s = user_data;
  if (s->ended)
    return;
  if (type != SOUP_WEBSOCKET_DATA_TEXT) {
    refuse (s, "binary messages are not part of the signalling");
    return;
  }
  gsize len;
  const char *data = g_bytes_get_data (message, &len);
  PpxSignalMessage msg;
  g_autoptr (GError) error = NULL;
  gboolean ok = ppx_signal_parse (data ? data : "", len, &msg, &error);
  if (ok && !s->peer)
    g_set_error (&error, g_quark_from_static_string ("ppx-server-webrtc"), 0, "the call has ended"), ok = FALSE;
  else if (ok && msg.kind == PPX_SIGNAL_ANSWER && s->answered)
    g_set_error (&error, g_quark_from_static_string ("ppx-server-webrtc"), 0,
                 "an answer came already: the server offers once per call"), ok = FALSE;
  else if (ok && msg.kind == PPX_SIGNAL_ANSWER)
    ok = s->answered = ppx_webrtc_peer_set_answer (s->peer, msg.sdp, &error);
  else if (ok && msg.kind == PPX_SIGNAL_ICE)
    ok = ppx_webrtc_peer_add_candidate (s->peer, msg.mline, msg.candidate, &error);
  if (!ok)
    refuse (s, error->message);
  ppx_signal_message_clear (&msg);
}

static void
on_closed (PpxWs *ws, gpointer user_data)
{
  Session *s = user_data;
  if (!s->ended) {
    const char *reason = ppx_ws_end_label (ws);
    gushort code = ppx_ws_peer_close_code (ws);
    g_autofree char *why = ppx_ws_end_reason (ws) ? g_strdup (ppx_ws_end_reason (ws))
                           : code ? g_strdup_printf ("closed by the page (code %u)", code)
                                  : g_strdup ("the page's connection dropped (no close frame)");
    session_end (s, reason, why, FALSE, SOUP_WEBSOCKET_CLOSE_NORMAL);
  }
  session_unref (s);
}

static void
on_upgraded (PpxWs *ws, gpointer user_data)
{
  Session *s = user_data;
  if (!ws) {
    session_end (s, "client_closed", "the page left before the upgrade", FALSE, 0);
    session_unref (s);
    return;
  }
  s->ws = ws;
  PpxWsCallbacks callbacks = {on_message, on_closed, s}; /* the upgrade's reference is the WebSocket's now */
  ppx_ws_set_callbacks (ws, &callbacks);
  g_autofree char *welcome = ppx_signal_welcome_new (s->id, ppx_server_get_model (s->server));
  send_json (s, welcome);
  PpxWebrtcPeerCallbacks peer_callbacks = {on_peer_send, on_peer_started, on_peer_failed, s};
  g_autoptr (GError) error = NULL;
  s->peer = ppx_webrtc_peer_new (s->id, ppx_server_get_options (s->server), &s->params, &peer_callbacks, &error);
  if (!s->peer) {
    session_end (s, "error", error->message, TRUE, SOUP_WEBSOCKET_CLOSE_SERVER_ERROR);
    return;
  }
  s->refs++; /* the peer's, until it stopped */
  s->timer = g_timeout_add_seconds (1, on_timer, s);
}

/* ---- the server's view ---- */

static void
server_end (gpointer call, const char *why)
{
  session_end (call, "drain", why, TRUE, SOUP_WEBSOCKET_CLOSE_GOING_AWAY);
}

static void
server_destroy (gpointer call)
{
  Session *s = call;
  s->ended = TRUE;
  s->slot = NULL;
  if (s->timer)
    g_source_remove (s->timer);
  s->timer = 0;
  if (s->peer)
    ppx_webrtc_peer_destroy (g_steal_pointer (&s->peer));
  if (s->ws)
    ppx_ws_close (s->ws, SOUP_WEBSOCKET_CLOSE_GOING_AWAY, "server stopping");
}

static const PpxServerCallClass session_class = {server_end, server_destroy};

void
ppx_server_webrtc_start (PpxServer *server, SoupServerMessage *msg, PpxCallParams *params)
{
  const PpxServerOptions *o = ppx_server_get_options (server);
  PpxWsLimits limits = {PPX_SIGNAL_MAX_MESSAGE, MAX_SEND_QUEUE, (guint) o->ping_interval, (guint) o->ping_timeout};
  Session *s = g_new0 (Session, 1);
  s->refs = 1; /* the upgrade's, then the WebSocket's */
  s->server = server;
  s->params = *params;
  memset (params, 0, sizeof *params);
  s->start_us = g_get_monotonic_time ();
  if (!ppx_ws_accept (msg, &limits, on_upgraded, s)) {
    ppx_metrics_refused (PPX_PROTO_WEBRTC, "bad_request");
    session_unref (s);
    return;
  }
  s->id = ppx_server_next_call_id (server);
  s->slot = ppx_server_call_add (server, PPX_PROTO_WEBRTC, s->id, &session_class, s);
  g_autofree char *persona = ppx_call_params_describe (&s->params, o->voice_prompt,
                                                       o->text_prompt || o->text_prompt_tokens);
  g_printerr ("personaplex-server: session %u: started (%s), %s\n", s->id, soup_server_message_get_remote_host (msg),
              persona);
}
