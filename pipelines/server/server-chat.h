/* personaplex-server: one /api/chat call, the PersonaPlex WebSocket protocol (docs/server.md):
 *
 *   client Ogg Opus (0x01) -> appsrc -> oggdemux -> opusdec -> audioconvert -> audioresample -> 24 kHz mono F32
 *     -> queue (200 ms) -> personaplexduplex (shared engine) -> audioconvert -> opusenc (20 ms frames)
 *     -> appsink -> Ogg pages of 2 packets (40 ms), each a 0x01 message as soon as it is complete
 *   personaplex-text bus messages -> 0x02 (UTF-8; padding tokens have none)
 *
 * The pipeline starts (the model is shared, the call's prompts run) on a worker thread; the 0x00 handshake goes
 * out when that is done. The client's audio is read no faster than the model answers it (past 64 KiB of Ogg waiting,
 * the server stops reading the socket: TCP flow control slows the client down). Audio sent before the handshake
 * is kept (up to 256 KiB) and played in after it. A
 * client's Ogg end-of-stream page ends its input: the rest is answered, then the server closes (1000). Any
 * error of the call (bad input, a pipeline error, the engine) sends 0x05 with the reason and closes. */
#ifndef PPX_SERVER_CHAT_H
#define PPX_SERVER_CHAT_H

#include "server-http.h"

G_BEGIN_DECLS

/* Bytes of one client message (a whole Ogg page of 65307 bytes and the kind fit), and of audio kept before the
 * handshake. */
#define PPX_CHAT_MAX_MESSAGE (64 * 1024)
#define PPX_CHAT_MAX_EARLY_AUDIO (256 * 1024)
/* Bytes of answer the client may leave unread before its call is ended (about 30 s of 64 kbit/s Opus). */
#define PPX_CHAT_MAX_SEND_QUEUE (256 * 1024)

/* Starts a call for `msg` (its checks passed): the upgrade and the join. Takes `params`. */
void ppx_server_chat_start (PpxServer *server, SoupServerMessage *msg, PpxCallParams *params);

G_END_DECLS
#endif
