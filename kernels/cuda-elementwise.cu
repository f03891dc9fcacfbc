/* CUDA backend: fills, strided copies, activations, residual adds, norms, transposes, teacher forcing.
 * Element ops are grid-stride loops; norms run one block per row with fixed-order reductions. */
#include "cuda-common.cuh"

#include <math.h>

#define EW_THREADS 256
#define ROW_THREADS 256

template <typename T>
__global__ void
fill_kernel (T *p, size_t n, T v)
{
  ppx_pdl_enter ();
  for (size_t i = blockIdx.x * (size_t) blockDim.x + threadIdx.x; i < n; i += (size_t) gridDim.x * blockDim.x)
    p[i] = v;
}

template <typename T>
static int
fill (T *p, size_t n, T v, void *stream)
{
  if (n == 0)
    return 0;
  ppx_launch (fill_kernel<T>, ppx_grid_for (n, EW_THREADS), EW_THREADS, 0, PPX_CUDA_STREAM (stream), p, n, v);
  return ppx_cuda_launched ();
}

extern "C" int
ppx_cuda_fill_f32 (float *p, size_t n, float v, void *stream)
{
  return fill (p, n, v, stream);
}

extern "C" int
ppx_cuda_fill_i32 (int32_t *p, size_t n, int32_t v, void *stream)
{
  return fill (p, n, v, stream);
}

__global__ void
copy2d_kernel (uint32_t *dst, size_t dld, const uint32_t *src, size_t sld, size_t rows, size_t cols)
{
  ppx_pdl_enter ();
  const size_t n = rows * cols;
  for (size_t i = blockIdx.x * (size_t) blockDim.x + threadIdx.x; i < n; i += (size_t) gridDim.x * blockDim.x) {
    size_t r = i / cols, c = i % cols;
    dst[r * dld + c] = src[r * sld + c];
  }
}

extern "C" int
ppx_cuda_copy2d (uint32_t *dst, size_t dld, const uint32_t *src, size_t sld, size_t rows, size_t cols, void *stream)
{
  if (rows == 0 || cols == 0)
    return 0;
  if (rows == 1 || (dld == cols && sld == cols))
    return (int) cudaMemcpyAsync (dst, src, rows * cols * 4, cudaMemcpyDeviceToDevice, PPX_CUDA_STREAM (stream));
  ppx_launch (copy2d_kernel, ppx_grid_for (rows * cols, EW_THREADS), EW_THREADS, 0, PPX_CUDA_STREAM (stream), dst, dld, src, sld, rows, cols);
  return ppx_cuda_launched ();
}

/* PpxActivation: 0 ELU, 1 GELU (erf), 2 SiLU; the CPU backend's formulas. */
__global__ void
act_kernel (int act, const float *x, float *y, size_t n)
{
  ppx_pdl_enter ();
  for (size_t i = blockIdx.x * (size_t) blockDim.x + threadIdx.x; i < n; i += (size_t) gridDim.x * blockDim.x)
    y[i] = ppx_act_apply (act, x[i]);
}

extern "C" int
ppx_cuda_act (int act, const float *x, float *y, size_t n, void *stream)
{
  if (n == 0)
    return 0;
  ppx_launch (act_kernel, ppx_grid_for (n, EW_THREADS), EW_THREADS, 0, PPX_CUDA_STREAM (stream), act, x, y, n);
  return ppx_cuda_launched ();
}

__global__ void
add_kernel (const float *a, const float *b, float *y, size_t n)
{
  ppx_pdl_enter ();
  for (size_t i = blockIdx.x * (size_t) blockDim.x + threadIdx.x; i < n; i += (size_t) gridDim.x * blockDim.x)
    y[i] = a[i] + b[i];
}

extern "C" int
ppx_cuda_add (const float *a, const float *b, float *y, size_t n, void *stream)
{
  if (n == 0)
    return 0;
  ppx_launch (add_kernel, ppx_grid_for (n, EW_THREADS), EW_THREADS, 0, PPX_CUDA_STREAM (stream), a, b, y, n);
  return ppx_cuda_launched ();
}

__global__ void
add_scaled_kernel (const float *x, const float *gamma, float *y, size_t rows, size_t D)
{
  ppx_pdl_enter ();
  const size_t n = rows * D;
  for (size_t i = blockIdx.x * (size_t) blockDim.x + threadIdx.x; i < n; i += (size_t) gridDim.x * blockDim.x)
    y[i] += gamma[i % D] * x[i];
}

extern "C" int
ppx_cuda_add_scaled (const float *x, const float *gamma, float *y, size_t rows, size_t D, void *stream)
{
  if (rows * D == 0)
    return 0;
  ppx_launch (add_scaled_kernel, ppx_grid_for (rows * D, EW_THREADS), EW_THREADS, 0, PPX_CUDA_STREAM (stream), x, gamma, y, rows, D);
  return ppx_cuda_launched ();
}

__global__ void
silu_gate_kernel (const float *h, float *u, size_t rows, size_t H)
{
  ppx_pdl_enter ();
  const size_t n = rows * H;
  for (size_t i = blockIdx.x * (size_t) blockDim.x + threadIdx.x; i < n; i += (size_t) gridDim.x * blockDim.x) {
    size_t r = i / H, c = i % H;
    u[i] = ppx_silu_gate (h[r * 2 * H + c], h[r * 2 * H + H + c]);
  }
}

extern "C" int
ppx_cuda_silu_gate (const float *h, float *u, size_t rows, size_t H, void *stream)
{
  if (rows * H == 0)
    return 0;
  ppx_launch (silu_gate_kernel, ppx_grid_for (rows * H, EW_THREADS), EW_THREADS, 0, PPX_CUDA_STREAM (stream), h, u, rows, H);
  return ppx_cuda_launched ();
}

__global__ void
rmsnorm_kernel (const float *x, const float *alpha, float *y, size_t D, float eps)
{
  ppx_pdl_enter ();
  __shared__ float red[32];
  const float *xr = x + blockIdx.x * D;
  float *yr = y + blockIdx.x * D;
  /* thread t sums columns 4t .. 4t + 3, then 4t + 4 blockDim.x .., in that order (the order the fused
   * rmsnorm + linear kernel reproduces, cuda-linear.cu); whole float4 loads where the rows allow */
  const bool vec = D % 4 == 0 && ((uintptr_t) x & 15) == 0;
  float ss = 0.0f;
  for (size_t c4 = 4 * (size_t) threadIdx.x; c4 < D; c4 += 4 * (size_t) blockDim.x) {
    float v[4];
    if (vec) {
      const float4 q = *reinterpret_cast<const float4 *> (xr + c4);
      v[0] = q.x, v[1] = q.y, v[2] = q.z, v[3] = q.w;
    } else {
#pragma unroll
      for (int j = 0; j < 4; j++)
        v[j] = c4 + j < D ? xr[c4 + j] : 0.0f;
    }
#pragma unroll
    for (int j = 0; j < 4; j++)
      ss += v[j] * v[j];
  }
  ss = ppx_block_sum (ss, red);
  const float inv = 1.0f / sqrtf (eps + ss / (float) D);
  for (size_t c = threadIdx.x; c < D; c += blockDim.x)
    yr[c] = xr[c] * (alpha[c] * inv);
}

extern "C" int
ppx_cuda_rmsnorm (const float *x, const float *alpha, float *y, size_t rows, size_t D, float eps, void *stream)
{
  if (rows == 0 || D == 0)
    return 0;
  ppx_launch (rmsnorm_kernel, (unsigned) rows, ROW_THREADS, 0, PPX_CUDA_STREAM (stream), x, alpha, y, D, eps);
  return ppx_cuda_launched ();
}

/* Two passes like the CPU backend: the mean, then the mean squared deviation. */
__global__ void
layernorm_kernel (const float *x, const float *w, const float *b, float *y, size_t D, float eps)
{
  ppx_pdl_enter ();
  __shared__ float red[32];
  const float *xr = x + blockIdx.x * D;
  float *yr = y + blockIdx.x * D;
  float s = 0.0f;
  for (size_t c = threadIdx.x; c < D; c += blockDim.x)
    s += xr[c];
  const float mean = ppx_block_sum (s, red) / (float) D;
  float v = 0.0f;
  for (size_t c = threadIdx.x; c < D; c += blockDim.x)
    v += (xr[c] - mean) * (xr[c] - mean);
  const float var = ppx_block_sum (v, red) / (float) D;
  const float inv = 1.0f / sqrtf (var + eps);
  for (size_t c = threadIdx.x; c < D; c += blockDim.x)
    yr[c] = (xr[c] - mean) * inv * w[c] + b[c];
}

extern "C" int
ppx_cuda_layernorm (const float *x, const float *w, const float *b, float *y, size_t rows, size_t D, float eps,
                    void *stream)
{
  if (rows == 0 || D == 0)
    return 0;
  ppx_launch (layernorm_kernel, (unsigned) rows, ROW_THREADS, 0, PPX_CUDA_STREAM (stream), x, w, b, y, D, eps);
  return ppx_cuda_launched ();
}

/* [M, A, B] -> [M, B, A] through 32x32 shared tiles (coalesced reads and writes). */
__global__ void
transpose_kernel (const float *x, float *y, size_t A, size_t B)
{
  ppx_pdl_enter ();
  __shared__ float tile[32][33];
  const size_t m = blockIdx.z;
  const float *xm = x + m * A * B;
  float *ym = y + m * A * B;
  const size_t i0 = (size_t) blockIdx.y * 32, j0 = (size_t) blockIdx.x * 32;
  for (int k = threadIdx.y; k < 32; k += blockDim.y) {
    size_t i = i0 + k, j = j0 + threadIdx.x;
    if (i < A && j < B)
      tile[k][threadIdx.x] = xm[i * B + j];
  }
  __syncthreads ();
  for (int k = threadIdx.y; k < 32; k += blockDim.y) {
    size_t j = j0 + k, i = i0 + threadIdx.x;
    if (i < A && j < B)
      ym[j * A + i] = tile[threadIdx.x][k];
  }
}

extern "C" int
ppx_cuda_transpose (const float *x, float *y, size_t M, size_t A, size_t B, void *stream)
{
  if (M == 0 || A == 0 || B == 0)
    return 0;
  dim3 grid (ppx_cdiv (B, 32), ppx_cdiv (A, 32), (unsigned) M);
  ppx_launch (transpose_kernel, grid, dim3 (32, 8), 0, PPX_CUDA_STREAM (stream), x, y, A, B);
  return ppx_cuda_launched ();
}

__global__ void
force_tokens_kernel (int32_t *tokens, int off, int stride, const int32_t *forced, int foff, int fstride, int M)
{
  ppx_pdl_enter ();
  int m = blockIdx.x * blockDim.x + threadIdx.x;
  if (m >= M)
    return;
  int32_t v = forced[(size_t) m * fstride + foff];
  if (v >= 0)
    tokens[(size_t) m * stride + off] = v;
}

extern "C" int
ppx_cuda_force_tokens (int32_t *tokens, int off, int stride, const int32_t *forced, int foff, int fstride, int M,
                       void *stream)
{
  if (M <= 0)
    return 0;
  ppx_launch (force_tokens_kernel, ppx_cdiv (M, 128), 128, 0, PPX_CUDA_STREAM (stream), tokens, off, stride, forced, foff, fstride, M);
  return ppx_cuda_launched ();
}
