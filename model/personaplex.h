/* personaplex: the public C API of the inference library (GStreamer-free).
 *
 * A PpxModel holds the read-only weights (LM, Mimi, tokenizer) and can be shared by many sessions and
 * threads. A PpxSession holds one conversation's streaming state (codec buffers, KV caches, the token
 * delay cache, the RNG). Every function that can fail on user input takes a GError** and never aborts.
 *
 * One call of ppx_session_step() takes 80 ms of user audio (frame_size samples, 24 kHz mono f32) and
 * returns 80 ms of agent audio plus the 17 tokens of the frame and its text piece. */
#ifndef PERSONAPLEX_H
#define PERSONAPLEX_H

#include <glib.h>
#include <stdint.h>

#include "ppx-types.h"

G_BEGIN_DECLS

/* The error domain and codes, PpxQuantization, PpxBackendKind and PpxKvFormat, and their names
 * (ppx_quantization_name, ppx_kv_format_from_name, ...): ppx-types.h. */

typedef struct PpxModel PpxModel;
typedef struct PpxSession PpxSession;
typedef struct PpxEngine PpxEngine;

typedef struct {
  const char *model_dir;       /* published layout: model.safetensors, tokenizer-*.safetensors, ... */
  const char *lm_file;         /* optional override of DIR/model.safetensors */
  const char *mimi_file;       /* optional override of the Mimi checkpoint */
  const char *config_json;     /* optional override of DIR/config.json (path) */
  PpxQuantization quantization;
  PpxBackendKind backend;
  int device;                  /* GPU index for CUDA */
  int n_threads;               /* CPU threads, 0 = all cores */
} PpxModelParams;

void ppx_model_params_init (PpxModelParams *p);
PpxModel *ppx_model_load (const PpxModelParams *params, GError **error);
PpxModel *ppx_model_ref (PpxModel *model);
void ppx_model_unref (PpxModel *model);

int ppx_model_frame_size (const PpxModel *model);   /* samples per frame (1920) */
int ppx_model_sample_rate (const PpxModel *model);  /* 24000 */
const char *ppx_model_backend_name (const PpxModel *model);
const char *ppx_model_quantization_name (const PpxModel *model);
guint64 ppx_model_weight_bytes (const PpxModel *model);
/* Text piece of a token as the reference prints it ("▁" -> " "), or NULL for padding ids (0, 3) and
 * ids without a tokenizer. g_free the result. */
char *ppx_model_token_text (const PpxModel *model, int token);
/* Tokenizes a text prompt the reference's way ("<system> text <system>", no BOS/EOS). */
int *ppx_model_tokenize_prompt (const PpxModel *model, const char *text, int *n_tokens, GError **error);

typedef struct {
  const char *voice_prompt;     /* audio file, .pt file, or NAME (DIR/voices/NAME.pt); NULL: none */
  gboolean voice_normalize;     /* -24 LUFS on audio voice prompts (default TRUE) */
  const char *voice_cache_dir;  /* where computed voice prompts are cached (NULL: no cache) */
  const char *text_prompt;      /* NULL or "": no text phase */
  const int *text_prompt_tokens;/* overrides text_prompt when n_text_prompt_tokens > 0 */
  int n_text_prompt_tokens;
  gboolean greedy;
  guint64 seed;
  float temp_audio, temp_text;  /* 0.8, 0.7 */
  int topk_audio, topk_text;    /* 250, 25 */
  PpxKvFormat kv_format;        /* ppx_session_new only (its own engine); engine sessions use the engine's */
} PpxSessionParams;

void ppx_session_params_init (PpxSessionParams *p);
/* Creates a session on an engine of its own (max_sessions 1, params->kv_format) and runs the system
 * prompts (voice, silence, text, silence). */
PpxSession *ppx_session_new (PpxModel *model, const PpxSessionParams *params, GError **error);
void ppx_session_free (PpxSession *s);

typedef struct {
  int tokens[17];   /* text, 8 agent codes, 8 user codes (what the reference's step returns) */
  char *text;       /* decoded text piece or NULL; owned by the session until the next step */
  double step_ms;   /* wall time of the tick that stepped the session */
} PpxFrameResult;

/* One 80 ms frame: in = frame_size samples, out = frame_size samples. NaN/Inf input samples are
 * replaced by 0 (documented safe behaviour). */
gboolean ppx_session_step (PpxSession *s, const float *in, float *out, PpxFrameResult *res, GError **error);
/* Back to the state right after the system prompts (a new conversation with the same prompts). */
gboolean ppx_session_reset (PpxSession *s, GError **error);
/* Frames stepped since the prompts. */
guint64 ppx_session_frames (const PpxSession *s);

/* ---- the batched engine: many sessions of one model stepped together, one pass per 80 ms tick ----
 *
 * An engine owns max_sessions slots of per-session state (KV caches, codec state) and the scratch of a
 * batch; the weights stay in the model, shared. ppx_engine_step() runs Mimi encode, the temporal
 * transformer, the depformer, sampling and Mimi decode once for all the sessions it is given (M rows),
 * each session at its own position and with its own sampling parameters and seed. A session's tokens and
 * audio do not depend on which other sessions share the tick (greedy: exactly; docs/engine.md).
 * Sessions join (ppx_engine_session_new) and leave (ppx_session_free) between ticks; the engine is
 * thread-safe: creating or freeing sessions from other threads never stalls a running tick for longer
 * than one prompt frame. A session is in at most one tick at a time and is not freed or reset while a
 * tick that steps it runs. */
typedef struct {
  int max_sessions;       /* slots; <= 0: as many as fit in 90 % of the memory free at creation (at most 1024 on
                           * a GPU, 64 on the CPU; docs/engine.md) */
  PpxKvFormat kv_format;
  gboolean no_cuda_graphs; /* TRUE: never replay ticks as CUDA graphs (for comparisons; the environment
                            * variable PPX_CUDA_GRAPHS=0 does the same for every engine) */
  int prompt_chunk;        /* the system prompts run as chunks of up to this many frames, one temporal pass
                            * each, fitted between ticks; 1: one single-row step per frame (the reference's
                            * step by step, for comparisons); 0: the environment variable PPX_PROMPT_CHUNK, else
                            * 64 (docs/engine.md, "Prompt prefill") */
  int voice_snapshots;     /* with prompt chunks > 1: the voice phases kept (KV rows and LMGen state, copied into
                            * the slot of a session with that voice; least recently used dropped first): 0: 16,
                            * < 0: none (docs/engine.md, "Voice snapshots") */
} PpxEngineParams;

void ppx_engine_params_init (PpxEngineParams *p);
PpxEngine *ppx_engine_new (PpxModel *model, const PpxEngineParams *params, GError **error);
PpxEngine *ppx_engine_ref (PpxEngine *engine);
void ppx_engine_unref (PpxEngine *engine);
int ppx_engine_max_sessions (const PpxEngine *engine);
/* Sessions that can be stepped (created, prompts done, not freed), whether they have ticked yet or not. */
int ppx_engine_active_sessions (const PpxEngine *engine);
PpxKvFormat ppx_engine_kv_format (const PpxEngine *engine);
/* Device bytes of one session slot (all its state at full context, with its row of the batch scratch: what
 * one more max_sessions costs) and of the whole engine (slots + batch scratch + a fixed part; the model's
 * weights not included): device bytes = weights + fixed + max_sessions x session bytes. */
guint64 ppx_engine_session_bytes (const PpxEngine *engine);
guint64 ppx_engine_device_bytes (const PpxEngine *engine);
/* Slot bytes for a model and KV format without making an engine (for "how many fit" decisions). */
guint64 ppx_model_session_bytes (const PpxModel *model, PpxKvFormat kv_format);

/* A session in one of the engine's slots; PPX_ERROR_LIMIT when all max_sessions are taken. The prompts
 * run before it returns (interleaved with the engine's ticks). */
PpxSession *ppx_engine_session_new (PpxEngine *engine, const PpxSessionParams *params, GError **error);
PpxEngine *ppx_session_engine (const PpxSession *s);

/* One tick for n sessions of this engine (each at most once, any subset in any order; n = 0 does nothing):
 * in[i] and out[i] hold frame_size samples, res[i] (res may be NULL) gets session i's tokens and text.
 * ppx_session_step(s, ...) is this with n = 1. */
gboolean ppx_engine_step (PpxEngine *engine, PpxSession *const *sessions, int n, const float *const *in,
                          float *const *out, PpxFrameResult *res, GError **error);
/* Wall time of the last tick in ms and how many sessions it stepped. */
double ppx_engine_last_tick_ms (const PpxEngine *engine);
int ppx_engine_last_batch_size (const PpxEngine *engine);
/* Wall times of the engine's recent ticks (docs/engine.md, "Tick times"): every ppx_engine_step call that stepped
 * at least one session, from the call to its return (so a wait for the engine's lock, e.g. behind a joining
 * session's prompt frame, is included), over the last PPX_ENGINE_TICK_WINDOW ticks. ppx_engine_tick_times
 * never waits for a running tick (the figures have a lock of their own); the element's automatic
 * processing-deadline follows p99_ms. */
#define PPX_ENGINE_TICK_WINDOW 256
#define PPX_ENGINE_TICK_BUCKETS 12
typedef struct {
  guint n;        /* ticks in the window: all measured, at most PPX_ENGINE_TICK_WINDOW */
  guint64 ticks;  /* ticks measured since the engine was made */
  double last_ms; /* the last one */
  double p50_ms;  /* the window's median (0 while n = 0) */
  double p99_ms;  /* the window's 99th percentile, nearest rank, but never its largest tick while it holds 2 to 99
                   * (the second largest then), so that one outlier (a cold first tick, a CUDA graph recorded for a
                   * new batch size) does not make it; with n = 1 that one tick */
  double max_ms;
  /* every tick since the engine was made (not just the window's), for counters and histograms such as a server's
   * Prometheus series: those over one frame (80 ms: the tick could not keep up with real time), the sum of their
   * times, and how many fell in each of PPX_ENGINE_TICK_BUCKETS + 1 buckets: buckets[i] counts the ticks of
   * more than bound i - 1 and at most bound i ms (ppx_engine_tick_bucket_bounds_ms), the last those above every
   * bound */
  guint64 overruns;
  double total_ms;
  guint64 buckets[PPX_ENGINE_TICK_BUCKETS + 1];
} PpxEngineTickTimes;
void ppx_engine_tick_times (PpxEngine *engine, PpxEngineTickTimes *times);
/* The upper bounds (ms, ascending) of PpxEngineTickTimes's buckets: 1, 2, 5, 10, 20, 40, 60, 80, 100, 160, 320,
 * 640. */
const double *ppx_engine_tick_bucket_bounds_ms (void);

/* What a tick of `rows` sessions at full context costs on this engine (docs/engine.md, "Measuring the tick"):
 * `rows` sessions without prompts take free slots, are put at the end of the model's context (every tick then
 * attends the whole KV cache, as a long call's does), step 2 warm-up ticks (a first tick, a CUDA graph recorded
 * for the bucket) and then `ticks` measured ones, whose wall times (ms) go to ms[0..ticks-1], and leave. These
 * ticks are not the engine's tick times (ppx_engine_tick_times). Meant for start-up, before calls: it takes the
 * slots and the engine's time. PPX_ERROR_LIMIT when fewer than `rows` slots are free. *padded_rows (may be NULL):
 * the rows the last measured tick ran (more than `rows` when the engine padded it to its bucket). */
gboolean ppx_engine_measure_tick (PpxEngine *engine, int rows, int ticks, double *ms, int *padded_rows,
                                  GError **error);
/* The rows a tick of n sessions runs when every session that ticks is in it (a ready session that has not
 * ticked yet holds no Mimi row and does not count): n, or on a bucketed engine (CUDA) its bucket
 * (ppx_engine_bucket_rows) at most n + the slots free now (docs/engine.md, "Batch-size buckets and padding"). */
int ppx_engine_tick_rows (const PpxEngine *engine, int n);
/* The batch-size bucket of a full tick of n rows on a bucketed engine of max_rows slots: the next power of two
 * up to PPX_ENGINE_BUCKET_POW2_MAX rows, then the next multiple of PPX_ENGINE_BUCKET_STEP (a tick of 65 rows runs
 * 72, not 128), at most max_rows. One CUDA graph is recorded per bucket used. */
#define PPX_ENGINE_BUCKET_POW2_MAX 32
#define PPX_ENGINE_BUCKET_STEP 8
int ppx_engine_bucket_rows (int n, int max_rows);

/* How the ticks ran (docs/engine.md, "The GPU tick"). */
typedef struct {
  guint64 ticks;        /* ticks run */
  guint64 graph_ticks;  /* ticks replayed as one CUDA graph */
  guint64 padded_ticks; /* ticks padded to a batch-size bucket (with or without a graph) */
  int graphs;           /* graphs held: one per bucket used */
  guint64 graph_nodes;  /* operations (kernels and copies) in the last graph recorded */
  int last_rows;        /* rows of the last tick, padding included */
  /* what the last tick asked of the backend: ops enqueued one by one (on a GPU about one kernel launch or
   * copy each; 0 for a graph replay), uploads and downloads (each download waits for the device); other
   * engines working on the same model at the same time are counted too */
  guint64 last_ops, last_uploads, last_downloads;
  PpxEngineTickTimes times; /* what ppx_engine_tick_times gives */
} PpxEngineTickStats;
void ppx_engine_tick_stats (PpxEngine *engine, PpxEngineTickStats *stats);

/* The Mimi checkpoint of a model directory: DIR/tokenizer-e351c8d8-checkpoint125.safetensors, else another
 * DIR/tokenizer-*.safetensors, else DIR/mimi.safetensors; the published name when none exists (for the
 * error message). g_free the result. */
char *ppx_model_dir_mimi_path (const char *model_dir);

G_END_DECLS
#endif
