/* Sampling on the CPU backend: greedy is the first argmax; temperature + top-k draws follow the
 * softmax restricted to the top k; draws depend only on (seed, frame, stream). */
#include <math.h>

#include "backend.h"
#include "philox.h"
#include "test-util.h"

static PpxBackend *be;

static int
draw (const float *logits, int V, guint64 seed, guint64 frame, int stream, float temp, int topk)
{
  g_autoptr (GError) err = NULL;
  PpxTensor *l = ppx_tensor_new (be, PPX_TENSOR_F32, V, &err), *tok = ppx_tensor_new (be, PPX_TENSOR_I32, 1, &err),
            *rng = ppx_tensor_new (be, PPX_TENSOR_I32, PPX_SAMPLE_PARAMS, &err);
  ppx_tensor_upload (l, 0, logits, V);
  uint32_t r[PPX_SAMPLE_PARAMS];
  /* the stream's own parameters; the other kind's are deliberately different */
  if (stream == 0)
    ppx_sample_params_set (r, seed, frame, temp, topk, 5.0f, 3);
  else
    ppx_sample_params_set (r, seed, frame, 0.0f, 1, temp, topk);
  ppx_tensor_upload (rng, 0, r, PPX_SAMPLE_PARAMS);
  ppx_op_sample (be, l, V, tok, 0, 1, rng, stream, 1);
  int32_t t;
  ppx_tensor_download (tok, 0, &t, 1);
  ppx_tensor_free (l);
  ppx_tensor_free (tok);
  ppx_tensor_free (rng);
  return t;
}

static void
test_greedy (void)
{
  float l[6] = {0.1f, 2.0f, -1.0f, 2.0f, 1.9f, 0.0f};
  g_assert_cmpint (draw (l, 6, 1, 0, 0, 0.0f, 25), ==, 1); /* first index on ties */
  g_assert_cmpint (draw (l, 6, 1, 0, 0, 0.7f, 1), ==, 1);  /* top-1 is greedy */
}

static void
test_distribution (void)
{
  const int V = 8, N = 20000, K = 3;
  float l[8] = {1.0f, 0.5f, 2.0f, -1.0f, 0.0f, 1.5f, -2.0f, 0.2f};
  const float temp = 0.8f;
  int counts[8] = {0};
  for (int i = 0; i < N; i++)
    counts[draw (l, V, 7, (guint64) i, 3, temp, K)]++;
  /* expected: softmax(l / temp) over the top 3 (indices 2, 5, 0), renormalised */
  double p[3] = {exp (2.0 / temp), exp (1.5 / temp), exp (1.0 / temp)}, z = p[0] + p[1] + p[2];
  int idx[3] = {2, 5, 0};
  int in_top = 0;
  for (int j = 0; j < 3; j++) {
    double expect = p[j] / z, got = (double) counts[idx[j]] / N;
    g_assert_cmpfloat (fabs (got - expect), <, 0.015);
    in_top += counts[idx[j]];
  }
  g_assert_cmpint (in_top, ==, N); /* nothing outside the top k */
}

static void
test_reproducible (void)
{
  const int V = 64;
  float l[64];
  for (int i = 0; i < V; i++)
    l[i] = (float) sin (i * 0.37) * 2.0f;
  int same = 0, diff_seed = 0, diff_stream = 0;
  for (int f = 0; f < 200; f++) {
    int a = draw (l, V, 42, f, 1, 1.0f, 0);
    same += a == draw (l, V, 42, f, 1, 1.0f, 0);
    diff_seed += a != draw (l, V, 43, f, 1, 1.0f, 0);
    diff_stream += a != draw (l, V, 42, f, 2, 1.0f, 0);
  }
  g_assert_cmpint (same, ==, 200);
  g_assert_cmpint (diff_seed, >, 100);
  g_assert_cmpint (diff_stream, >, 100);
}

static void
test_philox_known_answer (void)
{
  /* Random123's published known-answer vector for philox4x32-10 with all-ones counter and key. */
  uint32_t ctr[4] = {0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}, key[2] = {0xffffffffu, 0xffffffffu};
  uint32_t out[4];
  ppx_philox4x32 (ctr, key, out);
  g_assert_cmphex (out[0], ==, 0x408f276du);
  g_assert_cmphex (out[1], ==, 0x41c83b0eu);
  g_assert_cmphex (out[2], ==, 0xa20bc7c6u);
  g_assert_cmphex (out[3], ==, 0x6d5451fdu);
}

/* The documented draw, written out plainly: softmax, full sort by (p desc, index asc), top k,
 * exponential race with Philox. The backend must give the same token. */
typedef struct {
  float p;
  int i;
} RefCand;

static int
ref_cmp (const void *a, const void *b)
{
  const RefCand *x = a, *y = b;
  if (x->p != y->p)
    return x->p > y->p ? -1 : 1;
  return x->i - y->i;
}

static int
reference_draw (const float *l, int V, guint64 seed, guint64 frame, int stream, float temp, int topk)
{
  RefCand *c = g_new (RefCand, V);
  float mx = l[0], sum = 0.0f;
  for (int i = 1; i < V; i++)
    mx = MAX (mx, l[i]);
  for (int i = 0; i < V; i++) {
    c[i].p = expf ((l[i] - mx) / temp);
    c[i].i = i;
    sum += c[i].p;
  }
  for (int i = 0; i < V; i++)
    c[i].p /= sum;
  qsort (c, V, sizeof (RefCand), ref_cmp);
  int k = (topk <= 0 || topk > V) ? V : topk, best = 0;
  float best_v = -1.0f;
  for (int j = 0; j < k; j++) {
    float v = c[j].p / -logf (ppx_philox_uniform (seed, frame * 64 + (guint64) stream, (uint32_t) j));
    if (v > best_v) {
      best_v = v;
      best = j;
    }
  }
  int out = c[best].i;
  g_free (c);
  return out;
}

static void
test_matches_reference (void)
{
  const int V = 300;
  float l[300];
  const int ks[] = {0, 2, 25, 250, 299, 300, 1000};
  for (int trial = 0; trial < 40; trial++) {
    for (int i = 0; i < V; i++) /* coarse values: many exact ties */
      l[i] = (float) ((i * 7919 + trial * 104729) % 13) * 0.25f;
    for (guint j = 0; j < G_N_ELEMENTS (ks); j++)
      g_assert_cmpint (draw (l, V, 99, trial, 5, 0.9f, ks[j]), ==, reference_draw (l, V, 99, trial, 5, 0.9f, ks[j]));
  }
}

/* One call over M rows, each with its own seed, frame, temperature and top-k (greedy rows among them),
 * gives every row the token it gets alone: a row's draw never depends on the other rows. */
static void
test_per_row (void)
{
  const int V = 97, M = 7;
  g_autoptr (GError) err = NULL;
  g_autofree float *l = g_new (float, M * V);
  for (int i = 0; i < M * V; i++)
    l[i] = (float) sin (i * 0.731) * 3.0f;
  const float temps[7] = {0.7f, 0.0f, 1.2f, 0.8f, 0.0f, 2.0f, 0.9f};
  const int topks[7] = {25, 250, 0, 1, 5, 3, 96};
  PpxTensor *lt = ppx_tensor_new (be, PPX_TENSOR_F32, (gsize) M * V, &err),
            *tok = ppx_tensor_new (be, PPX_TENSOR_I32, (gsize) M * 3, &err),
            *params = ppx_tensor_new (be, PPX_TENSOR_I32, (gsize) M * PPX_SAMPLE_PARAMS, &err);
  g_assert_no_error (err);
  ppx_tensor_upload (lt, 0, l, (gsize) M * V);
  for (int stream = 0; stream < 3; stream++) {
    for (int f = 0; f < 20; f++) {
      uint32_t p[7 * PPX_SAMPLE_PARAMS];
      for (int m = 0; m < M; m++) /* text and audio parameters swapped between neighbours */
        ppx_sample_params_set (p + m * PPX_SAMPLE_PARAMS, 1000 + m, f * 3 + m, temps[m], topks[m], temps[(m + 1) % M],
                               topks[(m + 1) % M]);
      ppx_tensor_upload (params, 0, p, (gsize) M * PPX_SAMPLE_PARAMS);
      ppx_op_sample (be, lt, V, tok, 1, 3, params, stream, M);
      int32_t got[21];
      ppx_tensor_download (tok, 0, got, (gsize) M * 3);
      for (int m = 0; m < M; m++) {
        const int k = stream == 0 ? m : (m + 1) % M;
        g_assert_cmpint (got[m * 3 + 1], ==, draw (l + m * V, V, 1000 + m, f * 3 + m, stream, temps[k], topks[k]));
      }
    }
  }
  ppx_tensor_free (lt);
  ppx_tensor_free (tok);
  ppx_tensor_free (params);
}

static void
test_force (void)
{
  g_autoptr (GError) err = NULL;
  PpxTensor *t = ppx_tensor_new (be, PPX_TENSOR_I32, 4, &err), *f = ppx_tensor_new (be, PPX_TENSOR_I32, 4, &err);
  int32_t tv[4] = {10, 11, 12, 13}, fv[4] = {-1, 5, -1, 7}, out[4];
  ppx_tensor_upload (t, 0, tv, 4);
  ppx_tensor_upload (f, 0, fv, 4);
  ppx_op_force_tokens (be, t, 0, 1, f, 0, 1, 4);
  ppx_tensor_download (t, 0, out, 4);
  g_assert_cmpint (out[0], ==, 10);
  g_assert_cmpint (out[1], ==, 5);
  g_assert_cmpint (out[2], ==, 12);
  g_assert_cmpint (out[3], ==, 7);
  ppx_tensor_free (t);
  ppx_tensor_free (f);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  be = ppx_backend_cpu_new (1, NULL);
  g_test_add_func ("/sampling/greedy", test_greedy);
  g_test_add_func ("/sampling/distribution", test_distribution);
  g_test_add_func ("/sampling/reproducible", test_reproducible);
  g_test_add_func ("/sampling/philox-known-answer", test_philox_known_answer);
  g_test_add_func ("/sampling/force-tokens", test_force);
  g_test_add_func ("/sampling/matches-reference", test_matches_reference);
  g_test_add_func ("/sampling/per-row", test_per_row);
  int rc = g_test_run ();
  ppx_backend_free (be);
  return rc;
}
