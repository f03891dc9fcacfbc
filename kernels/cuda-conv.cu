/* CUDA backend: Mimi's streaming convolutions and residual vector quantizer.
 *
 * Convolutions are direct loops, one thread per output element, each summing in the CPU backend's
 * order (input channel, then tap). The streaming state is updated by a second launch after the
 * output is computed, so no thread reads state that another thread of the same launch rewrites. */
#include "cuda-common.cuh"

#include <math.h>

#define CONV_THREADS 256

/* y[m, co, t] over the virtual input concat(prev[m, :, :P], x[m, :, :Lin]) of length L = P + Lin. */
__global__ void
conv1d_kernel (const float *__restrict__ w, const float *__restrict__ bias, const float *__restrict__ x,
               const float *__restrict__ prev, float *__restrict__ y, int M, int Cin, int Cout, int K, int Lin, int P,
               int Lout, int stride, int dilation, int groups)
{
  const int cig = Cin / groups, cog = Cout / groups;
  const size_t n = (size_t) M * Cout * Lout;
  for (size_t idx = blockIdx.x * (size_t) blockDim.x + threadIdx.x; idx < n; idx += (size_t) gridDim.x * blockDim.x) {
    const int t = (int) (idx % Lout);
    const int co = (int) ((idx / Lout) % Cout);
    const int m = (int) (idx / ((size_t) Lout * Cout));
    const int g = co / cog;
    float acc = bias ? bias[co] : 0.0f;
    for (int ci = 0; ci < cig; ci++) {
      const int c = g * cig + ci;
      const float *xr = x + ((size_t) m * Cin + c) * Lin;
      const float *pr = prev ? prev + ((size_t) m * Cin + c) * P : NULL;
      const float *wr = w + ((size_t) co * cig + ci) * K;
      for (int k = 0; k < K; k++) {
        const int i = t * stride + k * dilation; /* index into the virtual input */
        const float xv = i < P ? pr[i] : xr[i - P];
        acc += wr[k] * xv;
      }
    }
    y[idx] = acc;
  }
}

/* prev[m, c, :] = the last P columns of concat(prev, x): one thread per (m, c), in increasing order, so
 * a column is read before it is overwritten (it moves left by Lin). */
__global__ void
conv1d_history_kernel (const float *x, float *prev, int M, int Cin, int Lin, int P)
{
  const size_t n = (size_t) M * Cin;
  for (size_t idx = blockIdx.x * (size_t) blockDim.x + threadIdx.x; idx < n; idx += (size_t) gridDim.x * blockDim.x) {
    float *pr = prev + idx * P;
    const float *xr = x + idx * Lin;
    for (int i = 0; i < P; i++) {
      const int src = Lin + i; /* index into the virtual input of length P + Lin */
      pr[i] = src < P ? pr[src] : xr[src - P];
    }
  }
}

extern "C" int
ppx_cuda_conv1d (const float *w, const float *bias, const float *x, float *prev, float *y, int M, int Cin, int Cout,
                 int K, int Lin, int stride, int dilation, int groups, void *stream)
{
  const int keff = (K - 1) * dilation + 1;
  const int P = prev ? keff - stride : 0;
  const int L = P + Lin;
  const int Lout = L >= keff ? (L - keff) / stride + 1 : 0;
  cudaStream_t s = PPX_CUDA_STREAM (stream);
  const size_t n = (size_t) M * Cout * Lout;
  if (n > 0) {
    conv1d_kernel<<<ppx_grid_for (n, CONV_THREADS), CONV_THREADS, 0, s>>> (w, bias, x, prev, y, M, Cin, Cout, K, Lin, P,
                                                                        Lout, stride, dilation, groups);
    int e = ppx_cuda_launched ();
    if (e)
      return e;
  }
  if (P > 0 && M > 0) {
    conv1d_history_kernel<<<ppx_grid_for ((size_t) M * Cin, CONV_THREADS), CONV_THREADS, 0, s>>> (x, prev, M, Cin, Lin,
                                                                                                 P);
    return ppx_cuda_launched ();
  }
  return 0;
}

/* z[m, co, j] = sum over (ci, t, k) with t*S + k = j of x[m, ci, t] * w[ci, co, k], in the CPU's order
 * (ci, then t); plus the old partial for j < tail; then y = z + bias for j < Ly and, with a partial,
 * the new partial (z[j] for j >= S*T) goes to `next` (copied over the partial by a later launch). */
__global__ void
conv_transpose1d_kernel (const float *__restrict__ w, const float *__restrict__ bias, const float *__restrict__ x,
                         const float *__restrict__ partial, float *__restrict__ next, float *__restrict__ y, int M,
                         int Cin, int Cout, int K, int T, int S, int groups, int Lz, int Ly, int tail)
{
  const int cig = Cin / groups, cog = Cout / groups;
  const size_t n = (size_t) M * Cout * Lz;
  for (size_t idx = blockIdx.x * (size_t) blockDim.x + threadIdx.x; idx < n; idx += (size_t) gridDim.x * blockDim.x) {
    const int j = (int) (idx % Lz);
    const int co = (int) ((idx / Lz) % Cout);
    const int m = (int) (idx / ((size_t) Lz * Cout));
    const int g = co / cog, cl = co % cog;
    /* taps k = j - t*S in [0, K)  <=>  t in [ceil((j-K+1)/S), floor(j/S)] */
    const int t_hi = min (j / S, T - 1);
    const int t_lo = j - K + 1 > 0 ? (j - K + 1 + S - 1) / S : 0;
    float z = 0.0f;
    for (int ci = 0; ci < cig; ci++) {
      const int cin = g * cig + ci;
      const float *xr = x + ((size_t) m * Cin + cin) * T;
      const float *wr = w + ((size_t) cin * cog + cl) * K;
      for (int t = t_lo; t <= t_hi; t++)
        z += xr[t] * wr[j - t * S];
    }
    const size_t mc = (size_t) m * Cout + co;
    if (partial && j < tail)
      z += partial[mc * tail + j];
    if (j < Ly)
      y[mc * Ly + j] = z + (bias ? bias[co] : 0.0f);
    if (partial && j >= S * T)
      next[mc * tail + (j - S * T)] = z;
  }
}

extern "C" int
ppx_cuda_conv_transpose1d (const float *w, const float *bias, const float *x, float *partial, float *y, int M, int Cin,
                           int Cout, int K, int T, int stride, int groups, float *scratch, void *stream)
{
  const int Lz = stride * (T - 1) + K;
  const int tail = K - stride;
  const int Ly = partial ? stride * T : Lz;
  cudaStream_t s = PPX_CUDA_STREAM (stream);
  const size_t n = (size_t) M * Cout * Lz;
  if (n == 0)
    return 0;
  conv_transpose1d_kernel<<<ppx_grid_for (n, CONV_THREADS), CONV_THREADS, 0, s>>> (
      w, bias, x, partial, scratch, y, M, Cin, Cout, K, T, stride, groups, Lz, Ly, tail);
  int e = ppx_cuda_launched ();
  if (e || !partial || tail <= 0)
    return e;
  return (int) cudaMemcpyAsync (partial, scratch, (size_t) M * Cout * tail * sizeof (float), cudaMemcpyDeviceToDevice,
                                s);
}

#define VQ_THREADS 256

/* One block per row m; codebooks in order (each step depends on the last). A warp per codebook entry
 * computes |r|^2 - 2 r.e + |e|^2 (clamped at 0, the reference's cdist); the first minimum wins. */
__global__ void __launch_bounds__ (VQ_THREADS)
vq_encode_kernel (const float *__restrict__ E, float *__restrict__ R, int32_t *__restrict__ C, int code_off,
                  int code_stride, int ncb, int bins, int dim)
{
  __shared__ float red[32];
  __shared__ float best_d[32];
  __shared__ int best_i[32];
  extern __shared__ float x[]; /* dim floats */
  const int m = blockIdx.x;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  float *r = R + (size_t) m * dim;
  for (int d = threadIdx.x; d < dim; d += blockDim.x)
    x[d] = r[d];
  __syncthreads ();
  for (int j = 0; j < ncb; j++) {
    const float *cb = E + (size_t) j * bins * dim;
    float xx = 0.0f;
    for (int d = threadIdx.x; d < dim; d += blockDim.x)
      xx += x[d] * x[d];
    xx = ppx_block_sum (xx, red);
    float wd = INFINITY;
    int wi = 0x7fffffff;
    for (int i = warp; i < bins; i += nwarps) {
      const float *e = cb + (size_t) i * dim;
      float xe = 0.0f, ee = 0.0f;
      for (int d = lane; d < dim; d += 32) {
        xe += x[d] * e[d];
        ee += e[d] * e[d];
      }
      xe = ppx_warp_sum (xe);
      ee = ppx_warp_sum (ee);
      const float d2 = fmaxf (xx - 2.0f * xe + ee, 0.0f);
      if (d2 < wd) { /* i increases within a warp, so strict < keeps the first */
        wd = d2;
        wi = i;
      }
    }
    if (lane == 0) {
      best_d[warp] = wd;
      best_i[warp] = wi;
    }
    __syncthreads ();
    if (warp == 0) {
      float bd = lane < nwarps ? best_d[lane] : INFINITY;
      int bi = lane < nwarps ? best_i[lane] : 0x7fffffff;
      for (int o = 16; o > 0; o >>= 1) {
        const float od = __shfl_xor_sync (0xffffffffu, bd, o);
        const int oi = __shfl_xor_sync (0xffffffffu, bi, o);
        if (od < bd || (od == bd && oi < bi)) {
          bd = od;
          bi = oi;
        }
      }
      if (lane == 0)
        best_i[0] = bi == 0x7fffffff ? 0 : bi; /* all distances NaN: entry 0, as on the CPU */
    }
    __syncthreads ();
    const int best = best_i[0];
    if (threadIdx.x == 0)
      C[(size_t) m * code_stride + code_off + j] = best;
    const float *e = cb + (size_t) best * dim;
    for (int d = threadIdx.x; d < dim; d += blockDim.x)
      x[d] -= e[d];
    __syncthreads ();
  }
  for (int d = threadIdx.x; d < dim; d += blockDim.x)
    r[d] = x[d];
}

extern "C" int
ppx_cuda_vq_encode (const float *codebooks, float *r, int32_t *codes, int code_off, int code_stride, int M, int ncb,
                    int bins, int dim, void *stream)
{
  if (M <= 0 || ncb <= 0)
    return 0;
  vq_encode_kernel<<<(unsigned) M, VQ_THREADS, dim * sizeof (float), PPX_CUDA_STREAM (stream)>>> (
      codebooks, r, codes, code_off, code_stride, ncb, bins, dim);
  return ppx_cuda_launched ();
}

/* y[m, d] = sum_j E_j[code_j][d] from j = 0, exactly the CPU's order. */
__global__ void
vq_decode_kernel (const float *E, const int32_t *C, int code_off, int code_stride, float *y, int M, int ncb, int bins,
                  int dim)
{
  const size_t n = (size_t) M * dim;
  for (size_t idx = blockIdx.x * (size_t) blockDim.x + threadIdx.x; idx < n; idx += (size_t) gridDim.x * blockDim.x) {
    const int m = (int) (idx / dim), d = (int) (idx % dim);
    float acc = 0.0f;
    for (int j = 0; j < ncb; j++) {
      int c = C[(size_t) m * code_stride + code_off + j];
      c = c < 0 ? 0 : (c > bins - 1 ? bins - 1 : c);
      acc += E[((size_t) j * bins + c) * dim + d];
    }
    y[idx] = acc;
  }
}

extern "C" int
ppx_cuda_vq_decode (const float *codebooks, const int32_t *codes, int code_off, int code_stride, float *y, int M,
                    int ncb, int bins, int dim, void *stream)
{
  const size_t n = (size_t) M * dim;
  if (n == 0)
    return 0;
  vq_decode_kernel<<<ppx_grid_for (n, 256), 256, 0, PPX_CUDA_STREAM (stream)>>> (codebooks, codes, code_off,
                                                                               code_stride, y, M, ncb, bins, dim);
  return ppx_cuda_launched ();
}
