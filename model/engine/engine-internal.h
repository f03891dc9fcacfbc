/* Private: the engine and session objects, shared by engine.c (slots, rows, the tick), engine-lock.c (the
 * lock), session.c (parameters, voice and system prompts), prompt-prefill.c and voice-snapshot.c. The arrows:
 * session.c -> engine.c -> prompt-prefill.c, voice-snapshot.c -> engine-lock.c (engine.c and session.c lock
 * through engine-lock.c too); nothing of the prompts calls into the tick. docs/engine.md describes the
 * design. */
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

/* Prompt prefill (prompt-prefill.c, docs/engine.md "Prompt prefill"): the largest chunk by default (the
 * environment variable PPX_PROMPT_CHUNK, or PpxEngineParams.prompt_chunk, chooses another; 1 runs the prompts
 * step by step), and the chunk sizes the schedule measures: 1, 2, 4, ... up to the largest. */
#define PPX_PROMPT_CHUNK_DEFAULT 64
#define PPX_PROMPT_CHUNK_MAX 1024
#define PPX_PROMPT_SIZES 12

/* What the prompt schedule knows (guarded by the engine lock): when ticks arrive and how long they run, and
 * how long a chunk of each size took. */
typedef struct {
  gint64 arrival[4];  /* the last ticks' arrival times (us, ring by tick count), for the tick interval */
  guint64 n_ticks;    /* ticks noted */
  gint64 last_run_us; /* the last tick's run time, from taking the lock to releasing it */
  gboolean stalled;   /* a chunk waited for an overdue tick that did not come; cleared by the next tick */
  int sizes[PPX_PROMPT_SIZES], n_sizes;   /* chunk sizes, ascending: powers of two, then the largest */
  double cost_ms[PPX_PROMPT_SIZES];       /* running mean of a chunk's time (0: not measured yet) */
  guint64 chunks, frames, waits;          /* chunks run, prompt frames run in them, waits for a gap */
  int last_rows, max_rows;                /* rows of the last chunk, and of the longest since the largest was set */
  double last_ms, last_budget_ms;         /* its time, and the time the schedule gave it (INFINITY: no tick due) */
  guint64 voice_uses, voice_restores, voice_stores; /* voice snapshots (voice-snapshot.c): uses, copies in, kept */
} PpxPromptClock;

/* One prompt frame (spec §5.5): one LMGen call with these inputs. */
typedef struct {
  const int *agent, *user;
  int text;
  const float *embedding;
  const int (*cache)[PPX_LMGEN_COLS]; /* non-NULL: the token cache takes these values before the call */
} PpxPromptFrame;

struct PpxEngine {
  gint refcount;
  PpxModel *model;
  int max_sessions;
  PpxKvFormat kv;    /* the API's format, resolved: never AUTO (ppx_engine_kv_format) */
  PpxTensorType kv_storage; /* its storage, the form the LM and the backend take (ppx_kv_storage) */
  PpxLmBatch *lm;    /* KV caches of max_sessions slots, scratch of max_sessions rows */
  PpxMimiBatch *mimi; /* codec state of max_sessions rows: the sessions that ticked, compact in rows 0.. */
  PpxTensor *pcm_in, *pcm_out, *codes; /* [max, frame_size], [max, frame_size], [max, num_codebooks] */
  float *host_pcm;   /* [max, frame_size] */
  PpxLmRow prompt_row; /* the single row of a prompt frame */
  PpxLmTickRow *tick_rows; /* [max]: the LM rows of a tick, in Mimi row order, padding after the sessions */
  int *order;        /* [max]: a tick's sessions sorted by row */

  /* The LM tick (ppx_lm_batch_run_tick, LMGen on the device) writes each row's output tokens and new LMGen
   * state to tick_out; the LM downloads it and brings each session's host copy (PpxSession.gen) up to date
   * after every tick. */
  PpxTensor *tick_out;  /* [max, PPX_LM_TICK_OUT] i32, by row: tokens, then the state */
  int (*tick_tokens)[PPX_MAX_STREAMS]; /* [max]: each row's frame, from ppx_lm_batch_run_tick */

  /* The GPU tick (docs/engine.md): a tick of every session holding a Mimi row is padded to a batch-size
   * bucket and, with graphs, replayed by the LM from one CUDA graph per bucket. */
  gboolean bucketed;    /* the backend records graphs: pad full ticks to buckets */
  gboolean graphs;      /* ... and replay them (not no_cuda_graphs, not PPX_CUDA_GRAPHS=0) */
  int graph_steps;      /* depformer steps of a bucketed tick: enough for every conversation row */
  PpxEngineTickStats stats;
  PpxTickTimes *times;  /* wall times of the recent ticks (a lock of its own) */
  gint measuring;       /* ppx_engine_measure_tick runs: its ticks are not recorded in times (atomic) */

  /* Prompt prefill: chunks of up to prompt_chunk frames (1: single-row steps, ppx_engine_lm_call). */
  int prompt_chunk;
  PpxLmPrefill *prefill; /* NULL when prompt_chunk is 1 at creation */
  PpxPromptClock clock;  /* guarded by lock */
  /* Voice snapshots (voice-snapshot.c), guarded by lock: at most voice_snapshots kept (0: none). */
  int voice_snapshots;
  GPtrArray *voices;     /* PpxVoiceSnapshot */

  /* Everything below is guarded by lock. A tick holds it for the whole tick; session creation takes it
   * for one prompt frame at a time and lets a waiting tick go first (ticks_waiting, turn). */
  GMutex lock;
  GCond turn;
  gint ticks_waiting; /* atomic: ticks blocked on the lock */
  PpxSession **slots; /* [max]: slot -> session, NULL when free */
  PpxSession **row_owner; /* [max]: Mimi row -> session, rows 0..n_rows-1 */
  int n_rows;          /* sessions holding a Mimi row: those that ticked since they were made ready */
  int n_ready;         /* ready sessions (prompts done, not freed), with a row or not; atomic reads outside */
  gint last_tick_us, last_batch; /* atomic */
};

struct PpxSession {
  PpxEngine *engine; /* holds a reference */
  PpxModel *model;   /* the engine's */
  int slot;          /* KV cache slot, fixed for the session's life */
  gboolean ready;    /* the prompts are done: the session may be stepped (guarded by the engine lock) */
  int row;           /* Mimi row, taken at the session's first tick (engine.c, take_rows); -1 before */
  int lm_row;        /* the session's row in the last LM step (logits for tests) */
  PpxSampling smp;
  int *text_tokens;
  int n_text_tokens;
  PpxVoicePrompt *voice;
  PpxLmGen gen;          /* the host copy, current after every tick; prompts run on it */
  guint64 frames;
  char *text;
};

/* ---- the engine lock (engine-lock.c): below both the tick and the prompts ---- */
/* Takes the engine lock for one prompt frame (or chunk), after any tick that is waiting for it. */
void ppx_engine_lock_for_prompt (PpxEngine *e);
void ppx_engine_unlock (PpxEngine *e);
/* Takes the engine lock for a tick: a tick waiting for it goes before the prompts. */
void ppx_engine_lock_for_tick (PpxEngine *e);
/* Lets a tick's lock go and wakes the prompts waiting for their turn. */
void ppx_engine_unlock_after_tick (PpxEngine *e);
/* A tick that arrived at `arrival` held the lock from `start` to `end` (us): the prompt clock's tick part, read
 * by the prompt schedule; call with the lock held. */
void ppx_engine_note_tick (PpxEngine *e, gint64 arrival, gint64 start, gint64 end);

/* ---- slots, rows and prompt frames (engine.c) ---- */
/* A slot for a new session (PPX_ERROR_LIMIT when all are taken); the session is not active yet. */
gboolean ppx_engine_claim_slot (PpxEngine *e, PpxSession *s, GError **error);
/* After the prompts: the session can be stepped; it takes its Mimi row (fresh codec state) at its first tick,
 * so a ready session that never ticks (a server's model keeper) holds none. */
void ppx_engine_activate (PpxEngine *e, PpxSession *s);
/* Fresh codec state for the session's row (ppx_session_reset; nothing before its first tick: the row it
 * takes then starts fresh). */
void ppx_engine_reset_codec (PpxEngine *e, PpxSession *s);
/* The session leaves: its row (if it took one) is refilled by the last row held, its slot is freed. */
void ppx_engine_release (PpxEngine *e, PpxSession *s);
/* One LMGen call of one session as a single-row model step (prompt frames); call with the lock held.
 * Returns TRUE and fills out when the call yields a frame. */
gboolean ppx_engine_lm_call (PpxEngine *e, PpxSession *s, const int *user, const int *agent, int text,
                             const float *embedding, int *out);
/* ---- prompt prefill (prompt-prefill.c) ---- */
/* The largest chunk an engine made with `params` uses (params, else PPX_PROMPT_CHUNK, else the default). */
int ppx_engine_prompt_chunk_for (const PpxEngineParams *params);
/* Sets up e->prefill and e->clock for e->prompt_chunk (at creation). */
gboolean ppx_engine_prompt_init (PpxEngine *e, GError **error);
/* Runs n prompt frames of session s in chunks of one temporal pass each, one chunk per hold of the lock, sized
 * to end before the next tick is due. Takes and releases the lock itself. */
void ppx_engine_run_prompt (PpxEngine *e, PpxSession *s, const PpxPromptFrame *f, int n);
/* The largest chunk from now on: n <= 1 runs the prompts step by step; at most what the prefill scratch holds
 * (benchmarks compare the two on one engine). */
void ppx_engine_set_prompt_chunk (PpxEngine *e, int n);
/* A copy of the schedule's state and counters. */
void ppx_engine_prompt_clock (PpxEngine *e, PpxPromptClock *out);

/* ---- voice snapshots (voice-snapshot.c) ---- */
#define PPX_VOICE_SNAPSHOTS_DEFAULT 16
typedef struct PpxVoiceSnapshot PpxVoiceSnapshot;
/* The key of a voice prompt's phase (g_free). */
char *ppx_voice_snapshot_key (const PpxVoicePrompt *vp);
/* Takes the lock: when the engine keeps the voice `key`, copies its KV rows into s's slot and its LMGen state
 * into s->gen, and returns TRUE; FALSE (nothing changed) otherwise. */
gboolean ppx_engine_voice_restore (PpxEngine *e, PpxSession *s, const char *key);
/* Takes the lock: keeps s's voice phase (just run: s->gen after its last frame) as `key`, when it fits. */
void ppx_engine_voice_store (PpxEngine *e, PpxSession *s, const char *key);
/* Device bytes of the kept voices, and (may be NULL) how many. */
guint64 ppx_engine_voice_snapshot_bytes (PpxEngine *e, int *n_voices);
/* At most n voices from now on (0: none; the excess is dropped). */
void ppx_engine_set_voice_snapshots (PpxEngine *e, int n);
void ppx_engine_voice_snapshots_free (PpxEngine *e);

/* Tests: pad ticks to buckets as on a GPU, also on a backend without graphs (the CPU: there the padded and
 * unpadded ticks must agree bit for bit). Call before the first tick. */
void ppx_engine_force_buckets (PpxEngine *e, gboolean on);

#endif
