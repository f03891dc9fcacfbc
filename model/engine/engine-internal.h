/* Private: the engine and session objects, shared by engine.c (slots, rows, the tick) and session.c
 * (parameters, voice and system prompts). docs/engine.md describes the design. */
#ifndef PPX_ENGINE_INTERNAL_H
#define PPX_ENGINE_INTERNAL_H

#include "lmgen.h"
#include "model-internal.h"
#include "tick-times.h"
#include "voice-prompt.h"

/* max_sessions <= 0: as many as fit in the backend's free memory, at most this many on the CPU (where the
 * tick's cost grows linearly with the batch) and on a GPU. */
#define PPX_ENGINE_AUTO_MAX_CPU 64
#define PPX_ENGINE_AUTO_MAX_GPU 1024
/* Fraction of the free memory an automatic engine may take. */
#define PPX_ENGINE_AUTO_FRACTION 0.9
/* Largest max_sessions accepted. */
#define PPX_ENGINE_MAX_SESSIONS 4096

struct PpxEngine {
  gint refcount;
  PpxModel *model;
  int max_sessions;
  PpxKvFormat kv;    /* resolved: never AUTO */
  PpxLmBatch *lm;    /* KV caches of max_sessions slots, scratch of max_sessions rows */
  PpxMimiBatch *mimi; /* codec state of max_sessions rows: the active sessions, compact in rows 0.. */
  PpxTensor *pcm_in, *pcm_out, *codes; /* [max, frame_size], [max, frame_size], [max, num_codebooks] */
  float *host_pcm;   /* [max, frame_size] */
  PpxLmRow prompt_row; /* the single row of a prompt frame */
  PpxLmTickRow *tick_rows; /* [max]: the LM rows of a tick, in Mimi row order, padding after the sessions */
  int *order;        /* [max]: a tick's sessions sorted by row */

  /* The LM tick (ppx_lm_batch_tick, LMGen on the device) writes each row's output tokens and new LMGen
   * state to tick_out, downloaded once with the PCM, so the host copy (PpxSession.gen) is current after
   * every tick. */
  PpxTensor *tick_out;  /* [max, PPX_LM_TICK_OUT] i32, by row: tokens, then the state */
  int32_t *host_out;    /* [max, PPX_LM_TICK_OUT] */

  /* The GPU tick (docs/engine.md): a tick of every active session is padded to a batch-size bucket and,
   * with graphs, replayed from one CUDA graph per bucket. */
  gboolean bucketed;    /* the backend records graphs: pad full ticks to buckets */
  gboolean graphs;      /* ... and replay them (not no_cuda_graphs, not PPX_CUDA_GRAPHS=0) */
  int graph_steps;      /* depformer steps of a bucketed tick: enough for every conversation row */
  PpxGraph **graph;     /* [max + 1]: by bucket rows, NULL until first needed */
  int *graph_failures;  /* [max + 1]: recordings that failed; a bucket that fails 3 times runs eagerly */
  PpxEngineTickStats stats;
  PpxTickTimes *times;  /* wall times of the recent ticks (a lock of its own) */

  /* Everything below is guarded by lock. A tick holds it for the whole tick; session creation takes it
   * for one prompt frame at a time and lets a waiting tick go first (ticks_waiting, turn). */
  GMutex lock;
  GCond turn;
  gint ticks_waiting; /* atomic: ticks blocked on the lock */
  PpxSession **slots; /* [max]: slot -> session, NULL when free */
  PpxSession **active; /* [max]: Mimi row -> session, rows 0..n_active-1 */
  int n_active;        /* atomic reads outside the lock */
  gint last_tick_us, last_batch; /* atomic */
};

struct PpxSession {
  PpxEngine *engine; /* holds a reference */
  PpxModel *model;   /* the engine's */
  int slot;          /* KV cache slot, fixed for the session's life */
  int row;           /* Mimi row while active (after the prompts), else -1 */
  int lm_row;        /* the session's row in the last LM step (logits for tests) */
  PpxSampling smp;
  int *text_tokens;
  int n_text_tokens;
  PpxVoicePrompt *voice;
  PpxLmGen gen;          /* the host copy, current after every tick; prompts run on it */
  guint64 frames;
  char *text;
};

/* Takes the engine lock for one prompt frame, after any tick that is waiting for it. */
void ppx_engine_lock_for_prompt (PpxEngine *e);
void ppx_engine_unlock (PpxEngine *e);
/* A slot for a new session (PPX_ERROR_LIMIT when all are taken); the session is not active yet. */
gboolean ppx_engine_claim_slot (PpxEngine *e, PpxSession *s, GError **error);
/* After the prompts: the session gets the next Mimi row (fresh codec state) and can be stepped. */
void ppx_engine_activate (PpxEngine *e, PpxSession *s);
/* Fresh codec state for an active session's row (ppx_session_reset). */
void ppx_engine_reset_codec (PpxEngine *e, PpxSession *s);
/* The session leaves: its row is refilled by the last active row, its slot is freed. */
void ppx_engine_release (PpxEngine *e, PpxSession *s);
/* One LMGen call of one session as a single-row model step (prompt frames); call with the lock held.
 * Returns TRUE and fills out when the call yields a frame. */
gboolean ppx_engine_lm_call (PpxEngine *e, PpxSession *s, const int *user, const int *agent, int text,
                             const float *embedding, int *out);
/* Tests: pad ticks to buckets as on a GPU, also on a backend without graphs (the CPU: there the padded and
 * unpadded ticks must agree bit for bit). Call before the first tick. */
void ppx_engine_force_buckets (PpxEngine *e, gboolean on);

#endif
