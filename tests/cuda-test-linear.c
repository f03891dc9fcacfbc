/* CUDA op tests: linear layers (every weight format, batched rows bit for bit as one row, the fused norm and
 * gate), embeddings, and a chain of dependent layers under programmatic dependent launch. */
#include "cuda-test.h"

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

void
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
    /* int4 on sm_90a: one wgmma launch of 200 rows (25 n-tiles a block), x rows not on 16 bytes */
    check_linear (f, 129, 1000, 200, 1003, 131, FALSE, 0, 0);
  }
  /* f32 at Mimi's transformer shapes (cuda-linear-f32tc.cu): one session's 2 rows, 80 sessions' 160 */
  const Fmt f32 = formats[0];
  g_assert_cmpint (f32.format, ==, PPX_WFMT_F32);
  check_linear (f32, 2048, 512, 2, 512, 2048, FALSE, 0, 0);
  check_linear (f32, 512, 2048, 160, 2048, 512, TRUE, 0, 0);
  check_linear (f32, 1536, 512, 160, 515, 1537, FALSE, 0, 0);
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

void
test_linear_batch (void)
{
  for (guint i = 0; i < G_N_ELEMENTS (formats); i++) {
    check_linear_rows_exact (formats[i], 129, 1000, 70, FALSE); /* K split into 8 leaves, a K tail */
    check_linear_rows_exact (formats[i], 300, 4128, 33, TRUE);
    check_linear_rows_exact (formats[i], 2049, 88, 9, FALSE);   /* one leaf, tail only */
    check_linear_rows_exact (formats[i], 1024, 1024, 32, TRUE); /* the 17..32-row kernels */
    check_linear_rows_exact (formats[i], 34000, 256, 64, TRUE); /* one leaf of two full stages */
    check_linear_rows_exact (formats[i], 20000, 2080, 64, FALSE); /* leaves longer than the ring */
    check_linear_rows_exact (formats[i], 600, 4128, 80, TRUE);    /* the 16-tile kernel, tiles past M skipped */
    check_linear_rows_exact (formats[i], 300, 1000, 131, FALSE);  /* mma.sync: one launch, slices of 9 and 8 n-tiles */
    /* one launch up to 256 rows. int4 on sm_90a: 17, 20 and 25 n-tiles a block (both halves of a chunk's wgmma
     * in flight together up to 20, one after the other past it), two slices of 16 at 256; mma.sync: slices of
     * up to 16 n-tiles; 300: 256 + 44 */
    check_linear_rows_exact (formats[i], 300, 1000, 129, TRUE);
    check_linear_rows_exact (formats[i], 600, 4128, 160, TRUE);
    check_linear_rows_exact (formats[i], 600, 4128, 200, FALSE);
    check_linear_rows_exact (formats[i], 129, 1000, 256, TRUE);
    check_linear_rows_exact (formats[i], 129, 1000, 300, FALSE);
    check_linear_rows_exact (formats[i], 1027, 1024, 160, TRUE); /* the depformer's shape: leaves of 1-2 stages (int8: wgmma, 5 slices of 4) */
    check_linear_rows_exact (formats[i], 1027, 1024, 128, FALSE); /* int8: mma.sync in 4 slices of 4 */
  }
  check_linear_rows_exact (formats[0], 512, 2048, 160, TRUE); /* f32, Mimi's FFN down projection, 80 sessions */
  /* bf16 with leaves of 3+ stages: on sm_90a the wgmma configuration by default (5 n-tiles; 20, the wide one) */
  g_assert_cmpint (formats[1].format, ==, PPX_WFMT_BF16);
  check_linear_rows_exact (formats[1], 4096, 4096, 40, FALSE);
  check_linear_rows_exact (formats[1], 4096, 4096, 160, TRUE);
}

/* The same with the x rows of each launch spread over blocks in every way the tensor-core kernel can
 * (ppx_backend_cuda_linear_force_slice: 2, 3, 4, 5, 8, 16, 25 n-tiles a block; 3 and 5 leave tiles of a block's
 * configuration empty; 131, 200 and 256 rows are one launch, in slices of up to 16 n-tiles on mma.sync and 25 on
 * wgmma): the slicing changes where rows are computed, never their bits. */
void
test_linear_batch_slices (void)
{
  static const int slices[] = {2, 3, 4, 5, 8, 16, 25};
  for (guint k = 0; k < G_N_ELEMENTS (slices); k++) {
    ppx_backend_cuda_linear_force_slice (slices[k]);
    for (guint i = 0; i < G_N_ELEMENTS (formats); i++) {
      if (formats[i].format == PPX_WFMT_F32 || (formats[i].format == PPX_WFMT_INT4 && (formats[i].group_size == 8 || formats[i].group_size == 48)))
        continue; /* the CUDA-core kernels: no slices */
      check_linear_rows_exact (formats[i], 600, 4128, 80, TRUE);    /* K split into leaves, a K tail */
      check_linear_rows_exact (formats[i], 129, 1000, 131, FALSE);  /* a partial row block, 17 n-tiles */
      check_linear_rows_exact (formats[i], 600, 4128, 200, FALSE);
      check_linear_rows_exact (formats[i], 129, 1000, 256, TRUE);
    }
  }
  ppx_backend_cuda_linear_force_slice (0);
}

/* The M <= 8 kernel without the stage barrier (tc_gemv_kernel) gives the bits of the block-barrier kernel
 * (tc_linear_kernel<.., 1>) for every tensor-core format and M = 1..8: K split into leaves with a K tail, a
 * partial row block, leaves longer than the ring, x rows not on 16 bytes, accumulation; and with it on,
 * every row of an 8-row call is the row alone. */
static void
check_linear_gemv (Fmt f, int64_t rows, int64_t cols, int M, gsize ldx, gboolean accumulate)
{
  WPair w = wpair_random (f, rows, cols);
  g_autoptr (GError) err = NULL;
  const gsize nx = (gsize) (M - 1) * ldx + cols, ny = (gsize) M * rows;
  g_autofree float *xv = random_floats (nx, -2.0, 2.0), *y0 = random_floats (ny, -1, 1);
  g_autofree float *ya = g_new (float, ny), *yb = g_new (float, ny);
  PpxTensor *X = ppx_tensor_new (gpu, PPX_TENSOR_F32, nx, &err);
  PpxTensor *Y = ppx_tensor_new (gpu, PPX_TENSOR_F32, ny, &err);
  g_assert_no_error (err);
  ppx_tensor_upload (X, 0, xv, nx);
  float *out[2] = {ya, yb};
  for (int on = 0; on < 2; on++) {
    ppx_backend_cuda_linear_force_gemv (on);
    ppx_tensor_upload (Y, 0, y0, ny);
    ppx_op_linear (gpu, w.g, X, ldx, Y, rows, M, accumulate);
    ppx_tensor_download (Y, 0, out[on], ny);
  }
  ppx_backend_cuda_linear_force_gemv (-1);
  for (gsize i = 0; i < ny; i++)
    if (memcmp (&ya[i], &yb[i], sizeof (float)) != 0)
      g_error ("linear %s [%" G_GINT64_FORMAT "x%" G_GINT64_FORMAT "] M=%d ldx=%" G_GSIZE_FORMAT "%s: output %" G_GSIZE_FORMAT
               " differs between the M <= 8 kernels: %.9g (barrier) vs %.9g (gemv)", fmt_name (f), rows, cols, M, ldx,
               accumulate ? " acc" : "", i, ya[i], yb[i]);
  if (g_test_verbose ())
    g_printerr ("  linear %-8s [%" G_GINT64_FORMAT "x%" G_GINT64_FORMAT "] M=%d%s: gemv == barrier kernel bit for bit\n",
                fmt_name (f), rows, cols, M, accumulate ? " acc" : "");
  ppx_tensor_free (X);
  ppx_tensor_free (Y);
  wpair_free (&w);
}

void
test_linear_gemv (void)
{
  for (guint i = 0; i < G_N_ELEMENTS (formats); i++) {
    if (formats[i].format == PPX_WFMT_F32 || (formats[i].format == PPX_WFMT_INT4 && (formats[i].group_size == 8 || formats[i].group_size == 48)))
      continue; /* the CUDA-core kernels */
    for (int M = 1; M <= 8; M++) {
      check_linear_gemv (formats[i], 600, 4128, M, 4128, M % 2 == 0); /* leaves, a K tail */
      check_linear_gemv (formats[i], 129, 1000, M, M % 3 == 0 ? 1003 : 1000, FALSE); /* a partial row block */
    }
    check_linear_gemv (formats[i], 20000, 2080, 1, 2080, TRUE);  /* leaves longer than the ring */
    check_linear_gemv (formats[i], 4096, 4096, 8, 4096, FALSE);
    check_linear_gemv (formats[i], 2048, 1024, 3, 1024, TRUE);
    check_linear_rows_exact (formats[i], 600, 4128, 8, TRUE);
    check_linear_rows_exact (formats[i], 4096, 11264, 4, FALSE);
  }
}

/* The int4, int8 and bf16 linears take the wgmma configuration where the build and the GPU have it (a build with
 * 90a in -Dcuda-arch, a compute capability 9.0 GPU: H100, H200), and nowhere else (the CUDA-core kernels: never):
 * int4 from M = 17 rows; int8 from 17 rows where a leaf of K is 3 stages or more (4096 x 4096: 8 stages on 132
 * SMs, 4 on 114) and from 129 where it is 1-2 (256 x 1024, the depformer's latency-bound shapes); bf16 from 17
 * rows where a leaf is 3 stages or more, never where it is 1-2. Without
 * this a build whose sm_90a code the driver did not load would fall back to mma.sync silently (the same bits,
 * the batch tests cannot tell) and the tick would lose ~2 ms at 80 sessions (docs/cuda.md, "wgmma (sm_90a)").
 * PPX_CUDA_LINEAR_WGMMA, _WGMMA_INT8 and _WGMMA_BF16 move the switch; the test expects the default. */
void
test_linear_wgmma_path (void)
{
#ifdef PPX_TEST_CUDA_90A
  const gboolean built = TRUE;
#else
  const gboolean built = FALSE;
#endif
  if (g_getenv ("PPX_CUDA_LINEAR_WGMMA") || g_getenv ("PPX_CUDA_LINEAR_WGMMA_INT8") ||
      g_getenv ("PPX_CUDA_LINEAR_WGMMA_BF16") || g_getenv ("PPX_CUDA_LINEAR_LAUNCH_ROWS")) {
    g_test_skip ("PPX_CUDA_LINEAR_WGMMA, _WGMMA_INT8, _WGMMA_BF16 or _LAUNCH_ROWS is set: the switch is not the default");
    return;
  }
  const int cc = ppx_backend_cuda_compute_capability (gpu);
  const gboolean expect = built && cc == 90;
  g_test_message ("compute capability %d.%d, built with 90a: %s: wgmma expected %s", cc / 10, cc % 10,
                  built ? "yes" : "no", expect ? "from 17 rows" : "nowhere");
  g_assert_cmpint (cc, >=, 80);
  for (guint i = 0; i < G_N_ELEMENTS (formats); i++) {
    const gboolean tc_int4 = formats[i].format == PPX_WFMT_INT4 && formats[i].group_size != 8 &&
                             formats[i].group_size != 48; /* g8, g48: the CUDA-core kernels */
    const gboolean tc = tc_int4 || formats[i].format == PPX_WFMT_BF16 || formats[i].format == PPX_WFMT_INT8;
    WPair w = wpair_random (formats[i], 256, 1024);
    static const int ms[] = {1, 8, 16, 17, 32, 80, 128, 129, 160, 200, 256, 300};
    for (guint k = 0; k < G_N_ELEMENTS (ms); k++) {
      const gboolean want = expect && ((tc_int4 && ms[k] >= 17) || (formats[i].format == PPX_WFMT_INT8 && ms[k] >= 129));
      if (ppx_backend_cuda_linear_wgmma_at (gpu, w.g, ms[k]) != want)
        g_error ("linear %s M=%d: wgmma %s, expected %s", fmt_name (formats[i]), ms[k], want ? "not taken" : "taken",
                 want ? "taken" : "not taken");
      /* one launch for up to 256 rows on wgmma and mma.sync alike (each weight byte streamed once from memory) */
      const int rows = ppx_backend_cuda_linear_launch_rows (gpu, w.g, ms[k]);
      const int rows_want = tc ? MIN (ms[k], 256) : 0;
      if (rows != rows_want)
        g_error ("linear %s M=%d: first launch of %d rows, expected %d", fmt_name (formats[i]), ms[k], rows, rows_want);
    }
    g_assert_false (ppx_backend_cuda_linear_wgmma_at (cpu, w.c, 80));
    wpair_free (&w);
  }
  /* int8 and bf16 with long leaves: from 17 rows */
  for (int j = 1; j <= 2; j++) {
    g_assert_cmpint (formats[j].format, ==, j == 1 ? PPX_WFMT_BF16 : PPX_WFMT_INT8);
    WPair w8 = wpair_random (formats[j], 4096, 4096);
    static const int ms8[] = {1, 16, 17, 32, 80, 160, 256};
    for (guint k = 0; k < G_N_ELEMENTS (ms8); k++)
      if (ppx_backend_cuda_linear_wgmma_at (gpu, w8.g, ms8[k]) != (expect && ms8[k] >= 17))
        g_error ("linear %s [4096x4096] M=%d: wgmma %s", fmt_name (formats[j]), ms8[k],
                 expect && ms8[k] >= 17 ? "not taken" : "taken");
    wpair_free (&w8);
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
  assert_gpu_bits_equal (&y, &y2, what, "rmsnorm then linear");
  pair_free (&x);
  pair_free (&alpha);
  pair_free (&h);
  pair_free (&h2);
  pair_free (&y);
  pair_free (&y2);
  wpair_free (&w);
}

void
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
  assert_gpu_bits_equal (&y, &y2, what, "silu_gate then linear");
  pair_free (&h);
  pair_free (&u);
  pair_free (&u2);
  pair_free (&y);
  pair_free (&y2);
  wpair_free (&w);
}

void
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

void
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

void
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
