/* personaplex-server: the built-in page's WebRTC calls. Each /ws WebSocket is one call: JSON signalling
 * (server-signalling.h) for a WebRTC peer (server-webrtc-peer.h); closing it ends the call. The page passes the
 * call's parameters (text_prompt, voice_prompt, seed, ...) in the /ws query, as /api/chat takes them.
 * Timeouts: the WebRTC connection must be up within --join-timeout of the WebSocket opening, and audio must keep
 * arriving from the page (--media-timeout); a page that sends only refused messages is cut off. */
#ifndef PPX_SERVER_WEBRTC_H
#define PPX_SERVER_WEBRTC_H

#include "server-http.h"

G_BEGIN_DECLS

/* Refused signalling messages that end a call. */
#define PPX_WEBRTC_MAX_REFUSED 20

/* Starts a call for `msg` (its checks passed, a slot free: server-http.h). Takes `params`. */
void ppx_server_webrtc_start (PpxServer *server, SoupServerMessage *msg, PpxCallParams *params);

G_END_DECLS
#endif
