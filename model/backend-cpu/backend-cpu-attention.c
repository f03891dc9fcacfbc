/* CPU backend: rotary embeddings and causal attention over ring KV caches. */
#include "backend-cpu.h"

#include <math.h>

void
ppx_cpu_rope (PpxBackend *be, PpxTensor *qkv, const PpxTensor *pos, gsize rows, int H, int Dh, float max_period)
{
  float *x = F32 (qkv);
  const int32_t *p = I32 (pos);
  const int half = Dh / 2;
  /* The reference forms the constant in double and multiplies in f32: freq_i = exp(f32(i) * c). */
  const float c = (float) (-log ((double) max_period) * 2.0 / (double) Dh);
  const gsize width = (gsize) 3 * H * Dh;
  for (gsize r = 0; r < rows; r++) {
    float t = (float) p[r];
    for (int i = 0; i < half; i++) {
      float freq = expf ((float) i * c);
      float ang = freq * t;
      float cs = cosf (ang), sn = sinf (ang);
      for (int part = 0; part < 2; part++) { /* q, then k */
        float *base = x + r * width + (gsize) part * H * Dh;
        for (int h = 0; h < H; h++) {
          float *v = base + (gsize) h * Dh + 2 * i;
          float re = v[0], im = v[1];
          v[0] = re * cs - im * sn;
          v[1] = re * sn + im * cs;
        }
      }
    }
  }
}

void
ppx_cpu_attention (PpxBackend *be, const PpxTensor *qkv, const PpxTensor *pos, const PpxTensor *kv_slot,
                   PpxTensor *kcache, PpxTensor *vcache, PpxTensor *out, int M, int T, int H, int Dh, int cap,
                   int context)
{
  const float *x = F32 (qkv);
  const int32_t *p = I32 (pos), *slots = I32 (kv_slot);
  float *kc = F32 (kcache), *vc = F32 (vcache), *o = F32 (out);
  const gsize HD = (gsize) H * Dh, width = 3 * HD;
  const float scale = 1.0f / sqrtf ((float) Dh);
  float *scores = g_new (float, cap);
  for (int m = 0; m < M; m++) {
    float *ks = kc + (gsize) slots[m] * cap * HD, *vs = vc + (gsize) slots[m] * cap * HD;
    for (int t = 0; t < T; t++) {
      gsize row = (gsize) m * T + t;
      gsize ring = (gsize) (p[row] % cap);
      memcpy (ks + ring * HD, x + row * width + HD, HD * sizeof (float));
      memcpy (vs + ring * HD, x + row * width + 2 * HD, HD * sizeof (float));
    }
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
  g_free (scores);
}
