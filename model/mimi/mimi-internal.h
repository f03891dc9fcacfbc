/* Private pieces of Mimi shared by mimi*.c. */
#ifndef PPX_MIMI_INTERNAL_H
#define PPX_MIMI_INTERNAL_H

#include "manifest.h"
#include "mimi.h"
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

typedef struct {
  PpxTensor *prev[PPX_SEANET_MAX_LAYERS];    /* conv history (NULL where none) */
  PpxTensor *partial[PPX_SEANET_MAX_LAYERS]; /* transposed-conv overlap tails */
} PpxSeanetState;

gboolean ppx_seanet_load (PpxSeanet *net, PpxLoader *ld, const PpxMimiConfig *m, gboolean decoder, int in_len);
void ppx_seanet_clear (PpxSeanet *net);
gboolean ppx_seanet_state_init (PpxSeanetState *st, const PpxSeanet *net, PpxBackend *be, GError **error);
void ppx_seanet_state_clear (PpxSeanetState *st);
void ppx_seanet_state_reset (PpxSeanetState *st);
/* Runs the network on x (in_len columns); returns the tensor that holds the output (one of x, a, b, c). */
PpxTensor *ppx_seanet_forward (const PpxSeanet *net, PpxSeanetState *st, PpxBackend *be, PpxTensor *x, PpxTensor *a,
                               PpxTensor *b, PpxTensor *c, int *out_channels, int *out_len);

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

typedef struct {
  PpxTensor **k, **v; /* per layer [cap, d] */
  PpxTensor *pos, *slot;
  PpxTensor *x, *h, *qkv, *att, *ff;
  int T;
  gint64 offset;
} PpxMimiTransformerState;

gboolean ppx_mimi_transformer_load (PpxMimiTransformer *tf, PpxLoader *ld, const PpxMimiConfig *m,
                                    const char *prefix);
void ppx_mimi_transformer_clear (PpxMimiTransformer *tf);
gboolean ppx_mimi_transformer_state_init (PpxMimiTransformerState *st, const PpxMimiTransformer *tf, PpxBackend *be,
                                          int T, GError **error);
void ppx_mimi_transformer_state_clear (PpxMimiTransformerState *st);
void ppx_mimi_transformer_state_reset (PpxMimiTransformerState *st);
/* In place on io, conv layout [d, T]. */
void ppx_mimi_transformer_forward (const PpxMimiTransformer *tf, PpxMimiTransformerState *st, PpxBackend *be,
                                   PpxTensor *io);

#endif
