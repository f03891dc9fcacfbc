/* CPU backend: Mimi's convolutions and residual vector quantizer. */
#include "backend-cpu.h"

#include <math.h>

void
ppx_cpu_conv1d (PpxBackend *be, const PpxTensor *w, const PpxTensor *bias, const PpxTensor *x, PpxTensor *y, int M,
                int Cin, int Cout, int K, int Lin, int stride, int dilation, int groups)
{
  const int keff = (K - 1) * dilation + 1;
  const int Lout = Lin >= keff ? (Lin - keff) / stride + 1 : 0;
  const int cig = Cin / groups, cog = Cout / groups;
  const float *W = F32 (w), *B = bias ? F32 (bias) : NULL, *X = F32 (x);
  float *Y = F32 (y);
  const gboolean big = (gint64) M * Cout * Lout * cig * K >= (1 << 16);
#pragma omp parallel for collapse (2) if (big) num_threads (be->n_threads) schedule (static)
  for (int m = 0; m < M; m++) {
    for (int co = 0; co < Cout; co++) {
      const int g = co / cog;
      float *yr = Y + ((gsize) m * Cout + co) * Lout;
      for (int t = 0; t < Lout; t++)
        yr[t] = B ? B[co] : 0.0f;
      for (int ci = 0; ci < cig; ci++) {
        const float *xr = X + ((gsize) m * Cin + (gsize) g * cig + ci) * Lin;
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
}

void
ppx_cpu_conv_transpose1d (PpxBackend *be, const PpxTensor *w, const PpxTensor *bias, const PpxTensor *x,
                          PpxTensor *y, int M, int Cin, int Cout, int K, int T, int stride, int groups)
{
  const int Lout = stride * (T - 1) + K;
  const int cig = Cin / groups, cog = Cout / groups;
  const float *W = F32 (w), *B = bias ? F32 (bias) : NULL, *X = F32 (x);
  float *Y = F32 (y);
  const gboolean big = (gint64) M * Cout * T * cig * K >= (1 << 16);
#pragma omp parallel for collapse (2) if (big) num_threads (be->n_threads) schedule (static)
  for (int m = 0; m < M; m++) {
    for (int co = 0; co < Cout; co++) {
      const int g = co / cog, cl = co % cog;
      float *yr = Y + ((gsize) m * Cout + co) * Lout;
      for (int t = 0; t < Lout; t++)
        yr[t] = B ? B[co] : 0.0f;
      for (int ci = 0; ci < cig; ci++) {
        const int cin = g * cig + ci;
        const float *xr = X + ((gsize) m * Cin + cin) * T;
        const float *wr = W + ((gsize) cin * cog + cl) * K;
        for (int t = 0; t < T; t++)
          for (int k = 0; k < K; k++)
            yr[t * stride + k] += xr[t] * wr[k];
      }
    }
  }
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
