/* personaplex-server: the owned WebSocket (server-ws.h). */
#include "server-ws.h"

#include "server-iostream.h"

#include <sys/socket.h>

struct _PpxWs {
  PpxWsLimits limits;
  PpxWsCallbacks callbacks;
  PpxCountingStream *stream;
  SoupWebsocketConnection *conn;
  gsize unread_message; /* bytes read since the last message was delivered */
  guint64 handed;       /* bytes handed to libsoup to send, frame headers included */
  gint64 queued_us;     /* when the send queue last went from empty to not */
  guint ping_watch;
  gint64 paused_since;  /* reading paused (0: not) */
  gint64 resumed_us;
  char *end_reason;
  const char *end_label;
  gboolean closed;
};

typedef struct {
  PpxWsLimits limits;
  PpxWsReady ready;
  gpointer user_data;
  gulong finished_id;
} Pending;

static void
end_with (PpxWs *ws, gushort code, const char *label, char *reason, gboolean cut)
{
  if (!ws->end_reason) {
    ws->end_reason = reason;
    ws->end_label = label;
  } else {
    g_free (reason);
  }
  if (soup_websocket_connection_get_state (ws->conn) == SOUP_WEBSOCKET_STATE_OPEN)
    soup_websocket_connection_close (ws->conn, code, ws->end_reason);
  if (cut)
    ppx_counting_stream_cut (ws->stream);
}

/* After each read: the bytes since the last delivered message must fit one message and its framing. */
static gboolean
on_read (gsize n, gpointer user_data)
{
  PpxWs *ws = user_data;
  ws->unread_message += n;
  if (ws->unread_message <= ws->limits.max_message + PPX_WS_FRAME_SLACK)
    return TRUE;
  /* the close frame goes out now, before the cut; the rest of the message is never read */
  end_with (ws, SOUP_WEBSOCKET_CLOSE_TOO_BIG, "bad_input",
            g_strdup_printf ("a message larger than %" G_GSIZE_FORMAT " bytes", ws->limits.max_message), FALSE);
  return FALSE;
}

static gboolean
on_ping_check (gpointer user_data)
{
  PpxWs *ws = user_data;
  gint64 quiet = g_get_monotonic_time () - MAX (ppx_counting_stream_last_read_us (ws->stream), ws->resumed_us);
  if (quiet <= (gint64) ws->limits.ping_timeout * G_USEC_PER_SEC || ws->paused_since)
    return G_SOURCE_CONTINUE;
  ws->ping_watch = 0;
  end_with (ws, SOUP_WEBSOCKET_CLOSE_GOING_AWAY, "timeout",
            g_strdup_printf ("no data or pong from the client for %u s", ws->limits.ping_timeout), TRUE);
  return G_SOURCE_REMOVE;
}

static void
on_message (SoupWebsocketConnection *conn, gint type, GBytes *message, gpointer user_data)
{
  PpxWs *ws = user_data;
  ws->unread_message = 0;
  if (ws->callbacks.message)
    ws->callbacks.message (ws, type, message, ws->callbacks.user_data);
}

static void
on_closed (SoupWebsocketConnection *conn, gpointer user_data)
{
  PpxWs *ws = user_data;
  ws->closed = TRUE;
  if (ws->ping_watch) {
    g_source_remove (ws->ping_watch);
    ws->ping_watch = 0;
  }
  if (ws->callbacks.closed)
    ws->callbacks.closed (ws, ws->callbacks.user_data);
}

static void
on_error (SoupWebsocketConnection *conn, GError *error, gpointer user_data)
{
  /* libsoup closes after its errors (bad frames, invalid UTF-8); the closed callback follows */
  PpxWs *ws = user_data;
  if (!ws->end_reason && error->domain == SOUP_WEBSOCKET_ERROR) {
    ws->end_reason = g_strdup (error->message);
    ws->end_label = "bad_input";
  }
}

static PpxWs *
ws_new (GIOStream *base, SoupServerMessage *msg, const PpxWsLimits *limits)
{
  PpxWs *ws = g_new0 (PpxWs, 1);
  ws->limits = *limits;
  ws->stream = ppx_counting_stream_new (base);
  ppx_counting_stream_set_read_hook (ws->stream, on_read, ws);
  SoupMessageHeaders *headers = soup_server_message_get_request_headers (msg);
  ws->conn = soup_websocket_connection_new (G_IO_STREAM (ws->stream), soup_server_message_get_uri (msg),
                                            SOUP_WEBSOCKET_CONNECTION_SERVER,
                                            soup_message_headers_get_one (headers, "Origin"), NULL, NULL);
  /* libsoup's per-frame limit as well (a single frame over it is refused before it is buffered) */
  soup_websocket_connection_set_max_incoming_payload_size (ws->conn, limits->max_message);
  soup_websocket_connection_set_keepalive_interval (ws->conn, limits->ping_interval);
  g_signal_connect (ws->conn, "message", G_CALLBACK (on_message), ws);
  g_signal_connect (ws->conn, "closed", G_CALLBACK (on_closed), ws);
  g_signal_connect (ws->conn, "error", G_CALLBACK (on_error), ws);
  if (limits->ping_timeout)
    ws->ping_watch = g_timeout_add_seconds (1, on_ping_check, ws);
  return ws;
}

static void
on_upgraded (SoupServerMessage *msg, gpointer user_data)
{
  Pending *p = user_data;
  g_signal_handler_disconnect (msg, p->finished_id);
  g_signal_handlers_disconnect_by_data (msg, p);
  GSocket *socket = soup_server_message_get_socket (msg); /* NULL: server-listener.c set it */
  if (socket)
    g_socket_set_option (socket, SOL_SOCKET, SO_SNDBUF, PPX_WS_SOCKET_SEND_BUFFER, NULL);
  g_object_ref (msg);
  GIOStream *base = soup_server_message_steal_connection (msg);
  PpxWs *ws = base ? ws_new (base, msg, &p->limits) : NULL;
  g_clear_object (&base);
  g_object_unref (msg);
  p->ready (ws, p->user_data);
  g_free (p);
}

static void
on_finished_before_upgrade (SoupServerMessage *msg, gpointer user_data)
{
  Pending *p = user_data;
  g_signal_handlers_disconnect_by_data (msg, p);
  p->ready (NULL, p->user_data);
  g_free (p);
}

gboolean
ppx_ws_accept (SoupServerMessage *msg, const PpxWsLimits *limits, PpxWsReady ready, gpointer user_data)
{
  if (!soup_websocket_server_process_handshake (msg, NULL, NULL, NULL, NULL))
    return FALSE;
  Pending *p = g_new0 (Pending, 1);
  p->limits = *limits;
  p->ready = ready;
  p->user_data = user_data;
  g_signal_connect (msg, "wrote-informational", G_CALLBACK (on_upgraded), p);
  p->finished_id = g_signal_connect (msg, "finished", G_CALLBACK (on_finished_before_upgrade), p);
  return TRUE;
}

void
ppx_ws_set_callbacks (PpxWs *ws, const PpxWsCallbacks *callbacks)
{
  ws->callbacks = *callbacks;
}

gboolean
ppx_ws_is_open (PpxWs *ws)
{
  return !ws->closed && soup_websocket_connection_get_state (ws->conn) == SOUP_WEBSOCKET_STATE_OPEN;
}

gsize
ppx_ws_send_queue (PpxWs *ws)
{
  guint64 written = ppx_counting_stream_bytes_written (ws->stream);
  return ws->handed > written ? (gsize) (ws->handed - written) : 0;
}

gint64
ppx_ws_send_stalled_us (PpxWs *ws)
{
  if (!ppx_ws_send_queue (ws))
    return 0;
  return g_get_monotonic_time () - MAX (ppx_counting_stream_last_write_us (ws->stream), ws->queued_us);
}

/* Frame bytes of a server frame (unmasked) with `len` payload bytes. */
static gsize
frame_bytes (gsize len)
{
  return len + (len < 126 ? 2 : len < 65536 ? 4 : 10);
}

static gboolean
queue_room (PpxWs *ws, gsize len)
{
  if (!ppx_ws_is_open (ws))
    return FALSE;
  gsize queue = ppx_ws_send_queue (ws);
  if (queue + frame_bytes (len) <= ws->limits.max_send_queue) {
    if (!queue)
      ws->queued_us = g_get_monotonic_time ();
    ws->handed += frame_bytes (len);
    return TRUE;
  }
  end_with (ws, SOUP_WEBSOCKET_CLOSE_POLICY_VIOLATION, "client_not_reading",
            g_strdup_printf ("the client stopped reading (%" G_GSIZE_FORMAT " bytes unsent)", ppx_ws_send_queue (ws)),
            TRUE);
  return FALSE;
}

gboolean
ppx_ws_send_binary (PpxWs *ws, const void *data, gsize len)
{
  if (!queue_room (ws, len))
    return FALSE;
  soup_websocket_connection_send_binary (ws->conn, data, len);
  return TRUE;
}

gboolean
ppx_ws_send_text (PpxWs *ws, const char *text)
{
  if (!queue_room (ws, strlen (text)))
    return FALSE;
  soup_websocket_connection_send_text (ws->conn, text);
  return TRUE;
}

void
ppx_ws_pause_reading (PpxWs *ws, gboolean paused)
{
  if (paused == (ws->paused_since != 0))
    return;
  ws->paused_since = paused ? g_get_monotonic_time () : 0;
  if (!paused)
    ws->resumed_us = g_get_monotonic_time ();
  ppx_counting_stream_pause_input (ws->stream, paused);
}

void
ppx_ws_close (PpxWs *ws, gushort code, const char *reason)
{
  if (ppx_ws_is_open (ws))
    soup_websocket_connection_close (ws->conn, code, reason);
}

const char *
ppx_ws_end_reason (PpxWs *ws)
{
  return ws->end_reason;
}

const char *
ppx_ws_end_label (PpxWs *ws)
{
  return ws->end_label ? ws->end_label : "client_closed";
}

gushort
ppx_ws_peer_close_code (PpxWs *ws)
{
  return soup_websocket_connection_get_close_code (ws->conn);
}

void
ppx_ws_free (PpxWs *ws)
{
  if (!ws)
    return;
  if (ws->ping_watch)
    g_source_remove (ws->ping_watch);
  g_signal_handlers_disconnect_by_data (ws->conn, ws);
  if (!ws->closed) {
    if (soup_websocket_connection_get_state (ws->conn) == SOUP_WEBSOCKET_STATE_OPEN)
      soup_websocket_connection_close (ws->conn, SOUP_WEBSOCKET_CLOSE_GOING_AWAY, "server stopping");
    ppx_counting_stream_cut (ws->stream); /* do not wait for the peer's answer */
  }
  g_object_unref (ws->conn);
  g_object_unref (ws->stream);
  g_free (ws->end_reason);
  g_free (ws);
}
