/* personaplex-server: a WebSocket whose byte streams the server owns (both /api/chat and /ws).
 *
 * libsoup 3.2 bounds each frame (max-incoming-payload-size) but not a message fragmented over many frames,
 * keeps everything handed to send in an unbounded queue, and has no pong timeout. So the server does the
 * upgrade itself: after libsoup wrote the 101 the connection is stolen, wrapped in a counting stream
 * (server-iostream.h), and a SoupWebsocketConnection is built over that. Then:
 *   - the bytes read since the last message was delivered bound the whole message, fragments, frame headers and
 *     interleaved control frames included: past max_message + PPX_WS_FRAME_SLACK the connection is closed with
 *     1009 and the stream cut, before libsoup's reassembly grows;
 *   - bytes handed to send minus bytes written to the socket bound the send queue: past max_send_queue (a
 *     client that stopped reading) the connection is cut;
 *   - libsoup sends a ping every ping_interval; when nothing (data, pong, anything) came from the peer for
 *     ping_timeout the connection is cut.
 * Main thread only. */
#ifndef PPX_SERVER_WS_H
#define PPX_SERVER_WS_H

#include <libsoup/soup.h>

G_BEGIN_DECLS

/* Room for frame headers and control frames beside one message's payload. */
#define PPX_WS_FRAME_SLACK 4096
/* The kernel's send buffer of a call's socket: what a client that stopped reading leaves there, beside the send
 * queue. Fixed (Linux doubles it), so that such a client is noticed in seconds and not after megabytes of
 * autotuned buffer; 64 KiB is 8 s of an Opus answer. Set when the upgrade is written (server-listener.c). */
#define PPX_WS_SOCKET_SEND_BUFFER (64 * 1024)

typedef struct {
  gsize max_message;    /* payload bytes of one message, however fragmented */
  gsize max_send_queue; /* bytes handed to send and not yet written to the socket */
  guint ping_interval;  /* seconds between pings; 0: none */
  guint ping_timeout;   /* seconds without any byte from the peer before the connection is cut; 0: never */
} PpxWsLimits;

typedef struct _PpxWs PpxWs;

typedef struct {
  void (*message) (PpxWs *ws, gint type, GBytes *message, gpointer user_data);
  /* Once, when the connection is closed (by either side, or cut): ppx_ws_free may be called from it. */
  void (*closed) (PpxWs *ws, gpointer user_data);
  gpointer user_data;
} PpxWsCallbacks;

/* Called once the 101 went out with the new WebSocket (no callbacks set yet: set them at once), or with NULL
 * when the client left before the upgrade completed. */
typedef void (*PpxWsReady) (PpxWs *ws, gpointer user_data);

/* Accepts a WebSocket handshake on `msg` (no extension, no subprotocol): 101 now, `ready` later. FALSE when
 * `msg` is not a valid handshake (`msg` then carries libsoup's 400 answer). `limits` is copied. */
gboolean ppx_ws_accept (SoupServerMessage *msg, const PpxWsLimits *limits, PpxWsReady ready, gpointer user_data);

void ppx_ws_set_callbacks (PpxWs *ws, const PpxWsCallbacks *callbacks);
/* FALSE when the connection is not open, or when this message would pass max_send_queue: the connection is then
 * cut (the reason says so). */
gboolean ppx_ws_send_binary (PpxWs *ws, const void *data, gsize len);
gboolean ppx_ws_send_text (PpxWs *ws, const char *text);
/* Stops reading the peer's bytes (TCP flow control then slows the peer down) or reads on; the ping timeout does not
 * run while paused. */
void ppx_ws_pause_reading (PpxWs *ws, gboolean paused);
/* A close frame after what is queued; libsoup drops a peer that does not answer within 5 s. */
void ppx_ws_close (PpxWs *ws, gushort code, const char *reason);
gboolean ppx_ws_is_open (PpxWs *ws);
/* Why the server ended the connection ("a message larger than N bytes", "the client stopped reading",
 * "no data or pong from the client for N s"), or NULL. */
const char *ppx_ws_end_reason (PpxWs *ws);
/* How it ended, as a metrics label: "client_closed" (the peer closed or left), "bad_input" (an oversized message,
 * a protocol error), "client_not_reading", "timeout" (no data or pong). */
const char *ppx_ws_end_label (PpxWs *ws);
/* The peer's close code (0: none). */
gushort ppx_ws_peer_close_code (PpxWs *ws);
gsize ppx_ws_send_queue (PpxWs *ws);
/* How long bytes have waited in the send queue with the socket taking none of them (0: the queue is empty): a
 * client that reads would have taken some within a round trip. */
gint64 ppx_ws_send_stalled_us (PpxWs *ws);
/* Closes the connection if it is open (no callbacks from then on) and frees it. */
void ppx_ws_free (PpxWs *ws);

G_END_DECLS
#endif
