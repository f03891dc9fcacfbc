/* personaplex-server: one browser's session, a pipeline of its own:
 *
 *   webrtcbin (Opus RTP in) -> rtpopusdepay -> opusdec -> audioconvert -> audioresample -> 24 kHz mono F32
 *     -> queue (leaky) -> personaplexduplex (shared model) -> audioconvert -> audioresample -> opusenc
 *     -> rtpopuspay -> appsink ~> appsrc -> webrtcbin (Opus RTP out; the hop keeps the graph loop-free)
 *   personaplexduplex's text pieces (bus messages) -> data channel "transcript"
 *
 * The server offers (one sendrecv audio transceiver and the data channel); the page answers. All
 * functions are called on the thread of the default main context, and the callbacks are invoked there
 * too, never after ppx_webrtc_peer_free. */
#ifndef PPX_SERVER_WEBRTC_PEER_H
#define PPX_SERVER_WEBRTC_PEER_H

#include <glib.h>

#include "server-options.h"

G_BEGIN_DECLS

typedef struct _PpxWebrtcPeer PpxWebrtcPeer;

/* ppx_webrtc_peer_new's errors: BUSY when the shared engine has no free session slot. */
#define PPX_WEBRTC_PEER_ERROR (ppx_webrtc_peer_error_quark ())
GQuark ppx_webrtc_peer_error_quark (void);
typedef enum { PPX_WEBRTC_PEER_ERROR_FAILED, PPX_WEBRTC_PEER_ERROR_BUSY } PpxWebrtcPeerError;

typedef struct {
  /* A signalling message (JSON) for the page. */
  void (*send) (const char *json, gpointer user_data);
  /* The session cannot go on (pipeline error); the server closes it. */
  void (*failed) (const char *message, gpointer user_data);
  gpointer user_data;
} PpxWebrtcPeerCallbacks;

/* Builds and starts the session's pipeline; the offer follows through callbacks->send. */
PpxWebrtcPeer *ppx_webrtc_peer_new (guint id, const PpxServerOptions *options, const PpxWebrtcPeerCallbacks *callbacks,
                                    GError **error);
/* The page's answer (SDP text). */
gboolean ppx_webrtc_peer_set_answer (PpxWebrtcPeer *peer, const char *sdp, GError **error);
/* One of the page's ICE candidates ("" = end of candidates). */
gboolean ppx_webrtc_peer_add_candidate (PpxWebrtcPeer *peer, guint mline, const char *candidate, GError **error);
/* Stops the pipeline (synchronously) and frees the session. */
void ppx_webrtc_peer_free (PpxWebrtcPeer *peer);

G_END_DECLS
#endif
