/* CPU backend: weights, linear layers and embedding gathers, for every weight format. */
#include "backend-cpu.h"
#include "quant.h"

#include <stdlib.h>

static void *
copy_aligned (PpxBackend *be, const void *src, gsize n, GError **error)
{
  void *p = NULL;
  if (posix_memalign (&p, 64, MAX (n, 64)) != 0 || !p) {
    g_set_error (error, PPX_ERROR, PPX_ERROR_NOMEM, "CPU backend: out of memory for %" G_GSIZE_FORMAT " weight bytes", n);
    return NULL;
  }
  memcpy (p, src, n);
  __atomic_add_fetch (&be->allocated, n, __ATOMIC_RELAXED);
  return p;
}

gboolean
ppx_cpu_weight_init (PpxBackend *be, PpxWeight *w, const PpxWeightDesc *d, GError **error)
{
  gsize scale_bytes;
  gsize data_bytes = ppx_weight_desc_bytes (d, &scale_bytes);
  if (data_bytes == 0) {
    g_set_error (error, PPX_ERROR, PPX_ERROR_UNSUPPORTED, "CPU backend: weight format %s (group size %d) is not supported",
                 ppx_weight_format_name (d->format), d->group_size);
    return FALSE;
  }
  w->data_bytes = data_bytes;
  w->scale_bytes = scale_bytes;
  if (d->borrow) {
    w->data = d->data;
    w->scales = d->scales;
    return TRUE;
  }
  if (!(w->owned_data = copy_aligned (be, d->data, data_bytes, error)))
    return FALSE;
  w->data = w->owned_data;
  if (scale_bytes) {
    if (!(w->owned_scales = copy_aligned (be, d->scales, scale_bytes, error)))
      return FALSE;
    w->scales = w->owned_scales;
  }
  return TRUE;
}

void
ppx_cpu_weight_release (PpxBackend *be, PpxWeight *w)
{
  if (w->owned_data) {
    __atomic_sub_fetch (&be->allocated, w->data_bytes, __ATOMIC_RELAXED);
    free (w->owned_data);
  }
  if (w->owned_scales) {
    __atomic_sub_fetch (&be->allocated, w->scale_bytes, __ATOMIC_RELAXED);
    free (w->owned_scales);
  }
}

/* Row r of a weight in f32: a direct pointer (F32) or converted into buf (cols floats). */
static inline const float *
weight_row_f32 (const PpxWeight *w, int64_t r, float *buf)
{
  switch (w->format) {
    case PPX_WFMT_F32:
      return (const float *) w->data + r * w->cols;
    case PPX_WFMT_BF16: {
      const uint16_t *src = (const uint16_t *) w->data + r * w->cols;
      for (int64_t c = 0; c < w->cols; c++)
        buf[c] = ppx_bf16_to_f32 (src[c]);
      return buf;
    }
    case PPX_WFMT_INT8:
      ppx_q8_dequantize_row ((const int8_t *) w->data + r * w->cols, w->scales[r], w->cols, buf);
      return buf;
    case PPX_WFMT_INT4: {
      int64_t ng = ppx_q4_n_groups (w->cols, w->group_size);
      ppx_q4_dequantize_row ((const uint8_t *) w->data + r * ppx_q4_row_bytes (w->cols), w->scales + r * ng,
                             w->group_size, w->cols, buf);
      return buf;
    }
  }
  return buf;
}

static inline float
dot_f32 (const float *a, const float *b, int64_t n)
{
  float acc[8] = {0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int k = 0; k < 8; k++)
      acc[k] += a[i + k] * b[i + k];
  float s = 0.0f;
  for (; i < n; i++)
    s += a[i] * b[i];
  return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7])) + s;
}

void
ppx_cpu_linear (PpxBackend *be, const PpxWeight *w, const PpxTensor *x, gsize ldx, PpxTensor *y, gsize ldy, int M,
                gboolean accumulate)
{
  const float *xs = F32 (x);
  float *ys = F32 (y);
  const int64_t rows = w->rows, cols = w->cols;
  if (w->format == PPX_WFMT_INT8) {
    ppx_q8_linear_f32 (w->data, w->scales, rows, cols, xs, ldx, ys, ldy, M, accumulate);
    return;
  }
  if (w->format == PPX_WFMT_INT4) {
    ppx_q4_linear_f32 (w->data, w->scales, w->group_size, rows, cols, xs, ldx, ys, ldy, M, accumulate);
    return;
  }
  const gboolean big = rows * cols >= (1 << 16);
#pragma omp parallel if (big) num_threads (be->n_threads)
  {
    float *buf = w->format == PPX_WFMT_F32 ? NULL : g_new (float, cols);
#pragma omp for schedule (static)
    for (int64_t r = 0; r < rows; r++) {
      const float *wr = weight_row_f32 (w, r, buf);
      for (int m = 0; m < M; m++) {
        float v = dot_f32 (wr, xs + (gsize) m * ldx, cols);
        float *yp = ys + (gsize) m * ldy + r;
        *yp = accumulate ? *yp + v : v;
      }
    }
    g_free (buf);
  }
}

void
ppx_cpu_embed (PpxBackend *be, const PpxWeight *table, const PpxTensor *ids, int id_index, int id_stride,
               PpxTensor *out, int M, gboolean accumulate)
{
  const int32_t *id = I32 (ids);
  float *o = F32 (out);
  const int64_t D = table->cols;
  float *buf = g_new (float, D);
  for (int m = 0; m < M; m++) {
    int32_t t = id[(gsize) m * id_stride + id_index];
    float *dst = o + (gsize) m * D;
    if (t < 0 || t >= table->rows) {
      /* -1 is the reference's zero token; other out-of-range ids never reach here in valid flows. */
      if (!accumulate)
        memset (dst, 0, D * sizeof (float));
      continue;
    }
    const float *row = weight_row_f32 (table, t, buf);
    for (int64_t c = 0; c < D; c++)
      dst[c] = accumulate ? dst[c] + row[c] : row[c];
  }
  g_free (buf);
}
