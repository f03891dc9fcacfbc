/* The compute backend interface.
 *
 * Shaped for a GPU from the start (docs/architecture.md):
 *  - tensors live on the backend's device (PpxTensor is an opaque device buffer or a view into one);
 *  - every op is enqueued on the backend's stream and returns at once; only ppx_tensor_download()
 *    and ppx_backend_sync() wait, so a whole frame can be enqueued without host round trips (and be
 *    captured as one CUDA graph);
 *  - per-frame ops take a batch of M rows (sessions), with per-row positions and per-session cache
 *    slots held in device tensors.
 * The CPU backend (backend-cpu.c) executes each op immediately and is the numerical reference.
 *
 * Layout conventions: row-major; activations f32; a "row" is one session's (or one time step's)
 * vector. Linear weights are [out, in] and compute y = x W^T. Conv weights are [C_out, C_in/groups, K];
 * transposed-conv weights are [C_in, C_out/groups, K]. Conv activations are [M, C, L]. */
#ifndef PPX_BACKEND_H
#define PPX_BACKEND_H

#include "ppx-common.h"
#include "lmgen-state.h"
#include "sample-params.h"
#include "tensor-type.h"

G_BEGIN_DECLS

typedef struct PpxBackend PpxBackend;
typedef struct PpxTensor PpxTensor;
typedef struct PpxWeight PpxWeight;

typedef enum {
  PPX_WFMT_F32,  /* plain f32 */
  PPX_WFMT_BF16, /* bf16, computed in f32 */
  PPX_WFMT_INT8, /* int8, one f32 scale per output row (see quant.h) */
  PPX_WFMT_INT4, /* 4-bit, one scale per group of `group_size` inputs (see quant.h) */
} PpxWeightFormat;

const char *ppx_weight_format_name (PpxWeightFormat f);

/* A matrix as stored on the host (e.g. inside an mmapped safetensors file). The backend copies or
 * references it; host data must outlive the weight only when `borrow` is TRUE. */
typedef struct {
  PpxWeightFormat format;
  int64_t rows, cols;
  const void *data;    /* F32/BF16: rows*cols elements; INT8: rows*cols bytes; INT4: see quant.h */
  const float *scales; /* INT8: [rows]; INT4: [rows, cols/group_size] */
  int group_size;      /* INT4 only */
  gboolean borrow;     /* keep a pointer instead of copying (CPU: zero-copy mmap) */
} PpxWeightDesc;

/* PpxTensorType: tensor-type.h. Its name ("f32", "i32", "bf16", "fp8"), for reports. */
const char *ppx_tensor_type_name (PpxTensorType type);

/* ---- backend ---- */
PpxBackend *ppx_backend_cpu_new (int n_threads, GError **error);
/* The CUDA backend on GPU `device` (kernels/). Fails with PPX_ERROR_UNSUPPORTED when the build has no
 * CUDA or no GPU is usable, PPX_ERROR_INVALID for a device index that does not exist. */
PpxBackend *ppx_backend_cuda_new (int device, GError **error);
/* TRUE when the build has CUDA and at least one GPU is usable; *n_devices (may be NULL) gets the count. */
gboolean ppx_backend_cuda_available (int *n_devices);
void ppx_backend_free (PpxBackend *be);
const char *ppx_backend_name (const PpxBackend *be); /* ppx_backend_kind_name of its kind: "cpu", "cuda" */
PpxBackendKind ppx_backend_kind (const PpxBackend *be);
/* The device's name (a GPU's: "NVIDIA H100 80GB HBM3"), or NULL where the backend names none (the CPU). */
const char *ppx_backend_device_name (const PpxBackend *be);
void ppx_backend_sync (PpxBackend *be);
guint64 ppx_backend_allocated_bytes (const PpxBackend *be);
/* Device memory this backend could still allocate now (CPU: the host's available memory; CUDA: the
 * GPU's free memory); 0 when unknown. */
guint64 ppx_backend_free_bytes (PpxBackend *be);
/* What was asked of the backend so far (for reports): ops enqueued (ppx_op_*, fill, copy2d: on the GPU,
 * kernel launches or copies, about one each), uploads, downloads (each waits for the queue), graph replays.
 * Recording a graph counts its ops too. */
typedef struct {
  guint64 n_ops, n_uploads, n_downloads, n_graph_launches;
} PpxBackendCounters;
void ppx_backend_counters (const PpxBackend *be, PpxBackendCounters *c);
/* Whether weights made with desc->borrow keep pointing at the host data (then it must stay mapped). */
gboolean ppx_backend_borrows_host_memory (const PpxBackend *be);

/* ---- tensors (device memory) ---- */
/* n elements of `type`, zero-filled. F32 and I32 are what every op takes; BF16 (raw bf16 bits through
 * upload/download) is a storage type; FP8 tensors only come from ppx_kv_cache_new (PPX_ERROR_INVALID here). */
PpxTensor *ppx_tensor_new (PpxBackend *be, PpxTensorType type, gsize n, GError **error);
/* A view of n elements at element offset `off` of a tensor; free it before its parent. A view of an FP8
 * cache covers values only (no scales), so it is not a cache. */
PpxTensor *ppx_tensor_view (PpxTensor *parent, gsize off, gsize n);
void ppx_tensor_free (PpxTensor *t);
gsize ppx_tensor_numel (const PpxTensor *t);
PpxTensorType ppx_tensor_type (const PpxTensor *t);
/* Device bytes of the tensor's storage: elements, plus an FP8 cache's scales. */
gsize ppx_tensor_bytes (const PpxTensor *t);
/* Offsets and counts are in elements of the tensor's type (bytes of values for FP8). */
void ppx_tensor_upload (PpxTensor *t, gsize off, const void *host, gsize n);
void ppx_tensor_download (PpxTensor *t, gsize off, void *host, gsize n); /* waits for queued work */
/* The whole storage, ppx_tensor_bytes(t) bytes, as stored (a cache's values, padding, then its scales):
 * for tests and snapshots. download_raw waits. */
void ppx_tensor_upload_raw (PpxTensor *t, const void *host);
void ppx_tensor_download_raw (PpxTensor *t, void *host);
void ppx_tensor_fill (PpxTensor *t, float value);                         /* F32: value; I32: (int) value */
/* dst[r*dld + doff + c] = src[r*sld + soff + c] for r < rows, c < cols (element units; F32/I32 tensors). */
void ppx_tensor_copy2d (PpxTensor *dst, gsize doff, gsize dld, const PpxTensor *src, gsize soff, gsize sld,
                        gsize rows, gsize cols);

/* ---- KV caches ---- */
/* Below the library's API a KV cache's format is its storage type: F32, BF16 or FP8 (e4m3 with scales). The
 * storage of the API's format f (PPX_KV_AUTO: the default, bf16); the one place the two meet. */
PpxTensorType ppx_kv_storage (PpxKvFormat f);
/* A K or V cache for ppx_op_attention: n_slots x cap positions x H*Dh values stored as type (F32, BF16 or
 * FP8), zero-filled. The tensor's elements are the values, [n_slots, cap, H*Dh], of type F32, BF16 or FP8
 * (numel, upload and download address them). An FP8 cache also keeps one f32 scale per (slot, head,
 * position) in the same allocation, after the values at byte offset round_up(numel, 16), laid out
 * [n_slots, H, cap] (contiguous over positions, so a head's scales stream with its values). The
 * conversions (bf16 round to nearest even; e4m3 with scale amax/448, saturating, round to nearest even)
 * are in kv-format.h, shared by every backend so their caches hold the same bits.
 * PPX_ERROR_UNSUPPORTED when this backend cannot store type, PPX_ERROR_INVALID for an empty shape or a type that
 * is not a KV storage. */
PpxTensor *ppx_kv_cache_new (PpxBackend *be, PpxTensorType type, int n_slots, int cap, int H, int Dh,
                             GError **error);
/* Device bytes of such a cache (values, plus the FP8 scales and the padding before them). */
guint64 ppx_kv_cache_bytes (PpxTensorType type, gsize n_slots, int cap, int H, int Dh);
/* Copies positions [src_pos, src_pos + n) of slot src_slot of the cache src (capacity src_cap) to positions
 * [dst_pos, dst_pos + n) of slot dst_slot of dst (capacity dst_cap): the values and, for FP8, their scales; both
 * caches made by ppx_kv_cache_new with one format and head shape H x Dh, positions inside the capacities (the
 * ring index of a position below the capacity is the position). Enqueued like an op. FALSE (nothing copied) for
 * caches or ranges that do not fit, or a row not a whole number of 4-byte words (H * Dh odd, fp8 not a multiple
 * of 4). */
gboolean ppx_kv_cache_copy (PpxTensor *dst, int dst_slot, int dst_cap, int dst_pos, const PpxTensor *src, int src_slot,
                            int src_cap, int src_pos, int n, int H, int Dh);

/* ---- weights ---- */
PpxWeight *ppx_weight_new (PpxBackend *be, const PpxWeightDesc *desc, GError **error);
void ppx_weight_free (PpxWeight *w);
int64_t ppx_weight_rows (const PpxWeight *w);
int64_t ppx_weight_cols (const PpxWeight *w);
guint64 ppx_weight_bytes (const PpxWeight *w);
/* The first `rows` rows starting at row `row0` (per-step slices of stacked depformer weights). */
PpxWeight *ppx_weight_slice_rows (PpxWeight *w, int64_t row0, int64_t rows);

/* ---- linear algebra ---- */
/* y[M, rows] (+)= x[M, cols] . W^T. x row stride = ldx, y row stride = ldy (elements). */
void ppx_op_linear (PpxBackend *be, const PpxWeight *w, const PpxTensor *x, gsize ldx, PpxTensor *y, gsize ldy,
                    int M, gboolean accumulate);
/* out[m, :] (+)= W[ids[m * id_stride + id_index], :] for m < M; an id of -1 gives zeros. */
void ppx_op_embed (PpxBackend *be, const PpxWeight *table, const PpxTensor *ids, int id_index, int id_stride,
                   PpxTensor *out, int M, gboolean accumulate);

/* ---- elementwise and norms ---- */
/* PPX_ACT_NONE only for the convolutions' input activation (ppx_op_conv1d_fused, ppx_op_conv_transpose1d_act). */
typedef enum { PPX_ACT_NONE = -1, PPX_ACT_ELU, PPX_ACT_GELU, PPX_ACT_SILU } PpxActivation;
void ppx_op_act (PpxBackend *be, PpxActivation act, const PpxTensor *x, PpxTensor *y, gsize n);
void ppx_op_add (PpxBackend *be, const PpxTensor *a, const PpxTensor *b, PpxTensor *y, gsize n);
/* y[r, c] += gamma[c] * x[r, c] (LayerScale residual), D columns. */
void ppx_op_add_scaled (PpxBackend *be, const PpxTensor *x, const PpxTensor *gamma, PpxTensor *y, gsize rows, gsize D);
/* u[r, :H] = silu(h[r, :H]) * h[r, H:2H] */
void ppx_op_silu_gate (PpxBackend *be, const PpxTensor *h, PpxTensor *u, gsize rows, gsize H);
/* y = x * alpha * rsqrt(eps + mean(x^2)), rows of D. */
void ppx_op_rmsnorm (PpxBackend *be, const PpxTensor *x, const PpxTensor *alpha, PpxTensor *y, gsize rows, gsize D,
                     float eps);
/* y[M, rows] (+)= rmsnorm(x; alpha, eps) . W^T, x dense [M, cols]: the same bits as ppx_op_rmsnorm into h
 * followed by ppx_op_linear (h, cols), in one kernel where the backend can (CUDA: tensor-core weights, M <= 4).
 * h [M, cols] is scratch: it may or may not hold rmsnorm(x) afterwards. */
void ppx_op_rmsnorm_linear (PpxBackend *be, const PpxTensor *x, const PpxTensor *alpha, float eps, PpxTensor *h,
                            const PpxWeight *w, PpxTensor *y, gsize ldy, int M, gboolean accumulate);
/* y[M, rows] (+)= (silu(h[:, :cols]) * h[:, cols:2 cols]) . W^T, h dense [M, 2 cols]: the same bits as
 * ppx_op_silu_gate into u followed by ppx_op_linear (u, cols), in one kernel where the backend can (CUDA:
 * tensor-core weights, M <= 8). u [M, cols] is scratch: it may or may not hold the gated values afterwards. */
void ppx_op_silu_gate_linear (PpxBackend *be, const PpxTensor *h, PpxTensor *u, const PpxWeight *w, PpxTensor *y,
                              gsize ldy, int M, gboolean accumulate);
void ppx_op_layernorm (PpxBackend *be, const PpxTensor *x, const PpxTensor *w, const PpxTensor *b, PpxTensor *y,
                       gsize rows, gsize D, float eps);
/* The rest of a pre-norm transformer layer after its attention, and the projection that follows it (the
 * depformer's layers, model/lm/lm-batch.c): over M rows of width d = out_proj's rows, F = linear_out's cols,
 *   x += att . out_proj^T;  ff = rmsnorm(x; norm2) . linear_in^T;  x += (silu(ff[:, :F]) * ff[:, F:]) . linear_out^T;
 *   y = (next_norm ? rmsnorm(x; next_norm) : x) . next^T
 * (ppx_op_linear, ppx_op_rmsnorm_linear, ppx_op_silu_gate_linear, then ppx_op_rmsnorm_linear or ppx_op_linear),
 * with the bits of that sequence; in one persistent kernel where the backend can (CUDA: tensor-core weights of
 * one format; docs/cuda.md, "The depformer's layer tail"). h [M, d], ff [M, 2F] and u [M, F] are scratch. */
typedef struct {
  const PpxTensor *att;                         /* [M, d] */
  const PpxWeight *out_proj, *linear_in, *linear_out, *next;
  PpxTensor *x;                                 /* [M, d], the residual stream */
  const PpxTensor *norm2, *next_norm;           /* next_norm NULL: no norm before next */
  PpxTensor *h, *ff, *u;
  PpxTensor *y;                                 /* [M, next->rows] */
  float eps;
} PpxLayerTail;
void ppx_op_layer_tail (PpxBackend *be, const PpxLayerTail *t, int M);

/* [M, A, B] -> [M, B, A] */
void ppx_op_transpose (PpxBackend *be, const PpxTensor *x, PpxTensor *y, gsize M, gsize A, gsize B);

/* ---- attention ---- */
/* Interleaved RoPE on the q and k parts of qkv rows ([rows, 3*H*Dh], q|k|v head-major), at the
 * absolute positions pos[rows] (i32). */
void ppx_op_rope (PpxBackend *be, PpxTensor *qkv, const PpxTensor *pos, gsize rows, int H, int Dh, float max_period);
/* Causal attention over per-session ring KV caches.
 * qkv [M*T, 3*H*Dh]: T consecutive rows per session; pos [M*T]: their absolute positions.
 * kv_slot[M] (i32): which cache slot each session uses; the caches are [n_slots, cap, H*Dh] each.
 * The new k/v are written at ring index pos % cap first. A query at position q attends the keys with
 * positions p, max(0, E - cap + 1) <= p <= q and q - p < context, where E is the session's last position
 * in this call + 1 (the reference's ring behaviour, see the spec §3.4); a query with no such key gets
 * zeros. Output out [M*T, H*Dh]. kcache and vcache are F32, BF16 or FP8 caches (ppx_kv_cache_new; the
 * two of one format): the new rows are written converted and every key and value is read back converted
 * to f32, so an F32 cache gives exactly the reference's numerics. */
void ppx_op_attention (PpxBackend *be, const PpxTensor *qkv, const PpxTensor *pos, const PpxTensor *kv_slot,
                       PpxTensor *kcache, PpxTensor *vcache, PpxTensor *out, int M, int T, int H, int Dh, int cap,
                       int context);

/* ---- convolutions (Mimi) ---- */
/* Streaming causal conv: the input is concat(prev[M, Cin, P], x[M, Cin, Lin]) with P = (K-1)*dil+1 - stride,
 * y[M, Cout, (P+Lin-Keff)/stride+1] = conv + bias, and prev becomes the last P columns of that input.
 * prev NULL: no history (y from x alone). w: [Cout, Cin/groups, K] f32; bias may be NULL. */
void ppx_op_conv1d (PpxBackend *be, const PpxTensor *w, const PpxTensor *bias, const PpxTensor *x, PpxTensor *prev,
                    PpxTensor *y, int M, int Cin, int Cout, int K, int Lin, int stride, int dilation, int groups);
/* Streaming transposed conv (overlap-add). z = transposed conv of x[M, Cin, T] (length S*(T-1)+K, no bias);
 * with partial [M, Cout, K-S]: z[:, :K-S] += partial, y[M, Cout, S*T] = z[:, :S*T] + bias,
 * partial = z[:, S*T:]. partial NULL: y[M, Cout, S*(T-1)+K] = z + bias. w: [Cin, Cout/groups, K]. */
void ppx_op_conv_transpose1d (PpxBackend *be, const PpxTensor *w, const PpxTensor *bias, const PpxTensor *x,
                              PpxTensor *partial, PpxTensor *y, int M, int Cin, int Cout, int K, int T, int stride,
                              int groups);
/* ppx_op_conv1d of act(x), plus a residual: y = res + conv1d(concat(prev, act(x))) (+ bias). The same values as
 * ppx_op_act (act, x -> x'), ppx_op_conv1d (x', prev -> t), ppx_op_add (res, t -> y): prev keeps the activated
 * columns. act PPX_ACT_NONE: x as is; res NULL: no residual; res [M, Cout, Lout] may be y itself (not x). */
void ppx_op_conv1d_fused (PpxBackend *be, PpxActivation act, const PpxTensor *w, const PpxTensor *bias,
                          const PpxTensor *x, PpxTensor *prev, const PpxTensor *res, PpxTensor *y, int M, int Cin,
                          int Cout, int K, int Lin, int stride, int dilation, int groups);
/* ppx_op_conv_transpose1d of act(x): the same values as ppx_op_act then ppx_op_conv_transpose1d. */
void ppx_op_conv_transpose1d_act (PpxBackend *be, PpxActivation act, const PpxTensor *w, const PpxTensor *bias,
                                  const PpxTensor *x, PpxTensor *partial, PpxTensor *y, int M, int Cin, int Cout,
                                  int K, int T, int stride, int groups);

/* ---- quantizer (Mimi RVQ) ---- */
/* Residual VQ encode: for j < ncb: codes[m*code_stride + code_off + j] = argmin_i |r - E_j[i]|^2,
 * r -= E_j[code]. codebooks [ncb, bins, dim] f32, r [M, dim] (modified). */
void ppx_op_vq_encode (PpxBackend *be, const PpxTensor *codebooks, PpxTensor *r, PpxTensor *codes, int code_off,
                       int code_stride, int M, int ncb, int bins, int dim);
/* y[M, dim] = sum_j E_j[codes[m*code_stride + code_off + j]] (summed in codebook order from 0). */
void ppx_op_vq_decode (PpxBackend *be, const PpxTensor *codebooks, const PpxTensor *codes, int code_off,
                       int code_stride, PpxTensor *y, int M, int ncb, int bins, int dim);

/* ---- sampling ---- */
/* tokens[m*tok_stride + tok_off] = a draw from logits[m, :V], with row m's own parameters:
 * params[m*PPX_SAMPLE_PARAMS ..] (i32, sample-params.h: seed, frame, and the text (stream 0) and audio
 * (other streams) temperature and top-k; set by the caller, not modified). Greedy (argmax, first index
 * on ties) when the row's temp <= 0 or topk == 1; otherwise softmax(logits/temp), the top-k candidates,
 * and the exponential race argmax(p_i / q_i), q_i ~ Exp(1) from Philox keyed by the row's seed, with
 * counter (frame, stream, i), so a draw depends only on (seed, frame, stream): skipping unused streams
 * never shifts later draws, and a row's draw never depends on the other rows. */
void ppx_op_sample (PpxBackend *be, const PpxTensor *logits, int V, PpxTensor *tokens, int tok_off, int tok_stride,
                    const PpxTensor *params, int stream, int M);
/* dst[m*stride + off] = forced[m*fstride + foff] >= 0 ? forced[...] : src[m*stride + off] (teacher forcing). */
void ppx_op_force_tokens (PpxBackend *be, PpxTensor *tokens, int off, int stride, const PpxTensor *forced, int foff,
                          int fstride, int M);

/* ---- LMGen on the device (lmgen-state.h) ---- */
/* One conversation call's first half for M rows. state: [n_slots, PPX_LMGEN_STATE] i32, row m uses the
 * session state of slot[m] (distinct slots; offsets >= 1); its user codes are codes[m*code_stride +
 * code_off + q]. Writes ids[m*W + k] and forced[m*W + k] (W = PPX_LMGEN_MAX_STREAMS), pos[m] and the frame
 * words of params[m*PPX_SAMPLE_PARAMS ..] (the other words are left alone): ppx_lmgen_prepare_row. */
void ppx_op_lmgen_prepare (PpxBackend *be, const PpxLmgenDims *d, PpxTensor *state, const PpxTensor *slot,
                           const PpxTensor *codes, int code_off, int code_stride, PpxTensor *ids, PpxTensor *forced,
                           PpxTensor *pos, PpxTensor *params, int M);
/* The second half, after the model step: sampled[m*W + k] are the step's tokens. Row m of out (stride
 * out_stride >= W + PPX_LMGEN_STATE) gets the W output tokens (ppx_lmgen_finish_row) and then a copy of
 * the session's state after the call, so one download brings the host both. */
void ppx_op_lmgen_finish (PpxBackend *be, const PpxLmgenDims *d, PpxTensor *state, const PpxTensor *slot,
                          const PpxTensor *sampled, PpxTensor *out, int out_stride, int M);
/* Streaming positions: pos[m*T + t] = offsets[m] + t, then offsets[m] += T (i32, m < M). */
void ppx_op_positions (PpxBackend *be, PpxTensor *offsets, PpxTensor *pos, int M, int T);

/* ---- graphs: a recorded sequence of ops replayed with one call ----
 * Between graph_begin and graph_end the calling thread's ops on `be` are recorded instead of run (other
 * threads' ops run as usual). What is recorded must not allocate, upload, download or sync, and its
 * sizes are fixed: per-call values come from device tensors written before the launch. A replay runs
 * the recorded ops on the same tensors, in order with everything else queued on the backend. */
typedef struct PpxGraph PpxGraph;
/* Whether this backend records graphs (CUDA: yes; the CPU backend: no). */
gboolean ppx_backend_supports_graphs (const PpxBackend *be);
/* PPX_ERROR_UNSUPPORTED where graphs are not supported; PPX_ERROR_INVALID when this thread records already. */
gboolean ppx_backend_graph_begin (PpxBackend *be, GError **error);
/* The graph, or NULL with an error when the recording failed. Scratch memory (or a table) an op asked
 * for beyond what the backend had is allocated here, so recording the same ops again succeeds. */
PpxGraph *ppx_backend_graph_end (PpxBackend *be, GError **error);
/* Queues a replay. FALSE (nothing queued) when the graph is stale: the backend's scratch memory was
 * reallocated since the recording; free it and record again. */
gboolean ppx_backend_graph_launch (PpxBackend *be, PpxGraph *g);
/* Operations in a graph (kernel launches and copies), for reports. */
gsize ppx_graph_nodes (const PpxGraph *g);
void ppx_graph_free (PpxGraph *g);

G_END_DECLS
#endif
