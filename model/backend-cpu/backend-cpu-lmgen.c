/* The CPU backend's device-side LMGen (lmgen-state.h) and streaming positions: a loop over rows. */
#include "backend-cpu.h"

void
ppx_cpu_lmgen_prepare (PpxBackend *be, const PpxLmgenDims *d, PpxTensor *state, const PpxTensor *slot,
                       const PpxTensor *codes, int code_off, int code_stride, PpxTensor *ids, PpxTensor *forced,
                       PpxTensor *pos, PpxTensor *params, int M)
{
  const gsize W = PPX_LMGEN_MAX_STREAMS;
  const gsize n_slots = state->n / PPX_LMGEN_STATE;
  for (int m = 0; m < M; m++) {
    const int32_t s = I32 (slot)[m];
    g_return_if_fail (s >= 0 && (gsize) s < n_slots);
    uint64_t frame;
    ppx_lmgen_prepare_row (d, I32 (state) + (gsize) s * PPX_LMGEN_STATE,
                           I32 (codes) + (gsize) m * code_stride + code_off, 1, I32 (ids) + m * W,
                           I32 (forced) + m * W, I32 (pos) + m, &frame);
    int32_t *prm = I32 (params) + (gsize) m * PPX_SAMPLE_PARAMS;
    prm[PPX_SAMPLE_FRAME_LO] = (int32_t) (uint32_t) frame;
    prm[PPX_SAMPLE_FRAME_HI] = (int32_t) (uint32_t) (frame >> 32);
  }
}

void
ppx_cpu_lmgen_finish (PpxBackend *be, const PpxLmgenDims *d, PpxTensor *state, const PpxTensor *slot,
                      const PpxTensor *sampled, PpxTensor *out, int out_stride, int M)
{
  const gsize W = PPX_LMGEN_MAX_STREAMS;
  const gsize n_slots = state->n / PPX_LMGEN_STATE;
  for (int m = 0; m < M; m++) {
    const int32_t s = I32 (slot)[m];
    g_return_if_fail (s >= 0 && (gsize) s < n_slots);
    int32_t *st = I32 (state) + (gsize) s * PPX_LMGEN_STATE;
    int32_t *o = I32 (out) + (gsize) m * out_stride;
    ppx_lmgen_finish_row (d, st, I32 (sampled) + m * W, o);
    memcpy (o + W, st, PPX_LMGEN_STATE * sizeof (int32_t));
  }
}

void
ppx_cpu_positions (PpxBackend *be, PpxTensor *offsets, PpxTensor *pos, int M, int T)
{
  int32_t *off = I32 (offsets), *p = I32 (pos);
  for (int m = 0; m < M; m++) {
    for (int t = 0; t < T; t++)
      p[(gsize) m * T + t] = off[m] + t;
    off[m] += T;
  }
}
