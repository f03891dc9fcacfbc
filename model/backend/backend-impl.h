/* Private: what a backend implements (the vtable behind backend.h), and the shared object layouts. */
#ifndef PPX_BACKEND_IMPL_H
#define PPX_BACKEND_IMPL_H

#include "backend.h"

typedef struct {
  PpxBackendKind kind; /* which backend this is (its name: ppx_backend_kind_name) */
  /* TRUE when weights may keep pointing into host memory given with borrow (the CPU backend's
   * zero-copy mmap); FALSE when every weight is copied to the device, so host files can be closed. */
  gboolean borrows_host_memory;
  /* The KV cache storage types its attention reads and writes: bits (1 << PpxTensorType). */
  unsigned kv_formats;
  void (*free) (PpxBackend *be);
  void (*sync) (PpxBackend *be);
  guint64 (*free_bytes) (PpxBackend *be); /* may be NULL: unknown */
  const char *(*device_name) (const PpxBackend *be); /* may be NULL: the backend names no device */
  void *(*alloc) (PpxBackend *be, gsize bytes, GError **error);
  void (*dealloc) (PpxBackend *be, void *ptr, gsize bytes);
  void (*upload) (PpxBackend *be, void *dst, const void *src, gsize bytes);
  void (*download) (PpxBackend *be, void *dst, const void *src, gsize bytes);
  void (*fill) (PpxBackend *be, PpxTensor *t, float value);
  void (*copy2d) (PpxBackend *be, PpxTensor *dst, gsize doff, gsize dld, const PpxTensor *src, gsize soff, gsize sld,
                  gsize rows, gsize cols);
  gboolean (*weight_init) (PpxBackend *be, PpxWeight *w, const PpxWeightDesc *d, GError **error);
  void (*weight_release) (PpxBackend *be, PpxWeight *w);
  void (*linear) (PpxBackend *be, const PpxWeight *w, const PpxTensor *x, gsize ldx, PpxTensor *y, gsize ldy, int M,
                  gboolean accumulate);
  void (*embed) (PpxBackend *be, const PpxWeight *table, const PpxTensor *ids, int id_index, int id_stride,
                 PpxTensor *out, int M, gboolean accumulate);
  void (*act) (PpxBackend *be, PpxActivation act, const PpxTensor *x, PpxTensor *y, gsize n);
  void (*add) (PpxBackend *be, const PpxTensor *a, const PpxTensor *b, PpxTensor *y, gsize n);
  void (*add_scaled) (PpxBackend *be, const PpxTensor *x, const PpxTensor *gamma, PpxTensor *y, gsize rows, gsize D);
  void (*silu_gate) (PpxBackend *be, const PpxTensor *h, PpxTensor *u, gsize rows, gsize H);
  void (*rmsnorm) (PpxBackend *be, const PpxTensor *x, const PpxTensor *alpha, PpxTensor *y, gsize rows, gsize D,
                   float eps);
  /* optional: ppx_op_rmsnorm_linear in one pass; FALSE (nothing done) where it cannot fuse, and NULL, leave it to
   * rmsnorm into h, then linear */
  gboolean (*rmsnorm_linear) (PpxBackend *be, const PpxTensor *x, const PpxTensor *alpha, float eps, PpxTensor *h,
                          const PpxWeight *w, PpxTensor *y, gsize ldy, int M, gboolean accumulate);
  /* optional, likewise: ppx_op_silu_gate_linear in one pass, FALSE (nothing done) where it cannot fuse */
  gboolean (*silu_gate_linear) (PpxBackend *be, const PpxTensor *h, PpxTensor *u, const PpxWeight *w, PpxTensor *y,
                                gsize ldy, int M, gboolean accumulate);
  /* optional, likewise: ppx_op_layer_tail in one pass, FALSE (nothing done) where it cannot fuse */
  gboolean (*layer_tail) (PpxBackend *be, const PpxLayerTail *t, int M);
  void (*layernorm) (PpxBackend *be, const PpxTensor *x, const PpxTensor *w, const PpxTensor *b, PpxTensor *y,
                     gsize rows, gsize D, float eps);
  void (*transpose) (PpxBackend *be, const PpxTensor *x, PpxTensor *y, gsize M, gsize A, gsize B);
  void (*rope) (PpxBackend *be, PpxTensor *qkv, const PpxTensor *pos, gsize rows, int H, int Dh, float max_period);
  void (*attention) (PpxBackend *be, const PpxTensor *qkv, const PpxTensor *pos, const PpxTensor *kv_slot,
                     PpxTensor *kcache, PpxTensor *vcache, PpxTensor *out, int M, int T, int H, int Dh, int cap,
                     int context);
  /* act: PPX_ACT_NONE or the activation applied to x; res: NULL or the residual (ppx_op_conv1d_fused) */
  void (*conv1d) (PpxBackend *be, PpxActivation act, const PpxTensor *w, const PpxTensor *bias, const PpxTensor *x,
                  PpxTensor *prev, const PpxTensor *res, PpxTensor *y, int M, int Cin, int Cout, int K, int Lin,
                  int stride, int dilation, int groups);
  void (*conv_transpose1d) (PpxBackend *be, PpxActivation act, const PpxTensor *w, const PpxTensor *bias,
                            const PpxTensor *x, PpxTensor *partial, PpxTensor *y, int M, int Cin, int Cout, int K, int T,
                            int stride, int groups);
  void (*vq_encode) (PpxBackend *be, const PpxTensor *codebooks, PpxTensor *r, PpxTensor *codes, int code_off,
                     int code_stride, int M, int ncb, int bins, int dim);
  void (*vq_decode) (PpxBackend *be, const PpxTensor *codebooks, const PpxTensor *codes, int code_off,
                     int code_stride, PpxTensor *y, int M, int ncb, int bins, int dim);
  void (*sample) (PpxBackend *be, const PpxTensor *logits, int V, PpxTensor *tokens, int tok_off, int tok_stride,
                  const PpxTensor *params, int stream, int M);
  void (*force_tokens) (PpxBackend *be, PpxTensor *tokens, int off, int stride, const PpxTensor *forced, int foff,
                        int fstride, int M);
  void (*lmgen_prepare) (PpxBackend *be, const PpxLmgenDims *d, PpxTensor *state, const PpxTensor *slot,
                         const PpxTensor *codes, int code_off, int code_stride, PpxTensor *ids, PpxTensor *forced,
                         PpxTensor *pos, PpxTensor *params, int M);
  void (*lmgen_finish) (PpxBackend *be, const PpxLmgenDims *d, PpxTensor *state, const PpxTensor *slot,
                        const PpxTensor *sampled, PpxTensor *out, int out_stride, int M);
  void (*positions) (PpxBackend *be, PpxTensor *offsets, PpxTensor *pos, int M, int T);
  /* graphs (backend.h); NULL where not supported */
  gboolean (*graph_begin) (PpxBackend *be, GError **error);
  PpxGraph *(*graph_end) (PpxBackend *be, GError **error);
  gboolean (*graph_launch) (PpxBackend *be, PpxGraph *g);
  void (*graph_free) (PpxGraph *g);
} PpxBackendOps;

struct PpxBackend {
  const PpxBackendOps *ops;
  guint64 allocated;
  PpxBackendCounters counters; /* backend.c counts what goes through the vtable */
  int n_threads;
  void *priv;
};

struct PpxTensor {
  PpxBackend *be;
  PpxTensorType type;
  gsize n;           /* elements of `type` */
  void *data;        /* device pointer (host memory on the CPU backend) */
  gsize extra;       /* bytes after the elements, at data + ppx_kv_scale_offset (n): an FP8 cache's scales */
  PpxTensor *parent; /* views only (which never have extra bytes) */
};

/* Bytes per element of a tensor type (FP8: the values only). */
static inline gsize
ppx_tensor_type_size (PpxTensorType type)
{
  return type == PPX_TENSOR_BF16 ? 2 : type == PPX_TENSOR_FP8 ? 1 : 4;
}

/* Where an FP8 cache's scales start: the values' bytes rounded up to 16. */
static inline gsize
ppx_kv_scale_offset (gsize n_values)
{
  return (n_values + 15) & ~(gsize) 15;
}

/* A recorded graph: the backend that made it and its own data (CUDA: the executable graph). */
struct PpxGraph {
  PpxBackend *be;
  gsize nodes;
  void *priv;
};

struct PpxWeight {
  PpxBackend *be;
  PpxWeightFormat format;
  int64_t rows, cols;
  int group_size;
  const void *data;  /* device pointer */
  const float *scales;
  void *owned_data;  /* freed by the backend when not NULL */
  void *owned_scales;
  gsize data_bytes, scale_bytes;
  PpxWeight *parent; /* slices borrow the parent's memory */
};

/* Bytes of a weight description's data (0 for an invalid format or int4 group size) and of its
 * scales: the layouts of quant.h, shared by every backend. */
gsize ppx_weight_desc_bytes (const PpxWeightDesc *d, gsize *scale_bytes);

#endif
