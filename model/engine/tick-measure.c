/* ppx_engine_measure_tick (personaplex.h): what a tick of n sessions at full context costs, measured on the
 * engine itself (docs/engine.md, "Measuring the tick"); the server's admission starts from it. */
#include "engine-internal.h"
#include "personaplex-internal.h"

#define WARMUP_TICKS 2

/* The session's LM at the end of the context: its position moved ahead by whole cache columns (as
 * personaplex-bench --context does), so that attention reads every entry of the KV ring from now on. */
static void
to_full_context (PpxSession *s, int context)
{
  PpxLmGen *g = ppx_session_lmgen (s);
  const gint64 step = (gint64) context / PPX_LMGEN_COLS * PPX_LMGEN_COLS;
  if (step > 0 && g->offset > 0)
    g->offset += step;
}

gboolean
ppx_engine_measure_tick (PpxEngine *e, int rows, int ticks, double *ms, int *padded_rows, GError **error)
{
  if (!e || rows < 1 || ticks < 1 || !ms) {
    g_set_error (error, PPX_ERROR, PPX_ERROR_INVALID, "ppx_engine_measure_tick: %d rows, %d ticks%s", rows, ticks,
                 ms ? "" : ", no output");
    return FALSE;
  }
  const int free_slots = e->max_sessions - ppx_engine_active_sessions (e);
  if (rows > free_slots) {
    g_set_error (error, PPX_ERROR, PPX_ERROR_LIMIT, "measuring a tick of %d sessions: %d slot(s) free of %d", rows,
                 MAX (free_slots, 0), e->max_sessions);
    return FALSE;
  }
  const int fs = ppx_model_frame_size (e->model);
  PpxSession **sessions = g_new0 (PpxSession *, rows);
  float *in = g_new0 (float, (gsize) rows * fs), *out = g_new (float, (gsize) rows * fs);
  const float **ins = g_new (const float *, rows);
  float **outs = g_new (float *, rows);
  PpxSessionParams sp;
  ppx_session_params_init (&sp);
  sp.greedy = TRUE;
  gboolean ok = TRUE;
  for (int i = 0; ok && i < rows; i++) {
    sp.seed = (guint64) i;
    ok = (sessions[i] = ppx_engine_session_new (e, &sp, error)) != NULL;
    if (ok)
      to_full_context (sessions[i], e->model->cfg.lm.context);
    ins[i] = in + (gsize) i * fs;
    outs[i] = out + (gsize) i * fs;
  }
  g_atomic_int_inc (&e->measuring);
  for (int t = 0; ok && t < WARMUP_TICKS + ticks; t++) {
    /* a quiet room: a little noise, not digital silence */
    for (gsize k = 0; k < (gsize) rows * fs; k++)
      in[k] = (float) (((guint32) (k * 2654435761u + (guint32) t * 40503u) >> 8) / 16777216.0 - 0.5) * 0.01f;
    const gint64 t0 = g_get_monotonic_time ();
    ok = ppx_engine_step (e, sessions, rows, ins, outs, NULL, error);
    if (ok && t >= WARMUP_TICKS)
      ms[t - WARMUP_TICKS] = (g_get_monotonic_time () - t0) / 1000.0;
  }
  if (ok && padded_rows) {
    g_mutex_lock (&e->lock);
    *padded_rows = e->stats.last_rows; /* the last tick's: padded when it was bucketed */
    g_mutex_unlock (&e->lock);
  }
  g_atomic_int_dec_and_test (&e->measuring);
  for (int i = 0; i < rows; i++)
    ppx_session_free (sessions[i]);
  g_free (sessions);
  g_free (in);
  g_free (out);
  g_free (ins);
  g_free (outs);
  if (!ok)
    g_prefix_error (error, "measuring a tick of %d sessions: ", rows);
  return ok;
}
