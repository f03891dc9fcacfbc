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

/* kv_format: F32, BF16 or FP8 (not AUTO). max_rows <= n_slots is not required. */
PpxLmBatch *ppx_lm_batch_new (PpxLm *lm, int n_slots, int max_rows, PpxKvFormat kv_format, GError **error);
void ppx_lm_batch_free (PpxLmBatch *b);
/* Device bytes ppx_lm_batch_new allocates for these sizes. */
guint64 ppx_lm_batch_bytes (const PpxLmConfig *cfg, int n_slots, int max_rows, PpxKvFormat kv_format);

/* One temporal step for rows[0..M) (M <= max_rows, distinct slots), then, when any row has `sample`,
 * the text head, sampling and max(n_steps) depformer steps for all M rows. A row's results depend only on
 * its own inputs and its slot's cache. Fills rows[m].out for the sampling rows. */
void ppx_lm_batch_step (PpxLmBatch *b, PpxLmRow *rows, int M);
/* The sampling parameter words of a row (sample-params.h; greedy: temperatures 0). */
void ppx_lm_sample_params (const PpxSampling *s, guint64 frame, uint32_t *row);

/* ---- device-driven steps (no host round trip; the engine's conversation ticks) ----
 * The batch's row tensors, [max_rows, ...]: ids, forced and out [R, PPX_MAX_STREAMS] (out: the sampled
 * tokens), pos and slot [R], params [R, PPX_SAMPLE_PARAMS]. */
typedef struct {
  PpxTensor *ids, *forced, *out, *pos, *slot, *params;
} PpxLmBatchIo;
void ppx_lm_batch_io (PpxLmBatch *b, PpxLmBatchIo *io);
/* ppx_lm_batch_step for rows 0..M-1 whose inputs are in the io tensors already (written on the device,
 * e.g. by ppx_op_lmgen_prepare): the temporal step, then, when n_steps >= 0, the text head, sampling and
 * n_steps depformer steps for all rows. Only enqueues device work: nothing is uploaded or downloaded. */
void ppx_lm_batch_step_device (PpxLmBatch *b, int M, int n_steps);
/* Logits of row `row` of the last sampling step (text_card floats; card floats of depformer step `step`). */
void ppx_lm_batch_text_logits (PpxLmBatch *b, int row, float *out);
void ppx_lm_batch_audio_logits (PpxLmBatch *b, int row, int step, float *out);

G_END_DECLS
#endif
