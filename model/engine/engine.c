/* The batched engine (personaplex.h, docs/engine.md): max_sessions slots of per-session state on the
 * model's backend, and the frame tick that steps many sessions as the rows of one batch: Mimi encode of
 * all rows, the LMGen bookkeeping per session, one LM pass, Mimi decode of all rows. */
#include "engine-internal.h"

#include <math.h>

PpxKvFormat
ppx_engine_resolve_kv (PpxKvFormat f)
{
  return f == PPX_KV_AUTO ? PPX_KV_DEFAULT : f;
}

/* ---- memory ---- */

/* Device bytes of an engine with n slots: LM caches + LM scratch, Mimi state + scratch, PCM/code staging. */
static guint64
engine_bytes (const PpxModel *m, PpxKvFormat kv, int n)
{
  const PpxMimiConfig *mc = &m->cfg.mimi;
  const guint64 staging = (guint64) n * (2 * (guint64) mc->frame_size + mc->num_codebooks) * 4;
  return ppx_lm_batch_bytes (&m->cfg.lm, n, n, kv) + ppx_mimi_batch_bytes (m->mimi, n) + staging;
}

guint64
ppx_model_session_bytes (const PpxModel *m, PpxKvFormat kv)
{
  kv = ppx_engine_resolve_kv (kv);
  return engine_bytes (m, kv, 2) - engine_bytes (m, kv, 1);
}

/* max_sessions <= 0: what fits in PPX_ENGINE_AUTO_FRACTION of the backend's free memory. */
static int
auto_sessions (PpxModel *m, PpxKvFormat kv)
{
  const gboolean cpu = g_strcmp0 (ppx_backend_name (m->be), "cpu") == 0;
  const int cap = cpu ? PPX_ENGINE_AUTO_MAX_CPU : PPX_ENGINE_AUTO_MAX_GPU;
  const guint64 free_bytes = ppx_backend_free_bytes (m->be);
  if (free_bytes == 0)
    return cpu ? PPX_ENGINE_AUTO_MAX_CPU : 1;
  const guint64 per = ppx_model_session_bytes (m, kv), fixed = engine_bytes (m, kv, 1) - per;
  const double budget = (double) free_bytes * PPX_ENGINE_AUTO_FRACTION - (double) fixed;
  const double n = budget > 0 ? floor (budget / (double) per) : 0;
  return (int) CLAMP (n, 1.0, (double) cap);
}

/* ---- lifetime ---- */

void
ppx_engine_params_init (PpxEngineParams *p)
{
  memset (p, 0, sizeof *p);
}

PpxEngine *
ppx_engine_new (PpxModel *model, const PpxEngineParams *params, GError **error)
{
  if (!model || !params) {
    g_set_error (error, PPX_ERROR, PPX_ERROR_INVALID, "ppx_engine_new: no model or no parameters");
    return NULL;
  }
  if (params->kv_format < PPX_KV_AUTO || params->kv_format > PPX_KV_FP8) {
    g_set_error (error, PPX_ERROR, PPX_ERROR_INVALID, "unknown KV cache format %d", (int) params->kv_format);
    return NULL;
  }
  if (params->max_sessions > PPX_ENGINE_MAX_SESSIONS) {
    g_set_error (error, PPX_ERROR, PPX_ERROR_INVALID, "max_sessions = %d: at most %d sessions per engine",
                 params->max_sessions, PPX_ENGINE_MAX_SESSIONS);
    return NULL;
  }
  const PpxConfig *cfg = &model->cfg;
  PpxEngine *e = g_new0 (PpxEngine, 1);
  e->refcount = 1;
  e->model = ppx_model_ref (model);
  e->kv = ppx_engine_resolve_kv (params->kv_format);
  const int n = e->max_sessions = params->max_sessions > 0 ? params->max_sessions : auto_sessions (model, e->kv);
  g_mutex_init (&e->lock);
  g_cond_init (&e->turn);
  e->slots = g_new0 (PpxSession *, n);
  e->active = g_new0 (PpxSession *, n);
  e->rows = g_new0 (PpxLmRow, n);
  e->order = g_new0 (int, n);
  e->host_pcm = g_new (float, (gsize) n * cfg->mimi.frame_size);
  e->host_codes = g_new (int, (gsize) n * cfg->mimi.num_codebooks);
  const gsize fs = cfg->mimi.frame_size;
  gboolean ok = (e->lm = ppx_lm_batch_new (model->lm, n, n, e->kv, error)) &&
                (e->mimi = ppx_mimi_batch_new (model->mimi, n, error)) &&
                (e->pcm_in = ppx_tensor_new (model->be, PPX_TENSOR_F32, n * fs, error)) &&
                (e->pcm_out = ppx_tensor_new (model->be, PPX_TENSOR_F32, n * fs, error)) &&
                (e->codes = ppx_tensor_new (model->be, PPX_TENSOR_I32, (gsize) n * cfg->mimi.num_codebooks, error));
  if (!ok) {
    g_prefix_error (error, "engine of %d sessions (%s KV cache, %.1f MB a session): ", n, ppx_kv_format_name (e->kv),
                    ppx_model_session_bytes (model, e->kv) / 1e6);
    ppx_engine_unref (e);
    return NULL;
  }
  return e;
}

PpxEngine *
ppx_engine_ref (PpxEngine *e)
{
  g_atomic_int_inc (&e->refcount);
  return e;
}

void
ppx_engine_unref (PpxEngine *e)
{
  if (!e || !g_atomic_int_dec_and_test (&e->refcount))
    return;
  ppx_lm_batch_free (e->lm);
  ppx_mimi_batch_free (e->mimi);
  ppx_tensor_free (e->pcm_in);
  ppx_tensor_free (e->pcm_out);
  ppx_tensor_free (e->codes);
  g_free (e->host_pcm);
  g_free (e->host_codes);
  g_free (e->rows);
  g_free (e->order);
  g_free (e->slots);
  g_free (e->active);
  g_mutex_clear (&e->lock);
  g_cond_clear (&e->turn);
  ppx_model_unref (e->model);
  g_free (e);
}

int
ppx_engine_max_sessions (const PpxEngine *e)
{
  return e->max_sessions;
}

int
ppx_engine_active_sessions (const PpxEngine *e)
{
  return g_atomic_int_get (&e->n_active);
}

PpxKvFormat
ppx_engine_kv_format (const PpxEngine *e)
{
  return e->kv;
}

guint64
ppx_engine_session_bytes (const PpxEngine *e)
{
  return ppx_model_session_bytes (e->model, e->kv);
}

guint64
ppx_engine_device_bytes (const PpxEngine *e)
{
  return engine_bytes (e->model, e->kv, e->max_sessions);
}

double
ppx_engine_last_tick_ms (const PpxEngine *e)
{
  return g_atomic_int_get (&e->last_tick_us) / 1000.0;
}

int
ppx_engine_last_batch_size (const PpxEngine *e)
{
  return g_atomic_int_get (&e->last_batch);
}

/* ---- locking, slots and rows ---- */

void
ppx_engine_lock_for_prompt (PpxEngine *e)
{
  g_mutex_lock (&e->lock);
  while (g_atomic_int_get (&e->ticks_waiting) > 0)
    g_cond_wait (&e->turn, &e->lock);
}

void
ppx_engine_unlock (PpxEngine *e)
{
  g_mutex_unlock (&e->lock);
}

static void
lock_for_tick (PpxEngine *e)
{
  g_atomic_int_inc (&e->ticks_waiting);
  g_mutex_lock (&e->lock);
  g_atomic_int_dec_and_test (&e->ticks_waiting);
}

static void
unlock_after_tick (PpxEngine *e)
{
  g_cond_broadcast (&e->turn);
  g_mutex_unlock (&e->lock);
}

gboolean
ppx_engine_claim_slot (PpxEngine *e, PpxSession *s, GError **error)
{
  g_mutex_lock (&e->lock);
  s->slot = -1;
  s->row = -1;
  for (int i = 0; i < e->max_sessions && s->slot < 0; i++) {
    if (!e->slots[i]) {
      e->slots[i] = s;
      s->slot = i;
    }
  }
  g_mutex_unlock (&e->lock);
  if (s->slot < 0) {
    g_set_error (error, PPX_ERROR, PPX_ERROR_LIMIT, "the engine already holds its %d sessions (max_sessions)",
                 e->max_sessions);
    return FALSE;
  }
  return TRUE;
}

void
ppx_engine_activate (PpxEngine *e, PpxSession *s)
{
  g_mutex_lock (&e->lock);
  s->row = e->n_active;
  e->active[s->row] = s;
  ppx_mimi_batch_reset_row (e->mimi, s->row);
  g_atomic_int_set (&e->n_active, e->n_active + 1);
  g_mutex_unlock (&e->lock);
}

void
ppx_engine_reset_codec (PpxEngine *e, PpxSession *s)
{
  g_mutex_lock (&e->lock);
  if (s->row >= 0)
    ppx_mimi_batch_reset_row (e->mimi, s->row);
  g_mutex_unlock (&e->lock);
}

void
ppx_engine_release (PpxEngine *e, PpxSession *s)
{
  g_mutex_lock (&e->lock);
  if (s->row >= 0) {
    const int last = e->n_active - 1;
    if (s->row != last) { /* keep the active rows compact: the last one moves into the hole */
      ppx_mimi_batch_move_row (e->mimi, last, s->row);
      e->active[s->row] = e->active[last];
      e->active[s->row]->row = s->row;
    }
    e->active[last] = NULL;
    g_atomic_int_set (&e->n_active, last);
    s->row = -1;
  }
  if (s->slot >= 0 && e->slots[s->slot] == s)
    e->slots[s->slot] = NULL;
  s->slot = -1;
  g_mutex_unlock (&e->lock);
}

gboolean
ppx_engine_lm_call (PpxEngine *e, PpxSession *s, const int *user, const int *agent, int text, const float *embedding,
                    int *out)
{
  PpxLmRow *row = &e->rows[0];
  if (!ppx_lmgen_prepare (&s->gen, user, agent, text, embedding, &s->smp, row))
    return FALSE;
  row->slot = s->slot;
  ppx_lm_batch_step (e->lm, row, 1);
  s->lm_row = 0;
  return ppx_lmgen_finish (&s->gen, row, out);
}

/* ---- the tick ---- */

static gboolean
check_tick (PpxEngine *e, PpxSession *const *sessions, int n, const float *const *in, float *const *out,
            GError **error)
{
  if (n < 0 || n > e->max_sessions || (n > 0 && (!sessions || !in || !out))) {
    g_set_error (error, PPX_ERROR, PPX_ERROR_INVALID, "ppx_engine_step: %d sessions (at most %d), arrays %s", n,
                 e->max_sessions, n > 0 && (!sessions || !in || !out) ? "missing" : "given");
    return FALSE;
  }
  for (int i = 0; i < n; i++) {
    const PpxSession *s = sessions[i];
    if (!s || s->engine != e) {
      g_set_error (error, PPX_ERROR, PPX_ERROR_INVALID, "ppx_engine_step: session %d %s", i,
                   s ? "belongs to another engine" : "is NULL");
      return FALSE;
    }
    if (s->row < 0) {
      g_set_error (error, PPX_ERROR, PPX_ERROR_INVALID, "ppx_engine_step: session %d is not ready (prompts running)",
                   i);
      return FALSE;
    }
    if (!in[i] || !out[i]) {
      g_set_error (error, PPX_ERROR, PPX_ERROR_INVALID, "ppx_engine_step: session %d has no %s buffer", i,
                   in[i] ? "output" : "input");
      return FALSE;
    }
    for (int j = 0; j < i; j++) {
      if (sessions[j] == s) {
        g_set_error (error, PPX_ERROR, PPX_ERROR_INVALID, "ppx_engine_step: session %d is also session %d", i, j);
        return FALSE;
      }
    }
  }
  return TRUE;
}

/* e->order = the indices of sessions sorted by Mimi row (insertion sort: a caller that keeps its order
 * from tick to tick hands them in sorted already). */
static void
sort_by_row (PpxEngine *e, PpxSession *const *sessions, int n)
{
  for (int i = 0; i < n; i++) {
    int j = i;
    while (j > 0 && sessions[e->order[j - 1]]->row > sessions[i]->row) {
      e->order[j] = e->order[j - 1];
      j--;
    }
    e->order[j] = i;
  }
}

/* Mimi encode (decode = FALSE) or decode of the tick's rows, one batched call per run of consecutive
 * Mimi rows (all of them when every active session is in the tick). */
static void
codec_runs (PpxEngine *e, PpxSession *const *sessions, int n, gboolean decode)
{
  const int fs = e->model->cfg.mimi.frame_size, nq = e->model->cfg.mimi.num_codebooks;
  for (int b0 = 0; b0 < n;) {
    const int row0 = sessions[e->order[b0]]->row;
    int len = 1;
    while (b0 + len < n && sessions[e->order[b0 + len]]->row == row0 + len)
      len++;
    PpxTensor *pcm = ppx_tensor_view (decode ? e->pcm_out : e->pcm_in, (gsize) b0 * fs, (gsize) len * fs);
    PpxTensor *codes = ppx_tensor_view (e->codes, (gsize) b0 * nq, (gsize) len * nq);
    if (decode)
      ppx_mimi_batch_decode (e->mimi, row0, len, codes, 0, nq, pcm);
    else
      ppx_mimi_batch_encode (e->mimi, row0, len, pcm, codes, 0, nq);
    ppx_tensor_free (pcm);
    ppx_tensor_free (codes);
    b0 += len;
  }
}

/* Mimi codes of the reference's "zero" agent frame (spec §3.10): what a session that yields no frame
 * decodes (never in practice: the system prompts are longer than the output lag). */
static const int silence_tokens[8] = {948, 243, 1178, 546, 1736, 1030, 1978, 2008};

gboolean
ppx_engine_step (PpxEngine *e, PpxSession *const *sessions, int n, const float *const *in, float *const *out,
                 PpxFrameResult *res, GError **error)
{
  if (!e) {
    g_set_error (error, PPX_ERROR, PPX_ERROR_INVALID, "ppx_engine_step: no engine");
    return FALSE;
  }
  const PpxConfig *cfg = &e->model->cfg;
  const int fs = cfg->mimi.frame_size, nq = cfg->mimi.num_codebooks, ns = cfg->lm.n_streams;
  gint64 t0 = g_get_monotonic_time ();
  lock_for_tick (e);
  if (!check_tick (e, sessions, n, in, out, error)) {
    unlock_after_tick (e);
    return FALSE;
  }
  if (n == 0) {
    unlock_after_tick (e);
    return TRUE;
  }
  sort_by_row (e, sessions, n);

  /* Mimi encode of every row */
  for (int b = 0; b < n; b++) {
    const float *src = in[e->order[b]];
    float *dst = e->host_pcm + (gsize) b * fs;
    for (int i = 0; i < fs; i++)
      dst[i] = isfinite (src[i]) ? src[i] : 0.0f; /* NaN/Inf: silence, never poison the state */
  }
  ppx_tensor_upload (e->pcm_in, 0, e->host_pcm, (gsize) n * fs);
  codec_runs (e, sessions, n, FALSE);
  g_autofree int32_t *codes = g_new (int32_t, (gsize) n * nq);
  ppx_tensor_download (e->codes, 0, codes, (gsize) n * nq);

  /* LMGen bookkeeping per session, one LM pass for every row that runs the model */
  g_autofree int *lm_of = g_new (int, n), *user = g_new (int, nq);
  int n_lm = 0;
  for (int b = 0; b < n; b++) {
    PpxSession *s = sessions[e->order[b]];
    for (int q = 0; q < nq; q++)
      user[q] = codes[b * nq + q];
    lm_of[b] = -1;
    if (ppx_lmgen_prepare (&s->gen, user, NULL, -1, NULL, &s->smp, &e->rows[n_lm])) {
      e->rows[n_lm].slot = s->slot;
      s->lm_row = n_lm;
      lm_of[b] = n_lm++;
    }
  }
  if (n_lm > 0)
    ppx_lm_batch_step (e->lm, e->rows, n_lm);
  g_autofree int *tokens = g_new (int, (gsize) n * PPX_MAX_STREAMS);
  gboolean all_framed = TRUE;
  for (int b = 0; b < n; b++) {
    PpxSession *s = sessions[e->order[b]];
    int *t = tokens + (gsize) b * PPX_MAX_STREAMS;
    if (lm_of[b] < 0 || !ppx_lmgen_finish (&s->gen, &e->rows[lm_of[b]], t)) {
      all_framed = FALSE;
      for (int k = 0; k < ns; k++)
        t[k] = k >= 1 && k <= nq ? silence_tokens[(k - 1) % 8] : TEXT_PAD;
    }
    for (int q = 0; q < nq; q++)
      e->host_codes[b * nq + q] = t[1 + q];
  }

  /* Mimi decode of every row's agent codes */
  ppx_tensor_upload (e->codes, 0, e->host_codes, (gsize) n * nq);
  codec_runs (e, sessions, n, TRUE);
  ppx_tensor_download (e->pcm_out, 0, e->host_pcm, (gsize) n * fs);
  const double ms = (g_get_monotonic_time () - t0) / 1000.0;
  for (int b = 0; b < n; b++) {
    const int i = e->order[b];
    PpxSession *s = sessions[i];
    const int *t = tokens + (gsize) b * PPX_MAX_STREAMS;
    memcpy (out[i], e->host_pcm + (gsize) b * fs, fs * sizeof (float));
    g_free (s->text);
    s->text = ppx_model_token_text (e->model, t[0]);
    s->frames++;
    if (res) {
      for (int k = 0; k < ns; k++)
        res[i].tokens[k] = t[k];
      res[i].text = s->text;
      res[i].step_ms = ms;
    }
  }
  g_atomic_int_set (&e->last_tick_us, (gint) MIN ((g_get_monotonic_time () - t0), G_MAXINT));
  g_atomic_int_set (&e->last_batch, n);
  unlock_after_tick (e);
  if (!all_framed) {
    g_set_error (error, PPX_ERROR, PPX_ERROR_INVALID, "the model produced no frame (prompt phase too short)");
    return FALSE;
  }
  return TRUE;
}
