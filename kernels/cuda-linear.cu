/* CUDA backend: linear layers (y = x W^T) and embedding gathers for f32, bf16, int8 and int4 weights.
 *
 * Linear: one warp per weight row, so each weight byte is read once per m-tile of up to 8 rows of x
 * (M = 1, the batch-1 decode, has its own kernel below that stages x in shared memory).
 * The fast path reads the weight row in 16-byte vectors (4 f32, 8 bf16, 16 int8 or 32 int4 weights),
 * several vectors in flight per lane, dequantizes in registers (int8/int4 codes become floats through
 * byte permutes into 0x4B0000xx, no conversion instructions; scales are applied per row for int8 and per
 * 8-weight group for int4) and accumulates in f32; the warp's lanes are then summed with shuffles.
 * It needs 16-byte aligned rows and x (cols a multiple of the vector width); anything else takes the
 * generic path (one weight per lane per step). The summation order differs from the CPU's, so results
 * agree to f32 rounding, not bit for bit. */
#include "cuda-common.cuh"

#include <cuda_bf16.h>

#define LIN_WARPS 8 /* rows per block */
#define LIN_MT 8    /* x rows per block at most (gridDim.y tiles M); fewer for M < 8 saves registers */

/* Weights per 16-byte vector, vectors in flight per lane, and scale groups per vector (int4 scales
 * change at most every 8 weights; the other formats have one scale per row, applied at the end). */
template <int FMT> struct Vec;
template <> struct Vec<PPX_CUDA_W_F32> { static constexpr int N = 4, UNROLL = 4, GROUPS = 1; };
template <> struct Vec<PPX_CUDA_W_BF16> { static constexpr int N = 8, UNROLL = 4, GROUPS = 1; };
template <> struct Vec<PPX_CUDA_W_INT8> { static constexpr int N = 16, UNROLL = 4, GROUPS = 1; };
template <> struct Vec<PPX_CUDA_W_INT4> { static constexpr int N = 32, UNROLL = 4, GROUPS = 4; };

__device__ __forceinline__ float
bf16_bits_to_f32 (uint32_t h)
{
  return __uint_as_float (h << 16);
}

/* Byte k of `bytes` (0..255) plus 2^23, as a float: 0x4B0000bb is exactly 8388608 + bb. Two integer-pipe
 * instructions and no int-to-float conversion (a quarter-rate instruction). */
__device__ __forceinline__ float
byte_plus_2p23 (uint32_t bytes, int k)
{
  return __uint_as_float (__byte_perm (bytes, 0x4B000000u, 0x7540u | k));
}

/* The 16-byte vector v as floats, without scales: f32 and bf16 exactly; int8 the code q; int4 the code
 * minus 8 (all exact in f32). */
template <int FMT>
__device__ __forceinline__ void
dequant_vec (uint4 v, float *w)
{
  const uint32_t u[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; i++) {
    if (FMT == PPX_CUDA_W_F32) {
      w[i] = __uint_as_float (u[i]);
    } else if (FMT == PPX_CUDA_W_BF16) {
      w[2 * i] = bf16_bits_to_f32 (u[i] & 0xffffu);
      w[2 * i + 1] = bf16_bits_to_f32 (u[i] >> 16);
    } else if (FMT == PPX_CUDA_W_INT8) {
      const uint32_t biased = u[i] ^ 0x80808080u; /* q + 128 in each byte */
#pragma unroll
      for (int k = 0; k < 4; k++)
        w[4 * i + k] = byte_plus_2p23 (biased, k) - 8388736.0f; /* - (2^23 + 128) */
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

/* acc[m] += sum over the vector's weights of w * x[m] (int4: per 8-weight group, times its scale). */
template <int FMT, int MT>
__device__ __forceinline__ void
accumulate_vec (uint4 v, const float *sc, const float *__restrict__ xm, size_t ldx, uint32_t c0, int mt, float *acc)
{
  constexpr int N = Vec<FMT>::N, G = Vec<FMT>::GROUPS, PER = N / G;
  float wf[N];
  dequant_vec<FMT> (v, wf);
#pragma unroll
  for (int m = 0; m < MT; m++) {
    if (m < mt) {
      const float4 *xv = (const float4 *) (xm + (size_t) m * ldx + c0);
      float total = 0.0f;
#pragma unroll
      for (int g = 0; g < G; g++) {
        float part = 0.0f;
#pragma unroll
        for (int q = 0; q < PER / 4; q++) {
          const float4 a = __ldg (xv + g * (PER / 4) + q);
          const float *wq = wf + g * PER + 4 * q;
          part += wq[0] * a.x + wq[1] * a.y + wq[2] * a.z + wq[3] * a.w;
        }
        total = FMT == PPX_CUDA_W_INT4 ? fmaf (sc[g], part, total) : total + part;
      }
      acc[m] += total;
    }
  }
}

template <int FMT, int MT>
__global__ void __launch_bounds__ (LIN_WARPS * 32)
linear_vec_kernel (PpxCudaWeight w, int vshift, const float *__restrict__ x, size_t ldx, float *__restrict__ y,
                   size_t ldy, int M, int accumulate)
{
  /* with several x rows the work per vector is larger: fewer vectors in flight keep registers in check */
  constexpr int N = Vec<FMT>::N, U = (MT >= 4 && N >= 16) ? 1 : Vec<FMT>::UNROLL;
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
      accumulate_vec<FMT, MT> (v[u], sc, xm, ldx, (j + 32 * u) * N, mt, acc);
    }
  }
  for (; j < nvec; j += 32) {
    if (FMT == PPX_CUDA_W_INT4)
      int4_scales (row_scales, w.group_size, vshift, j, sc);
    accumulate_vec<FMT, MT> (__ldg (wr + j), sc, xm, ldx, j * N, mt, acc);
  }
  const float row_scale = FMT == PPX_CUDA_W_INT8 ? w.scales[r] : 1.0f;
#pragma unroll
  for (int m = 0; m < MT; m++) {
    if (m < mt) {
      float s = ppx_warp_sum (acc[m]) * row_scale;
      if (lane == 0) {
        float *yp = y + (size_t) (m0 + m) * ldy + r;
        *yp = accumulate ? *yp + s : s;
      }
    }
  }
}

/* ---- M = 1: x staged in shared memory ----
 * In the kernel above lane l reads x[(j+l)*N .. +N) straight from global memory: one 16-byte load
 * instruction touches 32 different 128-byte lines for int4 (16 for int8), so the L1 wavefronts for x,
 * not the weight bytes, bound the kernel (measured: int4 ~0.5 TB/s). Here the block first copies x into
 * shared memory with coalesced loads, in float4 slots swizzled by f ^ ((f >> 3) & 7), which makes the
 * lanes' strided float4 reads conflict-free for every vector width. */
#define SMEM_WARPS 16 /* rows per block: x is staged once per 16 rows */
#define SMEM_MAX_BYTES (96 * 1024)

__device__ __forceinline__ uint32_t
x_slot (uint32_t f)
{
  return f ^ ((f >> 3) & 7u);
}

template <int FMT>
__device__ __forceinline__ float
dot_vec_shared (uint4 v, const float *sc, const float4 *xs, uint32_t f0)
{
  constexpr int N = Vec<FMT>::N, G = Vec<FMT>::GROUPS, PER = N / G;
  float wf[N];
  dequant_vec<FMT> (v, wf);
  float total = 0.0f;
#pragma unroll
  for (int g = 0; g < G; g++) {
    float part = 0.0f;
#pragma unroll
    for (int q = 0; q < PER / 4; q++) {
      const float4 a = xs[x_slot (f0 + g * (PER / 4) + q)];
      const float *wq = wf + g * PER + 4 * q;
      part += wq[0] * a.x + wq[1] * a.y + wq[2] * a.z + wq[3] * a.w;
    }
    total = FMT == PPX_CUDA_W_INT4 ? fmaf (sc[g], part, total) : total + part;
  }
  return total;
}

template <int FMT>
__global__ void __launch_bounds__ (SMEM_WARPS * 32)
linear_m1_kernel (PpxCudaWeight w, int vshift, const float *__restrict__ x, float *__restrict__ y, int accumulate)
{
  extern __shared__ float4 xs[];
  constexpr int N = Vec<FMT>::N, U = Vec<FMT>::UNROLL;
  const int lane = threadIdx.x & 31;
  const int64_t r = (int64_t) blockIdx.x * SMEM_WARPS + (threadIdx.x >> 5);
  const uint32_t nvec = (uint32_t) (w.cols / N), nx4 = (uint32_t) (w.cols / 4);
  const uint4 *wr = (const uint4 *) w.data + (size_t) (r < w.rows ? r : 0) * nvec;
  /* the first weights are requested before waiting for x */
  uint4 v[U];
  uint32_t j = lane;
#pragma unroll
  for (int u = 0; u < U; u++)
    if (j + 32 * u < nvec)
      v[u] = __ldg (wr + j + 32 * u);
  for (uint32_t f = threadIdx.x; f < nx4; f += blockDim.x)
    xs[x_slot (f)] = __ldg ((const float4 *) x + f);
  __syncthreads ();
  if (r >= w.rows)
    return;
  const float *row_scales = FMT == PPX_CUDA_W_INT4 ? w.scales + r * ((w.cols + w.group_size - 1) / w.group_size) : NULL;
  float acc = 0.0f, sc[4] = {1.0f, 1.0f, 1.0f, 1.0f};
  while (j + 32 * (U - 1) < nvec) {
#pragma unroll
    for (int u = 0; u < U; u++) {
      if (FMT == PPX_CUDA_W_INT4)
        int4_scales (row_scales, w.group_size, vshift, j + 32 * u, sc);
      acc += dot_vec_shared<FMT> (v[u], sc, xs, (j + 32 * u) * (N / 4));
    }
    j += 32 * U;
#pragma unroll
    for (int u = 0; u < U; u++)
      if (j + 32 * u < nvec)
        v[u] = __ldg (wr + j + 32 * u);
  }
  /* fewer than U vectors left for this lane: they are already in v */
#pragma unroll
  for (int u = 0; u < U; u++) {
    if (j + 32 * u < nvec) {
      if (FMT == PPX_CUDA_W_INT4)
        int4_scales (row_scales, w.group_size, vshift, j + 32 * u, sc);
      acc += dot_vec_shared<FMT> (v[u], sc, xs, (j + 32 * u) * (N / 4));
    }
  }
  float s = ppx_warp_sum (acc) * (FMT == PPX_CUDA_W_INT8 ? w.scales[r] : 1.0f);
  if (lane == 0)
    y[r] = accumulate ? y[r] + s : s;
}

/* W[r, c] in f32, exactly as the CPU backend dequantizes it. */
__device__ __forceinline__ float
weight_elem (const PpxCudaWeight &w, int64_t r, int64_t c)
{
  switch (w.format) {
    case PPX_CUDA_W_F32:
      return ((const float *) w.data)[r * w.cols + c];
    case PPX_CUDA_W_BF16:
      return bf16_bits_to_f32 (((const uint16_t *) w.data)[r * w.cols + c]);
    case PPX_CUDA_W_INT8:
      return (float) ((const int8_t *) w.data)[r * w.cols + c] * w.scales[r];
    default: {
      const uint8_t b = ((const uint8_t *) w.data)[r * ((w.cols + 1) / 2) + c / 2];
      const int code = (c & 1) ? b >> 4 : b & 0x0f;
      const int64_t ng = (w.cols + w.group_size - 1) / w.group_size;
      return (float) (code - 8) * w.scales[r * ng + c / w.group_size];
    }
  }
}

__global__ void __launch_bounds__ (LIN_WARPS * 32)
linear_generic_kernel (PpxCudaWeight w, const float *__restrict__ x, size_t ldx, float *__restrict__ y, size_t ldy,
                       int M, int accumulate)
{
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
    const float wc = weight_elem (w, r, c);
#pragma unroll
    for (int m = 0; m < LIN_MT; m++)
      if (m < mt)
        acc[m] += wc * x[(size_t) (m0 + m) * ldx + c];
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

static int
vec_width (int format)
{
  switch (format) {
    case PPX_CUDA_W_F32:
      return 4;
    case PPX_CUDA_W_BF16:
      return 8;
    case PPX_CUDA_W_INT8:
      return 16;
    default:
      return 32;
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
            void *stream)
{
  dim3 grid (ppx_cdiv ((size_t) w->rows, LIN_WARPS), ppx_cdiv ((size_t) M, MT));
  cudaStream_t s = PPX_CUDA_STREAM (stream);
  const int vshift = w->format == PPX_CUDA_W_INT4 ? int4_vector_shift (w->group_size) : 0;
  switch (w->format) {
    case PPX_CUDA_W_F32:
      linear_vec_kernel<PPX_CUDA_W_F32, MT><<<grid, LIN_WARPS * 32, 0, s>>> (*w, vshift, x, ldx, y, ldy, M, accumulate);
      break;
    case PPX_CUDA_W_BF16:
      linear_vec_kernel<PPX_CUDA_W_BF16, MT><<<grid, LIN_WARPS * 32, 0, s>>> (*w, vshift, x, ldx, y, ldy, M, accumulate);
      break;
    case PPX_CUDA_W_INT8:
      linear_vec_kernel<PPX_CUDA_W_INT8, MT><<<grid, LIN_WARPS * 32, 0, s>>> (*w, vshift, x, ldx, y, ldy, M, accumulate);
      break;
    default:
      linear_vec_kernel<PPX_CUDA_W_INT4, MT><<<grid, LIN_WARPS * 32, 0, s>>> (*w, vshift, x, ldx, y, ldy, M, accumulate);
      break;
  }
}

/* Shared memory for x in linear_m1_kernel: whole groups of 8 float4 slots (the swizzle stays inside one). */
static size_t
m1_smem_bytes (const PpxCudaWeight *w)
{
  return (size_t) ((w->cols / 4 + 7) / 8) * 8 * 16;
}

template <int FMT>
static int
launch_m1_fmt (const PpxCudaWeight *w, int vshift, const float *x, float *y, int accumulate, cudaStream_t s)
{
  const size_t smem = m1_smem_bytes (w);
  if (smem > 48 * 1024) {
    cudaError_t e = cudaFuncSetAttribute (linear_m1_kernel<FMT>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          SMEM_MAX_BYTES);
    if (e != cudaSuccess)
      return (int) e;
  }
  linear_m1_kernel<FMT><<<ppx_cdiv ((size_t) w->rows, SMEM_WARPS), SMEM_WARPS * 32, smem, s>>> (*w, vshift, x, y,
                                                                                              accumulate);
  return ppx_cuda_launched ();
}

static int
launch_m1 (const PpxCudaWeight *w, const float *x, float *y, int accumulate, void *stream)
{
  cudaStream_t s = PPX_CUDA_STREAM (stream);
  switch (w->format) {
    case PPX_CUDA_W_F32:
      return launch_m1_fmt<PPX_CUDA_W_F32> (w, 0, x, y, accumulate, s);
    case PPX_CUDA_W_BF16:
      return launch_m1_fmt<PPX_CUDA_W_BF16> (w, 0, x, y, accumulate, s);
    case PPX_CUDA_W_INT8:
      return launch_m1_fmt<PPX_CUDA_W_INT8> (w, 0, x, y, accumulate, s);
    default:
      return launch_m1_fmt<PPX_CUDA_W_INT4> (w, int4_vector_shift (w->group_size), x, y, accumulate, s);
  }
}

extern "C" int
ppx_cuda_linear (const PpxCudaWeight *w, const float *x, size_t ldx, float *y, size_t ldy, int M, int accumulate,
                 void *stream)
{
  if (M <= 0 || w->rows <= 0)
    return 0;
  const int N = vec_width (w->format);
  const bool fast = w->cols % N == 0 && w->cols < ((int64_t) 1 << 31) && ((uintptr_t) w->data & 15) == 0 &&
                    ((uintptr_t) x & 15) == 0 && (M == 1 || ldx % 4 == 0);
  if (!fast) {
    dim3 grid (ppx_cdiv ((size_t) w->rows, LIN_WARPS), ppx_cdiv ((size_t) M, LIN_MT));
    linear_generic_kernel<<<grid, LIN_WARPS * 32, 0, PPX_CUDA_STREAM (stream)>>> (*w, x, ldx, y, ldy, M, accumulate);
  } else if (M == 1 && m1_smem_bytes (w) <= SMEM_MAX_BYTES) {
    return launch_m1 (w, x, y, accumulate, stream);
  } else if (M == 1) {
    launch_vec<1> (w, x, ldx, y, ldy, M, accumulate, stream);
  } else if (M == 2) {
    launch_vec<2> (w, x, ldx, y, ldy, M, accumulate, stream);
  } else if (M <= 4) {
    launch_vec<4> (w, x, ldx, y, ldy, M, accumulate, stream);
  } else {
    launch_vec<LIN_MT> (w, x, ldx, y, ldy, M, accumulate, stream);
  }
  return ppx_cuda_launched ();
}

/* out[m, :] (+)= W[ids[m * id_stride + id_index], :]; an id outside [0, rows) gives zeros. */
__global__ void
embed_kernel (PpxCudaWeight w, const int32_t *ids, int id_index, int id_stride, float *out, int accumulate)
{
  const int m = blockIdx.y;
  const int32_t t = ids[(size_t) m * id_stride + id_index];
  float *dst = out + (size_t) m * w.cols;
  for (int64_t c = blockIdx.x * (int64_t) blockDim.x + threadIdx.x; c < w.cols; c += (int64_t) gridDim.x * blockDim.x) {
    if (t < 0 || t >= w.rows) {
      if (!accumulate)
        dst[c] = 0.0f;
    } else {
      const float v = weight_elem (w, t, c);
      dst[c] = accumulate ? dst[c] + v : v;
    }
  }
}

extern "C" int
ppx_cuda_embed (const PpxCudaWeight *w, const int32_t *ids, int id_index, int id_stride, float *out, int M,
                int accumulate, void *stream)
{
  if (M <= 0)
    return 0;
  dim3 grid (ppx_cdiv ((size_t) w->cols, 256) > 64 ? 64 : ppx_cdiv ((size_t) w->cols, 256), (unsigned) M);
  embed_kernel<<<grid, 256, 0, PPX_CUDA_STREAM (stream)>>> (*w, ids, id_index, id_stride, out, accumulate);
  return ppx_cuda_launched ();
}
