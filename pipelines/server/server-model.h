/* personaplex-server: the shared model. Every session's personaplexduplex names the same
 * model-instance-id, so the process loads the weights once; a keeper element holds them between
 * sessions and makes a bad model directory or prompt fail at startup instead of at the first call. */
#ifndef PPX_SERVER_MODEL_H
#define PPX_SERVER_MODEL_H

#include <gst/gst.h>

#include "server-metrics.h"
#include "server-options.h"
#include "server-params.h"

G_BEGIN_DECLS

/* A new personaplexduplex with the options' model and model-instance-id, and the call's prompts and sampling
 * (`call` NULL: the server's defaults); NULL with an error when the element is not installed. */
GstElement *ppx_server_duplex_new (const PpxServerOptions *o, const PpxCallParams *call, const char *name,
                                   GError **error);
/* Where a call's pipeline holds a personaplexduplex named "duplex": a log line when it moved its frame boundary
 * to keep its frames in the engine's tick over the call (its client's clock drifting against the server's,
 * docs/element.md "Clocks that drift": silence inserted, its audio dropped). Read before the pipeline stops
 * (the stats start again with the next stream); `what` names the call ("call 3 (127.0.0.1:4000)"). */
void ppx_server_duplex_log_drift (GstElement *pipeline, const char *what);

/* A call's pipeline posted `e` (from its streaming threads): keeps, under `lock`, its first error's `text` in *first
 * and in *busy whether it was the shared engine having no free slot (the element's RESOURCE/BUSY); TRUE when this
 * was the first. */
gboolean ppx_server_keep_first_error (GMutex *lock, char **first, gboolean *busy, const GError *e, const char *text);

typedef struct _PpxServerModelKeeper PpxServerModelKeeper;

/* Loads the model (and runs the prompts once, as every session will). Slow for a large model. */
PpxServerModelKeeper *ppx_server_model_keeper_new (const PpxServerOptions *o, GError **error);
/* Backend and quantization the model was loaded with, e.g. "cpu / bf16". */
char *ppx_server_model_keeper_describe (PpxServerModelKeeper *k);
/* The CUDA device index the model was asked for. */
int ppx_server_model_keeper_device (PpxServerModelKeeper *k);
/* The keeper's personaplex-stats (backend, quantization, kv-cache-format, memory-bytes, engine-bytes, and the
 * engine's tick figures: the keeper never steps, but its stats read the engine every call shares). */
GstStructure *ppx_server_model_keeper_stats (PpxServerModelKeeper *k);
/* The engine's tick figures of such stats (tick-p50-ms, tick-p99-ms, ticks, tick-overruns, tick-total-ms,
 * tick-buckets, tick-bucket-bounds-ms); zeros where a field is missing. */
void ppx_server_engine_ticks (const GstStructure *stats, PpxServerTicks *ticks);

/* The engine every session shares: its slots (the keeper holds one), bytes of one session's state and
 * of the whole engine, and its KV cache format ("bf16"; g_free). */
typedef struct {
  guint max_sessions;
  guint64 session_bytes, engine_bytes;
  char *kv_cache_format;
} PpxServerEngineInfo;
void ppx_server_model_keeper_engine (PpxServerModelKeeper *k, PpxServerEngineInfo *info);
void ppx_server_model_keeper_free (PpxServerModelKeeper *k);

/* The engine's tick of `rows` sessions at full context, measured `ticks` times (the element's measure-tick:
 * a personaplex-tick-measure structure), and its live ticks after the `since`-th (tick-history-since: a
 * personaplex-tick-history structure whose total is the next read's `since`); see docs/element.md. */
GstStructure *ppx_server_model_keeper_measure_tick (PpxServerModelKeeper *k, guint rows, guint ticks);
GstStructure *ppx_server_model_keeper_tick_history (PpxServerModelKeeper *k, guint64 since);

G_END_DECLS
#endif
