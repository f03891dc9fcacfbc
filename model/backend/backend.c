/* Backend-neutral parts of backend.h: tensor and weight bookkeeping, and dispatch to the vtable. */
#include "backend-impl.h"
#include "quant.h"

const char *
ppx_weight_format_name (PpxWeightFormat f)
{
  switch (f) {
    case PPX_WFMT_F32:
      return "f32";
    case PPX_WFMT_BF16:
      return "bf16";
    case PPX_WFMT_INT8:
      return "int8";
    case PPX_WFMT_INT4:
      return "int4";
  }
  return "?";
}

gsize
ppx_weight_desc_bytes (const PpxWeightDesc *d, gsize *scale_bytes)
{
  *scale_bytes = 0;
  switch (d->format) {
    case PPX_WFMT_F32:
      return (gsize) d->rows * d->cols * 4;
    case PPX_WFMT_BF16:
      return (gsize) d->rows * d->cols * 2;
    case PPX_WFMT_INT8:
      *scale_bytes = (gsize) d->rows * 4;
      return (gsize) d->rows * d->cols;
    case PPX_WFMT_INT4:
      if (!ppx_q4_group_size_valid (d->group_size))
        return 0;
      *scale_bytes = (gsize) d->rows * ppx_q4_n_groups (d->cols, d->group_size) * 4;
      return ppx_q4_packed_bytes (d->rows, d->cols);
  }
  return 0;
}

/* The counters of ppx_backend_counters (relaxed atomics: ops may come from several threads). */
#define COUNT(be, field) __atomic_add_fetch (&(be)->counters.field, 1, __ATOMIC_RELAXED)

void
ppx_backend_counters (const PpxBackend *be, PpxBackendCounters *c)
{
  c->n_ops = __atomic_load_n (&be->counters.n_ops, __ATOMIC_RELAXED);
  c->n_uploads = __atomic_load_n (&be->counters.n_uploads, __ATOMIC_RELAXED);
  c->n_downloads = __atomic_load_n (&be->counters.n_downloads, __ATOMIC_RELAXED);
  c->n_graph_launches = __atomic_load_n (&be->counters.n_graph_launches, __ATOMIC_RELAXED);
}

void
ppx_backend_free (PpxBackend *be)
{
  if (be)
    be->ops->free (be);
}

const char *
ppx_backend_name (const PpxBackend *be)
{
  return ppx_backend_kind_name (be->ops->kind);
}

PpxBackendKind
ppx_backend_kind (const PpxBackend *be)
{
  return be->ops->kind;
}

const char *
ppx_backend_device_name (const PpxBackend *be)
{
  return be->ops->device_name ? be->ops->device_name (be) : NULL;
}

void
ppx_backend_sync (PpxBackend *be)
{
  be->ops->sync (be);
}

gboolean
ppx_backend_borrows_host_memory (const PpxBackend *be)
{
  return be->ops->borrows_host_memory;
}

guint64
ppx_backend_allocated_bytes (const PpxBackend *be)
{
  return be->allocated;
}

guint64
ppx_backend_free_bytes (PpxBackend *be)
{
  return be->ops->free_bytes ? be->ops->free_bytes (be) : 0;
}

/* Bytes of a tensor's allocation: its elements, or an FP8 cache's values, padding and scales. */
static gsize
storage_bytes (PpxTensorType type, gsize n, gsize extra)
{
  const gsize b = n * ppx_tensor_type_size (type);
  return extra ? ppx_kv_scale_offset (b) + extra : b;
}

static PpxTensor *
tensor_alloc (PpxBackend *be, PpxTensorType type, gsize n, gsize extra, GError **error)
{
  const gsize bytes = storage_bytes (type, n, extra);
  void *p = be->ops->alloc (be, MAX (bytes, 4), error);
  if (!p)
    return NULL;
  PpxTensor *t = g_new0 (PpxTensor, 1);
  t->be = be;
  t->type = type;
  t->n = n;
  t->extra = extra;
  t->data = p;
  return t;
}

PpxTensor *
ppx_tensor_new (PpxBackend *be, PpxTensorType type, gsize n, GError **error)
{
  if (type == PPX_TENSOR_FP8) {
    g_set_error (error, PPX_ERROR, PPX_ERROR_INVALID,
                 "FP8 tensors are KV caches (values with scales): make them with ppx_kv_cache_new");
    return NULL;
  }
  return tensor_alloc (be, type, n, 0, error);
}

PpxTensor *
ppx_tensor_view (PpxTensor *parent, gsize off, gsize n)
{
  g_return_val_if_fail (off + n <= parent->n, NULL);
  PpxTensor *t = g_new0 (PpxTensor, 1);
  t->be = parent->be;
  t->type = parent->type;
  t->n = n;
  t->data = (char *) parent->data + off * ppx_tensor_type_size (parent->type);
  t->parent = parent;
  return t;
}

void
ppx_tensor_free (PpxTensor *t)
{
  if (!t)
    return;
  if (!t->parent)
    t->be->ops->dealloc (t->be, t->data, MAX (storage_bytes (t->type, t->n, t->extra), 4));
  g_free (t);
}

gsize
ppx_tensor_numel (const PpxTensor *t)
{
  return t->n;
}

PpxTensorType
ppx_tensor_type (const PpxTensor *t)
{
  return t->type;
}

gsize
ppx_tensor_bytes (const PpxTensor *t)
{
  return storage_bytes (t->type, t->n, t->extra);
}

void
ppx_tensor_upload (PpxTensor *t, gsize off, const void *host, gsize n)
{
  g_return_if_fail (off + n <= t->n);
  const gsize es = ppx_tensor_type_size (t->type);
  COUNT (t->be, n_uploads);
  t->be->ops->upload (t->be, (char *) t->data + off * es, host, n * es);
}

void
ppx_tensor_download (PpxTensor *t, gsize off, void *host, gsize n)
{
  g_return_if_fail (off + n <= t->n);
  const gsize es = ppx_tensor_type_size (t->type);
  COUNT (t->be, n_downloads);
  t->be->ops->download (t->be, host, (const char *) t->data + off * es, n * es);
}

void
ppx_tensor_upload_raw (PpxTensor *t, const void *host)
{
  COUNT (t->be, n_uploads);
  t->be->ops->upload (t->be, t->data, host, ppx_tensor_bytes (t));
}

void
ppx_tensor_download_raw (PpxTensor *t, void *host)
{
  COUNT (t->be, n_downloads);
  t->be->ops->download (t->be, host, t->data, ppx_tensor_bytes (t));
}

/* Every op but attention takes F32/I32 tensors (NULL: an optional one left out). */
static inline gboolean
plain (const PpxTensor *t)
{
  return t == NULL || t->type == PPX_TENSOR_F32 || t->type == PPX_TENSOR_I32;
}

void
ppx_tensor_fill (PpxTensor *t, float value)
{
  g_return_if_fail (plain (t));
  COUNT (t->be, n_ops);
  t->be->ops->fill (t->be, t, value);
}

void
ppx_tensor_copy2d (PpxTensor *dst, gsize doff, gsize dld, const PpxTensor *src, gsize soff, gsize sld, gsize rows,
                   gsize cols)
{
  if (rows == 0 || cols == 0)
    return;
  g_return_if_fail (plain (dst) && plain (src));
  g_return_if_fail (doff + (rows - 1) * dld + cols <= dst->n && soff + (rows - 1) * sld + cols <= src->n);
  COUNT (dst->be, n_ops);
  dst->be->ops->copy2d (dst->be, dst, doff, dld, src, soff, sld, rows, cols);
}

/* A whole tensor's storage as 4-byte words, for copy2d (no allocation: it points at t's memory). */
static PpxTensor
storage_words (const PpxTensor *t)
{
  return (PpxTensor){.be = t->be, .type = PPX_TENSOR_I32, .n = ppx_tensor_bytes (t) / 4, .data = t->data};
}

gboolean
ppx_kv_cache_copy (PpxTensor *dst, int dst_slot, int dst_cap, int dst_pos, const PpxTensor *src, int src_slot,
                   int src_cap, int src_pos, int n, int H, int Dh)
{
  const gsize HD = (gsize) H * Dh, es = ppx_tensor_type_size (src->type);
  if (dst->type != src->type || dst->be != src->be || dst->parent || src->parent || src->type == PPX_TENSOR_I32 ||
      H <= 0 || Dh <= 0 || n < 0 || dst_slot < 0 || src_slot < 0 || dst_pos < 0 || src_pos < 0 ||
      dst_pos + n > dst_cap || src_pos + n > src_cap || (gsize) (dst_slot + 1) * dst_cap * HD > dst->n ||
      (gsize) (src_slot + 1) * src_cap * HD > src->n || (HD * es) % 4 != 0)
    return FALSE;
  if (n == 0)
    return TRUE;
  PpxTensor d = storage_words (dst), s = storage_words (src);
  const gsize row = HD * es / 4; /* words of one position */
  COUNT (dst->be, n_ops);
  dst->be->ops->copy2d (dst->be, &d, ((gsize) dst_slot * dst_cap + dst_pos) * row, 0, &s,
                        ((gsize) src_slot * src_cap + src_pos) * row, 0, 1, (gsize) n * row);
  if (src->type == PPX_TENSOR_FP8) { /* scales [slot, H, cap] after the values */
    const gsize d0 = ppx_kv_scale_offset (dst->n) / 4, s0 = ppx_kv_scale_offset (src->n) / 4;
    COUNT (dst->be, n_ops);
    dst->be->ops->copy2d (dst->be, &d, d0 + (gsize) dst_slot * H * dst_cap + dst_pos, dst_cap, &s,
                          s0 + (gsize) src_slot * H * src_cap + src_pos, src_cap, H, n);
  }
  return TRUE;
}

PpxWeight *
ppx_weight_new (PpxBackend *be, const PpxWeightDesc *desc, GError **error)
{
  if (desc->rows <= 0 || desc->cols <= 0) {
    g_set_error (error, PPX_ERROR, PPX_ERROR_INVALID, "weight with empty shape [%" G_GINT64_FORMAT ", %" G_GINT64_FORMAT "]",
                 desc->rows, desc->cols);
    return NULL;
  }
  PpxWeight *w = g_new0 (PpxWeight, 1);
  w->be = be;
  w->format = desc->format;
  w->rows = desc->rows;
  w->cols = desc->cols;
  w->group_size = desc->group_size;
  if (!be->ops->weight_init (be, w, desc, error)) {
    g_free (w);
    return NULL;
  }
  return w;
}

void
ppx_weight_free (PpxWeight *w)
{
  if (!w)
    return;
  if (!w->parent)
    w->be->ops->weight_release (w->be, w);
  g_free (w);
}

int64_t
ppx_weight_rows (const PpxWeight *w)
{
  return w->rows;
}

int64_t
ppx_weight_cols (const PpxWeight *w)
{
  return w->cols;
}

guint64
ppx_weight_bytes (const PpxWeight *w)
{
  return w->data_bytes + w->scale_bytes;
}

PpxWeight *
ppx_weight_slice_rows (PpxWeight *w, int64_t row0, int64_t rows)
{
  g_return_val_if_fail (row0 >= 0 && rows > 0 && row0 + rows <= w->rows, NULL);
  PpxWeight *s = g_new0 (PpxWeight, 1);
  *s = *w;
  s->parent = w;
  s->owned_data = s->owned_scales = NULL;
  s->rows = rows;
  gsize row_bytes = w->data_bytes / (gsize) w->rows;
  gsize row_scales = w->scale_bytes / 4 / (gsize) w->rows;
  s->data = (const char *) w->data + (gsize) row0 * row_bytes;
  s->scales = w->scales ? w->scales + (gsize) row0 * row_scales : NULL;
  s->data_bytes = (gsize) rows * row_bytes;
  s->scale_bytes = (gsize) rows * row_scales * 4;
  return s;
}

#define BE(t) ((t)->be)

void
ppx_op_linear (PpxBackend *be, const PpxWeight *w, const PpxTensor *x, gsize ldx, PpxTensor *y, gsize ldy, int M,
               gboolean accumulate)
{
  g_return_if_fail (plain (x) && plain (y));
  COUNT (be, n_ops);
  be->ops->linear (be, w, x, ldx, y, ldy, M, accumulate);
}

void
ppx_op_embed (PpxBackend *be, const PpxWeight *table, const PpxTensor *ids, int id_index, int id_stride,
              PpxTensor *out, int M, gboolean accumulate)
{
  g_return_if_fail (plain (ids) && plain (out));
  COUNT (be, n_ops);
  be->ops->embed (be, table, ids, id_index, id_stride, out, M, accumulate);
}

void
ppx_op_act (PpxBackend *be, PpxActivation act, const PpxTensor *x, PpxTensor *y, gsize n)
{
  g_return_if_fail (plain (x) && plain (y) && act != PPX_ACT_NONE);
  COUNT (be, n_ops);
  be->ops->act (be, act, x, y, n);
}

void
ppx_op_add (PpxBackend *be, const PpxTensor *a, const PpxTensor *b, PpxTensor *y, gsize n)
{
  g_return_if_fail (plain (a) && plain (b) && plain (y));
  COUNT (be, n_ops);
  be->ops->add (be, a, b, y, n);
}

void
ppx_op_add_scaled (PpxBackend *be, const PpxTensor *x, const PpxTensor *gamma, PpxTensor *y, gsize rows, gsize D)
{
  g_return_if_fail (plain (x) && plain (gamma) && plain (y));
  COUNT (be, n_ops);
  be->ops->add_scaled (be, x, gamma, y, rows, D);
}

void
ppx_op_silu_gate (PpxBackend *be, const PpxTensor *h, PpxTensor *u, gsize rows, gsize H)
{
  g_return_if_fail (plain (h) && plain (u));
  COUNT (be, n_ops);
  be->ops->silu_gate (be, h, u, rows, H);
}

void
ppx_op_rmsnorm (PpxBackend *be, const PpxTensor *x, const PpxTensor *alpha, PpxTensor *y, gsize rows, gsize D,
                float eps)
{
  g_return_if_fail (plain (x) && plain (alpha) && plain (y));
  COUNT (be, n_ops);
  be->ops->rmsnorm (be, x, alpha, y, rows, D, eps);
}

void
ppx_op_rmsnorm_linear (PpxBackend *be, const PpxTensor *x, const PpxTensor *alpha, float eps, PpxTensor *h,
                       const PpxWeight *w, PpxTensor *y, gsize ldy, int M, gboolean accumulate)
{
  g_return_if_fail (plain (x) && plain (alpha) && plain (h) && plain (y));
  if (be->ops->rmsnorm_linear && be->ops->rmsnorm_linear (be, x, alpha, eps, h, w, y, ldy, M, accumulate)) {
    COUNT (be, n_ops);
    return;
  }
  ppx_op_rmsnorm (be, x, alpha, h, M, (gsize) w->cols, eps);
  ppx_op_linear (be, w, h, (gsize) w->cols, y, ldy, M, accumulate);
}

void
ppx_op_silu_gate_linear (PpxBackend *be, const PpxTensor *h, PpxTensor *u, const PpxWeight *w, PpxTensor *y,
                         gsize ldy, int M, gboolean accumulate)
{
  g_return_if_fail (plain (h) && plain (u) && plain (y));
  if (be->ops->silu_gate_linear && be->ops->silu_gate_linear (be, h, u, w, y, ldy, M, accumulate)) {
    COUNT (be, n_ops);
    return;
  }
  ppx_op_silu_gate (be, h, u, M, (gsize) w->cols);
  ppx_op_linear (be, w, u, (gsize) w->cols, y, ldy, M, accumulate);
}

void
ppx_op_layer_tail (PpxBackend *be, const PpxLayerTail *t, int M)
{
  g_return_if_fail (t && plain (t->att) && plain (t->x) && plain (t->norm2) && plain (t->h) && plain (t->ff) &&
                    plain (t->u) && plain (t->y) && (!t->next_norm || plain (t->next_norm)));
  const gsize d = (gsize) t->out_proj->rows, F = (gsize) t->linear_out->cols, n = (gsize) t->next->rows;
  g_return_if_fail ((gsize) t->out_proj->cols == d && (gsize) t->linear_in->cols == d &&
                    (gsize) t->linear_in->rows == 2 * F && (gsize) t->linear_out->rows == d &&
                    (gsize) t->next->cols == d);
  if (be->ops->layer_tail && be->ops->layer_tail (be, t, M)) {
    COUNT (be, n_ops);
    return;
  }
  ppx_op_linear (be, t->out_proj, t->att, d, t->x, d, M, TRUE);
  ppx_op_rmsnorm_linear (be, t->x, t->norm2, t->eps, t->h, t->linear_in, t->ff, 2 * F, M, FALSE);
  ppx_op_silu_gate_linear (be, t->ff, t->u, t->linear_out, t->x, d, M, TRUE);
  if (t->next_norm)
    ppx_op_rmsnorm_linear (be, t->x, t->next_norm, t->eps, t->h, t->next, t->y, n, M, FALSE);
  else
    ppx_op_linear (be, t->next, t->x, d, t->y, n, M, FALSE);
}

void
ppx_op_layernorm (PpxBackend *be, const PpxTensor *x, const PpxTensor *w, const PpxTensor *b, PpxTensor *y,
                  gsize rows, gsize D, float eps)
{
  g_return_if_fail (plain (x) && plain (w) && plain (b) && plain (y));
  COUNT (be, n_ops);
  be->ops->layernorm (be, x, w, b, y, rows, D, eps);
}

void
ppx_op_transpose (PpxBackend *be, const PpxTensor *x, PpxTensor *y, gsize M, gsize A, gsize B)
{
  g_return_if_fail (plain (x) && plain (y));
  COUNT (be, n_ops);
  be->ops->transpose (be, x, y, M, A, B);
}

void
ppx_op_rope (PpxBackend *be, PpxTensor *qkv, const PpxTensor *pos, gsize rows, int H, int Dh, float max_period)
{
  g_return_if_fail (plain (qkv) && plain (pos));
  COUNT (be, n_ops);
  be->ops->rope (be, qkv, pos, rows, H, Dh, max_period);
}

/* Whether t is a whole KV cache of some slots x cap x H*Dh (an FP8 one with its scales). */
static gboolean
kv_cache_fits (const PpxTensor *t, int cap, int H, int Dh)
{
  const gsize row = (gsize) cap * H * Dh;
  if (cap <= 0 || H <= 0 || Dh <= 0 || t->n == 0 || t->n % row != 0)
    return FALSE;
  switch (t->type) {
    case PPX_TENSOR_F32:
    case PPX_TENSOR_BF16:
      return TRUE;
    case PPX_TENSOR_FP8:
      return t->extra == t->n / row * cap * H * sizeof (float);
    case PPX_TENSOR_I32:
      break;
  }
  return FALSE;
}

void
ppx_op_attention (PpxBackend *be, const PpxTensor *qkv, const PpxTensor *pos, const PpxTensor *kv_slot,
                  PpxTensor *kcache, PpxTensor *vcache, PpxTensor *out, int M, int T, int H, int Dh, int cap,
                  int context)
{
  g_return_if_fail (plain (qkv) && plain (pos) && plain (kv_slot) && plain (out));
  g_return_if_fail (kv_cache_fits (kcache, cap, H, Dh) && kv_cache_fits (vcache, cap, H, Dh) &&
                    kcache->type == vcache->type);
  COUNT (be, n_ops);
  be->ops->attention (be, qkv, pos, kv_slot, kcache, vcache, out, M, T, H, Dh, cap, context);
}

void
ppx_op_conv1d (PpxBackend *be, const PpxTensor *w, const PpxTensor *bias, const PpxTensor *x, PpxTensor *prev,
               PpxTensor *y, int M, int Cin, int Cout, int K, int Lin, int stride, int dilation, int groups)
{
  g_return_if_fail (plain (w) && plain (bias) && plain (x) && plain (prev) && plain (y));
  COUNT (be, n_ops);
  be->ops->conv1d (be, PPX_ACT_NONE, w, bias, x, prev, NULL, y, M, Cin, Cout, K, Lin, stride, dilation, groups);
}

void
ppx_op_conv1d_fused (PpxBackend *be, PpxActivation act, const PpxTensor *w, const PpxTensor *bias, const PpxTensor *x,
                     PpxTensor *prev, const PpxTensor *res, PpxTensor *y, int M, int Cin, int Cout, int K, int Lin,
                     int stride, int dilation, int groups)
{
  g_return_if_fail (plain (w) && plain (bias) && plain (x) && plain (prev) && plain (res) && plain (y));
  g_return_if_fail (res != x && y != x);
  COUNT (be, n_ops);
  be->ops->conv1d (be, act, w, bias, x, prev, res, y, M, Cin, Cout, K, Lin, stride, dilation, groups);
}

void
ppx_op_conv_transpose1d (PpxBackend *be, const PpxTensor *w, const PpxTensor *bias, const PpxTensor *x,
                         PpxTensor *partial, PpxTensor *y, int M, int Cin, int Cout, int K, int T, int stride,
                         int groups)
{
  g_return_if_fail (plain (w) && plain (bias) && plain (x) && plain (partial) && plain (y));
  COUNT (be, n_ops);
  be->ops->conv_transpose1d (be, PPX_ACT_NONE, w, bias, x, partial, y, M, Cin, Cout, K, T, stride, groups);
}

void
ppx_op_conv_transpose1d_act (PpxBackend *be, PpxActivation act, const PpxTensor *w, const PpxTensor *bias,
                             const PpxTensor *x, PpxTensor *partial, PpxTensor *y, int M, int Cin, int Cout, int K,
                             int T, int stride, int groups)
{
  g_return_if_fail (plain (w) && plain (bias) && plain (x) && plain (partial) && plain (y));
  COUNT (be, n_ops);
  be->ops->conv_transpose1d (be, act, w, bias, x, partial, y, M, Cin, Cout, K, T, stride, groups);
}

void
ppx_op_vq_encode (PpxBackend *be, const PpxTensor *codebooks, PpxTensor *r, PpxTensor *codes, int code_off,
                  int code_stride, int M, int ncb, int bins, int dim)
{
  g_return_if_fail (plain (codebooks) && plain (r) && plain (codes));
  COUNT (be, n_ops);
  be->ops->vq_encode (be, codebooks, r, codes, code_off, code_stride, M, ncb, bins, dim);
}

void
ppx_op_vq_decode (PpxBackend *be, const PpxTensor *codebooks, const PpxTensor *codes, int code_off, int code_stride,
                  PpxTensor *y, int M, int ncb, int bins, int dim)
{
  g_return_if_fail (plain (codebooks) && plain (codes) && plain (y));
  COUNT (be, n_ops);
  be->ops->vq_decode (be, codebooks, codes, code_off, code_stride, y, M, ncb, bins, dim);
}

void
ppx_op_sample (PpxBackend *be, const PpxTensor *logits, int V, PpxTensor *tokens, int tok_off, int tok_stride,
               const PpxTensor *params, int stream, int M)
{
  g_return_if_fail (plain (logits) && plain (tokens) && plain (params));
  COUNT (be, n_ops);
  be->ops->sample (be, logits, V, tokens, tok_off, tok_stride, params, stream, M);
}

void
ppx_op_force_tokens (PpxBackend *be, PpxTensor *tokens, int off, int stride, const PpxTensor *forced, int foff,
                     int fstride, int M)
{
  g_return_if_fail (plain (tokens) && plain (forced));
  COUNT (be, n_ops);
  be->ops->force_tokens (be, tokens, off, stride, forced, foff, fstride, M);
}

static inline gboolean
i32 (const PpxTensor *t)
{
  return t != NULL && t->type == PPX_TENSOR_I32;
}

void
ppx_op_lmgen_prepare (PpxBackend *be, const PpxLmgenDims *d, PpxTensor *state, const PpxTensor *slot,
                      const PpxTensor *codes, int code_off, int code_stride, PpxTensor *ids, PpxTensor *forced,
                      PpxTensor *pos, PpxTensor *params, int M)
{
  const gsize W = PPX_LMGEN_MAX_STREAMS;
  if (M <= 0)
    return;
  g_return_if_fail (i32 (state) && i32 (slot) && i32 (codes) && i32 (ids) && i32 (forced) && i32 (pos) &&
                    i32 (params));
  g_return_if_fail (d->n_streams <= (int) W && d->n_streams >= 1 + 2 * d->n_user && d->dep_q < d->n_streams);
  g_return_if_fail (slot->n >= (gsize) M && ids->n >= M * W && forced->n >= M * W && pos->n >= (gsize) M &&
                    params->n >= (gsize) M * PPX_SAMPLE_PARAMS && state->n % PPX_LMGEN_STATE == 0);
  g_return_if_fail (code_off >= 0 && code_stride >= 0 &&
                    (gsize) (M - 1) * code_stride + code_off + d->n_user <= codes->n);
  COUNT (be, n_ops);
  be->ops->lmgen_prepare (be, d, state, slot, codes, code_off, code_stride, ids, forced, pos, params, M);
}

void
ppx_op_lmgen_finish (PpxBackend *be, const PpxLmgenDims *d, PpxTensor *state, const PpxTensor *slot,
                     const PpxTensor *sampled, PpxTensor *out, int out_stride, int M)
{
  const gsize W = PPX_LMGEN_MAX_STREAMS;
  if (M <= 0)
    return;
  g_return_if_fail (i32 (state) && i32 (slot) && i32 (sampled) && i32 (out));
  g_return_if_fail (d->n_streams <= (int) W && d->dep_q < d->n_streams);
  g_return_if_fail (out_stride >= (int) (W + PPX_LMGEN_STATE) && out->n >= (gsize) M * out_stride &&
                    sampled->n >= M * W && slot->n >= (gsize) M && state->n % PPX_LMGEN_STATE == 0);
  COUNT (be, n_ops);
  be->ops->lmgen_finish (be, d, state, slot, sampled, out, out_stride, M);
}

void
ppx_op_positions (PpxBackend *be, PpxTensor *offsets, PpxTensor *pos, int M, int T)
{
  if (M <= 0 || T <= 0)
    return;
  g_return_if_fail (i32 (offsets) && i32 (pos) && offsets->n >= (gsize) M && pos->n >= (gsize) M * T);
  COUNT (be, n_ops);
  be->ops->positions (be, offsets, pos, M, T);
}

/* ---- graphs ---- */

gboolean
ppx_backend_supports_graphs (const PpxBackend *be)
{
  return be->ops->graph_begin != NULL;
}

gboolean
ppx_backend_graph_begin (PpxBackend *be, GError **error)
{
  if (!ppx_backend_supports_graphs (be)) {
    g_set_error (error, PPX_ERROR, PPX_ERROR_UNSUPPORTED, "the %s backend does not record graphs", ppx_backend_name (be));
    return FALSE;
  }
  return be->ops->graph_begin (be, error);
}

PpxGraph *
ppx_backend_graph_end (PpxBackend *be, GError **error)
{
  if (!be->ops->graph_end) {
    g_set_error (error, PPX_ERROR, PPX_ERROR_UNSUPPORTED, "the %s backend does not record graphs", ppx_backend_name (be));
    return NULL;
  }
  return be->ops->graph_end (be, error);
}

gboolean
ppx_backend_graph_launch (PpxBackend *be, PpxGraph *g)
{
  g_return_val_if_fail (g != NULL && g->be == be && be->ops->graph_launch, FALSE);
  COUNT (be, n_graph_launches);
  return be->ops->graph_launch (be, g);
}

gsize
ppx_graph_nodes (const PpxGraph *g)
{
  return g ? g->nodes : 0;
}

void
ppx_graph_free (PpxGraph *g)
{
  if (g)
    g->be->ops->graph_free (g);
}

const char *
ppx_tensor_type_name (PpxTensorType type)
{
  switch (type) {
    case PPX_TENSOR_F32:
      return "f32";
    case PPX_TENSOR_I32:
      return "i32";
    case PPX_TENSOR_BF16:
      return "bf16";
    case PPX_TENSOR_FP8:
      return "fp8";
  }
  return "?";
}

PpxTensorType
ppx_kv_storage (PpxKvFormat fmt)
{
  switch (ppx_kv_format_resolve (fmt)) {
    case PPX_KV_F32:
      return PPX_TENSOR_F32;
    case PPX_KV_FP8:
      return PPX_TENSOR_FP8;
    case PPX_KV_AUTO:
    case PPX_KV_BF16:
      break;
  }
  return PPX_TENSOR_BF16;
}

static gboolean
is_kv_storage (PpxTensorType type)
{
  return type == PPX_TENSOR_F32 || type == PPX_TENSOR_BF16 || type == PPX_TENSOR_FP8;
}

guint64
ppx_kv_cache_bytes (PpxTensorType type, gsize n_slots, int cap, int H, int Dh)
{
  const gsize n = n_slots * (gsize) cap * H * Dh;
  return storage_bytes (type, n, type == PPX_TENSOR_FP8 ? n_slots * (gsize) cap * H * sizeof (float) : 0);
}

PpxTensor *
ppx_kv_cache_new (PpxBackend *be, PpxTensorType type, int n_slots, int cap, int H, int Dh, GError **error)
{
  if (n_slots <= 0 || cap <= 0 || H <= 0 || Dh <= 0) {
    g_set_error (error, PPX_ERROR, PPX_ERROR_INVALID, "KV cache with an empty shape (%d slots x %d positions x %d x %d)",
                 n_slots, cap, H, Dh);
    return NULL;
  }
  if (!is_kv_storage (type)) {
    g_set_error (error, PPX_ERROR, PPX_ERROR_INVALID, "unknown KV cache format %d (storage type %s)", (int) type,
                 ppx_tensor_type_name (type));
    return NULL;
  }
  if (!(be->ops->kv_formats & (1u << type))) {
    g_set_error (error, PPX_ERROR, PPX_ERROR_UNSUPPORTED, "%s backend: %s KV caches are not supported",
                 ppx_backend_name (be), ppx_tensor_type_name (type));
    return NULL;
  }
  const gsize n = (gsize) n_slots * cap * H * Dh;
  return tensor_alloc (be, type, n, type == PPX_TENSOR_FP8 ? (gsize) n_slots * cap * H * sizeof (float) : 0, error);
}
