/* The PersonaPlex LM (spec §3): temporal transformer + depformer, one frame at a time for a batch of
 * sessions. The weights (PpxLm) are read-only and shared; a PpxLmBatch holds the per-session KV caches of
 * n_slots sessions and the scratch of a batch of up to max_rows rows, and steps M rows at once, each at
 * its own position, KV slot, teacher forcing and sampling parameters (docs/engine.md). */
#ifndef PPX_LM_H
#define PPX_LM_H

#include "backend.h"
#include "config.h"
#include "safetensors.h"

G_BEGIN_DECLS

typedef struct PpxLm PpxLm;
typedef struct PpxLmBatch PpxLmBatch;
typedef struct PpxLmGen PpxLmGen; /* lmgen.h */

typedef struct {
  gboolean greedy;
  guint64 seed;
  float temp_text, temp_audio;
  int topk_text, topk_audio;
} PpxSampling;

PpxLm *ppx_lm_load (PpxBackend *be, const PpxLmConfig *cfg, const PpxSafetensors *st, PpxQuantization quant,
                    GError **error);
void ppx_lm_free (PpxLm *lm);
guint64 ppx_lm_weight_bytes (const PpxLm *lm);
const PpxLmConfig *ppx_lm_config (const PpxLm *lm);

/* One row (one session) of a batched step: the inputs, filled by the caller (ppx_lmgen_prepare fills all
 * but `slot`), and the sampled tokens. */
typedef struct {
  int slot;                    /* the session's KV cache slot, < n_slots */
  gint64 pos;                  /* the temporal position of this step (model calls since the reset) */
  int ids[PPX_MAX_STREAMS];    /* the n_streams input ids (text first; -1 gives zeros), unless emb */
  const float *emb;            /* NULL, or dim floats that replace the summed input embedding */
  float *capture;              /* NULL, or dim floats that receive the input embedding */
  gboolean sample;             /* text logits, text sampling and the depformer (FALSE: temporal only) */
  int forced[PPX_MAX_STREAMS]; /* text, then audio 1..dep_q: the provided token, or -1 */
  int n_steps;                 /* depformer steps this row needs (it may get more, with forced inputs) */
  PpxSampling smp;
  guint64 frame;               /* the Philox frame of this row's draws */
  int out[PPX_MAX_STREAMS];    /* out: the sampled tokens 0..n_steps (always the sample, as the reference) */
} PpxLmRow;

/* kv: the temporal KV caches' storage, F32, BF16 or FP8 (ppx_kv_storage). max_rows <= n_slots is not required. Every slot's device LMGen
 * state (the conversation tick, below) starts as a harmless conversation state, so a free slot can be
 * stepped as a padding row. */
PpxLmBatch *ppx_lm_batch_new (PpxLm *lm, int n_slots, int max_rows, PpxTensorType kv, GError **error);
void ppx_lm_batch_free (PpxLmBatch *b);
/* Device bytes ppx_lm_batch_new allocates for these sizes. */
guint64 ppx_lm_batch_bytes (const PpxLmConfig *cfg, int n_slots, int max_rows, PpxTensorType kv);

/* One temporal step for rows[0..M) (M <= max_rows, distinct slots), then, when any row has `sample`,
 * the text head, sampling and max(n_steps) depformer steps for all M rows. A row's results depend only on
 * its own inputs and its slot's cache. Fills rows[m].out for the sampling rows. */
void ppx_lm_batch_step (PpxLmBatch *b, PpxLmRow *rows, int M);
/* The sampling parameter words of a row (sample-params.h; greedy: temperatures 0). */
void ppx_lm_sample_params (const PpxSampling *s, guint64 frame, uint32_t *row);

/* ---- prompt prefill: consecutive prompt frames of one session as one temporal pass of T rows ----
 * Prompt frames have every stream provided (spec §5.5, §5.9): only the temporal transformer runs; no text
 * head, sampling or depformer. A PpxLmPrefill is a scratch of up to max_rows rows of its own (the tick's rows
 * and graphs are not touched) over a batch's KV caches. Each row computes what a single-row
 * ppx_lm_batch_step of it would: the linear layers, norms and RoPE per row, and the attention of row t over
 * the slot's cache and the new keys of rows <= t, with the window of a frame of its own (see
 * ppx_lm_prefill_row_fits). */
typedef struct PpxLmPrefill PpxLmPrefill;

/* max_rows is clamped to [1, context - 1] (no chunk can be longer: ppx_lm_prefill_row_fits). */
PpxLmPrefill *ppx_lm_prefill_new (PpxLm *lm, PpxLmBatch *b, int max_rows, GError **error);
void ppx_lm_prefill_free (PpxLmPrefill *f);
int ppx_lm_prefill_max_rows (const PpxLmPrefill *f);
/* max_rows as ppx_lm_prefill_new clamps it, and the device bytes of such a scratch. */
int ppx_lm_prefill_rows_for (const PpxLmConfig *cfg, int max_rows);
guint64 ppx_lm_prefill_bytes (const PpxLmConfig *cfg, int max_rows);
/* Whether a prompt frame at position pos can be row t (t = 0, 1, ...) of a chunk and give the bits of a
 * frame of its own: the first row always; a later one while the chunk ends before the ring's last index
 * (pos <= context - 2). Past that (prompts longer than the context) the frames go one a chunk. */
gboolean ppx_lm_prefill_row_fits (const PpxLmConfig *cfg, int t, gint64 pos);
/* rows[0..T) (T <= max_rows): prepared prompt rows (ppx_lmgen_prepare: ids or emb, pos, capture) of the session
 * on `slot`, at consecutive positions, each fitting. Fills the slot's caches at those positions and the rows'
 * capture buffers; enqueues the device work (a capture downloads). `sample` and `forced` are not read. */
void ppx_lm_prefill (PpxLmPrefill *f, int slot, const PpxLmRow *rows, int T);

/* The temporal K (value FALSE) or V cache of `layer`, [n_slots, context, dim] in the batch's KV format (tests). */
PpxTensor *ppx_lm_batch_cache (PpxLmBatch *b, int layer, gboolean value);

/* ---- the conversation tick: LMGen prepare, the step and LMGen finish on the device ----
 * During the conversation each slot's LMGen state (lmgen.h, as the words of lmgen-state.h) lives on the
 * device, and a tick runs one LMGen call for M rows with no host round trip inside: what the engine
 * sees is encode -> ppx_lm_batch_tick -> decode. Prompts run the host LMGen with ppx_lm_batch_step; the
 * host copy of a session's state is uploaded where it changed, and after a tick the host copy takes the
 * state the device computed. */

/* Words of one row of the tick's output: the frame's PPX_MAX_STREAMS tokens (lmgen-state.h's finish),
 * then the row's LMGen state after the call. */
#define PPX_LM_TICK_OUT (PPX_MAX_STREAMS + PPX_LMGEN_STATE)

typedef struct {
  int slot;               /* the row's KV cache and LMGen slot */
  PpxLmGen *gen;          /* the session's LMGen (host copy); NULL: a padding row on a free slot (greedy) */
  const PpxSampling *smp; /* the session's sampling (unused for padding) */
} PpxLmTickRow;

/* What ppx_lm_batch_tick_rows decided for a tick. */
typedef struct {
  int rows;         /* the tick's rows M: the sessions, and the padding when taken */
  int n_steps;      /* depformer steps the sessions' rows need (-1: none samples) */
  gboolean padded;  /* the padding rows were taken */
  int late;         /* FALSE returned: the first session row still inside the model's output lag; else -1 */
} PpxLmTickPlan;

/* Before a tick, on the host: rows 0..n-1 are the sessions' rows (gen set), rows n..n+n_pad-1 padding rows on
 * free slots (gen NULL; n_pad < 0: none offered). Checks that every session is past the model's output lag
 * (FALSE, plan->late set and nothing changed when one is not), finds the depformer steps the sessions need,
 * and takes the padding when those are at most pad_steps. Each row m < plan->rows becomes row m of the tick:
 * its slot and sampling parameters, and its session's LMGen state where the host copy differs from what the
 * slot holds, go to the device; what the device holds already is not uploaded again. */
gboolean ppx_lm_batch_tick_rows (PpxLmBatch *b, const PpxLmTickRow *rows, int n, int n_pad, int pad_steps,
                                 PpxLmTickPlan *plan);
/* The model tick of rows 0..M-1: LMGen prepare (row m's user codes are codes[m*code_stride + code_off +
 * q]), the temporal step, then, when n_steps >= 0, the text head, sampling and n_steps depformer steps,
 * and LMGen finish, whose rows go to out (row m at m*out_stride, PPX_LM_TICK_OUT words). Only enqueues
 * device work: nothing is uploaded or downloaded, so a graph can record it. */
void ppx_lm_batch_tick (PpxLmBatch *b, const PpxTensor *codes, int code_off, int code_stride, int M, int n_steps,
                        PpxTensor *out, int out_stride);
/* After the tick's out was downloaded to host_out: the host copy of each of the n session rows' LMGen
 * takes its state after the call, and tokens[m] gets row m's frame: text, agent codes, user codes. */
void ppx_lm_batch_tick_done (PpxLmBatch *b, const PpxLmTickRow *rows, int n, const int32_t *host_out,
                             int out_stride, int (*tokens)[PPX_MAX_STREAMS]);
/* Logits of row `row` of the last sampling step (text_card floats; card floats of depformer step `step`). */
void ppx_lm_batch_text_logits (PpxLmBatch *b, int row, float *out);
void ppx_lm_batch_audio_logits (PpxLmBatch *b, int row, int step, float *out);

G_END_DECLS
#endif
