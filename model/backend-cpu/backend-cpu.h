/* Private: the CPU backend's ops, split over backend-cpu*.c by concern. */
#ifndef PPX_BACKEND_CPU_H
#define PPX_BACKEND_CPU_H

#include "backend-impl.h"

#define F32(t) ((float *) (t)->data)
#define I32(t) ((int32_t *) (t)->data)

/* backend-cpu-attention.c */
void ppx_cpu_rope (PpxBackend *be, PpxTensor *qkv, const PpxTensor *pos, gsize rows, int H, int Dh, float max_period);
void ppx_cpu_attention (PpxBackend *be, const PpxTensor *qkv, const PpxTensor *pos, const PpxTensor *kv_slot,
                        PpxTensor *kcache, PpxTensor *vcache, PpxTensor *out, int M, int T, int H, int Dh, int cap,
                        int context);
/* backend-cpu.c: o[i] = act(a[i]) for i < n (ppx_op_act's formulas; a may be o) */
void ppx_cpu_act_apply (PpxActivation act, const float *a, float *o, gsize n);
/* backend-cpu-conv.c */
void ppx_cpu_conv1d (PpxBackend *be, PpxActivation act, const PpxTensor *w, const PpxTensor *bias, const PpxTensor *x,
                     PpxTensor *prev, const PpxTensor *res, PpxTensor *y, int M, int Cin, int Cout, int K, int Lin,
                     int stride, int dilation, int groups);
void ppx_cpu_conv_transpose1d (PpxBackend *be, PpxActivation act, const PpxTensor *w, const PpxTensor *bias,
                               const PpxTensor *x, PpxTensor *partial, PpxTensor *y, int M, int Cin, int Cout, int K,
                               int T, int stride, int groups);
void ppx_cpu_vq_encode (PpxBackend *be, const PpxTensor *codebooks, PpxTensor *r, PpxTensor *codes, int code_off,
                        int code_stride, int M, int ncb, int bins, int dim);
void ppx_cpu_vq_decode (PpxBackend *be, const PpxTensor *codebooks, const PpxTensor *codes, int code_off,
                        int code_stride, PpxTensor *y, int M, int ncb, int bins, int dim);
/* backend-cpu-sample.c */
void ppx_cpu_sample (PpxBackend *be, const PpxTensor *logits, int V, PpxTensor *tokens, int tok_off, int tok_stride,
                     const PpxTensor *params, int stream, int M);
void ppx_cpu_force_tokens (PpxBackend *be, PpxTensor *tokens, int off, int stride, const PpxTensor *forced, int foff,
                           int fstride, int M);
/* backend-cpu-lmgen.c */
void ppx_cpu_lmgen_prepare (PpxBackend *be, const PpxLmgenDims *d, PpxTensor *state, const PpxTensor *slot,
                            const PpxTensor *codes, int code_off, int code_stride, PpxTensor *ids, PpxTensor *forced,
                            PpxTensor *pos, PpxTensor *params, int M);
void ppx_cpu_lmgen_finish (PpxBackend *be, const PpxLmgenDims *d, PpxTensor *state, const PpxTensor *slot,
                           const PpxTensor *sampled, PpxTensor *out, int out_stride, int M);
void ppx_cpu_positions (PpxBackend *be, PpxTensor *offsets, PpxTensor *pos, int M, int T);
/* backend-cpu-linear.c */
gboolean ppx_cpu_weight_init (PpxBackend *be, PpxWeight *w, const PpxWeightDesc *d, GError **error);
void ppx_cpu_weight_release (PpxBackend *be, PpxWeight *w);
void ppx_cpu_linear (PpxBackend *be, const PpxWeight *w, const PpxTensor *x, gsize ldx, PpxTensor *y, gsize ldy, int M,
                     gboolean accumulate);
void ppx_cpu_embed (PpxBackend *be, const PpxWeight *table, const PpxTensor *ids, int id_index, int id_stride,
                    PpxTensor *out, int M, gboolean accumulate);

#endif
