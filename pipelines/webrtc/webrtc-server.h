/* personaplex-webrtc: HTTP (the page) and WebSocket signalling (/ws) with libsoup 3. Each WebSocket
 * connection is one session (webrtc-peer.h); closing it ends the session. */
#ifndef PPX_WEBRTC_SERVER_H
#define PPX_WEBRTC_SERVER_H

#include <glib.h>

#include "webrtc-options.h"

G_BEGIN_DECLS

typedef struct _PpxWebrtcServer PpxWebrtcServer;

/* Listens on options->address:options->port. `options` must outlive the server; `model` is shown to
 * the page ("cpu / bf16"); more than `max_calls` sessions at once are refused as busy. */
PpxWebrtcServer *ppx_webrtc_server_new (const PpxWebrtcOptions *options, const char *model, int max_calls,
                                        GError **error);
/* "http://127.0.0.1:8080/" (g_free). */
char *ppx_webrtc_server_get_url (PpxWebrtcServer *server);
/* Ends every session and stops listening. */
void ppx_webrtc_server_free (PpxWebrtcServer *server);

G_END_DECLS
#endif
