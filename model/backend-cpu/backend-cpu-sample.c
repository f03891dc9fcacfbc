/* CPU backend: token sampling (greedy, or temperature + top-k with the exponential race) and teacher
 * forcing. The RNG is Philox (philox.h); docs/sampling.md describes the draw. */
#include "backend-cpu.h"
#include "philox.h"

#include <math.h>
#include <stdlib.h>

typedef struct {
  float p;
  int i;
} Cand;

static int
cand_cmp (const void *a, const void *b)
{
  const Cand *x = a, *y = b;
  if (x->p != y->p)
    return x->p > y->p ? -1 : 1;
  return x->i - y->i;
}

/* Heap helpers: a min-heap under cand_cmp's order keeps the k best candidates with the worst at
 * the root (cand_cmp(a, b) < 0 means a ranks before b). */
static void
sift_down (Cand *h, int n, int i)
{
  for (;;) {
    int w = i, l = 2 * i + 1, r = l + 1;
    if (l < n && cand_cmp (&h[l], &h[w]) > 0)
      w = l;
    if (r < n && cand_cmp (&h[r], &h[w]) > 0)
      w = r;
    if (w == i)
      return;
    Cand t = h[i];
    h[i] = h[w];
    h[w] = t;
    i = w;
  }
}

/* Moves the k best of c[0..V) (by probability, then index) to c[0..k), sorted: O(V log k). */
static void
select_top_k (Cand *c, int V, int k)
{
  for (int i = k / 2 - 1; i >= 0; i--)
    sift_down (c, k, i);
  for (int i = k; i < V; i++) {
    if (cand_cmp (&c[i], &c[0]) < 0) {
      c[0] = c[i];
      sift_down (c, k, 0);
    }
  }
  qsort (c, k, sizeof (Cand), cand_cmp);
}

static int
argmax_first (const float *v, int n)
{
  int best = 0;
  for (int i = 1; i < n; i++)
    if (v[i] > v[best])
      best = i;
  return best;
}

void
ppx_cpu_sample (PpxBackend *be, const PpxTensor *logits, int V, PpxTensor *tokens, int tok_off, int tok_stride,
                const PpxTensor *params, int stream, int M)
{
  const float *L = F32 (logits);
  int32_t *tok = I32 (tokens);
  const uint32_t *all = (const uint32_t *) params->data;
  Cand *c = NULL;
  for (int m = 0; m < M; m++) {
    const float *l = L + (gsize) m * V;
    const uint32_t *s = all + (gsize) m * PPX_SAMPLE_PARAMS;
    float temp;
    memcpy (&temp, &s[stream == 0 ? PPX_SAMPLE_TEMP_TEXT : PPX_SAMPLE_TEMP_AUDIO], sizeof temp);
    const int topk = (int) s[stream == 0 ? PPX_SAMPLE_TOPK_TEXT : PPX_SAMPLE_TOPK_AUDIO];
    int out;
    if (temp <= 0.0f || topk == 1) {
      out = argmax_first (l, V);
    } else {
      if (!c)
        c = g_new (Cand, V);
      float mx = l[argmax_first (l, V)], sum = 0.0f;
      for (int i = 0; i < V; i++) {
        c[i].p = expf ((l[i] - mx) / temp);
        c[i].i = i;
        sum += c[i].p;
      }
      for (int i = 0; i < V; i++)
        c[i].p /= sum;
      int k = (topk <= 0 || topk > V) ? V : topk;
      select_top_k (c, V, k);
      uint64_t seed = (uint64_t) s[PPX_SAMPLE_SEED_LO] | ((uint64_t) s[PPX_SAMPLE_SEED_HI] << 32);
      uint64_t frame = (uint64_t) s[PPX_SAMPLE_FRAME_LO] | ((uint64_t) s[PPX_SAMPLE_FRAME_HI] << 32);
      uint64_t draw = frame * 64 + (uint64_t) stream;
      int best = 0;
      float best_v = -1.0f;
      for (int j = 0; j < k; j++) {
        float q = -logf (ppx_philox_uniform (seed, draw, (uint32_t) j)); /* Exp(1) */
        float v = c[j].p / q;
        if (v > best_v) {
          best_v = v;
          best = j;
        }
      }
      out = c[best].i;
    }
    tok[(gsize) m * tok_stride + tok_off] = out;
  }
  g_free (c);
}

void
ppx_cpu_force_tokens (PpxBackend *be, PpxTensor *tokens, int off, int stride, const PpxTensor *forced, int foff,
                      int fstride, int M)
{
  int32_t *t = I32 (tokens);
  const int32_t *f = I32 (forced);
  for (int m = 0; m < M; m++) {
    int32_t v = f[(gsize) m * fstride + foff];
    if (v >= 0)
      t[(gsize) m * stride + off] = v;
  }
}
