/* KV cache formats on the CPU backend (the reference; the CUDA backend is checked against it in
 * test-backend-cuda):
 *  - the conversions of kv-format.h: bf16 equals ppx_f32_to_bf16; e4m3 round-trips all 254 finite codes,
 *    picks the nearest code with ties to even (checked against a brute-force search over every code),
 *    saturates at +-448 and keeps NaN;
 *  - ppx_kv_cache_new: sizes, types, zero fill, errors;
 *  - ppx_op_attention over F32, BF16 and FP8 caches, several calls so the rings wrap, T > 1, context
 *    below and above cap: each format's output equals, bit for bit, a naive attention written here over
 *    the rows as that format stores them (for F32: the unconverted rows, i.e. the op's numerics are
 *    unchanged), the caches hold exactly the converted rows and scales, and the BF16/FP8 outputs stay
 *    within a bound of the F32 output that is derived from the stored rows' actual errors:
 *    |out' - out| <= (exp(2 eps) - 1) max|v| + max|dv| + 1e-5 per (row, head), where eps bounds the score
 *    errors |q . dk| / sqrt(Dh) and dv the value errors (softmax weights move by at most a factor
 *    exp(+-2 eps)). The observed errors are printed with --verbose. */
#include <math.h>

#include "backend.h"
#include "backend-impl.h"
#include "kv-format.h"
#include "test-util.h"

static GRand *rng;

/* ---- conversions ---- */

static void
test_bf16 (void)
{
  const float special[] = {0.0f, -0.0f, 1.0f, -1.0f, 1.00390625f, 1.01171875f, 3.4e38f, -3.4e38f, 1e-40f,
                           INFINITY, -INFINITY, NAN};
  for (guint i = 0; i < G_N_ELEMENTS (special); i++)
    g_assert_cmpuint (ppx_kv_to_bf16 (special[i]), ==, ppx_f32_to_bf16 (special[i]));
  for (int i = 0; i < 200000; i++) {
    uint32_t u = g_rand_int (rng);
    float f;
    memcpy (&f, &u, 4);
    const uint16_t b = ppx_kv_to_bf16 (f);
    g_assert_cmpuint (b, ==, ppx_f32_to_bf16 (f));
    if (isfinite (f) && fabsf (f) < 3e38f && fabsf (f) > 1e-37f) {
      const float back = ppx_kv_from_bf16 (b);
      g_assert_cmpfloat (fabsf (back - f), <=, fabsf (f) * 0x1p-8f);
    }
  }
}

/* The e4m3 code nearest to v among all finite codes, ties to the even code; |v| > 448 saturates. */
static uint8_t
e4m3_brute (float v)
{
  if (isnan (v))
    return v < 0 || signbit (v) ? 0xff : 0x7f;
  const uint8_t sign = signbit (v) ? 0x80 : 0;
  const double a = fabs ((double) v);
  if (a >= 448.0)
    return sign | 0x7e;
  int best = 0;
  double best_d = INFINITY;
  for (int c = 0; c <= 0x7e; c++) {
    const double d = fabs ((double) ppx_kv_from_e4m3 ((uint8_t) c) - a);
    if (d < best_d || (d == best_d && (c & 1) == 0 && (best & 1) == 1)) {
      best = c;
      best_d = d;
    }
  }
  return sign | (uint8_t) best;
}

static void
test_e4m3 (void)
{
  /* every finite code round-trips; the decoded values are the e4m3fn grid */
  for (int c = 0; c < 256; c++) {
    const float v = ppx_kv_from_e4m3 ((uint8_t) c);
    if ((c & 0x7f) == 0x7f) {
      g_assert_true (isnan (v));
      g_assert_cmpuint (ppx_kv_to_e4m3 (v) & 0x7f, ==, 0x7f);
      continue;
    }
    g_assert_cmpuint (ppx_kv_to_e4m3 (v), ==, (uint8_t) c);
  }
  g_assert_cmpfloat (ppx_kv_from_e4m3 (0x7e), ==, 448.0f);
  g_assert_cmpfloat (ppx_kv_from_e4m3 (0x01), ==, 0x1p-9f);
  g_assert_cmpfloat (ppx_kv_from_e4m3 (0x08), ==, 0x1p-6f);
  g_assert_cmpfloat (ppx_kv_from_e4m3 (0xb1), ==, -0x1.2p-1f);
  /* saturation and specials */
  g_assert_cmpuint (ppx_kv_to_e4m3 (448.0f), ==, 0x7e);
  g_assert_cmpuint (ppx_kv_to_e4m3 (463.9f), ==, 0x7e);
  g_assert_cmpuint (ppx_kv_to_e4m3 (1e30f), ==, 0x7e);
  g_assert_cmpuint (ppx_kv_to_e4m3 (INFINITY), ==, 0x7e);
  g_assert_cmpuint (ppx_kv_to_e4m3 (-INFINITY), ==, 0xfe);
  g_assert_cmpuint (ppx_kv_to_e4m3 (0x1p-11f), ==, 0x00); /* a quarter of the smallest subnormal */
  g_assert_cmpuint (ppx_kv_to_e4m3 (0x1p-10f), ==, 0x00); /* half of it: tie to even 0 */
  g_assert_cmpuint (ppx_kv_to_e4m3 (0x1.8p-10f), ==, 0x01);
  g_assert_cmpuint (ppx_kv_to_e4m3 (0x1.8p-9f), ==, 0x02); /* 1.5 subnormal steps: tie to even 2 */
  g_assert_cmpuint (ppx_kv_to_e4m3 (1.0625f), ==, 0x38);   /* halfway 1 .. 1.125: to even 1 */
  g_assert_cmpuint (ppx_kv_to_e4m3 (1.1875f), ==, 0x3a);   /* halfway 1.125 .. 1.25: to even 1.25 */
  /* random values over the whole range (log-uniform magnitudes 2^-14 .. 2^10), and exact midpoints */
  for (int i = 0; i < 300000; i++) {
    float v = (float) (exp2 (g_rand_double_range (rng, -14.0, 10.0)) * (g_rand_boolean (rng) ? 1 : -1));
    if (i % 3 == 0) {
      const int c = g_rand_int_range (rng, 0, 0x7e);
      v = (ppx_kv_from_e4m3 ((uint8_t) c) + ppx_kv_from_e4m3 ((uint8_t) (c + 1))) * 0.5f * (v < 0 ? -1.0f : 1.0f);
    }
    const uint8_t got = ppx_kv_to_e4m3 (v), want = e4m3_brute (v);
    if (got != want)
      g_error ("e4m3(%a) = 0x%02x, nearest code is 0x%02x", v, got, want);
  }
}

/* ---- caches ---- */

static void
test_cache_new (void)
{
  g_autoptr (GError) err = NULL;
  PpxBackend *be = ppx_backend_cpu_new (1, &err);
  g_assert_no_error (err);
  const PpxKvFormat fmts[] = {PPX_KV_AUTO, PPX_KV_F32, PPX_KV_BF16, PPX_KV_FP8};
  const PpxTensorType types[] = {PPX_TENSOR_BF16, PPX_TENSOR_F32, PPX_TENSOR_BF16, PPX_TENSOR_FP8};
  const int n_slots = 3, cap = 7, H = 2, Dh = 6; /* 252 values: FP8 scales start at byte 256 */
  for (guint i = 0; i < G_N_ELEMENTS (fmts); i++) {
    const guint64 before = ppx_backend_allocated_bytes (be);
    PpxTensor *t = ppx_kv_cache_new (be, ppx_kv_storage (fmts[i]), n_slots, cap, H, Dh, &err);
    g_assert_no_error (err);
    g_assert_cmpint (ppx_tensor_type (t), ==, types[i]);
    g_assert_cmpuint (ppx_tensor_numel (t), ==, n_slots * cap * H * Dh);
    const guint64 bytes = ppx_kv_cache_bytes (ppx_kv_storage (fmts[i]), n_slots, cap, H, Dh);
    const guint64 want = types[i] == PPX_TENSOR_F32 ? 252 * 4 : types[i] == PPX_TENSOR_BF16 ? 252 * 2
                                                                                             : 256 + 3 * 7 * 2 * 4;
    g_assert_cmpuint (bytes, ==, want);
    g_assert_cmpuint (ppx_tensor_bytes (t), ==, bytes);
    g_assert_cmpuint (ppx_backend_allocated_bytes (be), ==, before + bytes);
    g_autofree guint8 *raw = g_malloc (bytes);
    memset (raw, 0xaa, bytes);
    ppx_tensor_download_raw (t, raw);
    for (guint64 b = 0; b < bytes; b++)
      g_assert_cmpuint (raw[b], ==, 0);
    ppx_tensor_free (t);
    g_assert_cmpuint (ppx_backend_allocated_bytes (be), ==, before);
  }
  /* the 7B at full context: 32 layers x (K, V) x 3000 x 4096 per session */
  g_assert_cmpuint (64 * ppx_kv_cache_bytes (ppx_kv_storage (PPX_KV_BF16), 1, 3000, 32, 128), ==, 1572864000ull);
  g_assert_cmpuint (64 * ppx_kv_cache_bytes (ppx_kv_storage (PPX_KV_FP8), 1, 3000, 32, 128), ==, 786432000ull + 24576000ull);
  g_assert_null (ppx_kv_cache_new (be, ppx_kv_storage (PPX_KV_FP8), 0, 7, 2, 6, &err));
  g_assert_error (err, PPX_ERROR, PPX_ERROR_INVALID);
  g_clear_error (&err);
  g_assert_null (ppx_kv_cache_new (be, PPX_TENSOR_I32, 1, 7, 2, 6, &err));
  g_assert_error (err, PPX_ERROR, PPX_ERROR_INVALID);
  g_clear_error (&err);
  g_assert_null (ppx_kv_cache_new (be, (PpxTensorType) 42, 1, 7, 2, 6, &err));
  g_assert_error (err, PPX_ERROR, PPX_ERROR_INVALID);
  g_clear_error (&err);
  g_assert_null (ppx_tensor_new (be, PPX_TENSOR_FP8, 16, &err));
  g_assert_error (err, PPX_ERROR, PPX_ERROR_INVALID);
  g_clear_error (&err);
  /* a plain BF16 tensor: two bytes an element, raw bits in and out, views in elements */
  PpxTensor *b = ppx_tensor_new (be, PPX_TENSOR_BF16, 5, &err);
  g_assert_no_error (err);
  g_assert_cmpuint (ppx_tensor_bytes (b), ==, 10);
  const uint16_t in[3] = {0x3f80, 0xc000, 0x1234};
  ppx_tensor_upload (b, 2, in, 3);
  PpxTensor *v = ppx_tensor_view (b, 1, 4);
  uint16_t outv[4];
  ppx_tensor_download (v, 0, outv, 4);
  g_assert_cmpuint (outv[0], ==, 0);
  g_assert_cmpuint (outv[1], ==, 0x3f80);
  g_assert_cmpuint (outv[3], ==, 0x1234);
  ppx_tensor_free (v);
  ppx_tensor_free (b);
  ppx_backend_free (be);
}

/* ---- attention ---- */

/* What the test keeps per format: the rows as the cache stores them, decoded to f32
 * ([n_slots, cap, HD]), from which the expected output and the expected cache bytes follow. */
typedef struct {
  PpxKvFormat fmt;
  PpxTensor *kc, *vc;
  float *kref, *vref;   /* decoded stored rows */
  guint8 *kraw, *vraw;  /* expected raw cache bytes */
} FmtState;

/* Stores one head row v[Dh] the way the format does; writes decoded values to dec, raw bytes to raw. */
static void
store_row (PpxKvFormat fmt, const float *v, int Dh, float *dec, guint8 *raw_vals, float *raw_scale)
{
  switch (fmt) {
    case PPX_KV_F32:
      memcpy (dec, v, Dh * sizeof (float));
      memcpy (raw_vals, v, Dh * sizeof (float));
      break;
    case PPX_KV_BF16:
    case PPX_KV_AUTO:
      for (int d = 0; d < Dh; d++) {
        uint16_t b = ppx_kv_to_bf16 (v[d]);
        memcpy (raw_vals + 2 * d, &b, 2);
        dec[d] = ppx_kv_from_bf16 (b);
      }
      break;
    case PPX_KV_FP8: {
      float amax = 0.0f;
      for (int d = 0; d < Dh; d++)
        amax = fmaxf (amax, fabsf (v[d]));
      const float s = amax / 448.0f, inv = amax > 0 ? 448.0f / amax : 0.0f;
      for (int d = 0; d < Dh; d++) {
        raw_vals[d] = ppx_kv_to_e4m3 (v[d] * inv);
        dec[d] = ppx_kv_from_e4m3 (raw_vals[d]) * s;
      }
      *raw_scale = s;
      break;
    }
  }
}

/* The op's documented semantics over f32 caches, in the CPU backend's order of operations. */
static void
naive_attention (const float *x, const int32_t *p, const int32_t *slots, const float *kc, const float *vc, float *o,
                 int M, int T, int H, int Dh, int cap, int context)
{
  const gsize HD = (gsize) H * Dh, width = 3 * HD;
  const float scale = 1.0f / sqrtf ((float) Dh);
  g_autofree float *scores = g_new (float, cap);
  for (int m = 0; m < M; m++) {
    const float *ks = kc + (gsize) slots[m] * cap * HD, *vs = vc + (gsize) slots[m] * cap * HD;
    const int64_t E = (int64_t) p[(gsize) m * T + T - 1] + 1;
    for (int t = 0; t < T; t++) {
      gsize row = (gsize) m * T + t;
      int64_t q = p[row];
      int64_t lo = MAX (MAX ((int64_t) 0, E - cap + 1), q - context + 1);
      int n = (int) (q - lo + 1);
      for (int h = 0; h < H; h++) {
        const float *qv = x + row * width + (gsize) h * Dh;
        float mx = -INFINITY;
        for (int j = 0; j < n; j++) {
          const float *kv = ks + (gsize) ((lo + j) % cap) * HD + (gsize) h * Dh;
          float s = 0.0f;
          for (int d = 0; d < Dh; d++)
            s += qv[d] * kv[d];
          s *= scale;
          scores[j] = s;
          mx = MAX (mx, s);
        }
        float sum = 0.0f;
        for (int j = 0; j < n; j++) {
          scores[j] = expf (scores[j] - mx);
          sum += scores[j];
        }
        float *ov = o + row * HD + (gsize) h * Dh;
        memset (ov, 0, Dh * sizeof (float));
        for (int j = 0; j < n; j++) {
          const float *vv = vs + (gsize) ((lo + j) % cap) * HD + (gsize) h * Dh;
          float w = scores[j] / sum;
          for (int d = 0; d < Dh; d++)
            ov[d] += w * vv[d];
        }
      }
    }
  }
}

static gsize
elem_size (PpxKvFormat f)
{
  return f == PPX_KV_F32 ? 4 : f == PPX_KV_FP8 ? 1 : 2;
}

static void
check_attention (int M, int T, int H, int Dh, int cap, int context, int calls, double value_range)
{
  g_autoptr (GError) err = NULL;
  PpxBackend *be = ppx_backend_cpu_new (1, &err);
  g_assert_no_error (err);
  const int n_slots = M + 2;
  const gsize HD = (gsize) H * Dh, nv = (gsize) n_slots * cap * HD;
  const PpxKvFormat fmts[] = {PPX_KV_F32, PPX_KV_BF16, PPX_KV_FP8};
  FmtState st[3];
  for (int f = 0; f < 3; f++) {
    st[f].fmt = fmts[f];
    st[f].kc = ppx_kv_cache_new (be, ppx_kv_storage (fmts[f]), n_slots, cap, H, Dh, &err);
    g_assert_no_error (err);
    st[f].vc = ppx_kv_cache_new (be, ppx_kv_storage (fmts[f]), n_slots, cap, H, Dh, &err);
    g_assert_no_error (err);
    st[f].kref = g_new0 (float, nv);
    st[f].vref = g_new0 (float, nv);
    st[f].kraw = g_malloc0 (ppx_tensor_bytes (st[f].kc));
    st[f].vraw = g_malloc0 (ppx_tensor_bytes (st[f].vc));
  }
  g_autofree int32_t *slots = g_new (int32_t, M);
  for (int m = 0; m < M; m++)
    slots[m] = (m * 2 + 1) % n_slots; /* out of order, some slots unused */
  PpxTensor *sl = ppx_tensor_new (be, PPX_TENSOR_I32, M, &err);
  ppx_tensor_upload (sl, 0, slots, M);
  PpxTensor *pt = ppx_tensor_new (be, PPX_TENSOR_I32, (gsize) M * T, &err);
  PpxTensor *qkv = ppx_tensor_new (be, PPX_TENSOR_F32, (gsize) M * T * 3 * HD, &err);
  PpxTensor *out = ppx_tensor_new (be, PPX_TENSOR_F32, (gsize) M * T * HD, &err);
  g_autofree int32_t *pos = g_new (int32_t, M * T);
  g_autofree float *x = g_new (float, (gsize) M * T * 3 * HD);
  g_autofree float *got = g_new (float, (gsize) M * T * HD), *want = g_new (float, (gsize) M * T * HD);
  g_autofree float *ref32 = g_new (float, (gsize) M * T * HD);
  double worst[3] = {0}, worst_bound[3] = {0};
  for (int c = 0; c < calls; c++) {
    for (int m = 0; m < M; m++)
      for (int t = 0; t < T; t++)
        pos[m * T + t] = 2 * m + c * T + t;
    for (gsize i = 0; i < (gsize) M * T * 3 * HD; i++)
      x[i] = (float) g_rand_double_range (rng, -value_range, value_range);
    ppx_tensor_upload (pt, 0, pos, (gsize) M * T);
    ppx_tensor_upload (qkv, 0, x, (gsize) M * T * 3 * HD);
    for (int f = 0; f < 3; f++) {
      FmtState *s = &st[f];
      const gsize es = elem_size (s->fmt);
      float *kscales = (float *) (s->kraw + ppx_kv_scale_offset (nv)), *vscales = (float *) (s->vraw + ppx_kv_scale_offset (nv));
      /* the expected stores, rows of a session in order */
      for (int m = 0; m < M; m++)
        for (int t = 0; t < T; t++) {
          const gsize row = (gsize) m * T + t, r = (gsize) (pos[row] % cap);
          for (int h = 0; h < H; h++) {
            const gsize at = ((gsize) slots[m] * cap + r) * HD + (gsize) h * Dh;
            const gsize si = ((gsize) slots[m] * H + h) * cap + r;
            store_row (s->fmt, x + row * 3 * HD + HD + (gsize) h * Dh, Dh, s->kref + at, s->kraw + at * es,
                       s->fmt == PPX_KV_FP8 ? kscales + si : NULL);
            store_row (s->fmt, x + row * 3 * HD + 2 * HD + (gsize) h * Dh, Dh, s->vref + at, s->vraw + at * es,
                       s->fmt == PPX_KV_FP8 ? vscales + si : NULL);
          }
        }
      ppx_op_attention (be, qkv, pt, sl, s->kc, s->vc, out, M, T, H, Dh, cap, context);
      ppx_tensor_download (out, 0, got, (gsize) M * T * HD);
      naive_attention (x, pos, slots, s->kref, s->vref, want, M, T, H, Dh, cap, context);
      for (gsize i = 0; i < (gsize) M * T * HD; i++)
        if (memcmp (&got[i], &want[i], 4) != 0)
          g_error ("%s cache, M=%d T=%d H=%d Dh=%d cap=%d ctx=%d call %d: output %" G_GSIZE_FORMAT
                   " is %.9g, the naive attention over the stored rows gives %.9g",
                   ppx_kv_format_name (s->fmt), M, T, H, Dh, cap, context, c, i, got[i], want[i]);
      if (f == 0) {
        memcpy (ref32, got, (gsize) M * T * HD * sizeof (float));
        continue;
      }
      /* the error against the f32 cache, within the bound its stored rows' errors imply */
      const float *kf = st[0].kref, *vf = st[0].vref;
      for (int m = 0; m < M; m++)
        for (int t = 0; t < T; t++) {
          const gsize row = (gsize) m * T + t;
          const int64_t E = (int64_t) pos[(gsize) m * T + T - 1] + 1, q = pos[row];
          const int64_t lo = MAX (MAX ((int64_t) 0, E - cap + 1), q - context + 1);
          for (int h = 0; h < H; h++) {
            double eps = 0, vmax = 0, dv = 0;
            for (int64_t p = lo; p <= q; p++) {
              const gsize at = ((gsize) slots[m] * cap + (gsize) (p % cap)) * HD + (gsize) h * Dh;
              double ds = 0;
              for (int d = 0; d < Dh; d++) {
                ds += fabs (x[row * 3 * HD + (gsize) h * Dh + d]) * fabs ((double) s->kref[at + d] - kf[at + d]);
                vmax = MAX (vmax, fabs (vf[at + d]));
                dv = MAX (dv, fabs ((double) s->vref[at + d] - vf[at + d]));
              }
              eps = MAX (eps, ds / sqrt ((double) Dh));
            }
            const double bound = expm1 (2 * eps) * vmax + dv + 1e-5 * MAX (1.0, vmax);
            for (int d = 0; d < Dh; d++) {
              const gsize i = row * HD + (gsize) h * Dh + d;
              const double e = fabs ((double) got[i] - ref32[i]);
              if (!(e <= bound))
                g_error ("%s cache: output %" G_GSIZE_FORMAT " differs from the f32 cache's by %.3g > bound %.3g",
                         ppx_kv_format_name (s->fmt), i, e, bound);
              worst[f] = MAX (worst[f], e);
              worst_bound[f] = MAX (worst_bound[f], bound);
            }
          }
        }
    }
  }
  for (int f = 0; f < 3; f++) {
    /* the caches hold exactly the converted rows (and scales) */
    const gsize bytes = ppx_tensor_bytes (st[f].kc);
    g_autofree guint8 *kb = g_malloc (bytes), *vb = g_malloc (bytes);
    ppx_tensor_download_raw (st[f].kc, kb);
    ppx_tensor_download_raw (st[f].vc, vb);
    g_assert_cmpmem (kb, bytes, st[f].kraw, bytes);
    g_assert_cmpmem (vb, bytes, st[f].vraw, bytes);
    if (f > 0 && g_test_verbose ())
      g_printerr ("  M=%d T=%d H=%d Dh=%d cap=%d ctx=%d: %s max |out - out_f32| %.3g (largest bound %.3g)\n", M, T, H,
                  Dh, cap, context, ppx_kv_format_name (st[f].fmt), worst[f], worst_bound[f]);
    ppx_tensor_free (st[f].kc);
    ppx_tensor_free (st[f].vc);
    g_free (st[f].kref);
    g_free (st[f].vref);
    g_free (st[f].kraw);
    g_free (st[f].vraw);
  }
  ppx_tensor_free (sl);
  ppx_tensor_free (pt);
  ppx_tensor_free (qkv);
  ppx_tensor_free (out);
  g_assert_cmpuint (ppx_backend_allocated_bytes (be), ==, 0);
  ppx_backend_free (be);
}

static void
test_attention (void)
{
  check_attention (2, 2, 3, 16, 8, 6, 7, 1.0);     /* T = 2, context < cap, the rings wrap */
  check_attention (3, 1, 2, 64, 5, 100, 9, 1.0);   /* context > cap: the ring limits the window */
  check_attention (1, 3, 4, 128, 16, 16, 8, 3.0);  /* the 7B's head size */
  check_attention (2, 4, 2, 24, 3, 3, 3, 1.0);     /* T > cap: the earliest rows see no key (zeros) */
  check_attention (1, 1, 2, 32, 40, 40, 50, 4.0);  /* larger values: scores of about +-10 */
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  rng = g_rand_new_with_seed (20260214);
  g_test_add_func ("/kv/bf16", test_bf16);
  g_test_add_func ("/kv/e4m3", test_e4m3);
  g_test_add_func ("/kv/cache-new", test_cache_new);
  g_test_add_func ("/kv/attention", test_attention);
  int rc = g_test_run ();
  g_rand_free (rng);
  return rc;
}
