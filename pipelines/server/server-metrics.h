/* personaplex-server: what /health and /metrics report (docs/server.md, "Operator endpoints").
 *
 * Calls accepted, refused and ended by protocol and reason and the join time (connect to handshake) of every call,
 * counted here; the engine's tick figures (one observation per tick, every tick of the engine) as the model
 * keeper's `stats` give them (server-model.h). Thread-safe. */
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
/* The engine's ticks (the element's stats: tick-*): the window's median and p99 (ms), and since the engine was
 * made: ticks, those over 80 ms, their summed time (ms), and a histogram (counts[i] the ticks above bounds_ms[i-1]
 * and at most bounds_ms[i], counts[n_bounds] the rest). */
#define PPX_METRICS_MAX_TICK_BOUNDS 32
typedef struct {
  double p50_ms, p99_ms, total_ms;
  guint64 ticks, overruns;
  guint n_bounds;
  double bounds_ms[PPX_METRICS_MAX_TICK_BOUNDS];
  guint64 counts[PPX_METRICS_MAX_TICK_BOUNDS + 1];
} PpxServerTicks;

/* Seconds of a call's audio dropped because the model was behind it by more than the bound (--max-input-backlog);
 * from any thread. */
void ppx_metrics_input_dropped (PpxProto proto, double seconds);

/* One answer page sent (server-pacer.h): the interval since the call's previous page (< 0: its first), and the time
 * of each stage (< 0: not known): encode (the frame left the engine -> the page complete), dispatch (-> the main
 * loop took it), pace (-> handed to the socket, the pacer's wait). */
enum { PPX_PAGE_STAGE_ENCODE, PPX_PAGE_STAGE_DISPATCH, PPX_PAGE_STAGE_PACE, PPX_PAGE_STAGES };
void ppx_metrics_answer_page (PpxProto proto, double interval_s, const double stage_s[PPX_PAGE_STAGES]);

typedef struct {
  guint sessions, capacity;
  gboolean draining;
  const char *backend, *device, *quantization, *kv_cache_format;
  guint64 weight_bytes, engine_bytes; /* the model's and the engine's device memory (host memory on the CPU) */
  PpxServerTicks ticks;
  /* admission (server-admission.h): the bounds, which holds, the mode and budget, the live ticks over it */
  guint capacity_memory, capacity_compute;
  const char *bound, *admission; /* NULL: "memory" */
  double tick_budget_ms, predicted_tick_ms;
  gboolean over_budget;
  gboolean pacing_rise;    /* new /api/chat calls wait for the tick's predicted rise */
  double pacing_rise_ms;   /* ... that much now (0 when not) */
} PpxServerGauges;

/* /health's JSON body (g_free). */
char *ppx_metrics_health_json (const PpxServerGauges *g);
/* /metrics in the Prometheus text format 0.0.4 (g_free). */
char *ppx_metrics_prometheus (const PpxServerGauges *g);

G_END_DECLS
#endif
