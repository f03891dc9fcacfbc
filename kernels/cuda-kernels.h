/* Private: the CUDA side of the CUDA backend, as plain C functions (no GLib, no CUDA headers), so the
 * vtable in backend-cuda.c compiles with the C compiler and the .cu files with nvcc alone.
 *
 * Every function returns 0 (cudaSuccess) or a CUDA error code; ppx_cuda_error_string() names it.
 * `stream` is a cudaStream_t; every launch is asynchronous on it. Shapes and semantics are those of
 * the matching ops in model/backend.h (the CPU backend is the reference). */
#ifndef PPX_CUDA_KERNELS_H
#define PPX_CUDA_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "lmgen-state.h"
#include "sample-params.h"
#include "tensor-type.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Weight formats: the values of PpxWeightFormat (backend.h). */
enum { PPX_CUDA_W_F32 = 0, PPX_CUDA_W_BF16 = 1, PPX_CUDA_W_INT8 = 2, PPX_CUDA_W_INT4 = 3 };

/* A weight matrix in device memory (quant.h layouts). */
typedef struct {
  int format;
  int64_t rows, cols;
  int group_size;     /* INT4 */
  const void *data;
  const float *scales; /* INT8: [rows]; INT4: [rows, ceil(cols/group_size)] */
} PpxCudaWeight;

/* ---- runtime (cuda-runtime.cu) ---- */
const char *ppx_cuda_error_string (int err);
int ppx_cuda_device_count (int *n);
int ppx_cuda_device_name (int device, char *name, size_t len, size_t *total_mem);
int ppx_cuda_set_device (int device);
int ppx_cuda_mem_free (size_t *free_bytes); /* the current device's free memory */
int ppx_cuda_stream_create (void **stream);
int ppx_cuda_stream_destroy (void *stream);
int ppx_cuda_stream_sync (void *stream);
int ppx_cuda_malloc (void **ptr, size_t bytes);
int ppx_cuda_free (void *ptr);
int ppx_cuda_memset_async (void *ptr, int value, size_t bytes, void *stream);
int ppx_cuda_upload (void *dst, const void *src, size_t bytes, void *stream);
int ppx_cuda_download (void *dst, const void *src, size_t bytes, void *stream); /* waits */
int ppx_cuda_copy_d2d (void *dst, const void *src, size_t bytes, void *stream);
/* Programmatic dependent launch (docs/cuda.md, "Launch latency"): whether kernels launched now on the current
 * device may overlap the end of the kernel before them (sm_90+, kernels built from sm_90+ PTX, PPX_CUDA_PDL
 * not 0, and allowed); allow(0) turns it off process-wide from the next launch on (tests compare). */
int ppx_cuda_pdl_mode (void); /* 0 off, 1 every kernel, 2 the linear layers only */
void ppx_cuda_pdl_allow (int allow);

/* ---- elementwise, norms, copies (cuda-elementwise.cu) ---- */
int ppx_cuda_fill_f32 (float *p, size_t n, float v, void *stream);
int ppx_cuda_fill_i32 (int32_t *p, size_t n, int32_t v, void *stream);
/* 4-byte elements; src and dst must not overlap (the caller stages overlapping copies). */
int ppx_cuda_copy2d (uint32_t *dst, size_t dld, const uint32_t *src, size_t sld, size_t rows, size_t cols, void *stream);
int ppx_cuda_act (int act, const float *x, float *y, size_t n, void *stream); /* PpxActivation values */
int ppx_cuda_add (const float *a, const float *b, float *y, size_t n, void *stream);
int ppx_cuda_add_scaled (const float *x, const float *gamma, float *y, size_t rows, size_t D, void *stream);
int ppx_cuda_silu_gate (const float *h, float *u, size_t rows, size_t H, void *stream);
int ppx_cuda_rmsnorm (const float *x, const float *alpha, float *y, size_t rows, size_t D, float eps, void *stream);
int ppx_cuda_layernorm (const float *x, const float *w, const float *b, float *y, size_t rows, size_t D, float eps,
                        void *stream);
int ppx_cuda_transpose (const float *x, float *y, size_t M, size_t A, size_t B, void *stream);
int ppx_cuda_force_tokens (int32_t *tokens, int off, int stride, const int32_t *forced, int foff, int fstride, int M,
                           void *stream);

/* ---- linear algebra (cuda-linear.cu) ---- */
/* Device workspace a linear call needs (split-K sums and their counters, and for M > 8 the x rows split into
 * hi/lo records; 0 when none). It depends on the weight's shape and grows with M up to 128 rows. Its first PPX_CUDA_LINEAR_COUNTER_BYTES must be zero before
 * the first call; every call leaves them zero again. */
#define PPX_CUDA_LINEAR_COUNTER_BYTES (65536 * 4)
size_t ppx_cuda_linear_workspace_bytes (const PpxCudaWeight *w, int M);
int ppx_cuda_linear (const PpxCudaWeight *w, const float *x, size_t ldx, float *y, size_t ldy, int M, int accumulate,
                     void *workspace, void *stream);
/* y (+)= rmsnorm(x; alpha, eps) W^T in one kernel, with the bits of ppx_cuda_rmsnorm into a buffer followed by
 * ppx_cuda_linear; only where ppx_cuda_linear_rmsnorm_fuses (tensor-core weights, M <= 4, x dense [M, cols],
 * x and alpha on 16 bytes), else cudaErrorInvalidValue. workspace as for ppx_cuda_linear. */
#define PPX_CUDA_RMSNORM_LINEAR_MAX_M 4
int ppx_cuda_linear_rmsnorm_fuses (const PpxCudaWeight *w, const float *x, size_t ldx, const float *alpha, int M);
int ppx_cuda_linear_rmsnorm (const PpxCudaWeight *w, const float *x, size_t ldx, const float *alpha, float eps, float *y,
                             size_t ldy, int M, int accumulate, void *workspace, void *stream);
/* y (+)= (silu(h[:, :cols]) * h[:, cols:2 cols]) W^T in one kernel, with the bits of ppx_cuda_silu_gate into a
 * buffer followed by ppx_cuda_linear; only where ppx_cuda_linear_gate_fuses (tensor-core weights, M <= 8, h dense
 * [M, 2 cols] on 16 bytes, cols a multiple of 4), else cudaErrorInvalidValue. workspace as for ppx_cuda_linear.
 * Off unless switched on (not yet run on a GPU; docs/cuda.md): ppx_cuda_gate_fusion_set (1 on, 0 off, -1 the
 * environment's PPX_CUDA_FUSE_GATE, off when unset). */
#define PPX_CUDA_GATE_LINEAR_MAX_M 8
void ppx_cuda_gate_fusion_set (int mode);
int ppx_cuda_linear_gate_fuses (const PpxCudaWeight *w, const float *h, int M);
int ppx_cuda_linear_gate (const PpxCudaWeight *w, const float *h, float *y, size_t ldy, int M, int accumulate,
                          void *workspace, void *stream);
/* The rest of a depformer layer after its attention and the projection after it (ppx_op_layer_tail) in one
 * persistent kernel (cuda-layer-tail.cu), with the bits of the unfused ops: x += att out_proj^T; ff =
 * rmsnorm(x; norm2) linear_in^T; x += silu_gate(ff) linear_out^T; y = (next_norm ? rmsnorm(x; next_norm) : x)
 * next^T, rows of M, all dense (x [M, d], ff [M, 2F], y [M, next.rows]). Only where ppx_cuda_layer_tail_fuses
 * (the switch on, M <= 128, the four weights on the tensor cores in one format), else cudaErrorInvalidValue.
 * The switch: ppx_cuda_tail_fusion_set (0 off, 1 on, 2 on with a plain launch instead of a cooperative one,
 * -1 the environment's PPX_CUDA_FUSE_TAIL). */
typedef struct {
  const float *att, *norm2, *next_norm;
  float *x, *ff, *y;
  PpxCudaWeight out_proj, linear_in, linear_out, next;
  float eps;
} PpxCudaLayerTail;
void ppx_cuda_tail_fusion_set (int mode);
int ppx_cuda_layer_tail_fuses (const PpxCudaLayerTail *t, int M);
size_t ppx_cuda_layer_tail_workspace_bytes (const PpxCudaLayerTail *t, int M);
int ppx_cuda_layer_tail (const PpxCudaLayerTail *t, int M, void *workspace, void *stream);
/* Benchmarks: GPU time of one linear call (x [M, cols], y [M, rows], dense) in microseconds, the median of
 * `reps` replays of a CUDA graph of `calls` calls cycling over the n weights (one shape), on a stream of
 * its own. workspace as for ppx_cuda_linear. *step names the stage that failed. */
int ppx_cuda_linear_time (const PpxCudaWeight *w, int n, const float *x, float *y, int M, void *workspace, int calls,
                          int reps, double *us, const char **step);
/* Tests and benchmarks: the n-tiles of x (8 rows each) one block of a tensor-core launch takes (2..16, capped
 * where the device cannot hold 16), 0 = planned. Changes only where the work runs, never a result. */
void ppx_cuda_linear_force_slice (int tiles);
/* Tests: whether a call of M rows on w takes the wgmma configuration of the tensor-core kernel (docs/cuda.md,
 * "wgmma (sm_90a)"; an int4 weight, M at least PPX_CUDA_LINEAR_WGMMA, a compute capability 9.0 GPU and a build
 * with 90a). */
int ppx_cuda_linear_wgmma_at (const PpxCudaWeight *w, int M);
/* Tests: the x rows of the first tensor-core launch of a call of M rows on w (min (M, 128), or min (M, 256)
 * where it takes the wgmma configuration), 0 when w does not take the tensor-core kernel. */
int ppx_cuda_linear_launch_rows (const PpxCudaWeight *w, int M);
/* The compute capability of the current device as major x 10 + minor (90 for an H100), 0 on failure. */
int ppx_cuda_compute_capability (void);
/* TRUE when int4 weights of this group size are repacked at load for the tensor-core kernels. */
int ppx_cuda_int4_repacked (int group_size);
/* Repacks int4 weights (quant.h layout, already on the device) in place: a permutation inside each full
 * 128-column block of every row (docs/cuda.md). Waits for the stream. */
int ppx_cuda_int4_repack (void *data, int64_t rows, int64_t cols, void *stream);
int ppx_cuda_embed (const PpxCudaWeight *w, const int32_t *ids, int id_index, int id_stride, float *out, int M,
                    int accumulate, void *stream);

/* ---- attention (cuda-attention.cu) ---- */
/* freqs: Dh/2 floats (device), the CPU backend's expf(i * c) computed on the host. */
int ppx_cuda_rope (float *qkv, const int32_t *pos, size_t rows, int H, int Dh, const float *freqs, void *stream);
/* kv_type: the caches' storage (kv-format.h), PPX_TENSOR_F32, _BF16, or _FP8 with f32 scales [n_slots, H, cap]
 * (kscales/vscales). scratch: at least ppx_cuda_attention_scratch_floats() floats (device; the split-K
 * partials), or NULL when that is 0. Head sizes up to 256. */
size_t ppx_cuda_attention_scratch_floats (int M, int T, int H, int Dh, int cap);
int ppx_cuda_attention (PpxTensorType kv_type, const float *qkv, const int32_t *pos, const int32_t *kv_slot, void *kcache,
                        void *vcache, float *kscales, float *vscales, float *out, int M, int T, int H, int Dh, int cap,
                        int context, float *scratch, void *stream);

/* ---- convolutions (cuda-conv.cu) ---- */
/* Scratch bytes a call needs (split-K partial sums; the transposed conv's next tail when it cannot be
 * rewritten in place); 0 when none. The same arguments as the call (has_prev / has_partial: not NULL). */
size_t ppx_cuda_conv1d_scratch_bytes (int M, int Cin, int Cout, int K, int Lin, int stride, int dilation, int groups,
                                      int has_prev);
/* act: PpxActivation of x (-1 none); res: NULL or the residual added last (may be y). */
int ppx_cuda_conv1d (int act, const float *w, const float *bias, const float *x, float *prev, const float *res,
                     float *y, int M, int Cin, int Cout, int K, int Lin, int stride, int dilation, int groups,
                     float *scratch, void *stream);
size_t ppx_cuda_conv_transpose1d_scratch_bytes (int M, int Cin, int Cout, int K, int T, int stride, int groups,
                                                int has_partial);
int ppx_cuda_conv_transpose1d (int act, const float *w, const float *bias, const float *x, float *partial, float *y,
                               int M, int Cin, int Cout, int K, int T, int stride, int groups, float *scratch,
                               void *stream);
/* Tests and benchmarks (process-wide, not thread-safe): cfg -2 = the direct kernels, -1 = planned (default),
 * 0 .. ppx_cuda_conv_n_configs()-1 = that tile configuration where the GEMM path applies; split 0 = planned,
 * > 0 = that many leaves (at most one per stage). Call it with no conv in flight that needs scratch. */
void ppx_cuda_conv_set_plan (int cfg, int split);
/* One-stage pieces (same bits as the planned leaves; cuda-conv.cu): -1 = where the planner's cost model takes
 * them (default), 0 = never, 1 = wherever they apply (tensor cores, leaves of 2 stages or more). */
void ppx_cuda_conv_set_pieces (int mode);
int ppx_cuda_conv_n_configs (void);
/* The plan a call would have with these overrides (transposed: L = T, dilation ignored): *cfg -1 = the direct
 * kernels; the planned leaves; the tile; *launch_split (may be NULL): the main launch's leaves (the planned
 * leaves, or more where they run as one-stage pieces). */
void ppx_cuda_conv_plan_info (int transposed, int M, int Cin, int Cout, int K, int L, int stride, int dilation,
                              int groups, int streaming, int force_cfg, int force_split, int *cfg, int *split,
                              int *tile_rows, int *tile_cols, int *launch_split);
/* GPU time of one call in microseconds for each of n_plans (cfgs[i], splits[i]) overrides (as
 * ppx_cuda_conv_set_plan): the median of `reps` replays of a CUDA graph of `calls` calls cycling over copies of
 * the weights that together exceed the L2, on its own buffers and stream; act and residual (y += ...) as in a
 * fused call. */
int ppx_cuda_conv_time (int transposed, int act, int residual, int M, int Cin, int Cout, int K, int L, int stride,
                        int dilation, int groups, int streaming, int n_plans, const int *cfgs, const int *splits,
                        int calls, int reps, double *us, const char **step);

/* ---- RVQ (cuda-vq.cu) ---- */
/* encode: scratch of ppx_cuda_vq_encode_scratch_floats floats */
size_t ppx_cuda_vq_encode_scratch_floats (int M, int ncb, int bins, int dim);
int ppx_cuda_vq_encode (const float *codebooks, float *r, int32_t *codes, int code_off, int code_stride, int M,
                        int ncb, int bins, int dim, float *scratch, void *stream);
int ppx_cuda_vq_decode (const float *codebooks, const int32_t *codes, int code_off, int code_stride, float *y, int M,
                        int ncb, int bins, int dim, void *stream);

/* ---- sampling (cuda-sample.cu) ---- */
/* params: PPX_SAMPLE_PARAMS words per row (sample-params.h); scratch: ppx_cuda_sample_scratch_bytes(M, V)
 * bytes (device), always (any row may draw with a temperature). */
size_t ppx_cuda_sample_scratch_bytes (int M, int V);
int ppx_cuda_sample (const float *logits, int V, int32_t *tokens, int tok_off, int tok_stride, const uint32_t *params,
                     int stream_index, int M, void *scratch, void *stream);

/* ---- LMGen on the device and streaming positions (cuda-lmgen.cu) ---- */
/* state: [n_slots, PPX_LMGEN_STATE]; one thread per row (ppx_op_lmgen_prepare/finish). */
int ppx_cuda_lmgen_prepare (const PpxLmgenDims *d, int32_t *state, int n_slots, const int32_t *slot,
                            const int32_t *codes, int code_off, int code_stride, int32_t *ids, int32_t *forced,
                            int32_t *pos, int32_t *params, int M, void *stream);
int ppx_cuda_lmgen_finish (const PpxLmgenDims *d, int32_t *state, int n_slots, const int32_t *slot,
                           const int32_t *sampled, int32_t *out, int out_stride, int M, void *stream);
int ppx_cuda_positions (int32_t *offsets, int32_t *pos, int M, int T, void *stream);

/* ---- per-op profile, PPX_CUDA_PROFILE=1 (cuda-profile.cu) ---- */
int ppx_cuda_profile_enabled (void);
void ppx_cuda_profile_begin (void *stream);
void ppx_cuda_profile_end (void *stream, const char *key);
void ppx_cuda_profile_dump (const char *title);

/* ---- graphs (cuda-runtime.cu) ---- */
/* Starts capturing `stream` (thread-local mode: other threads' CUDA calls are not affected). */
int ppx_cuda_capture_begin (void *stream);
/* Ends the capture and instantiates it: *exec (a cudaGraphExec_t) and its node count. On failure *exec is
 * NULL and the error is returned (a capture invalidated by a forbidden call included). */
int ppx_cuda_capture_end (void *stream, void **exec, size_t *nodes);
int ppx_cuda_graph_launch (void *exec, void *stream);
int ppx_cuda_graph_destroy (void *exec);

#ifdef __cplusplus
}
#endif
#endif
