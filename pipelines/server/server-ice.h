/* personaplex-server: the ICE agent of a WebRTC call. It gathers only on the listening address when that is a
 * specific one (loopback by default: add-local-ip-address on the libnice agent, UDP only), so that ICE never
 * offers or probes other interfaces, and it never asks a router to map ports (libnice's UPnP is off, issue 17
 * defect 8). */
#ifndef PPX_SERVER_ICE_H
#define PPX_SERVER_ICE_H

#include <gst/gst.h>

G_BEGIN_DECLS

/* Configures `webrtc`'s (a webrtcbin's) ICE agent for a server listening on `address`. */
void ppx_server_ice_configure (GstElement *webrtc, const char *address);

G_END_DECLS
#endif
