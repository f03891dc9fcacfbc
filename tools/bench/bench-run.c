#include "bench-run.h"

#include "lm.h"
#include "lmgen.h"
#include "personaplex-internal.h"
#include "mimi.h"
#include "safetensors.h"

#include <math.h>

#define TEXT_PAD 3

/* --context: the LM position a session's generator is put at (a multiple of the cache's columns). */
void
bench_fill_context (PpxLmGen *g, gint64 context)
{
  const gint64 step = context / PPX_LMGEN_COLS * PPX_LMGEN_COLS;
  if (step > 0 && g->offset > 0)
    g->offset += step;
}

PpxBackend *
bench_backend_new (PpxBackendKind kind, int threads, int device, GError **error)
{
  if (kind == PPX_BACKEND_CUDA || (kind == PPX_BACKEND_AUTO && ppx_backend_cuda_available (NULL)))
    return ppx_backend_cuda_new (device, error);
  return ppx_backend_cpu_new (threads, error);
}

char *
bench_device_name (const PpxBackend *be)
{
  return g_strdup (ppx_backend_device_name (be));
}

/* Speech-like test audio: a gliding voiced tone (5 harmonics) under a 4 Hz syllable envelope plus a
 * little noise; each session gets its own pitch. */
void
bench_test_signal (int session, gint64 frame, int n, int sample_rate, float *out)
{
  for (int i = 0; i < n; i++) {
    double t = (double) (frame * n + i) / sample_rate;
    double f0 = 110.0 + 15.0 * session + 30.0 * sin (2 * G_PI * 0.3 * t);
    double env = 0.5 + 0.5 * sin (2 * G_PI * 4.0 * t);
    double v = 0;
    for (int h = 1; h <= 5; h++)
      v += sin (2 * G_PI * f0 * h * t) / h;
    guint32 x = (guint32) (frame * n + i) * 2654435761u + (guint32) session * 40503u;
    double noise = (double) (x >> 8) / 16777216.0 - 0.5;
    out[i] = (float) (0.15 * env * v + 0.01 * noise);
  }
}

static void
phase_begin (BenchReport *r)
{
  r->peak_per_phase = bench_rss_peak_reset ();
}

static void
phase_end (BenchMemory *m)
{
  m->rss_bytes = bench_rss_bytes ();
  m->peak_rss_bytes = bench_rss_peak_bytes ();
}

/* ---- Mimi ---- */

typedef struct {
  PpxBackend *be;
  PpxSafetensors *st;
  PpxMimi *mimi;
  PpxMimiBatch **batches; /* one of B rows, or (sequential) B of one row */
  int n_batches;
} MimiPhase;

static void
mimi_phase_clear (MimiPhase *p)
{
  for (int i = 0; p->batches && i < p->n_batches; i++)
    ppx_mimi_batch_free (p->batches[i]);
  g_free (p->batches);
  ppx_mimi_free (p->mimi);
  if (p->st)
    ppx_st_close (p->st);
  if (p->be)
    ppx_backend_free (p->be);
}

/* One batched Mimi encode (decode: FALSE) recorded as a graph; a recording whose ops had to grow scratch
 * memory fails once and is made again (as the engine does). NULL if it cannot be recorded. */
static PpxGraph *
record_mimi (PpxBackend *be, PpxMimiBatch *b, gboolean encode, int B, PpxTensor *pcm, PpxTensor *codes,
             PpxTensor *out, int nq)
{
  for (int attempt = 0; attempt < 3; attempt++) {
    g_autoptr (GError) err = NULL;
    if (!ppx_backend_graph_begin (be, &err))
      return NULL;
    if (encode)
      ppx_mimi_batch_encode (b, 0, B, pcm, codes, 0, nq);
    else
      ppx_mimi_batch_decode (b, 0, B, codes, 0, nq, out);
    PpxGraph *g = ppx_backend_graph_end (be, &err);
    if (g)
      return g;
  }
  return NULL;
}

gboolean
bench_run_mimi (const BenchSetup *s, BenchReport *r, GError **error)
{
  const PpxMimiConfig *mc = &s->cfg.mimi;
  const int fs = mc->frame_size, nq = mc->num_codebooks, B = s->batch;
  MimiPhase p = {0};
  phase_begin (r);
  double t0 = bench_now_ms ();
  gboolean ok = (p.be = bench_backend_new (s->backend, s->threads, s->device, error)) &&
                (p.st = ppx_st_open (s->mimi_path, error)) && (p.mimi = ppx_mimi_load (p.be, mc, p.st, error));
  if (!ok) {
    mimi_phase_clear (&p);
    return FALSE;
  }
  bench_report_add_load (r, "mimi", "open + load the Mimi checkpoint", bench_now_ms () - t0);
  BenchMemory *mem = bench_report_add_memory (r, "mimi");
  mem->weight_bytes = ppx_mimi_weight_bytes (p.mimi);
  guint64 before = ppx_backend_allocated_bytes (p.be);
  p.n_batches = s->sequential ? B : 1;
  p.batches = g_new0 (PpxMimiBatch *, p.n_batches);
  for (int i = 0; ok && i < p.n_batches; i++)
    ok = (p.batches[i] = ppx_mimi_batch_new (p.mimi, s->sequential ? 1 : B, error)) != NULL;
  PpxTensor *pcm_t = NULL, *codes_t = NULL, *out_t = NULL;
  ok = ok && (pcm_t = ppx_tensor_new (p.be, PPX_TENSOR_F32, (gsize) B * fs, error)) &&
       (out_t = ppx_tensor_new (p.be, PPX_TENSOR_F32, (gsize) B * fs, error)) &&
       (codes_t = ppx_tensor_new (p.be, PPX_TENSOR_I32, (gsize) B * nq, error));
  if (!ok) {
    ppx_tensor_free (pcm_t);
    ppx_tensor_free (out_t);
    mimi_phase_clear (&p);
    return FALSE;
  }
  mem->backend_bytes = ppx_backend_allocated_bytes (p.be);
  mem->state_bytes = (mem->backend_bytes - before) / B;
  mem->state_known = TRUE;

  float *pcm = g_new (float, (gsize) B * fs), *out = g_new (float, (gsize) B * fs);
  int32_t *codes = g_new (int32_t, (gsize) B * nq);
  double *enc = g_new (double, s->frames), *dec = g_new (double, s->frames);
  for (int f = 0; f < s->warmup + s->frames; f++) {
    for (int i = 0; i < B; i++)
      bench_test_signal (i, f, fs, mc->sample_rate, pcm + (gsize) i * fs);
    /* the host transfers are part of the measured time, as in a session */
    double a = bench_now_ms ();
    ppx_tensor_upload (pcm_t, 0, pcm, (gsize) B * fs);
    if (s->sequential) {
      for (int i = 0; i < B; i++) {
        PpxTensor *x = ppx_tensor_view (pcm_t, (gsize) i * fs, fs), *c = ppx_tensor_view (codes_t, (gsize) i * nq, nq);
        ppx_mimi_batch_encode (p.batches[i], 0, 1, x, c, 0, nq);
        ppx_tensor_free (x);
        ppx_tensor_free (c);
      }
    } else {
      ppx_mimi_batch_encode (p.batches[0], 0, B, pcm_t, codes_t, 0, nq);
    }
    ppx_tensor_download (codes_t, 0, codes, (gsize) B * nq);
    double b = bench_now_ms ();
    ppx_tensor_upload (codes_t, 0, codes, (gsize) B * nq);
    if (s->sequential) {
      for (int i = 0; i < B; i++) {
        PpxTensor *c = ppx_tensor_view (codes_t, (gsize) i * nq, nq), *y = ppx_tensor_view (out_t, (gsize) i * fs, fs);
        ppx_mimi_batch_decode (p.batches[i], 0, 1, c, 0, nq, y);
        ppx_tensor_free (c);
        ppx_tensor_free (y);
      }
    } else {
      ppx_mimi_batch_decode (p.batches[0], 0, B, codes_t, 0, nq, out_t);
    }
    ppx_tensor_download (out_t, 0, out, (gsize) B * fs);
    double c = bench_now_ms ();
    if (f >= s->warmup) {
      enc[f - s->warmup] = b - a;
      dec[f - s->warmup] = c - b;
    }
  }
  const char *how = s->sequential ? "one session after another" : "all sessions as one batch";
  g_autofree char *enc_note = g_strdup_printf ("80 ms of PCM -> 8 codes, %s", how);
  g_autofree char *dec_note = g_strdup_printf ("8 codes -> 80 ms of PCM, %s", how);
  bench_report_add_component (r, "mimi-encode", "mimi", enc_note, B, enc, s->frames);
  bench_report_add_component (r, "mimi-decode", "mimi", dec_note, B, dec, s->frames);
  /* The same batched frames replayed as CUDA graphs, as the engine's tick runs them: the GPU time of a frame
   * without the per-op launch cost on the host (and without the host transfers). */
  PpxGraph *ge = NULL, *gd = NULL;
  if (!s->sequential && ppx_backend_supports_graphs (p.be)) {
    ge = record_mimi (p.be, p.batches[0], TRUE, B, pcm_t, codes_t, out_t, nq);
    gd = ge ? record_mimi (p.be, p.batches[0], FALSE, B, pcm_t, codes_t, out_t, nq) : NULL;
  }
  gboolean graphs = ge && gd;
  for (int f = 0; graphs && f < s->warmup + s->frames; f++) {
    double a = bench_now_ms ();
    graphs = ppx_backend_graph_launch (p.be, ge);
    ppx_backend_sync (p.be);
    double b = bench_now_ms ();
    graphs = graphs && ppx_backend_graph_launch (p.be, gd);
    ppx_backend_sync (p.be);
    double c = bench_now_ms ();
    if (f >= s->warmup) {
      enc[f - s->warmup] = b - a;
      dec[f - s->warmup] = c - b;
    }
  }
  if (graphs) {
    g_autofree char *genc =
      g_strdup_printf ("the encode replayed as one CUDA graph (%" G_GSIZE_FORMAT " ops), no transfers", ppx_graph_nodes (ge));
    g_autofree char *gdec =
      g_strdup_printf ("the decode replayed as one CUDA graph (%" G_GSIZE_FORMAT " ops), no transfers", ppx_graph_nodes (gd));
    bench_report_add_component (r, "mimi-encode-graph", "mimi", genc, B, enc, s->frames);
    bench_report_add_component (r, "mimi-decode-graph", "mimi", gdec, B, dec, s->frames);
  }
  if (ge)
    ppx_graph_free (ge);
  if (gd)
    ppx_graph_free (gd);
  phase_end (mem);
  g_free (pcm);
  g_free (out);
  g_free (codes);
  g_free (enc);
  g_free (dec);
  ppx_tensor_free (pcm_t);
  ppx_tensor_free (out_t);
  ppx_tensor_free (codes_t);
  mimi_phase_clear (&p);
  return TRUE;
}

/* ---- LM ---- */

typedef struct {
  PpxBackend *be;
  PpxSafetensors *st;
  PpxLm *lm;
  PpxLmBatch *batch; /* B slots, B rows */
  PpxLmGen *gens;
  PpxLmRow *rows;
  int n;
} LmPhase;

static void
lm_phase_clear (LmPhase *p)
{
  ppx_lm_batch_free (p->batch);
  g_free (p->gens);
  g_free (p->rows);
  ppx_lm_free (p->lm);
  if (p->st)
    ppx_st_close (p->st);
  if (p->be)
    ppx_backend_free (p->be);
}

static void
random_codes (guint32 *rng, int card, int n, int *out)
{
  for (int q = 0; q < n; q++) {
    *rng = *rng * 1664525u + 1013904223u;
    out[q] = (int) ((*rng >> 8) % (guint32) card);
  }
}

/* One LMGen call for every session: one batched model step (or, sequential, one step per session). */
static void
lm_tick (const BenchSetup *s, LmPhase *p, const int *user, const int *agent, int text, const PpxSampling *smp)
{
  const int nq = s->cfg.lm.n_q / 2;
  int out[PPX_MAX_STREAMS], n = 0;
  int *which = g_newa (int, p->n);
  for (int i = 0; i < p->n; i++) {
    PpxSampling si = *smp;
    si.seed += (guint64) i;
    if (ppx_lmgen_prepare (&p->gens[i], user + (gsize) i * nq, agent ? agent + (gsize) i * nq : NULL, text, NULL, &si,
                           &p->rows[n])) {
      p->rows[n].slot = i;
      which[n++] = i;
    }
  }
  if (s->sequential) {
    for (int j = 0; j < n; j++)
      ppx_lm_batch_step (p->batch, &p->rows[j], 1);
  } else if (n > 0) {
    ppx_lm_batch_step (p->batch, p->rows, n);
  }
  for (int j = 0; j < n; j++)
    ppx_lmgen_finish (&p->gens[which[j]], &p->rows[j], out);
}

/* Steps every session `warmup + frames` times; conversation = TRUE: user codes only (the agent's
 * streams are sampled), else all streams provided (the prompt phase). */
static void
lm_steps (const BenchSetup *s, LmPhase *p, gboolean conversation, double *ms, int *dep_steps)
{
  const PpxLmConfig *c = &s->cfg.lm;
  const int nq = c->n_q / 2;
  g_autofree int *user = g_new (int, (gsize) p->n * nq), *agent = g_new (int, (gsize) p->n * nq);
  guint32 rng = 12345u;
  PpxSampling smp = {.seed = s->seed, .temp_text = 0.7f, .temp_audio = 0.8f, .topk_text = 25, .topk_audio = 250};
  for (int f = 0; f < s->warmup + s->frames; f++) {
    random_codes (&rng, c->card, p->n * nq, user);
    random_codes (&rng, c->card, p->n * nq, agent);
    double a = bench_now_ms ();
    lm_tick (s, p, user, conversation ? NULL : agent, conversation ? -1 : TEXT_PAD, &smp);
    ppx_backend_sync (p->be); /* a prompt step downloads nothing: wait for the queued work */
    if (f >= s->warmup)
      ms[f - s->warmup] = bench_now_ms () - a;
    *dep_steps = p->gens[0].last_dep_steps;
  }
}

gboolean
bench_run_lm (const BenchSetup *s, BenchReport *r, GError **error)
{
  const PpxLmConfig *c = &s->cfg.lm;
  const int B = s->batch;
  LmPhase p = {0};
  phase_begin (r);
  double t0 = bench_now_ms ();
  gboolean ok = (p.be = bench_backend_new (s->backend, s->threads, s->device, error)) &&
                (p.st = ppx_st_open (s->lm_path, error)) &&
                (p.lm = ppx_lm_load (p.be, c, p.st, s->quantization, error));
  if (!ok) {
    lm_phase_clear (&p);
    return FALSE;
  }
  bench_report_add_load (r, "lm", "open + load the LM checkpoint", bench_now_ms () - t0);
  BenchMemory *mem = bench_report_add_memory (r, "lm");
  mem->weight_bytes = ppx_lm_weight_bytes (p.lm);
  guint64 before = ppx_backend_allocated_bytes (p.be);
  p.n = B;
  p.gens = g_new0 (PpxLmGen, B);
  p.rows = g_new0 (PpxLmRow, B);
  for (int i = 0; i < B; i++)
    ppx_lmgen_init (&p.gens[i], c);
  if (!(p.batch = ppx_lm_batch_new (p.lm, B, B, ppx_kv_storage (s->kv_format), error))) {
    lm_phase_clear (&p);
    return FALSE;
  }
  mem->backend_bytes = ppx_backend_allocated_bytes (p.be);
  mem->state_bytes = (mem->backend_bytes - before) / B;
  mem->state_known = TRUE;

  /* The generator's first call only sets up its start tokens and runs no model: make it untimed. */
  g_autofree int *zeros = g_new0 (int, (gsize) B * PPX_MAX_STREAMS);
  PpxSampling smp = {.greedy = TRUE};
  lm_tick (s, &p, zeros, zeros, TEXT_PAD, &smp);
  for (int i = 0; i < B; i++)
    bench_fill_context (&p.gens[i], s->context);

  double *ms = g_new (double, s->frames);
  int dep_steps = 0;
  const char *how = s->sequential ? "one session after another" : "all sessions as one batch";
  lm_steps (s, &p, FALSE, ms, &dep_steps);
  g_autofree char *note = g_strdup_printf ("temporal only (%d depformer steps), %s", dep_steps, how);
  bench_report_add_component (r, "lm-prompt-step", "lm", note, B, ms, s->frames);
  lm_steps (s, &p, TRUE, ms, &dep_steps);
  g_free (note);
  note = g_strdup_printf ("temporal + %d depformer steps, sampled, %s", dep_steps, how);
  bench_report_add_component (r, "lm-step", "lm", note, B, ms, s->frames);
  phase_end (mem);
  g_free (ms);
  lm_phase_clear (&p);
  return TRUE;
}

/* ---- the whole session ---- */

gboolean
bench_tick_sessions (const BenchSetup *s, PpxModel *model, PpxEngine *engine, PpxSession **sessions, int B,
                     double *ms, GError **error)
{
  for (int i = 0; i < B; i++)
    bench_fill_context (ppx_session_lmgen (sessions[i]), s->context);
  const int fs = ppx_model_frame_size (model), sr = ppx_model_sample_rate (model);
  float *in = g_new (float, (gsize) B * fs), *out = g_new (float, (gsize) B * fs);
  const float **ins = g_new (const float *, B);
  float **outs = g_new (float *, B);
  PpxFrameResult *res = g_new0 (PpxFrameResult, B);
  for (int i = 0; i < B; i++) {
    ins[i] = in + (gsize) i * fs;
    outs[i] = out + (gsize) i * fs;
  }
  gboolean ok = TRUE;
  for (int f = 0; ok && f < s->warmup + s->frames; f++) {
    for (int i = 0; i < B; i++)
      bench_test_signal (i, f, fs, sr, in + (gsize) i * fs);
    double a = bench_now_ms ();
    if (engine) {
      ok = ppx_engine_step (engine, sessions, B, ins, outs, res, error);
    } else {
      for (int i = 0; ok && i < B; i++)
        ok = ppx_session_step (sessions[i], ins[i], outs[i], &res[i], error);
    }
    if (f >= s->warmup)
      ms[f - s->warmup] = bench_now_ms () - a;
  }
  g_free (in);
  g_free (out);
  g_free (ins);
  g_free (outs);
  g_free (res);
  return ok;
}

void
bench_sessions_free (PpxEngine *engine, PpxSession **sessions, int B)
{
  for (int i = 0; i < B; i++)
    ppx_session_free (sessions[i]);
  g_free (sessions);
  ppx_engine_unref (engine);
}

/* B sessions stepped `warmup + frames` ticks (batched: one engine of B slots, one tick per frame, CUDA graphs
 * unless no_graphs; sequential: B sessions with engines of their own, stepped one after another). */
static gboolean
session_ticks (const BenchSetup *s, PpxModel *model, gboolean no_graphs, const char *name, BenchReport *r,
               BenchMemory *mem, GError **error)
{
  const int B = s->batch;
  /* batched: one engine of B slots, one tick per frame; sequential: B sessions with engines of their own,
   * stepped one after another */
  PpxEngine *engine = NULL;
  gboolean ok = TRUE;
  if (!s->sequential) {
    PpxEngineParams ep;
    ppx_engine_params_init (&ep);
    ep.max_sessions = B;
    ep.kv_format = s->kv_format;
    ep.no_cuda_graphs = no_graphs;
    ok = (engine = ppx_engine_new (model, &ep, error)) != NULL;
  }
  PpxSession **sessions = g_new0 (PpxSession *, B);
  PpxSessionParams sp;
  ppx_session_params_init (&sp);
  sp.kv_format = s->kv_format;
  double new_ms = 0;
  for (int i = 0; ok && i < B; i++) {
    sp.seed = s->seed + (guint64) i;
    double a = bench_now_ms ();
    ok = (sessions[i] = engine ? ppx_engine_session_new (engine, &sp, error) : ppx_session_new (model, &sp, error)) !=
         NULL;
    new_ms += bench_now_ms () - a;
  }
  if (ok) {
    mem->state_bytes = engine ? ppx_engine_session_bytes (engine) : ppx_engine_session_bytes (ppx_session_engine (sessions[0]));
    mem->state_known = TRUE;
    if (!no_graphs || s->cuda_graphs == BENCH_GRAPHS_OFF) /* once */
      bench_report_add_load (r, "session-new", "per session: state + the silence prompts (12 temporal-only steps)",
                             new_ms / B);
    double *ms = g_new (double, s->frames);
    ok = bench_tick_sessions (s, model, engine, sessions, B, ms, error);
    if (ok && engine) {
      PpxEngineTickStats st;
      ppx_engine_tick_stats (engine, &st);
      g_autofree char *note = g_strdup_printf (
        "ppx_engine_step: encode + LM step + decode, all sessions as one batch (%d rows a tick); %" G_GUINT64_FORMAT
        " of %" G_GUINT64_FORMAT " ticks replayed as a CUDA graph (%" G_GUINT64_FORMAT " operations)%s; the last "
        "tick: %" G_GUINT64_FORMAT " ops one by one, %" G_GUINT64_FORMAT " uploads, %" G_GUINT64_FORMAT " downloads",
        st.last_rows, st.graph_ticks, st.ticks, st.graph_nodes, no_graphs ? "; graphs off" : "", st.last_ops,
        st.last_uploads, st.last_downloads);
      bench_report_add_component (r, name, "session", note, B, ms, s->frames);
    } else if (ok) {
      bench_report_add_component (r, name, "session",
                                  "ppx_session_step: encode + LM step + decode, one session after another", B, ms,
                                  s->frames);
    }
    g_free (ms);
  }
  bench_sessions_free (engine, sessions, B);
  return ok;
}

void
bench_model_params (const BenchSetup *s, PpxModelParams *mp)
{
  ppx_model_params_init (mp);
  mp->model_dir = s->model_dir;
  if (!s->model_dir) {
    mp->lm_file = s->lm_path;
    mp->mimi_file = s->mimi_path;
    mp->config_json = s->config_path;
  }
  mp->quantization = s->quantization;
  mp->backend = s->backend;
  mp->n_threads = s->threads;
  mp->device = s->device;
}

gboolean
bench_run_session (const BenchSetup *s, BenchReport *r, GError **error)
{
  phase_begin (r);
  PpxModelParams mp;
  bench_model_params (s, &mp);
  double t0 = bench_now_ms ();
  PpxModel *model = ppx_model_load (&mp, error);
  if (!model)
    return FALSE;
  bench_report_add_load (r, "model", "ppx_model_load: Mimi + LM (+ tokenizer)", bench_now_ms () - t0);
  BenchMemory *mem = bench_report_add_memory (r, "session");
  mem->weight_bytes = ppx_model_weight_bytes (model);

  gboolean ok = TRUE;
  const int modes = s->sequential ? 1 : s->cuda_graphs == BENCH_GRAPHS_BOTH ? 2 : 1;
  for (int mode = 0; ok && mode < modes; mode++) {
    const gboolean no_graphs = s->cuda_graphs == BENCH_GRAPHS_OFF || mode == 1;
    ok = session_ticks (s, model, no_graphs, mode == 1 ? "session-step-no-graphs" : "session-step", r, mem, error);
  }
  phase_end (mem);
  ppx_model_unref (model);
  return ok;
}

/* ---- load times ---- */

gboolean
bench_run_lm_load (const BenchSetup *s, const char *name, const char *path, PpxQuantization quant, int repeats,
                   BenchReport *r, GError **error)
{
  double *ms = g_new (double, repeats);
  guint64 weights = 0, peak = 0;
  gboolean ok = TRUE;
  for (int k = 0; ok && k < repeats; k++) {
    LmPhase p = {0};
    phase_begin (r);
    double t0 = bench_now_ms ();
    ok = (p.be = bench_backend_new (s->backend, s->threads, s->device, error)) && (p.st = ppx_st_open (path, error)) &&
         (p.lm = ppx_lm_load (p.be, &s->cfg.lm, p.st, quant, error));
    ms[k] = bench_now_ms () - t0;
    if (ok) {
      weights = ppx_lm_weight_bytes (p.lm);
      peak = MAX (peak, bench_rss_peak_bytes ());
    }
    lm_phase_clear (&p);
  }
  if (ok) {
    BenchLoadRun *run = bench_report_add_load_run (r, name, path);
    bench_stats_compute (ms, repeats, &run->ms);
    run->weight_bytes = weights;
    run->peak_rss_bytes = peak;
  }
  g_free (ms);
  return ok;
}
