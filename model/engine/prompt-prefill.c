/* The system prompts as chunked prefill passes (docs/engine.md, "Prompt prefill"): a joining session's
 * prompt frames run as chunks of T frames, one temporal pass of T rows each (ppx_lm_prefill), one chunk per
 * hold of the engine lock, after any waiting tick, and sized so that the chunk ends before the next tick is
 * due:
 *
 *   budget = (last tick's arrival + tick interval) - now - PROMPT_MARGIN_MS
 *   T      = the largest chunk size whose estimate fits the budget: PROMPT_SAFETY x the running mean of its
 *            measured times, or, not measured yet, the next smaller size's estimate scaled by the sizes' ratio
 *
 * with the tick interval the shortest of the last ticks' arrival intervals, at most the frame period (80 ms),
 * and the sizes 1, 2, 4, ... up to the largest (64 by default). No session holds a Mimi row (none has ticked;
 * a ready one that never ticks, a server's model keeper, holds none): nothing ticks, the budget is unbounded.
 * When not even one frame fits (the gap is spent, or the next tick is overdue) the chunk waits for the next
 * tick to go by, once, at most a quarter period; after that wait it runs at least one frame, with
 * the budget of a tick arriving now (the period minus the last tick's run; when ticks run back to back, a
 * quarter of a tick's run), so prompts progress even then. A wait that saw no tick marks the ticks stalled
 * (they stopped, or come from the thread that runs the prompts), and no chunk waits again until a tick comes.
 * A chunk ends with a device sync: its time is the time the lock was held, and no tick queues behind it. */
#include "engine-internal.h"

#include <math.h>

#define PROMPT_MARGIN_MS 2.0 /* kept free before the next tick's expected arrival */
#define PROMPT_SAFETY 1.25   /* a size's measured mean times this is its estimate */
#define PROMPT_ALPHA 0.3     /* weight of a new measurement in the running mean */
#define PROMPT_STALL 0.25    /* an overdue tick is waited for this fraction of the frame period at most */
#define PROMPT_OVERLOAD_SHARE 0.25 /* ticks back to back: a chunk may add this share of a tick's time */

int
ppx_engine_prompt_chunk_for (const PpxEngineParams *params)
{
  int n = params->prompt_chunk;
  const char *env = g_getenv ("PPX_PROMPT_CHUNK");
  if (n <= 0 && env && *env)
    n = (int) g_ascii_strtoll (env, NULL, 10);
  if (n <= 0)
    n = PPX_PROMPT_CHUNK_DEFAULT;
  return MIN (n, PPX_PROMPT_CHUNK_MAX);
}

static void
clock_sizes (PpxPromptClock *c, int largest)
{
  c->n_sizes = 0;
  for (int t = 1; t < largest && c->n_sizes < PPX_PROMPT_SIZES - 1; t *= 2)
    c->sizes[c->n_sizes++] = t;
  c->sizes[c->n_sizes++] = largest;
  memset (c->cost_ms, 0, sizeof c->cost_ms);
  c->max_rows = 0;
}

gboolean
ppx_engine_prompt_init (PpxEngine *e, GError **error)
{
  const PpxLmConfig *c = &e->model->cfg.lm;
  if (ppx_lm_prefill_rows_for (c, e->prompt_chunk) > 1 &&
      !(e->prefill = ppx_lm_prefill_new (e->model->lm, e->lm, e->prompt_chunk, error)))
    return FALSE;
  e->prompt_chunk = e->prefill ? ppx_lm_prefill_max_rows (e->prefill) : 1;
  clock_sizes (&e->clock, e->prompt_chunk);
  return TRUE;
}

void
ppx_engine_set_prompt_chunk (PpxEngine *e, int n)
{
  g_mutex_lock (&e->lock);
  e->prompt_chunk = e->prefill ? CLAMP (n, 1, ppx_lm_prefill_max_rows (e->prefill)) : 1;
  if (e->clock.sizes[e->clock.n_sizes - 1] != e->prompt_chunk) /* other sizes: what was measured goes */
    clock_sizes (&e->clock, e->prompt_chunk);
  e->clock.max_rows = 0;
  g_mutex_unlock (&e->lock);
}

void
ppx_engine_prompt_clock (PpxEngine *e, PpxPromptClock *out)
{
  g_mutex_lock (&e->lock);
  *out = e->clock;
  g_mutex_unlock (&e->lock);
}

/* ---- the schedule ---- */

static double
frame_period_ms (const PpxEngine *e)
{
  const PpxMimiConfig *m = &e->model->cfg.mimi;
  return 1000.0 * m->frame_size / m->sample_rate;
}

/* The tick interval: the shortest recent arrival interval, at most the frame period. */
static double
tick_interval_ms (const PpxEngine *e)
{
  const PpxPromptClock *c = &e->clock;
  const guint n = G_N_ELEMENTS (c->arrival);
  double iv = frame_period_ms (e);
  for (guint64 k = c->n_ticks > n ? c->n_ticks - n + 1 : 1; k < c->n_ticks; k++)
    iv = MIN (iv, (c->arrival[k % n] - c->arrival[(k - 1) % n]) / 1000.0);
  return MAX (iv, 0.0);
}

/* When the next tick is due (us), or 0 when none is expected (no session holds a Mimi row, no tick yet). */
static gint64
next_tick_due (const PpxEngine *e)
{
  const PpxPromptClock *c = &e->clock;
  if (e->n_rows == 0 || c->n_ticks == 0)
    return 0;
  const gint64 last = c->arrival[(c->n_ticks - 1) % G_N_ELEMENTS (c->arrival)];
  return last + (gint64) (tick_interval_ms (e) * 1000.0);
}

/* The budget of a chunk when the next tick is overdue and was waited for (or ticks stalled): what a tick
 * arriving now can absorb within its frame period, and when ticks run back to back (slower than real time,
 * every call misses frames already) a share of a tick's time, so the prompts still progress. */
static double
overdue_budget (const PpxEngine *e)
{
  const double run = e->clock.last_run_us / 1000.0;
  return MAX (frame_period_ms (e) - run - PROMPT_MARGIN_MS, PROMPT_OVERLOAD_SHARE * run);
}

/* The estimate of size i's chunk time (ms): measured, or scaled from the next smaller size (0 for size 1
 * unmeasured: one frame always may run). */
static double
size_estimate (const PpxPromptClock *c, int i)
{
  if (c->cost_ms[i] > 0)
    return PROMPT_SAFETY * c->cost_ms[i];
  return i == 0 ? 0.0 : size_estimate (c, i - 1) * c->sizes[i] / c->sizes[i - 1];
}

/* The largest chunk whose estimate fits budget_ms (INFINITY: the largest), 0 when none. */
static int
chunk_for_budget (const PpxPromptClock *c, double budget_ms)
{
  int t = 0;
  for (int i = 0; i < c->n_sizes; i++)
    if (size_estimate (c, i) <= budget_ms)
      t = c->sizes[i];
  return t;
}

static void
note_chunk (PpxPromptClock *c, int rows, int frames, double ms, double budget_ms)
{
  int i = -1;
  while (i + 1 < c->n_sizes && c->sizes[i + 1] <= rows)
    i++; /* the largest size <= rows: a shorter chunk's time over-estimates it, never under */
  if (i >= 0)
    c->cost_ms[i] = c->cost_ms[i] > 0 ? (1 - PROMPT_ALPHA) * c->cost_ms[i] + PROMPT_ALPHA * ms : ms;
  c->chunks++;
  c->frames += frames;
  c->last_rows = rows;
  c->max_rows = MAX (c->max_rows, rows);
  c->last_ms = ms;
  c->last_budget_ms = budget_ms;
}

/* Takes the lock for one chunk (after any waiting tick) and returns its size in frames; *budget_ms gets the
 * time the schedule gave it. */
static int
lock_for_chunk (PpxEngine *e, double *budget_ms)
{
  PpxPromptClock *c = &e->clock;
  ppx_engine_lock_for_prompt (e);
  gboolean waited = FALSE;
  for (;;) {
    const gint64 now = g_get_monotonic_time (), due = next_tick_due (e);
    double budget;
    if (!due)
      budget = INFINITY;
    else if (now < due)
      budget = (due - now) / 1000.0 - PROMPT_MARGIN_MS;
    else if (waited || c->stalled) /* ticks stopped, or run back to back */
      budget = overdue_budget (e);
    else
      budget = -1; /* overdue: wait for it */
    const int t = chunk_for_budget (c, budget);
    if (t > 0 || waited || c->stalled) {
      *budget_ms = budget;
      return MAX (t, 1);
    }
    /* no frame fits before the next tick: let it go by; when none comes within PROMPT_STALL of the period,
     * ticks have stopped (or come from this thread), and no chunk waits again until one does */
    waited = TRUE;
    c->waits++;
    const guint64 ticks = c->n_ticks;
    const gint64 until = MAX (due, now) + (gint64) (frame_period_ms (e) * PROMPT_STALL * 1000.0);
    while (c->n_ticks == ticks && g_get_monotonic_time () < until)
      g_cond_wait_until (&e->turn, &e->lock, until);
    c->stalled = c->n_ticks == ticks;
    while (g_atomic_int_get (&e->ticks_waiting) > 0)
      g_cond_wait (&e->turn, &e->lock);
  }
}

/* ---- the runner ---- */

/* Whether every stream of the row's target column is provided: nothing the model samples is kept. */
static gboolean
all_provided (const PpxLmConfig *c, const PpxLmRow *row)
{
  for (int k = 0; k <= c->dep_q; k++)
    if (row->forced[k] < 0)
      return FALSE;
  return TRUE;
}

/* The position of the next model call of g (ppx_lmgen_prepare: o - 1, and 0 at o = 0). */
static gint64
next_position (const PpxLmGen *g)
{
  return g->offset > 0 ? g->offset - 1 : 0;
}

static void
run_rows (PpxEngine *e, PpxSession *s, PpxLmRow *rows, const guint *capture_at, int T)
{
  if (T == 0)
    return;
  for (int t = 0; t < T; t++)
    if (rows[t].capture) /* the capture array may have moved since prepare */
      rows[t].capture = &g_array_index (s->gen.capture, float, capture_at[t]);
  ppx_lm_prefill (e->prefill, s->slot, rows, T);
}

void
ppx_engine_run_prompt (PpxEngine *e, PpxSession *s, const PpxPromptFrame *f, int n)
{
  const PpxLmConfig *c = &e->model->cfg.lm;
  g_return_if_fail (e->prefill != NULL);
  const int R = ppx_lm_prefill_max_rows (e->prefill);
  g_autofree PpxLmRow *rows = g_new (PpxLmRow, R);
  g_autofree guint *capture_at = g_new (guint, R);
  int out[PPX_MAX_STREAMS];
  for (int i = 0; i < n;) {
    double budget;
    const int got = lock_for_chunk (e, &budget), want = MIN (got, R);
    const gint64 t0 = g_get_monotonic_time ();
    int T = 0, frames = 0;
    while (i < n && T < want && ppx_lm_prefill_row_fits (c, T, next_position (&s->gen))) {
      const PpxPromptFrame *p = &f[i];
      if (p->cache)
        memcpy (s->gen.cache, p->cache, sizeof s->gen.cache);
      PpxLmRow *row = &rows[T];
      i++;
      frames++;
      if (!ppx_lmgen_prepare (&s->gen, p->user, p->agent, p->text, p->embedding, &s->smp, row))
        continue; /* the first call after a reset runs no model */
      row->slot = s->slot;
      if (!all_provided (c, row)) {
        /* never in the reference's prompts: a frame whose sample is kept runs as a step of its own */
        run_rows (e, s, rows, capture_at, T);
        PpxLmRow one = *row;
        ppx_lm_batch_step (e->lm, &one, 1);
        ppx_lmgen_finish (&s->gen, &one, out);
        T = 0;
        break;
      }
      if (row->capture)
        capture_at[T] = s->gen.capture->len - c->dim;
      ppx_lmgen_finish (&s->gen, row, out); /* every stream provided: the model's output is not read */
      T++;
    }
    run_rows (e, s, rows, capture_at, T);
    s->lm_row = 0;
    ppx_backend_sync (e->model->be); /* the chunk's time is the lock's; no tick queues behind it */
    note_chunk (&e->clock, T, frames, (g_get_monotonic_time () - t0) / 1000.0, budget);
    ppx_engine_unlock (e);
  }
}
