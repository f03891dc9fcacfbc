/* personaplex-server: HTTP (the page) and WebSocket signalling (/ws) with libsoup 3. Each WebSocket
 * connection is one session (server-webrtc-peer.h); closing it ends the session. */
#ifndef PPX_SERVER_HTTP_H
#define PPX_SERVER_HTTP_H

#include <glib.h>

#include "server-options.h"

G_BEGIN_DECLS

typedef struct _PpxServer PpxServer;

/* Listens on options->address:options->port. `options` must outlive the server; `model` is shown to
 * the page ("cpu / bf16"); more than `max_calls` sessions at once are refused as busy. */
PpxServer *ppx_server_new (const PpxServerOptions *options, const char *model, int max_calls,
                                        GError **error);
/* "http://127.0.0.1:8080/" (g_free). */
char *ppx_server_get_url (PpxServer *server);
/* Ends every session and stops listening. */
void ppx_server_free (PpxServer *server);

G_END_DECLS
#endif
