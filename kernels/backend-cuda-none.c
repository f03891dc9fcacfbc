/* The CUDA backend's entry points in a build without CUDA (meson -Dcuda=disabled, or no nvcc): the
 * backend is never available and asking for it is a clear error. */
#include "backend-cuda.h"

gboolean
ppx_backend_cuda_available (int *n_devices)
{
  if (n_devices)
    *n_devices = 0;
  return FALSE;
}

PpxBackend *
ppx_backend_cuda_new (int device, GError **error)
{
  g_set_error (error, PPX_ERROR, PPX_ERROR_UNSUPPORTED,
               "CUDA backend: this build of personaplex was built without CUDA (rebuild with nvcc and -Dcuda=enabled)");
  return NULL;
}

gboolean
ppx_backend_cuda_time_linear (PpxBackend *be, PpxWeight *const *w, int n, const PpxTensor *x, PpxTensor *y, int M,
                              int calls, int reps, double *us, GError **error)
{
  g_set_error (error, PPX_ERROR, PPX_ERROR_UNSUPPORTED, "CUDA backend: this build of personaplex was built without CUDA");
  return FALSE;
}

void
ppx_backend_cuda_linear_force_slice (int tiles)
{
}

void
ppx_backend_cuda_linear_force_gemv (int mode)
{
}

gboolean
ppx_backend_cuda_linear_wgmma_at (PpxBackend *be, PpxWeight *w, int M)
{
  return FALSE;
}

int
ppx_backend_cuda_linear_launch_rows (PpxBackend *be, PpxWeight *w, int M)
{
  return 0;
}

int
ppx_backend_cuda_compute_capability (PpxBackend *be)
{
  return 0;
}

void
ppx_backend_cuda_conv_force (int cfg, int split)
{
}

void
ppx_backend_cuda_conv_force_pieces (int mode)
{
}

int
ppx_backend_cuda_conv_launch_leaves (PpxBackend *be, gboolean transposed, int M, int Cin, int Cout, int K, int L,
                                     int stride, int dilation, int groups, gboolean streaming)
{
  return 0;
}

int
ppx_backend_cuda_conv_n_configs (void)
{
  return 0;
}

gboolean
ppx_backend_cuda_conv_plan (PpxBackend *be, gboolean transposed, int M, int Cin, int Cout, int K, int L, int stride,
                            int dilation, int groups, gboolean streaming, int force_cfg, int force_split, int *cfg,
                            int *split, int *tile_rows, int *tile_cols)
{
  return FALSE;
}

gboolean
ppx_backend_cuda_time_conv (PpxBackend *be, gboolean transposed, PpxActivation act, gboolean residual, int M,
                            int Cin, int Cout, int K, int L, int stride, int dilation, int groups, gboolean streaming,
                            int n_plans, const int *cfgs, const int *splits, int calls, int reps, double *us,
                            GError **error)
{
  g_set_error (error, PPX_ERROR, PPX_ERROR_UNSUPPORTED, "CUDA backend: this build of personaplex was built without CUDA");
  return FALSE;
}

gboolean
ppx_backend_cuda_pdl_active (PpxBackend *be)
{
  return FALSE;
}

void
ppx_backend_cuda_pdl_allow (gboolean allow)
{
}

void
ppx_backend_cuda_fuse_gate (int mode)
{
}

void
ppx_backend_cuda_fuse_tail (int mode)
{
}
