/* Quantized linear-weight formats (int8 per row, 4-bit per group) and their CPU kernels.
 *
 * These kernels are the numerical reference for the CUDA ones. Layouts (docs/quantization.md):
 *
 *  int8: q[rows, cols] (int8, row-major), scales[rows] (f32); W[r, c] = q[r, c] * scales[r].
 *        scale = absmax(row) / 127, q = round(w / scale) in [-127, 127].
 *
 *  int4: packed[rows, ceil(cols/2)] (bytes, row-major, each row starts on a byte);
 *        byte j of row r holds column 2j in its low nibble and column 2j+1 in its high nibble
 *        (an odd last column leaves the high nibble at the zero code 8);
 *        scales[rows, ceil(cols/G)] (f32), group g covers columns [g*G, min((g+1)*G, cols)).
 *        W[r, c] = (nibble(r, c) - 8) * scales[r, c / G]; codes 0..15 map to -8..7.
 *        So a 32-bit load of 4 bytes gives 8 consecutive weights: (v >> 4k) & 0xF is column k
 *        of the pair interleave (even columns in the low nibbles, odd in the high ones).
 */
#ifndef PPX_QUANT_H
#define PPX_QUANT_H

#include "ppx-common.h"

G_BEGIN_DECLS

#define PPX_Q4_ZERO_CODE 8
#define PPX_Q4_DEFAULT_GROUP_SIZE 64
#define PPX_Q4_MIN_GROUP_SIZE 8
#define PPX_Q4_MAX_GROUP_SIZE 65536

/* A group size is valid when it is a multiple of 8 (so 8-weight GPU loads never straddle groups)
 * in [PPX_Q4_MIN_GROUP_SIZE, PPX_Q4_MAX_GROUP_SIZE]. */
gboolean ppx_q4_group_size_valid (int group_size);
/* Bytes of one packed row: ceil(cols / 2). */
gsize ppx_q4_row_bytes (int64_t cols);
/* Bytes of a packed matrix: rows * ceil(cols / 2). */
gsize ppx_q4_packed_bytes (int64_t rows, int64_t cols);
/* Groups per row: ceil(cols / group_size). */
int64_t ppx_q4_n_groups (int64_t cols, int group_size);

/* A row (int8) or group (int4) whose largest |w| is below this is stored as zeros (scale 0). */
#define PPX_QUANT_TINY 1e-30f

/* ---- quantize (rows in parallel; non-finite inputs are treated as 0) ---- */
void ppx_q8_quantize (const float *w, int64_t rows, int64_t cols, int8_t *q, float *scales);
/* group_size must satisfy ppx_q4_group_size_valid(). */
void ppx_q4_quantize (const float *w, int64_t rows, int64_t cols, int group_size, uint8_t *packed, float *scales);

/* ---- dequantize one row (tests, reports, embedding gathers) ---- */
void ppx_q8_dequantize_row (const int8_t *q_row, float scale, int64_t cols, float *out);
/* packed_row: ppx_q4_row_bytes(cols) bytes; row_scales: ppx_q4_n_groups(cols, group_size) values. */
void ppx_q4_dequantize_row (const uint8_t *packed_row, const float *row_scales, int group_size, int64_t cols,
                            float *out);

/* ---- linear: y[m, r] (+)= sum_c W[r, c] * x[m, c] for m < M, r < rows ----
 * x rows have stride ldx, y rows stride ldy (elements). Rows run in parallel (OpenMP) when the
 * matrix is large. */
void ppx_q8_linear_f32 (const int8_t *q, const float *scales, int64_t rows, int64_t cols, const float *x, gsize ldx,
                        float *y, gsize ldy, int M, gboolean accumulate);
void ppx_q4_linear_f32 (const uint8_t *packed, const float *scales, int group_size, int64_t rows, int64_t cols,
                        const float *x, gsize ldx, float *y, gsize ldy, int M, gboolean accumulate);

/* ---- error figures (reports and tests) ---- */
typedef struct {
  double ref_sq; /* sum of w^2 */
  double err_sq; /* sum of (w - dequant(w))^2 */
  double max_abs_err;
  guint64 n;
} PpxQuantError;

void ppx_quant_error_add (PpxQuantError *e, const float *ref, const float *approx, gsize n);
/* ||W - Q||_F / ||W||_F (0 for an all-zero W). */
double ppx_quant_error_relative (const PpxQuantError *e);
/* 10 log10(sum w^2 / sum err^2); +inf when exact. */
double ppx_quant_error_snr_db (const PpxQuantError *e);

G_END_DECLS
#endif
