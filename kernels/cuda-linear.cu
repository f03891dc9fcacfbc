/* CUDA backend: linear layers (y = x W^T) and embedding gathers for f32, bf16, int8 and int4 weights: the
 * entry points of cuda-kernels.h. Three kernel families, a file each (docs/cuda.md, "Linear layers"), like
 * ggml-cuda's mmq/mmvq:
 *  - cuda-linear-mma.cu, tensor cores (bf16, int8, int4 with group 32, 64 or a multiple of 128): mma.sync
 *    m16n8k16 with x split into two bf16 parts, K split into leaves planned per shape and device;
 *  - cuda-linear-f32tc.cu, tensor cores for f32 weights (K a multiple of 4): W and x split into hi + lo
 *    (tf32x3 or bf16x3, cuda-mma-f32.cuh);
 *  - cuda-linear-vec.cu, CUDA cores (other f32 weights, int4 with other group sizes): one warp per weight row.
 * Which one runs depends on the weight only, and both compute every output element by the same sequence of
 * operations whatever M is and wherever its x row sits in the batch: a batched call reproduces one-row calls
 * bit for bit (tests/cuda-test-linear.c checks this). What they share is in cuda-linear.cuh. */
#include "cuda-linear.cuh"
#include "cuda-graph-timing.cuh"

#include <stdlib.h>

extern "C" int
ppx_cuda_linear (const PpxCudaWeight *w, const float *x, size_t ldx, float *y, size_t ldy, int M, int accumulate,
                 void *workspace, void *stream)
{
  if (M <= 0 || w->rows <= 0)
    return 0;
  cudaStream_t s = PPX_CUDA_STREAM (stream);
  const int ck = ppx_linear_mma_eligible (w);
  if (ck)
    return ppx_linear_mma (w, ck, x, ldx, y, ldy, M, accumulate, NULL, 0.0f, 0, workspace, s);
  if (ppx_linear_f32tc_eligible (w))
    return ppx_linear_f32tc (w, x, ldx, y, ldy, M, accumulate, s);
  return ppx_linear_vec (w, x, ldx, y, ldy, M, accumulate, s);
}

extern "C" int
ppx_cuda_linear_rmsnorm_fuses (const PpxCudaWeight *w, const float *x, size_t ldx, const float *alpha, int M)
{
  return M >= 1 && M <= PPX_CUDA_RMSNORM_LINEAR_MAX_M && ppx_linear_mma_eligible (w) && !ppx_linear_mma_wgmma_at (w, M) &&
         ldx == (size_t) w->cols && ((uintptr_t) alpha & 15) == 0 && ((uintptr_t) x & 15) == 0;
}

extern "C" int
ppx_cuda_linear_rmsnorm (const PpxCudaWeight *w, const float *x, size_t ldx, const float *alpha, float eps, float *y,
                         size_t ldy, int M, int accumulate, void *workspace, void *stream)
{
  if (M <= 0 || w->rows <= 0)
    return 0;
  if (!ppx_cuda_linear_rmsnorm_fuses (w, x, ldx, alpha, M))
    return (int) cudaErrorInvalidValue;
  return ppx_linear_mma (w, ppx_linear_mma_eligible (w), x, ldx, y, ldy, M, accumulate, alpha, eps, 0, workspace,
                    PPX_CUDA_STREAM (stream));
}

static int gate_fusion_mode = -1; /* -1: PPX_CUDA_FUSE_GATE decides (default 0) */

extern "C" void
ppx_cuda_gate_fusion_set (int mode)
{
  __atomic_store_n (&gate_fusion_mode, mode < 0 ? -1 : mode > 0, __ATOMIC_RELAXED);
}

static int
gate_fusion_on (void)
{
  static int from_env = -1; /* PPX_CUDA_FUSE_GATE, read once */
  const int mode = __atomic_load_n (&gate_fusion_mode, __ATOMIC_RELAXED);
  if (mode >= 0)
    return mode;
  int env = __atomic_load_n (&from_env, __ATOMIC_RELAXED);
  if (env < 0) {
    const char *v = getenv ("PPX_CUDA_FUSE_GATE");
    env = v && atoi (v) > 0;
    __atomic_store_n (&from_env, env, __ATOMIC_RELAXED);
  }
  return env;
}

extern "C" int
ppx_cuda_linear_gate_fuses (const PpxCudaWeight *w, const float *h, int M)
{
  return gate_fusion_on () && M >= 1 && M <= PPX_CUDA_GATE_LINEAR_MAX_M && ppx_linear_mma_eligible (w) &&
         !ppx_linear_mma_wgmma_at (w, M) && w->cols % 4 == 0 && ((uintptr_t) h & 15) == 0;
}

extern "C" int
ppx_cuda_linear_gate (const PpxCudaWeight *w, const float *h, float *y, size_t ldy, int M, int accumulate,
                      void *workspace, void *stream)
{
  if (M <= 0 || w->rows <= 0)
    return 0;
  if (!ppx_cuda_linear_gate_fuses (w, h, M))
    return (int) cudaErrorInvalidValue;
  return ppx_linear_mma (w, ppx_linear_mma_eligible (w), h, 2 * (size_t) w->cols, y, ldy, M, accumulate, NULL, 0.0f, 1, workspace,
                    PPX_CUDA_STREAM (stream));
}

extern "C" int
ppx_cuda_linear_time (const PpxCudaWeight *w, int n, const float *x, float *y, int M, void *workspace, int calls,
                      int reps, double *us, const char **step)
{
  *step = "stream";
  cudaStream_t s = NULL;
  cudaGetLastError (); /* nothing earlier is blamed on this */
  int e = (int) cudaStreamCreateWithFlags (&s, cudaStreamNonBlocking);
  if (!e)
    e = ppx_time_graph (
        s, n, calls, reps,
        [&] (int i) {
          return ppx_cuda_linear (&w[i % n], x, (size_t) w[0].cols, y, (size_t) w[0].rows, M, 0, workspace, s);
        },
        us, step);
  if (s)
    cudaStreamDestroy (s);
  cudaGetLastError ();
  return e;
}

/* out[m, :] (+)= W[ids[m * id_stride + id_index], :]; an id outside [0, rows) gives zeros. */
__global__ void
embed_kernel (PpxCudaWeight w, const int32_t *ids, int id_index, int id_stride, float *out, int accumulate)
{
  ppx_pdl_enter ();
  const int m = blockIdx.y;
  const int32_t t = ids[(size_t) m * id_stride + id_index];
  float *dst = out + (size_t) m * w.cols;
  for (int64_t c = blockIdx.x * (int64_t) blockDim.x + threadIdx.x; c < w.cols; c += (int64_t) gridDim.x * blockDim.x) {
    if (t < 0 || t >= w.rows) {
      if (!accumulate)
        dst[c] = 0.0f;
    } else {
      const float v = ppx_weight_elem (w, t, c);
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
  ppx_launch (embed_kernel, grid, 256, 0, PPX_CUDA_STREAM (stream), *w, ids, id_index, id_stride, out, accumulate);
  return ppx_cuda_launched ();
}
