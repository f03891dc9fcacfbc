/* CUDA backend: Mimi's residual vector quantizer (encode: nearest entry per codebook, in order; decode: sum).
 *
 * Encode spreads each codebook's search over many blocks: a launch per codebook, grid (chunks, M), each block
 * scanning VQ_CHUNK entries and writing its (distance, index) minimum. The next launch first reduces those
 * minima (every block of a row does it, in the same order), takes the winner's entry off the residual, and
 * searches its own codebook; one block per row keeps the new residual for the launch after it (two buffers
 * in turn, so no block overwrites a residual that another block of its launch still reads), and a last
 * launch of one block per row writes the final code and residual. ncb + 1 launches, each a few microseconds,
 * instead of one block per row walking every codebook alone (a millisecond per call at M = 1).
 *
 * Numerics are the one-block kernel's: a warp per entry computes |r|^2 - 2 r.e + |e|^2 with lane-strided
 * dimensions and the fixed warp sum, clamped at 0; the first minimum wins (strict < within a warp, then the
 * smaller distance, ties to the smaller index, across warps and chunks); |r|^2 is the block sum of a
 * VQ_THREADS block. A row's codes depend on that row only, whatever M is. */
#include "cuda-common.cuh"

#define VQ_THREADS 256
#define VQ_CHUNK 16 /* codebook entries per block: two per warp */
#define VQ_NONE 0x7fffffff

/* (d, i) replaces (bd, bi) when it comes first: a smaller distance, or the same one at a smaller index. */
__device__ __forceinline__ void
vq_keep_first (float &bd, int &bi, float d, int i)
{
  if (d < bd || (d == bd && i < bi)) {
    bd = d;
    bi = i;
  }
}

/* The warp's first minimum of its lanes' (bd, bi), in every lane. */
__device__ __forceinline__ void
vq_warp_first_min (float &bd, int &bi)
{
  for (int o = 16; o > 0; o >>= 1)
    vq_keep_first (bd, bi, __shfl_xor_sync (0xffffffffu, bd, o), __shfl_xor_sync (0xffffffffu, bi, o));
}

/* The first minimum of n (distance, index) pairs. Warp 0. */
__device__ int
vq_first_min (const float *pd, const int *pi, int n)
{
  const int lane = threadIdx.x & 31;
  float bd = INFINITY;
  int bi = VQ_NONE;
  for (int k = lane; k < n; k += 32)
    vq_keep_first (bd, bi, pd[k], pi[k]);
  vq_warp_first_min (bd, bi);
  return bi == VQ_NONE ? 0 : bi; /* all distances NaN: entry 0, as on the CPU */
}

/* Launch j of ncb + 1 for row m = blockIdx.y. j > 0: the winner of codebook j - 1 (from pd_prev/pi_prev, G
 * pairs per row) is coded and subtracted from rin; j < ncb: the block searches entries [chunk * VQ_CHUNK, +
 * VQ_CHUNK) of codebook j against that residual and writes its minimum to pd/pi; block 0 of the row writes
 * the residual it searched with to rout (for launch j + 1; at j = ncb, the final residual). */
__global__ void __launch_bounds__ (VQ_THREADS)
vq_step_kernel (const float *__restrict__ E, const float *rin, float *rout, const float *__restrict__ pd_prev,
                const int *__restrict__ pi_prev, float *__restrict__ pd, int *__restrict__ pi, int32_t *__restrict__ C,
                int code_off, int code_stride, int j, int ncb, int bins, int dim, int G)
{
  ppx_pdl_enter ();
  __shared__ float red[32];
  __shared__ float best_d[32];
  __shared__ int best_i[32];
  __shared__ int prev;
  extern __shared__ float x[]; /* dim floats */
  const int m = blockIdx.y, chunk = blockIdx.x;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  const float *r = rin + (size_t) m * dim;
  if (j > 0) {
    if (warp == 0) {
      const int b = vq_first_min (pd_prev + (size_t) m * G, pi_prev + (size_t) m * G, G);
      if (lane == 0) {
        prev = b;
        if (chunk == 0)
          C[(size_t) m * code_stride + code_off + j - 1] = b;
      }
    }
    __syncthreads ();
    const float *e = E + ((size_t) (j - 1) * bins + prev) * dim;
    for (int d = threadIdx.x; d < dim; d += blockDim.x)
      x[d] = r[d] - e[d];
  } else {
    for (int d = threadIdx.x; d < dim; d += blockDim.x)
      x[d] = r[d];
  }
  if (chunk == 0 && rout)
    for (int d = threadIdx.x; d < dim; d += blockDim.x)
      rout[(size_t) m * dim + d] = x[d];
  __syncthreads ();
  if (j == ncb)
    return;

  const float *cb = E + (size_t) j * bins * dim;
  float xx = 0.0f;
  for (int d = threadIdx.x; d < dim; d += blockDim.x)
    xx += x[d] * x[d];
  xx = ppx_block_sum (xx, red);
  float wd = INFINITY;
  int wi = VQ_NONE;
  const int end = min (bins, (chunk + 1) * VQ_CHUNK);
  for (int i = chunk * VQ_CHUNK + warp; i < end; i += nwarps) {
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
    int bi = lane < nwarps ? best_i[lane] : VQ_NONE;
    vq_warp_first_min (bd, bi);
    if (lane == 0) {
      pd[(size_t) m * G + chunk] = bd;
      pi[(size_t) m * G + chunk] = bi;
    }
  }
}

extern "C" size_t
ppx_cuda_vq_encode_scratch_floats (int M, int ncb, int bins, int dim)
{
  if (M <= 0 || ncb <= 0)
    return 0;
  const size_t G = ppx_cdiv ((size_t) bins, VQ_CHUNK);
  return 2 * (size_t) M * dim + 4 * (size_t) M * G; /* two residuals, two sets of (distance, index) */
}

extern "C" int
ppx_cuda_vq_encode (const float *codebooks, float *r, int32_t *codes, int code_off, int code_stride, int M, int ncb,
                    int bins, int dim, float *scratch, void *stream)
{
  if (M <= 0 || ncb <= 0)
    return 0;
  cudaStream_t s = PPX_CUDA_STREAM (stream);
  const int G = (int) ppx_cdiv ((size_t) bins, VQ_CHUNK);
  float *res[2] = {scratch, scratch + (size_t) M * dim};
  float *part = scratch + 2 * (size_t) M * dim;
  float *pd[2] = {part, part + (size_t) M * G};
  int *pi[2] = {(int *) (part + 2 * (size_t) M * G), (int *) (part + 3 * (size_t) M * G)};
  const size_t smem = (size_t) dim * sizeof (float);
  for (int j = 0; j <= ncb; j++) {
    /* launch j reads the residual launch j - 1 kept (r itself at j <= 1: launch 0 subtracts nothing) and keeps
     * its own in the other buffer; the last one writes r */
    const float *rin = j <= 1 ? r : res[(j - 1) & 1];
    float *rout = j == ncb ? r : (j == 0 ? NULL : res[j & 1]);
    const dim3 grid (j == ncb ? 1 : (unsigned) G, (unsigned) M);
    ppx_launch (vq_step_kernel, grid, VQ_THREADS, smem, s, codebooks, rin, rout, pd[(j + 1) & 1], pi[(j + 1) & 1], pd[j & 1], pi[j & 1], codes, code_off, code_stride, j, ncb, bins, dim, G);
    int e = ppx_cuda_launched ();
    if (e)
      return e;
  }
  return 0;
}

/* y[m, d] = sum_j E_j[code_j][d] from j = 0, exactly the CPU's order. */
__global__ void
vq_decode_kernel (const float *E, const int32_t *C, int code_off, int code_stride, float *y, int M, int ncb, int bins,
                  int dim)
{
  ppx_pdl_enter ();
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
  ppx_launch (vq_decode_kernel, ppx_grid_for (n, 256), 256, 0, PPX_CUDA_STREAM (stream), codebooks, codes, code_off, code_stride, y, M, ncb, bins, dim);
  return ppx_cuda_launched ();
}
