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

/* Programmatic dependent launch (sm_90 and later; docs/cuda.md, "Launch latency"). A kernel launched with
 * ppx_launch may start while the kernel before it on the stream is still running: every such kernel calls
 * ppx_pdl_enter() (or ppx_pdl_trigger() and later ppx_pdl_wait()) before it touches memory that another
 * kernel writes or reads, in every thread, so that it cannot finish before its predecessor (the chain of
 * waits is what orders a kernel after every earlier one, not only the one just before it). Only memory
 * that no kernel writes while a graph runs (weights) may be read before the wait.
 * trigger: kernels after this one may be launched (their blocks wait in ppx_pdl_wait);
 * wait: everything earlier on the stream has finished and its writes are visible. */
__device__ __forceinline__ void
ppx_pdl_trigger (void)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile ("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

__device__ __forceinline__ void
ppx_pdl_wait (void)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile ("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void
ppx_pdl_enter (void)
{
  ppx_pdl_trigger ();
  ppx_pdl_wait ();
}

/* kernel<<<grid, block, smem, stream>>>(args...), with programmatic dependent launch allowed when
 * ppx_cuda_pdl_mode() asks for it: mode 1 for every kernel, mode 2 for the kernels that PREFETCH (read
 * weights before their wait: the linear layers) only. The kernel must follow the rules above. A failed
 * launch sets the thread's last error, as <<<>>> does: read it with ppx_cuda_launched(). */
template <bool PREFETCH = false, typename... KArgs, typename... Args>
static inline void
ppx_launch (void (*kernel) (KArgs...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream, Args &&...args)
{
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cfg.attrs = attr;
  const int mode = ppx_cuda_pdl_mode ();
  cfg.numAttrs = mode == 1 || (mode == 2 && PREFETCH) ? 1 : 0;
  cudaLaunchKernelEx (&cfg, kernel, static_cast<Args &&> (args)...);
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

/* silu(g) * v: ppx_cuda_silu_gate's arithmetic, which the gated linear layer repeats bit for bit. */
__device__ __forceinline__ float
ppx_silu_gate (float g, float v)
{
  return g / (1.0f + expf (-g)) * v;
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

/* A reduction over the block (blockDim.x a multiple of 32, at most 1024) by WARP_OP over each warp, then over the
 * warps' results (`identity` past the last warp); every thread gets the result. `red` is 32 floats of shared
 * memory; the reduction order is fixed, so results are reproducible. */
template <float (*WARP_OP) (float)>
__device__ __forceinline__ float
ppx_block_reduce (float v, float *red, float identity)
{
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  v = WARP_OP (v);
  __syncthreads ();
  if (lane == 0)
    red[warp] = v;
  __syncthreads ();
  v = lane < nw ? red[lane] : identity;
  return WARP_OP (v);
}

/* Sum over the block (ppx_block_reduce). */
__device__ __forceinline__ float
ppx_block_sum (float v, float *red)
{
  return ppx_block_reduce<ppx_warp_sum> (v, red, 0.0f);
}

/* Max over the block (ppx_block_reduce). */
__device__ __forceinline__ float
ppx_block_max (float v, float *red)
{
  return ppx_block_reduce<ppx_warp_max> (v, red, -INFINITY);
}

#endif
