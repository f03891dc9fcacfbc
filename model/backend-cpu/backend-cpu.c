/* The CPU backend: executes each op at once, in f32. The numerical reference for every other backend.
 * This file: memory, elementwise ops, norms and the vtable. */
#include "backend-cpu.h"

#include <math.h>
#include <stdlib.h>
#include <unistd.h>
#ifdef _OPENMP
#include <omp.h>
#endif

static void
cpu_free (PpxBackend *be)
{
  g_free (be);
}

static void
cpu_sync (PpxBackend *be)
{
}

/* MemAvailable of /proc/meminfo (what the kernel can give without swapping), else the free pages. */
static guint64
cpu_free_bytes (PpxBackend *be)
{
  g_autofree char *info = NULL;
  if (g_file_get_contents ("/proc/meminfo", &info, NULL, NULL)) {
    const char *p = strstr (info, "MemAvailable:");
    if (p)
      return g_ascii_strtoull (p + strlen ("MemAvailable:"), NULL, 10) * 1024;
  }
  long pages = sysconf (_SC_AVPHYS_PAGES), size = sysconf (_SC_PAGESIZE);
  return pages > 0 && size > 0 ? (guint64) pages * (guint64) size : 0;
}

static void *
cpu_alloc (PpxBackend *be, gsize bytes, GError **error)
{
  void *p = NULL;
  if (posix_memalign (&p, 64, (bytes + 63) & ~(gsize) 63) != 0 || !p) {
    g_set_error (error, PPX_ERROR, PPX_ERROR_NOMEM, "CPU backend: out of memory allocating %" G_GSIZE_FORMAT " bytes",
                 bytes);
    return NULL;
  }
  memset (p, 0, bytes);
  __atomic_add_fetch (&be->allocated, bytes, __ATOMIC_RELAXED);
  return p;
}

static void
cpu_dealloc (PpxBackend *be, void *ptr, gsize bytes)
{
  __atomic_sub_fetch (&be->allocated, bytes, __ATOMIC_RELAXED);
  free (ptr);
}

static void
cpu_copy (PpxBackend *be, void *dst, const void *src, gsize bytes)
{
  memmove (dst, src, bytes);
}

static void
cpu_fill (PpxBackend *be, PpxTensor *t, float value)
{
  if (t->type == PPX_TENSOR_F32) {
    float *p = F32 (t);
    for (gsize i = 0; i < t->n; i++)
      p[i] = value;
  } else {
    int32_t *p = I32 (t), v = (int32_t) value;
    for (gsize i = 0; i < t->n; i++)
      p[i] = v;
  }
}

static void
cpu_copy2d (PpxBackend *be, PpxTensor *dst, gsize doff, gsize dld, const PpxTensor *src, gsize soff, gsize sld,
            gsize rows, gsize cols)
{
  char *d = (char *) dst->data + doff * 4;
  const char *s = (const char *) src->data + soff * 4;
  for (gsize r = 0; r < rows; r++)
    memmove (d + r * dld * 4, s + r * sld * 4, cols * 4);
}

void
ppx_cpu_act_apply (PpxActivation act, const float *a, float *o, gsize n)
{
  switch (act) {
    case PPX_ACT_ELU:
      for (gsize i = 0; i < n; i++)
        o[i] = a[i] > 0.0f ? a[i] : expm1f (a[i]);
      break;
    case PPX_ACT_GELU:
      for (gsize i = 0; i < n; i++)
        o[i] = 0.5f * a[i] * (1.0f + erff (a[i] * (float) M_SQRT1_2));
      break;
    case PPX_ACT_SILU:
      for (gsize i = 0; i < n; i++)
        o[i] = a[i] / (1.0f + expf (-a[i]));
      break;
    case PPX_ACT_NONE:
      if (o != a)
        memcpy (o, a, n * sizeof (float));
      break;
  }
}

static void
cpu_act (PpxBackend *be, PpxActivation act, const PpxTensor *x, PpxTensor *y, gsize n)
{
  ppx_cpu_act_apply (act, F32 (x), F32 (y), n);
}

static void
cpu_add (PpxBackend *be, const PpxTensor *a, const PpxTensor *b, PpxTensor *y, gsize n)
{
  const float *p = F32 (a), *q = F32 (b);
  float *o = F32 (y);
  for (gsize i = 0; i < n; i++)
    o[i] = p[i] + q[i];
}

static void
cpu_add_scaled (PpxBackend *be, const PpxTensor *x, const PpxTensor *gamma, PpxTensor *y, gsize rows, gsize D)
{
  const float *a = F32 (x), *g = F32 (gamma);
  float *o = F32 (y);
  for (gsize r = 0; r < rows; r++)
    for (gsize c = 0; c < D; c++)
      o[r * D + c] += g[c] * a[r * D + c];
}

static void
cpu_silu_gate (PpxBackend *be, const PpxTensor *h, PpxTensor *u, gsize rows, gsize H)
{
  const float *a = F32 (h);
  float *o = F32 (u);
  for (gsize r = 0; r < rows; r++) {
    const float *g = a + r * 2 * H, *v = g + H;
    for (gsize c = 0; c < H; c++)
      o[r * H + c] = g[c] / (1.0f + expf (-g[c])) * v[c];
  }
}

static void
cpu_rmsnorm (PpxBackend *be, const PpxTensor *x, const PpxTensor *alpha, PpxTensor *y, gsize rows, gsize D, float eps)
{
  const float *a = F32 (x), *al = F32 (alpha);
  float *o = F32 (y);
  for (gsize r = 0; r < rows; r++) {
    const float *xr = a + r * D;
    float ss = 0.0f;
    for (gsize c = 0; c < D; c++)
      ss += xr[c] * xr[c];
    float inv = 1.0f / sqrtf (eps + ss / (float) D);
    for (gsize c = 0; c < D; c++)
      o[r * D + c] = xr[c] * (al[c] * inv);
  }
}

static void
cpu_layernorm (PpxBackend *be, const PpxTensor *x, const PpxTensor *w, const PpxTensor *b, PpxTensor *y, gsize rows,
               gsize D, float eps)
{
  const float *a = F32 (x), *wt = F32 (w), *bs = F32 (b);
  float *o = F32 (y);
  for (gsize r = 0; r < rows; r++) {
    const float *xr = a + r * D;
    float mean = 0.0f;
    for (gsize c = 0; c < D; c++)
      mean += xr[c];
    mean /= (float) D;
    float var = 0.0f;
    for (gsize c = 0; c < D; c++)
      var += (xr[c] - mean) * (xr[c] - mean);
    var /= (float) D;
    float inv = 1.0f / sqrtf (var + eps);
    for (gsize c = 0; c < D; c++)
      o[r * D + c] = (xr[c] - mean) * inv * wt[c] + bs[c];
  }
}

static void
cpu_transpose (PpxBackend *be, const PpxTensor *x, PpxTensor *y, gsize M, gsize A, gsize B)
{
  const float *a = F32 (x);
  float *o = F32 (y);
  for (gsize m = 0; m < M; m++)
    for (gsize i = 0; i < A; i++)
      for (gsize j = 0; j < B; j++)
        o[m * A * B + j * A + i] = a[m * A * B + i * B + j];
}

static const PpxBackendOps cpu_ops = {
  .kind = PPX_BACKEND_CPU,
  .borrows_host_memory = TRUE,
  .kv_formats = (1u << PPX_TENSOR_F32) | (1u << PPX_TENSOR_BF16) | (1u << PPX_TENSOR_FP8),
  .free = cpu_free,
  .sync = cpu_sync,
  .free_bytes = cpu_free_bytes,
  .alloc = cpu_alloc,
  .dealloc = cpu_dealloc,
  .upload = cpu_copy,
  .download = cpu_copy,
  .fill = cpu_fill,
  .copy2d = cpu_copy2d,
  .weight_init = ppx_cpu_weight_init,
  .weight_release = ppx_cpu_weight_release,
  .linear = ppx_cpu_linear,
  .embed = ppx_cpu_embed,
  .act = cpu_act,
  .add = cpu_add,
  .add_scaled = cpu_add_scaled,
  .silu_gate = cpu_silu_gate,
  .rmsnorm = cpu_rmsnorm,
  .layernorm = cpu_layernorm,
  .transpose = cpu_transpose,
  .rope = ppx_cpu_rope,
  .attention = ppx_cpu_attention,
  .conv1d = ppx_cpu_conv1d,
  .conv_transpose1d = ppx_cpu_conv_transpose1d,
  .vq_encode = ppx_cpu_vq_encode,
  .vq_decode = ppx_cpu_vq_decode,
  .sample = ppx_cpu_sample,
  .force_tokens = ppx_cpu_force_tokens,
  .lmgen_prepare = ppx_cpu_lmgen_prepare,
  .lmgen_finish = ppx_cpu_lmgen_finish,
  .positions = ppx_cpu_positions,
};

PpxBackend *
ppx_backend_cpu_new (int n_threads, GError **error)
{
  PpxBackend *be = g_new0 (PpxBackend, 1);
  be->ops = &cpu_ops;
#ifdef _OPENMP
  be->n_threads = n_threads > 0 ? n_threads : omp_get_num_procs ();
#else
  be->n_threads = 1;
#endif
  return be;
}
