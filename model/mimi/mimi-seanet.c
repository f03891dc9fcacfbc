/* Mimi's SEANet encoder and decoder, streaming (spec §4.2-4.4). */
#include "mimi-internal.h"

/* The weight [d0, d1, k] and the bias [n_bias] of PREFIX.model.INDEX.NAME (NAME e.g. "conv.conv"). */
static void
load_conv (PpxLoader *ld, PpxTensor **w, PpxTensor **b, int64_t d0, int64_t d1, int64_t k, int64_t n_bias,
           const char *prefix, int index, const char *name)
{
  *w = ppx_loader_tensor (ld, 3, d0, d1, k, "%s.model.%d.%s.weight", prefix, index, name);
  *b = ppx_loader_tensor (ld, 1, n_bias, 0, 0, "%s.model.%d.%s.bias", prefix, index, name);
}

gboolean
ppx_seanet_load (PpxSeanet *net, PpxLoader *ld, const PpxMimiConfig *m, gboolean decoder, int in_len)
{
  PpxSeanetLayer layers[PPX_SEANET_MAX_LAYERS];
  int n = decoder ? ppx_seanet_decoder_layers (m, layers, PPX_SEANET_MAX_LAYERS)
                  : ppx_seanet_encoder_layers (m, layers, PPX_SEANET_MAX_LAYERS);
  const char *p = decoder ? "decoder" : "encoder";
  memset (net, 0, sizeof *net);
  if (n > PPX_SEANET_MAX_LAYERS) {
    g_set_error (&ld->error, PPX_ERROR, PPX_ERROR_CONFIG, "SEANet with %d layers exceeds the supported %d", n,
                 PPX_SEANET_MAX_LAYERS);
    return FALSE;
  }
  net->n = n;
  net->in_len = in_len;
  int L = in_len, C = decoder ? m->dimension : m->channels;
  net->max_elems = C * L;
  for (int i = 0; i < n; i++) {
    PpxSeanetWeights *w = &net->layers[i];
    const PpxSeanetLayer *l = &layers[i];
    w->l = *l;
    switch (l->kind) {
      case PPX_SEANET_CONV:
        if (L % l->stride != 0) {
          g_set_error (&ld->error, PPX_ERROR, PPX_ERROR_CONFIG, "%s layer %d: length %d not divisible by stride %d", p,
                       l->index, L, l->stride);
          return FALSE;
        }
        load_conv (ld, &w->w, &w->b, l->c_out, l->c_in, l->kernel, l->c_out, p, l->index, "conv.conv");
        L /= l->stride;
        C = l->c_out;
        break;
      case PPX_SEANET_CONVTR:
        load_conv (ld, &w->w, &w->b, l->c_in, l->c_out, l->kernel, l->c_out, p, l->index, "convtr.convtr");
        L *= l->stride;
        C = l->c_out;
        break;
      case PPX_SEANET_RESBLOCK:
        load_conv (ld, &w->w1, &w->b1, l->hidden, l->c_in, l->kernel, l->hidden, p, l->index, "block.1.conv.conv");
        load_conv (ld, &w->w2, &w->b2, l->c_in, l->hidden, 1, l->c_in, p, l->index, "block.3.conv.conv");
        net->max_elems = MAX (net->max_elems, l->hidden * L);
        break;
      case PPX_SEANET_ELU:
        break;
    }
    net->max_elems = MAX (net->max_elems, C * L);
  }
  return ld->error == NULL;
}

void
ppx_seanet_clear (PpxSeanet *net)
{
  for (int i = 0; i < net->n; i++) {
    PpxSeanetWeights *w = &net->layers[i];
    ppx_tensor_free (w->w);
    ppx_tensor_free (w->b);
    ppx_tensor_free (w->w1);
    ppx_tensor_free (w->b1);
    ppx_tensor_free (w->w2);
    ppx_tensor_free (w->b2);
  }
  memset (net, 0, sizeof *net);
}

static int
history_len (const PpxSeanetLayer *l)
{
  if (l->kind == PPX_SEANET_CONV)
    return (l->kernel - 1) * l->dilation + 1 - l->stride;
  if (l->kind == PPX_SEANET_RESBLOCK)
    return (l->kernel - 1) * l->dilation;
  return 0;
}

void
ppx_seanet_state_plan (PpxSeanetState *st, const PpxSeanet *net, PpxTensorPlan *p, int n)
{
  memset (st, 0, sizeof *st);
  for (int i = 0; i < net->n; i++) {
    const PpxSeanetLayer *l = &net->layers[i].l;
    int P = history_len (l);
    if (P > 0) {
      st->prev_row[i] = (gsize) l->c_in * P;
      st->prev[i] = ppx_plan_tensor (p, PPX_TENSOR_F32, (gsize) n * st->prev_row[i]);
    }
    if (l->kind == PPX_SEANET_CONVTR && l->kernel > l->stride) {
      st->partial_row[i] = (gsize) l->c_out * (l->kernel - l->stride);
      st->partial[i] = ppx_plan_tensor (p, PPX_TENSOR_F32, (gsize) n * st->partial_row[i]);
    }
  }
}

void
ppx_seanet_state_clear (PpxSeanetState *st)
{
  for (int i = 0; i < PPX_SEANET_MAX_LAYERS; i++) {
    ppx_tensor_free (st->prev[i]);
    ppx_tensor_free (st->partial[i]);
  }
  memset (st, 0, sizeof *st);
}

/* Zero history is exactly the reference's zero left padding on the first call. */
static void
fill_rows (PpxTensor *t, gsize row_elems, int row0, int n)
{
  if (!t)
    return;
  PpxTensor *v = ppx_tensor_view (t, (gsize) row0 * row_elems, (gsize) n * row_elems);
  ppx_tensor_fill (v, 0.0f);
  ppx_tensor_free (v);
}

void
ppx_seanet_state_reset_rows (PpxSeanetState *st, int row0, int n)
{
  for (int i = 0; i < PPX_SEANET_MAX_LAYERS; i++) {
    fill_rows (st->prev[i], st->prev_row[i], row0, n);
    fill_rows (st->partial[i], st->partial_row[i], row0, n);
  }
}

void
ppx_seanet_state_move_row (PpxSeanetState *st, int from, int to)
{
  for (int i = 0; i < PPX_SEANET_MAX_LAYERS; i++) {
    if (st->prev[i])
      ppx_tensor_copy2d (st->prev[i], (gsize) to * st->prev_row[i], 0, st->prev[i], (gsize) from * st->prev_row[i], 0,
                         1, st->prev_row[i]);
    if (st->partial[i])
      ppx_tensor_copy2d (st->partial[i], (gsize) to * st->partial_row[i], 0, st->partial[i],
                         (gsize) from * st->partial_row[i], 0, 1, st->partial_row[i]);
  }
}

void
ppx_seanet_state_rows (const PpxSeanetState *st, int row0, int n, PpxSeanetState *out)
{
  *out = *st;
  for (int i = 0; i < PPX_SEANET_MAX_LAYERS; i++) {
    if (st->prev[i])
      out->prev[i] = ppx_tensor_view (st->prev[i], (gsize) row0 * st->prev_row[i], (gsize) n * st->prev_row[i]);
    if (st->partial[i])
      out->partial[i] =
        ppx_tensor_view (st->partial[i], (gsize) row0 * st->partial_row[i], (gsize) n * st->partial_row[i]);
  }
}

/* The ELU layers run inside the conv that reads them (ppx_op_conv1d_fused / ppx_op_conv_transpose1d_act apply
 * the activation as they read x, and a conv's history keeps activated columns, as when the ELU ran before it),
 * and a residual block's add inside its second conv: the same values as separate act and add ops, in fewer
 * launches and passes over the activations. */
PpxTensor *
ppx_seanet_forward (const PpxSeanet *net, PpxSeanetState *st, PpxBackend *be, PpxTensor *x, PpxTensor *a,
                    PpxTensor *b, PpxTensor *c, int M, int *out_channels, int *out_len)
{
  PpxTensor *scratch[3] = {a, b, c};
  PpxTensor *cur = x;
  int L = net->in_len, C = net->n > 0 ? net->layers[0].l.c_in : 0;
  PpxActivation pending = PPX_ACT_NONE; /* an ELU not applied yet: the next conv applies it to its input */
#define FREE_BUF(k) (scratch[k] != cur)
  for (int i = 0; i < net->n; i++) {
    const PpxSeanetWeights *w = &net->layers[i];
    const PpxSeanetLayer *l = &w->l;
    PpxTensor *t[2];
    int nt = 0;
    for (int k = 0; k < 3 && nt < 2; k++)
      if (FREE_BUF (k))
        t[nt++] = scratch[k];
    switch (l->kind) {
      case PPX_SEANET_CONV:
        ppx_op_conv1d_fused (be, pending, w->w, w->b, cur, st->prev[i], NULL, t[0], M, l->c_in, l->c_out, l->kernel, L,
                             l->stride, l->dilation, 1);
        pending = PPX_ACT_NONE;
        L /= l->stride;
        C = l->c_out;
        cur = t[0];
        break;
      case PPX_SEANET_CONVTR:
        ppx_op_conv_transpose1d_act (be, pending, w->w, w->b, cur, st->partial[i], t[0], M, l->c_in, l->c_out,
                                     l->kernel, L, l->stride, 1);
        pending = PPX_ACT_NONE;
        L *= l->stride;
        C = l->c_out;
        cur = t[0];
        break;
      case PPX_SEANET_ELU: {
        const gboolean next_conv = i + 1 < net->n && (net->layers[i + 1].l.kind == PPX_SEANET_CONV ||
                                                      net->layers[i + 1].l.kind == PPX_SEANET_CONVTR);
        if (pending != PPX_ACT_NONE || !next_conv) { /* not followed by a conv: on its own */
          if (pending != PPX_ACT_NONE)
            g_critical ("SEANet: two activations in a row");
          if (cur == x) { /* never write the caller's input */
            ppx_op_act (be, PPX_ACT_ELU, cur, t[0], (gsize) M * C * L);
            cur = t[0];
          } else {
            ppx_op_act (be, PPX_ACT_ELU, cur, cur, (gsize) M * C * L);
          }
        } else {
          pending = PPX_ACT_ELU;
        }
        break;
      }
      case PPX_SEANET_RESBLOCK:
        if (pending != PPX_ACT_NONE)
          g_critical ("SEANet: an activation before a residual block");
        /* cur + conv2(ELU(conv1(ELU(cur)))); in place unless cur is the caller's input */
        ppx_op_conv1d_fused (be, PPX_ACT_ELU, w->w1, w->b1, cur, st->prev[i], NULL, t[0], M, l->c_in, l->hidden,
                             l->kernel, L, 1, l->dilation, 1);
        ppx_op_conv1d_fused (be, PPX_ACT_ELU, w->w2, w->b2, t[0], NULL, cur, cur == x ? t[1] : cur, M, l->hidden,
                             l->c_in, 1, L, 1, 1, 1);
        if (cur == x)
          cur = t[1];
        break;
    }
  }
#undef FREE_BUF
  *out_channels = C;
  *out_len = L;
  return cur;
}
