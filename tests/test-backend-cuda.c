/* The CUDA backend against the CPU backend (the numerical reference), op by op, on random inputs of
 * awkward sizes; then the golden conversation end to end on the GPU. Exits 77 without a GPU.
 *
 * Tolerances: ops whose GPU and CPU arithmetic is the same sequence of f32 operations (embedding
 * gathers, RVQ decode, copies, fills, teacher forcing, greedy sampling, RVQ codes) must match exactly.
 * Everything else (sums in another order, the device's expf/erff/sinf, fused multiply-adds) must agree to
 * max |gpu - cpu| <= TOL * max(1, max |cpu|) with TOL = 1e-5. Temperature sampling must give the CPU's
 * token for every (seed, frame, stream) on logits whose top-k probabilities are well separated.
 *
 * Attention runs over f32, bf16 and fp8 caches; each format is compared with the CPU backend using the same
 * format (the stored values decode exactly on both, so TOL applies), and the caches must be the same bytes.
 * The tensor-core linear layers keep x in 16 bits (hi/lo bf16), ~2e-6 relative: within the same TOL. They must
 * also give every row of a batched call bit for bit as a one-row call (/cuda/linear-batch).
 *
 * `test-backend-cuda --bench [int4|int8|bf16|f32 [ROWSxCOLS]]` instead times linear layers of the temporal
 * transformer's shapes at M = 1, 8, 32, 64 (CUDA graphs, GPU time) and prints weight bandwidth and TFLOP/s,
 * then (without a format) the attention benchmark; `--bench-attention` runs only that: T = 1 attention at cap = context = 3000 with 32 heads of 128 for
 * M = 1, 8, 32, 64 sessions per KV format, time per layer and GB/s of KV read. `--bench-conv` times every conv call
 * of a Mimi frame (the real encoder and decoder shapes) at M = 1, 8, 32, 64 with the direct kernels and the
 * planned implicit-GEMM path, and the SEANet sums; `--bench-conv-sweep [M ...]` times every tile configuration
 * and leaf count of the GEMM path on those shapes (planner tuning). */
#include <math.h>

#include "../kernels/backend-cuda.h"
#include "golden-model.h"
#include "manifest.h"
#include "personaplex-internal.h"
#include "quant.h"

#define TOL 1e-5

static PpxBackend *cpu, *gpu;
static GRand *rng;

/* ---- paired tensors: the same data on both backends ---- */

typedef struct {
  PpxTensor *c, *g;
  gsize n;
  PpxTensorType type;
} Pair;

static Pair
pair_new (PpxTensorType type, gsize n, const void *host)
{
  g_autoptr (GError) err = NULL;
  Pair p = {ppx_tensor_new (cpu, type, n, &err), NULL, n, type};
  g_assert_no_error (err);
  p.g = ppx_tensor_new (gpu, type, n, &err);
  g_assert_no_error (err);
  if (host) {
    ppx_tensor_upload (p.c, 0, host, n);
    ppx_tensor_upload (p.g, 0, host, n);
  }
  return p;
}

static void
pair_free (Pair *p)
{
  ppx_tensor_free (p->c);
  ppx_tensor_free (p->g);
}

static float *
random_floats (gsize n, double lo, double hi)
{
  float *v = g_new (float, MAX (n, 1));
  for (gsize i = 0; i < n; i++)
    v[i] = (float) g_rand_double_range (rng, lo, hi);
  return v;
}

static Pair
pair_random (gsize n)
{
  g_autofree float *v = random_floats (n, -1.0, 1.0);
  return pair_new (PPX_TENSOR_F32, n, v);
}

static Pair
pair_i32 (gsize n, const int32_t *v)
{
  return pair_new (PPX_TENSOR_I32, n, v);
}

/* max |gpu - cpu| over the pair, and max |cpu| in *scale. NaN anywhere counts as an infinite error. */
static double
pair_err (const Pair *p, double *scale)
{
  g_autofree float *a = g_new (float, MAX (p->n, 1)), *b = g_new (float, MAX (p->n, 1));
  ppx_tensor_download (p->c, 0, a, p->n);
  ppx_tensor_download (p->g, 0, b, p->n);
  double err = 0.0, sc = 0.0;
  for (gsize i = 0; i < p->n; i++) {
    double d = fabs ((double) a[i] - (double) b[i]);
    if (isnan (d))
      d = INFINITY;
    err = MAX (err, d);
    sc = MAX (sc, fabs ((double) a[i]));
  }
  if (scale)
    *scale = sc;
  return err;
}

static void
assert_close (const Pair *p, double tol, const char *what)
{
  double scale;
  double err = pair_err (p, &scale);
  if (g_test_verbose ())
    g_printerr ("  %-40s max abs err %.3g (scale %.3g)\n", what, err, scale);
  if (!(err <= tol * MAX (1.0, scale)))
    g_error ("%s: max abs err %.3g > %.3g (scale %.3g)", what, err, tol * MAX (1.0, scale), scale);
}

static void
assert_same (const Pair *p, const char *what)
{
  g_autofree int32_t *a = g_new (int32_t, MAX (p->n, 1)), *b = g_new (int32_t, MAX (p->n, 1));
  ppx_tensor_download (p->c, 0, a, p->n);
  ppx_tensor_download (p->g, 0, b, p->n);
  for (gsize i = 0; i < p->n; i++)
    if (a[i] != b[i])
      g_error ("%s: element %" G_GSIZE_FORMAT " differs: cpu %d (0x%08x), gpu %d (0x%08x)", what, i, a[i],
               (unsigned) a[i], b[i], (unsigned) b[i]);
}

/* ---- paired weights ---- */

typedef struct {
  PpxWeight *c, *g;
} WPair;

typedef struct {
  PpxWeightFormat format;
  int group_size;
} Fmt;

/* bf16, int8 and int4 g32/g64/g128 take the tensor-core kernels; f32 and int4 g8/g48 the CUDA-core ones */
static const Fmt formats[] = {{PPX_WFMT_F32, 0},  {PPX_WFMT_BF16, 0},  {PPX_WFMT_INT8, 0},  {PPX_WFMT_INT4, 8},
                              {PPX_WFMT_INT4, 32}, {PPX_WFMT_INT4, 64}, {PPX_WFMT_INT4, 128}, {PPX_WFMT_INT4, 48}};

/* Random weights in `f` (quantized from f32 with the library's quantizers). */
static WPair
wpair_random (Fmt f, int64_t rows, int64_t cols)
{
  g_autofree float *w = random_floats ((gsize) rows * cols, -1.0, 1.0);
  g_autofree void *data = NULL;
  g_autofree float *scales = NULL;
  PpxWeightDesc d = {.format = f.format, .rows = rows, .cols = cols, .group_size = f.group_size};
  switch (f.format) {
    case PPX_WFMT_F32:
      d.data = w;
      break;
    case PPX_WFMT_BF16: {
      uint16_t *b = g_new (uint16_t, (gsize) rows * cols);
      for (gsize i = 0; i < (gsize) rows * cols; i++)
        b[i] = ppx_f32_to_bf16 (w[i]);
      d.data = data = b;
      break;
    }
    case PPX_WFMT_INT8:
      data = g_new (int8_t, (gsize) rows * cols);
      scales = g_new (float, rows);
      ppx_q8_quantize (w, rows, cols, data, scales);
      d.data = data;
      d.scales = scales;
      break;
    case PPX_WFMT_INT4:
      data = g_malloc (ppx_q4_packed_bytes (rows, cols));
      scales = g_new (float, rows * ppx_q4_n_groups (cols, f.group_size));
      ppx_q4_quantize (w, rows, cols, f.group_size, data, scales);
      d.data = data;
      d.scales = scales;
      break;
  }
  g_autoptr (GError) err = NULL;
  WPair p = {ppx_weight_new (cpu, &d, &err), NULL};
  g_assert_no_error (err);
  p.g = ppx_weight_new (gpu, &d, &err);
  g_assert_no_error (err);
  return p;
}

static void
wpair_free (WPair *p)
{
  ppx_weight_free (p->c);
  ppx_weight_free (p->g);
}

static const char *
fmt_name (Fmt f)
{
  static char buf[32];
  if (f.format == PPX_WFMT_INT4)
    g_snprintf (buf, sizeof buf, "int4/g%d", f.group_size);
  else
    g_snprintf (buf, sizeof buf, "%s", ppx_weight_format_name (f.format));
  return buf;
}

/* ---- memory ---- */

static void
test_memory (void)
{
  g_autoptr (GError) err = NULL;
  guint64 before = ppx_backend_allocated_bytes (gpu);
  /* fresh tensors are zero, like the CPU backend's */
  Pair z = pair_new (PPX_TENSOR_F32, 1001, NULL);
  g_assert_cmpuint (ppx_backend_allocated_bytes (gpu), ==, before + 1001 * 4);
  assert_same (&z, "fresh tensor");
  /* fills */
  ppx_tensor_fill (z.c, -2.5f);
  ppx_tensor_fill (z.g, -2.5f);
  assert_same (&z, "fill f32");
  Pair zi = pair_new (PPX_TENSOR_I32, 77, NULL);
  ppx_tensor_fill (zi.c, 13.0f);
  ppx_tensor_fill (zi.g, 13.0f);
  assert_same (&zi, "fill i32");
  /* upload at an offset and views */
  g_autofree float *v = random_floats (300, -5, 5);
  ppx_tensor_upload (z.c, 17, v, 300);
  ppx_tensor_upload (z.g, 17, v, 300);
  assert_same (&z, "upload at offset");
  PpxTensor *vc = ppx_tensor_view (z.c, 100, 50), *vg = ppx_tensor_view (z.g, 100, 50);
  ppx_tensor_fill (vc, 7.0f);
  ppx_tensor_fill (vg, 7.0f);
  ppx_tensor_free (vc);
  ppx_tensor_free (vg);
  assert_same (&z, "fill of a view");
  /* strided copies: between tensors, a single row with ld 0, and overlapping in place (both directions) */
  Pair src = pair_random (37 * 19);
  Pair dst = pair_random (41 * 23);
  ppx_tensor_copy2d (dst.c, 5, 23, src.c, 2, 19, 37, 11);
  ppx_tensor_copy2d (dst.g, 5, 23, src.g, 2, 19, 37, 11);
  assert_same (&dst, "copy2d strided");
  ppx_tensor_copy2d (dst.c, 0, 0, src.c, 0, 0, 1, 37 * 19);
  ppx_tensor_copy2d (dst.g, 0, 0, src.g, 0, 0, 1, 37 * 19);
  assert_same (&dst, "copy2d one row");
  ppx_tensor_copy2d (dst.c, 0, 1, dst.c, 6, 1, 100, 1); /* shift left by 6, as conv histories do */
  ppx_tensor_copy2d (dst.g, 0, 1, dst.g, 6, 1, 100, 1);
  assert_same (&dst, "copy2d overlapping left shift");
  ppx_tensor_copy2d (dst.c, 9, 1, dst.c, 0, 1, 1, 200); /* right shift within one row */
  ppx_tensor_copy2d (dst.g, 9, 1, dst.g, 0, 1, 1, 200);
  assert_same (&dst, "copy2d overlapping right shift");
  ppx_tensor_copy2d (dst.c, 3, 30, dst.c, 0, 30, 20, 25); /* rows of one buffer, disjoint per row */
  ppx_tensor_copy2d (dst.g, 3, 30, dst.g, 0, 30, 20, 25);
  assert_same (&dst, "copy2d overlapping 2d");
  pair_free (&src);
  pair_free (&dst);
  pair_free (&z);
  pair_free (&zi);
  g_assert_cmpuint (ppx_backend_allocated_bytes (gpu), ==, before);
  /* out of device memory is an error, not an abort */
  PpxTensor *huge = ppx_tensor_new (gpu, PPX_TENSOR_F32, (gsize) 1 << 46, &err);
  g_assert_null (huge);
  g_assert_error (err, PPX_ERROR, PPX_ERROR_NOMEM);
  g_printerr ("  out of memory: %s\n", err->message);
  g_clear_error (&err);
  g_assert_cmpuint (ppx_backend_allocated_bytes (gpu), ==, before);
  /* the backend still works after the failed allocation */
  Pair after = pair_random (33);
  assert_same (&after, "after a failed allocation");
  pair_free (&after);
  /* a bad weight format is refused */
  float w[16] = {0};
  PpxWeightDesc d = {.format = PPX_WFMT_INT4, .rows = 2, .cols = 8, .data = w, .scales = w, .group_size = 12};
  g_assert_null (ppx_weight_new (gpu, &d, &err));
  g_assert_error (err, PPX_ERROR, PPX_ERROR_UNSUPPORTED);
}

/* ---- linear and embedding ---- */

/* Outputs that a call must overwrite start as this (finite, so untouched strided gaps compare equal). */
#define POISON -7.7e33f

static void
check_linear (Fmt f, int64_t rows, int64_t cols, int M, gsize ldx, gsize ldy, gboolean accumulate, int64_t slice0,
              int64_t slice_rows)
{
  WPair w = wpair_random (f, rows, cols);
  PpxWeight *wc = w.c, *wg = w.g;
  if (slice_rows > 0) {
    wc = ppx_weight_slice_rows (w.c, slice0, slice_rows);
    wg = ppx_weight_slice_rows (w.g, slice0, slice_rows);
    g_assert_cmpuint (ppx_weight_bytes (wc), ==, ppx_weight_bytes (wg));
  }
  const int64_t out = slice_rows > 0 ? slice_rows : rows;
  const gsize ny = (gsize) (M - 1) * ldy + out;
  Pair x = pair_random ((gsize) (M - 1) * ldx + cols);
  g_autofree float *yv = random_floats (ny, -1.0, 1.0);
  if (!accumulate)
    for (gsize i = 0; i < ny; i++)
      yv[i] = POISON;
  Pair y = pair_new (PPX_TENSOR_F32, ny, yv);
  ppx_op_linear (cpu, wc, x.c, ldx, y.c, ldy, M, accumulate);
  ppx_op_linear (gpu, wg, x.g, ldx, y.g, ldy, M, accumulate);
  g_autofree char *what = g_strdup_printf ("linear %s [%" G_GINT64_FORMAT "x%" G_GINT64_FORMAT "] M=%d ldx=%" G_GSIZE_FORMAT
                                           " ldy=%" G_GSIZE_FORMAT "%s%s", fmt_name (f), out, cols, M, ldx, ldy,
                                           accumulate ? " acc" : "", slice_rows > 0 ? " slice" : "");
  /* outputs against the CPU; the gaps between strided rows (still POISON on the CPU) must be untouched */
  g_autofree float *yc = g_new (float, ny), *yg = g_new (float, ny);
  ppx_tensor_download (y.c, 0, yc, ny);
  ppx_tensor_download (y.g, 0, yg, ny);
  double err = 0.0, scale = 0.0;
  for (gsize i = 0; i < ny; i++) {
    const gboolean gap = i % ldy >= (gsize) out;
    if (gap) {
      if (yg[i] != yc[i])
        g_error ("%s: element %" G_GSIZE_FORMAT " between rows was written (%g, was %g)", what, i, yg[i], yc[i]);
      continue;
    }
    double d = fabs ((double) yc[i] - (double) yg[i]);
    err = MAX (err, isnan (d) ? INFINITY : d);
    scale = MAX (scale, fabs ((double) yc[i]));
  }
  if (g_test_verbose ())
    g_printerr ("  %-58s max abs err %.3g (scale %.3g, rel %.2g)\n", what, err, scale, err / MAX (scale, 1e-30));
  if (!(err <= TOL * MAX (1.0, scale)))
    g_error ("%s: max abs err %.3g > %.3g (scale %.3g)", what, err, TOL * MAX (1.0, scale), scale);
  if (slice_rows > 0) {
    ppx_weight_free (wc);
    ppx_weight_free (wg);
  }
  pair_free (&x);
  pair_free (&y);
  wpair_free (&w);
}

/* (rows, cols): K tails (cols % 128), rows that do not fill a tile, K split into many leaves (few rows, many
 * columns) and into one (34000 rows), x rows over 96 KB */
static const int64_t lin_shapes[][2] = {{37, 53},    {129, 256},  {67, 1000},  {300, 4128},
                                        {2049, 88},  {33, 24640}, {34000, 136}, {1024, 1024}};
/* one kernel configuration per 8, 16, 32 and 64 rows; 70: two launches of up to 64 rows */
static const int lin_ms[] = {1, 2, 3, 7, 8, 9, 16, 24, 32, 33, 64, 70};

static void
test_linear (void)
{
  for (guint i = 0; i < G_N_ELEMENTS (formats); i++) {
    Fmt f = formats[i];
    /* every M on a shape that rotates with the format; odd strides (x rows not 16-byte aligned) on every
     * other call, accumulation on every third */
    for (guint j = 0; j < G_N_ELEMENTS (lin_ms); j++) {
      const int64_t *sh = lin_shapes[(i + j) % G_N_ELEMENTS (lin_shapes)];
      const gboolean strided = j % 2 == 1;
      check_linear (f, sh[0], sh[1], lin_ms[j], (gsize) sh[1] + (strided ? 3 : 0), (gsize) sh[0] + (strided ? 5 : 0),
                    j % 3 == 0, 0, 0);
    }
    check_linear (f, 5, 7, 11, 7, 5, FALSE, 0, 0);
    check_linear (f, 129, 256, 3, 260, 133, TRUE, 0, 0); /* aligned strides */
    check_linear (f, 9, 12800, 1, 12800, 9, FALSE, 0, 0);
    /* leaves longer than the shared-memory ring (the ring wraps; 17 stages, a K tail, two leaves on an
     * H100), at the 8- and 64-row kernels */
    check_linear (f, 20000, 2080, 5, 2080, 20000, TRUE, 0, 0);
    check_linear (f, 20000, 2080, 40, 2083, 20001, FALSE, 0, 0);
    /* row slices (per-step depformer weights) */
    check_linear (f, 96, 128, 3, 128, 32, FALSE, 32, 32);
    check_linear (f, 30, 53, 1, 53, 7, FALSE, 11, 7);
    check_linear (f, 300, 1000, 9, 1000, 100, TRUE, 137, 100);
  }
}

/* Row m of an M-row call is bit for bit the row computed alone (M = 1), for every m: the batched engine's
 * sessions must not depend on who else is in the batch. */
static void
check_linear_rows_exact (Fmt f, int64_t rows, int64_t cols, int M, gboolean accumulate)
{
  WPair w = wpair_random (f, rows, cols);
  g_autoptr (GError) err = NULL;
  g_autofree float *xv = random_floats ((gsize) M * cols, -2.0, 2.0), *y0 = random_floats ((gsize) M * rows, -1, 1);
  g_autofree float *yb = g_new (float, (gsize) M * rows), *y1 = g_new (float, rows);
  PpxTensor *X = ppx_tensor_new (gpu, PPX_TENSOR_F32, (gsize) M * cols, &err);
  PpxTensor *Y = ppx_tensor_new (gpu, PPX_TENSOR_F32, (gsize) M * rows, &err);
  PpxTensor *x1 = ppx_tensor_new (gpu, PPX_TENSOR_F32, cols, &err);
  PpxTensor *t1 = ppx_tensor_new (gpu, PPX_TENSOR_F32, rows, &err);
  g_assert_no_error (err);
  ppx_tensor_upload (X, 0, xv, (gsize) M * cols);
  ppx_tensor_upload (Y, 0, y0, (gsize) M * rows);
  ppx_op_linear (gpu, w.g, X, cols, Y, rows, M, accumulate);
  ppx_tensor_download (Y, 0, yb, (gsize) M * rows);
  for (int m = 0; m < M; m++) {
    ppx_tensor_upload (x1, 0, xv + (gsize) m * cols, cols);
    ppx_tensor_upload (t1, 0, y0 + (gsize) m * rows, rows);
    ppx_op_linear (gpu, w.g, x1, cols, t1, rows, 1, accumulate);
    ppx_tensor_download (t1, 0, y1, rows);
    for (int64_t r = 0; r < rows; r++)
      if (memcmp (&y1[r], &yb[(gsize) m * rows + r], sizeof (float)) != 0)
        g_error ("linear %s [%" G_GINT64_FORMAT "x%" G_GINT64_FORMAT "]%s: row %d of an M=%d call differs from M=1 at "
                 "output %" G_GINT64_FORMAT ": %.9g vs %.9g", fmt_name (f), rows, cols, accumulate ? " acc" : "", m, M,
                 r, yb[(gsize) m * rows + r], y1[r]);
  }
  if (g_test_verbose ())
    g_printerr ("  linear %-8s [%" G_GINT64_FORMAT "x%" G_GINT64_FORMAT "] M=%d%s: every row equals M=1 bit for bit\n",
                fmt_name (f), rows, cols, M, accumulate ? " acc" : "");
  ppx_tensor_free (X);
  ppx_tensor_free (Y);
  ppx_tensor_free (x1);
  ppx_tensor_free (t1);
  wpair_free (&w);
}

static void
test_linear_batch (void)
{
  for (guint i = 0; i < G_N_ELEMENTS (formats); i++) {
    check_linear_rows_exact (formats[i], 129, 1000, 70, FALSE); /* K split into 8 leaves, a K tail */
    check_linear_rows_exact (formats[i], 300, 4128, 33, TRUE);
    check_linear_rows_exact (formats[i], 2049, 88, 9, FALSE);   /* one leaf, tail only */
    check_linear_rows_exact (formats[i], 1024, 1024, 32, TRUE); /* the 17..32-row kernels */
    check_linear_rows_exact (formats[i], 34000, 256, 64, TRUE); /* one leaf of two full stages */
    check_linear_rows_exact (formats[i], 20000, 2080, 64, FALSE); /* leaves longer than the ring */
  }
}

/* ppx_op_rmsnorm_linear: the fused kernel (M <= 4, tensor-core weights) gives the bits of rmsnorm then linear
 * on the GPU, for every format (f32 and int4 g8/g48 take the two-op path), K tails and leaf splits, with and
 * without accumulation; and the CPU's result within TOL. */
static void
check_rmsnorm_linear (Fmt f, int64_t rows, int64_t cols, int M, gboolean accumulate)
{
  WPair w = wpair_random (f, rows, cols);
  Pair x = pair_random ((gsize) M * cols), alpha = pair_random ((gsize) cols), h = pair_random ((gsize) M * cols);
  Pair y = pair_random ((gsize) M * rows), h2 = pair_random ((gsize) M * cols);
  g_autofree float *y0 = g_new (float, (gsize) M * rows);
  ppx_tensor_download (y.g, 0, y0, (gsize) M * rows);
  Pair y2 = pair_new (PPX_TENSOR_F32, (gsize) M * rows, y0);
  ppx_op_rmsnorm_linear (cpu, x.c, alpha.c, 1e-8f, h.c, w.c, y.c, rows, M, accumulate);
  ppx_op_rmsnorm_linear (gpu, x.g, alpha.g, 1e-8f, h.g, w.g, y.g, rows, M, accumulate);
  ppx_op_rmsnorm (gpu, x.g, alpha.g, h2.g, M, cols, 1e-8f);
  ppx_op_linear (gpu, w.g, h2.g, cols, y2.g, rows, M, accumulate);
  g_autofree char *what = g_strdup_printf ("rmsnorm+linear %s %" G_GINT64_FORMAT "x%" G_GINT64_FORMAT " M=%d%s",
                                           fmt_name (f), rows, cols, M, accumulate ? " acc" : "");
  assert_close (&y, TOL, what);
  g_autofree float *a = g_new (float, (gsize) M * rows), *b = g_new (float, (gsize) M * rows);
  ppx_tensor_download (y.g, 0, a, (gsize) M * rows);
  ppx_tensor_download (y2.g, 0, b, (gsize) M * rows);
  for (gsize i = 0; i < (gsize) M * rows; i++)
    if (memcmp (&a[i], &b[i], sizeof (float)) != 0)
      g_error ("%s: element %" G_GSIZE_FORMAT " is %.9g fused, %.9g as rmsnorm then linear", what, i, a[i], b[i]);
  pair_free (&x);
  pair_free (&alpha);
  pair_free (&h);
  pair_free (&h2);
  pair_free (&y);
  pair_free (&y2);
  wpair_free (&w);
}

static void
test_rmsnorm_linear (void)
{
  for (guint i = 0; i < G_N_ELEMENTS (formats); i++) {
    check_rmsnorm_linear (formats[i], 129, 1000, 1, FALSE); /* a K tail, K split into leaves */
    check_rmsnorm_linear (formats[i], 1024, 1024, 3, TRUE); /* the depformer's out_proj shape */
    check_rmsnorm_linear (formats[i], 300, 4128, 4, FALSE); /* the most rows fused */
    check_rmsnorm_linear (formats[i], 200, 512, 5, TRUE);   /* more: the two-op path */
  }
}

/* ppx_op_silu_gate_linear: the fused kernel (M <= 8, tensor-core weights, cols a multiple of 4) gives the bits of
 * silu_gate then linear on the GPU, for every format, K tails and leaf splits, with and without accumulation; and
 * the CPU's result within TOL. */
static void
check_silu_gate_linear (Fmt f, int64_t rows, int64_t cols, int M, gboolean accumulate)
{
  WPair w = wpair_random (f, rows, cols);
  Pair h = pair_random ((gsize) M * 2 * cols), u = pair_random ((gsize) M * cols), u2 = pair_random ((gsize) M * cols);
  Pair y = pair_random ((gsize) M * rows);
  g_autofree float *y0 = g_new (float, (gsize) M * rows);
  ppx_tensor_download (y.g, 0, y0, (gsize) M * rows);
  Pair y2 = pair_new (PPX_TENSOR_F32, (gsize) M * rows, y0);
  ppx_op_silu_gate_linear (cpu, h.c, u.c, w.c, y.c, rows, M, accumulate);
  ppx_op_silu_gate_linear (gpu, h.g, u.g, w.g, y.g, rows, M, accumulate);
  ppx_op_silu_gate (gpu, h.g, u2.g, M, cols);
  ppx_op_linear (gpu, w.g, u2.g, cols, y2.g, rows, M, accumulate);
  g_autofree char *what = g_strdup_printf ("silu_gate+linear %s %" G_GINT64_FORMAT "x%" G_GINT64_FORMAT " M=%d%s",
                                           fmt_name (f), rows, cols, M, accumulate ? " acc" : "");
  assert_close (&y, TOL, what);
  g_autofree float *a = g_new (float, (gsize) M * rows), *b = g_new (float, (gsize) M * rows);
  ppx_tensor_download (y.g, 0, a, (gsize) M * rows);
  ppx_tensor_download (y2.g, 0, b, (gsize) M * rows);
  for (gsize i = 0; i < (gsize) M * rows; i++)
    if (memcmp (&a[i], &b[i], sizeof (float)) != 0)
      g_error ("%s: element %" G_GSIZE_FORMAT " is %.9g fused, %.9g as silu_gate then linear", what, i, a[i], b[i]);
  pair_free (&h);
  pair_free (&u);
  pair_free (&u2);
  pair_free (&y);
  pair_free (&y2);
  wpair_free (&w);
}

static void
test_silu_gate_linear (void)
{
  ppx_backend_cuda_fuse_gate (1); /* off by default until this test has passed on a GPU */
  for (guint i = 0; i < G_N_ELEMENTS (formats); i++) {
    check_silu_gate_linear (formats[i], 129, 1000, 1, FALSE);  /* a K tail, K split into leaves */
    check_silu_gate_linear (formats[i], 1024, 2816, 5, TRUE);  /* the depformer's linear_out shape */
    check_silu_gate_linear (formats[i], 300, 4128, 8, FALSE);  /* the most rows fused */
    check_silu_gate_linear (formats[i], 200, 512, 9, TRUE);    /* more: the two-op path */
    check_silu_gate_linear (formats[i], 64, 998, 2, TRUE);     /* cols not a multiple of 4: the two-op path */
  }
  ppx_backend_cuda_fuse_gate (-1);
}

static void
test_embed (void)
{
  for (guint i = 0; i < G_N_ELEMENTS (formats); i++) {
    Fmt f = formats[i];
    /* int4: a repacked 128-column block (the tensor-core layout) and a tail */
    const int64_t rows = 41, cols = f.format == PPX_WFMT_INT4 ? 200 : 57;
    WPair w = wpair_random (f, rows, cols);
    const int M = 5, stride = 3;
    int32_t ids[15] = {4, 40, -1, 0, 7, 3, -1, 9, 41, 2, 1, 40, 1000, 5, 6};
    Pair id = pair_i32 (15, ids);
    for (int acc = 0; acc < 2; acc++)
      for (int index = 0; index < stride; index++) {
        Pair out = pair_random ((gsize) M * cols);
        ppx_op_embed (cpu, w.c, id.c, index, stride, out.c, M, acc);
        ppx_op_embed (gpu, w.g, id.g, index, stride, out.g, M, acc);
        g_autofree char *what = g_strdup_printf ("embed %s index %d%s", fmt_name (f), index, acc ? " acc" : "");
        assert_same (&out, what);
        pair_free (&out);
      }
    pair_free (&id);
    wpair_free (&w);
  }
}

/* ---- elementwise and norms ---- */

static void
test_elementwise (void)
{
  const gsize n = 4099;
  Pair x = pair_random (n);
  const char *names[] = {"elu", "gelu", "silu"};
  for (int a = 0; a < 3; a++) {
    Pair y = pair_random (n);
    ppx_op_act (cpu, (PpxActivation) a, x.c, y.c, n - 2);
    ppx_op_act (gpu, (PpxActivation) a, x.g, y.g, n - 2);
    assert_close (&y, TOL, names[a]);
    pair_free (&y);
  }
  {
    Pair b = pair_random (n), y = pair_random (n);
    ppx_op_add (cpu, x.c, b.c, y.c, n);
    ppx_op_add (gpu, x.g, b.g, y.g, n);
    assert_same (&y, "add");
    /* in place: y = y + b */
    ppx_op_add (cpu, y.c, b.c, y.c, n);
    ppx_op_add (gpu, y.g, b.g, y.g, n);
    assert_same (&y, "add in place");
    pair_free (&b);
    pair_free (&y);
  }
  const gsize rows = 3, D = 1031, H = 517;
  {
    Pair xs = pair_random (rows * D), g = pair_random (D), y = pair_random (rows * D);
    ppx_op_add_scaled (cpu, xs.c, g.c, y.c, rows, D);
    ppx_op_add_scaled (gpu, xs.g, g.g, y.g, rows, D);
    assert_close (&y, TOL, "add_scaled");
    pair_free (&xs);
    pair_free (&g);
    pair_free (&y);
  }
  {
    Pair h = pair_random (rows * 2 * H), u = pair_random (rows * H);
    ppx_op_silu_gate (cpu, h.c, u.c, rows, H);
    ppx_op_silu_gate (gpu, h.g, u.g, rows, H);
    assert_close (&u, TOL, "silu_gate");
    pair_free (&h);
    pair_free (&u);
  }
  const gsize Ds[] = {1, 33, 1031, 4096};
  for (guint i = 0; i < G_N_ELEMENTS (Ds); i++) {
    const gsize d = Ds[i];
    Pair xs = pair_random (rows * d), al = pair_random (d), be = pair_random (d), y = pair_random (rows * d);
    ppx_op_rmsnorm (cpu, xs.c, al.c, y.c, rows, d, 1e-8f);
    ppx_op_rmsnorm (gpu, xs.g, al.g, y.g, rows, d, 1e-8f);
    g_autofree char *w1 = g_strdup_printf ("rmsnorm D=%" G_GSIZE_FORMAT, d);
    assert_close (&y, TOL, w1);
    ppx_op_layernorm (cpu, xs.c, al.c, be.c, y.c, rows, d, 1e-5f);
    ppx_op_layernorm (gpu, xs.g, al.g, be.g, y.g, rows, d, 1e-5f);
    g_autofree char *w2 = g_strdup_printf ("layernorm D=%" G_GSIZE_FORMAT, d);
    assert_close (&y, TOL, w2);
    pair_free (&xs);
    pair_free (&al);
    pair_free (&be);
    pair_free (&y);
  }
  {
    const gsize M = 3, A = 37, B = 70;
    Pair xs = pair_random (M * A * B), y = pair_random (M * A * B);
    ppx_op_transpose (cpu, xs.c, y.c, M, A, B);
    ppx_op_transpose (gpu, xs.g, y.g, M, A, B);
    assert_same (&y, "transpose");
    pair_free (&xs);
    pair_free (&y);
  }
  pair_free (&x);
}

/* ---- attention ---- */

static void
test_rope (void)
{
  const int H = 3, Dh = 16;
  const gsize rows = 5;
  int32_t pos[5] = {0, 1, 7, 250, 2999};
  Pair p = pair_i32 (rows, pos);
  Pair qkv = pair_random (rows * 3 * H * Dh);
  ppx_op_rope (cpu, qkv.c, p.c, rows, H, Dh, 10000.0f);
  ppx_op_rope (gpu, qkv.g, p.g, rows, H, Dh, 10000.0f);
  assert_close (&qkv, TOL, "rope");
  pair_free (&p);
  pair_free (&qkv);
}

/* ---- attention over f32 / bf16 / fp8 caches ---- */

static const PpxKvFormat kv_formats[] = {PPX_KV_F32, PPX_KV_BF16, PPX_KV_FP8};

typedef struct {
  PpxTensor *c, *g;
  gsize bytes;
} CachePair;

/* A cache on both backends with the same raw contents: zeros, or (fill) random stored rows of the
 * format (f32/bf16 values in [-1, 1]; e4m3 codes other than NaN with scales (0.5..1.5)/448). */
static CachePair
cache_pair (PpxKvFormat fmt, int n_slots, int cap, int H, int Dh, gboolean fill)
{
  g_autoptr (GError) err = NULL;
  CachePair p = {ppx_kv_cache_new (cpu, fmt, n_slots, cap, H, Dh, &err), NULL, 0};
  g_assert_no_error (err);
  p.g = ppx_kv_cache_new (gpu, fmt, n_slots, cap, H, Dh, &err);
  g_assert_no_error (err);
  p.bytes = ppx_tensor_bytes (p.c);
  g_assert_cmpuint (p.bytes, ==, ppx_tensor_bytes (p.g));
  g_assert_cmpuint (p.bytes, ==, ppx_kv_cache_bytes (fmt, n_slots, cap, H, Dh));
  if (fill) {
    /* a random pattern of a prime number of values, tiled (generating gigabytes one by one is slow) */
    const gsize n = ppx_tensor_numel (p.c), es = fmt == PPX_KV_F32 ? 4 : fmt == PPX_KV_FP8 ? 1 : 2;
    const gsize period = MIN (n, 1000003);
    g_autofree guint8 *raw = g_malloc0 (p.bytes);
    for (gsize i = 0; i < period; i++) {
      const float v = (float) g_rand_double_range (rng, -1.0, 1.0);
      if (fmt == PPX_KV_F32) {
        memcpy (raw + 4 * i, &v, 4);
      } else if (fmt == PPX_KV_FP8) {
        guint8 c = (guint8) g_rand_int_range (rng, 0, 256);
        raw[i] = (c & 0x7f) == 0x7f ? 0x7e : c;
      } else {
        const uint16_t b = ppx_f32_to_bf16 (v);
        memcpy (raw + 2 * i, &b, 2);
      }
    }
    for (gsize i = period; i < n; i += period)
      memcpy (raw + i * es, raw, MIN (period, n - i) * es);
    if (fmt == PPX_KV_FP8) {
      float *sc = (float *) (raw + ((n + 15) & ~(gsize) 15));
      for (gsize i = 0; i < (gsize) n_slots * cap * H; i++)
        sc[i] = (float) g_rand_double_range (rng, 0.5, 1.5) / 448.0f;
    }
    ppx_tensor_upload_raw (p.c, raw);
    ppx_tensor_upload_raw (p.g, raw);
  }
  return p;
}

static void
cache_pair_assert_same (const CachePair *p, const char *what)
{
  g_autofree guint8 *a = g_malloc (p->bytes), *b = g_malloc (p->bytes);
  ppx_tensor_download_raw (p->c, a);
  ppx_tensor_download_raw (p->g, b);
  if (memcmp (a, b, p->bytes) == 0)
    return;
  for (gsize i = 0; i < p->bytes; i++)
    if (a[i] != b[i])
      g_error ("%s: byte %" G_GSIZE_FORMAT " of %" G_GSIZE_FORMAT " differs: cpu 0x%02x, gpu 0x%02x", what, i, p->bytes,
               a[i], b[i]);
}

static void
cache_pair_free (CachePair *p)
{
  ppx_tensor_free (p->c);
  ppx_tensor_free (p->g);
}

/* `calls` calls of M sessions x T rows; session m's rows are at start + stride*m + c*T + t (start past
 * cap: the rings have wrapped and hold random earlier rows when `fill`). Sessions use slots out of order.
 * The outputs must agree to TOL (same format on both backends: the stored values decode exactly, only the
 * order of the f32 sums differs) and the caches, scales included, must be identical bytes. */
static void
check_attention (PpxKvFormat fmt, int M, int T, int H, int Dh, int cap, int context, int calls, int start,
                 int stride, gboolean fill)
{
  const int n_slots = M; /* reversed: session m uses slot M - 1 - m */
  const gsize HD = (gsize) H * Dh;
  CachePair kc = cache_pair (fmt, n_slots, cap, H, Dh, fill), vc = cache_pair (fmt, n_slots, cap, H, Dh, fill);
  g_autofree int32_t *slots = g_new (int32_t, M);
  for (int m = 0; m < M; m++)
    slots[m] = n_slots - 1 - m;
  Pair sl = pair_i32 (M, slots);
  g_autofree int32_t *pos = g_new (int32_t, M * T);
  g_autofree char *shape = g_strdup_printf ("attention %s M=%d T=%d H=%d Dh=%d cap=%d ctx=%d", ppx_kv_format_name (fmt),
                                            M, T, H, Dh, cap, context);
  for (int c = 0; c < calls; c++) {
    for (int m = 0; m < M; m++)
      for (int t = 0; t < T; t++)
        pos[m * T + t] = start + stride * m + c * T + t;
    Pair p = pair_i32 ((gsize) M * T, pos);
    Pair qkv = pair_random ((gsize) M * T * 3 * HD);
    Pair out = pair_random ((gsize) M * T * HD);
    ppx_op_attention (cpu, qkv.c, p.c, sl.c, kc.c, vc.c, out.c, M, T, H, Dh, cap, context);
    ppx_op_attention (gpu, qkv.g, p.g, sl.g, kc.g, vc.g, out.g, M, T, H, Dh, cap, context);
    g_autofree char *what = g_strdup_printf ("%s call %d", shape, c);
    assert_close (&out, TOL, what);
    pair_free (&p);
    pair_free (&qkv);
    pair_free (&out);
  }
  g_autofree char *kwhat = g_strdup_printf ("%s key cache", shape), *vwhat = g_strdup_printf ("%s value cache", shape);
  cache_pair_assert_same (&kc, kwhat);
  cache_pair_assert_same (&vc, vwhat);
  cache_pair_free (&kc);
  cache_pair_free (&vc);
  pair_free (&sl);
}

static void
test_attention (void)
{
  for (guint f = 0; f < G_N_ELEMENTS (kv_formats); f++) {
    const PpxKvFormat k = kv_formats[f];
    check_attention (k, 2, 2, 3, 16, 8, 6, 7, 0, 3, FALSE);      /* T = 2, context < cap, wraps */
    check_attention (k, 3, 1, 2, 64, 5, 100, 9, 0, 3, FALSE);    /* context > cap: the ring limits the window */
    check_attention (k, 1, 3, 4, 128, 16, 16, 8, 0, 3, FALSE);
    check_attention (k, 2, 1, 1, 24, 250, 250, 3, 0, 3, FALSE);  /* Dh not a power of two: the scalar path */
    check_attention (k, 2, 4, 2, 24, 3, 3, 3, 0, 3, FALSE);      /* T > cap: the earliest rows see no key */
    check_attention (k, 3, 2, 2, 256, 40, 40, 3, 37, 5, TRUE);   /* Dh 256 */
    check_attention (k, 2, 1, 1, 8, 20, 20, 25, 0, 1, FALSE);    /* Dh below 16: the scalar path */
    /* the golden tiny model (dim 64, 4 heads, context 20; depformer 2 heads of 16, cap 16) */
    check_attention (k, 3, 1, 4, 16, 20, 20, 30, 0, 2, FALSE);
    check_attention (k, 3, 1, 2, 16, 16, G_MAXINT, 20, 0, 2, FALSE);
    /* the 7B's depformer (16 heads of 64, cap dep_q = 16, unlimited context) for 8 sessions */
    check_attention (k, 8, 1, 16, 64, 16, G_MAXINT, 20, 0, 1, FALSE);
    /* Mimi's transformer (8 heads of 64, context 250, 2 frames a call), wrapped rings */
    check_attention (k, 4, 2, 8, 64, 250, 250, 3, 1000, 77, TRUE);
    /* the 7B's temporal transformer: 32 heads of 128, cap and context 3000, full wrapped rings */
    check_attention (k, 1, 1, 32, 128, 3000, 3000, 2, 7001, 0, TRUE);
    check_attention (k, 8, 1, 32, 128, 3000, 3000, 1, 3500, 611, TRUE);
    check_attention (k, 16, 1, 32, 128, 3000, 3000, 1, 5999, 97, TRUE);
    check_attention (k, 64, 1, 32, 128, 3000, 3000, 1, 2999, 131, TRUE);
    check_attention (k, 2, 3, 32, 128, 3000, 3000, 2, 2997, 1, TRUE); /* T = 3 across the ring's end */
    check_attention (k, 3, 1, 32, 128, 3000, 1000, 2, 4000, 50, TRUE); /* context below cap */
    check_attention (k, 2, 1, 32, 128, 3000, 3000, 2, 10, 700, TRUE);  /* rings not yet full */
  }
}

/* ---- convolutions ---- */

typedef struct {
  int M, Cin, Cout, K, stride, dilation, groups;
  gboolean bias;
} ConvCase;

static void
check_conv1d (ConvCase c, gboolean streaming, const int *lins, int calls)
{
  const int keff = (c.K - 1) * c.dilation + 1;
  const int P = streaming ? keff - c.stride : 0;
  Pair w = pair_random ((gsize) c.Cout * (c.Cin / c.groups) * c.K);
  Pair b = pair_random (c.Cout);
  Pair prev = pair_random ((gsize) c.M * c.Cin * MAX (P, 1));
  for (int call = 0; call < calls; call++) {
    const int Lin = lins[call];
    const int L = P + Lin;
    const int Lout = L >= keff ? (L - keff) / c.stride + 1 : 0;
    Pair x = pair_random ((gsize) c.M * c.Cin * Lin);
    Pair y = pair_random ((gsize) c.M * c.Cout * MAX (Lout, 1));
    ppx_op_conv1d (cpu, w.c, c.bias ? b.c : NULL, x.c, streaming ? prev.c : NULL, y.c, c.M, c.Cin, c.Cout, c.K, Lin,
                   c.stride, c.dilation, c.groups);
    ppx_op_conv1d (gpu, w.g, c.bias ? b.g : NULL, x.g, streaming ? prev.g : NULL, y.g, c.M, c.Cin, c.Cout, c.K, Lin,
                   c.stride, c.dilation, c.groups);
    g_autofree char *what = g_strdup_printf ("conv1d M%d Cin%d Cout%d K%d s%d d%d g%d%s Lin %d%s", c.M, c.Cin, c.Cout,
                                             c.K, c.stride, c.dilation, c.groups, c.bias ? " bias" : "", Lin,
                                             streaming ? " streaming" : "");
    assert_close (&y, TOL, what);
    if (streaming)
      assert_same (&prev, "conv1d history");
    pair_free (&x);
    pair_free (&y);
  }
  pair_free (&w);
  pair_free (&b);
  pair_free (&prev);
}

static void
test_conv1d (void)
{
  const ConvCase cases[] = {
    {2, 6, 4, 7, 1, 1, 1, TRUE},    /* Mimi's first conv shape, small */
    {1, 8, 8, 3, 1, 3, 1, TRUE},    /* dilated residual conv */
    {2, 6, 9, 4, 2, 1, 1, FALSE},   /* strided downsampling, no bias */
    {3, 6, 4, 5, 1, 2, 2, TRUE},    /* groups */
    {2, 5, 5, 3, 1, 1, 5, TRUE},    /* depthwise */
    {1, 16, 12, 8, 4, 1, 4, TRUE},  /* strided grouped */
    {2, 3, 2, 1, 1, 1, 1, TRUE},    /* 1x1 */
  };
  const int lins_stream[] = {8, 4, 12, 1, 2, 3, 16};
  const int lins_plain[] = {20, 31};
  for (guint i = 0; i < G_N_ELEMENTS (cases); i++) {
    ConvCase c = cases[i];
    int lins[7];
    for (int k = 0; k < 7; k++)
      lins[k] = lins_stream[k] * c.stride; /* streaming frames are whole strides */
    check_conv1d (c, TRUE, lins, 7);
    check_conv1d (c, FALSE, lins_plain, 2);
  }
}

static void
check_conv_transpose (ConvCase c, gboolean streaming, const int *Ts, int calls)
{
  const int tail = c.K - c.stride;
  Pair w = pair_random ((gsize) c.Cin * (c.Cout / c.groups) * c.K);
  Pair b = pair_random (c.Cout);
  Pair partial = pair_random ((gsize) c.M * c.Cout * MAX (tail, 1));
  for (int call = 0; call < calls; call++) {
    const int T = Ts[call];
    const int Ly = streaming ? c.stride * T : c.stride * (T - 1) + c.K;
    Pair x = pair_random ((gsize) c.M * c.Cin * T);
    Pair y = pair_random ((gsize) c.M * c.Cout * Ly);
    ppx_op_conv_transpose1d (cpu, w.c, c.bias ? b.c : NULL, x.c, streaming ? partial.c : NULL, y.c, c.M, c.Cin, c.Cout,
                             c.K, T, c.stride, c.groups);
    ppx_op_conv_transpose1d (gpu, w.g, c.bias ? b.g : NULL, x.g, streaming ? partial.g : NULL, y.g, c.M, c.Cin, c.Cout,
                             c.K, T, c.stride, c.groups);
    g_autofree char *what = g_strdup_printf ("conv_transpose1d M%d Cin%d Cout%d K%d s%d g%d%s T %d%s", c.M, c.Cin,
                                             c.Cout, c.K, c.stride, c.groups, c.bias ? " bias" : "", T,
                                             streaming ? " streaming" : "");
    assert_close (&y, TOL, what);
    if (streaming)
      assert_close (&partial, TOL, "conv_transpose1d partial");
    pair_free (&x);
    pair_free (&y);
  }
  pair_free (&w);
  pair_free (&b);
  pair_free (&partial);
}

static void
test_conv_transpose1d (void)
{
  const ConvCase cases[] = {
    {2, 4, 6, 8, 4, 1, 1, TRUE},   /* K = 2 * stride, Mimi's upsampling */
    {1, 6, 4, 5, 2, 1, 2, FALSE},  /* groups, K odd, tail 3 > stride */
    {2, 5, 5, 4, 2, 1, 5, TRUE},   /* depthwise (Mimi's upsample of the latent) */
    {1, 3, 2, 7, 2, 1, 1, TRUE},   /* tail 5 > stride * T for T = 1, 2 */
    {3, 2, 3, 3, 3, 1, 1, TRUE},   /* K = stride: no tail */
  };
  const int Ts[] = {1, 2, 3, 1, 4, 2};
  for (guint i = 0; i < G_N_ELEMENTS (cases); i++) {
    check_conv_transpose (cases[i], cases[i].K > cases[i].stride, Ts, 6);
    check_conv_transpose (cases[i], FALSE, Ts + 2, 2);
  }
}

/* ---- Mimi's SEANet convolutions: the real layer shapes ---- */

typedef struct {
  char name[48];
  gboolean tr, streaming, bias;
  int Cin, Cout, K, stride, dil, L, groups; /* L: input length (conv1d) or frames T (transposed) per call */
  PpxActivation act;                        /* the ELU fused into the conv (ppx_seanet_forward) */
  gboolean res;                             /* residual added in place (y = y + conv) */
} MimiConv;

/* The conv calls of one 80 ms frame of the default (PersonaPlex) Mimi, in the order ppx_seanet_forward and
 * ppx_mimi_batch_encode/decode make them: the SEANet layers (a residual block is two convs; the ELUs are fused
 * into the convs after them, the residual add into the block's second conv), then the encoder's downsampling
 * conv or, first in the decoder, the depthwise upsampling transposed conv. */
static int
mimi_convs (gboolean decoder, MimiConv *out, int max)
{
  PpxConfig cfg;
  ppx_config_default (&cfg);
  g_autoptr (GError) err = NULL;
  g_assert_true (ppx_config_finish (&cfg, "default", &err));
  const PpxMimiConfig *m = &cfg.mimi;
  PpxSeanetLayer layers[PPX_SEANET_MAX_LAYERS];
  const int n = decoder ? ppx_seanet_decoder_layers (m, layers, PPX_SEANET_MAX_LAYERS)
                        : ppx_seanet_encoder_layers (m, layers, PPX_SEANET_MAX_LAYERS);
  int k = 0, L = decoder ? 2 : m->frame_size;
  PpxActivation pending = PPX_ACT_NONE;
#define ADD(...)                                                                                                     \
  do {                                                                                                               \
    g_assert_cmpint (k, <, max);                                                                                     \
    out[k++] = (MimiConv){__VA_ARGS__};                                                                              \
  } while (0)
  if (decoder)
    ADD (.name = "dec upsample (depthwise)", .tr = TRUE, .streaming = TRUE, .bias = FALSE, .Cin = m->dimension,
         .Cout = m->dimension, .K = 4, .stride = 2, .dil = 1, .L = 1, .groups = m->dimension, .act = PPX_ACT_NONE);
  for (int i = 0; i < n; i++) {
    const PpxSeanetLayer *l = &layers[i];
    const char *p = decoder ? "dec" : "enc";
    switch (l->kind) {
      case PPX_SEANET_CONV:
        ADD (.tr = FALSE, .streaming = (l->kernel - 1) * l->dilation + 1 - l->stride > 0, .bias = TRUE, .Cin = l->c_in,
             .Cout = l->c_out, .K = l->kernel, .stride = l->stride, .dil = l->dilation, .L = L, .groups = 1,
             .act = pending);
        pending = PPX_ACT_NONE;
        g_snprintf (out[k - 1].name, sizeof out[k - 1].name, "%s.%d conv", p, l->index);
        L /= l->stride;
        break;
      case PPX_SEANET_CONVTR:
        ADD (.tr = TRUE, .streaming = l->kernel > l->stride, .bias = TRUE, .Cin = l->c_in, .Cout = l->c_out,
             .K = l->kernel, .stride = l->stride, .dil = 1, .L = L, .groups = 1, .act = pending);
        pending = PPX_ACT_NONE;
        g_snprintf (out[k - 1].name, sizeof out[k - 1].name, "%s.%d convtr", p, l->index);
        L *= l->stride;
        break;
      case PPX_SEANET_RESBLOCK:
        ADD (.tr = FALSE, .streaming = (l->kernel - 1) * l->dilation > 0, .bias = TRUE, .Cin = l->c_in,
             .Cout = l->hidden, .K = l->kernel, .stride = 1, .dil = l->dilation, .L = L, .groups = 1,
             .act = PPX_ACT_ELU);
        g_snprintf (out[k - 1].name, sizeof out[k - 1].name, "%s.%d res conv1", p, l->index);
        ADD (.tr = FALSE, .streaming = FALSE, .bias = TRUE, .Cin = l->hidden, .Cout = l->c_in, .K = 1, .stride = 1,
             .dil = 1, .L = L, .groups = 1, .act = PPX_ACT_ELU, .res = TRUE);
        g_snprintf (out[k - 1].name, sizeof out[k - 1].name, "%s.%d res conv2", p, l->index);
        break;
      case PPX_SEANET_ELU:
        pending = PPX_ACT_ELU;
        break;
    }
  }
  if (!decoder)
    ADD (.name = "enc downsample", .tr = FALSE, .streaming = TRUE, .bias = FALSE, .Cin = m->dimension,
         .Cout = m->dimension, .K = 4, .stride = 2, .dil = 1, .L = L, .groups = 1, .act = PPX_ACT_NONE);
#undef ADD
  return k;
}

static gsize
mc_state_row (const MimiConv *c)
{
  if (!c->streaming)
    return 0;
  return c->tr ? (gsize) c->Cout * (c->K - c->stride) : (gsize) c->Cin * ((c->K - 1) * c->dil + 1 - c->stride);
}

static gsize
mc_out_row (const MimiConv *c)
{
  if (c->tr)
    return (gsize) c->Cout * (c->streaming ? c->stride * c->L : c->stride * (c->L - 1) + c->K);
  const int keff = (c->K - 1) * c->dil + 1, P = c->streaming ? keff - c->stride : 0;
  return (gsize) c->Cout * ((P + c->L - keff) / c->stride + 1);
}

static gsize
mc_w_elems (const MimiConv *c)
{
  return c->tr ? (gsize) c->Cin * (c->Cout / c->groups) * c->K : (gsize) c->Cout * (c->Cin / c->groups) * c->K;
}

/* One call as ppx_seanet_forward makes it (act on x; with a residual, y = y + conv). */
static void
mc_run (PpxBackend *be, const MimiConv *c, const PpxTensor *w, const PpxTensor *b, const PpxTensor *x, PpxTensor *st,
        PpxTensor *y, int M)
{
  if (c->tr)
    ppx_op_conv_transpose1d_act (be, c->act, w, c->bias ? b : NULL, x, c->streaming ? st : NULL, y, M, c->Cin, c->Cout,
                                 c->K, c->L, c->stride, c->groups);
  else
    ppx_op_conv1d_fused (be, c->act, w, c->bias ? b : NULL, x, c->streaming ? st : NULL, c->res ? y : NULL, y, M,
                         c->Cin, c->Cout, c->K, c->L, c->stride, c->dil, c->groups);
}

/* Weights like a trained layer's scale (1/sqrt(fan-in)), so outputs stay O(1) as in the model. */
static Pair
mc_weights (const MimiConv *c)
{
  const double a = 1.0 / sqrt ((double) (c->tr ? c->Cin / c->groups * ((c->K + c->stride - 1) / c->stride)
                                              : c->Cin / c->groups * c->K));
  g_autofree float *v = random_floats (mc_w_elems (c), -a, a);
  return pair_new (PPX_TENSOR_F32, mc_w_elems (c), v);
}

static void
mc_describe (const MimiConv *c, int M, char *buf, gsize n)
{
  g_snprintf (buf, n, "%-24s %s %4d -> %-4d K%-2d s%d d%d %s %4d%s%s%s", c->name, c->tr ? "convtr" : "conv  ",
              c->Cin, c->Cout, c->K, c->stride, c->dil, c->tr ? "T" : "L", c->L, c->act != PPX_ACT_NONE ? " elu" : "",
              c->res ? " +res" : "", M > 0 ? "" : "");
}

/* Every Mimi shape at M = 1, 3, 8 against the CPU, streaming over 3 calls (outputs and state each call);
 * then at M = 3 one call per tile configuration and per forced split (1, 2, 3 leaves and the planned one),
 * each from the same state, so every kernel variant and both combine paths meet every shape. */
static void
check_mimi_conv (const MimiConv *c, int M)
{
  const gsize sr = mc_state_row (c), orow = mc_out_row (c), irow = (gsize) c->Cin * c->L;
  Pair w = mc_weights (c), b = pair_random (c->Cout), st = pair_random ((gsize) M * MAX (sr, 1));
  char desc[160];
  mc_describe (c, M, desc, sizeof desc);
  for (int call = 0; call < 3; call++) {
    Pair x = pair_random ((gsize) M * irow), y = pair_random ((gsize) M * orow);
    mc_run (cpu, c, w.c, b.c, x.c, st.c, y.c, M);
    mc_run (gpu, c, w.g, b.g, x.g, st.g, y.g, M);
    g_autofree char *what = g_strdup_printf ("%s M%d call %d", desc, M, call);
    assert_close (&y, TOL, what);
    /* the history holds copies of x, exact; of act(x) when the ELU is fused (the device's expm1f: rounding) */
    if (c->streaming && (c->tr || c->act != PPX_ACT_NONE))
      assert_close (&st, TOL, c->tr ? "  state (partial)" : "  state (history of act(x))");
    else if (c->streaming)
      assert_same (&st, "  state (history)");
    pair_free (&x);
    pair_free (&y);
  }
  pair_free (&w);
  pair_free (&b);
  pair_free (&st);
}

static void
check_mimi_conv_variants (const MimiConv *c)
{
  const int M = 3;
  const gsize sr = mc_state_row (c), orow = mc_out_row (c), irow = (gsize) c->Cin * c->L;
  Pair w = mc_weights (c), b = pair_random (c->Cout), x = pair_random ((gsize) M * irow);
  Pair st = pair_random ((gsize) M * MAX (sr, 1)), y = pair_random ((gsize) M * orow);
  g_autofree float *st0 = g_new (float, (gsize) M * MAX (sr, 1)), *y0 = g_new (float, (gsize) M * orow);
  ppx_tensor_download (st.c, 0, st0, (gsize) M * MAX (sr, 1));
  ppx_tensor_download (y.c, 0, y0, (gsize) M * orow); /* the residual of a residual conv, else overwritten */
  mc_run (cpu, c, w.c, b.c, x.c, st.c, y.c, M);
  char desc[160];
  mc_describe (c, M, desc, sizeof desc);
  const int splits[] = {0, 1, 2, 3};
  double worst = 0;
  int n = 0;
  for (int cfg = -2; cfg < ppx_backend_cuda_conv_n_configs (); cfg++) {
    for (guint s = 0; s < G_N_ELEMENTS (splits); s++) {
      if (cfg == -1 || (cfg == -2 && s > 0))
        continue;
      int pc, ps, tr, tc;
      g_assert_true (ppx_backend_cuda_conv_plan (gpu, c->tr, M, c->Cin, c->Cout, c->K, c->L, c->stride, c->dil,
                                                 c->groups, c->streaming, cfg, splits[s], &pc, &ps, &tr, &tc));
      if (cfg >= 0 && pc != cfg)
        continue; /* not a configuration for this shape (or the direct kernels only) */
      ppx_tensor_upload (st.g, 0, st0, (gsize) M * MAX (sr, 1));
      if (c->res)
        ppx_tensor_upload (y.g, 0, y0, (gsize) M * orow);
      else
        ppx_tensor_fill (y.g, -7.7e33f);
      ppx_backend_cuda_conv_force (cfg, splits[s]);
      mc_run (gpu, c, w.g, b.g, x.g, st.g, y.g, M);
      ppx_backend_cuda_conv_force (-1, 0);
      g_autofree char *what = g_strdup_printf ("%s M%d cfg %d (%dx%d) split %d", desc, M, cfg, tr, tc, ps);
      double scale;
      const double err = pair_err (&y, &scale);
      worst = MAX (worst, err / MAX (1.0, scale));
      if (!(err <= TOL * MAX (1.0, scale)))
        g_error ("%s: max abs err %.3g (scale %.3g)", what, err, scale);
      if (c->streaming && (c->tr || c->act != PPX_ACT_NONE)) {
        const double es = pair_err (&st, &scale);
        if (!(es <= TOL * MAX (1.0, scale)))
          g_error ("%s: partial max abs err %.3g (scale %.3g)", what, es, scale);
      } else if (c->streaming) {
        assert_same (&st, what);
      }
      n++;
    }
  }
  if (g_test_verbose ())
    g_printerr ("  %-60s %2d variants, worst err %.3g relative\n", desc, n, worst);
  pair_free (&w);
  pair_free (&b);
  pair_free (&x);
  pair_free (&st);
  pair_free (&y);
}

static void
test_conv_mimi (void)
{
  MimiConv convs[64];
  for (int dec = 0; dec < 2; dec++) {
    const int n = mimi_convs (dec, convs, G_N_ELEMENTS (convs));
    for (int i = 0; i < n; i++) {
      const int Ms[] = {1, 3, 8};
      for (guint j = 0; j < G_N_ELEMENTS (Ms); j++)
        check_mimi_conv (&convs[i], Ms[j]);
      check_mimi_conv_variants (&convs[i]);
    }
  }
}

/* Batch independence: each row of an M-row call (rows row0 .. row0+M-1 of 8 sessions' data, 2 calls with
 * state) is bit for bit the row computed alone (M = 1, its own state), for the planned path and with the
 * one-row calls forced onto another tile configuration (`alt_cfg`, -1: planned). */
static void
check_mimi_batch (const MimiConv *c, int M, int row0, int alt_cfg)
{
  const int calls = 2;
  const gsize sr = MAX (mc_state_row (c), 1), orow = mc_out_row (c), irow = (gsize) c->Cin * c->L;
  g_autoptr (GError) err = NULL;
  Pair w = mc_weights (c), b = pair_random (c->Cout);
  g_autofree float *xs = random_floats ((gsize) calls * 8 * irow, -1, 1), *st = random_floats (8 * sr, -1, 1);
  g_autofree float *rs = random_floats ((gsize) calls * 8 * orow, -1, 1); /* residuals (y before the call) */
  g_autofree float *yb = g_new (float, (gsize) calls * M * orow), *sb = g_new (float, (gsize) M * sr);
  g_autofree float *y1 = g_new (float, orow), *s1 = g_new (float, sr);
  PpxTensor *x = ppx_tensor_new (gpu, PPX_TENSOR_F32, (gsize) M * irow, &err);
  PpxTensor *y = ppx_tensor_new (gpu, PPX_TENSOR_F32, (gsize) M * orow, &err);
  PpxTensor *s = ppx_tensor_new (gpu, PPX_TENSOR_F32, (gsize) M * sr, &err);
  g_assert_no_error (err);
  ppx_tensor_upload (s, 0, st + (gsize) row0 * sr, (gsize) M * sr);
  for (int k = 0; k < calls; k++) {
    ppx_tensor_upload (x, 0, xs + ((gsize) k * 8 + row0) * irow, (gsize) M * irow);
    ppx_tensor_upload (y, 0, rs + ((gsize) k * 8 + row0) * orow, (gsize) M * orow);
    mc_run (gpu, c, w.g, b.g, x, s, y, M);
    ppx_tensor_download (y, 0, yb + (gsize) k * M * orow, (gsize) M * orow);
  }
  ppx_tensor_download (s, 0, sb, (gsize) M * sr);
  char desc[160];
  mc_describe (c, M, desc, sizeof desc);
  for (int m = 0; m < M; m++) {
    ppx_tensor_upload (s, 0, st + (gsize) (row0 + m) * sr, sr);
    ppx_backend_cuda_conv_force (alt_cfg, 0);
    for (int k = 0; k < calls; k++) {
      ppx_tensor_upload (x, 0, xs + ((gsize) k * 8 + row0 + m) * irow, irow);
      ppx_tensor_upload (y, 0, rs + ((gsize) k * 8 + row0 + m) * orow, orow);
      mc_run (gpu, c, w.g, b.g, x, s, y, 1);
      ppx_tensor_download (y, 0, y1, orow);
      if (memcmp (y1, yb + ((gsize) k * M + m) * orow, orow * sizeof (float)) != 0)
        g_error ("%s: row %d of an M = %d call (call %d) differs from the row alone (one-row cfg %d)", desc, m, M, k,
                 alt_cfg);
    }
    ppx_backend_cuda_conv_force (-1, 0);
    ppx_tensor_download (s, 0, s1, sr);
    if (c->streaming && memcmp (s1, sb + (gsize) m * sr, sr * sizeof (float)) != 0)
      g_error ("%s: the state of row %d of an M = %d call differs from the row alone", desc, m, M);
  }
  if (g_test_verbose ())
    g_printerr ("  %-60s M%d rows %d..%d: every row bit for bit the one-row call (cfg %d)\n", desc, M, row0,
                row0 + M - 1, alt_cfg);
  ppx_tensor_free (x);
  ppx_tensor_free (y);
  ppx_tensor_free (s);
  pair_free (&w);
  pair_free (&b);
}

static void
test_conv_batch (void)
{
  MimiConv convs[64];
  int turn = 0;
  for (int dec = 0; dec < 2; dec++) {
    const int n = mimi_convs (dec, convs, G_N_ELEMENTS (convs));
    for (int i = 0; i < n; i++) {
      check_mimi_batch (&convs[i], 8, 0, -1);
      check_mimi_batch (&convs[i], 5, 3, turn++ % ppx_backend_cuda_conv_n_configs ());
    }
  }
}

/* ---- RVQ ---- */

/* RVQ encode of M rows against the CPU: codebook 0's entries `a` and `b` are identical and nearest to row
 * 0's residual (the first must win, across the GPU's chunks of 16 entries when they lie in different ones);
 * then every row encoded alone (M = 1) must give the same codes and residual bits as in the batch. */
static void
check_vq (int M, int ncb, int bins, int dim, int a, int b)
{
  const int stride = ncb + 2, off = 1;
  g_autofree float *cb = random_floats ((gsize) ncb * bins * dim, -1, 1);
  g_autofree float *r0 = random_floats ((gsize) M * dim, -1, 1);
  for (int d = 0; d < dim; d++) {
    cb[(gsize) b * dim + d] = cb[(gsize) a * dim + d];
    r0[d] = cb[(gsize) a * dim + d] + 0.001f * (float) (d % 3);
  }
  Pair E = pair_new (PPX_TENSOR_F32, (gsize) ncb * bins * dim, cb);
  Pair r = pair_new (PPX_TENSOR_F32, (gsize) M * dim, r0);
  g_autofree int32_t *init = g_new0 (int32_t, M * stride);
  for (int i = 0; i < M * stride; i++)
    init[i] = -7;
  Pair codes = pair_i32 ((gsize) M * stride, init);
  ppx_op_vq_encode (cpu, E.c, r.c, codes.c, off, stride, M, ncb, bins, dim);
  ppx_op_vq_encode (gpu, E.g, r.g, codes.g, off, stride, M, ncb, bins, dim);
  assert_same (&codes, "vq_encode codes");
  assert_close (&r, TOL, "vq_encode residual");
  int32_t first;
  ppx_tensor_download (codes.g, off, &first, 1);
  g_assert_cmpint (first, ==, a);
  g_autofree float *rb = g_new (float, (gsize) M * dim);
  g_autofree int32_t *cbat = g_new (int32_t, (gsize) M * stride);
  ppx_tensor_download (r.g, 0, rb, (gsize) M * dim);
  ppx_tensor_download (codes.g, 0, cbat, (gsize) M * stride);
  for (int m = 0; m < M; m++) {
    Pair r1 = pair_new (PPX_TENSOR_F32, dim, r0 + (gsize) m * dim);
    Pair c1 = pair_i32 (stride, init);
    ppx_op_vq_encode (gpu, E.g, r1.g, c1.g, off, stride, 1, ncb, bins, dim);
    g_autofree float *ra = g_new (float, dim);
    g_autofree int32_t *ca = g_new (int32_t, stride);
    ppx_tensor_download (r1.g, 0, ra, dim);
    ppx_tensor_download (c1.g, 0, ca, stride);
    g_assert_cmpmem (ca, stride * sizeof (int32_t), cbat + (gsize) m * stride, stride * sizeof (int32_t));
    g_assert_cmpmem (ra, dim * sizeof (float), rb + (gsize) m * dim, dim * sizeof (float));
    pair_free (&r1);
    pair_free (&c1);
  }
  pair_free (&E);
  pair_free (&r);
  pair_free (&codes);
}

static void
test_vq (void)
{
  check_vq (3, 4, 37, 24, 5, 9);      /* both tied entries in the first chunk */
  check_vq (2, 1, 37, 24, 3, 20);     /* one codebook; the tie across the first two chunks */
  check_vq (4, 2, 40, 33, 17, 33);    /* the tie within a later chunk, odd dim */
  check_vq (5, 7, 2048, 256, 600, 1900); /* Mimi's acoustic quantizer: 7 codebooks of 2048 x 256 */
  const int M = 3, ncb = 4, bins = 37, dim = 24, stride = 6, off = 1;
  g_autofree float *cb = random_floats ((gsize) ncb * bins * dim, -1, 1);
  Pair E = pair_new (PPX_TENSOR_F32, (gsize) ncb * bins * dim, cb);
  /* decode, with out-of-range codes clamped */
  int32_t dc[18] = {0, 36, 5, 40, -3, 2, 1, 1, 1, 1, 1, 1, 36, 0, 12, 7, 9, 99};
  Pair dcodes = pair_i32 (18, dc);
  Pair y = pair_random ((gsize) M * dim);
  ppx_op_vq_decode (cpu, E.c, dcodes.c, off, stride, y.c, M, ncb, bins, dim);
  ppx_op_vq_decode (gpu, E.g, dcodes.g, off, stride, y.g, M, ncb, bins, dim);
  assert_same (&y, "vq_decode");
  pair_free (&E);
  pair_free (&dcodes);
  pair_free (&y);
  /* Mimi's shape (7 codebooks of 2048 x 256, the entries spread over many blocks per row): the CPU's codes, and
   * a nearest entry duplicated across two blocks (the first wins); every row of an M = 5 call equals the row
   * alone, bit for bit */
  {
    const int Mb = 5, nc = 7, nb = 2048, dm = 256;
    g_autofree float *cbb = random_floats ((gsize) nc * nb * dm, -0.1, 0.1);
    g_autofree float *rr = random_floats ((gsize) Mb * dm, -0.3, 0.3);
    for (int d = 0; d < dm; d++) {
      cbb[(gsize) 1900 * dm + d] = cbb[(gsize) 100 * dm + d];
      rr[(gsize) 2 * dm + d] = cbb[(gsize) 100 * dm + d] + 0.0005f * (float) (d % 5);
    }
    Pair Eb = pair_new (PPX_TENSOR_F32, (gsize) nc * nb * dm, cbb);
    Pair rb = pair_new (PPX_TENSOR_F32, (gsize) Mb * dm, rr);
    g_autofree int32_t *z = g_new0 (int32_t, Mb * 8);
    Pair cb8 = pair_i32 ((gsize) Mb * 8, z);
    ppx_op_vq_encode (cpu, Eb.c, rb.c, cb8.c, 1, 8, Mb, nc, nb, dm);
    ppx_op_vq_encode (gpu, Eb.g, rb.g, cb8.g, 1, 8, Mb, nc, nb, dm);
    assert_same (&cb8, "vq_encode codes (7 x 2048 x 256)");
    assert_close (&rb, TOL, "vq_encode residual (7 x 2048 x 256)");
    int32_t c2;
    ppx_tensor_download (cb8.g, 2 * 8 + 1, &c2, 1);
    g_assert_cmpint (c2, ==, 100);
    g_autofree int32_t *all = g_new (int32_t, Mb * 8);
    g_autofree float *rall = g_new (float, (gsize) Mb * dm);
    ppx_tensor_download (cb8.g, 0, all, Mb * 8);
    ppx_tensor_download (rb.g, 0, rall, (gsize) Mb * dm);
    g_autoptr (GError) err = NULL;
    PpxTensor *r1 = ppx_tensor_new (gpu, PPX_TENSOR_F32, dm, &err), *c1 = ppx_tensor_new (gpu, PPX_TENSOR_I32, 8, &err);
    g_assert_no_error (err);
    for (int m = 0; m < Mb; m++) {
      int32_t one[8] = {0};
      float rone[256];
      ppx_tensor_upload (r1, 0, rr + (gsize) m * dm, dm);
      ppx_tensor_upload (c1, 0, one, 8);
      ppx_op_vq_encode (gpu, Eb.g, r1, c1, 1, 8, 1, nc, nb, dm);
      ppx_tensor_download (c1, 0, one, 8);
      ppx_tensor_download (r1, 0, rone, dm);
      if (memcmp (one + 1, all + m * 8 + 1, 7 * sizeof (int32_t)) != 0 ||
          memcmp (rone, rall + (gsize) m * dm, dm * sizeof (float)) != 0)
        g_error ("vq_encode: row %d of an M = %d call differs from the row alone", m, Mb);
    }
    ppx_tensor_free (r1);
    ppx_tensor_free (c1);
    pair_free (&Eb);
    pair_free (&rb);
    pair_free (&cb8);
  }
}

/* ---- sampling and teacher forcing ---- */

/* Logits that are a random permutation of evenly spaced values: no two probabilities within rounding. */
static float *
separated_logits (int M, int V, double spacing)
{
  float *l = g_new (float, (gsize) M * V);
  for (int m = 0; m < M; m++) {
    float *row = l + (gsize) m * V;
    for (int i = 0; i < V; i++)
      row[i] = (float) ((i - V / 2) * spacing);
    for (int i = V - 1; i > 0; i--) {
      int j = g_rand_int_range (rng, 0, i + 1);
      float t = row[i];
      row[i] = row[j];
      row[j] = t;
    }
  }
  return l;
}

/* Sampling parameters of M rows: row m uses (temp, topk) for every stream, its own seed and frame. */
static Pair
sample_params (int M, int d, float temp, int topk)
{
  g_autofree uint32_t *st = g_new (uint32_t, PPX_SAMPLE_PARAMS * (gsize) M);
  for (int m = 0; m < M; m++) {
    guint64 seed = g_rand_int (rng) | ((guint64) g_rand_int (rng) << 32), frame = (guint64) d * 977 + m;
    ppx_sample_params_set (st + (gsize) m * PPX_SAMPLE_PARAMS, seed, frame, temp, topk, temp, topk);
  }
  return pair_new (PPX_TENSOR_I32, PPX_SAMPLE_PARAMS * (gsize) M, st);
}

static void
check_sample (int M, int V, float temp, int topk, double spacing, int draws)
{
  g_autofree float *l = separated_logits (M, V, spacing);
  Pair logits = pair_new (PPX_TENSOR_F32, (gsize) M * V, l);
  const int stride = 5, off = 2;
  Pair tok = pair_i32 ((gsize) M * stride, NULL);
  int mismatches = 0;
  for (int d = 0; d < draws; d++) {
    Pair r = sample_params (M, d, temp, topk);
    const int stream = d % 17;
    ppx_op_sample (cpu, logits.c, V, tok.c, off, stride, r.c, stream, M);
    ppx_op_sample (gpu, logits.g, V, tok.g, off, stride, r.g, stream, M);
    g_autofree int32_t *a = g_new (int32_t, M * stride), *b = g_new (int32_t, M * stride);
    ppx_tensor_download (tok.c, 0, a, M * stride);
    ppx_tensor_download (tok.g, 0, b, M * stride);
    mismatches += memcmp (a, b, M * stride * sizeof (int32_t)) != 0;
    pair_free (&r);
  }
  if (g_test_verbose ())
    g_printerr ("  sample M=%d V=%d temp %.2f topk %d: %d draws, %d mismatches\n", M, V, temp, topk, draws, mismatches);
  if (mismatches)
    g_error ("sample M=%d V=%d temp %.2f topk %d: %d of %d draws differ from the CPU", M, V, temp, topk, mismatches,
             draws);
  pair_free (&logits);
  pair_free (&tok);
}

/* One launch over rows with different parameters (greedy, top-k, whole vocabulary; text and audio
 * parameters different) gives the CPU's per-row draws. */
static void
check_sample_mixed (void)
{
  const int M = 6, V = 2048, stride = 3;
  g_autofree float *l = separated_logits (M, V, 0.01);
  Pair logits = pair_new (PPX_TENSOR_F32, (gsize) M * V, l);
  Pair tok = pair_i32 ((gsize) M * stride, NULL);
  const float temps[6] = {0.0f, 0.8f, 0.7f, 1.0f, 0.9f, 0.0f};
  const int topks[6] = {250, 250, 25, 0, 1, 25};
  for (int d = 0; d < 20; d++) {
    uint32_t st[6 * PPX_SAMPLE_PARAMS];
    for (int m = 0; m < M; m++)
      ppx_sample_params_set (st + m * PPX_SAMPLE_PARAMS, 77 + m, (guint64) d * 31 + m, temps[m], topks[m],
                             temps[(m + 2) % M], topks[(m + 2) % M]);
    Pair r = pair_new (PPX_TENSOR_I32, (gsize) M * PPX_SAMPLE_PARAMS, st);
    const int stream = d % 3;
    ppx_op_sample (cpu, logits.c, V, tok.c, 1, stride, r.c, stream, M);
    ppx_op_sample (gpu, logits.g, V, tok.g, 1, stride, r.g, stream, M);
    assert_same (&tok, "sample, per-row parameters");
    pair_free (&r);
  }
  pair_free (&logits);
  pair_free (&tok);
}

static void
test_sample (void)
{
  /* greedy, with ties (first index) and NaNs (a NaN at 0 wins on the CPU; later NaNs never do) */
  const int V = 2049;
  g_autofree float *l = random_floats ((gsize) 4 * V, -3, 3);
  l[100] = l[1700] = 10.0f;                         /* row 0: tie */
  l[V + 0] = NAN;                                   /* row 1: NaN at 0 */
  l[2 * V + 5] = NAN, l[2 * V + 2000] = 20.0f;      /* row 2: NaN before the max */
  l[3 * V + 2048] = 30.0f, l[3 * V + 2047] = NAN;   /* row 3: max at the end */
  Pair logits = pair_new (PPX_TENSOR_F32, (gsize) 4 * V, l);
  Pair tok = pair_i32 (4 * 3, NULL);
  Pair r = sample_params (4, 0, 0.0f, 250);
  ppx_op_sample (cpu, logits.c, V, tok.c, 1, 3, r.c, 0, 4);
  ppx_op_sample (gpu, logits.g, V, tok.g, 1, 3, r.g, 0, 4);
  assert_same (&tok, "greedy");
  int32_t t[12];
  ppx_tensor_download (tok.g, 0, t, 12);
  g_assert_cmpint (t[1], ==, 100);
  g_assert_cmpint (t[4], ==, 0);
  g_assert_cmpint (t[7], ==, 2000);
  g_assert_cmpint (t[10], ==, 2048);
  pair_free (&r);
  r = sample_params (4, 0, 0.8f, 1);
  ppx_op_sample (cpu, logits.c, V, tok.c, 0, 3, r.c, 0, 4); /* top-1 is greedy */
  ppx_op_sample (gpu, logits.g, V, tok.g, 0, 3, r.g, 0, 4);
  assert_same (&tok, "top-1");
  pair_free (&logits);
  pair_free (&tok);
  pair_free (&r);
  /* temperature + top-k: the CPU's draw for every (seed, frame, stream) */
  check_sample (3, 2048, 0.8f, 250, 0.01, 40);  /* depformer audio */
  check_sample (1, 32000, 0.7f, 25, 0.001, 30); /* text */
  check_sample (2, 37, 1.0f, 0, 0.05, 60);      /* k = V (topk 0) */
  check_sample (2, 37, 1.3f, 100, 0.05, 60);    /* k > V */
  check_sample (3, 1000, 0.9f, 2, 0.02, 60);
  check_sample (1, 8000, 1.0f, 0, 0.001, 3);    /* all of a large vocabulary */
  check_sample (2, 3000, 0.9f, 1024, 0.002, 10); /* the most candidates kept in shared memory */
  check_sample (1, 4000, 1.0f, 1500, 0.001, 5);  /* one more: the candidates in global memory */
  check_sample_mixed ();
}

static void
test_force_tokens (void)
{
  int32_t tk[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  int32_t f[8] = {-1, 40, 41, -1, -1, 42, 43, -5};
  Pair t = pair_i32 (12, tk), fo = pair_i32 (8, f);
  ppx_op_force_tokens (cpu, t.c, 1, 3, fo.c, 1, 2, 4);
  ppx_op_force_tokens (gpu, t.g, 1, 3, fo.g, 1, 2, 4);
  assert_same (&t, "force_tokens");
  pair_free (&t);
  pair_free (&fo);
}

/* ---- end to end: the golden conversation on the GPU ---- */

static double
rel_err (const float *a, const float *b, gsize n)
{
  double num = 0, den = 0;
  for (gsize i = 0; i < n; i++) {
    num = MAX (num, fabs ((double) a[i] - b[i]));
    den = MAX (den, fabs ((double) b[i]));
  }
  return den > 0 ? num / den : num;
}

/* ---- programmatic dependent launch ---- */

/* A chain of dependent ops shaped like depformer layers (x += W_out silu_gate(W_in rmsnorm(x)), int8 and
 * int4 weights, two rows): each kernel reads what the one before it wrote, so a kernel that ran ahead of
 * its wait would read stale data. With programmatic dependent launch allowed, op by op and replayed as a
 * graph, the result must be the same bits as with it off, and the CPU's to TOL. */
static void
pdl_chain (PpxBackend *be, PpxTensor *x, PpxTensor *h, PpxTensor *g, PpxTensor *u, PpxTensor *alpha,
           PpxWeight *const *w_in, PpxWeight *const *w_out, int layers, int M, int D, int H)
{
  for (int l = 0; l < layers; l++) {
    ppx_op_rmsnorm (be, x, alpha, h, M, D, 1e-5f);
    ppx_op_linear (be, w_in[l & 1], h, D, g, 2 * H, M, FALSE);
    ppx_op_silu_gate (be, g, u, M, H);
    ppx_op_linear (be, w_out[l & 1], u, H, x, D, M, TRUE);
  }
}

static void
test_pdl_chain (void)
{
  const int D = 1024, H = 2816, M = 2, layers = 24;
  const gsize nx = (gsize) M * D;
  const Fmt fi[2] = {{PPX_WFMT_INT8, 0}, {PPX_WFMT_INT4, 32}};
  WPair win[2], wout[2];
  for (int i = 0; i < 2; i++) {
    win[i] = wpair_random (fi[i], 2 * H, D);
    wout[i] = wpair_random (fi[i], D, H);
  }
  PpxWeight *cin[2] = {win[0].c, win[1].c}, *cout[2] = {wout[0].c, wout[1].c};
  PpxWeight *gin[2] = {win[0].g, win[1].g}, *gout[2] = {wout[0].g, wout[1].g};
  g_autofree float *x0 = random_floats (nx, -1.0, 1.0);
  g_autofree float *ref = g_new (float, nx), *got = g_new (float, nx);
  Pair x = pair_new (PPX_TENSOR_F32, nx, x0), h = pair_random (nx), gg = pair_random ((gsize) M * 2 * H);
  Pair u = pair_random ((gsize) M * H), alpha = pair_random (D);
  g_autoptr (GError) err = NULL;

  pdl_chain (cpu, x.c, h.c, gg.c, u.c, alpha.c, cin, cout, layers, M, D, H);
  ppx_backend_cuda_pdl_allow (FALSE);
  g_assert_false (ppx_backend_cuda_pdl_active (gpu));
  pdl_chain (gpu, x.g, h.g, gg.g, u.g, alpha.g, gin, gout, layers, M, D, H);
  assert_close (&x, 1e-4, "pdl chain (off) against the CPU");
  ppx_tensor_download (x.g, 0, ref, nx);
  ppx_backend_cuda_pdl_allow (TRUE);
  const gboolean active = ppx_backend_cuda_pdl_active (gpu);
  g_test_message ("programmatic dependent launch %s on this GPU", active ? "active" : "not available");

  for (int rep = 0; rep < 3; rep++) {
    ppx_tensor_upload (x.g, 0, x0, nx);
    pdl_chain (gpu, x.g, h.g, gg.g, u.g, alpha.g, gin, gout, layers, M, D, H);
    ppx_tensor_download (x.g, 0, got, nx);
    g_assert_cmpmem (got, nx * sizeof (float), ref, nx * sizeof (float));
  }
  PpxGraph *graph = NULL;
  for (int attempt = 0; attempt < 3 && !graph; attempt++) {
    g_clear_error (&err);
    g_assert_true (ppx_backend_graph_begin (gpu, &err));
    pdl_chain (gpu, x.g, h.g, gg.g, u.g, alpha.g, gin, gout, layers, M, D, H);
    graph = ppx_backend_graph_end (gpu, &err);
  }
  g_assert_no_error (err);
  g_assert_nonnull (graph);
  for (int rep = 0; rep < 20; rep++) {
    ppx_tensor_upload (x.g, 0, x0, nx);
    g_assert_true (ppx_backend_graph_launch (gpu, graph));
    ppx_tensor_download (x.g, 0, got, nx);
    g_assert_cmpmem (got, nx * sizeof (float), ref, nx * sizeof (float));
  }
  ppx_graph_free (graph);
  pair_free (&x);
  pair_free (&h);
  pair_free (&gg);
  pair_free (&u);
  pair_free (&alpha);
  for (int i = 0; i < 2; i++) {
    wpair_free (&win[i]);
    wpair_free (&wout[i]);
  }
}


static void
test_golden (void)
{
  if (!ppx_test_golden_dir ()) {
    g_test_skip ("golden data not found (set PPX_GOLDEN_DIR)");
    return;
  }
  GoldenModel G;
  golden_model_setup (&G);
  g_autoptr (GError) err = NULL;
  PpxModelParams mp;
  ppx_model_params_init (&mp);
  mp.model_dir = G.dir;
  mp.backend = PPX_BACKEND_CUDA;
  PpxModel *model = ppx_model_load (&mp, &err);
  g_assert_no_error (err);
  g_assert_cmpstr (ppx_model_backend_name (model), ==, "cuda");
  PpxSessionParams p;
  ppx_session_params_init (&p);
  p.voice_prompt = G.voice_wav;
  p.voice_normalize = FALSE;
  p.text_prompt_tokens = G.text_tokens;
  p.n_text_prompt_tokens = G.n_text_tokens;
  p.greedy = TRUE;
  p.kv_format = PPX_KV_F32; /* the golden reference computes in f32 */
  PpxSession *s = ppx_session_new (model, &p, &err);
  g_assert_no_error (err);
  g_assert_cmpint (ppx_session_lmgen (s)->offset, ==, G.prompt_offset);
  ppx_session_lmgen (s)->full_depformer = TRUE; /* every depformer step's logits, to compare them all */
  const PpxStTensor *user = ppx_st_find (G.golden, "user_pcm"), *tok = ppx_st_find (G.golden, "lm_run_out_tokens"),
                    *pcm = ppx_st_find (G.golden, "lm_run_pcm"), *tl = ppx_st_find (G.golden, "lm_run_text_logits"),
                    *al = ppx_st_find (G.golden, "lm_run_audio_logits");
  g_assert_true (user && tok && pcm && tl && al);
  const int fs = ppx_model_frame_size (model), T = (int) tok->shape[0], V = (int) tl->shape[1];
  const int card = (int) al->shape[2], nsteps = (int) al->shape[1];
  const gint64 S = user->shape[0];
  g_autofree float *in = g_new (float, fs), *out = g_new (float, fs), *logit = g_new (float, MAX (V, card));
  int mismatches = 0;
  double pcm_err = 0, text_rel = 0, audio_rel = 0;
  gint64 t0 = g_get_monotonic_time ();
  for (int t = 0; t < T; t++) {
    gint64 n = MIN (fs, S - (gint64) t * fs);
    memset (in, 0, fs * sizeof (float));
    if (n > 0)
      memcpy (in, (const float *) user->data + (gsize) t * fs, n * sizeof (float));
    PpxFrameResult fr;
    g_assert_true (ppx_session_step (s, in, out, &fr, &err));
    g_assert_no_error (err);
    for (int k = 0; k < 17; k++)
      if (fr.tokens[k] != ((const int64_t *) tok->data)[t * 17 + k]) {
        if (mismatches < 8)
          g_printerr ("frame %d stream %d: got %d expected %" G_GINT64_FORMAT "\n", t, k, fr.tokens[k],
                      ((const int64_t *) tok->data)[t * 17 + k]);
        mismatches++;
      }
    for (int i = 0; i < fs; i++)
      pcm_err = MAX (pcm_err, fabs (out[i] - ((const float *) pcm->data)[(gsize) t * fs + i]));
    if (t < tl->shape[0]) {
      ppx_session_text_logits (s, logit);
      text_rel = MAX (text_rel, rel_err (logit, (const float *) tl->data + (gsize) t * V, V));
      for (int st = 0; st < nsteps; st++) {
        ppx_session_audio_logits (s, st, logit);
        audio_rel = MAX (audio_rel, rel_err (logit, (const float *) al->data + ((gsize) t * nsteps + st) * card, card));
      }
    }
  }
  double secs = (g_get_monotonic_time () - t0) / 1e6;
  g_printerr ("  golden on %s: %d frames in %.2f s, %d token mismatches, pcm max abs err %.3g, text logits rel %.3g, "
              "audio logits rel %.3g\n",
              ppx_backend_cuda_device_name (gpu), T, secs, mismatches, pcm_err, text_rel, audio_rel);
  g_assert_cmpint (mismatches, ==, 0);
  g_assert_cmpfloat (pcm_err, <, 1e-4);
  g_assert_cmpfloat (text_rel, <, 1e-3);
  g_assert_cmpfloat (audio_rel, <, 1e-3);
  ppx_session_free (s);
  ppx_model_unref (model);
  golden_model_teardown (&G);
}

/* ---- linear layer speed ---- */

/* xorshift floats in [-1, 1): the bench's matrices are too large for GRand to fill quickly */
static void
fast_random (float *v, gsize n, guint64 seed)
{
  guint64 s = seed * 0x9E3779B97F4A7C15ull + 1;
  for (gsize i = 0; i < n; i++) {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    v[i] = (float) ((double) (s >> 11) * (2.0 / 9007199254740992.0) - 1.0);
  }
}

/* One format and shape: copies of the matrix (enough that they do not fit in L2) cycled through in a CUDA
 * graph; the GPU time per call and, from it, the weight bytes per second and the multiply-adds per second
 * at each M. */
static void
bench_linear (Fmt f, int64_t rows, int64_t cols, const int *Ms, int n_ms)
{
  const gsize n = (gsize) rows * cols;
  g_autofree float *w = g_new (float, n);
  fast_random (w, n, (guint64) rows * 31 + cols);
  g_autofree void *data = NULL;
  g_autofree float *scales = NULL;
  PpxWeightDesc d = {.format = f.format, .rows = rows, .cols = cols, .group_size = f.group_size};
  if (f.format == PPX_WFMT_F32) {
    d.data = w;
  } else if (f.format == PPX_WFMT_BF16) {
    uint16_t *b = g_new (uint16_t, n);
    for (gsize i = 0; i < n; i++)
      b[i] = ppx_f32_to_bf16 (w[i]);
    d.data = data = b;
  } else if (f.format == PPX_WFMT_INT8) {
    data = g_new (int8_t, n);
    scales = g_new (float, rows);
    ppx_q8_quantize (w, rows, cols, data, scales);
    d.data = data;
    d.scales = scales;
  } else {
    data = g_malloc (ppx_q4_packed_bytes (rows, cols));
    scales = g_new (float, rows * ppx_q4_n_groups (cols, f.group_size));
    ppx_q4_quantize (w, rows, cols, f.group_size, data, scales);
    d.data = data;
    d.scales = scales;
  }
  g_autoptr (GError) err = NULL;
  PpxWeight *first = ppx_weight_new (gpu, &d, &err);
  g_assert_no_error (err);
  const guint64 bytes = ppx_weight_bytes (first);
  /* PPX_BENCH_COPIES=1 keeps one copy (L2-resident when it fits: the kernel's speed without HBM) */
  const char *copies_env = g_getenv ("PPX_BENCH_COPIES");
  const int copies = copies_env ? (int) CLAMP (g_ascii_strtoll (copies_env, NULL, 10), 1, 16) : (int) MIN (16, 1 + (512ull << 20) / bytes);
  PpxWeight **ws = g_new (PpxWeight *, copies);
  ws[0] = first;
  for (int i = 1; i < copies; i++) {
    ws[i] = ppx_weight_new (gpu, &d, &err);
    g_assert_no_error (err);
  }
  const int Mmax = Ms[n_ms - 1];
  PpxTensor *x = ppx_tensor_new (gpu, PPX_TENSOR_F32, (gsize) Mmax * cols, &err);
  PpxTensor *y = ppx_tensor_new (gpu, PPX_TENSOR_F32, (gsize) Mmax * rows, &err);
  g_assert_no_error (err);
  g_autofree float *xv = g_new (float, (gsize) Mmax * cols);
  fast_random (xv, (gsize) Mmax * cols, 7);
  ppx_tensor_upload (x, 0, xv, (gsize) Mmax * cols);
  double us1 = 0;
  for (int i = 0; i < n_ms; i++) {
    double us = 0;
    const int calls = copies * MAX (1, 120 / copies);
    if (!ppx_backend_cuda_time_linear (gpu, ws, copies, x, y, Ms[i], calls, 9, &us, &err)) {
      printf ("%-8s %6" G_GINT64_FORMAT " x %-6" G_GINT64_FORMAT " M=%d: %s\n", fmt_name (f), rows, cols, Ms[i],
              err->message);
      g_clear_error (&err);
      continue;
    }
    if (i == 0)
      us1 = us;
    printf ("%-8s %6" G_GINT64_FORMAT " x %-6" G_GINT64_FORMAT " %7.1f MB  M=%-2d %8.2f us %6.0f GB/s %7.1f TFLOP/s  "
            "%5.2fx M=%d\n",
            fmt_name (f), rows, cols, bytes / 1e6, Ms[i], us, bytes / us / 1e3, 2.0 * Ms[i] * n / us / 1e6, us / us1, Ms[0]);
  }
  fflush (stdout);
  for (int i = 0; i < copies; i++)
    ppx_weight_free (ws[i]);
  g_free (ws);
  ppx_tensor_free (x);
  ppx_tensor_free (y);
}

/* ---- attention bandwidth ---- */

/* T = 1 attention at full context (cap 3000, 32 heads of 128, positions past 3000) for M sessions:
 * time per call and the KV bytes it reads (M x 2 x 3000 x 4096 values, plus fp8 scales) per second.
 * Enough copies of the caches (one per layer, as in a frame) that the set is well over the L2. */
static void
bench_attention (PpxKvFormat fmt, int M)
{
  const int H = 32, Dh = 128, cap = 3000;
  const gsize HD = (gsize) H * Dh;
  const guint64 pair_bytes = 2 * ppx_kv_cache_bytes (fmt, M, cap, H, Dh);
  const int copies = (int) MIN (8, 1 + (768ull << 20) / pair_bytes);
  g_autoptr (GError) err = NULL;
  PpxTensor **k = g_new0 (PpxTensor *, copies), **v = g_new0 (PpxTensor *, copies);
  /* caches hold repeated random stored rows (values in [-1, 1]; fp8 codes with scale 1/448) */
  const gsize chunk = 8u << 20;
  g_autofree guint8 *pattern = g_malloc (chunk);
  for (gsize i = 0; i < chunk; i++) {
    if (fmt == PPX_KV_FP8) {
      const guint8 c = (guint8) g_rand_int_range (rng, 0, 256);
      pattern[i] = (c & 0x7f) == 0x7f ? 0x7e : c;
    } else if (fmt == PPX_KV_BF16 && i % 2 == 0) {
      const uint16_t b = ppx_f32_to_bf16 ((float) g_rand_double_range (rng, -1, 1));
      memcpy (pattern + i, &b, 2);
    } else if (fmt == PPX_KV_F32 && i % 4 == 0) {
      const float f = (float) g_rand_double_range (rng, -1, 1);
      memcpy (pattern + i, &f, 4);
    }
  }
  for (int i = 0; i < copies; i++) {
    k[i] = ppx_kv_cache_new (gpu, fmt, M, cap, H, Dh, &err);
    if (k[i])
      v[i] = ppx_kv_cache_new (gpu, fmt, M, cap, H, Dh, &err);
    if (!k[i] || !v[i]) {
      printf ("%-5s M=%-3d does not fit: %s\n", ppx_kv_format_name (fmt), M, err->message);
      for (int j = 0; j <= i; j++) {
        ppx_tensor_free (k[j]);
        ppx_tensor_free (v[j]);
      }
      g_free (k);
      g_free (v);
      return;
    }
    PpxTensor *both[2] = {k[i], v[i]};
    for (int b = 0; b < 2; b++) {
      const gsize n = ppx_tensor_numel (both[b]), es = fmt == PPX_KV_F32 ? 4 : fmt == PPX_KV_FP8 ? 1 : 2;
      for (gsize off = 0; off < n; off += chunk / es)
        ppx_tensor_upload (both[b], off, pattern, MIN (chunk / es, n - off));
    }
  }
  if (fmt == PPX_KV_FP8) { /* scales: upload_raw of a whole cache would need its size in host memory */
    const gsize n = (gsize) M * cap * HD, ns = (gsize) M * H * cap;
    g_autofree guint8 *raw = g_malloc (ppx_kv_cache_bytes (fmt, M, cap, H, Dh));
    memset (raw, 0x38, n); /* 1.0 */
    float *sc = (float *) (raw + ((n + 15) & ~(gsize) 15));
    for (gsize i = 0; i < ns; i++)
      sc[i] = 1.0f / 448.0f;
    for (int i = 0; i < copies; i++) {
      ppx_tensor_upload_raw (k[i], raw);
      ppx_tensor_upload_raw (v[i], raw);
      for (gsize off = 0; off < n; off += chunk) { /* random codes again */
        ppx_tensor_upload (k[i], off, pattern, MIN (chunk, n - off));
        ppx_tensor_upload (v[i], off, pattern, MIN (chunk, n - off));
      }
    }
  }
  g_autofree int32_t *pos = g_new (int32_t, M), *slots = g_new (int32_t, M);
  for (int m = 0; m < M; m++) {
    pos[m] = 6000 + 37 * m;
    slots[m] = m;
  }
  PpxTensor *p = ppx_tensor_new (gpu, PPX_TENSOR_I32, M, &err), *sl = ppx_tensor_new (gpu, PPX_TENSOR_I32, M, &err);
  ppx_tensor_upload (p, 0, pos, M);
  ppx_tensor_upload (sl, 0, slots, M);
  PpxTensor *qkv = ppx_tensor_new (gpu, PPX_TENSOR_F32, (gsize) M * 3 * HD, &err);
  PpxTensor *out = ppx_tensor_new (gpu, PPX_TENSOR_F32, (gsize) M * HD, &err);
  g_autofree float *q = random_floats ((gsize) M * 3 * HD, -1, 1);
  ppx_tensor_upload (qkv, 0, q, (gsize) M * 3 * HD);
  for (int i = 0; i < copies * 2; i++)
    ppx_op_attention (gpu, qkv, p, sl, k[i % copies], v[i % copies], out, M, 1, H, Dh, cap, cap);
  ppx_backend_sync (gpu);
  double best = INFINITY;
  const int iters = copies * MAX (1, 64 / copies);
  for (int rep = 0; rep < 5; rep++) {
    gint64 t0 = g_get_monotonic_time ();
    for (int i = 0; i < iters; i++)
      ppx_op_attention (gpu, qkv, p, sl, k[i % copies], v[i % copies], out, M, 1, H, Dh, cap, cap);
    ppx_backend_sync (gpu);
    best = MIN (best, (double) (g_get_monotonic_time () - t0) / iters);
  }
  const double read = (double) pair_bytes; /* the whole ring of every session is in the window */
  printf ("%-5s M=%-3d %8.1f us/layer %8.2f ms/frame (32 layers) %9.1f MB read %7.0f GB/s  (%d cache copies)\n",
          ppx_kv_format_name (fmt), M, best, best * 32 / 1000, read / 1e6, read / best / 1e3, copies);
  for (int i = 0; i < copies; i++) {
    ppx_tensor_free (k[i]);
    ppx_tensor_free (v[i]);
  }
  g_free (k);
  g_free (v);
  ppx_tensor_free (p);
  ppx_tensor_free (sl);
  ppx_tensor_free (qkv);
  ppx_tensor_free (out);
}

static int
run_bench_attention (void)
{
  printf ("attention, T = 1, cap = context = 3000 (full rings), 32 heads x 128, on %s:\n"
          "best of 5 runs of >= 64 back-to-back calls; GB/s = KV bytes in the window (scales included) / time\n",
          ppx_backend_cuda_device_name (gpu));
  const int Ms[] = {1, 8, 32, 64};
  for (guint f = 0; f < G_N_ELEMENTS (kv_formats); f++)
    for (guint i = 0; i < G_N_ELEMENTS (Ms); i++)
      bench_attention (kv_formats[f], Ms[i]);
  return 0;
}

/* ---- Mimi's SEANet convolutions: speed ---- */

static gboolean
time_conv (const MimiConv *c, int M, int n, const int *cfgs, const int *splits, int calls, int reps, double *us)
{
  g_autoptr (GError) err = NULL;
  if (!ppx_backend_cuda_time_conv (gpu, c->tr, c->act, c->res, M, c->Cin, c->Cout, c->K, c->L, c->stride, c->dil,
                                   c->groups, c->streaming, n, cfgs, splits, calls, reps, us, &err)) {
    printf ("%s M=%d: %s\n", c->name, M, err->message);
    return FALSE;
  }
  return TRUE;
}

/* One plan at one M: a probe sizes the graph to about 20 ms of GPU time (2..20 calls), then 5 replays. */
static double
time_conv_one (const MimiConv *c, int M, int cfg, int split)
{
  double us = 0;
  if (!time_conv (c, M, 1, &cfg, &split, 1, 1, &us))
    return NAN;
  const int calls = (int) CLAMP (20000.0 / MAX (us, 1.0), 2, 20);
  if (!time_conv (c, M, 1, &cfg, &split, calls, 5, &us))
    return NAN;
  return us;
}

/* test-backend-cuda --bench-conv: every conv call of a Mimi frame (encoder, decoder) at M = 1, 8, 32, 64:
 * the direct kernels (old) against the planned path (new), GPU time per call; then the sums. */
static int
run_bench_conv (void)
{
  printf ("Mimi SEANet convs on %s: GPU time per call in us (median of 5 replays of a CUDA graph of 2..20 calls\n"
          "over weight copies that exceed the L2); old = direct kernels, new = planned path "
          "[tile rows x cols / leaves]\n",
          ppx_backend_cuda_device_name (gpu));
  const int Ms[] = {1, 8, 32, 64};
  MimiConv convs[64];
  for (int dec = 0; dec < 2; dec++) {
    const int n = mimi_convs (dec, convs, G_N_ELEMENTS (convs));
    double sum_old[4] = {0}, sum_new[4] = {0};
    printf ("\n%-64s", dec ? "decoder" : "encoder");
    for (guint j = 0; j < G_N_ELEMENTS (Ms); j++) {
      char h[32];
      g_snprintf (h, sizeof h, "M=%d old/new [plan]", Ms[j]);
      printf ("  %-28s", h);
    }
    printf ("\n");
    for (int i = 0; i < n; i++) {
      char desc[160];
      mc_describe (&convs[i], 0, desc, sizeof desc);
      printf ("%-64s", desc);
      for (guint j = 0; j < G_N_ELEMENTS (Ms); j++) {
        const MimiConv *c = &convs[i];
        int pc, ps, tr, tc;
        ppx_backend_cuda_conv_plan (gpu, c->tr, Ms[j], c->Cin, c->Cout, c->K, c->L, c->stride, c->dil, c->groups,
                                    c->streaming, -1, 0, &pc, &ps, &tr, &tc);
        const double o = time_conv_one (c, Ms[j], -2, 0), nw = time_conv_one (c, Ms[j], -1, 0);
        sum_old[j] += o;
        sum_new[j] += nw;
        g_autofree char *plan = pc < 0 ? g_strdup ("direct") : g_strdup_printf ("%dx%d/%d", tr, tc, ps);
        printf ("  %8.1f %7.1f %-11s", o, nw, plan);
      }
      printf ("\n");
      fflush (stdout);
    }
    printf ("%-64s", dec ? "decoder sum (SEANet + upsample)" : "encoder sum (SEANet + downsample)");
    for (guint j = 0; j < G_N_ELEMENTS (Ms); j++) {
      char r[32];
      g_snprintf (r, sizeof r, "%.1fx", sum_old[j] / sum_new[j]);
      printf ("  %8.1f %7.1f %-11s", sum_old[j], sum_new[j], r);
    }
    printf ("\n");
  }
  return 0;
}

/* test-backend-cuda --bench-conv-sweep [M ...]: every tile configuration and leaf count on every GEMM-path Mimi
 * conv (for tuning the planner): lines "sweep NAME M cfg TILE split US" plus the planned choice. */
static int
run_bench_conv_sweep (int argc, char **argv)
{
  int Ms[8] = {1, 8, 64}, nm = 3;
  if (argc > 0) {
    nm = 0;
    for (int i = 0; i < argc && nm < 8; i++)
      Ms[nm++] = atoi (argv[i]);
  }
  printf ("conv sweep on %s (GPU us per call, median of 3 replays of 8 calls)\n", ppx_backend_cuda_device_name (gpu));
  MimiConv convs[64];
  const int ncfg = ppx_backend_cuda_conv_n_configs ();
  for (int dec = 0; dec < 2; dec++) {
    const int n = mimi_convs (dec, convs, G_N_ELEMENTS (convs));
    for (int i = 0; i < n; i++) {
      const MimiConv *c = &convs[i];
      if (c->groups != 1)
        continue;
      for (int j = 0; j < nm; j++) {
        int cfgs[128], splits[128], tile_r[128], tile_c[128], np = 0;
        int pc, ps, tr, tc;
        ppx_backend_cuda_conv_plan (gpu, c->tr, Ms[j], c->Cin, c->Cout, c->K, c->L, c->stride, c->dil, c->groups,
                                    c->streaming, -1, 0, &pc, &ps, &tr, &tc);
        cfgs[np] = -1, splits[np] = 0, tile_r[np] = tr, tile_c[np] = tc, np++;
        const int planned_split = ps;
        for (int cfg = 0; cfg < ncfg; cfg++)
          for (int s = 1; s <= 64 && np < 128; s *= 2) {
            ppx_backend_cuda_conv_plan (gpu, c->tr, Ms[j], c->Cin, c->Cout, c->K, c->L, c->stride, c->dil, c->groups,
                                        c->streaming, cfg, s, &pc, &ps, &tr, &tc);
            if (pc != cfg || ps != s)
              continue;
            cfgs[np] = cfg, splits[np] = s, tile_r[np] = tr, tile_c[np] = tc, np++;
          }
        double us[128];
        if (!time_conv (c, Ms[j], np, cfgs, splits, 8, 3, us))
          continue;
        for (int p = 0; p < np; p++)
          printf ("sweep %-22s M=%-2d cfg=%-2d %3dx%-3d split=%-2d %9.2f us%s\n", c->name, Ms[j], cfgs[p], tile_r[p],
                  tile_c[p], p == 0 ? planned_split : splits[p], us[p], p == 0 ? "  (planned)" : "");
        fflush (stdout);
      }
    }
  }
  return 0;
}

/* test-backend-cuda --bench [FORMAT [ROWSxCOLS]]: the temporal transformer's shapes (rows x cols: QKV, O,
 * gate+up, down, text head) at M = 1, 8, 32, 64; FORMAT (bf16, int8, int4, f32) limits it to one format,
 * ROWSxCOLS to one shape. */
static int
run_bench (const char *only, const char *shape)
{
  int64_t only_rows = 0, only_cols = 0;
  if (shape && sscanf (shape, "%" G_GINT64_FORMAT "x%" G_GINT64_FORMAT, &only_rows, &only_cols) != 2) {
    g_printerr ("--bench: shape '%s' is not ROWSxCOLS\n", shape);
    return 2;
  }
  printf ("linear layers on %s: GPU time per call (median of 9 replays of a CUDA graph of >= 120 calls cycling over\n"
          "copies of the matrix that do not fit in L2); GB/s = weight bytes (data + scales) / time\n",
          ppx_backend_cuda_device_name (gpu));
  const Fmt f[] = {{PPX_WFMT_INT4, 64}, {PPX_WFMT_INT8, 0}, {PPX_WFMT_BF16, 0}, {PPX_WFMT_F32, 0}};
  const char *names[] = {"int4", "int8", "bf16", "f32"};
  static const int64_t shapes[][2] = {{12288, 4096}, {4096, 4096}, {22528, 4096}, {4096, 11264}, {32000, 4096}};
  const int Ms[] = {1, 8, 32, 64};
  for (guint i = 0; i < G_N_ELEMENTS (f); i++) {
    if (only ? strcmp (only, names[i]) != 0 : f[i].format == PPX_WFMT_F32)
      continue;
    if (shape) {
      bench_linear (f[i], only_rows, only_cols, Ms, G_N_ELEMENTS (Ms));
      continue;
    }
    for (guint j = 0; j < G_N_ELEMENTS (shapes); j++)
      if (f[i].format != PPX_WFMT_F32 || j == 1)
        bench_linear (f[i], shapes[j][0], shapes[j][1], Ms, G_N_ELEMENTS (Ms));
  }
  return only ? 0 : run_bench_attention ();
}

int
main (int argc, char **argv)
{
  int n_gpus = 0;
  gboolean bench = argc > 1 && g_str_equal (argv[1], "--bench");
  gboolean bench_att = argc > 1 && g_str_equal (argv[1], "--bench-attention");
  gboolean bench_conv = argc > 1 && g_str_equal (argv[1], "--bench-conv");
  gboolean bench_sweep = argc > 1 && g_str_equal (argv[1], "--bench-conv-sweep");
  if (!ppx_backend_cuda_available (&n_gpus)) {
    g_autoptr (GError) err = NULL;
    PpxBackend *b = ppx_backend_cuda_new (0, &err);
    g_assert_null (b);
    g_assert_error (err, PPX_ERROR, PPX_ERROR_UNSUPPORTED);
    g_printerr ("no usable GPU (%s); skipping\n", err->message);
    return PPX_TEST_SKIP;
  }
  g_autoptr (GError) err = NULL;
  cpu = ppx_backend_cpu_new (0, &err);
  g_assert_no_error (err);
  gpu = ppx_backend_cuda_new (0, &err);
  g_assert_no_error (err);
  g_assert_null (ppx_backend_cuda_new (n_gpus, &err));
  g_assert_error (err, PPX_ERROR, PPX_ERROR_INVALID);
  g_clear_error (&err);
  g_printerr ("CUDA backend on %s (%d GPU%s)\n", ppx_backend_cuda_device_name (gpu), n_gpus, n_gpus > 1 ? "s" : "");
  rng = g_rand_new_with_seed (20260101);
  int rc;
  if (bench) {
    rc = run_bench (argc > 2 ? argv[2] : NULL, argc > 3 ? argv[3] : NULL);
  } else if (bench_att) {
    rc = run_bench_attention ();
  } else if (bench_conv) {
    rc = run_bench_conv ();
  } else if (bench_sweep) {
    rc = run_bench_conv_sweep (argc - 2, argv + 2);
  } else {
    g_test_init (&argc, &argv, NULL);
    g_test_add_func ("/cuda/memory", test_memory);
    g_test_add_func ("/cuda/linear", test_linear);
    g_test_add_func ("/cuda/linear-batch", test_linear_batch);
    g_test_add_func ("/cuda/rmsnorm-linear", test_rmsnorm_linear);
    g_test_add_func ("/cuda/silu-gate-linear", test_silu_gate_linear);
    g_test_add_func ("/cuda/embed", test_embed);
    g_test_add_func ("/cuda/elementwise", test_elementwise);
    g_test_add_func ("/cuda/rope", test_rope);
    g_test_add_func ("/cuda/attention", test_attention);
    g_test_add_func ("/cuda/conv1d", test_conv1d);
    g_test_add_func ("/cuda/conv-transpose1d", test_conv_transpose1d);
    g_test_add_func ("/cuda/conv-mimi", test_conv_mimi);
    g_test_add_func ("/cuda/conv-batch", test_conv_batch);
    g_test_add_func ("/cuda/vq", test_vq);
    g_test_add_func ("/cuda/sample", test_sample);
    g_test_add_func ("/cuda/force-tokens", test_force_tokens);
    g_test_add_func ("/cuda/pdl-chain", test_pdl_chain);
    g_test_add_func ("/cuda/golden", test_golden);
    rc = g_test_run ();
  }
  g_rand_free (rng);
  ppx_backend_free (gpu);
  ppx_backend_free (cpu);
  return rc;
}
