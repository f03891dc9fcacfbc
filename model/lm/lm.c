/* PersonaPlex LM on a backend: loading, the temporal transformer step and the depformer (spec §3.2-3.9). */
#include "lm.h"

#include "weights.h"

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

struct PpxLmState {
  PpxLm *lm;
  gint64 pos;
  PpxTensor **k, **v;       /* temporal ring caches, per layer [context, dim] */
  PpxTensor **dk, **dv;     /* depformer caches, per layer [dep_q, depformer_dim] */
  PpxTensor *t_pos, *slot, *d_pos;
  PpxTensor *x, *h, *qkv, *att, *ff, *u, *z, *text_logits;
  PpxTensor *dx, *dh, *dqkv, *datt, *dff, *du, *dlogits;
  PpxTensor **dlogit_step; /* views into dlogits, one per step */
  PpxTensor *ids, *forced, *out, *prev, *rng;
};

static PpxTensor *
load_alpha (PpxLoader *ld, int64_t d, const char *name)
{
  return ppx_loader_tensor (ld, 3, 1, 1, d, "%s", name);
}

PpxLm *
ppx_lm_load (PpxBackend *be, const PpxLmConfig *cfg, const PpxSafetensors *st, PpxQuantization quant, GError **error)
{
  PpxLm *lm = g_new0 (PpxLm, 1);
  lm->be = be;
  lm->cfg = *cfg;
  PpxLoader ld;
  ppx_loader_init (&ld, be, st, quant);
  const int64_t d = cfg->dim, dd = cfg->depformer_dim, H = cfg->ffn_hidden, dH = cfg->depformer_ffn_hidden;
  const int nq = cfg->n_q, dq = cfg->dep_q;
  lm->emb = g_new0 (PpxWeight *, nq);
  for (int k = 0; k < nq; k++)
    lm->emb[k] = ppx_loader_table (&ld, cfg->card + 1, d, "emb.%d.weight", k);
  lm->text_emb = ppx_loader_table (&ld, cfg->text_card + 1, d, "text_emb.weight");
  lm->text_linear = ppx_loader_linear (&ld, 2, cfg->text_card, d, "text_linear.weight");
  lm->out_norm = load_alpha (&ld, d, "out_norm.alpha");
  lm->layers = g_new0 (LmLayer, cfg->num_layers);
  for (int l = 0; l < cfg->num_layers && !ld.error; l++) {
    LmLayer *L = &lm->layers[l];
    L->in_proj = ppx_loader_linear (&ld, 2, 3 * d, d, "transformer.layers.%d.self_attn.in_proj_weight", l);
    L->out_proj = ppx_loader_linear (&ld, 2, d, d, "transformer.layers.%d.self_attn.out_proj.weight", l);
    L->linear_in = ppx_loader_linear (&ld, 2, 2 * H, d, "transformer.layers.%d.gating.linear_in.weight", l);
    L->linear_out = ppx_loader_linear (&ld, 2, d, H, "transformer.layers.%d.gating.linear_out.weight", l);
    L->norm1 = ppx_loader_tensor (&ld, 3, 1, 1, d, "transformer.layers.%d.norm1.alpha", l);
    L->norm2 = ppx_loader_tensor (&ld, 3, 1, 1, d, "transformer.layers.%d.norm2.alpha", l);
  }
  lm->dep_in = g_new0 (PpxWeight *, dq);
  lm->linears = g_new0 (PpxWeight *, dq);
  lm->dep_emb = g_new0 (PpxWeight *, dq);
  for (int s = 0; s < dq; s++) {
    lm->dep_in[s] = ppx_loader_linear (&ld, 2, dd, d, "depformer_in.%d.weight", s);
    lm->linears[s] = ppx_loader_linear (&ld, 2, cfg->card, dd, "linears.%d.weight", s);
    if (s < dq - 1)
      lm->dep_emb[s] = ppx_loader_table (&ld, cfg->card + 1, dd, "depformer_emb.%d.weight", s);
  }
  lm->dep_text_emb = ppx_loader_table (&ld, cfg->text_card + 1, dd, "depformer_text_emb.weight");
  lm->dep_layers = g_new0 (DepLayer, cfg->depformer_num_layers);
  for (int l = 0; l < cfg->depformer_num_layers && !ld.error; l++) {
    DepLayer *L = &lm->dep_layers[l];
    L->in_full = ppx_loader_linear (&ld, 2, dq * 3 * dd, dd, "depformer.layers.%d.self_attn.in_proj_weight", l);
    L->out_full = ppx_loader_linear (&ld, 2, dq * dd, dd, "depformer.layers.%d.self_attn.out_proj.weight", l);
    L->norm1 = ppx_loader_tensor (&ld, 3, 1, 1, dd, "depformer.layers.%d.norm1.alpha", l);
    L->norm2 = ppx_loader_tensor (&ld, 3, 1, 1, dd, "depformer.layers.%d.norm2.alpha", l);
    L->in_proj = g_new0 (PpxWeight *, dq);
    L->out_proj = g_new0 (PpxWeight *, dq);
    L->linear_in = g_new0 (PpxWeight *, dq);
    L->linear_out = g_new0 (PpxWeight *, dq);
    for (int s = 0; s < dq && !ld.error; s++) {
      L->in_proj[s] = ppx_weight_slice_rows (L->in_full, s * 3 * dd, 3 * dd);
      L->out_proj[s] = ppx_weight_slice_rows (L->out_full, s * dd, dd);
      L->linear_in[s] = ppx_loader_linear (&ld, 2, 2 * dH, dd, "depformer.layers.%d.gating.%d.linear_in.weight", l, s);
      L->linear_out[s] = ppx_loader_linear (&ld, 2, dd, dH, "depformer.layers.%d.gating.%d.linear_out.weight", l, s);
    }
  }
  lm->bytes = ld.bytes;
  if (!ppx_loader_finish (&ld, error)) {
    ppx_lm_free (lm);
    return NULL;
  }
  return lm;
}

void
ppx_lm_free (PpxLm *lm)
{
  if (!lm)
    return;
  const PpxLmConfig *c = &lm->cfg;
  for (int k = 0; lm->emb && k < c->n_q; k++)
    ppx_weight_free (lm->emb[k]);
  g_free (lm->emb);
  ppx_weight_free (lm->text_emb);
  ppx_weight_free (lm->text_linear);
  ppx_tensor_free (lm->out_norm);
  for (int l = 0; lm->layers && l < c->num_layers; l++) {
    LmLayer *L = &lm->layers[l];
    ppx_weight_free (L->in_proj);
    ppx_weight_free (L->out_proj);
    ppx_weight_free (L->linear_in);
    ppx_weight_free (L->linear_out);
    ppx_tensor_free (L->norm1);
    ppx_tensor_free (L->norm2);
  }
  g_free (lm->layers);
  for (int s = 0; lm->dep_in && s < c->dep_q; s++) {
    ppx_weight_free (lm->dep_in[s]);
    ppx_weight_free (lm->linears[s]);
    ppx_weight_free (lm->dep_emb[s]);
  }
  g_free (lm->dep_in);
  g_free (lm->linears);
  g_free (lm->dep_emb);
  ppx_weight_free (lm->dep_text_emb);
  for (int l = 0; lm->dep_layers && l < c->depformer_num_layers; l++) {
    DepLayer *L = &lm->dep_layers[l];
    for (int s = 0; L->in_proj && s < c->dep_q; s++) {
      ppx_weight_free (L->in_proj[s]);
      ppx_weight_free (L->out_proj[s]);
      ppx_weight_free (L->linear_in[s]);
      ppx_weight_free (L->linear_out[s]);
    }
    g_free (L->in_proj);
    g_free (L->out_proj);
    g_free (L->linear_in);
    g_free (L->linear_out);
    ppx_weight_free (L->in_full);
    ppx_weight_free (L->out_full);
    ppx_tensor_free (L->norm1);
    ppx_tensor_free (L->norm2);
  }
  g_free (lm->dep_layers);
  g_free (lm);
}

guint64
ppx_lm_weight_bytes (const PpxLm *lm)
{
  return lm->bytes;
}

const PpxLmConfig *
ppx_lm_config (const PpxLm *lm)
{
  return &lm->cfg;
}

/* ---- state ---- */

static gboolean
new_caches (PpxBackend *be, int n, gsize elems, PpxTensor ***k, PpxTensor ***v, GError **error)
{
  *k = g_new0 (PpxTensor *, n + 1);
  *v = g_new0 (PpxTensor *, n + 1);
  for (int i = 0; i < n; i++)
    if (!((*k)[i] = ppx_tensor_new (be, PPX_TENSOR_F32, elems, error)) ||
        !((*v)[i] = ppx_tensor_new (be, PPX_TENSOR_F32, elems, error)))
      return FALSE;
  return TRUE;
}

static void
free_caches (PpxTensor **k, PpxTensor **v)
{
  for (int i = 0; k && k[i]; i++)
    ppx_tensor_free (k[i]);
  for (int i = 0; v && v[i]; i++)
    ppx_tensor_free (v[i]);
  g_free (k);
  g_free (v);
}

PpxLmState *
ppx_lm_state_new (PpxLm *lm, GError **error)
{
  PpxLmState *s = g_new0 (PpxLmState, 1);
  PpxBackend *be = lm->be;
  const PpxLmConfig *c = &lm->cfg;
  const gsize d = c->dim, dd = c->depformer_dim, H = c->ffn_hidden, dH = c->depformer_ffn_hidden;
  s->lm = lm;
#define T_F32(var, n) (var = ppx_tensor_new (be, PPX_TENSOR_F32, (n), error))
#define T_I32(var, n) (var = ppx_tensor_new (be, PPX_TENSOR_I32, (n), error))
  gboolean ok = new_caches (be, c->num_layers, (gsize) c->context * d, &s->k, &s->v, error) &&
                new_caches (be, c->depformer_num_layers, (gsize) c->dep_q * dd, &s->dk, &s->dv, error) &&
                T_I32 (s->t_pos, 1) && T_I32 (s->slot, 1) && T_I32 (s->d_pos, 1) && T_F32 (s->x, d) &&
                T_F32 (s->h, d) && T_F32 (s->qkv, 3 * d) && T_F32 (s->att, d) && T_F32 (s->ff, 2 * H) &&
                T_F32 (s->u, H) && T_F32 (s->z, d) && T_F32 (s->text_logits, c->text_card) && T_F32 (s->dx, dd) &&
                T_F32 (s->dh, dd) && T_F32 (s->dqkv, 3 * dd) && T_F32 (s->datt, dd) && T_F32 (s->dff, 2 * dH) &&
                T_F32 (s->du, dH) && T_F32 (s->dlogits, (gsize) c->dep_q * c->card) &&
                T_I32 (s->ids, PPX_MAX_STREAMS) && T_I32 (s->forced, PPX_MAX_STREAMS) &&
                T_I32 (s->out, PPX_MAX_STREAMS) && T_I32 (s->prev, 1) && T_I32 (s->rng, PPX_SAMPLE_PARAMS);
#undef T_F32
#undef T_I32
  if (!ok) {
    ppx_lm_state_free (s);
    return NULL;
  }
  s->dlogit_step = g_new0 (PpxTensor *, c->dep_q);
  for (int i = 0; i < c->dep_q; i++)
    s->dlogit_step[i] = ppx_tensor_view (s->dlogits, (gsize) i * c->card, c->card);
  ppx_tensor_fill (s->slot, 0);
  ppx_lm_state_reset (s);
  return s;
}

void
ppx_lm_state_free (PpxLmState *s)
{
  if (!s)
    return;
  for (int i = 0; s->dlogit_step && i < s->lm->cfg.dep_q; i++)
    ppx_tensor_free (s->dlogit_step[i]);
  g_free (s->dlogit_step);
  free_caches (s->k, s->v);
  free_caches (s->dk, s->dv);
  PpxTensor *ts[] = {s->t_pos, s->slot, s->d_pos, s->x,  s->h,   s->qkv,   s->att,     s->ff,
                     s->u,     s->z,    s->text_logits, s->dx, s->dh, s->dqkv, s->datt, s->dff,
                     s->du,    s->dlogits, s->ids, s->forced, s->out, s->prev, s->rng};
  for (guint i = 0; i < G_N_ELEMENTS (ts); i++)
    ppx_tensor_free (ts[i]);
  g_free (s);
}

void
ppx_lm_state_reset (PpxLmState *s)
{
  s->pos = 0;
}

gint64
ppx_lm_state_position (const PpxLmState *s)
{
  return s->pos;
}

/* ---- temporal transformer ---- */

static void
upload_ids (PpxLmState *s, const int *ids)
{
  int32_t v[PPX_MAX_STREAMS];
  for (int k = 0; k < s->lm->cfg.n_streams; k++)
    v[k] = ids[k];
  ppx_tensor_upload (s->ids, 0, v, s->lm->cfg.n_streams);
}

/* x = emb[0](c1) + ... + emb[15](c16) + text_emb(c0), in that order (spec pitfall 3). */
static void
embed_to_x (PpxLmState *s)
{
  PpxLm *lm = s->lm;
  for (int k = 0; k < lm->cfg.n_q; k++)
    ppx_op_embed (lm->be, lm->emb[k], s->ids, 1 + k, 0, s->x, 1, k > 0);
  ppx_op_embed (lm->be, lm->text_emb, s->ids, 0, 0, s->x, 1, TRUE);
}

void
ppx_lm_embed (PpxLmState *s, const int *ids, float *out)
{
  upload_ids (s, ids);
  embed_to_x (s);
  ppx_tensor_download (s->x, 0, out, s->lm->cfg.dim);
}

static void
temporal_layers (PpxLmState *s)
{
  PpxLm *lm = s->lm;
  PpxBackend *be = lm->be;
  const PpxLmConfig *c = &lm->cfg;
  const int d = c->dim, H = c->num_heads, Dh = d / H, F = c->ffn_hidden;
  int32_t p = (int32_t) s->pos;
  ppx_tensor_upload (s->t_pos, 0, &p, 1);
  for (int l = 0; l < c->num_layers; l++) {
    const LmLayer *L = &lm->layers[l];
    ppx_op_rmsnorm (be, s->x, L->norm1, s->h, 1, d, RMS_EPS);
    ppx_op_linear (be, L->in_proj, s->h, d, s->qkv, 3 * d, 1, FALSE);
    ppx_op_rope (be, s->qkv, s->t_pos, 1, H, Dh, (float) c->max_period);
    ppx_op_attention (be, s->qkv, s->t_pos, s->slot, s->k[l], s->v[l], s->att, 1, 1, H, Dh, c->context, c->context);
    ppx_op_linear (be, L->out_proj, s->att, d, s->x, d, 1, TRUE);
    ppx_op_rmsnorm (be, s->x, L->norm2, s->h, 1, d, RMS_EPS);
    ppx_op_linear (be, L->linear_in, s->h, d, s->ff, 2 * F, 1, FALSE);
    ppx_op_silu_gate (be, s->ff, s->u, 1, F);
    ppx_op_linear (be, L->linear_out, s->u, F, s->x, d, 1, TRUE);
  }
  ppx_op_rmsnorm (be, s->x, lm->out_norm, s->z, 1, d, RMS_EPS);
  s->pos++;
}

void
ppx_lm_temporal_tokens (PpxLmState *s, const int *ids)
{
  upload_ids (s, ids);
  embed_to_x (s);
  temporal_layers (s);
}

void
ppx_lm_temporal_embedding (PpxLmState *s, const float *emb)
{
  ppx_tensor_upload (s->x, 0, emb, s->lm->cfg.dim);
  temporal_layers (s);
}

/* ---- text sampling and depformer ---- */

static void
depformer_step (PpxLmState *s, int step)
{
  PpxLm *lm = s->lm;
  PpxBackend *be = lm->be;
  const PpxLmConfig *c = &lm->cfg;
  const int dd = c->depformer_dim, H = c->depformer_num_heads, Dh = dd / H, F = c->depformer_ffn_hidden;
  int32_t p = step;
  ppx_tensor_upload (s->d_pos, 0, &p, 1);
  ppx_op_linear (be, lm->dep_in[step], s->z, c->dim, s->dx, dd, 1, FALSE);
  ppx_op_embed (be, step == 0 ? lm->dep_text_emb : lm->dep_emb[step - 1], s->prev, 0, 1, s->dx, 1, TRUE);
  for (int l = 0; l < c->depformer_num_layers; l++) {
    const DepLayer *L = &lm->dep_layers[l];
    ppx_op_rmsnorm (be, s->dx, L->norm1, s->dh, 1, dd, RMS_EPS);
    ppx_op_linear (be, L->in_proj[step], s->dh, dd, s->dqkv, 3 * dd, 1, FALSE);
    /* no positional encoding; the ring of dep_q slots reproduces the reference's step-15 window */
    ppx_op_attention (be, s->dqkv, s->d_pos, s->slot, s->dk[l], s->dv[l], s->datt, 1, 1, H, Dh, c->dep_q, G_MAXINT);
    ppx_op_linear (be, L->out_proj[step], s->datt, dd, s->dx, dd, 1, TRUE);
    ppx_op_rmsnorm (be, s->dx, L->norm2, s->dh, 1, dd, RMS_EPS);
    ppx_op_linear (be, L->linear_in[step], s->dh, dd, s->dff, 2 * F, 1, FALSE);
    ppx_op_silu_gate (be, s->dff, s->du, 1, F);
    ppx_op_linear (be, L->linear_out[step], s->du, F, s->dx, dd, 1, TRUE);
  }
  ppx_op_linear (be, lm->linears[step], s->dx, dd, s->dlogit_step[step], c->card, 1, FALSE);
}

void
ppx_lm_sample_frame (PpxLmState *s, const int *forced, int n_steps, const PpxSampling *smp, guint64 frame, int *out)
{
  PpxLm *lm = s->lm;
  PpxBackend *be = lm->be;
  const PpxLmConfig *c = &lm->cfg;
  int32_t f[PPX_MAX_STREAMS];
  for (int k = 0; k <= c->dep_q; k++)
    f[k] = forced[k];
  ppx_tensor_upload (s->forced, 0, f, 1 + c->dep_q);
  uint32_t rng[PPX_SAMPLE_PARAMS];
  ppx_sample_params_set (rng, smp->seed, frame, smp->greedy ? 0.0f : smp->temp_text, smp->topk_text,
                         smp->greedy ? 0.0f : smp->temp_audio, smp->topk_audio);
  ppx_tensor_upload (s->rng, 0, rng, PPX_SAMPLE_PARAMS);

  ppx_op_linear (be, lm->text_linear, s->z, c->dim, s->text_logits, c->text_card, 1, FALSE);
  ppx_op_sample (be, s->text_logits, c->text_card, s->out, 0, 0, s->rng, 0, 1);
  for (int step = 0; step < n_steps; step++) {
    /* the input of this step: the previous stream's token, provided where available */
    ppx_tensor_copy2d (s->prev, 0, 1, s->out, step, 1, 1, 1);
    ppx_op_force_tokens (be, s->prev, 0, 1, s->forced, step, 1, 1);
    depformer_step (s, step);
    ppx_op_sample (be, s->dlogit_step[step], c->card, s->out, 1 + step, 0, s->rng, 1 + step, 1);
  }
  int32_t o[PPX_MAX_STREAMS];
  ppx_tensor_download (s->out, 0, o, 1 + n_steps);
  for (int k = 0; k <= n_steps; k++)
    out[k] = o[k];
}

void
ppx_lm_text_logits (PpxLmState *s, float *out)
{
  ppx_tensor_download (s->text_logits, 0, out, s->lm->cfg.text_card);
}

void
ppx_lm_audio_logits (PpxLmState *s, int step, float *out)
{
  ppx_tensor_download (s->dlogits, (gsize) step * s->lm->cfg.card, out, s->lm->cfg.card);
}
