/* Quantized linear-weight formats and their CPU kernels (see quant.h and docs/quantization.md). */
#include "quant.h"

#include <float.h>
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

/* Non-finite values count as 0. Written with comparisons (NaN compares false) so loops vectorise. */
static inline float
finite_or_zero (float v)
{
  return fabsf (v) <= FLT_MAX ? v : 0.0f;
}

static inline float
clamp (float v, float lo, float hi)
{
  v = v < lo ? lo : v;
  return v > hi ? hi : v;
}

/* Largest |w| over finite values. */
static float
abs_max (const float *w, int64_t n)
{
  float m[8] = {0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int k = 0; k < 8; k++) {
      float a = fabsf (finite_or_zero (w[i + k]));
      m[k] = a > m[k] ? a : m[k];
    }
  float amax = 0.0f;
  for (int k = 0; k < 8; k++)
    amax = m[k] > amax ? m[k] : amax;
  for (; i < n; i++) {
    float a = fabsf (finite_or_zero (w[i]));
    amax = a > amax ? a : amax;
  }
  return amax;
}

/* ---- int8 ---- */

static void
q8_quantize_row (const float *w, int64_t cols, int8_t *q, float *scale)
{
  float amax = abs_max (w, cols);
  float s = amax < PPX_QUANT_TINY ? 0.0f : amax / 127.0f;
  *scale = s;
  float inv = s > 0.0f ? 1.0f / s : 0.0f;
  for (int64_t c = 0; c < cols; c++)
    q[c] = (int8_t) (int) clamp (rintf (finite_or_zero (w[c]) * inv), -127.0f, 127.0f);
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
  return clamp (rintf (w * inv), -8.0f, 7.0f);
}

/* Sum over a (finite) group of (x/s - code)^2 for inv = 1/s: the squared error in units of the scale,
 * in a fixed summation order. (Errors in weight units would underflow for tiny weights.) */
static float
q4_group_code_error (const float *x, int64_t n, float inv)
{
  float acc[8] = {0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int k = 0; k < 8; k++) {
      float t = x[i + k] * inv;
      float d = t - clamp (rintf (t), -8.0f, 7.0f);
      acc[k] += d * d;
    }
  float e = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
  for (; i < n; i++) {
    float t = x[i] * inv;
    float d = t - clamp (rintf (t), -8.0f, 7.0f);
    e += d * d;
  }
  return e;
}

/* The scale of one (finite) group: searched as described above. The error of candidate d, in units of
 * the group's largest |w|, is code_error / d^2. 0 for a group of (near) zeros. */
static float
q4_group_scale (const float *x, int64_t n)
{
  float amax = 0.0f, signed_max = 0.0f;
  for (int64_t i = 0; i < n; i++) {
    if (fabsf (x[i]) > amax) {
      amax = fabsf (x[i]);
      signed_max = x[i];
    }
  }
  if (amax < PPX_QUANT_TINY)
    return 0.0f;
  float best_scale = 0.0f, best_err = INFINITY;
  for (int k = 0; k < Q4_SEARCH_STEPS; k++) {
    float d = Q4_SEARCH_FIRST + Q4_SEARCH_STEP * (float) k;
    float s = signed_max / -d;
    float err = q4_group_code_error (x, n, 1.0f / s) / (d * d);
    if (err < best_err) {
      best_err = err;
      best_scale = s;
    }
  }
  return best_scale;
}

/* x: the row with non-finite values already replaced by 0. */
static void
q4_quantize_row (const float *x, int64_t cols, int group_size, uint8_t *packed, float *scales)
{
  for (int64_t g0 = 0, gi = 0; g0 < cols; g0 += group_size, gi++) {
    int64_t n = MIN ((int64_t) group_size, cols - g0);
    float s = q4_group_scale (x + g0, n);
    scales[gi] = s;
    float inv = s != 0.0f ? 1.0f / s : 0.0f;
    /* Groups start at even columns: whole bytes stay in one group. */
    int64_t c = g0;
    for (; c + 1 < g0 + n; c += 2) {
      int lo = (int) q4_code_value (x[c], inv) + PPX_Q4_ZERO_CODE;
      int hi = (int) q4_code_value (x[c + 1], inv) + PPX_Q4_ZERO_CODE;
      packed[c >> 1] = (uint8_t) (lo | (hi << 4));
    }
    if (c < g0 + n) /* odd last column: the high nibble holds the zero code */
      packed[c >> 1] = (uint8_t) (((int) q4_code_value (x[c], inv) + PPX_Q4_ZERO_CODE) | (PPX_Q4_ZERO_CODE << 4));
  }
}

void
ppx_q4_quantize (const float *w, int64_t rows, int64_t cols, int group_size, uint8_t *packed, float *scales)
{
  g_return_if_fail (ppx_q4_group_size_valid (group_size));
  gsize row_bytes = ppx_q4_row_bytes (cols);
  int64_t n_groups = ppx_q4_n_groups (cols, group_size);
#pragma omp parallel if (rows * cols >= PARALLEL_MIN_ELEMENTS)
  {
    float *clean = g_new (float, MAX (cols, 1));
#pragma omp for schedule(dynamic, 16)
    for (int64_t r = 0; r < rows; r++) {
      const float *row = w + r * cols;
      for (int64_t c = 0; c < cols; c++)
        clean[c] = finite_or_zero (row[c]);
      q4_quantize_row (clean, cols, group_size, packed + r * row_bytes, scales + r * n_groups);
    }
    g_free (clean);
  }
}

void
ppx_q4_dequantize_row (const uint8_t *packed_row, const float *row_scales, int group_size, int64_t cols, float *out)
{
  /* Groups start at even columns (group sizes are multiples of 8), so whole bytes stay in a group. */
  for (int64_t g0 = 0, gi = 0; g0 < cols; g0 += group_size, gi++) {
    float s = row_scales[gi];
    float level[16];
    for (int k = 0; k < 16; k++)
      level[k] = (float) (k - PPX_Q4_ZERO_CODE) * s;
    int64_t end = MIN (g0 + group_size, cols);
    int64_t c = g0;
    for (; c + 1 < end; c += 2) {
      uint8_t b = packed_row[c >> 1];
      out[c] = level[b & 0x0f];
      out[c + 1] = level[b >> 4];
    }
    if (c < end)
      out[c] = level[packed_row[c >> 1] & 0x0f];
  }
}

/* ---- linear ---- */

/* Rows are dequantized in blocks of this many, and each x row is read once per block. */
#define ROW_BLOCK 4

/* y[m, r0 + j] (+)= w_rows[j] . x[m] for j < n_rows (<= ROW_BLOCK). Each dot product uses eight partial
 * sums combined in a fixed order, the same for every row, whatever the block it falls in. */
static void
block_outputs (const float *w_rows, int n_rows, int64_t r0, int64_t cols, const float *x, gsize ldx, float *y,
               gsize ldy, int M, gboolean accumulate)
{
  for (int m = 0; m < M; m++) {
    const float *xm = x + (gsize) m * ldx;
    float acc[ROW_BLOCK][8] = {{0}};
    int64_t i = 0;
    for (; i + 8 <= cols; i += 8)
      for (int j = 0; j < ROW_BLOCK; j++)
        for (int k = 0; k < 8; k++)
          acc[j][k] += w_rows[(gsize) j * cols + i + k] * xm[i + k];
    for (int j = 0; j < n_rows; j++) {
      const float *a = acc[j];
      float v = ((a[0] + a[4]) + (a[1] + a[5])) + ((a[2] + a[6]) + (a[3] + a[7]));
      for (int64_t t = i; t < cols; t++)
        v += w_rows[(gsize) j * cols + t] * xm[t];
      float *dst = y + (gsize) m * ldy + r0 + j;
      *dst = accumulate ? *dst + v : v;
    }
  }
}

/* Writes weight row r (cols floats) into out, dequantized from the rows behind data. */
typedef void (*RowDequantFunc) (const void *data, int64_t r, int64_t cols, float *out);

/* y (+)= W x for the rows x of M, with W's rows dequantized ROW_BLOCK at a time by dequant. */
static void
blocked_linear (RowDequantFunc dequant, const void *data, int64_t rows, int64_t cols, const float *x, gsize ldx,
                float *y, gsize ldy, int M, gboolean accumulate)
{
  int64_t n_blocks = (rows + ROW_BLOCK - 1) / ROW_BLOCK;
#pragma omp parallel if (rows * cols >= PARALLEL_MIN_ELEMENTS)
  {
    /* zeroed: rows past the end of the last block contribute nothing */
    float *w_rows = g_new0 (float, ROW_BLOCK * MAX (cols, 1));
#pragma omp for schedule(static)
    for (int64_t b = 0; b < n_blocks; b++) {
      int64_t r0 = b * ROW_BLOCK;
      int n = (int) MIN ((int64_t) ROW_BLOCK, rows - r0);
      for (int j = 0; j < n; j++)
        dequant (data, r0 + j, cols, w_rows + (gsize) j * cols);
      block_outputs (w_rows, n, r0, cols, x, ldx, y, ldy, M, accumulate);
    }
    g_free (w_rows);
  }
}

typedef struct
{
  const int8_t *q;
  const float *scales;
} Q8Rows;

static void
q8_row (const void *data, int64_t r, int64_t cols, float *out)
{
  const Q8Rows *w = data;
  ppx_q8_dequantize_row (w->q + r * cols, w->scales[r], cols, out);
}

void
ppx_q8_linear_f32 (const int8_t *q, const float *scales, int64_t rows, int64_t cols, const float *x, gsize ldx,
                   float *y, gsize ldy, int M, gboolean accumulate)
{
  const Q8Rows w = { q, scales };
  blocked_linear (q8_row, &w, rows, cols, x, ldx, y, ldy, M, accumulate);
}

typedef struct
{
  const uint8_t *packed;
  const float *scales;
  int group_size;
  gsize row_bytes;
  int64_t n_groups;
} Q4Rows;

static void
q4_row (const void *data, int64_t r, int64_t cols, float *out)
{
  const Q4Rows *w = data;
  ppx_q4_dequantize_row (w->packed + r * w->row_bytes, w->scales + r * w->n_groups, w->group_size, cols, out);
}

void
ppx_q4_linear_f32 (const uint8_t *packed, const float *scales, int group_size, int64_t rows, int64_t cols,
                   const float *x, gsize ldx, float *y, gsize ldy, int M, gboolean accumulate)
{
  g_return_if_fail (ppx_q4_group_size_valid (group_size));
  const Q4Rows w = { packed, scales, group_size, ppx_q4_row_bytes (cols), ppx_q4_n_groups (cols, group_size) };
  blocked_linear (q4_row, &w, rows, cols, x, ldx, y, ldy, M, accumulate);
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
