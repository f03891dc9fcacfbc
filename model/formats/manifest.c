#include "manifest.h"

static void
entry_free (gpointer p)
{
  PpxManifestEntry *e = p;
  g_free (e->name);
  g_free (e);
}

static void
add (GPtrArray *a, int ndim, int64_t d0, int64_t d1, int64_t d2, const char *fmt, ...) G_GNUC_PRINTF (6, 7);

static void
add (GPtrArray *a, int ndim, int64_t d0, int64_t d1, int64_t d2, const char *fmt, ...)
{
  PpxManifestEntry *e = g_new0 (PpxManifestEntry, 1);
  va_list ap;
  va_start (ap, fmt);
  e->name = g_strdup_vprintf (fmt, ap);
  va_end (ap);
  e->ndim = ndim;
  e->shape[0] = d0;
  e->shape[1] = d1;
  e->shape[2] = d2;
  g_ptr_array_add (a, e);
}

GPtrArray *
ppx_manifest_lm (const PpxLmConfig *lm)
{
  GPtrArray *a = g_ptr_array_new_with_free_func (entry_free);
  const int64_t d = lm->dim, dd = lm->depformer_dim;
  for (int k = 0; k < lm->n_q; k++)
    add (a, 2, lm->card + 1, d, 0, "emb.%d.weight", k);
  add (a, 2, lm->text_card + 1, d, 0, "text_emb.weight");
  add (a, 2, lm->text_card, d, 0, "text_linear.weight");
  add (a, 3, 1, 1, d, "out_norm.alpha");
  for (int l = 0; l < lm->num_layers; l++) {
    add (a, 2, 3 * d, d, 0, "transformer.layers.%d.self_attn.in_proj_weight", l);
    add (a, 2, d, d, 0, "transformer.layers.%d.self_attn.out_proj.weight", l);
    add (a, 3, 1, 1, d, "transformer.layers.%d.norm1.alpha", l);
    add (a, 3, 1, 1, d, "transformer.layers.%d.norm2.alpha", l);
    add (a, 2, 2 * (int64_t) lm->ffn_hidden, d, 0, "transformer.layers.%d.gating.linear_in.weight", l);
    add (a, 2, d, lm->ffn_hidden, 0, "transformer.layers.%d.gating.linear_out.weight", l);
  }
  for (int s = 0; s < lm->dep_q; s++)
    add (a, 2, dd, d, 0, "depformer_in.%d.weight", s);
  for (int s = 0; s < lm->dep_q - 1; s++)
    add (a, 2, lm->card + 1, dd, 0, "depformer_emb.%d.weight", s);
  add (a, 2, lm->text_card + 1, dd, 0, "depformer_text_emb.weight");
  for (int l = 0; l < lm->depformer_num_layers; l++) {
    add (a, 2, (int64_t) lm->dep_q * 3 * dd, dd, 0, "depformer.layers.%d.self_attn.in_proj_weight", l);
    add (a, 2, (int64_t) lm->dep_q * dd, dd, 0, "depformer.layers.%d.self_attn.out_proj.weight", l);
    add (a, 3, 1, 1, dd, "depformer.layers.%d.norm1.alpha", l);
    add (a, 3, 1, 1, dd, "depformer.layers.%d.norm2.alpha", l);
    for (int s = 0; s < lm->dep_q; s++) {
      add (a, 2, 2 * (int64_t) lm->depformer_ffn_hidden, dd, 0, "depformer.layers.%d.gating.%d.linear_in.weight", l, s);
      add (a, 2, dd, lm->depformer_ffn_hidden, 0, "depformer.layers.%d.gating.%d.linear_out.weight", l, s);
    }
  }
  for (int s = 0; s < lm->dep_q; s++)
    add (a, 2, lm->card, dd, 0, "linears.%d.weight", s);
  return a;
}

int
ppx_seanet_encoder_layers (const PpxMimiConfig *m, PpxSeanetLayer *out, int max)
{
  int n = 0, idx = 0, mult = 1;
#define PUSH(...)                                                                                                    \
  do {                                                                                                               \
    if (n < max)                                                                                                     \
      out[n] = (PpxSeanetLayer){__VA_ARGS__};                                                                        \
    n++;                                                                                                             \
  } while (0)
  PUSH (.kind = PPX_SEANET_CONV, .index = idx++, .c_in = m->channels, .c_out = m->n_filters, .kernel = m->kernel_size,
        .stride = 1, .dilation = 1);
  for (int i = m->n_ratios - 1; i >= 0; i--) {
    int r = m->ratios[i], c = mult * m->n_filters;
    int dil = 1;
    for (int j = 0; j < m->n_residual_layers; j++, dil *= m->dilation_base)
      PUSH (.kind = PPX_SEANET_RESBLOCK, .index = idx++, .c_in = c, .c_out = c, .kernel = m->residual_kernel_size,
            .stride = 1, .dilation = dil, .hidden = c / m->compress);
    PUSH (.kind = PPX_SEANET_ELU, .index = idx++);
    PUSH (.kind = PPX_SEANET_CONV, .index = idx++, .c_in = c, .c_out = 2 * c, .kernel = 2 * r, .stride = r,
          .dilation = 1);
    mult *= 2;
  }
  PUSH (.kind = PPX_SEANET_ELU, .index = idx++);
  PUSH (.kind = PPX_SEANET_CONV, .index = idx++, .c_in = mult * m->n_filters, .c_out = m->dimension,
        .kernel = m->last_kernel_size, .stride = 1, .dilation = 1);
  return n;
}

int
ppx_seanet_decoder_layers (const PpxMimiConfig *m, PpxSeanetLayer *out, int max)
{
  int n = 0, idx = 0, mult = 1 << m->n_ratios;
  PUSH (.kind = PPX_SEANET_CONV, .index = idx++, .c_in = m->dimension, .c_out = mult * m->n_filters,
        .kernel = m->kernel_size, .stride = 1, .dilation = 1);
  for (int i = 0; i < m->n_ratios; i++) {
    int r = m->ratios[i], c = mult * m->n_filters;
    PUSH (.kind = PPX_SEANET_ELU, .index = idx++);
    PUSH (.kind = PPX_SEANET_CONVTR, .index = idx++, .c_in = c, .c_out = c / 2, .kernel = 2 * r, .stride = r,
          .dilation = 1);
    int dil = 1;
    for (int j = 0; j < m->n_residual_layers; j++, dil *= m->dilation_base)
      PUSH (.kind = PPX_SEANET_RESBLOCK, .index = idx++, .c_in = c / 2, .c_out = c / 2,
            .kernel = m->residual_kernel_size, .stride = 1, .dilation = dil, .hidden = c / 2 / m->compress);
    mult /= 2;
  }
  PUSH (.kind = PPX_SEANET_ELU, .index = idx++);
  PUSH (.kind = PPX_SEANET_CONV, .index = idx++, .c_in = m->n_filters, .c_out = m->channels,
        .kernel = m->last_kernel_size, .stride = 1, .dilation = 1);
#undef PUSH
  return n;
}

static void
add_conv (GPtrArray *a, const char *prefix, const PpxSeanetLayer *l)
{
  if (l->kind == PPX_SEANET_CONV) {
    add (a, 3, l->c_out, l->c_in, l->kernel, "%s.model.%d.conv.conv.weight", prefix, l->index);
    add (a, 1, l->c_out, 0, 0, "%s.model.%d.conv.conv.bias", prefix, l->index);
  } else if (l->kind == PPX_SEANET_CONVTR) {
    add (a, 3, l->c_in, l->c_out, l->kernel, "%s.model.%d.convtr.convtr.weight", prefix, l->index);
    add (a, 1, l->c_out, 0, 0, "%s.model.%d.convtr.convtr.bias", prefix, l->index);
  } else if (l->kind == PPX_SEANET_RESBLOCK) {
    add (a, 3, l->hidden, l->c_in, l->kernel, "%s.model.%d.block.1.conv.conv.weight", prefix, l->index);
    add (a, 1, l->hidden, 0, 0, "%s.model.%d.block.1.conv.conv.bias", prefix, l->index);
    add (a, 3, l->c_in, l->hidden, 1, "%s.model.%d.block.3.conv.conv.weight", prefix, l->index);
    add (a, 1, l->c_in, 0, 0, "%s.model.%d.block.3.conv.conv.bias", prefix, l->index);
  }
}

GPtrArray *
ppx_manifest_mimi (const PpxMimiConfig *m)
{
  GPtrArray *a = g_ptr_array_new_with_free_func (entry_free);
  PpxSeanetLayer layers[PPX_SEANET_MAX_LAYERS];
  int n = MIN (ppx_seanet_encoder_layers (m, layers, PPX_SEANET_MAX_LAYERS), PPX_SEANET_MAX_LAYERS);
  for (int i = 0; i < n; i++)
    add_conv (a, "encoder", &layers[i]);
  n = MIN (ppx_seanet_decoder_layers (m, layers, PPX_SEANET_MAX_LAYERS), PPX_SEANET_MAX_LAYERS);
  for (int i = 0; i < n; i++)
    add_conv (a, "decoder", &layers[i]);
  const char *tf[2] = {"encoder_transformer", "decoder_transformer"};
  const int64_t d = m->t_d_model;
  for (int t = 0; t < 2; t++) {
    for (int l = 0; l < m->t_num_layers; l++) {
      const char *p = tf[t];
      add (a, 2, 3 * d, d, 0, "%s.transformer.layers.%d.self_attn.in_proj_weight", p, l);
      add (a, 2, d, d, 0, "%s.transformer.layers.%d.self_attn.out_proj.weight", p, l);
      add (a, 1, d, 0, 0, "%s.transformer.layers.%d.norm1.weight", p, l);
      add (a, 1, d, 0, 0, "%s.transformer.layers.%d.norm1.bias", p, l);
      add (a, 1, d, 0, 0, "%s.transformer.layers.%d.norm2.weight", p, l);
      add (a, 1, d, 0, 0, "%s.transformer.layers.%d.norm2.bias", p, l);
      add (a, 2, m->t_dim_feedforward, d, 0, "%s.transformer.layers.%d.linear1.weight", p, l);
      add (a, 2, d, m->t_dim_feedforward, 0, "%s.transformer.layers.%d.linear2.weight", p, l);
      add (a, 1, d, 0, 0, "%s.transformer.layers.%d.layer_scale_1.scale", p, l);
      add (a, 1, d, 0, 0, "%s.transformer.layers.%d.layer_scale_2.scale", p, l);
    }
  }
  add (a, 3, m->dimension, m->dimension, 4, "downsample.conv.conv.conv.weight");
  add (a, 3, m->dimension, 1, 4, "upsample.convtr.convtr.convtr.weight");
  const char *qn[2] = {"rvq_first", "rvq_rest"};
  for (int q = 0; q < 2; q++) {
    add (a, 3, m->q_dimension, m->q_input_dimension, 1, "quantizer.%s.input_proj.weight", qn[q]);
    add (a, 3, m->q_output_dimension, m->q_dimension, 1, "quantizer.%s.output_proj.weight", qn[q]);
    int ncb = q == 0 ? 1 : m->q_n_q - 1;
    for (int j = 0; j < ncb; j++) {
      add (a, 1, 1, 0, 0, "quantizer.%s.vq.layers.%d._codebook._initialized", qn[q], j);
      add (a, 1, m->q_bins, 0, 0, "quantizer.%s.vq.layers.%d._codebook.cluster_usage", qn[q], j);
      add (a, 2, m->q_bins, m->q_dimension, 0, "quantizer.%s.vq.layers.%d._codebook.embedding_sum", qn[q], j);
    }
  }
  return a;
}
