/* The CUDA backend's tuning and benchmark extras beyond backend.h (where ppx_backend_cuda_new/_available are
 * declared; the GPU's name is ppx_backend_device_name there), for tests and benchmarks; backend-cuda-tune.c
 * implements them, backend-cuda-none.c in a build without CUDA. */
#ifndef PPX_BACKEND_CUDA_H
#define PPX_BACKEND_CUDA_H

#include "backend.h"

G_BEGIN_DECLS

/* Benchmarks (test-backend-cuda --bench): the GPU time of one ppx_op_linear (x [M, cols] and y [M, rows],
 * dense) in microseconds, the median of `reps` replays of a CUDA graph of `calls` calls cycling over the n
 * weights (all of one shape). Waits for the backend's queued work first. FALSE with an error if the GPU fails
 * or the backend is not CUDA. */
gboolean ppx_backend_cuda_time_linear (PpxBackend *be, PpxWeight *const *w, int n, const PpxTensor *x, PpxTensor *y,
                                       int M, int calls, int reps, double *us, GError **error);

/* Tensor-core linear layers, for tests and benchmarks (process-wide; call with no linear in flight): the rows
 * of x one block takes, in n-tiles of 8 rows (2..16), 0 = planned. It changes where the work runs, never a
 * result (tests check batched rows bit for bit against single rows with it forced). */
void ppx_backend_cuda_linear_force_slice (int tiles);
/* Whether a ppx_op_linear of M rows on w takes the wgmma configuration (int4 weights on a compute capability
 * 9.0 GPU in a build with 90a, from M = 17 or PPX_CUDA_LINEAR_WGMMA; docs/cuda.md, "wgmma (sm_90a)"), so a test
 * can tell that path from a silent fall-back; FALSE for other backends. */
gboolean ppx_backend_cuda_linear_wgmma_at (PpxBackend *be, PpxWeight *w, int M);
/* Tensor-core linear layers at M <= 8, for tests (process-wide; call with no linear in flight): 1 the kernel
 * without the stage barrier (tc_gemv_kernel) wherever it fits, 0 the block-barrier kernel, -1 the default
 * (PPX_CUDA_LINEAR_GEMV, else on). The same bits either way (docs/cuda.md, "Linear layers"). */
void ppx_backend_cuda_linear_force_gemv (int mode);
/* The x rows of the first launch of the tensor-core kernel for a ppx_op_linear of M rows on w: min (M, 256),
 * on mma.sync and wgmma alike (one launch streams the weights once for up to 256 sessions; mma.sync min (M, 128)
 * with PPX_CUDA_LINEAR_LAUNCH_ROWS=128); 0 when w takes another kernel or be is not a CUDA backend. */
int ppx_backend_cuda_linear_launch_rows (PpxBackend *be, PpxWeight *w, int M);
/* The backend's GPU's compute capability as major x 10 + minor (90: H100, H200); 0 for other backends. */
int ppx_backend_cuda_compute_capability (PpxBackend *be);

/* Convolution paths, for tests and benchmarks (process-wide, not thread-safe; call with no conv in flight):
 * cfg -2 runs the direct kernels, -1 the planned implicit-GEMM path (the default), 0 .. n_configs - 1 forces
 * that tile configuration where the GEMM path applies; split 0 = the planned leaves, > 0 forces that many. */
void ppx_backend_cuda_conv_force (int cfg, int split);
/* One-stage pieces (the same bits as the planned leaves, more blocks and a longer combine): -1 = where the
 * planner's cost model takes them (default), 0 = never, 1 = wherever they apply. Same rules as above. */
void ppx_backend_cuda_conv_force_pieces (int mode);
int ppx_backend_cuda_conv_n_configs (void);
/* The plan of a conv1d (transposed FALSE, L = Lin) or conv_transpose1d (L = T) call on the backend's GPU with
 * the overrides force_cfg / force_split (as ppx_backend_cuda_conv_force; -1, 0: the planner's): *cfg (-1: the
 * direct kernels), leaves, tile rows x cols. FALSE if the backend is not CUDA. */
gboolean ppx_backend_cuda_conv_plan (PpxBackend *be, gboolean transposed, int M, int Cin, int Cout, int K, int L,
                                     int stride, int dilation, int groups, gboolean streaming, int force_cfg,
                                     int force_split, int *cfg, int *split, int *tile_rows, int *tile_cols);
/* The planned call's main launch leaves (its planned leaves, or more run as one-stage pieces); 0 if the
 * backend is not CUDA or the call runs the direct kernels. */
int ppx_backend_cuda_conv_launch_leaves (PpxBackend *be, gboolean transposed, int M, int Cin, int Cout, int K, int L,
                                         int stride, int dilation, int groups, gboolean streaming);
/* GPU time of one conv call in microseconds for each of n_plans (cfgs[i], splits[i]) overrides: the median of
 * `reps` replays of a CUDA graph of `calls` calls over copies of the weights that exceed the L2, on buffers of
 * its own; act applied to x and (residual) y = y + conv as in a fused call. */
gboolean ppx_backend_cuda_time_conv (PpxBackend *be, gboolean transposed, PpxActivation act, gboolean residual, int M,
                                     int Cin, int Cout, int K, int L, int stride, int dilation, int groups,
                                     gboolean streaming, int n_plans, const int *cfgs, const int *splits, int calls,
                                     int reps, double *us, GError **error);

/* Programmatic dependent launch (docs/cuda.md, "Launch latency"): whether the backend's kernels may start
 * while the kernel before them finishes (an sm_90+ GPU and kernels built for it, PPX_CUDA_PDL not 0); FALSE
 * for other backends. allow(FALSE) turns it off process-wide for launches and graph recordings from then on
 * (tests compare both; graphs recorded before keep what they were recorded with). */
gboolean ppx_backend_cuda_pdl_active (PpxBackend *be);
void ppx_backend_cuda_pdl_allow (gboolean allow);

/* The FFN gate fused into the linear layer after it (ppx_op_silu_gate_linear; docs/cuda.md): off by default
 * until it has run on a GPU; PPX_CUDA_FUSE_GATE=1 or fuse_gate(1) switches it on, fuse_gate(0) off, -1 back to
 * the environment, process-wide for ops and recordings from then on. */
void ppx_backend_cuda_fuse_gate (int mode);

/* The depformer's layer tail as one persistent kernel (ppx_op_layer_tail; docs/cuda.md): PPX_CUDA_FUSE_TAIL=1 or
 * fuse_tail(1) on, 0 off, 2 on with a plain launch (measuring), -1 back to the environment (off when unset),
 * process-wide for ops and recordings from then on. */
void ppx_backend_cuda_fuse_tail (int mode);

G_END_DECLS
#endif
