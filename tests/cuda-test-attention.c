/* CUDA op tests: RoPE, and attention over f32, bf16 and fp8 KV caches (outputs within TOL, caches byte for
 * byte). */
#include "cuda-test.h"

/* ---- attention ---- */

void
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
  CachePair p = {ppx_kv_cache_new (cpu, ppx_kv_storage (fmt), n_slots, cap, H, Dh, &err), NULL, 0};
  g_assert_no_error (err);
  p.g = ppx_kv_cache_new (gpu, ppx_kv_storage (fmt), n_slots, cap, H, Dh, &err);
  g_assert_no_error (err);
  p.bytes = ppx_tensor_bytes (p.c);
  g_assert_cmpuint (p.bytes, ==, ppx_tensor_bytes (p.g));
  g_assert_cmpuint (p.bytes, ==, ppx_kv_cache_bytes (ppx_kv_storage (fmt), n_slots, cap, H, Dh));
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

/* PPX_TEST_ATTENTION_QUICK=1 (the compute-sanitizer runs) skips the calls of more than 8 full temporal rows
 * (M * T * cap * H * Dh above 8 x 3000 x 4096). */
static gboolean
skip_heavy (int M, int T, int H, int Dh, int cap)
{
  return g_strcmp0 (g_getenv ("PPX_TEST_ATTENTION_QUICK"), "1") == 0 &&
         (double) M * T * cap * H * Dh > 8.0 * 3000 * 4096;
}

/* `calls` calls of M sessions x T rows; session m's rows are at start + stride*m + c*T + t (start past
 * cap: the rings have wrapped and hold random earlier rows when `fill`). Sessions use slots out of order.
 * The outputs must agree to TOL (same format on both backends: the stored values decode exactly, only the
 * order of the f32 sums differs) and the caches, scales included, must be identical bytes. */
static void
check_attention (PpxKvFormat fmt, int M, int T, int H, int Dh, int cap, int context, int calls, int start,
                 int stride, gboolean fill)
{
  if (skip_heavy (M, T, H, Dh, cap))
    return;
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

/* Each session's rows give the same bits in a batch of M sessions as in a call of their own: the chunk plan
 * depends on the ring's capacity only (the engine's batched == alone rule). GPU only; caches filled with
 * random rows, T rows a session. */
static void
check_attention_batch_bits (PpxKvFormat fmt, int M, int T, int H, int Dh, int cap, int context, int start, int stride)
{
  if (skip_heavy (M, T, H, Dh, cap))
    return;
  const gsize HD = (gsize) H * Dh, width = 3 * HD;
  CachePair kc = cache_pair (fmt, M, cap, H, Dh, TRUE), vc = cache_pair (fmt, M, cap, H, Dh, TRUE);
  g_autofree int32_t *pos = g_new (int32_t, M * T), *slots = g_new (int32_t, M);
  for (int m = 0; m < M; m++) {
    slots[m] = (m * 3 + 1) % M; /* M not a multiple of 3 */
    for (int t = 0; t < T; t++)
      pos[m * T + t] = start + stride * m + t;
  }
  g_autofree float *x = random_floats ((gsize) M * T * width, -1.0, 1.0);
  Pair qkv = pair_new (PPX_TENSOR_F32, (gsize) M * T * width, x), p = pair_i32 ((gsize) M * T, pos);
  Pair sl = pair_i32 (M, slots), out = pair_random ((gsize) M * T * HD);
  ppx_op_attention (gpu, qkv.g, p.g, sl.g, kc.g, vc.g, out.g, M, T, H, Dh, cap, context);
  g_autofree float *batched = g_new (float, (gsize) M * T * HD), *alone = g_new (float, (gsize) T * HD);
  ppx_tensor_download (out.g, 0, batched, (gsize) M * T * HD);
  for (int m = 0; m < M; m++) {
    /* the session's rows again, alone (its new k/v rows are stored again: the same bytes) */
    Pair q1 = pair_new (PPX_TENSOR_F32, (gsize) T * width, x + (gsize) m * T * width);
    Pair p1 = pair_i32 (T, pos + (gsize) m * T), s1 = pair_i32 (1, slots + m), o1 = pair_random ((gsize) T * HD);
    ppx_op_attention (gpu, q1.g, p1.g, s1.g, kc.g, vc.g, o1.g, 1, T, H, Dh, cap, context);
    ppx_tensor_download (o1.g, 0, alone, (gsize) T * HD);
    for (gsize i = 0; i < (gsize) T * HD; i++)
      if (memcmp (&alone[i], &batched[(gsize) m * T * HD + i], sizeof (float)) != 0)
        g_error ("attention %s M=%d T=%d: session %d value %" G_GSIZE_FORMAT " is %.9g batched, %.9g alone",
                 ppx_kv_format_name (fmt), M, T, m, i, batched[(gsize) m * T * HD + i], alone[i]);
    pair_free (&q1);
    pair_free (&p1);
    pair_free (&s1);
    pair_free (&o1);
  }
  pair_free (&qkv);
  pair_free (&p);
  pair_free (&sl);
  pair_free (&out);
  cache_pair_free (&kc);
  cache_pair_free (&vc);
}

void
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
    /* prompt prefill: T rows of one session (the window of each row ends at its own position) */
    check_attention (k, 1, 64, 32, 128, 3000, 3000, 1, 2970, 0, TRUE);  /* full ring, across its end */
    check_attention (k, 1, 64, 32, 128, 3000, 3000, 2, 0, 0, TRUE);     /* a new session: rows 0..127 */
    check_attention (k, 2, 17, 32, 128, 3000, 1000, 1, 4990, 333, TRUE); /* context below cap */
    check_attention (k, 1, 40, 8, 64, 250, 250, 2, 1000, 0, TRUE);      /* Mimi's shape */
    /* batched == alone, bit for bit */
    check_attention_batch_bits (k, 5, 1, 32, 128, 3000, 3000, 6001, 17);
    check_attention_batch_bits (k, 4, 3, 32, 128, 3000, 3000, 100, 700); /* rings not yet full */
    check_attention_batch_bits (k, 5, 2, 8, 64, 250, 250, 1000, 77);
  }
}
