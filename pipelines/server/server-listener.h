/* personaplex-server: the listening socket, and every connection until it is a call (docs/server.md, "Security").
 *
 * The server accepts its connections itself and hands each to libsoup (soup_server_accept_iostream), because
 * libsoup 3.2.3's own listener
 *   - stops accepting for good after one failed accept (out of file descriptors): here an accept that fails is
 *     retried every PPX_LISTENER_RETRY_MS, and the log says when the server ran out and when it accepts again;
 *   - keeps HTTP connections alive, and 3.2.3 leaves a kept-alive socket that the client closes in CLOSE-WAIT for
 *     ever: a SoupServer that has no listener of its own never keeps a connection alive, so every answer that is
 *     not a WebSocket upgrade closes its connection (clients open a new one per request);
 *   - has no timeout on the TLS handshake or on a request's headers, and no bound on connections that are not
 *     calls yet: here the TLS handshake and the request's headers must be complete within
 *     PPX_LISTENER_REQUEST_TIMEOUT_S of the connection, and at most PPX_LISTENER_MAX_PENDING connections wait
 *     (for their handshake, their headers, their answer): beyond that the oldest is closed, so a flood of idle
 *     sockets cannot keep /health or a call out;
 *   - reads a request's body whole into memory before any handler (or token check) runs: no endpoint of this
 *     server takes a body, so a request that announces one is answered at its headers (405 for a method other than
 *     GET or HEAD, else 413) and its connection closed, its body never read.
 * A connection stops counting once its WebSocket upgrade (101) is written: the call's own bounds take over
 * (server-ws.h). Main thread only. */
#ifndef PPX_SERVER_LISTENER_H
#define PPX_SERVER_LISTENER_H

#include <libsoup/soup.h>

G_BEGIN_DECLS

#define PPX_LISTENER_REQUEST_TIMEOUT_S 5
#define PPX_LISTENER_MAX_PENDING 64
#define PPX_LISTENER_RETRY_MS 250

typedef struct _PpxListener PpxListener;

/* Listens on address:port and hands every connection to `soup` (which must have no listener of its own); TLS
 * when `certificate` is set. */
PpxListener *ppx_listener_new (SoupServer *soup, GInetAddress *address, guint16 port, GTlsCertificate *certificate,
                               GError **error);
/* The listening sockets (the list to g_slist_free; the sockets are the listener's), as soup_server_get_listeners. */
GSList *ppx_listener_get_sockets (PpxListener *l);
/* Connections accepted and not yet a call (or closed). */
guint ppx_listener_pending (PpxListener *l);
/* Stops listening and closes the connections that are not calls. */
void ppx_listener_free (PpxListener *l);

G_END_DECLS
#endif
