/* CUDA op tests: device memory, elementwise ops and norms, the RVQ, sampling and teacher forcing. */
#include "cuda-test.h"

/* ---- memory ---- */

void
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

/* ---- elementwise and norms ---- */

void
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

void
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

void
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

void
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
