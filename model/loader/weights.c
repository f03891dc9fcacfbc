#include "weights.h"

#include "quant-load.h"

#include <stdarg.h>

void
ppx_loader_init (PpxLoader *ld, PpxBackend *be, const PpxSafetensors *st, PpxQuantization quant)
{
  memset (ld, 0, sizeof *ld);
  ld->be = be;
  ld->st = st;
  ld->quant = quant;
}

gboolean
ppx_loader_finish (PpxLoader *ld, GError **error)
{
  if (ld->error) {
    g_propagate_error (error, ld->error);
    ld->error = NULL;
    return FALSE;
  }
  return TRUE;
}

static int
shape_of (int ndim, int64_t d0, int64_t d1, int64_t d2, int64_t *shape)
{
  shape[0] = d0;
  shape[1] = d1;
  shape[2] = d2;
  return ndim;
}

static float *
load_f32 (PpxLoader *ld, const char *name, int ndim, const int64_t *shape)
{
  return ppx_st_load_f32 (ld->st, name, ndim, shape, &ld->error);
}

PpxTensor *
ppx_loader_tensor (PpxLoader *ld, int ndim, int64_t d0, int64_t d1, int64_t d2, const char *fmt, ...)
{
  if (ld->error)
    return NULL;
  va_list ap;
  va_start (ap, fmt);
  g_autofree char *name = g_strdup_vprintf (fmt, ap);
  va_end (ap);
  int64_t shape[3];
  shape_of (ndim, d0, d1, d2, shape);
  g_autofree float *host = load_f32 (ld, name, ndim, shape);
  if (!host)
    return NULL;
  gsize n = 1;
  for (int i = 0; i < ndim; i++)
    n *= (gsize) shape[i];
  PpxTensor *t = ppx_tensor_new (ld->be, PPX_TENSOR_F32, n, &ld->error);
  if (t) {
    ppx_tensor_upload (t, 0, host, n);
    ld->bytes += n * 4;
  }
  return t;
}

static const PpxStTensor *
find_checked (PpxLoader *ld, const char *name, int ndim, const int64_t *shape)
{
  const PpxStTensor *t = ppx_st_find (ld->st, name);
  if (!t) {
    g_set_error (&ld->error, PPX_ERROR, PPX_ERROR_MISSING, "%s: tensor '%s' is missing", ppx_st_path (ld->st), name);
    return NULL;
  }
  if (t->dtype != PPX_DTYPE_BF16 && t->dtype != PPX_DTYPE_F32 && t->dtype != PPX_DTYPE_F16) {
    g_set_error (&ld->error, PPX_ERROR, PPX_ERROR_SHAPE, "%s: tensor '%s' has dtype %s, expected BF16, F16 or F32",
                 ppx_st_path (ld->st), name, ppx_dtype_name (t->dtype));
    return NULL;
  }
  if (!ppx_st_check (ld->st, t, t->dtype, ndim, shape, &ld->error))
    return NULL;
  return t;
}

static PpxWeight *
weight_from_stored (PpxLoader *ld, const PpxStTensor *t, int64_t rows, int64_t cols, gboolean force_f32)
{
  PpxWeightDesc d = {.rows = rows, .cols = cols};
  g_autofree float *conv = NULL;
  if (t->dtype == PPX_DTYPE_F32 || (t->dtype == PPX_DTYPE_BF16 && !force_f32)) {
    d.format = t->dtype == PPX_DTYPE_F32 ? PPX_WFMT_F32 : PPX_WFMT_BF16;
    d.data = t->data;
    /* Borrowing needs the element alignment the kernels assume. */
    d.borrow = ((guintptr) t->data % (d.format == PPX_WFMT_F32 ? 4 : 2)) == 0;
  } else {
    conv = g_try_new (float, (gsize) rows * cols);
    if (!conv) {
      g_set_error (&ld->error, PPX_ERROR, PPX_ERROR_NOMEM, "%s: out of memory converting '%s'", ppx_st_path (ld->st),
                   t->name);
      return NULL;
    }
    ppx_convert_to_f32 (t->dtype, t->data, conv, (gsize) rows * cols);
    d.format = PPX_WFMT_F32;
    d.data = conv;
  }
  PpxWeight *w = ppx_weight_new (ld->be, &d, &ld->error);
  if (w)
    ld->bytes += ppx_weight_bytes (w);
  return w;
}

static PpxWeight *
linear_v (PpxLoader *ld, int ndim, int64_t rows, int64_t cols, gboolean force_f32, const char *fmt, va_list ap)
{
  if (ld->error)
    return NULL;
  g_autofree char *name = g_strdup_vprintf (fmt, ap);
  int64_t shape[3] = {rows, cols, 1};
  const PpxStTensor *t = find_checked (ld, name, ndim, shape);
  return t ? weight_from_stored (ld, t, rows, cols, force_f32) : NULL;
}

PpxWeight *
ppx_loader_linear (PpxLoader *ld, int ndim, int64_t rows, int64_t cols, const char *fmt, ...)
{
  va_list ap;
  va_start (ap, fmt);
  if (ndim != 2) {
    PpxWeight *w = linear_v (ld, ndim, rows, cols, FALSE, fmt, ap);
    va_end (ap);
    return w;
  }
  g_autofree char *name = g_strdup_vprintf (fmt, ap);
  va_end (ap);
  if (ld->error)
    return NULL;
  PpxWeightDesc d;
  gpointer owned = NULL;
  if (!ppx_quant_load_linear (ld->st, name, rows, cols, ld->quant, &d, &owned, &ld->error))
    return NULL;
  PpxWeight *w = ppx_weight_new (ld->be, &d, &ld->error);
  g_free (owned);
  if (w)
    ld->bytes += ppx_weight_bytes (w);
  return w;
}

PpxWeight *
ppx_loader_linear_f32 (PpxLoader *ld, int ndim, int64_t rows, int64_t cols, const char *fmt, ...)
{
  va_list ap;
  va_start (ap, fmt);
  PpxWeight *w = linear_v (ld, ndim, rows, cols, TRUE, fmt, ap);
  va_end (ap);
  return w;
}

PpxWeight *
ppx_loader_table (PpxLoader *ld, int64_t rows, int64_t cols, const char *fmt, ...)
{
  va_list ap;
  va_start (ap, fmt);
  PpxWeight *w = linear_v (ld, 2, rows, cols, FALSE, fmt, ap);
  va_end (ap);
  return w;
}
