/* CUDA backend: LMGen on the device and streaming positions (backend.h, lmgen-state.h). One thread per
 * row runs the same plain C as the CPU backend (lmgen-state.h), so the two give the same state bits. */
#include "cuda-common.cuh"

/* This thread's row *m (one a thread) and its slot *s; false past the last row or for a slot out of range (a
 * caller's error: the CPU backend reports it). */
__device__ __forceinline__ bool
lmgen_row (const int32_t *slot, int n_slots, int M, int *m, int *s)
{
  *m = blockIdx.x * blockDim.x + threadIdx.x;
  if (*m >= M)
    return false;
  *s = slot[*m];
  return *s >= 0 && *s < n_slots;
}

__global__ void
lmgen_prepare_kernel (PpxLmgenDims d, int32_t *state, int n_slots, const int32_t *slot, const int32_t *codes,
                      int code_off, int code_stride, int32_t *ids, int32_t *forced, int32_t *pos, int32_t *params,
                      int M)
{
  ppx_pdl_enter ();
  int m, s;
  if (!lmgen_row (slot, n_slots, M, &m, &s))
    return;
  const size_t W = PPX_LMGEN_MAX_STREAMS;
  uint64_t frame;
  ppx_lmgen_prepare_row (&d, state + (size_t) s * PPX_LMGEN_STATE, codes + (size_t) m * code_stride + code_off, 1,
                         ids + m * W, forced + m * W, pos + m, &frame);
  int32_t *prm = params + (size_t) m * PPX_SAMPLE_PARAMS;
  prm[PPX_SAMPLE_FRAME_LO] = (int32_t) (uint32_t) frame;
  prm[PPX_SAMPLE_FRAME_HI] = (int32_t) (uint32_t) (frame >> 32);
}

__global__ void
lmgen_finish_kernel (PpxLmgenDims d, int32_t *state, int n_slots, const int32_t *slot, const int32_t *sampled,
                     int32_t *out, int out_stride, int M)
{
  ppx_pdl_enter ();
  int m, s;
  if (!lmgen_row (slot, n_slots, M, &m, &s))
    return;
  const size_t W = PPX_LMGEN_MAX_STREAMS;
  int32_t *st = state + (size_t) s * PPX_LMGEN_STATE, *o = out + (size_t) m * out_stride;
  ppx_lmgen_finish_row (&d, st, sampled + m * W, o);
  for (int j = 0; j < PPX_LMGEN_STATE; j++)
    o[W + j] = st[j];
}

extern "C" int
ppx_cuda_lmgen_prepare (const PpxLmgenDims *d, int32_t *state, int n_slots, const int32_t *slot,
                        const int32_t *codes, int code_off, int code_stride, int32_t *ids, int32_t *forced,
                        int32_t *pos, int32_t *params, int M, void *stream)
{
  if (M <= 0)
    return 0;
  ppx_launch (lmgen_prepare_kernel, ppx_cdiv (M, 64), 64, 0, PPX_CUDA_STREAM (stream), *d, state, n_slots, slot, codes, code_off, code_stride, ids, forced, pos, params, M);
  return ppx_cuda_launched ();
}

extern "C" int
ppx_cuda_lmgen_finish (const PpxLmgenDims *d, int32_t *state, int n_slots, const int32_t *slot,
                       const int32_t *sampled, int32_t *out, int out_stride, int M, void *stream)
{
  if (M <= 0)
    return 0;
  ppx_launch (lmgen_finish_kernel, ppx_cdiv (M, 64), 64, 0, PPX_CUDA_STREAM (stream), *d, state, n_slots, slot, sampled, out, out_stride, M);
  return ppx_cuda_launched ();
}

__global__ void
positions_kernel (int32_t *offsets, int32_t *pos, int M, int T)
{
  ppx_pdl_enter ();
  const int m = blockIdx.x * blockDim.x + threadIdx.x;
  if (m >= M)
    return;
  const int32_t o = offsets[m];
  for (int t = 0; t < T; t++)
    pos[(size_t) m * T + t] = o + t;
  offsets[m] = o + T;
}

extern "C" int
ppx_cuda_positions (int32_t *offsets, int32_t *pos, int M, int T, void *stream)
{
  if (M <= 0 || T <= 0)
    return 0;
  ppx_launch (positions_kernel, ppx_cdiv (M, 128), 128, 0, PPX_CUDA_STREAM (stream), offsets, pos, M, T);
  return ppx_cuda_launched ();
}
