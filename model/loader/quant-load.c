/* Loading linear weights, pre-quantized or quantized at load time (see quant-load.h). */
#include "quant-load.h"

#include "quant-policy.h"
#include "quant.h"

gboolean
ppx_quant_file_format (const PpxSafetensors *st, PpxQuantization *out, int *group_size, GError **error)
{
  const char *file = ppx_st_path (st);
  const char *format = ppx_st_metadata (st, PPX_QUANT_META_FORMAT);
  *out = PPX_QUANT_BF16;
  if (group_size)
    *group_size = 0;
  if (!format)
    return TRUE;

  PpxQuantization q;
  if (!ppx_quantization_from_name (format, &q) || (q != PPX_QUANT_INT8 && q != PPX_QUANT_INT4)) {
    g_set_error (error, PPX_ERROR, PPX_ERROR_UNSUPPORTED,
                 "%s: unknown quantization format '%s' in metadata " PPX_QUANT_META_FORMAT " (known: %s, %s)", file,
                 format, ppx_quantization_name (PPX_QUANT_INT8), ppx_quantization_name (PPX_QUANT_INT4));
    return FALSE;
  }
  const char *version = ppx_st_metadata (st, PPX_QUANT_META_VERSION);
  if (!version || strcmp (version, PPX_QUANT_FORMAT_VERSION) != 0) {
    g_set_error (error, PPX_ERROR, PPX_ERROR_UNSUPPORTED,
                 "%s: %s quantization format version %s%s%s is not supported (this build reads version "
                 PPX_QUANT_FORMAT_VERSION ")",
                 file, format, version ? "'" : "", version ? version : "(missing " PPX_QUANT_META_VERSION ")",
                 version ? "'" : "");
    return FALSE;
  }
  int g = 0;
  if (q == PPX_QUANT_INT4) {
    const char *gs = ppx_st_metadata (st, PPX_QUANT_META_GROUP_SIZE);
    gint64 v = 0;
    if (!gs || !g_ascii_string_to_signed (gs, 10, PPX_Q4_MIN_GROUP_SIZE, PPX_Q4_MAX_GROUP_SIZE, &v, NULL) ||
        !ppx_q4_group_size_valid ((int) v)) {
      g_set_error (error, PPX_ERROR, PPX_ERROR_FORMAT,
                   "%s: metadata " PPX_QUANT_META_GROUP_SIZE " is %s%s%s; an int4 file needs a multiple of 8 in "
                   "[%d, %d]",
                   file, gs ? "'" : "", gs ? gs : "missing", gs ? "'" : "", PPX_Q4_MIN_GROUP_SIZE,
                   PPX_Q4_MAX_GROUP_SIZE);
      return FALSE;
    }
    g = (int) v;
  }
  *out = q;
  if (group_size)
    *group_size = g;
  return TRUE;
}

static gboolean
is_float_dtype (PpxDType dt)
{
  return dt == PPX_DTYPE_F32 || dt == PPX_DTYPE_BF16 || dt == PPX_DTYPE_F16;
}

static gboolean
aligned (const void *p, gsize alignment)
{
  return ((guintptr) p % alignment) == 0;
}

/* One block holding `data_bytes` then f32[n_floats] at a 16-byte aligned offset. */
static gpointer
alloc_block (gsize data_bytes, gsize n_floats, float **floats, const char *file, const char *name, GError **error)
{
  gsize off = (data_bytes + 15) & ~(gsize) 15;
  gpointer block = g_try_malloc (MAX (off + n_floats * sizeof (float), 1));
  if (!block) {
    g_set_error (error, PPX_ERROR, PPX_ERROR_NOMEM, "%s: out of memory loading tensor '%s'", file, name);
    return NULL;
  }
  if (floats)
    *floats = (float *) ((uint8_t *) block + off);
  return block;
}

/* A pre-quantized weight: `qt` is name.q8 or name.q4. */
static gboolean
load_prequantized (const PpxSafetensors *st, const char *name, int64_t rows, int64_t cols, PpxQuantization file_q,
                   int group_size, PpxQuantization want, const PpxStTensor *qt, PpxQuantization entry_q,
                   PpxWeightDesc *desc, gpointer *owned, GError **error)
{
  const char *file = ppx_st_path (st);
  /* int8 entries may sit in an int4 file (the policy keeps some tensors at int8); int4 entries need
   * the group size of an int4 file. */
  if (file_q == PPX_QUANT_BF16 || (entry_q == PPX_QUANT_INT4 && file_q != PPX_QUANT_INT4)) {
    g_set_error (error, PPX_ERROR, PPX_ERROR_FORMAT,
                 "%s: tensor '%s' is %s-quantized but the file's metadata " PPX_QUANT_META_FORMAT " is %s", file,
                 qt->name, ppx_quantization_name (entry_q),
                 file_q == PPX_QUANT_BF16 ? "missing" : ppx_quantization_name (file_q));
    return FALSE;
  }
  if (want != PPX_QUANT_AUTO && want != file_q) {
    g_set_error (error, PPX_ERROR, PPX_ERROR_UNSUPPORTED,
                 "%s: tensor '%s' is stored quantized (%s model) and cannot be loaded as %s (use quantization "
                 "'auto', or the original bf16 model)",
                 file, name, ppx_quantization_name (file_q), ppx_quantization_name (want));
    return FALSE;
  }

  int64_t n_groups = entry_q == PPX_QUANT_INT4 ? ppx_q4_n_groups (cols, group_size) : 1;
  if (entry_q == PPX_QUANT_INT8) {
    int64_t shape[2] = {rows, cols};
    if (!ppx_st_check (st, qt, PPX_DTYPE_I8, 2, shape, error))
      return FALSE;
  } else {
    int64_t shape[2] = {rows, (int64_t) ppx_q4_row_bytes (cols)};
    if (!ppx_st_check (st, qt, PPX_DTYPE_U8, 2, shape, error))
      return FALSE;
  }

  g_autofree char *scale_name = g_strconcat (name, PPX_QUANT_SUFFIX_SCALE, NULL);
  const PpxStTensor *sc = ppx_st_find (st, scale_name);
  if (!sc) {
    g_set_error (error, PPX_ERROR, PPX_ERROR_MISSING, "%s: tensor '%s' is missing (needed by '%s')", file, scale_name,
                 qt->name);
    return FALSE;
  }
  if (!is_float_dtype (sc->dtype)) {
    g_set_error (error, PPX_ERROR, PPX_ERROR_SHAPE, "%s: tensor '%s' has dtype %s, expected F32, F16 or BF16", file,
                 scale_name, ppx_dtype_name (sc->dtype));
    return FALSE;
  }
  if (entry_q == PPX_QUANT_INT4 && sc->ndim == 2 && sc->shape[0] == rows && sc->shape[1] != n_groups) {
    g_set_error (error, PPX_ERROR, PPX_ERROR_SHAPE,
                 "%s: tensor '%s' has %" G_GINT64_FORMAT " groups per row, but group size %d from metadata "
                 PPX_QUANT_META_GROUP_SIZE " implies %" G_GINT64_FORMAT " for %" G_GINT64_FORMAT " columns",
                 file, scale_name, sc->shape[1], group_size, n_groups, cols);
    return FALSE;
  }
  int64_t scale_shape[2] = {rows, n_groups};
  if (!ppx_st_check (st, sc, sc->dtype, entry_q == PPX_QUANT_INT4 ? 2 : 1, scale_shape, error))
    return FALSE;

  gsize n_scales = (gsize) rows * (gsize) n_groups;
  const float *scales = sc->data;
  gboolean borrow = TRUE;
  if (sc->dtype != PPX_DTYPE_F32 || !aligned (sc->data, sizeof (float))) {
    float *converted = NULL;
    *owned = alloc_block (0, n_scales, &converted, file, scale_name, error);
    if (!*owned)
      return FALSE;
    if (sc->dtype == PPX_DTYPE_F32)
      memcpy (converted, sc->data, n_scales * sizeof (float));
    else
      ppx_convert_to_f32 (sc->dtype, sc->data, converted, n_scales);
    scales = converted;
    borrow = FALSE;
  }
  *desc = (PpxWeightDesc){
    .format = entry_q == PPX_QUANT_INT8 ? PPX_WFMT_INT8 : PPX_WFMT_INT4,
    .rows = rows,
    .cols = cols,
    .data = qt->data,
    .scales = scales,
    .group_size = entry_q == PPX_QUANT_INT4 ? group_size : 0,
    .borrow = borrow,
  };
  return TRUE;
}

/* Quantizes the float tensor t now into one owned block. */
static gboolean
quantize_now (const PpxSafetensors *st, const PpxStTensor *t, int64_t rows, int64_t cols, PpxQuantization q,
              int group_size, PpxWeightDesc *desc, gpointer *owned, GError **error)
{
  const char *file = ppx_st_path (st);
  gsize n = (gsize) rows * (gsize) cols;
  g_autofree float *w = g_try_new (float, MAX (n, 1));
  if (!w) {
    g_set_error (error, PPX_ERROR, PPX_ERROR_NOMEM, "%s: out of memory quantizing tensor '%s'", file, t->name);
    return FALSE;
  }
  ppx_convert_to_f32 (t->dtype, t->data, w, n);

  float *scales = NULL;
  if (q == PPX_QUANT_INT8) {
    *owned = alloc_block (n, (gsize) rows, &scales, file, t->name, error);
    if (!*owned)
      return FALSE;
    ppx_q8_quantize (w, rows, cols, *owned, scales);
  } else {
    gsize n_scales = (gsize) rows * (gsize) ppx_q4_n_groups (cols, group_size);
    *owned = alloc_block (ppx_q4_packed_bytes (rows, cols), n_scales, &scales, file, t->name, error);
    if (!*owned)
      return FALSE;
    ppx_q4_quantize (w, rows, cols, group_size, *owned, scales);
  }
  *desc = (PpxWeightDesc){
    .format = q == PPX_QUANT_INT8 ? PPX_WFMT_INT8 : PPX_WFMT_INT4,
    .rows = rows,
    .cols = cols,
    .data = *owned,
    .scales = scales,
    .group_size = q == PPX_QUANT_INT4 ? group_size : 0,
    .borrow = FALSE,
  };
  return TRUE;
}

/* A float tensor kept in floating point: borrowed when it can be, else converted to F32. */
static gboolean
load_float (const PpxSafetensors *st, const PpxStTensor *t, int64_t rows, int64_t cols, PpxWeightDesc *desc,
            gpointer *owned, GError **error)
{
  gsize n = (gsize) rows * (gsize) cols;
  gboolean keep = (t->dtype == PPX_DTYPE_BF16 && aligned (t->data, 2)) ||
                  (t->dtype == PPX_DTYPE_F32 && aligned (t->data, 4));
  *desc = (PpxWeightDesc){
    .format = t->dtype == PPX_DTYPE_BF16 && keep ? PPX_WFMT_BF16 : PPX_WFMT_F32,
    .rows = rows,
    .cols = cols,
    .data = t->data,
    .borrow = keep,
  };
  if (keep)
    return TRUE;
  float *f = NULL;
  *owned = alloc_block (0, n, &f, ppx_st_path (st), t->name, error);
  if (!*owned)
    return FALSE;
  ppx_convert_to_f32 (t->dtype, t->data, f, n);
  desc->data = f;
  return TRUE;
}

gboolean
ppx_quant_load_linear (const PpxSafetensors *st, const char *name, int64_t rows, int64_t cols, PpxQuantization quant,
                       PpxWeightDesc *desc, gpointer *owned, GError **error)
{
  const char *file = ppx_st_path (st);
  *owned = NULL;
  memset (desc, 0, sizeof *desc);
  if (rows <= 0 || cols <= 0) {
    g_set_error (error, PPX_ERROR, PPX_ERROR_INVALID,
                 "%s: tensor '%s': invalid expected shape [%" G_GINT64_FORMAT ", %" G_GINT64_FORMAT "]", file, name,
                 rows, cols);
    return FALSE;
  }
  PpxQuantization file_q;
  int group_size;
  if (!ppx_quant_file_format (st, &file_q, &group_size, error))
    return FALSE;

  g_autofree char *q8_name = g_strconcat (name, PPX_QUANT_SUFFIX_Q8, NULL);
  g_autofree char *q4_name = g_strconcat (name, PPX_QUANT_SUFFIX_Q4, NULL);
  const PpxStTensor *q8 = ppx_st_find (st, q8_name), *q4 = ppx_st_find (st, q4_name);
  if (q8 && q4) {
    g_set_error (error, PPX_ERROR, PPX_ERROR_FORMAT, "%s: tensor '%s' is stored twice, as '%s' and '%s'", file, name,
                 q8_name, q4_name);
    return FALSE;
  }
  if (q8 || q4)
    return load_prequantized (st, name, rows, cols, file_q, group_size, quant, q8 ? q8 : q4,
                              q8 ? PPX_QUANT_INT8 : PPX_QUANT_INT4, desc, owned, error);

  const PpxStTensor *t = ppx_st_find (st, name);
  if (!t) {
    g_set_error (error, PPX_ERROR, PPX_ERROR_MISSING, "%s: tensor '%s' is missing", file, name);
    return FALSE;
  }
  if (!is_float_dtype (t->dtype)) {
    g_set_error (error, PPX_ERROR, PPX_ERROR_SHAPE, "%s: tensor '%s' has dtype %s, expected BF16, F32 or F16", file,
                 name, ppx_dtype_name (t->dtype));
    return FALSE;
  }
  int64_t shape[2] = {rows, cols};
  if (!ppx_st_check (st, t, t->dtype, 2, shape, error))
    return FALSE;

  PpxQuantization target = ppx_quant_policy_format (name, quant);
  if (target != PPX_QUANT_BF16) {
    int g = file_q == PPX_QUANT_INT4 ? group_size : PPX_Q4_DEFAULT_GROUP_SIZE;
    return quantize_now (st, t, rows, cols, target, g, desc, owned, error);
  }
  return load_float (st, t, rows, cols, desc, owned, error);
}
