/* Private pieces of Mimi shared by mimi*.c. */
#ifndef PPX_MIMI_INTERNAL_H
#define PPX_MIMI_INTERNAL_H

#include "manifest.h"
#include "mimi.h"
#include "tensor-plan.h"
#include "weights.h"

/* ---- SEANet (mimi-seanet.c) ---- */
typedef struct {
  PpxSeanetLayer l;
  PpxTensor *w, *b;   /* CONV / CONVTR */
  PpxTensor *w1, *b1; /* RESBLOCK: kernel conv c -> hidden */
  PpxTensor *w2, *b2; /* RESBLOCK: 1x1 conv hidden -> c */
} PpxSeanetWeights;

typedef struct {
  int n;
  PpxSeanetWeights layers[PPX_SEANET_MAX_LAYERS];
  int in_len;  /* samples (encoder) or frames (decoder) per call */
  int max_elems; /* largest activation C*L, for scratch sizing */
} PpxSeanet;

/* Streaming state of n rows: per layer [n, row_elems] (NULL where a layer has none). */
typedef struct {
  PpxTensor *prev[PPX_SEANET_MAX_LAYERS];    /* conv history [n, C_in, P] */
  PpxTensor *partial[PPX_SEANET_MAX_LAYERS]; /* transposed-conv overlap tails [n, C_out, K - S] */
  gsize prev_row[PPX_SEANET_MAX_LAYERS], partial_row[PPX_SEANET_MAX_LAYERS]; /* elements per row */
} PpxSeanetState;

gboolean ppx_seanet_load (PpxSeanet *net, PpxLoader *ld, const PpxMimiConfig *m, gboolean decoder, int in_len);
void ppx_seanet_clear (PpxSeanet *net);
/* The state of n rows through a plan (p->be NULL: only counted; st still gets the row sizes). */
void ppx_seanet_state_plan (PpxSeanetState *st, const PpxSeanet *net, PpxTensorPlan *p, int n);
void ppx_seanet_state_clear (PpxSeanetState *st);
/* Zero state for rows [row0, row0 + n). */
void ppx_seanet_state_reset_rows (PpxSeanetState *st, int row0, int n);
/* Copies row `from`'s state over row `to`. */
void ppx_seanet_state_move_row (PpxSeanetState *st, int from, int to);
/* out = views of rows [row0, row0 + n) of st (free with ppx_seanet_state_clear). */
void ppx_seanet_state_rows (const PpxSeanetState *st, int row0, int n, PpxSeanetState *out);
/* Runs the network on M rows of x (in_len columns each); returns the tensor that holds the output (one of
 * x, a, b, c; scratch of M * max_elems each). */
PpxTensor *ppx_seanet_forward (const PpxSeanet *net, PpxSeanetState *st, PpxBackend *be, PpxTensor *x, PpxTensor *a,
                               PpxTensor *b, PpxTensor *c, int M, int *out_channels, int *out_len);

/* ---- transformer (mimi-transformer.c) ---- */
typedef struct {
  PpxWeight *in_proj, *out_proj, *linear1, *linear2;
  PpxTensor *norm1_w, *norm1_b, *norm2_w, *norm2_b, *scale1, *scale2;
} PpxMimiLayer;

typedef struct {
  int n_layers, d, heads, ff, context;
  float max_period;
  PpxMimiLayer *layers;
} PpxMimiTransformer;

/* KV caches of n slots and the scratch of n rows of T frames. */
typedef struct {
  int n_layers, n, T;
  PpxTensor **k, **v; /* per layer [n, cap, d] */
  PpxTensor *pos;     /* [n * T] */
  PpxTensor *x, *h, *qkv, *att, *ff;
} PpxMimiTransformerState;

gboolean ppx_mimi_transformer_load (PpxMimiTransformer *tf, PpxLoader *ld, const PpxMimiConfig *m,
                                    const char *prefix);
void ppx_mimi_transformer_clear (PpxMimiTransformer *tf);
void ppx_mimi_transformer_state_plan (PpxMimiTransformerState *st, const PpxMimiTransformer *tf, PpxTensorPlan *p,
                                      int n, int T);
void ppx_mimi_transformer_state_clear (PpxMimiTransformerState *st);
/* In place on io, conv layout [M, d, T]: row m at positions offsets[m] .. + T - 1 (advanced by T on the
 * device), with KV cache slot slots[m] (offsets and slots: i32 device tensors of M). */
void ppx_mimi_transformer_forward (const PpxMimiTransformer *tf, PpxMimiTransformerState *st, PpxBackend *be,
                                   PpxTensor *io, int M, PpxTensor *offsets, const PpxTensor *slots);

#endif
