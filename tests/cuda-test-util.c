/* What the CUDA op tests and benchmarks share (cuda-test.h): the two backends, paired tensors and weights,
 * the weight formats and KV cache formats under test, and the convolution calls of one Mimi frame. */
#include "cuda-test.h"

PpxBackend *cpu, *gpu;
GRand *rng;

/* ---- paired tensors: the same data on both backends ---- */

Pair
pair_new (PpxTensorType type, gsize n, const void *host)
{
  g_autoptr (GError) err = NULL;
  Pair p = {ppx_tensor_new (cpu, type, n, &err), NULL, n, type};
  g_assert_no_error (err);
  p.g = ppx_tensor_new (gpu, type, n, &err);
  g_assert_no_error (err);
  if (host) {
    ppx_tensor_upload (p.c, 0, host, n);
    ppx_tensor_upload (p.g, 0, host, n);
  }
  return p;
}

void
pair_free (Pair *p)
{
  ppx_tensor_free (p->c);
  ppx_tensor_free (p->g);
}

float *
random_floats (gsize n, double lo, double hi)
{
  float *v = g_new (float, MAX (n, 1));
  for (gsize i = 0; i < n; i++)
    v[i] = (float) g_rand_double_range (rng, lo, hi);
  return v;
}

Pair
pair_random (gsize n)
{
  g_autofree float *v = random_floats (n, -1.0, 1.0);
  return pair_new (PPX_TENSOR_F32, n, v);
}

Pair
pair_i32 (gsize n, const int32_t *v)
{
  return pair_new (PPX_TENSOR_I32, n, v);
}

/* max |gpu - cpu| over the pair, and max |cpu| in *scale. NaN anywhere counts as an infinite error. */
double
pair_err (const Pair *p, double *scale)
{
  g_autofree float *a = g_new (float, MAX (p->n, 1)), *b = g_new (float, MAX (p->n, 1));
  ppx_tensor_download (p->c, 0, a, p->n);
  ppx_tensor_download (p->g, 0, b, p->n);
  double err = 0.0, sc = 0.0;
  for (gsize i = 0; i < p->n; i++) {
    double d = fabs ((double) a[i] - (double) b[i]);
    if (isnan (d))
      d = INFINITY;
    err = MAX (err, d);
    sc = MAX (sc, fabs ((double) a[i]));
  }
  if (scale)
    *scale = sc;
  return err;
}

void
assert_close (const Pair *p, double tol, const char *what)
{
  double scale;
  double err = pair_err (p, &scale);
  if (g_test_verbose ())
    g_printerr ("  %-40s max abs err %.3g (scale %.3g)\n", what, err, scale);
  if (!(err <= tol * MAX (1.0, scale)))
    g_error ("%s: max abs err %.3g > %.3g (scale %.3g)", what, err, tol * MAX (1.0, scale), scale);
}

void
assert_same (const Pair *p, const char *what)
{
  g_autofree int32_t *a = g_new (int32_t, MAX (p->n, 1)), *b = g_new (int32_t, MAX (p->n, 1));
  ppx_tensor_download (p->c, 0, a, p->n);
  ppx_tensor_download (p->g, 0, b, p->n);
  for (gsize i = 0; i < p->n; i++)
    if (a[i] != b[i])
      g_error ("%s: element %" G_GSIZE_FORMAT " differs: cpu %d (0x%08x), gpu %d (0x%08x)", what, i, a[i],
               (unsigned) a[i], b[i], (unsigned) b[i]);
}

/* The GPU sides of two f32 pairs hold the same bits (a fused op against its unfused ops: @b_how names those). */
void
assert_gpu_bits_equal (const Pair *a, const Pair *b, const char *what, const char *b_how)
{
  g_assert_cmpuint (a->n, ==, b->n);
  g_autofree float *va = g_new (float, a->n), *vb = g_new (float, b->n);
  ppx_tensor_download (a->g, 0, va, a->n);
  ppx_tensor_download (b->g, 0, vb, b->n);
  for (gsize i = 0; i < a->n; i++)
    if (memcmp (&va[i], &vb[i], sizeof (float)) != 0)
      g_error ("%s: element %" G_GSIZE_FORMAT " is %.9g fused, %.9g as %s", what, i, va[i], vb[i], b_how);
}

/* ---- paired weights ---- */

/* bf16, int8 and int4 g32/g64/g128 take the tensor-core kernels; f32 and int4 g8/g48 the CUDA-core ones */
const Fmt formats[N_FORMATS] = {{PPX_WFMT_F32, 0},  {PPX_WFMT_BF16, 0},  {PPX_WFMT_INT8, 0},  {PPX_WFMT_INT4, 8},
                                {PPX_WFMT_INT4, 32}, {PPX_WFMT_INT4, 64}, {PPX_WFMT_INT4, 128}, {PPX_WFMT_INT4, 48}};

/* Random weights in `f` (quantized from f32 with the library's quantizers). */
WPair
wpair_random (Fmt f, int64_t rows, int64_t cols)
{
  g_autofree float *w = random_floats ((gsize) rows * cols, -1.0, 1.0);
  g_autofree void *data = NULL;
  g_autofree float *scales = NULL;
  PpxWeightDesc d = {.format = f.format, .rows = rows, .cols = cols, .group_size = f.group_size};
  switch (f.format) {
    case PPX_WFMT_F32:
      d.data = w;
      break;
    case PPX_WFMT_BF16: {
      uint16_t *b = g_new (uint16_t, (gsize) rows * cols);
      for (gsize i = 0; i < (gsize) rows * cols; i++)
        b[i] = ppx_f32_to_bf16 (w[i]);
      d.data = data = b;
      break;
    }
    case PPX_WFMT_INT8:
      data = g_new (int8_t, (gsize) rows * cols);
      scales = g_new (float, rows);
      ppx_q8_quantize (w, rows, cols, data, scales);
      d.data = data;
      d.scales = scales;
      break;
    case PPX_WFMT_INT4:
      data = g_malloc (ppx_q4_packed_bytes (rows, cols));
      scales = g_new (float, rows * ppx_q4_n_groups (cols, f.group_size));
      ppx_q4_quantize (w, rows, cols, f.group_size, data, scales);
      d.data = data;
      d.scales = scales;
      break;
  }
  g_autoptr (GError) err = NULL;
  WPair p = {ppx_weight_new (cpu, &d, &err), NULL};
  g_assert_no_error (err);
  p.g = ppx_weight_new (gpu, &d, &err);
  g_assert_no_error (err);
  return p;
}

void
wpair_free (WPair *p)
{
  ppx_weight_free (p->c);
  ppx_weight_free (p->g);
}

const char *
fmt_name (Fmt f)
{
  static char buf[32];
  if (f.format == PPX_WFMT_INT4)
    g_snprintf (buf, sizeof buf, "int4/g%d", f.group_size);
  else
    g_snprintf (buf, sizeof buf, "%s", ppx_weight_format_name (f.format));
  return buf;
}

/* the KV cache formats attention is tested and timed in */
const PpxKvFormat kv_formats[N_KV_FORMATS] = {PPX_KV_F32, PPX_KV_BF16, PPX_KV_FP8};

/* ---- Mimi's SEANet convolutions: the real layer shapes ---- */

/* The conv calls of one 80 ms frame of the default (PersonaPlex) Mimi, in the order ppx_seanet_forward and
 * ppx_mimi_batch_encode/decode make them: the SEANet layers (a residual block is two convs; the ELUs are fused
 * into the convs after them, the residual add into the block's second conv), then the encoder's downsampling
 * conv or, first in the decoder, the depthwise upsampling transposed conv. */
int
mimi_convs (gboolean decoder, MimiConv *out, int max)
{
  PpxConfig cfg;
  ppx_config_default (&cfg);
  g_autoptr (GError) err = NULL;
  g_assert_true (ppx_config_finish (&cfg, "default", &err));
  const PpxMimiConfig *m = &cfg.mimi;
  PpxSeanetLayer layers[PPX_SEANET_MAX_LAYERS];
  const int n = decoder ? ppx_seanet_decoder_layers (m, layers, PPX_SEANET_MAX_LAYERS)
                        : ppx_seanet_encoder_layers (m, layers, PPX_SEANET_MAX_LAYERS);
  int k = 0, L = decoder ? 2 : m->frame_size;
  PpxActivation pending = PPX_ACT_NONE;
#define ADD(...)                                                                                                     \
  do {                                                                                                               \
    g_assert_cmpint (k, <, max);                                                                                     \
    out[k++] = (MimiConv){__VA_ARGS__};                                                                              \
  } while (0)
  if (decoder)
    ADD (.name = "dec upsample (depthwise)", .tr = TRUE, .streaming = TRUE, .bias = FALSE, .Cin = m->dimension,
         .Cout = m->dimension, .K = 4, .stride = 2, .dil = 1, .L = 1, .groups = m->dimension, .act = PPX_ACT_NONE);
  for (int i = 0; i < n; i++) {
    const PpxSeanetLayer *l = &layers[i];
    const char *p = decoder ? "dec" : "enc";
    switch (l->kind) {
      case PPX_SEANET_CONV:
        ADD (.tr = FALSE, .streaming = (l->kernel - 1) * l->dilation + 1 - l->stride > 0, .bias = TRUE, .Cin = l->c_in,
             .Cout = l->c_out, .K = l->kernel, .stride = l->stride, .dil = l->dilation, .L = L, .groups = 1,
             .act = pending);
        pending = PPX_ACT_NONE;
        g_snprintf (out[k - 1].name, sizeof out[k - 1].name, "%s.%d conv", p, l->index);
        L /= l->stride;
        break;
      case PPX_SEANET_CONVTR:
        ADD (.tr = TRUE, .streaming = l->kernel > l->stride, .bias = TRUE, .Cin = l->c_in, .Cout = l->c_out,
             .K = l->kernel, .stride = l->stride, .dil = 1, .L = L, .groups = 1, .act = pending);
        pending = PPX_ACT_NONE;
        g_snprintf (out[k - 1].name, sizeof out[k - 1].name, "%s.%d convtr", p, l->index);
        L *= l->stride;
        break;
      case PPX_SEANET_RESBLOCK:
        ADD (.tr = FALSE, .streaming = (l->kernel - 1) * l->dilation > 0, .bias = TRUE, .Cin = l->c_in,
             .Cout = l->hidden, .K = l->kernel, .stride = 1, .dil = l->dilation, .L = L, .groups = 1,
             .act = PPX_ACT_ELU);
        g_snprintf (out[k - 1].name, sizeof out[k - 1].name, "%s.%d res conv1", p, l->index);
        ADD (.tr = FALSE, .streaming = FALSE, .bias = TRUE, .Cin = l->hidden, .Cout = l->c_in, .K = 1, .stride = 1,
             .dil = 1, .L = L, .groups = 1, .act = PPX_ACT_ELU, .res = TRUE);
        g_snprintf (out[k - 1].name, sizeof out[k - 1].name, "%s.%d res conv2", p, l->index);
        break;
      case PPX_SEANET_ELU:
        pending = PPX_ACT_ELU;
        break;
    }
  }
  if (!decoder)
    ADD (.name = "enc downsample", .tr = FALSE, .streaming = TRUE, .bias = FALSE, .Cin = m->dimension,
         .Cout = m->dimension, .K = 4, .stride = 2, .dil = 1, .L = L, .groups = 1, .act = PPX_ACT_NONE);
#undef ADD
  return k;
}

gsize
mc_state_row (const MimiConv *c)
{
  if (!c->streaming)
    return 0;
  return c->tr ? (gsize) c->Cout * (c->K - c->stride) : (gsize) c->Cin * ((c->K - 1) * c->dil + 1 - c->stride);
}

gsize
mc_out_row (const MimiConv *c)
{
  if (c->tr)
    return (gsize) c->Cout * (c->streaming ? c->stride * c->L : c->stride * (c->L - 1) + c->K);
  const int keff = (c->K - 1) * c->dil + 1, P = c->streaming ? keff - c->stride : 0;
  return (gsize) c->Cout * ((P + c->L - keff) / c->stride + 1);
}

gsize
mc_w_elems (const MimiConv *c)
{
  return c->tr ? (gsize) c->Cin * (c->Cout / c->groups) * c->K : (gsize) c->Cout * (c->Cin / c->groups) * c->K;
}

/* One call as ppx_seanet_forward makes it (act on x; with a residual, y = y + conv). */
void
mc_run (PpxBackend *be, const MimiConv *c, const PpxTensor *w, const PpxTensor *b, const PpxTensor *x, PpxTensor *st,
        PpxTensor *y, int M)
{
  if (c->tr)
    ppx_op_conv_transpose1d_act (be, c->act, w, c->bias ? b : NULL, x, c->streaming ? st : NULL, y, M, c->Cin, c->Cout,
                                 c->K, c->L, c->stride, c->groups);
  else
    ppx_op_conv1d_fused (be, c->act, w, c->bias ? b : NULL, x, c->streaming ? st : NULL, c->res ? y : NULL, y, M,
                         c->Cin, c->Cout, c->K, c->L, c->stride, c->dil, c->groups);
}

/* Weights like a trained layer's scale (1/sqrt(fan-in)), so outputs stay O(1) as in the model. */
Pair
mc_weights (const MimiConv *c)
{
  const double a = 1.0 / sqrt ((double) (c->tr ? c->Cin / c->groups * ((c->K + c->stride - 1) / c->stride)
                                              : c->Cin / c->groups * c->K));
  g_autofree float *v = random_floats (mc_w_elems (c), -a, a);
  return pair_new (PPX_TENSOR_F32, mc_w_elems (c), v);
}

void
mc_describe (const MimiConv *c, int M, char *buf, gsize n)
{
  g_snprintf (buf, n, "%-24s %s %4d -> %-4d K%-2d s%d d%d %s %4d%s%s%s", c->name, c->tr ? "convtr" : "conv  ",
              c->Cin, c->Cout, c->K, c->stride, c->dil, c->tr ? "T" : "L", c->L, c->act != PPX_ACT_NONE ? " elu" : "",
              c->res ? " +res" : "", M > 0 ? "" : "");
}

