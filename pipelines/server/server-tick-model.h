/* personaplex-server: what a tick of n calls costs, learnt, and how many calls the tick holds within a budget
 * (docs/server.md, "Admission"). Pure bookkeeping, no I/O: the start-up measurement (server-admission.c) and the
 * live ticks feed it; tests/test-tick-model.c checks the rule.
 *
 * The rule. The engine's tick cost is known at some row counts: each count's p99, from its live ticks once it has
 * PPX_TICK_MODEL_LIVE_MIN of them (the last PPX_TICK_MODEL_LIVE_KEEP, of the last PPX_TICK_MODEL_LIVE_TTL_S
 * seconds: a slow spell is forgotten once it is over, so a server idle after one admits again), else from the
 * start-up measurement. A tick
 * of n calls runs rows(n) rows (n, or on an engine that pads its ticks to buckets the bucket). Its predicted p99 is
 * the known cost at rows(n), else the straight line between the two known counts around it, else (beyond the
 * largest) the largest's cost plus the least-squares slope of all known counts per row (never negative); and never
 * less than the cost known at any smaller count (the prediction grows with n); and never less than the same rule
 * over the start-up measurement alone: live ticks run at their calls' context, which is short for minutes after
 * the calls joined, so they may raise the prediction (another process on the GPU) but never lower it below what
 * full context costs (an H200 run admitted 128 calls against a measured bound of 116 when they could). The compute
 * bound is the largest n whose predicted p99 stays within the budget. */
#ifndef PPX_SERVER_TICK_MODEL_H
#define PPX_SERVER_TICK_MODEL_H

#include <glib.h>

G_BEGIN_DECLS

#define PPX_TICK_MODEL_LIVE_KEEP 32
#define PPX_TICK_MODEL_LIVE_MIN 8
#define PPX_TICK_MODEL_LIVE_TTL_S 30

typedef struct _PpxTickModel PpxTickModel;

/* An engine of `max_rows` rows (its slots); `bucketed`: its ticks are padded to the engine's batch-size bucket
 * (ppx_engine_bucket_rows: the next power of two to 32 rows, then the next multiple of 8), at most max_rows. */
PpxTickModel *ppx_tick_model_new (guint max_rows, gboolean bucketed);
void ppx_tick_model_free (PpxTickModel *m);
void ppx_tick_model_set_bucketed (PpxTickModel *m, gboolean bucketed);
/* The rows a tick of n calls runs. */
guint ppx_tick_model_rows (const PpxTickModel *m, guint n);
/* A start-up measurement: a tick of `rows` rows has this p99. */
void ppx_tick_model_add_measured (PpxTickModel *m, guint rows, double p99_ms);
/* A live tick of `rows` rows that took `ms` and ended at `t_us` (monotonic). */
void ppx_tick_model_add_live (PpxTickModel *m, guint rows, double ms, gint64 t_us);
/* The time the predictions are for (monotonic us): live ticks older than PPX_TICK_MODEL_LIVE_TTL_S are not
 * counted. */
void ppx_tick_model_set_now (PpxTickModel *m, gint64 now_us);
/* The predicted tick p99 (ms) with n calls; 0 while nothing is known. */
double ppx_tick_model_predict (PpxTickModel *m, guint n);
/* The largest n in [0, limit] whose prediction is within budget_ms (limit while nothing is known). */
guint ppx_tick_model_calls_within (PpxTickModel *m, double budget_ms, guint limit);
/* How much longer the tick is predicted to get (ms, >= 0) from now, with `open` calls, to `capacity` calls at full
 * context: the prediction at the capacity less the tick now, which is the lesser of the prediction with `open`
 * calls and `live_ms`, the live ticks' p99 (0: none): the calls of a server filling up are young, their contexts
 * short, and their tick grows as their contexts do as well as with the calls that join (the H100's ramp of
 * 2026-11-28: the tick 24 ms at 64 calls 10 s after the ramp, 39 at full context). 0 from the capacity on. */
double ppx_tick_model_rise (PpxTickModel *m, guint open, guint capacity, double live_ms);
/* Row counts with a known cost. */
guint ppx_tick_model_known (PpxTickModel *m);

/* The p99 of n values by nearest rank, but never the largest of 2 to 99 (one outlier does not make it): the
 * engine's rule (docs/engine.md, "Tick times"). Sorts `v`. 0 for n = 0. */
double ppx_tick_p99 (double *v, guint n);

G_END_DECLS
#endif
