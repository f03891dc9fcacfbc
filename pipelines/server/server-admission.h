/* personaplex-server: how many calls the server admits (docs/server.md, "Admission").
 *
 * Capacity = min (memory, compute). Memory: the engine's slots (--max-sessions, or as many as fit). Compute: the
 * calls whose tick p99, predicted by the learnt tick cost (server-tick-model.h), stays within --tick-budget-ms, at
 * least one (a prediction alone never closes the server; the live ticks do). The
 * cost is measured at start-up at full context for a few row counts and learnt from the live ticks from then on.
 * A call is admitted while the open calls plus it fit the capacity and the live ticks of the last 2 s keep their
 * p99 within the budget (when they do not, nothing is admitted until they do). --admission memory admits by memory
 * alone (the compute bound is still measured and reported). Main context only. */
#ifndef PPX_SERVER_ADMISSION_H
#define PPX_SERVER_ADMISSION_H

#include "server-model.h"
#include "server-options.h"

G_BEGIN_DECLS

/* The live ticks of the last this many ms decide whether the engine runs over its budget now. */
#define PPX_ADMISSION_RECENT_MS 2000
#define PPX_ADMISSION_RECENT_MIN 5

typedef struct _PpxAdmission PpxAdmission;

typedef struct {
  guint capacity;         /* calls admitted at once now: min (memory, compute), or memory with --admission memory */
  guint memory, compute;  /* the two bounds */
  const char *bound;      /* which holds: "memory" or "compute" ("memory" with --admission memory) */
  const char *mode;       /* "tick" or "memory" */
  double budget_ms;
  gboolean over_budget;   /* the live ticks of the last 2 s run over the budget: nothing admitted (tick mode) */
  double recent_p99_ms;   /* their p99 (0: too few) */
  double predicted_ms;    /* the predicted tick p99 with one more call than open */
} PpxAdmissionState;

/* Measures the tick at start-up (logs what it found and which bound holds) and keeps learning from the live ticks
 * (a timer on the main context). `memory_calls`: the calls that fit in memory; `engine_slots`: the engine's. */
PpxAdmission *ppx_admission_new (const PpxServerOptions *o, PpxServerModelKeeper *keeper, guint memory_calls,
                                 guint engine_slots);
void ppx_admission_free (PpxAdmission *a);
/* Where the admission stands with `open` calls open (learns the live ticks first). */
void ppx_admission_state (PpxAdmission *a, guint open, PpxAdmissionState *st);
/* NULL: one more call may come in; else why not, a metrics reason: "full" (the capacity is reached) or
 * "over_budget" (the live ticks run over the budget). */
const char *ppx_admission_refuse (PpxAdmission *a, guint open);
/* How much longer the tick is predicted to get (ms, >= 0) from now, `open` calls open, to the capacity of `st`
 * (from ppx_admission_state for `open`) at full context, from the live ticks' p99 where there are some
 * (ppx_tick_model_rise): what a call joining now may see its latency rise by as the server fills and its calls'
 * contexts grow (server-pacer.h, the rise). */
double ppx_admission_tick_rise_ms (PpxAdmission *a, const PpxAdmissionState *st, guint open);
/* Whether that prediction is worth acting on by default: the tick was measured on a GPU (the CPU's start-up
 * measurement on a shared machine predicts far more growth than comes) and admission is by the tick. */
gboolean ppx_admission_predicts_rise (PpxAdmission *a);

G_END_DECLS
#endif
