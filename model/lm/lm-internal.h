/* Private: the LM's weights, shared by lm.c (loading), lm-batch.c (the batched step) and lm-prefill.c (the
 * prompt prefill); the temporal pass both of the latter run. */
#ifndef PPX_LM_INTERNAL_H
#define PPX_LM_INTERNAL_H

#include "lm.h"
#include "tensor-plan.h"

#define RMS_EPS 1e-8f

typedef struct {
  PpxWeight *in_proj, *out_proj, *linear_in, *linear_out;
  PpxTensor *norm1, *norm2;
} LmLayer;

typedef struct {
  PpxWeight *in_full, *out_full;   /* stacked per-step attention weights */
  PpxWeight **in_proj, **out_proj; /* slices, one per step */
  PpxWeight **linear_in, **linear_out;
  PpxTensor *norm1, *norm2;
} DepLayer;

struct PpxLm {
  PpxBackend *be;
  PpxLmConfig cfg;
  PpxWeight **emb, *text_emb, *text_linear;
  PpxTensor *out_norm;
  LmLayer *layers;
  PpxWeight **dep_in, **dep_emb, *dep_text_emb, **linears;
  DepLayer *dep_layers;
  guint64 bytes;
};

/* The activations of a transformer's layers over `rows` rows (width d, feed-forward hidden F): x the residual
 * stream [rows, d], h its norm [rows, d], qkv [rows, 3d], att [rows, d], ff the gated pair [rows, 2F] and u the
 * gate's output [rows, F]. The temporal transformer and the depformer each run over one. */
typedef struct {
  PpxTensor *x, *h, *qkv, *att, *ff, *u;
} LmActs;

/* Plans (tensor-plan.h) a set of activations; ppx_lm_acts_free frees them. */
void ppx_lm_plan_acts (LmActs *a, gsize rows, gsize d, gsize F, PpxTensorPlan *p);
void ppx_lm_acts_free (LmActs *a);

/* The device tensors of one temporal pass over `rows` = M sessions x T consecutive frames: input ids [rows,
 * PPX_MAX_STREAMS], positions [rows], KV slots [M], and the activations (a.x: the residual stream). */
typedef struct {
  PpxTensor *ids, *pos, *slot;
  LmActs a;
} LmPass;

/* Plans a pass of at most `rows` rows and `slots` sessions (the tick's M rows, a prefill's 1);
 * ppx_lm_pass_free frees it. */
void ppx_lm_plan_pass (LmPass *pass, const PpxLmConfig *c, gsize rows, gsize slots, PpxTensorPlan *p);
void ppx_lm_pass_free (LmPass *pass);

/* x[r] = emb[0](c1) + ... + emb[15](c16) + text_emb(c0) of the pass's ids, in that order (spec pitfall 3). */
void ppx_lm_embed_rows (PpxLm *lm, const LmPass *p, int rows);
/* The temporal transformer's layers over M sessions x T frames, in place on p->x (no out_norm): rows of a
 * session in order at their positions, attending its slot of the caches k[layer], v[layer] (ppx_op_attention). */
void ppx_lm_temporal_layers (PpxLm *lm, const LmPass *p, PpxTensor *const *k, PpxTensor *const *v, int M, int T);
/* The temporal KV caches of a batch, one per layer. */
PpxTensor *const *ppx_lm_batch_kcache (PpxLmBatch *b);
PpxTensor *const *ppx_lm_batch_vcache (PpxLmBatch *b);

#endif
