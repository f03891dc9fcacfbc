/* personaplex-server: the JSON messages between server and page.
 *
 * WebSocket, page -> server:
 *   {"type":"answer","sdp":"v=0..."}
 *   {"type":"ice","candidate":"candidate:...","sdpMLineIndex":0}   (candidate "" ends the candidates)
 * WebSocket, server -> page:
 *   {"type":"welcome","session":N,"model":"cpu / bf16"}
 *   {"type":"offer","sdp":"v=0..."}
 *   {"type":"ice","candidate":"...","sdpMLineIndex":0}
 *   {"type":"state","connection":"connected"}                      (the server's webrtcbin view)
 *   {"type":"error","message":"..."}
 * Data channel "transcript", server -> page:
 *   {"type":"text","text":" piece","time":1.28}                    (seconds of the conversation)
 *   {"type":"stats","frames":N,"mean-step-ms":x,"overruns":N,"model-users":N,"sessions":N,"batch-size":N}
 *     (model-users counts every personaplexduplex on the shared model, the server's keeper included;
 *     sessions leaves the keeper out)
 *
 * Parsing never trusts the page: anything that is not one of the two page messages with the right
 * types and sane sizes is refused with a message saying why. */
#ifndef PPX_SERVER_SIGNALLING_H
#define PPX_SERVER_SIGNALLING_H

#include <glib.h>

G_BEGIN_DECLS

#define PPX_SIGNAL_MAX_MESSAGE (64 * 1024) /* bytes of one WebSocket message */
#define PPX_SIGNAL_MAX_SDP (32 * 1024)
#define PPX_SIGNAL_MAX_CANDIDATE 1024
#define PPX_SIGNAL_MAX_MLINE 15

typedef enum {
  PPX_SIGNAL_ANSWER,
  PPX_SIGNAL_ICE,
} PpxSignalKind;

typedef struct {
  PpxSignalKind kind;
  char *sdp;       /* ANSWER */
  char *candidate; /* ICE; "" at the end of the candidates */
  guint mline;     /* ICE */
} PpxSignalMessage;

gboolean ppx_signal_parse (const char *data, gsize len, PpxSignalMessage *msg, GError **error);
void ppx_signal_message_clear (PpxSignalMessage *msg);

/* Server -> page messages, as JSON text (g_free). */
char *ppx_signal_welcome_new (guint session, const char *model);
char *ppx_signal_offer_new (const char *sdp);
char *ppx_signal_ice_new (guint mline, const char *candidate);
char *ppx_signal_state_new (const char *connection);
char *ppx_signal_error_new (const char *message);
char *ppx_signal_text_new (const char *text, double seconds);
char *ppx_signal_stats_new (guint64 frames, double mean_step_ms, guint64 overruns, guint model_users,
                            guint batch_size);

G_END_DECLS
#endif
