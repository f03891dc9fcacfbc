/* The CUDA backend's extras beyond backend.h (where ppx_backend_cuda_new/_available are declared). */
#ifndef PPX_BACKEND_CUDA_H
#define PPX_BACKEND_CUDA_H

#include "backend.h"

G_BEGIN_DECLS

/* The GPU's name ("NVIDIA H100 80GB HBM3") of a CUDA backend; NULL for other backends. */
const char *ppx_backend_cuda_device_name (const PpxBackend *be);

G_END_DECLS
#endif
