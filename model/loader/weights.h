/* Loading checkpoint tensors onto a backend, with every shape checked against the config.
 * A PpxLoader collects the first error and makes later calls no-ops, so model code can load
 * tensor after tensor and check once at the end. */
#ifndef PPX_WEIGHTS_H
#define PPX_WEIGHTS_H

#include "backend.h"
#include "safetensors.h"

G_BEGIN_DECLS

typedef struct {
  PpxBackend *be;
  const PpxSafetensors *st;
  PpxQuantization quant; /* for ppx_loader_linear: quantize-at-load request */
  GError *error;         /* first error, or NULL */
  guint64 bytes;         /* device bytes of everything loaded */
} PpxLoader;

void ppx_loader_init (PpxLoader *ld, PpxBackend *be, const PpxSafetensors *st, PpxQuantization quant);
/* Returns TRUE if no error occurred; otherwise moves the error into `error`. */
gboolean ppx_loader_finish (PpxLoader *ld, GError **error);

/* An f32 device tensor of the given shape (ndim <= 3; trailing zeros in the shape are ignored). */
PpxTensor *ppx_loader_tensor (PpxLoader *ld, int ndim, int64_t d0, int64_t d1, int64_t d2, const char *fmt, ...)
  G_GNUC_PRINTF (6, 7);
/* A linear weight [rows, cols] (a stored [rows, cols, 1] conv is accepted with ndim = 3): bf16/f32 as
 * stored, or quantized per the loader's request and policy (see quant-load.h). */
PpxWeight *ppx_loader_linear (PpxLoader *ld, int ndim, int64_t rows, int64_t cols, const char *fmt, ...)
  G_GNUC_PRINTF (5, 6);
/* A float matrix kept in f32 regardless of how it is stored (Mimi's linears). */
PpxWeight *ppx_loader_linear_f32 (PpxLoader *ld, int ndim, int64_t rows, int64_t cols, const char *fmt, ...)
  G_GNUC_PRINTF (5, 6);
/* An embedding table [rows, cols], kept in its stored float format. */
PpxWeight *ppx_loader_table (PpxLoader *ld, int64_t rows, int64_t cols, const char *fmt, ...) G_GNUC_PRINTF (4, 5);

G_END_DECLS
#endif
