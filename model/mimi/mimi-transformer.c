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

gboolean
ppx_mimi_transformer_state_init (PpxMimiTransformerState *st, const PpxMimiTransformer *tf, PpxBackend *be, int T,
                                 GError **error)
{
  memset (st, 0, sizeof *st);
  st->T = T;
  st->k = g_new0 (PpxTensor *, tf->n_layers + 1); /* NULL-terminated */
  st->v = g_new0 (PpxTensor *, tf->n_layers + 1);
  const gsize d = tf->d;
  for (int i = 0; i < tf->n_layers; i++) {
    if (!(st->k[i] = ppx_tensor_new (be, PPX_TENSOR_F32, (gsize) tf->context * d, error)) ||
        !(st->v[i] = ppx_tensor_new (be, PPX_TENSOR_F32, (gsize) tf->context * d, error)))
      return FALSE;
  }
  return (st->pos = ppx_tensor_new (be, PPX_TENSOR_I32, T, error)) &&
         (st->slot = ppx_tensor_new (be, PPX_TENSOR_I32, 1, error)) &&
         (st->x = ppx_tensor_new (be, PPX_TENSOR_F32, T * d, error)) &&
         (st->h = ppx_tensor_new (be, PPX_TENSOR_F32, T * d, error)) &&
         (st->qkv = ppx_tensor_new (be, PPX_TENSOR_F32, T * 3 * d, error)) &&
         (st->att = ppx_tensor_new (be, PPX_TENSOR_F32, T * d, error)) &&
         (st->ff = ppx_tensor_new (be, PPX_TENSOR_F32, (gsize) T * MAX ((gsize) tf->ff, d), error));
}

void
ppx_mimi_transformer_state_clear (PpxMimiTransformerState *st)
{
  /* n_layers is not stored here: the arrays are NULL-terminated by construction of g_new0 + count. */
  for (int i = 0; st->k && st->k[i]; i++)
    ppx_tensor_free (st->k[i]);
  for (int i = 0; st->v && st->v[i]; i++)
    ppx_tensor_free (st->v[i]);
  g_free (st->k);
  g_free (st->v);
  ppx_tensor_free (st->pos);
  ppx_tensor_free (st->slot);
  ppx_tensor_free (st->x);
  ppx_tensor_free (st->h);
  ppx_tensor_free (st->qkv);
  ppx_tensor_free (st->att);
  ppx_tensor_free (st->ff);
  memset (st, 0, sizeof *st);
}

/* Only the counter: stale cache entries are outside every later window (as in the reference). */
void
ppx_mimi_transformer_state_reset (PpxMimiTransformerState *st)
{
  st->offset = 0;
}

void
ppx_mimi_transformer_forward (const PpxMimiTransformer *tf, PpxMimiTransformerState *st, PpxBackend *be, PpxTensor *io)
{
  const int T = st->T, d = tf->d, H = tf->heads, Dh = d / H;
  int32_t pos[64];
  g_assert (T <= 64);
  for (int t = 0; t < T; t++)
    pos[t] = (int32_t) (st->offset + t);
  ppx_tensor_upload (st->pos, 0, pos, T);
  st->offset += T;
  ppx_op_transpose (be, io, st->x, 1, d, T); /* [d, T] -> [T, d] */
  for (int i = 0; i < tf->n_layers; i++) {
    const PpxMimiLayer *L = &tf->layers[i];
    ppx_op_layernorm (be, st->x, L->norm1_w, L->norm1_b, st->h, T, d, 1e-5f);
    ppx_op_linear (be, L->in_proj, st->h, d, st->qkv, 3 * d, T, FALSE);
    ppx_op_rope (be, st->qkv, st->pos, T, H, Dh, tf->max_period);
    ppx_op_attention (be, st->qkv, st->pos, st->slot, st->k[i], st->v[i], st->att, 1, T, H, Dh, tf->context,
                      tf->context);
    ppx_op_linear (be, L->out_proj, st->att, d, st->h, d, T, FALSE);
    ppx_op_add_scaled (be, st->h, L->scale1, st->x, T, d);
    ppx_op_layernorm (be, st->x, L->norm2_w, L->norm2_b, st->h, T, d, 1e-5f);
    ppx_op_linear (be, L->linear1, st->h, d, st->ff, tf->ff, T, FALSE);
    ppx_op_act (be, PPX_ACT_GELU, st->ff, st->ff, (gsize) T * tf->ff);
    ppx_op_linear (be, L->linear2, st->ff, tf->ff, st->h, d, T, FALSE);
    ppx_op_add_scaled (be, st->h, L->scale2, st->x, T, d);
  }
  ppx_op_transpose (be, st->x, io, 1, T, d); /* back to [d, T] */
}
