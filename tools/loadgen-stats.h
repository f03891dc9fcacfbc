/* personaplex-loadgen: what one call recorded, the figures derived from it, and percentiles over calls.
 *
 * Times are seconds on the run's monotonic clock (0 = the run's start). Audio is counted in samples of the
 * protocol's rate (24 kHz) and frames of 1920 samples (80 ms): input frame i is samples [1920 i, 1920 (i + 1))
 * of what the call sent, answer frame i the same samples of what it decoded from the server's audio. */
#ifndef LOADGEN_STATS_H
#define LOADGEN_STATS_H

#include <glib.h>

G_BEGIN_DECLS

#define LOADGEN_RATE 24000
#define LOADGEN_FRAME 1920

/* A point of a cumulative count: at time t, `samples` had been sent (or decoded) in all. */
typedef struct {
  double t;
  gint64 samples;
} LoadgenMark;

/* How a call ended: its class decides whether the run fails. */
typedef enum {
  LOADGEN_END_OK,      /* ran its seconds and closed normally */
  LOADGEN_END_REFUSED, /* HTTP 503 before the WebSocket upgrade: the server (or the balancer) was full */
  LOADGEN_END_FAILED,  /* anything else: another HTTP status, 0x05, a close, a lost connection, a timeout */
} LoadgenEndClass;

/* One call as the client saw it. */
typedef struct {
  guint index;
  double scheduled_s;   /* when it was due to start (--ramp) */
  double connect_s;     /* when it started connecting; < 0: never */
  double handshake_s;   /* arrival of the 0x00 handshake; < 0: none */
  double end_s;         /* when it ended (closed, refused or failed) */
  GArray *sent;         /* LoadgenMark after each Ogg page sent: input samples sent so far */
  GArray *received;     /* LoadgenMark after each answer audio message: answer samples decoded so far */
  guint text_pieces;    /* 0x02 messages */
  gsize text_bytes;
  int http_status;      /* HTTP status of a refusal before the upgrade; 0: none */
  int close_code;       /* the WebSocket close code; 0: none */
  char *reason;         /* see loadgen_call_end */
  char *detail;         /* the 0x05 text or the error message; NULL: none */
  char *server;         /* the server that took it (the balancer's response header), NULL: not known */
} LoadgenCall;

LoadgenCall *loadgen_call_new (guint index, double scheduled_s);
void loadgen_call_free (LoadgenCall *c);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (LoadgenCall, loadgen_call_free)

void loadgen_call_mark_sent (LoadgenCall *c, double t, gint64 total_samples);
void loadgen_call_mark_received (LoadgenCall *c, double t, gint64 total_samples);

/* Records how the call ended. `reason` is one of:
 *   "ok"                the call ran its seconds and we closed it;
 *   "http-NNN"          refused with HTTP status NNN before the upgrade (503: full or draining; 401: token);
 *   "server-error"      the server sent 0x05 (detail: its text) and closed;
 *   "closed-NNNN"       the server closed with code NNNN before the end, without 0x05;
 *   "connection-lost"   the connection broke without a close handshake (1006: a server that died);
 *   "connect-failed"    no connection (refused, unreachable, TLS);
 *   "handshake-timeout" connected, but no handshake within the join timeout;
 *   "no-answer"         the handshake came but no answer audio in the whole call;
 *   "protocol-error"    the server sent something the protocol does not allow (detail says what).
 * The class is REFUSED for "http-503", OK for "ok", FAILED for the rest. */
void loadgen_call_end (LoadgenCall *c, double t, const char *reason, const char *detail);
LoadgenEndClass loadgen_reason_class (const char *reason);

/* Figures of one call. NAN where there is nothing to measure (no handshake, no answer). */
typedef struct {
  double join_ms;          /* connect to handshake */
  double first_audio_ms;   /* handshake to the first answer audio */
  double sent_s;           /* input audio sent */
  double answered_s;       /* answer audio decoded */
  guint frames_sent;       /* whole input frames sent */
  guint frames_answered;   /* of those, answered (answer frame i complete) */
  GArray *latency_ms;      /* double, one per answered frame: input frame i's last page sent to answer frame i
                            * complete */
  double latency_p50_ms, latency_p95_ms, latency_p99_ms, latency_max_ms;
  guint underruns;         /* gaps between answer messages longer than the gap threshold, after the first */
  double max_gap_ms;       /* the longest gap between answer messages */
} LoadgenCallStats;

/* Derives the figures; `gap_ms` is the underrun threshold (the 100 ms). */
void loadgen_call_stats (const LoadgenCall *c, double gap_ms, LoadgenCallStats *out);
void loadgen_call_stats_clear (LoadgenCallStats *s);

/* Nearest-rank percentiles of a series (NANs left out): n, p50, p95, p99, max, mean. */
typedef struct {
  guint n;
  double p50, p95, p99, max, mean;
} LoadgenSummary;

void loadgen_summarize (const double *values, guint n, LoadgenSummary *out);
/* The nearest-rank percentile p (0 < p <= 1) of `sorted` (ascending, no NAN), n > 0. */
double loadgen_percentile (const double *sorted, guint n, double p);

G_END_DECLS
#endif
