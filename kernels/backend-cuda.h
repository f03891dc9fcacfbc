/* The CUDA backend's extras beyond backend.h (where ppx_backend_cuda_new/_available are declared). */
#ifndef PPX_BACKEND_CUDA_H
#define PPX_BACKEND_CUDA_H

#include "backend.h"

G_BEGIN_DECLS

/* The GPU's name ("NVIDIA H100 80GB HBM3") of a CUDA backend; NULL for other backends. */
const char *ppx_backend_cuda_device_name (const PpxBackend *be);

/* Benchmarks (test-backend-cuda --bench): the GPU time of one ppx_op_linear (x [M, cols] and y [M, rows],
 * dense) in microseconds, the median of `reps` replays of a CUDA graph of `calls` calls cycling over the n
 * weights (all of one shape). Waits for the backend's queued work first. FALSE with an error if the GPU fails
 * or the backend is not CUDA. */
gboolean ppx_backend_cuda_time_linear (PpxBackend *be, PpxWeight *const *w, int n, const PpxTensor *x, PpxTensor *y,
                                       int M, int calls, int reps, double *us, GError **error);

G_END_DECLS
#endif
