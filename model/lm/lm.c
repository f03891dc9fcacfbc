/* PersonaPlex LM on a backend: loading the weights (spec §2.1); the step is in lm-batch.c. */
#include "lm-internal.h"

#include "weights.h"

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

