/* CUDA backend: Mimi's streaming convolutions (the quantizer is in cuda-vq.cu).
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
