/* CUDA op tests: conv1d and transposed conv1d on awkward shapes, then every convolution of a Mimi frame
 * (cuda-test-util.c's table) streaming, per tile configuration and leaf split, and batched rows. */
#include "cuda-test.h"

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

void
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

void
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

void
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

void
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

/* One M-row call sequence (2 calls with state) of a Mimi conv with one-stage pieces never (0) or always (1)
 * and the leaves `split` (0: planned): the outputs of both calls and the final state, downloaded. */
static void
run_mimi_pieces (const MimiConv *c, int M, int split, int pieces, const float *xs, const float *rs, const float *st,
                 Pair *w, Pair *b, float *yout, float *sout)
{
  const gsize sr = MAX (mc_state_row (c), 1), orow = mc_out_row (c), irow = (gsize) c->Cin * c->L;
  g_autoptr (GError) err = NULL;
  PpxTensor *x = ppx_tensor_new (gpu, PPX_TENSOR_F32, (gsize) M * irow, &err);
  PpxTensor *y = ppx_tensor_new (gpu, PPX_TENSOR_F32, (gsize) M * orow, &err);
  PpxTensor *s = ppx_tensor_new (gpu, PPX_TENSOR_F32, (gsize) M * sr, &err);
  g_assert_no_error (err);
  ppx_tensor_upload (s, 0, st, (gsize) M * sr);
  ppx_backend_cuda_conv_force (-1, split);
  ppx_backend_cuda_conv_force_pieces (pieces);
  for (int k = 0; k < 2; k++) {
    ppx_tensor_upload (x, 0, xs + (gsize) k * M * irow, (gsize) M * irow);
    ppx_tensor_upload (y, 0, rs + (gsize) k * M * orow, (gsize) M * orow);
    mc_run (gpu, c, w->g, b->g, x, s, y, M);
    ppx_tensor_download (y, 0, yout + (gsize) k * M * orow, (gsize) M * orow);
  }
  ppx_backend_cuda_conv_force_pieces (-1);
  ppx_backend_cuda_conv_force (-1, 0);
  ppx_tensor_download (s, 0, sout, (gsize) M * sr);
  ppx_tensor_free (x);
  ppx_tensor_free (y);
  ppx_tensor_free (s);
}

/* One-stage pieces are a way to run the planned leaves (cuda-conv.cu, conv_pieces): every Mimi conv, planned
 * and with 2 or 3 forced leaves, gives the same bits (outputs of 2 calls, state) with pieces always as with
 * pieces never; and the planned leaves are the same for every M (the batch-independence rule). Fails if the
 * combine adds the pieces in another order than the leaf's own chain (e.g. bias first). */
void
test_conv_pieces (void)
{
  MimiConv convs[64];
  int with_pieces = 0, compared = 0;
  const int M = 3;
  for (int dec = 0; dec < 2; dec++) {
    const int n = mimi_convs (dec, convs, G_N_ELEMENTS (convs));
    for (int i = 0; i < n; i++) {
      const MimiConv *c = &convs[i];
      int pc, ps, tr, tc, ps1 = -1;
      static const int Ms[] = {1, 2, 8, 80, 160, 256};
      for (guint j = 0; j < G_N_ELEMENTS (Ms); j++) {
        g_assert_true (ppx_backend_cuda_conv_plan (gpu, c->tr, Ms[j], c->Cin, c->Cout, c->K, c->L, c->stride, c->dil,
                                                   c->groups, c->streaming, -1, 0, &pc, &ps, &tr, &tc));
        if (j == 0)
          ps1 = ps;
        else if (pc >= 0 && ps != ps1)
          g_error ("%s: %d leaves planned at M = %d, %d at M = 1", c->name, ps, Ms[j], ps1);
      }
      if (pc < 0)
        continue; /* the direct kernels */
      const gsize sr = MAX (mc_state_row (c), 1), orow = mc_out_row (c), irow = (gsize) c->Cin * c->L;
      Pair w = mc_weights (c), b = pair_random (c->Cout);
      g_autofree float *xs = random_floats ((gsize) 2 * M * irow, -1, 1), *st = random_floats (M * sr, -1, 1);
      g_autofree float *rs = random_floats ((gsize) 2 * M * orow, -1, 1);
      g_autofree float *y0 = g_new (float, (gsize) 2 * M * orow), *y1 = g_new (float, (gsize) 2 * M * orow);
      g_autofree float *s0 = g_new (float, M * sr), *s1 = g_new (float, M * sr);
      static const int splits[] = {0, 2, 3};
      for (guint k = 0; k < G_N_ELEMENTS (splits); k++) {
        ppx_backend_cuda_conv_force_pieces (1);
        const int launch = ppx_backend_cuda_conv_launch_leaves (gpu, c->tr, M, c->Cin, c->Cout, c->K, c->L, c->stride,
                                                                c->dil, c->groups, c->streaming);
        ppx_backend_cuda_conv_force_pieces (-1);
        run_mimi_pieces (c, M, splits[k], 0, xs, rs, st, &w, &b, y0, s0);
        run_mimi_pieces (c, M, splits[k], 1, xs, rs, st, &w, &b, y1, s1);
        if (memcmp (y0, y1, (gsize) 2 * M * orow * sizeof (float)) != 0)
          g_error ("%s M%d split %d: one-stage pieces change the output", c->name, M, splits[k]);
        if (c->streaming && memcmp (s0, s1, M * sr * sizeof (float)) != 0)
          g_error ("%s M%d split %d: one-stage pieces change the state", c->name, M, splits[k]);
        with_pieces += k == 0 && launch > ps1;
        compared++;
      }
      pair_free (&w);
      pair_free (&b);
    }
  }
  if (g_test_verbose ())
    g_printerr ("  %d comparisons bit for bit; %d planned calls run as pieces when forced\n", compared, with_pieces);
  /* on the tensor cores (the default) the leaves of several stages run as pieces when forced: not vacuous */
  const char *mma = g_getenv ("PPX_CUDA_F32_MMA");
  if (!(mma && mma[0] == '0'))
    g_assert_cmpint (with_pieces, >, 0);
}
