/* The CUDA backend: the PpxBackendOps vtable over the kernels in cuda-*.cu (declared in cuda-kernels.h).
 *
 * One device, one non-blocking stream per backend; every op is enqueued on it and returns at once
 * (uploads from pageable memory are staged by the runtime, so the caller may reuse its buffer); only
 * downloads and sync wait. Memory is plain cudaMalloc (never managed memory), zero-filled like the CPU
 * backend's; weights are always copied to the device (desc->borrow is ignored; int4 rows are permuted for
 * the tensor-core kernels, same bytes). Ops that need temporary device memory share one scratch buffer that
 * grows on demand; a mutex keeps its growth and use together when several threads enqueue on the same
 * backend. The linear kernels' split-K workspace is a buffer of its own (linear_lock, then scratch_lock while it
 * grows: its growth marks recorded graphs stale like the scratch buffer's, and a recording asks ppx_backend_graph_end
 * to grow it instead of allocating).
 *
 * Ops cannot fail through the interface (backend.h): a CUDA error inside one is a programming error or a
 * lost device, reported with g_critical() naming the op and the CUDA error.
 *
 * Graph capture is in backend-cuda-graph.c, the tuning and benchmark extras of backend-cuda.h in
 * backend-cuda-tune.c; backend-cuda-internal.h is what they share. */
#include "backend-cuda-internal.h"

#include "quant.h"

#include <math.h>

_Thread_local PpxBackend *cuda_tls_recording;

/* PPX_CUDA_PROFILE=1 (cuda-profile.cu): cuda_enter() opens an event pair on the op's stream and cuda_check()
 * closes it under the op's name plus prof_shape (set by ops whose cost depends on their shape), outside recordings. */
static _Thread_local char prof_shape[160];
#define PROFILING(be) (ppx_cuda_profile_enabled () && cuda_tls_recording != (be))
#define PROF_SHAPE(be, ...) \
  do { \
    if (PROFILING (be)) \
      g_snprintf (prof_shape, sizeof prof_shape, __VA_ARGS__); \
  } while (0)

void
cuda_enter (PpxBackend *be)
{
  int e = ppx_cuda_set_device (PRIV (be)->device);
  if (e)
    g_critical ("CUDA backend: cannot select GPU %d: %s", PRIV (be)->device, ppx_cuda_error_string (e));
  if (PROFILING (be)) {
    prof_shape[0] = '\0';
    ppx_cuda_profile_begin (PRIV (be)->stream);
  }
}

void
cuda_check (PpxBackend *be, int err, const char *what)
{
  if (err)
    g_critical ("CUDA backend (GPU %d): %s failed: %s", PRIV (be)->device, what, ppx_cuda_error_string (err));
  if (PROFILING (be)) {
    char key[256];
    g_snprintf (key, sizeof key, "%s%s%s", what, prof_shape[0] ? " " : "", prof_shape);
    ppx_cuda_profile_end (PRIV (be)->stream, key);
  }
}

/* @b, at least @bytes large, its first @zero_bytes zeroed when it is new; call with scratch_lock held. NULL inside a
 * recording (nothing may allocate there: the need is noted for ppx_backend_graph_end) and, with a critical, when the
 * device is out of memory. Growing waits for queued work that may still read the old buffer and marks the graphs
 * recorded with it stale (scratch_epoch). */
static void *
cuda_device_buffer_grow (PpxBackend *be, DeviceBuffer *b, gsize bytes, gsize zero_bytes, const char *what)
{
  CudaPriv *p = PRIV (be);
  if (bytes <= b->bytes)
    return b->ptr;
  if (cuda_tls_recording == be) {
    b->capture_need = MAX (b->capture_need, bytes);
    return NULL;
  }
  gsize want = MAX (bytes, b->bytes * 2);
  p->scratch_epoch++;
  cuda_check (be, ppx_cuda_stream_sync (p->stream), what);
  if (b->ptr)
    cuda_check (be, ppx_cuda_free (b->ptr), what);
  b->ptr = NULL;
  b->bytes = 0;
  int e = ppx_cuda_malloc (&b->ptr, want);
  if (e) {
    b->ptr = NULL;
    g_critical ("CUDA backend (GPU %d): out of memory for %" G_GSIZE_FORMAT " bytes of %s: %s", p->device, want, what,
                ppx_cuda_error_string (e));
    return NULL;
  }
  if (zero_bytes)
    cuda_check (be, ppx_cuda_memset_async (b->ptr, 0, MIN (zero_bytes, want), p->stream), what);
  b->bytes = want;
  return b->ptr;
}

/* The scratch buffer, at least `bytes` large; call with scratch_lock held. */
void *
cuda_scratch_get (PpxBackend *be, gsize bytes)
{
  return cuda_device_buffer_grow (be, &PRIV (be)->scratch, bytes, 0, "scratch");
}

static void
cuda_free (PpxBackend *be)
{
  CudaPriv *p = PRIV (be);
  cuda_enter (be);
  cuda_check (be, ppx_cuda_stream_sync (p->stream), "final sync");
  if (ppx_cuda_profile_enabled ())
    ppx_cuda_profile_dump (p->device_name);
  if (p->scratch.ptr)
    ppx_cuda_free (p->scratch.ptr);
  for (guint i = 0; i < p->rope_tables->len; i++)
    ppx_cuda_free (g_array_index (p->rope_tables, RopeTable, i).freqs);
  g_array_free (p->rope_tables, TRUE);
  if (p->linear_ws.ptr)
    ppx_cuda_free (p->linear_ws.ptr);
  g_array_free (p->capture_rope, TRUE);
  if (p->capture_stream)
    ppx_cuda_stream_destroy (p->capture_stream);
  ppx_cuda_stream_destroy (p->stream);
  g_mutex_clear (&p->scratch_lock);
  g_mutex_clear (&p->rope_lock);
  g_mutex_clear (&p->linear_lock);
  g_mutex_clear (&p->capture_lock);
  g_free (p);
  g_free (be);
}

static void
cuda_sync (PpxBackend *be)
{
  cuda_enter (be);
  cuda_check (be, ppx_cuda_stream_sync (STREAM (be)), "sync");
}

static guint64
cuda_free_bytes (PpxBackend *be)
{
  cuda_enter (be);
  size_t n = 0;
  return ppx_cuda_mem_free (&n) == 0 ? (guint64) n : 0;
}

static void *
cuda_alloc (PpxBackend *be, gsize bytes, GError **error)
{
  cuda_enter (be);
  void *p = NULL;
  int e = ppx_cuda_malloc (&p, bytes);
  if (e) {
    g_set_error (error, PPX_ERROR, PPX_ERROR_NOMEM, "CUDA backend: out of memory allocating %" G_GSIZE_FORMAT
                 " bytes on GPU %d (%s): %s", bytes, PRIV (be)->device, PRIV (be)->device_name,
                 ppx_cuda_error_string (e));
    return NULL;
  }
  cuda_check (be, ppx_cuda_memset_async (p, 0, bytes, PRIV (be)->stream), "zero fill");
  __atomic_add_fetch (&be->allocated, bytes, __ATOMIC_RELAXED);
  return p;
}

static void
cuda_dealloc (PpxBackend *be, void *ptr, gsize bytes)
{
  cuda_enter (be);
  __atomic_sub_fetch (&be->allocated, bytes, __ATOMIC_RELAXED);
  cuda_check (be, ppx_cuda_free (ptr), "free"); /* cudaFree waits for work that may still use ptr */
}

static void
cuda_upload (PpxBackend *be, void *dst, const void *src, gsize bytes)
{
  cuda_enter (be);
  cuda_check (be, ppx_cuda_upload (dst, src, bytes, STREAM (be)), "upload");
}

static void
cuda_download (PpxBackend *be, void *dst, const void *src, gsize bytes)
{
  cuda_enter (be);
  cuda_check (be, ppx_cuda_download (dst, src, bytes, STREAM (be)), "download");
}

static void
cuda_fill (PpxBackend *be, PpxTensor *t, float value)
{
  cuda_enter (be);
  if (t->type == PPX_TENSOR_F32)
    cuda_check (be, ppx_cuda_fill_f32 (F32 (t), t->n, value, STREAM (be)), "fill");
  else
    cuda_check (be, ppx_cuda_fill_i32 (I32 (t), t->n, (int32_t) value, STREAM (be)), "fill");
}

/* Overlapping source and destination (one buffer shifted in place) go through the scratch buffer, which
 * gives the CPU backend's row-by-row memmove result whenever rows do not overlap each other. */
static void
cuda_copy2d (PpxBackend *be, PpxTensor *dst, gsize doff, gsize dld, const PpxTensor *src, gsize soff, gsize sld,
             gsize rows, gsize cols)
{
  cuda_enter (be);
  uint32_t *d = (uint32_t *) dst->data + doff;
  const uint32_t *s = (const uint32_t *) src->data + soff;
  const uint32_t *d_end = d + (rows - 1) * dld + cols, *s_end = s + (rows - 1) * sld + cols;
  void *stream = STREAM (be);
  if ((const uint32_t *) d < s_end && s < d_end) {
    g_mutex_lock (&PRIV (be)->scratch_lock);
    uint32_t *tmp = cuda_scratch_get (be, rows * cols * 4);
    if (tmp) {
      cuda_check (be, ppx_cuda_copy2d (tmp, cols, s, sld, rows, cols, stream), "copy2d (staging)");
      cuda_check (be, ppx_cuda_copy2d (d, dld, tmp, cols, rows, cols, stream), "copy2d");
    }
    g_mutex_unlock (&PRIV (be)->scratch_lock);
    return;
  }
  cuda_check (be, ppx_cuda_copy2d (d, dld, s, sld, rows, cols, stream), "copy2d");
}

static void *
weight_copy (PpxBackend *be, const void *src, gsize bytes, const char *what, GError **error)
{
  void *p = NULL;
  int e = ppx_cuda_malloc (&p, bytes);
  if (e) {
    g_set_error (error, PPX_ERROR, PPX_ERROR_NOMEM, "CUDA backend: out of memory for %" G_GSIZE_FORMAT
                 " bytes of weight %s on GPU %d (%s): %s", bytes, what, PRIV (be)->device, PRIV (be)->device_name,
                 ppx_cuda_error_string (e));
    return NULL;
  }
  cuda_check (be, ppx_cuda_upload (p, src, bytes, PRIV (be)->stream), "weight upload");
  __atomic_add_fetch (&be->allocated, bytes, __ATOMIC_RELAXED);
  return p;
}

static void cuda_weight_release (PpxBackend *be, PpxWeight *w);

static gboolean
cuda_weight_init (PpxBackend *be, PpxWeight *w, const PpxWeightDesc *d, GError **error)
{
  cuda_enter (be);
  gsize scale_bytes;
  gsize data_bytes = ppx_weight_desc_bytes (d, &scale_bytes);
  if (data_bytes == 0) {
    g_set_error (error, PPX_ERROR, PPX_ERROR_UNSUPPORTED,
                 "CUDA backend: weight format %s (group size %d) is not supported",
                 ppx_weight_format_name (d->format), d->group_size);
    return FALSE;
  }
  w->data_bytes = data_bytes;
  w->scale_bytes = scale_bytes;
  if (!(w->owned_data = weight_copy (be, d->data, data_bytes, "data", error)))
    return FALSE;
  w->data = w->owned_data;
  /* int4 rows are permuted inside each 128-column block for the tensor-core kernels (same bytes) */
  if (d->format == PPX_WFMT_INT4 && ppx_cuda_int4_repacked (d->group_size)) {
    int e = ppx_cuda_int4_repack (w->owned_data, d->rows, d->cols, PRIV (be)->stream);
    if (e) {
      g_set_error (error, PPX_ERROR, PPX_ERROR_NOMEM, "CUDA backend: cannot repack a %" G_GINT64_FORMAT "x%" G_GINT64_FORMAT
                   " int4 weight on GPU %d (%s): %s", d->rows, d->cols, PRIV (be)->device, PRIV (be)->device_name,
                   ppx_cuda_error_string (e));
      cuda_weight_release (be, w);
      return FALSE;
    }
  }
  if (scale_bytes) {
    if (!(w->owned_scales = weight_copy (be, d->scales, scale_bytes, "scales", error))) {
      cuda_weight_release (be, w);
      return FALSE;
    }
    w->scales = w->owned_scales;
  }
  return TRUE;
}

static void
cuda_weight_release (PpxBackend *be, PpxWeight *w)
{
  cuda_enter (be);
  if (w->owned_data) {
    __atomic_sub_fetch (&be->allocated, w->data_bytes, __ATOMIC_RELAXED);
    cuda_check (be, ppx_cuda_free (w->owned_data), "weight free");
    w->owned_data = NULL;
  }
  if (w->owned_scales) {
    __atomic_sub_fetch (&be->allocated, w->scale_bytes, __ATOMIC_RELAXED);
    cuda_check (be, ppx_cuda_free (w->owned_scales), "weight free");
    w->owned_scales = NULL;
  }
}

PpxCudaWeight
cuda_device_weight (const PpxWeight *w)
{
  PpxCudaWeight cw = {.format = (int) w->format,
                      .rows = w->rows,
                      .cols = w->cols,
                      .group_size = w->group_size,
                      .data = w->data,
                      .scales = w->scales};
  return cw;
}

/* The linear kernels' workspace, at least `bytes` large (call with linear_lock held): its first
 * PPX_CUDA_LINEAR_COUNTER_BYTES are zero when it is made, and the kernels leave them zero. NULL (and a
 * critical) if the device is out of memory. Growing waits for queued work that may still use the old one. */
void *
cuda_linear_workspace (PpxBackend *be, gsize bytes)
{
  CudaPriv *p = PRIV (be);
  if (bytes <= p->linear_ws.bytes)
    return p->linear_ws.ptr;
  /* scratch_lock: no graph launch slips in between the sync and the free (the growth marks graphs stale) */
  g_mutex_lock (&p->scratch_lock);
  void *ws = cuda_device_buffer_grow (be, &p->linear_ws, bytes, PPX_CUDA_LINEAR_COUNTER_BYTES, "linear workspace");
  g_mutex_unlock (&p->scratch_lock);
  return ws;
}

/* The split-K workspace a linear call on cw with M rows needs, linear_lock held while it is in use when there is
 * one (*bytes > 0; release with linear_ws_release). NULL either when none is needed (*bytes == 0) or when it could
 * not be had (the call is then skipped; the reason was reported). */
static void *
linear_ws_acquire (PpxBackend *be, const PpxCudaWeight *cw, int M, gsize *bytes)
{
  *bytes = ppx_cuda_linear_workspace_bytes (cw, M);
  if (*bytes == 0)
    return NULL;
  g_mutex_lock (&PRIV (be)->linear_lock);
  return cuda_linear_workspace (be, *bytes);
}

static void
linear_ws_release (PpxBackend *be, gsize bytes)
{
  if (bytes)
    g_mutex_unlock (&PRIV (be)->linear_lock);
}

/* The start of a linear call on cw with M rows (`fused`: the op fused before it, "rmsnorm+", or ""): the profile's
 * shape, and the split-K workspace in *ws held as linear_ws_acquire holds it (release with linear_ws_release
 * (be, *bytes) after the call). FALSE when the call must be skipped: the workspace could not be had. */
static gboolean
linear_begin (PpxBackend *be, const PpxWeight *w, const PpxCudaWeight *cw, const char *fused, int M, void **ws,
              gsize *bytes)
{
  cuda_enter (be);
  PROF_SHAPE (be, "%s%s %" G_GINT64_FORMAT "x%" G_GINT64_FORMAT " M=%d", fused, ppx_weight_format_name (w->format),
              cw->rows, cw->cols, M);
  *ws = linear_ws_acquire (be, cw, M, bytes);
  return *ws || !*bytes;
}

static void
cuda_linear (PpxBackend *be, const PpxWeight *w, const PpxTensor *x, gsize ldx, PpxTensor *y, gsize ldy, int M,
             gboolean accumulate)
{
  PpxCudaWeight cw = cuda_device_weight (w);
  void *ws;
  gsize ws_bytes;
  if (linear_begin (be, w, &cw, "", M, &ws, &ws_bytes))
    cuda_check (be, ppx_cuda_linear (&cw, F32 (x), ldx, F32 (y), ldy, M, accumulate, ws, STREAM (be)), "linear");
  linear_ws_release (be, ws_bytes);
}

/* One kernel where ppx_cuda_linear_rmsnorm_fuses (M <= 4, tensor-core weights); FALSE otherwise (backend.c then runs
 * rmsnorm and linear). */
static gboolean
cuda_rmsnorm_linear (PpxBackend *be, const PpxTensor *x, const PpxTensor *alpha, float eps, PpxTensor *h,
                     const PpxWeight *w, PpxTensor *y, gsize ldy, int M, gboolean accumulate)
{
  (void) h;
  PpxCudaWeight cw = cuda_device_weight (w);
  if (!ppx_cuda_linear_rmsnorm_fuses (&cw, F32 (x), (size_t) cw.cols, F32 (alpha), M))
    return FALSE;
  void *ws;
  gsize ws_bytes;
  if (linear_begin (be, w, &cw, "rmsnorm+", M, &ws, &ws_bytes))
    cuda_check (be, ppx_cuda_linear_rmsnorm (&cw, F32 (x), (size_t) cw.cols, F32 (alpha), eps, F32 (y), ldy, M, accumulate,
                                        ws, STREAM (be)),
           "rmsnorm+linear");
  linear_ws_release (be, ws_bytes);
  return TRUE;
}

/* One kernel where ppx_cuda_linear_gate_fuses (M <= 8, tensor-core weights); FALSE otherwise (backend.c then runs
 * silu_gate and linear). */
static gboolean
cuda_silu_gate_linear (PpxBackend *be, const PpxTensor *h, PpxTensor *u, const PpxWeight *w, PpxTensor *y, gsize ldy,
                       int M, gboolean accumulate)
{
  (void) u;
  PpxCudaWeight cw = cuda_device_weight (w);
  if (!ppx_cuda_linear_gate_fuses (&cw, F32 (h), M))
    return FALSE;
  void *ws;
  gsize ws_bytes;
  if (linear_begin (be, w, &cw, "silu_gate+", M, &ws, &ws_bytes))
    cuda_check (be, ppx_cuda_linear_gate (&cw, F32 (h), F32 (y), ldy, M, accumulate, ws, STREAM (be)), "silu_gate+linear");
  linear_ws_release (be, ws_bytes);
  return TRUE;
}

/* The depformer's layer tail in one persistent kernel where ppx_cuda_layer_tail_fuses (the switch on, tensor-core
 * weights of one format); FALSE otherwise (backend.c then runs the ops one by one). */
static gboolean
cuda_layer_tail (PpxBackend *be, const PpxLayerTail *t, int M)
{
  const PpxCudaLayerTail ct = {F32 (t->att), F32 (t->norm2), t->next_norm ? F32 (t->next_norm) : NULL, F32 (t->x),
                               F32 (t->ff),  F32 (t->y),     cuda_device_weight (t->out_proj),
                               cuda_device_weight (t->linear_in), cuda_device_weight (t->linear_out),
                               cuda_device_weight (t->next), t->eps};
  if (!ppx_cuda_layer_tail_fuses (&ct, M))
    return FALSE;
  cuda_enter (be);
  PROF_SHAPE (be, "layer_tail %s %" G_GINT64_FORMAT "x%" G_GINT64_FORMAT " next %" G_GINT64_FORMAT " M=%d",
              ppx_weight_format_name (t->out_proj->format), ct.linear_in.rows, ct.out_proj.rows, ct.next.rows, M);
  const gsize bytes = ppx_cuda_layer_tail_workspace_bytes (&ct, M);
  g_mutex_lock (&PRIV (be)->linear_lock);
  void *ws = cuda_linear_workspace (be, bytes);
  if (ws)
    cuda_check (be, ppx_cuda_layer_tail (&ct, M, ws, STREAM (be)), "layer_tail");
  g_mutex_unlock (&PRIV (be)->linear_lock);
  return TRUE;
}

static void
cuda_embed (PpxBackend *be, const PpxWeight *table, const PpxTensor *ids, int id_index, int id_stride, PpxTensor *out,
            int M, gboolean accumulate)
{
  cuda_enter (be);
  PpxCudaWeight cw = cuda_device_weight (table);
  cuda_check (be, ppx_cuda_embed (&cw, I32 (ids), id_index, id_stride, F32 (out), M, accumulate, STREAM (be)),
         "embed");
}

static void
cuda_act (PpxBackend *be, PpxActivation act, const PpxTensor *x, PpxTensor *y, gsize n)
{
  cuda_enter (be);
  cuda_check (be, ppx_cuda_act ((int) act, F32 (x), F32 (y), n, STREAM (be)), "activation");
}

static void
cuda_add (PpxBackend *be, const PpxTensor *a, const PpxTensor *b, PpxTensor *y, gsize n)
{
  cuda_enter (be);
  cuda_check (be, ppx_cuda_add (F32 (a), F32 (b), F32 (y), n, STREAM (be)), "add");
}

static void
cuda_add_scaled (PpxBackend *be, const PpxTensor *x, const PpxTensor *gamma, PpxTensor *y, gsize rows, gsize D)
{
  cuda_enter (be);
  cuda_check (be, ppx_cuda_add_scaled (F32 (x), F32 (gamma), F32 (y), rows, D, STREAM (be)), "add_scaled");
}

static void
cuda_silu_gate (PpxBackend *be, const PpxTensor *h, PpxTensor *u, gsize rows, gsize H)
{
  cuda_enter (be);
  cuda_check (be, ppx_cuda_silu_gate (F32 (h), F32 (u), rows, H, STREAM (be)), "silu_gate");
}

static void
cuda_rmsnorm (PpxBackend *be, const PpxTensor *x, const PpxTensor *alpha, PpxTensor *y, gsize rows, gsize D, float eps)
{
  cuda_enter (be);
  cuda_check (be, ppx_cuda_rmsnorm (F32 (x), F32 (alpha), F32 (y), rows, D, eps, STREAM (be)), "rmsnorm");
}

static void
cuda_layernorm (PpxBackend *be, const PpxTensor *x, const PpxTensor *w, const PpxTensor *b, PpxTensor *y, gsize rows,
                gsize D, float eps)
{
  cuda_enter (be);
  cuda_check (be, ppx_cuda_layernorm (F32 (x), F32 (w), F32 (b), F32 (y), rows, D, eps, STREAM (be)), "layernorm");
}

static void
cuda_transpose (PpxBackend *be, const PpxTensor *x, PpxTensor *y, gsize M, gsize A, gsize B)
{
  cuda_enter (be);
  cuda_check (be, ppx_cuda_transpose (F32 (x), F32 (y), M, A, B, STREAM (be)), "transpose");
}

/* The rotation frequencies for (Dh, max_period) in device memory, computed once on the host exactly as
 * the CPU backend does (its expf, not the device's, which may differ by an ulp: at position 3000 an ulp
 * of a frequency moves the angle by 1e-4). */
const float *
cuda_rope_freqs (PpxBackend *be, int Dh, float max_period)
{
  CudaPriv *p = PRIV (be);
  const float *found = NULL;
  g_mutex_lock (&p->rope_lock);
  for (guint i = 0; i < p->rope_tables->len && !found; i++) {
    RopeTable *t = &g_array_index (p->rope_tables, RopeTable, i);
    if (t->Dh == Dh && t->max_period == max_period)
      found = t->freqs;
  }
  if (!found && cuda_tls_recording == be) { /* no allocation inside a recording: made by ppx_backend_graph_end */
    RopeTable t = {Dh, max_period, NULL};
    g_array_append_val (p->capture_rope, t);
  } else if (!found) {
    const int half = Dh / 2;
    const float c = (float) (-log ((double) max_period) * 2.0 / (double) Dh);
    g_autofree float *host = g_new (float, MAX (half, 1));
    for (int i = 0; i < half; i++)
      host[i] = expf ((float) i * c);
    RopeTable t = {Dh, max_period, NULL};
    int e = ppx_cuda_malloc ((void **) &t.freqs, MAX (half, 1) * sizeof (float));
    if (e) {
      g_critical ("CUDA backend (GPU %d): out of memory for RoPE frequencies: %s", p->device, ppx_cuda_error_string (e));
    } else {
      cuda_check (be, ppx_cuda_upload (t.freqs, host, half * sizeof (float), p->stream), "rope table upload");
      g_array_append_val (p->rope_tables, t);
      found = t.freqs;
    }
  }
  g_mutex_unlock (&p->rope_lock);
  return found;
}

static void
cuda_rope (PpxBackend *be, PpxTensor *qkv, const PpxTensor *pos, gsize rows, int H, int Dh, float max_period)
{
  cuda_enter (be);
  const float *freqs = cuda_rope_freqs (be, Dh, max_period);
  if (freqs)
    cuda_check (be, ppx_cuda_rope (F32 (qkv), I32 (pos), rows, H, Dh, freqs, STREAM (be)), "rope");
}

static void
cuda_attention (PpxBackend *be, const PpxTensor *qkv, const PpxTensor *pos, const PpxTensor *kv_slot,
                PpxTensor *kcache, PpxTensor *vcache, PpxTensor *out, int M, int T, int H, int Dh, int cap,
                int context)
{
  cuda_enter (be);
  const PpxTensorType kv = kcache->type; /* the caches' storage: F32, BF16 or FP8 */
  PROF_SHAPE (be, "%s M=%d T=%d H=%d Dh=%d cap=%d", ppx_tensor_type_name (kv), M, T, H, Dh, cap);
  float *ks = NULL, *vs = NULL;
  if (kv == PPX_TENSOR_FP8) {
    ks = (float *) ((char *) kcache->data + ppx_kv_scale_offset (kcache->n));
    vs = (float *) ((char *) vcache->data + ppx_kv_scale_offset (vcache->n));
  }
  g_mutex_lock (&PRIV (be)->scratch_lock);
  const gsize floats = ppx_cuda_attention_scratch_floats (M, T, H, Dh, cap);
  float *part = floats ? cuda_scratch_get (be, floats * sizeof (float)) : NULL;
  if (!floats || part)
    cuda_check (be,
           ppx_cuda_attention (kv, F32 (qkv), I32 (pos), I32 (kv_slot), kcache->data, vcache->data, ks, vs, F32 (out),
                               M, T, H, Dh, cap, context, part, STREAM (be)),
           "attention");
  g_mutex_unlock (&PRIV (be)->scratch_lock);
}

static void
cuda_conv1d (PpxBackend *be, PpxActivation act, const PpxTensor *w, const PpxTensor *bias, const PpxTensor *x,
             PpxTensor *prev, const PpxTensor *res, PpxTensor *y, int M, int Cin, int Cout, int K, int Lin, int stride,
             int dilation, int groups)
{
  cuda_enter (be);
  PROF_SHAPE (be, "%d->%d K=%d s=%d d=%d L=%d M=%d", Cin, Cout, K, stride, dilation, Lin, M);
  g_mutex_lock (&PRIV (be)->scratch_lock);
  const gsize bytes = ppx_cuda_conv1d_scratch_bytes (M, Cin, Cout, K, Lin, stride, dilation, groups, prev != NULL);
  float *ws = bytes ? cuda_scratch_get (be, bytes) : NULL;
  if (!bytes || ws)
    cuda_check (be,
           ppx_cuda_conv1d ((int) act, F32 (w), bias ? F32 (bias) : NULL, F32 (x), prev ? F32 (prev) : NULL,
                            res ? F32 (res) : NULL, F32 (y), M, Cin, Cout, K, Lin, stride, dilation, groups, ws,
                            STREAM (be)),
           "conv1d");
  g_mutex_unlock (&PRIV (be)->scratch_lock);
}

static void
cuda_conv_transpose1d (PpxBackend *be, PpxActivation act, const PpxTensor *w, const PpxTensor *bias,
                       const PpxTensor *x, PpxTensor *partial, PpxTensor *y, int M, int Cin, int Cout, int K, int T,
                       int stride, int groups)
{
  cuda_enter (be);
  PROF_SHAPE (be, "%d->%d K=%d s=%d T=%d M=%d", Cin, Cout, K, stride, T, M);
  g_mutex_lock (&PRIV (be)->scratch_lock);
  const gsize bytes = ppx_cuda_conv_transpose1d_scratch_bytes (M, Cin, Cout, K, T, stride, groups, partial != NULL);
  float *ws = bytes ? cuda_scratch_get (be, bytes) : NULL;
  if (!bytes || ws)
    cuda_check (be,
           ppx_cuda_conv_transpose1d ((int) act, F32 (w), bias ? F32 (bias) : NULL, F32 (x),
                                      partial ? F32 (partial) : NULL, F32 (y), M, Cin, Cout, K, T, stride, groups, ws,
                                      STREAM (be)),
           "conv_transpose1d");
  g_mutex_unlock (&PRIV (be)->scratch_lock);
}

static void
cuda_vq_encode (PpxBackend *be, const PpxTensor *codebooks, PpxTensor *r, PpxTensor *codes, int code_off,
                int code_stride, int M, int ncb, int bins, int dim)
{
  cuda_enter (be);
  g_mutex_lock (&PRIV (be)->scratch_lock);
  const gsize floats = ppx_cuda_vq_encode_scratch_floats (M, ncb, bins, dim);
  float *scratch = floats ? cuda_scratch_get (be, floats * sizeof (float)) : NULL;
  if (!floats || scratch)
    cuda_check (be,
           ppx_cuda_vq_encode (F32 (codebooks), F32 (r), I32 (codes), code_off, code_stride, M, ncb, bins, dim, scratch,
                               STREAM (be)),
           "vq_encode");
  g_mutex_unlock (&PRIV (be)->scratch_lock);
}

static void
cuda_vq_decode (PpxBackend *be, const PpxTensor *codebooks, const PpxTensor *codes, int code_off, int code_stride,
                PpxTensor *y, int M, int ncb, int bins, int dim)
{
  cuda_enter (be);
  cuda_check (be,
         ppx_cuda_vq_decode (F32 (codebooks), I32 (codes), code_off, code_stride, F32 (y), M, ncb, bins, dim,
                             STREAM (be)),
         "vq_decode");
}

static void
cuda_sample (PpxBackend *be, const PpxTensor *logits, int V, PpxTensor *tokens, int tok_off, int tok_stride,
             const PpxTensor *params, int stream, int M)
{
  cuda_enter (be);
  g_mutex_lock (&PRIV (be)->scratch_lock);
  void *scratch = cuda_scratch_get (be, ppx_cuda_sample_scratch_bytes (M, V)); /* per-row parameters: any row may need it */
  if (scratch)
    cuda_check (be,
           ppx_cuda_sample (F32 (logits), V, I32 (tokens), tok_off, tok_stride, (const uint32_t *) params->data,
                            stream, M, scratch, STREAM (be)),
           "sample");
  g_mutex_unlock (&PRIV (be)->scratch_lock);
}

static void
cuda_force_tokens (PpxBackend *be, PpxTensor *tokens, int off, int stride, const PpxTensor *forced, int foff,
                   int fstride, int M)
{
  cuda_enter (be);
  cuda_check (be, ppx_cuda_force_tokens (I32 (tokens), off, stride, I32 (forced), foff, fstride, M, STREAM (be)),
         "force_tokens");
}

static void
cuda_lmgen_prepare (PpxBackend *be, const PpxLmgenDims *d, PpxTensor *state, const PpxTensor *slot,
                    const PpxTensor *codes, int code_off, int code_stride, PpxTensor *ids, PpxTensor *forced,
                    PpxTensor *pos, PpxTensor *params, int M)
{
  cuda_enter (be);
  cuda_check (be,
         ppx_cuda_lmgen_prepare (d, I32 (state), (int) (state->n / PPX_LMGEN_STATE), I32 (slot), I32 (codes), code_off,
                                 code_stride, I32 (ids), I32 (forced), I32 (pos), I32 (params), M, STREAM (be)),
         "lmgen_prepare");
}

static void
cuda_lmgen_finish (PpxBackend *be, const PpxLmgenDims *d, PpxTensor *state, const PpxTensor *slot,
                   const PpxTensor *sampled, PpxTensor *out, int out_stride, int M)
{
  cuda_enter (be);
  cuda_check (be,
         ppx_cuda_lmgen_finish (d, I32 (state), (int) (state->n / PPX_LMGEN_STATE), I32 (slot), I32 (sampled),
                                I32 (out), out_stride, M, STREAM (be)),
         "lmgen_finish");
}

static void
cuda_positions (PpxBackend *be, PpxTensor *offsets, PpxTensor *pos, int M, int T)
{
  cuda_enter (be);
  cuda_check (be, ppx_cuda_positions (I32 (offsets), I32 (pos), M, T, STREAM (be)), "positions");
}

static const char *
cuda_device_name (const PpxBackend *be)
{
  return PRIV (be)->device_name;
}

static const PpxBackendOps cuda_ops = {
  .kind = PPX_BACKEND_CUDA,
  .kv_formats = (1u << PPX_TENSOR_F32) | (1u << PPX_TENSOR_BF16) | (1u << PPX_TENSOR_FP8),
  .free = cuda_free,
  .sync = cuda_sync,
  .free_bytes = cuda_free_bytes,
  .device_name = cuda_device_name,
  .alloc = cuda_alloc,
  .dealloc = cuda_dealloc,
  .upload = cuda_upload,
  .download = cuda_download,
  .fill = cuda_fill,
  .copy2d = cuda_copy2d,
  .weight_init = cuda_weight_init,
  .weight_release = cuda_weight_release,
  .linear = cuda_linear,
  .embed = cuda_embed,
  .act = cuda_act,
  .add = cuda_add,
  .add_scaled = cuda_add_scaled,
  .silu_gate = cuda_silu_gate,
  .rmsnorm = cuda_rmsnorm,
  .rmsnorm_linear = cuda_rmsnorm_linear,
  .silu_gate_linear = cuda_silu_gate_linear,
  .layer_tail = cuda_layer_tail,
  .layernorm = cuda_layernorm,
  .transpose = cuda_transpose,
  .rope = cuda_rope,
  .attention = cuda_attention,
  .conv1d = cuda_conv1d,
  .conv_transpose1d = cuda_conv_transpose1d,
  .vq_encode = cuda_vq_encode,
  .vq_decode = cuda_vq_decode,
  .sample = cuda_sample,
  .force_tokens = cuda_force_tokens,
  .lmgen_prepare = cuda_lmgen_prepare,
  .lmgen_finish = cuda_lmgen_finish,
  .positions = cuda_positions,
  .graph_begin = cuda_graph_begin,
  .graph_end = cuda_graph_end,
  .graph_launch = cuda_graph_launch,
  .graph_free = cuda_graph_free,
};

gboolean
cuda_is_backend (const PpxBackend *be)
{
  return be->ops == &cuda_ops;
}

gboolean
ppx_backend_cuda_available (int *n_devices)
{
  int n = 0;
  ppx_cuda_device_count (&n);
  if (n_devices)
    *n_devices = n;
  return n > 0;
}

PpxBackend *
ppx_backend_cuda_new (int device, GError **error)
{
  int n = 0;
  int e = ppx_cuda_device_count (&n);
  if (n <= 0) {
    g_set_error (error, PPX_ERROR, PPX_ERROR_UNSUPPORTED,
                 "CUDA backend: no usable GPU (no NVIDIA driver or device; CUDA says: %s)",
                 e ? ppx_cuda_error_string (e) : "no CUDA devices found");
    return NULL;
  }
  if (device < 0 || device >= n) {
    g_set_error (error, PPX_ERROR, PPX_ERROR_INVALID, "CUDA backend: GPU %d does not exist (%d present)", device, n);
    return NULL;
  }
  CudaPriv *p = g_new0 (CudaPriv, 1);
  p->device = device;
  g_mutex_init (&p->scratch_lock);
  g_mutex_init (&p->rope_lock);
  g_mutex_init (&p->linear_lock);
  g_mutex_init (&p->capture_lock);
  p->rope_tables = g_array_new (FALSE, FALSE, sizeof (RopeTable));
  p->capture_rope = g_array_new (FALSE, FALSE, sizeof (RopeTable));
  if ((e = ppx_cuda_set_device (device)) || (e = ppx_cuda_device_name (device, p->device_name, sizeof p->device_name,
                                                                        NULL)) ||
      (e = ppx_cuda_stream_create (&p->stream))) {
    g_set_error (error, PPX_ERROR, PPX_ERROR_UNSUPPORTED, "CUDA backend: cannot start GPU %d: %s", device,
                 ppx_cuda_error_string (e));
    g_mutex_clear (&p->scratch_lock);
    g_mutex_clear (&p->rope_lock);
    g_mutex_clear (&p->linear_lock);
    g_mutex_clear (&p->capture_lock);
    g_array_free (p->rope_tables, TRUE);
    g_array_free (p->capture_rope, TRUE);
    g_free (p);
    return NULL;
  }
  PpxBackend *be = g_new0 (PpxBackend, 1);
  be->ops = &cuda_ops;
  be->n_threads = 1;
  be->priv = p;
  return be;
}
