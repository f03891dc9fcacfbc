/* Private helpers shared by the CUDA kernel files: launch checking and warp/block reductions. */
#ifndef PPX_CUDA_COMMON_CUH
#define PPX_CUDA_COMMON_CUH

#include <cuda_runtime.h>
#include <stdint.h>

#include "cuda-kernels.h"

#define PPX_CUDA_STREAM(s) ((cudaStream_t) (s))

/* The error of the launch just made (configuration errors appear here; faults appear at the next sync). */
static inline int
ppx_cuda_launched (void)
{
  return (int) cudaGetLastError ();
}

static inline unsigned
ppx_cdiv (size_t a, size_t b)
{
  return (unsigned) ((a + b - 1) / b);
}

/* Streaming multiprocessors of the current device (cached per device; 132, an H100's, if it cannot be read).
 * The linear and convolution kernels plan their K splits from it (from the shape and this only, never from
 * the batch size). */
static inline int
ppx_sm_count (void)
{
  static int cached[64];
  int dev = 0;
  if (cudaGetDevice (&dev) != cudaSuccess || dev < 0 || dev >= 64) {
    cudaGetLastError ();
    return 132;
  }
  if (!cached[dev]) {
    int n = 0;
    if (cudaDeviceGetAttribute (&n, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || n <= 0) {
      cudaGetLastError ();
      n = 132;
    }
    cached[dev] = n;
  }
  return cached[dev];
}

/* Grid size for a grid-stride loop over n items with `threads` per block. */
static inline unsigned
ppx_grid_for (size_t n, unsigned threads)
{
  size_t g = (n + threads - 1) / threads;
  if (g < 1)
    g = 1;
  return (unsigned) (g > 65535u * 16u ? 65535u * 16u : g);
}

/* PpxActivation: 0 ELU, 1 GELU (erf), 2 SiLU, the CPU backend's formulas; anything else (PPX_ACT_NONE = -1): a. */
__device__ __forceinline__ float
ppx_act_apply (int act, float a)
{
  if (act == 0)
    return a > 0.0f ? a : expm1f (a);
  if (act == 1)
    return 0.5f * a * (1.0f + erff (a * 0.70710678118654752440f));
  if (act == 2)
    return a / (1.0f + expf (-a));
  return a;
}

__device__ __forceinline__ float
ppx_warp_sum (float v)
{
  for (int o = 16; o > 0; o >>= 1)
    v += __shfl_xor_sync (0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ float
ppx_warp_max (float v)
{
  for (int o = 16; o > 0; o >>= 1)
    v = fmaxf (v, __shfl_xor_sync (0xffffffffu, v, o));
  return v;
}

/* Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread gets the result.
 * `red` is 32 floats of shared memory; the reduction order is fixed, so results are reproducible. */
__device__ __forceinline__ float
ppx_block_sum (float v, float *red)
{
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  v = ppx_warp_sum (v);
  __syncthreads ();
  if (lane == 0)
    red[warp] = v;
  __syncthreads ();
  v = lane < nw ? red[lane] : 0.0f;
  return ppx_warp_sum (v);
}

__device__ __forceinline__ float
ppx_block_max (float v, float *red)
{
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  v = ppx_warp_max (v);
  __syncthreads ();
  if (lane == 0)
    red[warp] = v;
  __syncthreads ();
  v = lane < nw ? red[lane] : -INFINITY;
  return ppx_warp_max (v);
}

#endif
