/* CPU backend: Mimi's convolutions and residual vector quantizer. */
#include "backend-cpu.h"

#include <math.h>

/* Plain conv of one session: X [Cin, Lin] -> Y [Cout, Lout]. */
static void
conv1d_one (const float *W, const float *B, const float *X, float *Y, int Cin, int Cout, int K, int Lin, int Lout,
            int stride, int dilation, int groups, int n_threads)
{
  const int cig = Cin / groups, cog = Cout / groups;
  const gboolean big = (gint64) Cout * Lout * cig * K >= (1 << 16);
#pragma omp parallel for if (big) num_threads (n_threads) schedule (static)
  for (int co = 0; co < Cout; co++) {
    const int g = co / cog;
    float *yr = Y + (gsize) co * Lout;
    for (int t = 0; t < Lout; t++)
      yr[t] = B ? B[co] : 0.0f;
    for (int ci = 0; ci < cig; ci++) {
      const float *xr = X + ((gsize) g * cig + ci) * Lin;
      const float *wr = W + ((gsize) co * cig + ci) * K;
      for (int k = 0; k < K; k++) {
        const float wk = wr[k];
        const float *xk = xr + k * dilation;
        for (int t = 0; t < Lout; t++)
          yr[t] += wk * xk[t * stride];
      }
    }
  }
}

/* act(X) for the n values of X: X itself for PPX_ACT_NONE, else a new buffer, also put in *owned (g_free;
 * NULL for PPX_ACT_NONE). */
static const float *
activated (PpxActivation act, const float *X, gsize n, float **owned)
{
  *owned = NULL;
  if (act == PPX_ACT_NONE)
    return X;
  *owned = g_new (float, MAX (n, 1));
  ppx_cpu_act_apply (act, X, *owned, n);
  return *owned;
}

/* act(x) first (the same values as ppx_op_act before the conv), the residual last (as ppx_op_add after it). */
void
ppx_cpu_conv1d (PpxBackend *be, PpxActivation act, const PpxTensor *w, const PpxTensor *bias, const PpxTensor *x,
                PpxTensor *prev, const PpxTensor *res, PpxTensor *y, int M, int Cin, int Cout, int K, int Lin,
                int stride, int dilation, int groups)
{
  const int keff = (K - 1) * dilation + 1;
  const int P = prev ? keff - stride : 0;
  const int L = P + Lin;
  const int Lout = L >= keff ? (L - keff) / stride + 1 : 0;
  const float *W = F32 (w), *B = bias ? F32 (bias) : NULL, *X = F32 (x);
  float *Y = F32 (y), *H = prev ? F32 (prev) : NULL;
  float *xa;
  X = activated (act, X, (gsize) M * Cin * Lin, &xa);
  /* the residual may be y itself: then kept aside before y is written */
  const gsize ny = (gsize) M * Cout * Lout;
  float *rcopy = res && res->data == y->data ? g_memdup2 (F32 (res), MAX (ny, 1) * sizeof (float)) : NULL;
  const float *r = rcopy ? rcopy : res ? F32 (res) : NULL;
  float *buf = P > 0 ? g_new (float, (gsize) Cin * L) : NULL;
  for (int m = 0; m < M; m++) {
    const float *xm = X + (gsize) m * Cin * Lin;
    if (P > 0) {
      float *hm = H + (gsize) m * Cin * P;
      for (int c = 0; c < Cin; c++) {
        memcpy (buf + (gsize) c * L, hm + (gsize) c * P, P * sizeof (float));
        memcpy (buf + (gsize) c * L + P, xm + (gsize) c * Lin, Lin * sizeof (float));
        memcpy (hm + (gsize) c * P, buf + (gsize) c * L + (L - P), P * sizeof (float));
      }
      xm = buf;
    }
    conv1d_one (W, B, xm, Y + (gsize) m * Cout * Lout, Cin, Cout, K, L, Lout, stride, dilation, groups, be->n_threads);
  }
  g_free (buf);
  g_free (xa);
  if (r) {
    for (gsize i = 0; i < ny; i++)
      Y[i] = r[i] + Y[i];
    g_free (rcopy);
  }
}

void
ppx_cpu_conv_transpose1d (PpxBackend *be, PpxActivation act, const PpxTensor *w, const PpxTensor *bias,
                          const PpxTensor *x, PpxTensor *partial, PpxTensor *y, int M, int Cin, int Cout, int K, int T,
                          int stride, int groups)
{
  const int Lz = stride * (T - 1) + K;
  const int tail = K - stride;
  const int Ly = partial ? stride * T : Lz;
  const int cig = Cin / groups, cog = Cout / groups;
  const float *W = F32 (w), *B = bias ? F32 (bias) : NULL, *X = F32 (x);
  float *Y = F32 (y), *Pt = partial ? F32 (partial) : NULL;
  float *xa;
  X = activated (act, X, (gsize) M * Cin * T, &xa);
  const gboolean big = (gint64) M * Cout * T * cig * K >= (1 << 16);
#pragma omp parallel for collapse (2) if (big) num_threads (be->n_threads) schedule (static)
  for (int m = 0; m < M; m++) {
    for (int co = 0; co < Cout; co++) {
      const int g = co / cog, cl = co % cog;
      float *z = g_new0 (float, Lz);
      for (int ci = 0; ci < cig; ci++) {
        const int cin = g * cig + ci;
        const float *xr = X + ((gsize) m * Cin + cin) * T;
        const float *wr = W + ((gsize) cin * cog + cl) * K;
        for (int t = 0; t < T; t++)
          for (int k = 0; k < K; k++)
            z[t * stride + k] += xr[t] * wr[k];
      }
      if (Pt) {
        float *pr = Pt + ((gsize) m * Cout + co) * tail;
        for (int i = 0; i < tail; i++)
          z[i] += pr[i];
        memcpy (pr, z + stride * T, tail * sizeof (float));
      }
      float *yr = Y + ((gsize) m * Cout + co) * Ly;
      const float b = B ? B[co] : 0.0f;
      for (int t = 0; t < Ly; t++)
        yr[t] = z[t] + b;
      g_free (z);
    }
  }
  g_free (xa);
}

void
ppx_cpu_vq_encode (PpxBackend *be, const PpxTensor *codebooks, PpxTensor *r, PpxTensor *codes, int code_off,
                   int code_stride, int M, int ncb, int bins, int dim)
{
  const float *E = F32 (codebooks);
  float *R = F32 (r);
  int32_t *C = I32 (codes);
  for (int m = 0; m < M; m++) {
    float *x = R + (gsize) m * dim;
    for (int j = 0; j < ncb; j++) {
      const float *cb = E + (gsize) j * bins * dim;
      /* The reference's cdist: d^2 = |x|^2 - 2 x.e + |e|^2, clamped at 0; first minimum wins. */
      float xx = 0.0f;
      for (int d = 0; d < dim; d++)
        xx += x[d] * x[d];
      int best = 0;
      float best_d = INFINITY;
      for (int i = 0; i < bins; i++) {
        const float *e = cb + (gsize) i * dim;
        float xe = 0.0f, ee = 0.0f;
        for (int d = 0; d < dim; d++) {
          xe += x[d] * e[d];
          ee += e[d] * e[d];
        }
        float d2 = MAX (xx - 2.0f * xe + ee, 0.0f);
        if (d2 < best_d) {
          best_d = d2;
          best = i;
        }
      }
      C[(gsize) m * code_stride + code_off + j] = best;
      const float *e = cb + (gsize) best * dim;
      for (int d = 0; d < dim; d++)
        x[d] -= e[d];
    }
  }
}

void
ppx_cpu_vq_decode (PpxBackend *be, const PpxTensor *codebooks, const PpxTensor *codes, int code_off, int code_stride,
                   PpxTensor *y, int M, int ncb, int bins, int dim)
{
  const float *E = F32 (codebooks);
  const int32_t *C = I32 (codes);
  float *Y = F32 (y);
  for (int m = 0; m < M; m++) {
    float *o = Y + (gsize) m * dim;
    memset (o, 0, dim * sizeof (float));
    for (int j = 0; j < ncb; j++) {
      int c = C[(gsize) m * code_stride + code_off + j];
      c = CLAMP (c, 0, bins - 1);
      const float *e = E + ((gsize) j * bins + c) * dim;
      for (int d = 0; d < dim; d++)
        o[d] += e[d];
    }
  }
}
