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

/* ---- the conversation tick: one call, LMGen prepare, the step and LMGen finish on the device ----
 * During the conversation each slot's LMGen state (lmgen.h, as the words of lmgen-state.h) lives on the
 * device, and a tick runs one LMGen call for M rows with no host round trip inside. The caller's codec (the
 * engine's Mimi) is a stage of the tick: ppx_lm_batch_run_tick plans the tick on the host, enqueues
 * encode -> the LM's device work -> decode (or replays them as one graph), downloads the rows' words and
 * hands back their tokens. Prompts run the host LMGen with ppx_lm_batch_step; the host copy of a session's
 * state is uploaded where it changed, and after a tick the host copy takes the state the device computed. */

/* Words of one row of the tick's output: the frame's PPX_MAX_STREAMS tokens (lmgen-state.h's finish),
 * then the row's LMGen state after the call. */
#define PPX_LM_TICK_OUT (PPX_MAX_STREAMS + PPX_LMGEN_STATE)

typedef struct {
  int slot;               /* the row's KV cache and LMGen slot */
  PpxLmGen *gen;          /* the session's LMGen (host copy); NULL: a padding row on a free slot (greedy) */
  const PpxSampling *smp; /* the session's sampling (unused for padding) */
} PpxLmTickRow;

/* What ppx_lm_batch_run_tick decided for a tick. */
typedef struct {
  int rows;         /* the tick's rows M: the sessions, and the padding when taken */
  int n_steps;      /* depformer steps the tick runs (-1: none samples) */
  gboolean padded;  /* the padding rows were taken */
  gboolean graphed; /* the device work was replayed from its graph */
  int late;         /* FALSE returned: the first session row still inside the model's output lag; else -1 */
} PpxLmTickPlan;

/* The caller's part of the device work, enqueued around the LM's (and recorded with it into a padded
 * tick's graph, so nothing in them may upload, download or depend on host values that change between
 * replays): encode writes rows 0..plan->rows-1's user codes into the tick's codes, decode reads their agent
 * codes (words 1..) from the tick's out. */
typedef struct {
  void (*encode) (void *data, const PpxLmTickPlan *plan);
  void (*decode) (void *data, const PpxLmTickPlan *plan);
  void *data;
} PpxLmTickStage;

typedef struct {
  const PpxLmTickRow *rows; /* rows[0..n): the sessions; rows[n..n+n_pad): padding rows on free slots offered
                             * (n_pad < 0: none) */
  int n, n_pad;
  int pad_steps;            /* depformer steps of a padded tick: the padding is taken when the sessions need no
                             * more */
  gboolean graphs;          /* a padded tick replays its graph (one per row count, recorded when first needed; a
                             * row count whose recording fails 3 times runs op by op). A graph replays the
                             * tensors and the stage work of the tick that recorded it: pass the same ones, and
                             * the same pad_steps, every tick */
  const PpxTensor *codes;   /* row m's user codes at m * code_stride + code_off + q (the stage's encode) */
  int code_off, code_stride;
  PpxTensor *out;           /* [max_rows, PPX_LM_TICK_OUT] i32: row m's words (the stage's decode reads them) */
  PpxLmTickStage stage;
} PpxLmTick;

/* One conversation tick. On the host, before: checks that every session is past the model's output lag
 * (FALSE, plan->late set and nothing run when one is not), finds the depformer steps the sessions need, takes
 * the padding when those are at most pad_steps, and uploads each row's slot and sampling parameters and its
 * session's LMGen state where they differ from what the device holds. On the device: stage encode, LMGen
 * prepare (row m's user codes from codes), the temporal step, when any row samples the text head, sampling
 * and the depformer steps, LMGen finish into out, stage decode: from the graph of plan->rows rows when the
 * tick is padded and graphs are on. After: out's session rows are downloaded (one wait for the device), each
 * session's host LMGen takes its state after the call, and tokens[m] gets row m's frame: text, agent codes,
 * user codes. */
gboolean ppx_lm_batch_run_tick (PpxLmBatch *b, const PpxLmTick *t, int (*tokens)[PPX_MAX_STREAMS],
                                PpxLmTickPlan *plan);
/* Graphs held (one per padded row count used) and the node count of the last one recorded. */
int ppx_lm_batch_graphs (const PpxLmBatch *b, guint64 *last_nodes);
/* Logits of row `row` of the last sampling step (text_card floats; card floats of depformer step `step`). */
void ppx_lm_batch_text_logits (PpxLmBatch *b, int row, float *out);
void ppx_lm_batch_audio_logits (PpxLmBatch *b, int row, int step, float *out);

G_END_DECLS
#endif
