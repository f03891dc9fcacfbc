/* CUDA backend, Mimi's convolutions: what the entry points and the planner (cuda-conv.cu) share with the
 * implicit-GEMM kernels (cuda-conv-gemm.cu on the CUDA cores, cuda-conv-mma.cu on the tensor cores). */
#ifndef PPX_CUDA_CONV_CUH
#define PPX_CUDA_CONV_CUH

#include "cuda-common.cuh"

#define CONV_THREADS 256

struct ConvArgs {
  const float *w, *bias, *x, *prev, *partial, *res; /* res: conv1d's residual (may be y) */
  float *y, *ws, *next;
  int act; /* applied to x as it is staged (PPX_ACT_NONE = -1: none) */
  int M, Cin, Cout, K, stride, dil; /* transposed: stride = S */
  int Lin, P;                       /* conv1d: input length and history; transposed: Lin = T */
  int Lcols, rows, KR, CK, cpl, split;
  int lst;          /* the combine: launch leaves per planned leaf (1, or one-stage pieces: cuda-conv.cu) */
  int Lz, Ly, tail; /* transposed */
  long N;           /* M * Lcols */
};

#define CONV_BK 32 /* reduction steps per stage, at most */

static inline long
conv_cdiv (long a, long b)
{
  return (a + b - 1) / b;
}

/* conv1d as an implicit GEMM with tile configuration cfg (conv_cfgs in cuda-conv.cu: CUDA-core tiles first,
 * then CONV_MMA_CFGS tensor-core ones), then, with several
 * leaves (a.split > 1), the launch that adds them up and moves the history (prev = a.prev, writable) of the
 * nch = M*Cin channels. */
int ppx_conv1d_gemm (int cfg, const ConvArgs &a, float *prev, size_t nch, cudaStream_t s);
/* conv_transpose1d the same way, nmc = M*Cout; partial = a.partial (writable); in_place: the combine
 * rewrites the partial in place (else it writes a.next). */
int ppx_convtr_gemm (int cfg, const ConvArgs &a, float *partial, size_t nmc, int in_place, cudaStream_t s);

/* The tensor-core kernels (cuda-conv-mma.cu): tile cfg (0 .. CONV_MMA_CFGS - 1, conv_cfgs' tensor-core
 * entries in order) of conv1d (tr false) or conv_transpose1d, in the current f32 split mode; and a tile's
 * shared memory. */
#define CONV_SIMT_CFGS 8 /* the CUDA-core tiles: conv_cfgs[0 .. 7] */
#define CONV_MMA_CFGS 9
int ppx_conv_mma_launch (bool tr, int cfg, const ConvArgs &a, cudaStream_t s);
size_t ppx_conv_mma_smem (int bm, int bn, int tr);

#endif
