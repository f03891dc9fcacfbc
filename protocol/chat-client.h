/* chat-client: a client of the PersonaPlex WebSocket protocol (/api/chat, as the reference server and web
 * client speak it; docs/server.md), for tests and load generators. Many calls run in one process on one
 * GMainContext; each call:
 *
 *   - connects (ws:// or wss://, an optional bearer token in a header or in the query, an optional Origin,
 *     self-signed certificates accepted when asked), and reports the HTTP status of a refused upgrade;
 *   - waits for the 0x00 handshake (the server ran the call's prompts), then sends its audio as Ogg Opus
 *     (24 kHz mono, 20 ms frames, pages of at most 2 frames: what the reference client's recorder sends),
 *     paced in real time from the handshake on, or as fast as the socket takes it;
 *   - records every message with its arrival time (g_get_monotonic_time): the handshake, each audio message
 *     with the answer samples complete after it (from the Ogg granule positions), text pieces, 0x05 errors
 *     and the close code; and decodes the answer to PCM through GStreamer (oggdemux ! opusdec) when asked.
 *
 * A load generator computes join time, per-frame latency and gaps from the record (helpers below).
 * All functions are called from the thread that runs the call's context; the callbacks are invoked there. */
#ifndef PPX_CHAT_CLIENT_H
#define PPX_CHAT_CLIENT_H

#include <glib.h>

#include "chat-protocol.h"

G_BEGIN_DECLS

/* ---- what a call says: PCM encoded once as Ogg Opus pages, shared by any number of calls ---- */
typedef struct _PpxChatAudio PpxChatAudio;

/* Any file GStreamer decodes (decodebin), converted to 24 kHz mono. */
PpxChatAudio *ppx_chat_audio_new_from_file (const char *path, GError **error);
/* 24 kHz mono float samples. */
PpxChatAudio *ppx_chat_audio_new_from_samples (const float *samples, gsize n_samples, GError **error);
PpxChatAudio *ppx_chat_audio_ref (PpxChatAudio *audio);
void ppx_chat_audio_unref (PpxChatAudio *audio);
gsize ppx_chat_audio_n_samples (const PpxChatAudio *audio);
/* The PCM that was encoded (24 kHz mono, n_samples). */
const float *ppx_chat_audio_samples (const PpxChatAudio *audio);
/* Ogg pages: the two header pages (OpusHead, OpusTags), then audio pages of at most 2 frames. */
guint ppx_chat_audio_n_pages (const PpxChatAudio *audio);
/* Writes `rate` into the OpusHead's input sample rate (RFC 7845 5.1: informational; the encoder writes 24000)
 * as browsers' opus-recorder does with the capture rate (44100, 48000), checksum updated. Changes the audio for
 * every call that says it later; FALSE when the first page is not an OpusHead. */
gboolean ppx_chat_audio_set_opus_input_rate (PpxChatAudio *audio, guint32 rate);

/* ---- a call ---- */
typedef struct _PpxChatCall PpxChatCall;

typedef enum {
  PPX_CHAT_PACE_REALTIME, /* each page when its last sample would have been captured, counted from the handshake */
  PPX_CHAT_PACE_FAST,     /* every page at once after the handshake */
} PpxChatPacing;

typedef struct {
  const char *url;                      /* ws:// or wss://HOST:PORT/api/chat, may carry a query already */
  const char *const *params;            /* NULL or NULL-terminated key, value, ... added to the query (escaped):
                                         * text_prompt, voice_prompt, seed, text_temperature, ... */
  const char *token;                    /* bearer token; NULL: none */
  gboolean token_in_query;              /* send it as token=... (what a browser must do) instead of a header */
  gboolean accept_invalid_certificates; /* wss:// to a self-signed server */
  const char *origin;                   /* an Origin header (what a browser sends); NULL: none */
  PpxChatAudio *audio;                  /* what to say (a reference is taken); NULL: nothing */
  PpxChatPacing pacing;
  gboolean end_of_stream;               /* flag the last page end-of-stream (Ogg EOS): the server answers the
                                         * rest of the audio and closes the call (1000) */
  gboolean decode;                      /* decode the answer to PCM (record->pcm) */
  GMainContext *context;                /* NULL: the thread-default context of ppx_chat_call_start's caller */
  const char *response_header;          /* a header of the upgrade's answer to keep in record->response_header
                                         * (e.g. X-Served-By: the server a balancer chose); NULL: none */
  double clock_ppm;                     /* PPX_CHAT_PACE_REALTIME: the client's capture clock runs this many parts
                                         * per million fast (negative: slow) against this process's, as a sound
                                         * card's does: it captures PPX_CHAT_RATE x (1 + ppm/1e6) samples a second
                                         * of g_get_monotonic_time, so page i leaves at its end / that rate after
                                         * the handshake; 0: the same clock. |ppm| at most 100000 */
} PpxChatOptions;

typedef struct {
  gint64 time_us;  /* arrival (monotonic clock, microseconds) */
  guint8 kind;     /* PPX_CHAT_* or whatever the server sent; 0xff: an empty or text (non-binary) message */
  gsize bytes;     /* payload bytes, the kind byte not counted */
  gint64 samples;  /* PPX_CHAT_AUDIO: answer samples (24 kHz) complete after this message (from the granule
                    * positions of its complete pages); the previous value when none completed; 0 before any */
  char *text;      /* PPX_CHAT_TEXT and PPX_CHAT_ERROR: the UTF-8 payload; NULL otherwise */
} PpxChatEvent;

typedef struct {
  gint64 time_us;  /* when the message was handed to the socket */
  gint64 samples;  /* input samples (24 kHz) complete after this page (0 for the header pages) */
  gsize bytes;     /* the page's bytes */
} PpxChatSent;

typedef struct {
  gint64 start_us;         /* the connection attempt */
  guint http_status;       /* 101 once upgraded; the status of a refused upgrade (400, 401, 403, 503...); 0: no
                            * HTTP answer (connection refused, TLS failure) */
  char *failure;           /* why the call could not connect or broke (NULL when it ended by a close) */
  gint64 handshake_us;     /* 0: no handshake */
  gint64 end_us;           /* when the call finished (closed, refused or failed) */
  int close_code;          /* the server's close code; 1006 when the connection ended without one; -1: none yet */
  char *close_reason;
  GArray *events;          /* PpxChatEvent: every message received, in order */
  GArray *sent;            /* PpxChatSent: every audio message sent */
  GString *text;           /* the 0x02 pieces concatenated */
  GPtrArray *errors;       /* the 0x05 texts (char *) */
  guint n_audio, n_text, n_other; /* messages by kind (n_other: unknown kinds, empty or text messages) */
  gint64 answer_samples;   /* answer samples complete so far (granule positions) */
  guint answer_pre_skip;   /* the answer's OpusHead pre-skip (48 kHz samples): the encoder's lookahead */
  gint64 sent_samples;     /* input samples sent so far */
  GArray *pcm;             /* float: the decoded answer (options.decode), complete once finished */
  char *decode_error;      /* the decoder's error, if the answer could not be decoded */
  char *response_header;   /* the value of options.response_header in the upgrade's answer (101 or refusal) */
} PpxChatRecord;

typedef struct {
  void (*event) (PpxChatCall *call, const PpxChatEvent *event, gpointer user_data); /* each message received */
  void (*finished) (PpxChatCall *call, gpointer user_data); /* refused, failed or closed: the record is complete */
  /* each binary message received, as it is (kind byte included), before `event` (NULL: not wanted) */
  void (*message) (PpxChatCall *call, const guint8 *data, gsize len, gpointer user_data);
} PpxChatCallbacks;

/* Copies what it needs from `options` (strings, the audio reference). A call must not be freed from its own
 * callbacks: free it after `finished` returned (e.g. after ppx_chat_call_wait). */
PpxChatCall *ppx_chat_call_new (const PpxChatOptions *options, const PpxChatCallbacks *callbacks, gpointer user_data);
void ppx_chat_call_start (PpxChatCall *call);
/* Closes from the client side (1000); `finished` follows when the server answered the close. */
void ppx_chat_call_close (PpxChatCall *call);
/* Sends a binary message as it is (kind byte included), or a text message: for tests of bad input. FALSE
 * when the call is not open. */
gboolean ppx_chat_call_send_binary (PpxChatCall *call, const guint8 *data, gsize len);
gboolean ppx_chat_call_send_text (PpxChatCall *call, const char *text);
gboolean ppx_chat_call_is_finished (const PpxChatCall *call);
const PpxChatRecord *ppx_chat_call_get_record (const PpxChatCall *call);
/* Closes it without waiting if it still runs (no `finished` then), and frees it. */
void ppx_chat_call_free (PpxChatCall *call);

/* Runs the call's context until the call finished or timeout_ms passed; TRUE if it finished. */
gboolean ppx_chat_call_wait (PpxChatCall *call, guint timeout_ms);
/* Runs `context` until every call of `calls` finished or timeout_ms passed; TRUE if all finished. */
gboolean ppx_chat_calls_wait (PpxChatCall *const *calls, guint n_calls, GMainContext *context, guint timeout_ms);

/* A record's empty state (its arrays made, close_code -1) and its release: for code that makes records up. */
void ppx_chat_record_init (PpxChatRecord *r);
void ppx_chat_record_clear (PpxChatRecord *r);

/* ---- figures from a record ---- */
/* Connect to handshake, ms; -1 without a handshake. */
double ppx_chat_record_join_ms (const PpxChatRecord *r);
/* For each answered frame k, the time from sending the page that completed input frame k (input samples up to
 * (k+1)*frame) to receiving the message that completed answer frame k, in ms (an array of double; g_array_unref).
 * The answer frame counts as complete without its last pre-skip/2 samples: the Opus encoder's lookahead holds
 * them until the next frame is encoded (a constant 6.5 ms of codec delay, not the server's). */
GArray *ppx_chat_record_frame_latencies (const PpxChatRecord *r, guint frame_samples);
/* Audio messages that arrived more than gap_us after the previous one (after the first audio message). */
guint ppx_chat_record_gaps (const PpxChatRecord *r, gint64 gap_us);

G_DEFINE_AUTOPTR_CLEANUP_FUNC (PpxChatAudio, ppx_chat_audio_unref)
G_DEFINE_AUTOPTR_CLEANUP_FUNC (PpxChatCall, ppx_chat_call_free)

G_END_DECLS
#endif
