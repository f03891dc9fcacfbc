/* Mimi's encoder/decoder transformer (spec §4.6): pre-norm LayerNorm, RoPE attention over a ring KV
 * cache, exact-GELU MLP, LayerScale; streaming with T frames per call. */
#include "mimi-internal.h"

gboolean
ppx_mimi_transformer_load (PpxMimiTransformer *tf, PpxLoader *ld, const PpxMimiConfig *m, const char *prefix)
{
  memset (tf, 0, sizeof *tf);
  tf->n_layers = m->t_num_layers;
  tf->d = m->t_d_model;
  tf->heads = m->t_num_heads;
  tf->ff = m->t_dim_feedforward;
  tf->context = m->t_context;
  tf->max_period = (float) m->t_max_period;
  tf->layers = g_new0 (PpxMimiLayer, tf->n_layers);
  const int64_t d = tf->d;
  for (int i = 0; i < tf->n_layers; i++) {
    PpxMimiLayer *L = &tf->layers[i];
    const char *p = prefix;
    L->in_proj = ppx_loader_linear_f32 (ld, 2, 3 * d, d, "%s.transformer.layers.%d.self_attn.in_proj_weight", p, i);
    L->out_proj = ppx_loader_linear_f32 (ld, 2, d, d, "%s.transformer.layers.%d.self_attn.out_proj.weight", p, i);
    L->linear1 = ppx_loader_linear_f32 (ld, 2, tf->ff, d, "%s.transformer.layers.%d.linear1.weight", p, i);
    L->linear2 = ppx_loader_linear_f32 (ld, 2, d, tf->ff, "%s.transformer.layers.%d.linear2.weight", p, i);
    L->norm1_w = ppx_loader_tensor (ld, 1, d, 0, 0, "%s.transformer.layers.%d.norm1.weight", p, i);
    L->norm1_b = ppx_loader_tensor (ld, 1, d, 0, 0, "%s.transformer.layers.%d.norm1.bias", p, i);
    L->norm2_w = ppx_loader_tensor (ld, 1, d, 0, 0, "%s.transformer.layers.%d.norm2.weight", p, i);
    L->norm2_b = ppx_loader_tensor (ld, 1, d, 0, 0, "%s.transformer.layers.%d.norm2.bias", p, i);
    L->scale1 = ppx_loader_tensor (ld, 1, d, 0, 0, "%s.transformer.layers.%d.layer_scale_1.scale", p, i);
    L->scale2 = ppx_loader_tensor (ld, 1, d, 0, 0, "%s.transformer.layers.%d.layer_scale_2.scale", p, i);
  }
  return ld->error == NULL;
}

void
ppx_mimi_transformer_clear (PpxMimiTransformer *tf)
{
  for (int i = 0; tf->layers && i < tf->n_layers; i++) {
    PpxMimiLayer *L = &tf->layers[i];
    ppx_weight_free (L->in_proj);
    ppx_weight_free (L->out_proj);
    ppx_weight_free (L->linear1);
    ppx_weight_free (L->linear2);
    ppx_tensor_free (L->norm1_w);
    ppx_tensor_free (L->norm1_b);
    ppx_tensor_free (L->norm2_w);
    ppx_tensor_free (L->norm2_b);
    ppx_tensor_free (L->scale1);
    ppx_tensor_free (L->scale2);
  }
  g_free (tf->layers);
  memset (tf, 0, sizeof *tf);
}

void
ppx_mimi_transformer_state_plan (PpxMimiTransformerState *st, const PpxMimiTransformer *tf, PpxTensorPlan *p, int n,
                                 int T)
{
  memset (st, 0, sizeof *st);
  st->n_layers = tf->n_layers;
  st->n = n;
  st->T = T;
  st->k = g_new0 (PpxTensor *, tf->n_layers);
  st->v = g_new0 (PpxTensor *, tf->n_layers);
  const gsize d = tf->d, rows = (gsize) n * T;
  for (int i = 0; i < tf->n_layers; i++) {
    st->k[i] = ppx_plan_kv_cache (p, PPX_TENSOR_F32, n, tf->context, tf->heads, tf->d / tf->heads);
    st->v[i] = ppx_plan_kv_cache (p, PPX_TENSOR_F32, n, tf->context, tf->heads, tf->d / tf->heads);
  }
  st->pos = ppx_plan_tensor (p, PPX_TENSOR_I32, rows);
  st->x = ppx_plan_tensor (p, PPX_TENSOR_F32, rows * d);
  st->h = ppx_plan_tensor (p, PPX_TENSOR_F32, rows * d);
  st->qkv = ppx_plan_tensor (p, PPX_TENSOR_F32, rows * 3 * d);
  st->att = ppx_plan_tensor (p, PPX_TENSOR_F32, rows * d);
  st->ff = ppx_plan_tensor (p, PPX_TENSOR_F32, rows * MAX ((gsize) tf->ff, d));
}

void
ppx_mimi_transformer_state_clear (PpxMimiTransformerState *st)
{
  for (int i = 0; i < st->n_layers; i++) {
    if (st->k)
      ppx_tensor_free (st->k[i]);
    if (st->v)
      ppx_tensor_free (st->v[i]);
  }
  g_free (st->k);
  g_free (st->v);
  ppx_tensor_free (st->pos);
  ppx_tensor_free (st->x);
  ppx_tensor_free (st->h);
  ppx_tensor_free (st->qkv);
  ppx_tensor_free (st->att);
  ppx_tensor_free (st->ff);
  memset (st, 0, sizeof *st);
}

void
ppx_mimi_transformer_forward (const PpxMimiTransformer *tf, PpxMimiTransformerState *st, PpxBackend *be,
                              PpxTensor *io, int M, PpxTensor *offsets, const PpxTensor *slots)
{
  const int T = st->T, d = tf->d, H = tf->heads, Dh = d / H, rows = M * T;
  ppx_op_positions (be, offsets, st->pos, M, T);
  ppx_op_transpose (be, io, st->x, M, d, T); /* [M, d, T] -> [M, T, d] */
  for (int i = 0; i < tf->n_layers; i++) {
    const PpxMimiLayer *L = &tf->layers[i];
    ppx_op_layernorm (be, st->x, L->norm1_w, L->norm1_b, st->h, rows, d, 1e-5f);
    ppx_op_linear (be, L->in_proj, st->h, d, st->qkv, 3 * d, rows, FALSE);
    ppx_op_rope (be, st->qkv, st->pos, rows, H, Dh, tf->max_period);
    ppx_op_attention (be, st->qkv, st->pos, slots, st->k[i], st->v[i], st->att, M, T, H, Dh, tf->context,
                      tf->context);
    ppx_op_linear (be, L->out_proj, st->att, d, st->h, d, rows, FALSE);
    ppx_op_add_scaled (be, st->h, L->scale1, st->x, rows, d);
    ppx_op_layernorm (be, st->x, L->norm2_w, L->norm2_b, st->h, rows, d, 1e-5f);
    ppx_op_linear (be, L->linear1, st->h, d, st->ff, tf->ff, rows, FALSE);
    ppx_op_act (be, PPX_ACT_GELU, st->ff, st->ff, (gsize) rows * tf->ff);
    ppx_op_linear (be, L->linear2, st->ff, tf->ff, st->h, d, rows, FALSE);
    ppx_op_add_scaled (be, st->h, L->scale2, st->x, rows, d);
  }
  ppx_op_transpose (be, st->x, io, M, T, d); /* back to [M, d, T] */
}
