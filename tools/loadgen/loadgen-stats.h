/* personaplex-loadgen: how a call ended, the figures derived from its record, and percentiles over calls.
 *
 * A call's record is the chat client's (chat-client.h): every message with its arrival time, the answer
 * samples complete after each audio message (Ogg granule positions) and every page sent with the input samples
 * complete after it. Input frame i is samples [1920 i, 1920 (i + 1)) of what the call sent, answer frame i the
 * same samples of the answer. */
#ifndef LOADGEN_STATS_H
#define LOADGEN_STATS_H

#include "chat-client.h"
#include "loadgen-playout.h"

G_BEGIN_DECLS

/* How a call ended: its class decides whether the run fails. */
typedef enum {
  LOADGEN_END_OK,      /* ran its seconds and closed normally */
  LOADGEN_END_REFUSED, /* HTTP 503 before the WebSocket upgrade: the server (or the balancer) was full */
  LOADGEN_END_FAILED,  /* anything else: another HTTP status, 0x05, a close, a lost connection, a timeout */
} LoadgenEndClass;

typedef struct {
  guint index;
  double scheduled_s;          /* when it was due to start, seconds after the run's start (--ramp) */
  const PpxChatRecord *record; /* its record (owned by the chat call, or by a test); NULL: it never started */
  char *reason;                /* see loadgen_call_classify */
  char *detail;                /* the 0x05 text or the error message; NULL: none */
  char *server;                /* the server that took it (the balancer's response header); NULL: not known */
  double clock_ppm;            /* its client's clock against the loadgen's (--clock-ppm): it sent and plays at
                                * 24 kHz x (1 + clock_ppm/1e6) of the loadgen's clock; 0: the same clock */
} LoadgenCall;

LoadgenCall *loadgen_call_new (guint index, double scheduled_s);
void loadgen_call_free (LoadgenCall *c);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (LoadgenCall, loadgen_call_free)

/* Sets how the call ended, unless that was set already (the first end is the one that counts). */
void loadgen_call_set_end (LoadgenCall *c, const char *reason, const char *detail);

/* Reads how the call ended from its finished record, unless set already. `input_samples`: the audio the call
 * was to send. The reasons:
 *   "ok"                the handshake came, all the audio was sent, answer audio came, the call closed normally
 *                       (1000; a socket error after that is kept as the detail);
 *   "http-NNN"          refused with HTTP status NNN before the upgrade (503: full or draining; 401: token);
 *   "connect-failed"    no HTTP answer at all (refused connection, unreachable, TLS);
 *   "server-error"      the server sent 0x05 (detail: its text);
 *   "connection-lost"   the connection broke without a close handshake (1006: a server that died);
 *   "closed-NNNN"       the server closed with code NNNN before all the audio was sent;
 *   "protocol-error"    the server's answer was not an Ogg stream (detail says why);
 *   "no-answer"         the call ran to its end without answer audio;
 * and, set by the run itself: "handshake-timeout" (no handshake within --join-timeout) and "unfinished" (still
 * running when the run gave up on it). The server comes from record->response_header. */
void loadgen_call_classify (LoadgenCall *c, gint64 input_samples);
/* REFUSED for "http-503", OK for "ok", FAILED for the rest. */
LoadgenEndClass loadgen_reason_class (const char *reason);

/* Figures of one call. NAN where there is nothing to measure (no handshake, no answer). */
typedef struct {
  double join_ms;          /* connect to handshake */
  double first_audio_ms;   /* handshake to the first answer message */
  double sent_s;           /* input audio sent */
  double answered_s;       /* answer audio complete */
  guint frames_sent;       /* whole input frames sent */
  guint frames_answered;   /* of those, answered */
  GArray *latency_ms;      /* double, one per answered frame (ppx_chat_record_frame_latencies) */
  double latency_p50_ms, latency_p95_ms, latency_p99_ms, latency_max_ms;
  /* p50 of the first and of the last quarter of the answered frames (at least LOADGEN_QUARTER_MIN frames each,
   * else NAN): a call whose answers fall behind its input has a last quarter later than its first */
  double latency_first_ms, latency_last_ms;
  guint underruns;         /* answer messages more than the gap threshold after the previous one */
  double max_gap_ms;       /* the longest time between two answer messages */
  /* the reference web client's player fed the call's decoded answer (loadgen_call_chunks; all 0 without an
   * answer); `has_playout`: the call had answer audio to play */
  LoadgenPlayout playout;
  gboolean has_playout;
} LoadgenCallStats;

#define LOADGEN_QUARTER_MIN 2

/* Derives the figures; `gap_ms` is the underrun threshold (the 100 ms). */
void loadgen_call_stats (const LoadgenCall *c, double gap_ms, LoadgenCallStats *out);
void loadgen_call_stats_clear (LoadgenCallStats *s);

/* The call's answer as the reference client's decoder worker hands it to the player: opus-recorder decodes
 * every Opus packet (pre-skip included) at 24 kHz, resamples it to 48 kHz and posts a chunk each time its
 * output buffer of LOADGEN_PLAYOUT_CHUNK samples fills. The 48 kHz samples decoded after a message are its Ogg
 * granule position (RFC 7845: pre-skip included), so each audio message brings the chunks its granule position
 * completes, arriving when it arrived: ms after `origin_us` (a monotonic time). An array of LoadgenChunk. */
GArray *loadgen_call_chunks (const PpxChatRecord *r, gint64 origin_us);
/* Replays the call's chunks through the player (loadgen_playout_replay) with the quanta's clock starting at the
 * call's connect and running at the call's client clock (clock_ppm: the arrivals are counted in it); `per_second` as there, by seconds after `origin_us` (NULL: not wanted). FALSE (and `out`
 * zeroed) when the call had no answer audio. */
gboolean loadgen_call_playout (const LoadgenCall *c, gint64 origin_us, GArray *per_second, LoadgenPlayout *out);

/* Nearest-rank percentiles (tool-stats.h) of a series (NANs left out): n, p50, p95, p99, max, mean. */
typedef struct {
  guint n;
  double p50, p95, p99, max, mean;
} LoadgenSummary;

void loadgen_summarize (const double *values, guint n, LoadgenSummary *out);

G_END_DECLS
#endif
