/* personaplex-server: what /health and /metrics report (docs/server.md, "Operator endpoints").
 *
 * Calls accepted, refused and ended by protocol and reason, the join time (connect to handshake) of every call,
 * and the engine's tick durations: every frame of every call reports the wall time of the tick that stepped it
 * (the element's personaplex-frame step-ms, read on the streaming thread), so the tick histogram counts one
 * observation per call frame, and a frame whose tick took longer than 80 ms is an overrun. Thread-safe. */
#ifndef PPX_SERVER_METRICS_H
#define PPX_SERVER_METRICS_H

#include <glib.h>

G_BEGIN_DECLS

typedef enum { PPX_PROTO_CHAT, PPX_PROTO_WEBRTC, PPX_PROTO_N } PpxProto;

/* Label values: refused "full", "draining", "unauthorized", "forbidden_origin", "bad_request", "engine_full",
 * "failed"; ended "client_closed", "end_of_stream", "error", "bad_input", "timeout", "client_not_reading",
 * "drain", "server_stopping". */
void ppx_metrics_accepted (PpxProto proto);
void ppx_metrics_refused (PpxProto proto, const char *reason);
void ppx_metrics_ended (PpxProto proto, const char *reason);
void ppx_metrics_join (PpxProto proto, double seconds);
/* Seconds of a call's audio dropped because the model was behind it by more than the bound (--max-input-backlog);
 * from any thread. */
void ppx_metrics_input_dropped (PpxProto proto, double seconds);
/* One call frame's tick (ms); from any thread. */
void ppx_metrics_frame (double step_ms);

/* The median and 99th percentile of the last frames' ticks (ms; 0 before any) and the overruns so far. */
void ppx_metrics_ticks (double *p50, double *p99, guint64 *overruns);

typedef struct {
  guint sessions, capacity;
  gboolean draining;
  const char *backend, *device, *quantization, *kv_cache_format;
  guint64 weight_bytes, engine_bytes; /* the model's and the engine's device memory (host memory on the CPU) */
} PpxServerGauges;

/* /health's JSON body (g_free). */
char *ppx_metrics_health_json (const PpxServerGauges *g);
/* /metrics in the Prometheus text format 0.0.4 (g_free). */
char *ppx_metrics_prometheus (const PpxServerGauges *g);

G_END_DECLS
#endif
