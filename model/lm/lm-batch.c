/* The LM step for a batch of sessions (spec §3.4-3.9): per-slot KV caches, row-batched scratch, one
 * temporal pass for M rows (each at its own position and slot), the text head, sampling with per-row
 * parameters and the depformer for all M rows; and the conversation tick, that step with LMGen prepare
 * and finish around it on the device (per-slot LMGen state), between the caller's codec stages, replayed
 * from one graph per row count when padded. */
#include "lm-internal.h"
#include "lmgen.h"
#include "tensor-plan.h"

#define W PPX_MAX_STREAMS /* row stride of the id, forced and token tensors */

struct PpxLmBatch {
  PpxLm *lm;
  int n_slots, R; /* R: max rows */
  PpxTensorType kv; /* the temporal KV caches' storage */
  PpxTensor **k, **v;   /* temporal ring caches, per layer [n_slots, context, dim] */
  PpxTensor **dk, **dv; /* depformer caches, per layer [R, dep_q, depformer_dim], indexed by row */
  LmPass t;  /* the tick's temporal pass: ids, positions and slots of its rows, the activations */
  LmActs dep; /* the depformer's activations */
  PpxTensor *dep_pos, *dep_slot, *z, *text_logits, *dlogits;
  PpxTensor *forced, *out, *prev, *params;
  PpxTensor **dlogit_step; /* views of dlogits, [dep_q][R, card] */
  PpxTensor **dep_pos_step; /* views of dep_pos, [dep_q][R] all = step */

  /* The conversation tick (lmgen-state.h): each slot's LMGen state on the device, and host mirrors of what
   * the device holds, so that a tick uploads only what changed. */
  PpxLmgenDims dims;
  PpxTensor *gen_state; /* [n_slots, PPX_LMGEN_STATE] i32 */
  int32_t *gen_held;    /* [n_slots, PPX_LMGEN_STATE]: what gen_state holds (STEPS word 0), where gen_known */
  gboolean *gen_known;  /* [n_slots] */
  int32_t *row_slot;    /* [R]: the slot tensor's rows as last uploaded by a tick */
  uint32_t *row_params; /* [R, PPX_SAMPLE_PARAMS]: the parameter rows as last uploaded by a tick */
  int rows_known;       /* how many of those rows are on the device (0 after ppx_lm_batch_step) */
  int32_t *host_out;    /* [R, PPX_LM_TICK_OUT]: the tick's words, downloaded */

  /* A padded tick's device work (stage encode, the LM, stage decode) as one graph per row count. */
  PpxGraph **graph;     /* [R + 1]: by rows, NULL until first needed */
  int *graph_failures;  /* [R + 1]: recordings that failed; a row count that fails 3 times runs eagerly */
  guint64 graph_nodes;  /* of the last graph recorded */
};

/* Every device tensor of a batch (b's tensor fields, or only the count when p->be is NULL). */
static void
batch_plan (PpxLmBatch *b, const PpxLmConfig *c, PpxTensorPlan *p)
{
  const gsize R = b->R;
  const int Ht = c->num_heads, Hd = c->depformer_num_heads;
  for (int l = 0; l < c->num_layers; l++) {
    b->k[l] = ppx_plan_kv_cache (p, b->kv, b->n_slots, c->context, Ht, c->dim / Ht);
    b->v[l] = ppx_plan_kv_cache (p, b->kv, b->n_slots, c->context, Ht, c->dim / Ht);
  }
  for (int l = 0; l < c->depformer_num_layers; l++) {
    b->dk[l] = ppx_plan_kv_cache (p, PPX_TENSOR_F32, b->R, c->dep_q, Hd, c->depformer_dim / Hd);
    b->dv[l] = ppx_plan_kv_cache (p, PPX_TENSOR_F32, b->R, c->dep_q, Hd, c->depformer_dim / Hd);
  }
  ppx_lm_plan_pass (&b->t, c, R, R, p);
  ppx_lm_plan_acts (&b->dep, R, c->depformer_dim, c->depformer_ffn_hidden, p);
  b->dep_pos = ppx_plan_tensor (p, PPX_TENSOR_I32, (gsize) c->dep_q * R);
  b->dep_slot = ppx_plan_tensor (p, PPX_TENSOR_I32, R);
  b->z = ppx_plan_tensor (p, PPX_TENSOR_F32, R * c->dim);
  b->text_logits = ppx_plan_tensor (p, PPX_TENSOR_F32, R * c->text_card);
  b->dlogits = ppx_plan_tensor (p, PPX_TENSOR_F32, (gsize) c->dep_q * R * c->card);
  b->forced = ppx_plan_tensor (p, PPX_TENSOR_I32, R * W);
  b->out = ppx_plan_tensor (p, PPX_TENSOR_I32, R * W);
  b->prev = ppx_plan_tensor (p, PPX_TENSOR_I32, R);
  b->params = ppx_plan_tensor (p, PPX_TENSOR_I32, R * PPX_SAMPLE_PARAMS);
  b->gen_state = ppx_plan_tensor (p, PPX_TENSOR_I32, (gsize) b->n_slots * PPX_LMGEN_STATE);
}

static PpxLmBatch *
batch_shell (const PpxLmConfig *c, int n_slots, int max_rows, PpxTensorType kv)
{
  PpxLmBatch *b = g_new0 (PpxLmBatch, 1);
  b->n_slots = n_slots;
  b->R = max_rows;
  b->kv = kv;
  b->k = g_new0 (PpxTensor *, c->num_layers);
  b->v = g_new0 (PpxTensor *, c->num_layers);
  b->dk = g_new0 (PpxTensor *, c->depformer_num_layers);
  b->dv = g_new0 (PpxTensor *, c->depformer_num_layers);
  return b;
}

guint64
ppx_lm_batch_bytes (const PpxLmConfig *c, int n_slots, int max_rows, PpxTensorType kv)
{
  PpxLmBatch *b = batch_shell (c, n_slots, max_rows, kv);
  PpxTensorPlan p = {0};
  batch_plan (b, c, &p);
  g_free (b->k);
  g_free (b->v);
  g_free (b->dk);
  g_free (b->dv);
  g_free (b);
  return p.bytes;
}

PpxLmBatch *
ppx_lm_batch_new (PpxLm *lm, int n_slots, int max_rows, PpxTensorType kv, GError **error)
{
  const PpxLmConfig *c = &lm->cfg;
  g_return_val_if_fail (n_slots > 0 && max_rows > 0, NULL);
  PpxLmBatch *b = batch_shell (c, n_slots, max_rows, kv);
  b->lm = lm;
  PpxTensorPlan p = {.be = lm->be, .error = error};
  batch_plan (b, c, &p);
  if (p.failed) {
    ppx_lm_batch_free (b);
    return NULL;
  }
  const int R = max_rows;
  b->dlogit_step = g_new0 (PpxTensor *, c->dep_q);
  b->dep_pos_step = g_new0 (PpxTensor *, c->dep_q);
  g_autofree int32_t *steps = g_new (int32_t, (gsize) c->dep_q * R);
  for (int s = 0; s < c->dep_q; s++) {
    b->dlogit_step[s] = ppx_tensor_view (b->dlogits, (gsize) s * R * c->card, (gsize) R * c->card);
    b->dep_pos_step[s] = ppx_tensor_view (b->dep_pos, (gsize) s * R, R);
    for (int m = 0; m < R; m++)
      steps[s * R + m] = s;
  }
  ppx_tensor_upload (b->dep_pos, 0, steps, (gsize) c->dep_q * R);
  for (int m = 0; m < R; m++)
    steps[m] = m; /* the depformer cache of row m is slot m: it lives for one frame */
  ppx_tensor_upload (b->dep_slot, 0, steps, R);
  ppx_lmgen_dims (c, &b->dims);
  b->gen_held = g_new0 (int32_t, (gsize) n_slots * PPX_LMGEN_STATE);
  b->gen_known = g_new0 (gboolean, n_slots);
  b->row_slot = g_new0 (int32_t, R);
  b->row_params = g_new0 (uint32_t, (gsize) R * PPX_SAMPLE_PARAMS);
  b->host_out = g_new0 (int32_t, (gsize) R * PPX_LM_TICK_OUT);
  b->graph = g_new0 (PpxGraph *, R + 1);
  b->graph_failures = g_new0 (int, R + 1);
  /* A free slot holds a harmless conversation state (valid tokens, past the output lag): a tick padded
   * to a bucket steps free slots as its extra rows. */
  PpxLmGen spare;
  ppx_lmgen_init (&spare, c);
  memset (spare.cache, 0, sizeof spare.cache);
  spare.offset = PPX_LMGEN_COLS;
  g_autofree int32_t *st = g_new (int32_t, (gsize) n_slots * PPX_LMGEN_STATE);
  for (int i = 0; i < n_slots; i++)
    ppx_lmgen_pack (&spare, st + (gsize) i * PPX_LMGEN_STATE);
  ppx_tensor_upload (b->gen_state, 0, st, (gsize) n_slots * PPX_LMGEN_STATE);
  return b;
}

void
ppx_lm_batch_free (PpxLmBatch *b)
{
  if (!b)
    return;
  const PpxLmConfig *c = b->lm ? &b->lm->cfg : NULL;
  for (int s = 0; c && b->dlogit_step && s < c->dep_q; s++) {
    ppx_tensor_free (b->dlogit_step[s]);
    ppx_tensor_free (b->dep_pos_step[s]);
  }
  g_free (b->dlogit_step);
  g_free (b->dep_pos_step);
  for (int l = 0; c && l < c->num_layers; l++) {
    ppx_tensor_free (b->k[l]);
    ppx_tensor_free (b->v[l]);
  }
  for (int l = 0; c && l < c->depformer_num_layers; l++) {
    ppx_tensor_free (b->dk[l]);
    ppx_tensor_free (b->dv[l]);
  }
  g_free (b->k);
  g_free (b->v);
  g_free (b->dk);
  g_free (b->dv);
  ppx_lm_pass_free (&b->t);
  ppx_lm_acts_free (&b->dep);
  PpxTensor *ts[] = {b->dep_pos, b->dep_slot, b->z,    b->text_logits, b->dlogits,
                     b->forced,  b->out,      b->prev, b->params,      b->gen_state};
  for (guint i = 0; i < G_N_ELEMENTS (ts); i++)
    ppx_tensor_free (ts[i]);
  g_free (b->gen_held);
  g_free (b->gen_known);
  g_free (b->row_slot);
  g_free (b->row_params);
  g_free (b->host_out);
  for (int r = 0; b->graph && r <= b->R; r++)
    ppx_graph_free (b->graph[r]);
  g_free (b->graph);
  g_free (b->graph_failures);
  g_free (b);
}

/* ---- temporal transformer ---- */

void
ppx_lm_plan_acts (LmActs *a, gsize rows, gsize d, gsize F, PpxTensorPlan *p)
{
  a->x = ppx_plan_tensor (p, PPX_TENSOR_F32, rows * d);
  a->h = ppx_plan_tensor (p, PPX_TENSOR_F32, rows * d);
  a->qkv = ppx_plan_tensor (p, PPX_TENSOR_F32, rows * 3 * d);
  a->att = ppx_plan_tensor (p, PPX_TENSOR_F32, rows * d);
  a->ff = ppx_plan_tensor (p, PPX_TENSOR_F32, rows * 2 * F);
  a->u = ppx_plan_tensor (p, PPX_TENSOR_F32, rows * F);
}

void
ppx_lm_acts_free (LmActs *a)
{
  PpxTensor *ts[] = {a->x, a->h, a->qkv, a->att, a->ff, a->u};
  for (guint i = 0; i < G_N_ELEMENTS (ts); i++)
    ppx_tensor_free (ts[i]);
}

void
ppx_lm_plan_pass (LmPass *pass, const PpxLmConfig *c, gsize rows, gsize slots, PpxTensorPlan *p)
{
  pass->ids = ppx_plan_tensor (p, PPX_TENSOR_I32, rows * W);
  pass->pos = ppx_plan_tensor (p, PPX_TENSOR_I32, rows);
  pass->slot = ppx_plan_tensor (p, PPX_TENSOR_I32, slots);
  ppx_lm_plan_acts (&pass->a, rows, c->dim, c->ffn_hidden, p);
}

void
ppx_lm_pass_free (LmPass *pass)
{
  ppx_tensor_free (pass->ids);
  ppx_tensor_free (pass->pos);
  ppx_tensor_free (pass->slot);
  ppx_lm_acts_free (&pass->a);
}

void
ppx_lm_embed_rows (PpxLm *lm, const LmPass *p, int rows)
{
  for (int k = 0; k < lm->cfg.n_q; k++)
    ppx_op_embed (lm->be, lm->emb[k], p->ids, 1 + k, W, p->a.x, rows, k > 0);
  ppx_op_embed (lm->be, lm->text_emb, p->ids, 0, W, p->a.x, rows, TRUE);
}

void
ppx_lm_temporal_layers (PpxLm *lm, const LmPass *p, PpxTensor *const *k, PpxTensor *const *v, int M, int T)
{
  PpxBackend *be = lm->be;
  const PpxLmConfig *c = &lm->cfg;
  const int d = c->dim, H = c->num_heads, Dh = d / H, F = c->ffn_hidden, rows = M * T;
  const LmActs *a = &p->a;
  for (int l = 0; l < c->num_layers; l++) {
    const LmLayer *L = &lm->layers[l];
    ppx_op_rmsnorm_linear (be, a->x, L->norm1, RMS_EPS, a->h, L->in_proj, a->qkv, 3 * d, rows, FALSE);
    ppx_op_rope (be, a->qkv, p->pos, rows, H, Dh, (float) c->max_period);
    ppx_op_attention (be, a->qkv, p->pos, p->slot, k[l], v[l], a->att, M, T, H, Dh, c->context, c->context);
    ppx_op_linear (be, L->out_proj, a->att, d, a->x, d, rows, TRUE);
    ppx_op_rmsnorm_linear (be, a->x, L->norm2, RMS_EPS, a->h, L->linear_in, a->ff, 2 * F, rows, FALSE);
    ppx_op_silu_gate_linear (be, a->ff, a->u, L->linear_out, a->x, d, rows, TRUE);
  }
}

PpxTensor *
ppx_lm_batch_cache (PpxLmBatch *b, int layer, gboolean value)
{
  g_return_val_if_fail (layer >= 0 && layer < b->lm->cfg.num_layers, NULL);
  return value ? b->v[layer] : b->k[layer];
}

PpxTensor *const *
ppx_lm_batch_kcache (PpxLmBatch *b)
{
  return b->k;
}

PpxTensor *const *
ppx_lm_batch_vcache (PpxLmBatch *b)
{
  return b->v;
}

/* The tick's pass (b->t): M sessions, one frame each, in the batch's row scratch. */
static void
temporal_layers (PpxLmBatch *b, int M)
{
  ppx_lm_temporal_layers (b->lm, &b->t, b->k, b->v, M, 1);
  ppx_op_rmsnorm (b->lm->be, b->t.a.x, b->lm->out_norm, b->z, M, b->lm->cfg.dim, RMS_EPS);
}

/* ---- depformer ---- */

static void
depformer_step (PpxLmBatch *b, int step, int M)
{
  PpxLm *lm = b->lm;
  PpxBackend *be = lm->be;
  const PpxLmConfig *c = &lm->cfg;
  const LmActs *a = &b->dep;
  const int dd = c->depformer_dim, H = c->depformer_num_heads, Dh = dd / H;
  ppx_op_linear (be, lm->dep_in[step], b->z, c->dim, a->x, dd, M, FALSE);
  ppx_op_embed (be, step == 0 ? lm->dep_text_emb : lm->dep_emb[step - 1], b->prev, 0, 1, a->x, M, TRUE);
  const DepLayer *L0 = &lm->dep_layers[0];
  ppx_op_rmsnorm_linear (be, a->x, L0->norm1, RMS_EPS, a->h, L0->in_proj[step], a->qkv, 3 * dd, M, FALSE);
  for (int l = 0; l < c->depformer_num_layers; l++) {
    const DepLayer *L = &lm->dep_layers[l];
    /* no positional encoding; the ring of dep_q positions per row reproduces the reference's per-frame
     * cache (entries of the previous frame sit at positions > step and are never attended) */
    ppx_op_attention (be, a->qkv, b->dep_pos_step[step], b->dep_slot, b->dk[l], b->dv[l], a->att, M, 1, H, Dh,
                      c->dep_q, G_MAXINT);
    /* the rest of the layer, then the next layer's norm and input projection (or, after the last, the step's
     * logits): one op, one persistent kernel on the GPU */
    const gboolean last = l + 1 == c->depformer_num_layers;
    const DepLayer *N = last ? NULL : &lm->dep_layers[l + 1];
    const PpxLayerTail t = {.att = a->att,
                            .out_proj = L->out_proj[step],
                            .linear_in = L->linear_in[step],
                            .linear_out = L->linear_out[step],
                            .next = last ? lm->linears[step] : N->in_proj[step],
                            .x = a->x,
                            .norm2 = L->norm2,
                            .next_norm = last ? NULL : N->norm1,
                            .h = a->h,
                            .ff = a->ff,
                            .u = a->u,
                            .y = last ? b->dlogit_step[step] : a->qkv,
                            .eps = RMS_EPS};
    ppx_op_layer_tail (be, &t, M);
  }
}

/* Text logits and sampling, then `n_steps` depformer steps with teacher forcing, for all M rows: b->forced
 * and b->params in place; the tokens stay in b->out. */
static void
sample_device (PpxLmBatch *b, int M, int n_steps)
{
  PpxLm *lm = b->lm;
  PpxBackend *be = lm->be;
  const PpxLmConfig *c = &lm->cfg;
  ppx_op_linear (be, lm->text_linear, b->z, c->dim, b->text_logits, c->text_card, M, FALSE);
  ppx_op_sample (be, b->text_logits, c->text_card, b->out, 0, W, b->params, 0, M);
  for (int step = 0; step < n_steps; step++) {
    /* the input of this step: the previous stream's token, provided where available */
    ppx_tensor_copy2d (b->prev, 0, 1, b->out, step, W, M, 1);
    ppx_op_force_tokens (be, b->prev, 0, 1, b->forced, step, W, M);
    depformer_step (b, step, M);
    ppx_op_sample (be, b->dlogit_step[step], c->card, b->out, 1 + step, W, b->params, 1 + step, M);
  }
}

/* The rows' forcing and sampling parameters uploaded, the device part, the tokens downloaded. */
static void
sample_rows (PpxLmBatch *b, PpxLmRow *rows, int M, int n_steps)
{
  const PpxLmConfig *c = &b->lm->cfg;
  g_autofree int32_t *f = g_new (int32_t, (gsize) M * W);
  g_autofree uint32_t *prm = g_new (uint32_t, (gsize) M * PPX_SAMPLE_PARAMS);
  for (int m = 0; m < M; m++) {
    const PpxLmRow *r = &rows[m];
    for (int k = 0; k < W; k++)
      f[m * W + k] = k <= c->dep_q && r->sample ? r->forced[k] : -1;
    ppx_lm_sample_params (&r->smp, r->frame, prm + (gsize) m * PPX_SAMPLE_PARAMS);
  }
  ppx_tensor_upload (b->forced, 0, f, (gsize) M * W);
  ppx_tensor_upload (b->params, 0, prm, (gsize) M * PPX_SAMPLE_PARAMS);
  sample_device (b, M, n_steps);
  g_autofree int32_t *o = g_new (int32_t, (gsize) M * W);
  ppx_tensor_download (b->out, 0, o, (gsize) M * W);
  for (int m = 0; m < M; m++)
    for (int k = 0; k <= n_steps; k++)
      rows[m].out[k] = o[m * W + k];
}

void
ppx_lm_sample_params (const PpxSampling *s, guint64 frame, uint32_t *row)
{
  ppx_sample_params_set (row, s->seed, frame, s->greedy ? 0.0f : s->temp_text, s->topk_text,
                         s->greedy ? 0.0f : s->temp_audio, s->topk_audio);
}

void
ppx_lm_batch_step (PpxLmBatch *b, PpxLmRow *rows, int M)
{
  const PpxLmConfig *c = &b->lm->cfg;
  g_return_if_fail (M > 0 && M <= b->R);
  g_autofree int32_t *ids = g_new (int32_t, (gsize) M * W);
  g_autofree int32_t *pos = g_new (int32_t, M), *slot = g_new (int32_t, M);
  gboolean any_emb = FALSE, any_sample = FALSE;
  int n_steps = 0;
  for (int m = 0; m < M; m++) {
    const PpxLmRow *r = &rows[m];
    g_return_if_fail (r->slot >= 0 && r->slot < b->n_slots);
    for (int k = 0; k < W; k++)
      ids[m * W + k] = k < c->n_streams && !r->emb ? r->ids[k] : -1;
    pos[m] = (int32_t) r->pos;
    slot[m] = r->slot;
    any_emb |= r->emb != NULL;
    if (r->sample) {
      any_sample = TRUE;
      n_steps = MAX (n_steps, CLAMP (r->n_steps, 0, c->dep_q));
    }
  }
  ppx_tensor_upload (b->t.ids, 0, ids, (gsize) M * W);
  ppx_tensor_upload (b->t.pos, 0, pos, M);
  ppx_tensor_upload (b->t.slot, 0, slot, M);
  b->rows_known = 0; /* the slot rows, and the parameter rows when a row samples, are this step's now */
  ppx_lm_embed_rows (b->lm, &b->t, M);
  for (int m = 0; any_emb && m < M; m++)
    if (rows[m].emb)
      ppx_tensor_upload (b->t.a.x, (gsize) m * c->dim, rows[m].emb, c->dim);
  for (int m = 0; m < M; m++)
    if (rows[m].capture)
      ppx_tensor_download (b->t.a.x, (gsize) m * c->dim, rows[m].capture, c->dim);
  temporal_layers (b, M);
  if (any_sample)
    sample_rows (b, rows, M, n_steps);
}

/* ---- the conversation tick ---- */

/* The tick's rows 0..M-1 go to the device where they changed: the slot and sampling parameter rows, and each
 * session's LMGen state where the host copy differs from what its slot holds. */
static void
upload_tick_rows (PpxLmBatch *b, const PpxLmTickRow *rows, int M)
{
  g_return_if_fail (M > 0 && M <= b->R);
  int lo = M, hi = 0; /* the slot and parameter rows that changed */
  for (int m = 0; m < M; m++) {
    const PpxLmTickRow *r = &rows[m];
    g_return_if_fail (r->slot >= 0 && r->slot < b->n_slots);
    int32_t *held = b->gen_held + (gsize) r->slot * PPX_LMGEN_STATE;
    if (r->gen) {
      int32_t st[PPX_LMGEN_STATE];
      ppx_lmgen_pack (r->gen, st);
      if (!b->gen_known[r->slot] || memcmp (st, held, sizeof st) != 0) {
        ppx_tensor_upload (b->gen_state, (gsize) r->slot * PPX_LMGEN_STATE, st, PPX_LMGEN_STATE);
        memcpy (held, st, sizeof st);
        b->gen_known[r->slot] = TRUE;
      }
    } else {
      b->gen_known[r->slot] = FALSE; /* a padding row: the tick moves the free slot's state on */
    }
    uint32_t prm[PPX_SAMPLE_PARAMS];
    const PpxSampling greedy = {.greedy = TRUE};
    ppx_lm_sample_params (r->gen ? r->smp : &greedy, 0, prm); /* the frame words come from LMGen prepare */
    uint32_t *have = b->row_params + (gsize) m * PPX_SAMPLE_PARAMS;
    have[PPX_SAMPLE_FRAME_LO] = have[PPX_SAMPLE_FRAME_HI] = 0;
    if (m >= b->rows_known || b->row_slot[m] != r->slot || memcmp (have, prm, sizeof prm) != 0) {
      b->row_slot[m] = r->slot;
      memcpy (have, prm, sizeof prm);
      lo = MIN (lo, m);
      hi = MAX (hi, m + 1);
    }
  }
  if (lo < hi) {
    ppx_tensor_upload (b->t.slot, lo, b->row_slot + lo, hi - lo);
    ppx_tensor_upload (b->params, (gsize) lo * PPX_SAMPLE_PARAMS, b->row_params + (gsize) lo * PPX_SAMPLE_PARAMS,
                       (gsize) (hi - lo) * PPX_SAMPLE_PARAMS);
  }
  b->rows_known = MAX (b->rows_known, M);
}

/* The plan of a tick: every session past the output lag (FALSE, plan->late: nothing changed), the depformer
 * steps, the padding when those steps fit; its rows go to the device. */
static gboolean
plan_tick (PpxLmBatch *b, const PpxLmTick *t, PpxLmTickPlan *plan)
{
  const PpxLmConfig *c = &b->lm->cfg;
  *plan = (PpxLmTickPlan){.rows = t->n, .n_steps = -1, .padded = FALSE, .graphed = FALSE, .late = -1};
  for (int m = 0; m < t->n; m++) {
    int steps;
    gboolean sample;
    if (t->rows[m].gen->offset <= c->max_delay || !ppx_lmgen_peek_conversation (t->rows[m].gen, &steps, &sample)) {
      plan->late = m;
      return FALSE;
    }
    if (sample)
      plan->n_steps = MAX (plan->n_steps, CLAMP (steps, 0, c->dep_q));
  }
  /* the padding rows run the depformer steps of the graph: enough when the sessions need no more */
  plan->padded = t->n_pad >= 0 && plan->n_steps <= t->pad_steps;
  if (plan->padded) {
    plan->rows = t->n + t->n_pad;
    plan->n_steps = t->pad_steps;
  }
  upload_tick_rows (b, t->rows, plan->rows);
  return TRUE;
}

/* The device work of a tick: the stage's encode, LMGen prepare, the temporal step, then, when n_steps >= 0,
 * the text head, sampling and the depformer steps, LMGen finish into t->out, the stage's decode. Only
 * enqueues: nothing is uploaded or downloaded, so a graph can record it. */
static void
enqueue_tick (PpxLmBatch *b, const PpxLmTick *t, const PpxLmTickPlan *plan)
{
  PpxBackend *be = b->lm->be;
  const int M = plan->rows;
  t->stage.encode (t->stage.data, plan);
  ppx_op_lmgen_prepare (be, &b->dims, b->gen_state, b->t.slot, t->codes, t->code_off, t->code_stride, b->t.ids,
                        b->forced, b->t.pos, b->params, M);
  ppx_lm_embed_rows (b->lm, &b->t, M);
  temporal_layers (b, M);
  if (plan->n_steps >= 0)
    sample_device (b, M, plan->n_steps);
  ppx_op_lmgen_finish (be, &b->dims, b->gen_state, b->t.slot, b->out, t->out, PPX_LM_TICK_OUT, M);
  t->stage.decode (t->stage.data, plan);
}

/* Runs a padded tick from its graph, recording it first when needed. FALSE: it could not (the caller runs
 * the tick op by op). */
static gboolean
replay_tick (PpxLmBatch *b, const PpxLmTick *t, const PpxLmTickPlan *plan)
{
  PpxBackend *be = b->lm->be;
  const int M = plan->rows;
  if (b->graph_failures[M] >= 3)
    return FALSE;
  for (int attempt = 0; attempt < 3; attempt++) {
    if (!b->graph[M]) {
      g_autoptr (GError) err = NULL;
      if (!ppx_backend_graph_begin (be, &err)) {
        b->graph_failures[M]++;
        g_debug ("LM tick: no graph for %d rows: %s", M, err->message);
        return FALSE;
      }
      enqueue_tick (b, t, plan);
      b->graph[M] = ppx_backend_graph_end (be, &err);
      if (!b->graph[M]) { /* e.g. scratch memory allocated now: record again */
        g_debug ("LM tick: recording the %d-row tick: %s", M, err->message);
        continue;
      }
      b->graph_nodes = ppx_graph_nodes (b->graph[M]);
    }
    if (ppx_backend_graph_launch (be, b->graph[M]))
      return TRUE;
    ppx_graph_free (b->graph[M]); /* stale: the backend's scratch moved */
    b->graph[M] = NULL;
  }
  if (++b->graph_failures[M] >= 3)
    g_warning ("LM tick: the %d-row tick could not be recorded as a graph; it runs op by op", M);
  return FALSE;
}

gboolean
ppx_lm_batch_run_tick (PpxLmBatch *b, const PpxLmTick *t, int (*tokens)[PPX_MAX_STREAMS], PpxLmTickPlan *plan)
{
  g_return_val_if_fail (t->n > 0 && t->n <= b->R && t->pad_steps <= b->lm->cfg.dep_q, FALSE);
  if (!plan_tick (b, t, plan))
    return FALSE;
  plan->graphed = plan->padded && t->graphs && replay_tick (b, t, plan);
  if (!plan->graphed)
    enqueue_tick (b, t, plan);
  /* after: each session's host LMGen takes its state from its row, whose tokens go to the caller */
  ppx_tensor_download (t->out, 0, b->host_out, (gsize) t->n * PPX_LM_TICK_OUT);
  for (int m = 0; m < t->n; m++) {
    const PpxLmTickRow *r = &t->rows[m];
    const int32_t *words = b->host_out + (gsize) m * PPX_LM_TICK_OUT; /* tokens, then the state */
    for (int k = 0; k < PPX_MAX_STREAMS; k++)
      tokens[m][k] = words[k];
    ppx_lmgen_unpack (r->gen, words + PPX_MAX_STREAMS);
    ppx_lmgen_pack (r->gen, b->gen_held + (gsize) r->slot * PPX_LMGEN_STATE); /* what the slot holds now */
    b->gen_known[r->slot] = TRUE;
  }
  return TRUE;
}

int
ppx_lm_batch_graphs (const PpxLmBatch *b, guint64 *last_nodes)
{
  int n = 0;
  for (int r = 0; r <= b->R; r++)
    n += b->graph[r] != NULL;
  if (last_nodes)
    *last_nodes = b->graph_nodes;
  return n;
}

void
ppx_lm_batch_text_logits (PpxLmBatch *b, int row, float *out)
{
  const int V = b->lm->cfg.text_card;
  ppx_tensor_download (b->text_logits, (gsize) row * V, out, V);
}

void
ppx_lm_batch_audio_logits (PpxLmBatch *b, int row, int step, float *out)
{
  const int V = b->lm->cfg.card;
  ppx_tensor_download (b->dlogits, ((gsize) step * b->R + row) * V, out, V);
}
