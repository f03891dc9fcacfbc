/* CUDA backend, linear layers: what the two kernel families and the entry points share (docs/cuda.md,
 * "Linear layers"): cuda-linear-mma.cu (tensor cores: bf16, int8, int4 with groups of 32, 64 or a multiple
 * of 128), cuda-linear-f32tc.cu (f32 on the tensor cores, split into hi + lo), cuda-linear-vec.cu (CUDA
 * cores: f32 weights that path does not take, other int4 groups) and cuda-linear.cu (the entry points of
 * cuda-kernels.h that choose between them, the fused rmsnorm/gate variants, the embedding gather). */
#ifndef PPX_CUDA_LINEAR_CUH
#define PPX_CUDA_LINEAR_CUH

#include "cuda-common.cuh"

#define TC_STAGE 128 /* columns per stage of the tensor-core path: 8 k-steps of 16 (also the int4 repack block) */

/* ---- the tensor-core path (cuda-linear-mma.cu) ---- */
/* Its chunk length in k-steps when it takes this weight (a supported format and group size, rows that start
 * on 16 bytes, K below 2^30), else 0: the CUDA-core path. */
int ppx_linear_mma_eligible (const PpxCudaWeight *w);
/* y (+)= x W^T for M rows on the tensor cores (ck = ppx_linear_mma_eligible (w)); alpha: RMS-normalize x
 * first (M <= PPX_CUDA_RMSNORM_LINEAR_MAX_M); gate: x rows are [g | v], the input is silu(g) * v (M <=
 * PPX_CUDA_GATE_LINEAR_MAX_M); workspace: ppx_cuda_linear_workspace_bytes of it. */
int ppx_linear_mma (const PpxCudaWeight *w, int ck, const float *x, size_t ldx, float *y, size_t ldy, int M,
                    int accumulate, const float *alpha, float eps, int gate, void *workspace, cudaStream_t s);

/* Whether a call of M rows on w takes the wgmma configuration (sm_90a, int4; docs/cuda.md, "wgmma (sm_90a)"):
 * the fused RMSNorm / gate kernels (mma.sync, M <= 8) are then not used at that M. */
int ppx_linear_mma_wgmma_at (const PpxCudaWeight *w, int M);

/* ---- f32 weights on the tensor cores (cuda-linear-f32tc.cu) ---- */
/* Non-zero when that path takes this weight: f32, K a multiple of 4 below 2^30, rows on 16 bytes, and the
 * f32 tensor-core kernels on (PPX_CUDA_F32_MMA, cuda-mma-f32.cuh). */
int ppx_linear_f32tc_eligible (const PpxCudaWeight *w);
int ppx_linear_f32tc (const PpxCudaWeight *w, const float *x, size_t ldx, float *y, size_t ldy, int M,
                      int accumulate, cudaStream_t s);

/* ---- the CUDA-core path (cuda-linear-vec.cu) ---- */
int ppx_linear_vec (const PpxCudaWeight *w, const float *x, size_t ldx, float *y, size_t ldy, int M, int accumulate,
                    cudaStream_t s);

/* W[r, c] in f32, exactly as the CPU backend dequantizes it (int4 rows repacked at load included). */
__device__ __forceinline__ float
ppx_weight_elem (const PpxCudaWeight &w, int64_t r, int64_t c)
{
  switch (w.format) {
    case PPX_CUDA_W_F32:
      return ((const float *) w.data)[r * w.cols + c];
    case PPX_CUDA_W_BF16:
      return __uint_as_float ((uint32_t) ((const uint16_t *) w.data)[r * w.cols + c] << 16);
    case PPX_CUDA_W_INT8:
      return (float) ((const int8_t *) w.data)[r * w.cols + c] * w.scales[r];
    default: {
      const uint8_t *row = (const uint8_t *) w.data + r * ((w.cols + 1) / 2);
      int code;
      const bool repacked = w.group_size == 32 || w.group_size == 64 || w.group_size % 128 == 0;
      if (repacked && c < w.cols / TC_STAGE * TC_STAGE) {
        /* the inverse of int4_word: block, k-step q, thread t, column offset o */
        const int cb = (int) (c % TC_STAGE), q = cb / 16, t = (cb % 16) / 4, o = cb % 4;
        const int bit = 8 * (q & 1) + (o & 1) * 16 + (o >> 1) * 4;
        const uint8_t b = row[(c / TC_STAGE) * 64 + 16 * t + 4 * (q >> 1) + bit / 8];
        code = (b >> (bit & 4)) & 15;
      } else {
        const uint8_t b = row[c / 2];
        code = (c & 1) ? b >> 4 : b & 0x0f;
      }
      const int64_t ng = (w.cols + w.group_size - 1) / w.group_size;
      return (float) (code - 8) * w.scales[r * ng + c / w.group_size];
    }
  }
}

#endif
