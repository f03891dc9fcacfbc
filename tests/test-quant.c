/* Quantized formats: exact round trips of the documented layouts, the linear kernels against the float
 * path on awkward sizes, and the error of quantization itself on Gaussian weights. */
#include "quant-policy.h"
#include "quant.h"
#include "test-util.h"

#include <float.h>
#include <math.h>

/* Deterministic N(0, sigma) values (Box-Muller over GRand). */
static float *
gaussian_matrix (guint32 seed, int64_t rows, int64_t cols, float sigma)
{
  GRand *rng = g_rand_new_with_seed (seed);
  gsize n = (gsize) rows * cols;
  float *w = g_new (float, MAX (n, 1));
  for (gsize i = 0; i < n; i++) {
    double u1 = g_rand_double (rng), u2 = g_rand_double (rng);
    w[i] = (float) (sqrt (-2.0 * log (1.0 - u1)) * cos (2.0 * G_PI * u2)) * sigma;
  }
  g_rand_free (rng);
  return w;
}

static void
test_sizes (void)
{
  g_assert_cmpuint (ppx_q4_row_bytes (1), ==, 1);
  g_assert_cmpuint (ppx_q4_row_bytes (33), ==, 17);
  g_assert_cmpuint (ppx_q4_packed_bytes (7, 33), ==, 7 * 17);
  g_assert_cmpuint (ppx_q4_packed_bytes (64, 176), ==, 64 * 88);
  g_assert_cmpint (ppx_q4_n_groups (176, 64), ==, 3);
  g_assert_cmpint (ppx_q4_n_groups (64, 64), ==, 1);
  g_assert_cmpint (ppx_q4_n_groups (1, 64), ==, 1);
  g_assert_true (ppx_q4_group_size_valid (64));
  g_assert_true (ppx_q4_group_size_valid (8));
  g_assert_false (ppx_q4_group_size_valid (0));
  g_assert_false (ppx_q4_group_size_valid (4));
  g_assert_false (ppx_q4_group_size_valid (60));
  g_assert_false (ppx_q4_group_size_valid (-64));
}

/* The documented nibble layout, written by hand: column 2j in the low nibble of byte j, code 8 = 0. */
static void
test_q4_layout (void)
{
  /* 2 rows x 11 columns, group 8: row 0 codes 0..10, row 1 codes 15..5. */
  const int rows = 2, cols = 11, G = 8;
  uint8_t packed[2 * 6] = {0};
  float scales[2 * 2] = {0.5f, 2.0f, -1.0f, 0.25f};
  for (int r = 0; r < rows; r++)
    for (int c = 0; c < cols; c++) {
      int code = r == 0 ? c : 15 - c;
      packed[r * 6 + c / 2] |= (uint8_t) (code << (4 * (c % 2)));
    }
  packed[5] |= 8 << 4;
  packed[11] |= 8 << 4;
  float out[11];
  for (int r = 0; r < rows; r++) {
    ppx_q4_dequantize_row (packed + r * 6, scales + r * 2, G, cols, out);
    for (int c = 0; c < cols; c++) {
      int code = r == 0 ? c : 15 - c;
      g_assert_cmpfloat (out[c], ==, (float) (code - 8) * scales[r * 2 + c / G]);
    }
  }
}

/* Weights on the quantization lattice come back bit-exact, with the codes and scales expected. */
static void
test_q4_round_trip (void)
{
  const int64_t shapes[][2] = {{1, 1}, {3, 7}, {7, 33}, {5, 88}, {4, 176}, {2, 130}};
  const int groups[] = {8, 32, 64, 128};
  GRand *rng = g_rand_new_with_seed (7);
  for (gsize si = 0; si < G_N_ELEMENTS (shapes); si++)
    for (gsize gi = 0; gi < G_N_ELEMENTS (groups); gi++) {
      int64_t rows = shapes[si][0], cols = shapes[si][1];
      int G = groups[gi];
      int64_t ng = ppx_q4_n_groups (cols, G);
      int *codes = g_new (int, rows * cols);
      float *want_scales = g_new (float, rows * ng);
      float *w = g_new (float, rows * cols);
      for (int64_t r = 0; r < rows; r++)
        for (int64_t g = 0; g < ng; g++) {
          /* A power-of-two scale (exact products) with one code -8 per group: the lattice the
           * quantizer must find. */
          float s = ldexpf (1.0f, g_rand_int_range (rng, -95, 3)); /* down to tiny weights */
          if (g_rand_boolean (rng))
            s = -s;
          want_scales[r * ng + g] = s;
          int64_t c0 = g * G, c1 = MIN (c0 + G, cols);
          int64_t extreme = g_rand_int_range (rng, (gint32) c0, (gint32) c1);
          for (int64_t c = c0; c < c1; c++) {
            codes[r * cols + c] = c == extreme ? -8 : g_rand_int_range (rng, -8, 8);
            w[r * cols + c] = (float) codes[r * cols + c] * s;
          }
        }
      uint8_t *packed = g_malloc (ppx_q4_packed_bytes (rows, cols));
      float *scales = g_new (float, rows * ng), *row = g_new (float, cols);
      ppx_q4_quantize (w, rows, cols, G, packed, scales);
      gsize rb = ppx_q4_row_bytes (cols);
      for (int64_t r = 0; r < rows; r++) {
        for (int64_t g = 0; g < ng; g++)
          g_assert_cmpfloat (scales[r * ng + g], ==, want_scales[r * ng + g]);
        for (int64_t c = 0; c < cols; c++) {
          int nib = (packed[r * rb + c / 2] >> (4 * (c % 2))) & 0xf;
          g_assert_cmpint (nib - PPX_Q4_ZERO_CODE, ==, codes[r * cols + c]);
        }
        if (cols % 2)
          g_assert_cmpint (packed[r * rb + rb - 1] >> 4, ==, PPX_Q4_ZERO_CODE);
        ppx_q4_dequantize_row (packed + r * rb, scales + r * ng, G, cols, row);
        for (int64_t c = 0; c < cols; c++)
          g_assert_cmpfloat (row[c], ==, w[r * cols + c]);
      }
      g_free (codes);
      g_free (want_scales);
      g_free (w);
      g_free (packed);
      g_free (scales);
      g_free (row);
    }
  g_rand_free (rng);
}

static void
test_q8_round_trip (void)
{
  const int64_t rows = 9, cols = 37;
  GRand *rng = g_rand_new_with_seed (8);
  int8_t want[9 * 37], q[9 * 37];
  float w[9 * 37], want_scales[9], scales[9], row[37];
  for (int64_t r = 0; r < rows; r++) {
    want_scales[r] = ldexpf (1.0f, g_rand_int_range (rng, -90, 2));
    int64_t extreme = g_rand_int_range (rng, 0, cols);
    for (int64_t c = 0; c < cols; c++) {
      want[r * cols + c] = c == extreme ? (g_rand_boolean (rng) ? 127 : -127) : (int8_t) g_rand_int_range (rng, -127, 128);
      w[r * cols + c] = (float) want[r * cols + c] * want_scales[r];
    }
  }
  ppx_q8_quantize (w, rows, cols, q, scales);
  for (int64_t r = 0; r < rows; r++) {
    g_assert_cmpfloat (scales[r], ==, want_scales[r]);
    ppx_q8_dequantize_row (q + r * cols, scales[r], cols, row);
    for (int64_t c = 0; c < cols; c++) {
      g_assert_cmpint (q[r * cols + c], ==, want[r * cols + c]);
      g_assert_cmpfloat (row[c], ==, w[r * cols + c]);
    }
  }
  g_rand_free (rng);
}

/* Zero rows give zero scales; NaN/Inf are treated as 0 and never poison the scale. */
static void
test_degenerate_values (void)
{
  float w[2 * 16] = {0};
  w[16 + 0] = NAN;
  w[16 + 1] = INFINITY;
  w[16 + 2] = -INFINITY;
  w[16 + 3] = 1.0f;
  int8_t q8[32];
  float s8[2], row[16];
  ppx_q8_quantize (w, 2, 16, q8, s8);
  g_assert_cmpfloat (s8[0], ==, 0.0f);
  g_assert_cmpfloat (s8[1], ==, 1.0f / 127.0f);
  ppx_q8_dequantize_row (q8 + 16, s8[1], 16, row);
  g_assert_cmpfloat (row[0], ==, 0.0f);
  g_assert_cmpfloat (row[1], ==, 0.0f);
  g_assert_cmpfloat (fabsf (row[3] - 1.0f), <, 1e-6f);

  uint8_t q4[2 * 8];
  float s4[2];
  ppx_q4_quantize (w, 2, 16, 16, q4, s4);
  g_assert_cmpfloat (s4[0], ==, 0.0f);
  g_assert_true (isfinite (s4[1]) && s4[1] != 0.0f);
  for (int i = 0; i < 8; i++)
    g_assert_cmpint (q4[i], ==, 0x88);
  ppx_q4_dequantize_row (q4 + 8, s4 + 1, 16, 16, row);
  g_assert_cmpfloat (row[0], ==, 0.0f);
  g_assert_cmpfloat (row[2], ==, 0.0f);
  g_assert_cmpfloat (fabsf (row[3] - 1.0f), <, 1e-6f);

  /* Below PPX_QUANT_TINY a row (int8) or group (int4) is stored as zeros, never as an overflowing 1/scale. */
  float tiny[16];
  for (int i = 0; i < 16; i++)
    tiny[i] = (i % 2 ? -1.0f : 1.0f) * 1e-36f * (float) i;
  ppx_q8_quantize (tiny, 1, 16, q8, s8);
  g_assert_cmpfloat (s8[0], ==, 0.0f);
  for (int i = 0; i < 16; i++)
    g_assert_cmpint (q8[i], ==, 0);
  ppx_q4_quantize (tiny, 1, 16, 8, q4, s4);
  g_assert_cmpfloat (s4[0], ==, 0.0f);
  g_assert_cmpfloat (s4[1], ==, 0.0f);
  for (int i = 0; i < 8; i++)
    g_assert_cmpint (q4[i], ==, 0x88);
}

/* y = dequant(W) x computed in double, as the float path the kernels must match. */
static void
reference_linear (const float *wd, int64_t rows, int64_t cols, const float *x, gsize ldx, double *y, int M)
{
  for (int m = 0; m < M; m++)
    for (int64_t r = 0; r < rows; r++) {
      double s = 0;
      for (int64_t c = 0; c < cols; c++)
        s += (double) wd[r * cols + c] * x[m * ldx + c];
      y[m * rows + r] = s;
    }
}

static void
check_linear_outputs (const float *y, gsize ldy, const double *ref, const float *wd, const float *x, gsize ldx,
                      int64_t rows, int64_t cols, int M, float base, const char *what)
{
  for (int m = 0; m < M; m++)
    for (int64_t r = 0; r < rows; r++) {
      /* float accumulation error bound: cols * eps * sum |w x| */
      double mag = 0;
      for (int64_t c = 0; c < cols; c++)
        mag += fabs ((double) wd[r * cols + c] * x[m * ldx + c]);
      double tol = 4.0 * cols * FLT_EPSILON * mag + 2.0 * FLT_EPSILON * (fabs (base) + fabs (ref[m * rows + r])) + 1e-30;
      double got = (double) y[m * ldy + r] - base;
      if (fabs (got - ref[m * rows + r]) > tol)
        g_error ("%s [%" G_GINT64_FORMAT "x%" G_GINT64_FORMAT "] M=%d: y[%d, %" G_GINT64_FORMAT "] = %.9g, float path %.9g",
                 what, rows, cols, M, m, r, got, ref[m * rows + r]);
    }
  /* Padding between rows of y is untouched. */
  for (int m = 0; m < M; m++)
    for (gsize r = rows; r < ldy; r++)
      g_assert_cmpfloat (y[m * ldy + r], ==, base);
}

static void
test_linear_vs_float_path (void)
{
  const int64_t shapes[][2] = {{7, 33}, {13, 100}, {64, 176}, {1, 1}, {5, 88}, {3, 130}, {300, 260}};
  const int groups[] = {32, 64, 128};
  const int Ms[] = {1, 3};
  for (gsize si = 0; si < G_N_ELEMENTS (shapes); si++)
    for (gsize mi = 0; mi < G_N_ELEMENTS (Ms); mi++) {
      int64_t rows = shapes[si][0], cols = shapes[si][1];
      int M = Ms[mi];
      gsize ldx = (gsize) cols + 3, ldy = (gsize) rows + 2;
      g_autofree float *w = gaussian_matrix (100 + si, rows, cols, 0.05f);
      g_autofree float *x = gaussian_matrix (200 + si, M, ldx, 1.0f);
      g_autofree float *wd = g_new (float, rows * cols);
      g_autofree double *ref = g_new (double, M * rows);
      g_autofree float *y = g_new (float, M * ldy);

      /* int8 */
      g_autofree int8_t *q8 = g_new (int8_t, rows * cols);
      g_autofree float *s8 = g_new (float, rows);
      ppx_q8_quantize (w, rows, cols, q8, s8);
      for (int64_t r = 0; r < rows; r++)
        ppx_q8_dequantize_row (q8 + r * cols, s8[r], cols, wd + r * cols);
      reference_linear (wd, rows, cols, x, ldx, ref, M);
      for (gsize i = 0; i < M * ldy; i++)
        y[i] = 0.0f;
      ppx_q8_linear_f32 (q8, s8, rows, cols, x, ldx, y, ldy, M, FALSE);
      check_linear_outputs (y, ldy, ref, wd, x, ldx, rows, cols, M, 0.0f, "q8 linear");
      for (gsize i = 0; i < M * ldy; i++)
        y[i] = 0.5f;
      ppx_q8_linear_f32 (q8, s8, rows, cols, x, ldx, y, ldy, M, TRUE);
      check_linear_outputs (y, ldy, ref, wd, x, ldx, rows, cols, M, 0.5f, "q8 linear (accumulate)");

      /* int4, each group size */
      for (gsize gi = 0; gi < G_N_ELEMENTS (groups); gi++) {
        int G = groups[gi];
        int64_t ng = ppx_q4_n_groups (cols, G);
        gsize rb = ppx_q4_row_bytes (cols);
        g_autofree uint8_t *q4 = g_malloc (ppx_q4_packed_bytes (rows, cols));
        g_autofree float *s4 = g_new (float, rows * ng);
        ppx_q4_quantize (w, rows, cols, G, q4, s4);
        for (int64_t r = 0; r < rows; r++)
          ppx_q4_dequantize_row (q4 + r * rb, s4 + r * ng, G, cols, wd + r * cols);
        reference_linear (wd, rows, cols, x, ldx, ref, M);
        for (gsize i = 0; i < M * ldy; i++)
          y[i] = -1.0f;
        ppx_q4_linear_f32 (q4, s4, G, rows, cols, x, ldx, y, ldy, M, TRUE);
        check_linear_outputs (y, ldy, ref, wd, x, ldx, rows, cols, M, -1.0f, "q4 linear (accumulate)");
        ppx_q4_linear_f32 (q4, s4, G, rows, cols, x, ldx, y, ldy, M, FALSE);
        for (int m = 0; m < M; m++) /* padding keeps -1 from before; the check below expects base 0 */
          for (gsize r = rows; r < ldy; r++)
            y[m * ldy + r] = 0.0f;
        check_linear_outputs (y, ldy, ref, wd, x, ldx, rows, cols, M, 0.0f, "q4 linear");
      }
    }
}

/* Quantization error on Gaussian weights: measured (docs/quantization.md), bounded here with a margin. */
static void
test_error_bounds (void)
{
  const int64_t rows = 256, cols = 1024;
  g_autofree float *w = gaussian_matrix (42, rows, cols, 0.02f);
  g_autofree float *row = g_new (float, cols);

  g_autofree int8_t *q8 = g_new (int8_t, rows * cols);
  g_autofree float *s8 = g_new (float, rows);
  ppx_q8_quantize (w, rows, cols, q8, s8);
  PpxQuantError e8 = {0};
  for (int64_t r = 0; r < rows; r++) {
    ppx_q8_dequantize_row (q8 + r * cols, s8[r], cols, row);
    ppx_quant_error_add (&e8, w + r * cols, row, cols);
  }
  g_test_message ("int8: rel %.5f, SNR %.2f dB", ppx_quant_error_relative (&e8), ppx_quant_error_snr_db (&e8));
  g_assert_cmpfloat (ppx_quant_error_relative (&e8), <, 0.0085); /* measured 0.0078 */
  g_assert_cmpfloat (ppx_quant_error_relative (&e8), >, 0.004);  /* it does quantize */

  const struct {
    int G;
    double bound;
  } cases[] = {{32, 0.085}, {64, 0.094}, {128, 0.102}}; /* measured 0.081, 0.090, 0.097 */
  double prev = 0.0;
  for (gsize i = 0; i < G_N_ELEMENTS (cases); i++) {
    int G = cases[i].G;
    int64_t ng = ppx_q4_n_groups (cols, G);
    gsize rb = ppx_q4_row_bytes (cols);
    g_autofree uint8_t *q4 = g_malloc (ppx_q4_packed_bytes (rows, cols));
    g_autofree float *s4 = g_new (float, rows * ng);
    ppx_q4_quantize (w, rows, cols, G, q4, s4);
    PpxQuantError e4 = {0};
    for (int64_t r = 0; r < rows; r++) {
      ppx_q4_dequantize_row (q4 + r * rb, s4 + r * ng, G, cols, row);
      ppx_quant_error_add (&e4, w + r * cols, row, cols);
    }
    double rel = ppx_quant_error_relative (&e4);
    g_test_message ("int4 G=%d: rel %.5f, SNR %.2f dB", G, rel, ppx_quant_error_snr_db (&e4));
    g_assert_cmpfloat (rel, <, cases[i].bound);
    g_assert_cmpfloat (rel, >, prev); /* larger groups, larger error */
    g_assert_cmpfloat (fabs (10.0 * log10 (1.0 / (rel * rel)) - ppx_quant_error_snr_db (&e4)), <, 1e-9);
    prev = rel;
  }
}

static void
test_policy (void)
{
  const char *temporal[] = {
    "transformer.layers.0.self_attn.in_proj_weight", "transformer.layers.31.self_attn.out_proj.weight",
    "transformer.layers.7.gating.linear_in.weight",  "transformer.layers.7.gating.linear_out.weight",
  };
  const char *int8_in_int4_model[] = {
    "depformer.layers.5.self_attn.in_proj_weight",   "depformer.layers.0.self_attn.out_proj.weight",
    "depformer.layers.1.gating.15.linear_in.weight", "depformer.layers.1.gating.0.linear_out.weight",
    "depformer_in.12.weight",                        "linears.3.weight",
    "text_linear.weight",
  };
  const char *kept[] = {
    "emb.0.weight", "text_emb.weight", "depformer_emb.3.weight", "depformer_text_emb.weight", "out_norm.alpha",
    "transformer.layers.0.norm1.alpha", "depformer.layers.0.norm2.alpha", "transformer.layers.x.gating.linear_in.weight",
    "transformer.layers.0.gating.linear_in.weight.q8", "xtext_linear.weight", "linears..weight",
    "encoder.model.0.conv.conv.weight", "decoder_transformer.transformer.layers.0.self_attn.in_proj_weight",
    "quantizer.rvq_first.input_proj.weight", "",
  };
  for (gsize i = 0; i < G_N_ELEMENTS (temporal); i++) {
    g_assert_cmpint (ppx_quant_policy_format (temporal[i], PPX_QUANT_INT8), ==, PPX_QUANT_INT8);
    g_assert_cmpint (ppx_quant_policy_format (temporal[i], PPX_QUANT_INT4), ==, PPX_QUANT_INT4);
  }
  for (gsize i = 0; i < G_N_ELEMENTS (int8_in_int4_model); i++) {
    g_assert_cmpint (ppx_quant_policy_format (int8_in_int4_model[i], PPX_QUANT_INT8), ==, PPX_QUANT_INT8);
    g_assert_cmpint (ppx_quant_policy_format (int8_in_int4_model[i], PPX_QUANT_INT4), ==, PPX_QUANT_INT8);
    g_assert_true (ppx_quant_policy_selects (int8_in_int4_model[i], PPX_QUANT_INT4));
    g_assert_false (ppx_quant_policy_selects (int8_in_int4_model[i], PPX_QUANT_BF16));
    g_assert_false (ppx_quant_policy_selects (int8_in_int4_model[i], PPX_QUANT_AUTO));
  }
  for (gsize i = 0; i < G_N_ELEMENTS (kept); i++) {
    g_assert_cmpint (ppx_quant_policy_format (kept[i], PPX_QUANT_INT8), ==, PPX_QUANT_BF16);
    g_assert_cmpint (ppx_quant_policy_format (kept[i], PPX_QUANT_INT4), ==, PPX_QUANT_BF16);
    g_assert_false (ppx_quant_policy_selects (kept[i], PPX_QUANT_INT8));
  }
  g_assert_cmpint (ppx_quant_policy_format (NULL, PPX_QUANT_INT8), ==, PPX_QUANT_BF16);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/quant/sizes", test_sizes);
  g_test_add_func ("/quant/q4-layout", test_q4_layout);
  g_test_add_func ("/quant/q4-round-trip", test_q4_round_trip);
  g_test_add_func ("/quant/q8-round-trip", test_q8_round_trip);
  g_test_add_func ("/quant/degenerate-values", test_degenerate_values);
  g_test_add_func ("/quant/linear-vs-float-path", test_linear_vs_float_path);
  g_test_add_func ("/quant/error-bounds", test_error_bounds);
  g_test_add_func ("/quant/policy", test_policy);
  return g_test_run ();
}
