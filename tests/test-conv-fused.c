/* The fused convolution ops of the backend interface (ppx_op_conv1d_fused, ppx_op_conv_transpose1d_act):
 * each must give, bit for bit, what the separate ops give (ppx_op_act on x, then the conv with the same
 * streaming state, then ppx_op_add of the residual), outputs and state, over several streaming calls. On the
 * CPU backend (the reference), and on the CUDA backend when the build has it and a GPU is present. Shapes:
 * history longer and shorter than a frame, no history, strides, dilation, groups, depthwise, no bias, the
 * residual in place (y = y + conv) and in its own tensor; the transposed conv with tails longer than a frame
 * and without a tail. */
#include "../kernels/backend-cuda.h"
#include "backend.h"
#include "test-util.h"

static GRand *rng;

typedef struct {
  int M, Cin, Cout, K, stride, dil, groups;
  gboolean bias, stream;
} Shape;

static PpxTensor *
tensor (PpxBackend *be, gsize n, const float *v)
{
  g_autoptr (GError) err = NULL;
  PpxTensor *t = ppx_tensor_new (be, PPX_TENSOR_F32, MAX (n, 1), &err);
  g_assert_no_error (err);
  if (v)
    ppx_tensor_upload (t, 0, v, n);
  return t;
}

static float *
randoms (gsize n)
{
  float *v = g_new (float, MAX (n, 1));
  for (gsize i = 0; i < n; i++)
    v[i] = (float) g_rand_double_range (rng, -2.0, 2.0);
  return v;
}

static void
assert_same (PpxTensor *a, PpxTensor *b, gsize n, const char *what)
{
  g_autofree float *x = g_new (float, MAX (n, 1)), *y = g_new (float, MAX (n, 1));
  ppx_tensor_download (a, 0, x, n);
  ppx_tensor_download (b, 0, y, n);
  for (gsize i = 0; i < n; i++)
    if (memcmp (&x[i], &y[i], 4) != 0)
      g_error ("%s: element %" G_GSIZE_FORMAT ": fused %.9g, separate ops %.9g", what, i, x[i], y[i]);
}

static void
check_conv1d (PpxBackend *be, Shape s, PpxActivation act, int res_mode, const int *lins, int calls)
{
  const int keff = (s.K - 1) * s.dil + 1, P = s.stream ? keff - s.stride : 0;
  const gsize wn = (gsize) s.Cout * (s.Cin / s.groups) * s.K, pn = (gsize) s.M * s.Cin * MAX (P, 1);
  g_autofree float *wv = randoms (wn), *bv = randoms (s.Cout), *pv = randoms (pn);
  PpxTensor *w = tensor (be, wn, wv), *b = tensor (be, s.Cout, bv);
  PpxTensor *p1 = tensor (be, pn, pv), *p2 = tensor (be, pn, pv);
  for (int c = 0; c < calls; c++) {
    const int Lin = lins[c], L = P + Lin, Lout = L >= keff ? (L - keff) / s.stride + 1 : 0;
    const gsize xn = (gsize) s.M * s.Cin * Lin, yn = (gsize) s.M * s.Cout * Lout;
    g_autofree float *xv = randoms (xn), *rv = randoms (yn);
    PpxTensor *x = tensor (be, xn, xv), *xa = tensor (be, xn, NULL), *t = tensor (be, yn, NULL);
    PpxTensor *y1 = tensor (be, yn, rv), *y2 = tensor (be, yn, rv), *r = tensor (be, yn, rv);
    /* fused: in place (res = y) or from r */
    PpxTensor *res1 = res_mode == 1 ? y1 : res_mode == 2 ? r : NULL;
    ppx_op_conv1d_fused (be, act, w, s.bias ? b : NULL, x, s.stream ? p1 : NULL, res1, y1, s.M, s.Cin, s.Cout, s.K, Lin,
                         s.stride, s.dil, s.groups);
    /* separate ops */
    if (act != PPX_ACT_NONE)
      ppx_op_act (be, act, x, xa, xn);
    ppx_op_conv1d (be, w, s.bias ? b : NULL, act != PPX_ACT_NONE ? xa : x, s.stream ? p2 : NULL, res_mode ? t : y2, s.M,
                   s.Cin, s.Cout, s.K, Lin, s.stride, s.dil, s.groups);
    if (res_mode)
      ppx_op_add (be, r, t, y2, yn);
    g_autofree char *what =
      g_strdup_printf ("%s conv1d M%d %d->%d K%d s%d d%d g%d%s%s act %d res %d Lin %d call %d", ppx_backend_name (be),
                       s.M, s.Cin, s.Cout, s.K, s.stride, s.dil, s.groups, s.bias ? " bias" : "",
                       s.stream ? " streaming" : "", act, res_mode, Lin, c);
    assert_same (y1, y2, yn, what);
    if (s.stream)
      assert_same (p1, p2, (gsize) s.M * s.Cin * P, what);
    ppx_tensor_free (x);
    ppx_tensor_free (xa);
    ppx_tensor_free (t);
    ppx_tensor_free (y1);
    ppx_tensor_free (y2);
    ppx_tensor_free (r);
  }
  ppx_tensor_free (w);
  ppx_tensor_free (b);
  ppx_tensor_free (p1);
  ppx_tensor_free (p2);
}

static void
check_convtr (PpxBackend *be, Shape s, PpxActivation act, const int *Ts, int calls)
{
  const int tail = s.K - s.stride;
  const gsize wn = (gsize) s.Cin * (s.Cout / s.groups) * s.K, pn = (gsize) s.M * s.Cout * MAX (tail, 1);
  g_autofree float *wv = randoms (wn), *bv = randoms (s.Cout), *pv = randoms (pn);
  PpxTensor *w = tensor (be, wn, wv), *b = tensor (be, s.Cout, bv);
  PpxTensor *p1 = tensor (be, pn, pv), *p2 = tensor (be, pn, pv);
  for (int c = 0; c < calls; c++) {
    const int T = Ts[c], Ly = s.stream ? s.stride * T : s.stride * (T - 1) + s.K;
    const gsize xn = (gsize) s.M * s.Cin * T, yn = (gsize) s.M * s.Cout * Ly;
    g_autofree float *xv = randoms (xn);
    PpxTensor *x = tensor (be, xn, xv), *xa = tensor (be, xn, NULL), *y1 = tensor (be, yn, NULL),
              *y2 = tensor (be, yn, NULL);
    ppx_op_conv_transpose1d_act (be, act, w, s.bias ? b : NULL, x, s.stream ? p1 : NULL, y1, s.M, s.Cin, s.Cout, s.K,
                                 T, s.stride, s.groups);
    if (act != PPX_ACT_NONE)
      ppx_op_act (be, act, x, xa, xn);
    ppx_op_conv_transpose1d (be, w, s.bias ? b : NULL, act != PPX_ACT_NONE ? xa : x, s.stream ? p2 : NULL, y2, s.M,
                             s.Cin, s.Cout, s.K, T, s.stride, s.groups);
    g_autofree char *what =
      g_strdup_printf ("%s conv_transpose1d M%d %d->%d K%d s%d g%d%s%s act %d T %d call %d", ppx_backend_name (be),
                       s.M, s.Cin, s.Cout, s.K, s.stride, s.groups, s.bias ? " bias" : "",
                       s.stream ? " streaming" : "", act, T, c);
    assert_same (y1, y2, yn, what);
    if (s.stream && tail > 0)
      assert_same (p1, p2, (gsize) s.M * s.Cout * tail, what);
    ppx_tensor_free (x);
    ppx_tensor_free (xa);
    ppx_tensor_free (y1);
    ppx_tensor_free (y2);
  }
  ppx_tensor_free (w);
  ppx_tensor_free (b);
  ppx_tensor_free (p1);
  ppx_tensor_free (p2);
}

static void
run_all (PpxBackend *be)
{
  const Shape convs[] = {
    {2, 6, 4, 7, 1, 1, 1, TRUE, TRUE},      /* history 6 > some frames (shift path) */
    {3, 40, 24, 3, 1, 2, 1, TRUE, TRUE},    /* dilated residual conv */
    {2, 24, 40, 8, 4, 1, 1, TRUE, TRUE},    /* strided downsampling */
    {1, 64, 32, 16, 8, 1, 1, FALSE, TRUE},  /* K 16 stride 8, no bias */
    {2, 36, 48, 1, 1, 1, 1, TRUE, FALSE},   /* 1x1, the residual block's second conv */
    {3, 6, 4, 5, 1, 2, 2, TRUE, TRUE},      /* groups */
    {2, 5, 5, 3, 1, 1, 5, TRUE, TRUE},      /* depthwise */
    {2, 9, 7, 4, 2, 1, 1, TRUE, FALSE},     /* no history */
  };
  const int lins[] = {8, 4, 12, 1, 2, 3};
  const PpxActivation acts[] = {PPX_ACT_ELU, PPX_ACT_NONE, PPX_ACT_SILU};
  for (guint i = 0; i < G_N_ELEMENTS (convs); i++)
    for (int res = 0; res < 3; res++) {
      int l[6];
      for (int k = 0; k < 6; k++)
        l[k] = lins[k] * convs[i].stride;
      check_conv1d (be, convs[i], acts[(i + res) % 3], res, l, 6);
    }
  const Shape trs[] = {
    {2, 24, 12, 8, 4, 1, 1, TRUE, TRUE},   /* K = 2 stride (SEANet) */
    {1, 40, 16, 16, 8, 1, 1, TRUE, TRUE},  /* K 16 stride 8 */
    {2, 6, 4, 5, 2, 1, 2, FALSE, TRUE},    /* groups, tail 3 > stride */
    {2, 5, 5, 4, 2, 1, 5, FALSE, TRUE},    /* depthwise (Mimi's upsample) */
    {1, 3, 2, 7, 2, 1, 1, TRUE, TRUE},     /* tail 5 > stride * T for T = 1, 2 */
    {3, 2, 3, 3, 3, 1, 1, TRUE, FALSE},    /* K = stride: no tail */
  };
  const int Ts[] = {1, 2, 3, 1, 4, 2};
  for (guint i = 0; i < G_N_ELEMENTS (trs); i++)
    check_convtr (be, trs[i], i % 2 ? PPX_ACT_GELU : PPX_ACT_ELU, Ts, 6);
}

static void
test_cpu (void)
{
  g_autoptr (GError) err = NULL;
  PpxBackend *be = ppx_backend_cpu_new (0, &err);
  g_assert_no_error (err);
  run_all (be);
  ppx_backend_free (be);
}

static void
test_cuda (void)
{
  if (!ppx_backend_cuda_available (NULL)) {
    g_test_skip ("no GPU, or a build without CUDA");
    return;
  }
  g_autoptr (GError) err = NULL;
  PpxBackend *be = ppx_backend_cuda_new (0, &err);
  g_assert_no_error (err);
  run_all (be);
  /* the direct kernels (the fallback path) too */
  ppx_backend_cuda_conv_force (-2, 0);
  run_all (be);
  ppx_backend_cuda_conv_force (-1, 0);
  ppx_backend_free (be);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  rng = g_rand_new_with_seed (7);
  g_test_add_func ("/conv-fused/cpu", test_cpu);
  g_test_add_func ("/conv-fused/cuda", test_cuda);
  const int rc = g_test_run ();
  g_rand_free (rng);
  return rc;
}
