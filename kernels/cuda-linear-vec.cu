/* CUDA backend: linear layers on the CUDA cores (f32 weights; int4 with group sizes the tensor-core path,
 * cuda-linear-mma.cu, does not take; docs/cuda.md, "Linear layers"): one warp per weight row for up to 8
 * rows of x, f32 fused multiply-adds in a fixed order (also independent of M and of the row's position).
 * The entry points that choose this path are in cuda-linear.cu. */
#include "cuda-linear.cuh"

#define LIN_WARPS 8 /* rows per block */
#define LIN_MT 8    /* x rows per block at most (gridDim.y tiles M); fewer for M < 8 saves registers */

/* Weights per 16-byte vector, vectors in flight per lane, and scale groups per vector (int4 scales
 * change at most every 8 weights; f32 has none). */
template <int FMT> struct Vec;
template <> struct Vec<PPX_CUDA_W_F32> { static constexpr int N = 4, UNROLL = 4, GROUPS = 1; };
template <> struct Vec<PPX_CUDA_W_INT4> { static constexpr int N = 32, UNROLL = 4, GROUPS = 4; };

/* Byte k of `bytes` (0..255) plus 2^23, as a float: 0x4B0000bb is exactly 8388608 + bb. */
__device__ __forceinline__ float
byte_plus_2p23 (uint32_t bytes, int k)
{
  return __uint_as_float (__byte_perm (bytes, 0x4B000000u, 0x7540u | k));
}

/* The 16-byte vector v as floats, without scales: f32 exactly; int4 the code minus 8. */
template <int FMT>
__device__ __forceinline__ void
dequant_vec (uint4 v, float *w)
{
  const uint32_t u[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; i++) {
    if (FMT == PPX_CUDA_W_F32) {
      w[i] = __uint_as_float (u[i]);
    } else {
      /* byte k holds column 2k in its low nibble and 2k+1 in its high nibble */
      const uint32_t lo = u[i] & 0x0F0F0F0Fu, hi = (u[i] >> 4) & 0x0F0F0F0Fu;
#pragma unroll
      for (int k = 0; k < 4; k++) {
        w[8 * i + 2 * k] = byte_plus_2p23 (lo, k) - 8388616.0f; /* - (2^23 + 8) */
        w[8 * i + 2 * k + 1] = byte_plus_2p23 (hi, k) - 8388616.0f;
      }
    }
  }
}

/* The int4 scales of vector j's four 8-weight groups. vshift >= 0: a group is 2^vshift whole vectors. */
__device__ __forceinline__ void
int4_scales (const float *row_scales, int group_size, int vshift, uint32_t j, float *sc)
{
  if (vshift >= 0) {
    const float s = __ldg (row_scales + (j >> vshift));
#pragma unroll
    for (int g = 0; g < 4; g++)
      sc[g] = s;
  } else {
#pragma unroll
    for (int g = 0; g < 4; g++)
      sc[g] = __ldg (row_scales + (j * 32u + 8u * g) / (uint32_t) group_size);
  }
}

__device__ __forceinline__ float4
load_x4 (const float *p, bool vec)
{
  if (vec)
    return __ldg (reinterpret_cast<const float4 *> (p));
  return make_float4 (__ldg (p), __ldg (p + 1), __ldg (p + 2), __ldg (p + 3));
}

/* acc[m] += sum over the vector's weights of w * x[m] (int4: per 8-weight group, times its scale), as a
 * fixed chain of fused multiply-adds: the same operations for every m and every MT. */
template <int FMT, int MT>
__device__ __forceinline__ void
accumulate_vec (uint4 v, const float *sc, const float *__restrict__ xm, size_t ldx, bool xvec, uint32_t c0, int mt,
                float *acc)
{
  constexpr int N = Vec<FMT>::N, G = Vec<FMT>::GROUPS, PER = N / G;
  float wf[N];
  dequant_vec<FMT> (v, wf);
#pragma unroll
  for (int m = 0; m < MT; m++) {
    if (m < mt) {
      const float *xp = xm + (size_t) m * ldx + c0;
      float total = 0.0f;
#pragma unroll
      for (int g = 0; g < G; g++) {
        float part = 0.0f;
#pragma unroll
        for (int q = 0; q < PER / 4; q++) {
          const float4 a = load_x4 (xp + g * PER + 4 * q, xvec);
          const float *wq = wf + g * PER + 4 * q;
          part = fmaf (wq[3], a.w, fmaf (wq[2], a.z, fmaf (wq[1], a.y, fmaf (wq[0], a.x, part))));
        }
        total = FMT == PPX_CUDA_W_INT4 ? fmaf (sc[g], part, total) : total + part;
      }
      acc[m] += total;
    }
  }
}

template <int FMT, int MT>
__global__ void __launch_bounds__ (LIN_WARPS * 32)
linear_vec_kernel (PpxCudaWeight w, int vshift, const float *__restrict__ x, size_t ldx, int xvec,
                   float *__restrict__ y, size_t ldy, int M, int accumulate)
{
  ppx_pdl_enter ();
  constexpr int N = Vec<FMT>::N, U = Vec<FMT>::UNROLL;
  const int lane = threadIdx.x & 31;
  const int64_t r = (int64_t) blockIdx.x * LIN_WARPS + (threadIdx.x >> 5);
  const int m0 = blockIdx.y * MT;
  if (r >= w.rows)
    return;
  const int mt = min (MT, M - m0);
  const uint32_t nvec = (uint32_t) (w.cols / N);
  const uint4 *wr = (const uint4 *) w.data + (size_t) r * nvec; /* a row is nvec 16-byte vectors */
  const float *row_scales = FMT == PPX_CUDA_W_INT4 ? w.scales + r * ((w.cols + w.group_size - 1) / w.group_size) : NULL;
  const float *xm = x + (size_t) m0 * ldx;
  float acc[MT];
#pragma unroll
  for (int m = 0; m < MT; m++)
    acc[m] = 0.0f;
  float sc[4] = {1.0f, 1.0f, 1.0f, 1.0f};
  uint32_t j = lane;
  for (; j + 32 * (U - 1) < nvec; j += 32 * U) {
    uint4 v[U];
#pragma unroll
    for (int u = 0; u < U; u++)
      v[u] = __ldg (wr + j + 32 * u);
#pragma unroll
    for (int u = 0; u < U; u++) {
      if (FMT == PPX_CUDA_W_INT4)
        int4_scales (row_scales, w.group_size, vshift, j + 32 * u, sc);
      accumulate_vec<FMT, MT> (v[u], sc, xm, ldx, xvec, (j + 32 * u) * N, mt, acc);
    }
  }
  for (; j < nvec; j += 32) {
    if (FMT == PPX_CUDA_W_INT4)
      int4_scales (row_scales, w.group_size, vshift, j, sc);
    accumulate_vec<FMT, MT> (__ldg (wr + j), sc, xm, ldx, xvec, j * N, mt, acc);
  }
#pragma unroll
  for (int m = 0; m < MT; m++) {
    if (m < mt) {
      float s = ppx_warp_sum (acc[m]);
      if (lane == 0) {
        float *yp = y + (size_t) (m0 + m) * ldy + r;
        *yp = accumulate ? *yp + s : s;
      }
    }
  }
}

__global__ void __launch_bounds__ (LIN_WARPS * 32)
linear_generic_kernel (PpxCudaWeight w, const float *__restrict__ x, size_t ldx, float *__restrict__ y, size_t ldy,
                       int M, int accumulate)
{
  ppx_pdl_enter ();
  const int lane = threadIdx.x & 31;
  const int64_t r = (int64_t) blockIdx.x * LIN_WARPS + (threadIdx.x >> 5);
  const int m0 = blockIdx.y * LIN_MT;
  if (r >= w.rows)
    return;
  const int mt = min (LIN_MT, M - m0);
  float acc[LIN_MT];
#pragma unroll
  for (int m = 0; m < LIN_MT; m++)
    acc[m] = 0.0f;
  for (int64_t c = lane; c < w.cols; c += 32) {
    const float wc = ppx_weight_elem (w, r, c);
#pragma unroll
    for (int m = 0; m < LIN_MT; m++)
      if (m < mt)
        acc[m] = fmaf (wc, x[(size_t) (m0 + m) * ldx + c], acc[m]);
  }
#pragma unroll
  for (int m = 0; m < LIN_MT; m++) {
    if (m < mt) {
      float s = ppx_warp_sum (acc[m]);
      if (lane == 0) {
        float *yp = y + (size_t) (m0 + m) * ldy + r;
        *yp = accumulate ? *yp + s : s;
      }
    }
  }
}

/* log2 of the vectors per int4 group when a group is a power-of-two number of whole 32-weight vectors,
 * else -1 (then each 8-weight group's scale index is divided out). */
static int
int4_vector_shift (int group_size)
{
  if (group_size % 32)
    return -1;
  int v = group_size / 32, shift = 0;
  while ((1 << shift) < v)
    shift++;
  return (1 << shift) == v ? shift : -1;
}

template <int MT>
static void
launch_vec (const PpxCudaWeight *w, const float *x, size_t ldx, float *y, size_t ldy, int M, int accumulate,
            cudaStream_t s)
{
  dim3 grid (ppx_cdiv ((size_t) w->rows, LIN_WARPS), ppx_cdiv ((size_t) M, MT));
  const int xvec = (ldx % 4) == 0 && ((uintptr_t) x & 15) == 0;
  if (w->format == PPX_CUDA_W_F32)
    ppx_launch (linear_vec_kernel<PPX_CUDA_W_F32, MT>, grid, LIN_WARPS * 32, 0, s, *w, 0, x, ldx, xvec, y, ldy, M, accumulate);
  else
    ppx_launch (linear_vec_kernel<PPX_CUDA_W_INT4, MT>, grid, LIN_WARPS * 32, 0, s, *w, int4_vector_shift (w->group_size), x, ldx, xvec, y, ldy, M, accumulate);
}

/* The CUDA-core path. The choice between its two kernels depends on the weight only, so a row's
 * arithmetic never depends on M or on x's alignment. */
int
ppx_linear_vec (const PpxCudaWeight *w, const float *x, size_t ldx, float *y, size_t ldy, int M, int accumulate,
                cudaStream_t s)
{
  const int N = w->format == PPX_CUDA_W_F32 ? 4 : 32;
  const bool vec = (w->format == PPX_CUDA_W_F32 || w->format == PPX_CUDA_W_INT4) && w->cols % N == 0 &&
                   w->cols < ((int64_t) 1 << 31) && ((uintptr_t) w->data & 15) == 0;
  if (!vec) {
    dim3 grid (ppx_cdiv ((size_t) w->rows, LIN_WARPS), ppx_cdiv ((size_t) M, LIN_MT));
    ppx_launch (linear_generic_kernel, grid, LIN_WARPS * 32, 0, s, *w, x, ldx, y, ldy, M, accumulate);
  } else if (M == 1) {
    launch_vec<1> (w, x, ldx, y, ldy, M, accumulate, s);
  } else if (M == 2) {
    launch_vec<2> (w, x, ldx, y, ldy, M, accumulate, s);
  } else if (M <= 4) {
    launch_vec<4> (w, x, ldx, y, ldy, M, accumulate, s);
  } else {
    launch_vec<LIN_MT> (w, x, ldx, y, ldy, M, accumulate, s);
  }
  return ppx_cuda_launched ();
}
