/* chat-client: what its files share (not part of the API). */
#ifndef PPX_CHAT_CLIENT_PRIVATE_H
#define PPX_CHAT_CLIENT_PRIVATE_H

#include "chat-client.h"

G_BEGIN_DECLS

/* Page i of the encoded audio (owned by `audio`) and the input samples complete after it. */
GBytes *ppx_chat_audio_page (const PpxChatAudio *audio, guint i, gint64 *end_samples);

G_END_DECLS
#endif
