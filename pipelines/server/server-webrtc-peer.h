/* personaplex-server: one browser's WebRTC call, a pipeline of its own:
 *
 *   webrtcbin (Opus RTP in) -> rtpopusdepay -> opusdec -> audioconvert -> audioresample -> 24 kHz mono F32
 *     -> queue (leaky) -> personaplexduplex (shared model) -> audioconvert -> audioresample -> opusenc
 *     -> rtpopuspay -> appsink ~> appsrc -> webrtcbin (Opus RTP out; the hop keeps the graph loop-free)
 *   personaplexduplex's text pieces (bus messages) -> data channel "transcript"
 *
 * The server offers (one sendrecv audio transceiver and the data channel); the page answers. The pipeline is
 * started (the call's prompts run) and stopped on worker threads (server-worker.h); the offer is made once the
 * prompts are done. All functions are called on the main thread, and the callbacks are invoked there too,
 * never after ppx_webrtc_peer_stop. */
#ifndef PPX_SERVER_WEBRTC_PEER_H
#define PPX_SERVER_WEBRTC_PEER_H

#include <glib.h>

#include "server-options.h"
#include "server-params.h"

G_BEGIN_DECLS

typedef struct _PpxWebrtcPeer PpxWebrtcPeer;

typedef struct {
  /* A signalling message (JSON) for the page. */
  void (*send) (const char *json, gpointer user_data);
  /* The prompts are done; the offer follows. */
  void (*started) (gpointer user_data);
  /* The call cannot go on (busy: the engine has no free slot); the server ends it. */
  void (*failed) (const char *message, gboolean busy, gpointer user_data);
  gpointer user_data;
} PpxWebrtcPeerCallbacks;

/* Builds the call's pipeline and starts it on a worker; NULL with an error when it cannot be built. */
PpxWebrtcPeer *ppx_webrtc_peer_new (guint id, const PpxServerOptions *options, const PpxCallParams *params,
                                    const PpxWebrtcPeerCallbacks *callbacks, GError **error);
/* The page's answer (SDP text). */
gboolean ppx_webrtc_peer_set_answer (PpxWebrtcPeer *peer, const char *sdp, GError **error);
/* One of the page's ICE candidates ("" = end of candidates); at most options->max_ice_candidates. */
gboolean ppx_webrtc_peer_add_candidate (PpxWebrtcPeer *peer, guint mline, const char *candidate, GError **error);
/* Microseconds since audio last arrived from the page (since the peer was made, before any). */
gint64 ppx_webrtc_peer_audio_idle_us (PpxWebrtcPeer *peer);
/* TRUE once webrtcbin's connection state reached "connected". */
gboolean ppx_webrtc_peer_connected (PpxWebrtcPeer *peer);
/* No callback from now on; the pipeline stops on a worker (after the start, if it still runs), then
 * stopped(data) runs on the main thread and the peer is freed. */
void ppx_webrtc_peer_stop (PpxWebrtcPeer *peer, GSourceFunc stopped, gpointer data);
/* At exit: stops and frees now. */
void ppx_webrtc_peer_destroy (PpxWebrtcPeer *peer);

G_END_DECLS
#endif
