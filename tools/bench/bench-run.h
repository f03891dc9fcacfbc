/* personaplex-bench: the measured phases. Each phase makes its own backend, loads what it measures,
 * makes `batch` independent sessions, steps them all once per frame tick (warm-up ticks first, not
 * recorded) as one batch (or, with `sequential`, one after another), records the tick times and the
 * memory, and frees everything again. With `context` > 0 every session's LM is first put at that
 * position (rounded down to a multiple of the token cache's 4 columns, so the delayed tokens stay
 * where they are): the temporal transformer then attends over min(context, its context) cached
 * positions, as late in a long conversation. The cache holds zeros there; the cost is the same as with
 * real entries. */
#ifndef BENCH_RUN_H
#define BENCH_RUN_H

#include "backend.h"
#include "bench-report.h"
#include "config.h"
#include "lmgen.h"
#include "personaplex.h"

G_BEGIN_DECLS

typedef struct {
  PpxConfig cfg;
  const char *model_dir;   /* a model directory, or NULL for files given one by one */
  const char *lm_path;     /* the LM checkpoint (may be a /proc/self/fd path) */
  const char *mimi_path;   /* the Mimi checkpoint */
  const char *config_path; /* config.json to use with lm_path/mimi_path when model_dir is NULL */
  PpxBackendKind backend;
  PpxQuantization quantization;
  int threads, device, batch, frames, warmup;
  guint64 seed;
  gboolean sequential;     /* step the sessions one after another (the cost before the batched engine) */
  PpxKvFormat kv_format;   /* the KV caches of the LM and session phases (resolved: not AUTO) */
  gint64 context;          /* LM position every session is put at before the warm-up (--context) */
  int cuda_graphs;         /* BENCH_GRAPHS_*: the batched session phase with CUDA graphs, without, or both */
} BenchSetup;

enum { BENCH_GRAPHS_ON, BENCH_GRAPHS_OFF, BENCH_GRAPHS_BOTH };

/* The backend of the given kind, chosen as ppx_model_load() does: CUDA when asked for (a clear error
 * without CUDA or a GPU), or for auto when a GPU is usable; the CPU otherwise. */
PpxBackend *bench_backend_new (PpxBackendKind kind, int threads, int device, GError **error);
/* The GPU's name for a CUDA backend (g_free), NULL otherwise. */
char *bench_device_name (const PpxBackend *be);

/* The ppx_model_load parameters of the setup's model (directory, or files given one by one). */
void bench_model_params (const BenchSetup *s, PpxModelParams *mp);
/* --context: puts a session's generator at LM position `context` (rounded down to the token cache's
 * columns) right after its prompts. */
void bench_fill_context (PpxLmGen *g, gint64 context);
/* Puts the B sessions at --context, then steps them `warmup + frames` ticks of the test signal: on `engine`
 * as one batch, or (engine NULL) one after another; ms[frames] gets the measured ticks' times. */
/* Frees the B sessions of @sessions (some may be NULL), the array, and drops @engine (may be NULL). */
void bench_sessions_free (PpxEngine *engine, PpxSession **sessions, int B);
gboolean bench_tick_sessions (const BenchSetup *s, PpxModel *model, PpxEngine *engine, PpxSession **sessions, int B,
                              double *ms, GError **error);
/* The speech-like test input of session `session`, frame `frame` (n samples). */
void bench_test_signal (int session, gint64 frame, int n, int sample_rate, float *out);

/* Mimi alone: load, then per frame encode (mimi-encode) and decode (mimi-decode). */
gboolean bench_run_mimi (const BenchSetup *s, BenchReport *r, GError **error);
/* The LM alone: load, then prompt-phase steps (lm-prompt-step: temporal only, all streams provided)
 * and conversation steps (lm-step: temporal + the depformer steps for the agent's streams). */
gboolean bench_run_lm (const BenchSetup *s, BenchReport *r, GError **error);
/* The public API: ppx_model_load, ppx_session_new (the prompt phase) and ppx_session_step. */
gboolean bench_run_session (const BenchSetup *s, BenchReport *r, GError **error);
/* `repeats` loads (open, validate, load onto a fresh backend) of the LM file at `path` with `quant`. */
gboolean bench_run_lm_load (const BenchSetup *s, const char *name, const char *path, PpxQuantization quant,
                            int repeats, BenchReport *r, GError **error);

G_END_DECLS
#endif
