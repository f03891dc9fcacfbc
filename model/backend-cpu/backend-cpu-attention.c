/* CPU backend: rotary embeddings and causal attention over ring KV caches. */
#include "backend-cpu.h"

#include "kv-format.h"

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

/* A KV cache as stored: [n_slots, cap, HD] values of its type, FP8 scales [n_slots, H, cap] after them. */
typedef struct {
  PpxTensorType type;
  void *data;
  float *scales; /* FP8 */
  gsize HD;
  int H, Dh, cap;
} Cache;

static Cache
cache_of (PpxTensor *t, int cap, int H, int Dh)
{
  Cache c = {t->type, t->data, NULL, (gsize) H * Dh, H, Dh, cap};
  if (t->type == PPX_TENSOR_FP8)
    c.scales = (float *) ((char *) t->data + ppx_kv_scale_offset (t->n));
  return c;
}

/* Stores head h of a new row (Dh f32 values) at (slot, ring index r), converted. */
static void
cache_write (const Cache *c, int slot, gsize r, int h, const float *v)
{
  const gsize at = ((gsize) slot * c->cap + r) * c->HD + (gsize) h * c->Dh;
  switch (c->type) {
    case PPX_TENSOR_BF16: {
      uint16_t *d = (uint16_t *) c->data + at;
      for (int i = 0; i < c->Dh; i++)
        d[i] = ppx_kv_to_bf16 (v[i]);
      break;
    }
    case PPX_TENSOR_FP8: {
      uint8_t *d = (uint8_t *) c->data + at;
      float amax = 0.0f;
      for (int i = 0; i < c->Dh; i++)
        amax = MAX (amax, fabsf (v[i]));
      const float inv = ppx_kv_e4m3_inv_scale (amax);
      for (int i = 0; i < c->Dh; i++)
        d[i] = ppx_kv_to_e4m3 (v[i] * inv);
      c->scales[((gsize) slot * c->H + h) * c->cap + r] = ppx_kv_e4m3_scale (amax);
      break;
    }
    default:
      memcpy ((float *) c->data + at, v, c->Dh * sizeof (float));
      break;
  }
}

/* Head h of (slot, ring index r) as f32: a pointer into an F32 cache, else decoded into buf. */
static const float *
cache_read (const Cache *c, int slot, gsize r, int h, float *buf)
{
  const gsize at = ((gsize) slot * c->cap + r) * c->HD + (gsize) h * c->Dh;
  switch (c->type) {
    case PPX_TENSOR_BF16: {
      const uint16_t *s = (const uint16_t *) c->data + at;
      for (int i = 0; i < c->Dh; i++)
        buf[i] = ppx_kv_from_bf16 (s[i]);
      return buf;
    }
    case PPX_TENSOR_FP8: {
      const uint8_t *s = (const uint8_t *) c->data + at;
      const float scale = c->scales[((gsize) slot * c->H + h) * c->cap + r];
      for (int i = 0; i < c->Dh; i++)
        buf[i] = ppx_kv_from_e4m3 (s[i]) * scale;
      return buf;
    }
    default:
      return (const float *) c->data + at;
  }
}

/* The new rows' k and v are written (converted) first, rows of a session in order; every key and value
 * is then read back as f32, so an F32 cache computes exactly what it always did. */
void
ppx_cpu_attention (PpxBackend *be, const PpxTensor *qkv, const PpxTensor *pos, const PpxTensor *kv_slot,
                   PpxTensor *kcache, PpxTensor *vcache, PpxTensor *out, int M, int T, int H, int Dh, int cap,
                   int context)
{
  const float *x = F32 (qkv);
  const int32_t *p = I32 (pos), *slots = I32 (kv_slot);
  const Cache kc = cache_of (kcache, cap, H, Dh), vc = cache_of (vcache, cap, H, Dh);
  float *o = F32 (out);
  const gsize HD = (gsize) H * Dh, width = 3 * HD;
  const float scale = 1.0f / sqrtf ((float) Dh);
  float *scores = g_new (float, cap);
  float *kbuf = g_new (float, Dh), *vbuf = g_new (float, Dh);
  for (int m = 0; m < M; m++) {
    const int slot = slots[m];
    for (int t = 0; t < T; t++) {
      gsize row = (gsize) m * T + t;
      gsize ring = (gsize) (p[row] % cap);
      for (int h = 0; h < H; h++) {
        cache_write (&kc, slot, ring, h, x + row * width + HD + (gsize) h * Dh);
        cache_write (&vc, slot, ring, h, x + row * width + 2 * HD + (gsize) h * Dh);
      }
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
          const float *kv = cache_read (&kc, slot, (gsize) ((lo + j) % cap), h, kbuf);
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
          const float *vv = cache_read (&vc, slot, (gsize) ((lo + j) % cap), h, vbuf);
          float w = scores[j] / sum;
          for (int d = 0; d < Dh; d++)
            ov[d] += w * vv[d];
        }
      }
    }
  }
  g_free (scores);
  g_free (kbuf);
  g_free (vbuf);
}
