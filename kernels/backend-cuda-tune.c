/* The CUDA backend's tuning and benchmark extras (backend-cuda.h): linear and conv timings on CUDA graphs,
 * the conv plan overrides and report, the switches of programmatic dependent launch and of the fused FFN
 * gate. For tests and benchmarks (test-backend-cuda --bench); the model never calls them. */
#include "backend-cuda-internal.h"

gboolean
ppx_backend_cuda_time_linear (PpxBackend *be, PpxWeight *const *w, int n, const PpxTensor *x, PpxTensor *y, int M,
                              int calls, int reps, double *us, GError **error)
{
  if (!cuda_is_backend (be) || n < 1) {
    g_set_error (error, PPX_ERROR, PPX_ERROR_INVALID, "ppx_backend_cuda_time_linear: not a CUDA backend, or no weights");
    return FALSE;
  }
  cuda_enter (be);
  PpxCudaWeight *cw = g_new (PpxCudaWeight, n);
  for (int i = 0; i < n; i++)
    cw[i] = cuda_device_weight (w[i]);
  g_mutex_lock (&PRIV (be)->linear_lock);
  const gsize ws_bytes = ppx_cuda_linear_workspace_bytes (&cw[0], M);
  void *ws = ws_bytes ? cuda_linear_workspace (be, ws_bytes) : NULL;
  cuda_check (be, ppx_cuda_stream_sync (PRIV (be)->stream), "sync before timing");
  const char *step = "workspace";
  int e = ws_bytes && !ws ? 2 /* cudaErrorMemoryAllocation */
                          : ppx_cuda_linear_time (cw, n, F32 (x), F32 (y), M, ws, calls, reps, us, &step);
  g_mutex_unlock (&PRIV (be)->linear_lock);
  g_free (cw);
  if (e) {
    g_set_error (error, PPX_ERROR, PPX_ERROR_UNSUPPORTED, "CUDA backend (GPU %d): timing linear layers failed (%s): %s",
                 PRIV (be)->device, step, ppx_cuda_error_string (e));
    return FALSE;
  }
  return TRUE;
}

void
ppx_backend_cuda_linear_force_slice (int tiles)
{
  ppx_cuda_linear_force_slice (tiles);
}

void
ppx_backend_cuda_linear_force_gemv (int mode)
{
  ppx_cuda_linear_force_gemv (mode);
}

gboolean
ppx_backend_cuda_linear_wgmma_at (PpxBackend *be, PpxWeight *w, int M)
{
  if (!cuda_is_backend (be))
    return FALSE;
  cuda_enter (be);
  const PpxCudaWeight cw = cuda_device_weight (w);
  return ppx_cuda_linear_wgmma_at (&cw, M) != 0;
}

int
ppx_backend_cuda_linear_launch_rows (PpxBackend *be, PpxWeight *w, int M)
{
  if (!cuda_is_backend (be))
    return 0;
  cuda_enter (be);
  const PpxCudaWeight cw = cuda_device_weight (w);
  return ppx_cuda_linear_launch_rows (&cw, M);
}

int
ppx_backend_cuda_compute_capability (PpxBackend *be)
{
  if (!cuda_is_backend (be))
    return 0;
  cuda_enter (be);
  return ppx_cuda_compute_capability ();
}

void
ppx_backend_cuda_conv_force (int cfg, int split)
{
  ppx_cuda_conv_set_plan (cfg, split);
}

void
ppx_backend_cuda_conv_force_pieces (int mode)
{
  ppx_cuda_conv_set_pieces (mode);
}

int
ppx_backend_cuda_conv_launch_leaves (PpxBackend *be, gboolean transposed, int M, int Cin, int Cout, int K, int L,
                                     int stride, int dilation, int groups, gboolean streaming)
{
  if (!cuda_is_backend (be))
    return 0;
  cuda_enter (be);
  int cfg, split, tr, tc, launch;
  ppx_cuda_conv_plan_info (transposed, M, Cin, Cout, K, L, stride, dilation, groups, streaming, -1, 0, &cfg, &split,
                           &tr, &tc, &launch);
  return cfg < 0 ? 0 : launch;
}

int
ppx_backend_cuda_conv_n_configs (void)
{
  return ppx_cuda_conv_n_configs ();
}

gboolean
ppx_backend_cuda_conv_plan (PpxBackend *be, gboolean transposed, int M, int Cin, int Cout, int K, int L, int stride,
                            int dilation, int groups, gboolean streaming, int force_cfg, int force_split, int *cfg,
                            int *split, int *tile_rows, int *tile_cols)
{
  if (!cuda_is_backend (be))
    return FALSE;
  cuda_enter (be);
  ppx_cuda_conv_plan_info (transposed, M, Cin, Cout, K, L, stride, dilation, groups, streaming, force_cfg, force_split,
                           cfg, split, tile_rows, tile_cols, NULL);
  return TRUE;
}

gboolean
ppx_backend_cuda_time_conv (PpxBackend *be, gboolean transposed, PpxActivation act, gboolean residual, int M,
                            int Cin, int Cout, int K, int L, int stride, int dilation, int groups, gboolean streaming,
                            int n_plans, const int *cfgs, const int *splits, int calls, int reps, double *us,
                            GError **error)
{
  if (!cuda_is_backend (be)) {
    g_set_error (error, PPX_ERROR, PPX_ERROR_INVALID, "ppx_backend_cuda_time_conv: not a CUDA backend");
    return FALSE;
  }
  cuda_enter (be);
  cuda_check (be, ppx_cuda_stream_sync (PRIV (be)->stream), "sync before timing");
  const char *step = "setup";
  const int e = ppx_cuda_conv_time (transposed, (int) act, residual, M, Cin, Cout, K, L, stride, dilation, groups,
                                    streaming, n_plans, cfgs, splits, calls, reps, us, &step);
  if (e) {
    g_set_error (error, PPX_ERROR, PPX_ERROR_UNSUPPORTED, "CUDA backend (GPU %d): timing a conv failed (%s): %s",
                 PRIV (be)->device, step, ppx_cuda_error_string (e));
    return FALSE;
  }
  return TRUE;
}

gboolean
ppx_backend_cuda_pdl_active (PpxBackend *be)
{
  return cuda_is_backend (be) && ppx_cuda_set_device (PRIV (be)->device) == 0 && ppx_cuda_pdl_mode () != 0;
}

void
ppx_backend_cuda_fuse_gate (int mode)
{
  ppx_cuda_gate_fusion_set (mode);
}

void
ppx_backend_cuda_fuse_tail (int mode)
{
  ppx_cuda_tail_fusion_set (mode);
}

void
ppx_backend_cuda_pdl_allow (gboolean allow)
{
  ppx_cuda_pdl_allow (allow);
}
