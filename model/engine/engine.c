/* The batched engine (personaplex.h, docs/engine.md): max_sessions slots of per-session state on the
 * model's backend, and the frame tick that steps many sessions as the rows of one batch: one LM call
 * (ppx_lm_batch_run_tick: LMGen prepare, one LM pass, LMGen finish, on the device) with the engine's Mimi
 * encode and decode of all rows as its codec stage, with no host round trip inside (one upload of PCM
 * before, one download of PCM + tokens after). A session takes its Mimi row at its first tick. On a backend
 * that records graphs a tick of every session holding a row is offered padding to a batch-size bucket, and
 * the LM replays a padded tick from one graph per bucket ("The GPU tick" in docs/engine.md). */
#include "engine-internal.h"

#include <math.h>

/* ---- memory ---- */

/* Device bytes of an engine with n slots: LM caches, LMGen states + LM scratch, Mimi state + scratch,
 * PCM/code staging, and the prompt prefill's scratch (chunks of up to prompt_chunk frames). */
static guint64
engine_bytes (const PpxModel *m, PpxTensorType kv, int n, int prompt_chunk)
{
  const PpxMimiConfig *mc = &m->cfg.mimi;
  const guint64 staging = (guint64) n * (2 * (guint64) mc->frame_size + mc->num_codebooks + PPX_LM_TICK_OUT) * 4;
  const guint64 prefill =
    ppx_lm_prefill_rows_for (&m->cfg.lm, prompt_chunk) > 1 ? ppx_lm_prefill_bytes (&m->cfg.lm, prompt_chunk) : 0;
  return ppx_lm_batch_bytes (&m->cfg.lm, n, n, kv) + ppx_mimi_batch_bytes (m->mimi, n) + staging + prefill;
}

guint64
ppx_model_session_bytes (const PpxModel *m, PpxKvFormat kv)
{
  const PpxTensorType type = ppx_kv_storage (kv);
  return engine_bytes (m, type, 2, 1) - engine_bytes (m, type, 1, 1);
}

/* max_sessions <= 0: what fits in PPX_ENGINE_AUTO_FRACTION of the backend's free memory. */
static int
auto_sessions (PpxModel *m, PpxKvFormat kv, int prompt_chunk)
{
  const gboolean cpu = ppx_backend_kind (m->be) == PPX_BACKEND_CPU;
  const int cap = cpu ? PPX_ENGINE_AUTO_MAX_CPU : PPX_ENGINE_AUTO_MAX_GPU;
  const guint64 free_bytes = ppx_backend_free_bytes (m->be);
  if (free_bytes == 0)
    return cpu ? PPX_ENGINE_AUTO_MAX_CPU : 1;
  const guint64 per = ppx_model_session_bytes (m, kv);
  const guint64 fixed = engine_bytes (m, ppx_kv_storage (kv), 1, prompt_chunk) - per;
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
  e->kv = ppx_kv_format_resolve (params->kv_format);
  e->kv_storage = ppx_kv_storage (e->kv);
  e->prompt_chunk = ppx_engine_prompt_chunk_for (params);
  e->voice_snapshots = params->voice_snapshots < 0 ? 0
                       : params->voice_snapshots > 0 ? params->voice_snapshots : PPX_VOICE_SNAPSHOTS_DEFAULT;
  const int n = e->max_sessions =
    params->max_sessions > 0 ? params->max_sessions : auto_sessions (model, e->kv, e->prompt_chunk);
  g_mutex_init (&e->lock);
  g_cond_init (&e->turn);
  e->times = ppx_tick_times_new (1000.0 * cfg->mimi.frame_size / ppx_model_sample_rate (model));
  e->slots = g_new0 (PpxSession *, n);
  e->row_owner = g_new0 (PpxSession *, n);
  e->tick_rows = g_new0 (PpxLmTickRow, n);
  e->order = g_new0 (int, n);
  e->host_pcm = g_new0 (float, (gsize) n * cfg->mimi.frame_size);
  e->tick_tokens = g_malloc0_n (n, sizeof *e->tick_tokens);
  const gsize fs = cfg->mimi.frame_size;
  gboolean ok = (e->lm = ppx_lm_batch_new (model->lm, n, n, e->kv_storage, error)) &&
                (e->mimi = ppx_mimi_batch_new (model->mimi, n, error)) &&
                (e->pcm_in = ppx_tensor_new (model->be, PPX_TENSOR_F32, n * fs, error)) &&
                (e->pcm_out = ppx_tensor_new (model->be, PPX_TENSOR_F32, n * fs, error)) &&
                (e->codes = ppx_tensor_new (model->be, PPX_TENSOR_I32, (gsize) n * cfg->mimi.num_codebooks, error)) &&
                (e->tick_out = ppx_tensor_new (model->be, PPX_TENSOR_I32, (gsize) n * PPX_LM_TICK_OUT, error)) &&
                ppx_engine_prompt_init (e, error);
  if (!ok) {
    g_prefix_error (error, "engine of %d sessions (%s KV cache, %.1f MB a session): ", n, ppx_kv_format_name (e->kv),
                    ppx_model_session_bytes (model, e->kv) / 1e6);
    ppx_engine_unref (e);
    return NULL;
  }
  /* a bucketed tick runs the depformer up to the last stream the conversation samples (the user's
   * streams are always provided) */
  const int nq = cfg->lm.n_q / 2;
  for (int k = 1; k <= cfg->lm.dep_q; k++)
    if (k < 1 + nq || k > 2 * nq)
      e->graph_steps = k;
  e->bucketed = ppx_backend_supports_graphs (model->be);
  e->graphs = e->bucketed && !params->no_cuda_graphs && g_strcmp0 (g_getenv ("PPX_CUDA_GRAPHS"), "0") != 0;
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
  ppx_engine_voice_snapshots_free (e);
  ppx_lm_prefill_free (e->prefill);
  ppx_lm_batch_free (e->lm);
  ppx_mimi_batch_free (e->mimi);
  ppx_tensor_free (e->pcm_in);
  ppx_tensor_free (e->pcm_out);
  ppx_tensor_free (e->codes);
  ppx_tensor_free (e->tick_out);
  g_free (e->host_pcm);
  g_free (e->tick_tokens);
  g_free (e->tick_rows);
  g_free (e->order);
  g_free (e->slots);
  g_free (e->row_owner);
  g_mutex_clear (&e->lock);
  g_cond_clear (&e->turn);
  ppx_tick_times_free (e->times);
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
  return g_atomic_int_get (&e->n_ready);
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
  return engine_bytes (e->model, e->kv_storage, e->max_sessions, e->prefill ? ppx_lm_prefill_max_rows (e->prefill) : 1);
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

void
ppx_engine_force_buckets (PpxEngine *e, gboolean on)
{
  g_mutex_lock (&e->lock);
  e->bucketed = on;
  e->graphs = on && e->graphs;
  g_mutex_unlock (&e->lock);
}

void
ppx_engine_tick_times (PpxEngine *e, PpxEngineTickTimes *times)
{
  ppx_tick_times_get (e->times, times);
}

void
ppx_engine_tick_stats (PpxEngine *e, PpxEngineTickStats *st)
{
  g_mutex_lock (&e->lock);
  *st = e->stats;
  ppx_tick_times_get (e->times, &st->times);
  st->graphs = ppx_lm_batch_graphs (e->lm, &st->graph_nodes);
  g_mutex_unlock (&e->lock);
}

/* ---- slots and rows (the lock: engine-lock.c) ---- */

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
  if (!s->ready) {
    s->ready = TRUE;
    g_atomic_int_set (&e->n_ready, e->n_ready + 1);
  }
  g_mutex_unlock (&e->lock);
}

/* At its first tick a session takes the next Mimi row, with fresh codec state: the rows held stay compact
 * (0..n_rows-1), and a ready session that never ticks (a server's model keeper) holds none, so a tick of all
 * the others is still a tick of every row (set_rows: padded, graphed). Call with the lock held. */
static void
take_rows (PpxEngine *e, PpxSession *const *sessions, int n)
{
  for (int i = 0; i < n; i++) {
    PpxSession *s = sessions[i];
    if (s->row >= 0)
      continue;
    s->row = e->n_rows++;
    e->row_owner[s->row] = s;
    ppx_mimi_batch_reset_row (e->mimi, s->row);
  }
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
    const int last = e->n_rows - 1;
    if (s->row != last) { /* keep the rows held compact: the last one moves into the hole */
      ppx_mimi_batch_move_row (e->mimi, last, s->row);
      e->row_owner[s->row] = e->row_owner[last];
      e->row_owner[s->row]->row = s->row;
    }
    e->row_owner[last] = NULL;
    e->n_rows = last;
    s->row = -1;
  }
  if (s->ready) {
    s->ready = FALSE;
    g_atomic_int_set (&e->n_ready, e->n_ready - 1);
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
  PpxLmRow *row = &e->prompt_row;
  if (!ppx_lmgen_prepare (&s->gen, user, agent, text, embedding, &s->smp, row))
    return FALSE;
  row->slot = s->slot;
  ppx_lm_batch_step (e->lm, row, 1);
  s->lm_row = 0;
  return ppx_lmgen_finish (&s->gen, row, out);
}

/* ---- the tick ---- */

int
ppx_engine_bucket_rows (int n, int max_rows)
{
  if (n <= 0)
    return n;
  int B = 1;
  while (B < n && B < PPX_ENGINE_BUCKET_POW2_MAX)
    B *= 2;
  if (B < n)
    B = (n + PPX_ENGINE_BUCKET_STEP - 1) / PPX_ENGINE_BUCKET_STEP * PPX_ENGINE_BUCKET_STEP;
  return MIN (B, max_rows);
}

/* The bucket of a full tick of n rows on this engine. */
static int
bucket_rows (const PpxEngine *e, int n)
{
  return ppx_engine_bucket_rows (n, e->max_sessions);
}

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
    if (!s->ready) {
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

/* Mimi encode (decode = FALSE: pcm_in -> codes) or decode (tick_out's agent codes -> pcm_out) of the
 * tick's rows, one batched call per run of consecutive Mimi rows (all of them when every session holding a
 * row is in the tick). */
static void
codec_runs (PpxEngine *e, PpxSession *const *sessions, int n, gboolean decode)
{
  const int fs = e->model->cfg.mimi.frame_size, nq = e->model->cfg.mimi.num_codebooks;
  const int stride = decode ? PPX_LM_TICK_OUT : nq;
  for (int b0 = 0; b0 < n;) {
    const int row0 = sessions[e->order[b0]]->row;
    int len = 1;
    while (b0 + len < n && sessions[e->order[b0 + len]]->row == row0 + len)
      len++;
    PpxTensor *pcm = ppx_tensor_view (decode ? e->pcm_out : e->pcm_in, (gsize) b0 * fs, (gsize) len * fs);
    PpxTensor *codes = ppx_tensor_view (decode ? e->tick_out : e->codes, (gsize) b0 * stride, (gsize) len * stride);
    if (decode)
      ppx_mimi_batch_decode (e->mimi, row0, len, codes, 1, stride, pcm); /* agent codes: tokens 1..nq */
    else
      ppx_mimi_batch_encode (e->mimi, row0, len, pcm, codes, 0, stride);
    ppx_tensor_free (pcm);
    ppx_tensor_free (codes);
    b0 += len;
  }
}

/* The tick's LM rows: rows 0..n-1 are its sessions in Mimi row order. A tick of every session holding a row
 * (then rows 0..n-1 are Mimi rows 0..n-1) is offered padding to its bucket, its extra rows n..B-1 on free slots
 * (and free Mimi rows) as far as they go; returns how many padding rows are offered (0 or more), -1 for none. */
static int
set_rows (PpxEngine *e, PpxSession *const *sessions, int n, gboolean all_started)
{
  for (int b = 0; b < n; b++) {
    PpxSession *s = sessions[e->order[b]];
    e->tick_rows[b] = (PpxLmTickRow){.slot = s->slot, .gen = &s->gen, .smp = &s->smp};
  }
  if (!e->bucketed || n != e->n_rows || !all_started)
    return -1;
  const int want = bucket_rows (e, n);
  int got = 0;
  for (int i = 0; i < e->max_sessions && n + got < want; i++)
    if (!e->slots[i])
      e->tick_rows[n + got++] = (PpxLmTickRow){.slot = i};
  /* Fewer than the bucket when slots are short: a session in its prompts, or a ready one that never ticks (the
   * server's keeper: at 65..80 calls on 81 slots the bucket is 81 and the keeper holds the 81st slot), holds a
   * slot the padding would need. The tick is still padded as far as the free slots go and graphed: one graph
   * per row count. */
  return got;
}

static int
free_slots (const PpxEngine *e)
{
  int k = 0;
  for (int i = 0; i < e->max_sessions; i++)
    k += !e->slots[i];
  return k;
}

/* The tick's codec stage (PpxLmTickStage): the sessions, in e->order. */
typedef struct {
  PpxEngine *e;
  PpxSession *const *sessions;
  int n;
} TickCodec;

/* A padded tick's rows 0..M-1 are Mimi rows 0..M-1: one batched call (graph-recordable; the padding rows are
 * marked started, so no replicate padding step); otherwise one per run of consecutive rows. */
static void
tick_encode (void *data, const PpxLmTickPlan *plan)
{
  TickCodec *tc = data;
  PpxEngine *e = tc->e;
  if (!plan->padded) {
    codec_runs (e, tc->sessions, tc->n, FALSE);
    return;
  }
  for (int r = tc->n; r < plan->rows; r++)
    ppx_mimi_batch_mark_started (e->mimi, r);
  ppx_mimi_batch_encode (e->mimi, 0, plan->rows, e->pcm_in, e->codes, 0, e->model->cfg.mimi.num_codebooks);
}

static void
tick_decode (void *data, const PpxLmTickPlan *plan)
{
  TickCodec *tc = data;
  PpxEngine *e = tc->e;
  if (plan->padded)
    ppx_mimi_batch_decode (e->mimi, 0, plan->rows, e->tick_out, 1, PPX_LM_TICK_OUT, e->pcm_out);
  else
    codec_runs (e, tc->sessions, tc->n, TRUE);
}

int
ppx_engine_tick_rows (const PpxEngine *e, int n)
{
  if (!e || !e->bucketed || n <= 0)
    return n;
  g_mutex_lock ((GMutex *) &e->lock);
  const int rows = MIN (bucket_rows (e, n), n + free_slots (e));
  g_mutex_unlock ((GMutex *) &e->lock);
  return rows;
}

gboolean
ppx_engine_step (PpxEngine *e, PpxSession *const *sessions, int n, const float *const *in, float *const *out,
                 PpxFrameResult *res, GError **error)
{
  if (!e) {
    g_set_error (error, PPX_ERROR, PPX_ERROR_INVALID, "ppx_engine_step: no engine");
    return FALSE;
  }
  const PpxConfig *cfg = &e->model->cfg;
  const int fs = cfg->mimi.frame_size, ns = cfg->lm.n_streams;
  gint64 t0 = g_get_monotonic_time ();
  ppx_engine_lock_for_tick (e);
  const gint64 t_lock = g_get_monotonic_time ();
  if (!check_tick (e, sessions, n, in, out, error)) {
    ppx_engine_unlock_after_tick (e);
    return FALSE;
  }
  if (n == 0) {
    ppx_engine_unlock_after_tick (e);
    return TRUE;
  }
  take_rows (e, sessions, n);
  sort_by_row (e, sessions, n);
  PpxBackend *be = e->model->be;
  PpxBackendCounters c0, c1;
  ppx_backend_counters (be, &c0);

  for (int b = 0; b < n; b++) {
    const float *src = in[e->order[b]];
    float *dst = e->host_pcm + (gsize) b * fs;
    for (int i = 0; i < fs; i++)
      dst[i] = isfinite (src[i]) ? src[i] : 0.0f; /* NaN/Inf: silence, never poison the state */
  }
  ppx_tensor_upload (e->pcm_in, 0, e->host_pcm, (gsize) n * fs);

  /* one LM call: its rows (the padding to the bucket's graph offered to a tick of every row), the codec as
   * its stage */
  gboolean all_started = TRUE;
  for (int b = 0; b < n; b++)
    all_started &= ppx_mimi_batch_row_started (e->mimi, sessions[e->order[b]]->row);
  TickCodec codec = {e, sessions, n};
  const PpxLmTick tick = {.rows = e->tick_rows, .n = n, .n_pad = set_rows (e, sessions, n, all_started),
                          .pad_steps = e->graph_steps, .graphs = e->graphs, .codes = e->codes, .code_off = 0,
                          .code_stride = cfg->mimi.num_codebooks, .out = e->tick_out,
                          .stage = {tick_encode, tick_decode, &codec}};
  PpxLmTickPlan plan;
  if (!ppx_lm_batch_run_tick (e->lm, &tick, e->tick_tokens, &plan)) {
    g_set_error (error, PPX_ERROR, PPX_ERROR_INVALID, "ppx_engine_step: session %d is still inside the model's "
                 "output lag (prompt phase too short)", e->order[plan.late]);
    ppx_engine_unlock_after_tick (e);
    return FALSE;
  }
  ppx_tensor_download (e->pcm_out, 0, e->host_pcm, (gsize) n * fs);
  ppx_backend_counters (be, &c1);

  ppx_tick_times_debug_delay (e->times); /* PPX_DEBUG_TICK_DELAY: a slower tick, for tests */
  const double ms = (g_get_monotonic_time () - t0) / 1000.0;
  for (int b = 0; b < n; b++) {
    const int i = e->order[b];
    PpxSession *s = sessions[i];
    const int *t = e->tick_tokens[b];
    s->lm_row = b;
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
  e->stats.ticks++;
  e->stats.graph_ticks += plan.graphed;
  e->stats.padded_ticks += plan.padded;
  e->stats.last_rows = plan.rows;
  e->stats.last_ops = c1.n_ops - c0.n_ops;
  e->stats.last_uploads = c1.n_uploads - c0.n_uploads;
  e->stats.last_downloads = c1.n_downloads - c0.n_downloads;
  const gint64 tick_us = g_atomic_int_get (&e->measuring) ? g_get_monotonic_time () - t0
                                                          : ppx_tick_times_add (e->times, t0);
  g_atomic_int_set (&e->last_tick_us, (gint) MIN (tick_us, G_MAXINT));
  g_atomic_int_set (&e->last_batch, n);
  ppx_engine_note_tick (e, t0, t_lock, g_get_monotonic_time ());
  ppx_engine_unlock_after_tick (e);
  return TRUE;
}
