/* Quantized linear-weight formats and their CPU kernels (see quant.h and docs/quantization.md). */
#include "quant.h"

#include <math.h>

/* Matrices at least this large (rows * cols) run their rows in parallel. */
#define PARALLEL_MIN_ELEMENTS (1 << 16)

/* 4-bit scale search: the largest-magnitude weight of a group is mapped to code -d for each
 * d in 7.5, 7.75, ..., 9.5, and the scale with the least squared error wins (the first on ties).
 * Measured in docs/quantization.md: +0.45 dB SNR over the fixed d = 8 of GGML's Q4_0. */
#define Q4_SEARCH_STEPS 9
#define Q4_SEARCH_FIRST 7.5f
#define Q4_SEARCH_STEP 0.25f /* the grid holds 8.0 exactly, so lattice-exact groups round-trip */

gboolean
ppx_q4_group_size_valid (int group_size)
{
  return group_size >= PPX_Q4_MIN_GROUP_SIZE && group_size <= PPX_Q4_MAX_GROUP_SIZE && group_size % 8 == 0;
}

gsize
ppx_q4_row_bytes (int64_t cols)
{
  return (gsize) ((cols + 1) / 2);
}

gsize
ppx_q4_packed_bytes (int64_t rows, int64_t cols)
{
  return (gsize) rows * ppx_q4_row_bytes (cols);
}

int64_t
ppx_q4_n_groups (int64_t cols, int group_size)
{
  return (cols + group_size - 1) / group_size;
}

static inline float
finite_or_zero (float v)
{
  return isfinite (v) ? v : 0.0f;
}

/* ---- int8 ---- */

static void
q8_quantize_row (const float *w, int64_t cols, int8_t *q, float *scale)
{
  float amax = 0.0f;
  for (int64_t c = 0; c < cols; c++)
    amax = fmaxf (amax, fabsf (finite_or_zero (w[c])));
  float s = amax / 127.0f;
  *scale = s;
  float inv = s > 0.0f ? 1.0f / s : 0.0f;
  for (int64_t c = 0; c < cols; c++) {
    float v = rintf (finite_or_zero (w[c]) * inv);
    q[c] = (int8_t) fminf (127.0f, fmaxf (-127.0f, v));
  }
}

void
ppx_q8_quantize (const float *w, int64_t rows, int64_t cols, int8_t *q, float *scales)
{
#pragma omp parallel for schedule(static) if (rows * cols >= PARALLEL_MIN_ELEMENTS)
  for (int64_t r = 0; r < rows; r++)
    q8_quantize_row (w + r * cols, cols, q + r * cols, &scales[r]);
}

void
ppx_q8_dequantize_row (const int8_t *q_row, float scale, int64_t cols, float *out)
{
  for (int64_t c = 0; c < cols; c++)
    out[c] = (float) q_row[c] * scale;
}

/* ---- int4 ---- */

static inline float
q4_code_value (float w, float inv)
{
  return fminf (7.0f, fmaxf (-8.0f, rintf (w * inv)));
}

/* The scale of one group (n weights): searched as described above; 0 for an all-zero group. */
static float
q4_group_scale (const float *w, int64_t n)
{
  float amax = 0.0f, signed_max = 0.0f;
  for (int64_t i = 0; i < n; i++) {
    float v = finite_or_zero (w[i]);
    if (fabsf (v) > amax) {
      amax = fabsf (v);
      signed_max = v;
    }
  }
  if (amax == 0.0f)
    return 0.0f;
  float best_scale = signed_max / -8.0f;
  double best_err = INFINITY;
  for (int k = 0; k < Q4_SEARCH_STEPS; k++) {
    float s = signed_max / -(Q4_SEARCH_FIRST + Q4_SEARCH_STEP * (float) k);
    float inv = 1.0f / s;
    double err = 0.0;
    for (int64_t i = 0; i < n; i++) {
      float v = finite_or_zero (w[i]);
      float d = v - q4_code_value (v, inv) * s;
      err += (double) d * d;
    }
    if (err < best_err) {
      best_err = err;
      best_scale = s;
    }
  }
  return best_scale;
}

static void
q4_quantize_row (const float *w, int64_t cols, int group_size, uint8_t *packed, float *scales)
{
  memset (packed, 0, ppx_q4_row_bytes (cols));
  for (int64_t g0 = 0, gi = 0; g0 < cols; g0 += group_size, gi++) {
    int64_t n = MIN ((int64_t) group_size, cols - g0);
    float s = q4_group_scale (w + g0, n);
    scales[gi] = s;
    float inv = s != 0.0f ? 1.0f / s : 0.0f;
    for (int64_t c = g0; c < g0 + n; c++) {
      int code = (int) q4_code_value (finite_or_zero (w[c]), inv) + PPX_Q4_ZERO_CODE;
      packed[c >> 1] |= (uint8_t) (code << ((c & 1) * 4));
    }
  }
  if (cols & 1)
    packed[cols >> 1] |= (uint8_t) (PPX_Q4_ZERO_CODE << 4);
}

void
ppx_q4_quantize (const float *w, int64_t rows, int64_t cols, int group_size, uint8_t *packed, float *scales)
{
  g_return_if_fail (ppx_q4_group_size_valid (group_size));
  gsize row_bytes = ppx_q4_row_bytes (cols);
  int64_t n_groups = ppx_q4_n_groups (cols, group_size);
#pragma omp parallel for schedule(dynamic, 16) if (rows * cols >= PARALLEL_MIN_ELEMENTS)
  for (int64_t r = 0; r < rows; r++)
    q4_quantize_row (w + r * cols, cols, group_size, packed + r * row_bytes, scales + r * n_groups);
}

void
ppx_q4_dequantize_row (const uint8_t *packed_row, const float *row_scales, int group_size, int64_t cols, float *out)
{
  /* Groups start at even columns (group sizes are multiples of 8), so whole bytes stay in a group. */
  for (int64_t g0 = 0, gi = 0; g0 < cols; g0 += group_size, gi++) {
    float s = row_scales[gi];
    int64_t end = MIN (g0 + group_size, cols);
    int64_t c = g0;
    for (; c + 1 < end; c += 2) {
      uint8_t b = packed_row[c >> 1];
      out[c] = (float) ((int) (b & 0x0f) - PPX_Q4_ZERO_CODE) * s;
      out[c + 1] = (float) ((int) (b >> 4) - PPX_Q4_ZERO_CODE) * s;
    }
    if (c < end)
      out[c] = (float) ((int) (packed_row[c >> 1] & 0x0f) - PPX_Q4_ZERO_CODE) * s;
  }
}

/* ---- linear ---- */

/* Eight partial sums so the compiler can vectorise without reassociating a single sum. */
static inline float
dot_f32 (const float *a, const float *b, int64_t n)
{
  float acc[8] = {0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int k = 0; k < 8; k++)
      acc[k] += a[i + k] * b[i + k];
  float s = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
  for (; i < n; i++)
    s += a[i] * b[i];
  return s;
}

static inline void
store_row_outputs (const float *w_row, int64_t r, int64_t cols, const float *x, gsize ldx, float *y, gsize ldy, int M,
                   gboolean accumulate)
{
  for (int m = 0; m < M; m++) {
    float v = dot_f32 (w_row, x + (gsize) m * ldx, cols);
    float *dst = y + (gsize) m * ldy + r;
    *dst = accumulate ? *dst + v : v;
  }
}

void
ppx_q8_linear_f32 (const int8_t *q, const float *scales, int64_t rows, int64_t cols, const float *x, gsize ldx,
                   float *y, gsize ldy, int M, gboolean accumulate)
{
#pragma omp parallel if (rows * cols >= PARALLEL_MIN_ELEMENTS)
  {
    float *row = g_new (float, MAX (cols, 1));
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; r++) {
      ppx_q8_dequantize_row (q + r * cols, scales[r], cols, row);
      store_row_outputs (row, r, cols, x, ldx, y, ldy, M, accumulate);
    }
    g_free (row);
  }
}

void
ppx_q4_linear_f32 (const uint8_t *packed, const float *scales, int group_size, int64_t rows, int64_t cols,
                   const float *x, gsize ldx, float *y, gsize ldy, int M, gboolean accumulate)
{
  g_return_if_fail (ppx_q4_group_size_valid (group_size));
  gsize row_bytes = ppx_q4_row_bytes (cols);
  int64_t n_groups = ppx_q4_n_groups (cols, group_size);
#pragma omp parallel if (rows * cols >= PARALLEL_MIN_ELEMENTS)
  {
    float *row = g_new (float, MAX (cols, 1));
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; r++) {
      ppx_q4_dequantize_row (packed + r * row_bytes, scales + r * n_groups, group_size, cols, row);
      store_row_outputs (row, r, cols, x, ldx, y, ldy, M, accumulate);
    }
    g_free (row);
  }
}

/* ---- error figures ---- */

void
ppx_quant_error_add (PpxQuantError *e, const float *ref, const float *approx, gsize n)
{
  for (gsize i = 0; i < n; i++) {
    double d = (double) ref[i] - (double) approx[i];
    e->ref_sq += (double) ref[i] * ref[i];
    e->err_sq += d * d;
    e->max_abs_err = MAX (e->max_abs_err, fabs (d));
  }
  e->n += n;
}

double
ppx_quant_error_relative (const PpxQuantError *e)
{
  return e->ref_sq > 0.0 ? sqrt (e->err_sq / e->ref_sq) : 0.0;
}

double
ppx_quant_error_snr_db (const PpxQuantError *e)
{
  if (e->err_sq == 0.0)
    return INFINITY;
  return 10.0 * log10 (e->ref_sq / e->err_sq);
}
