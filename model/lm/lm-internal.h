/* Private: the LM's weights, shared by lm.c (loading) and lm-batch.c (the batched step). */
#ifndef PPX_LM_INTERNAL_H
#define PPX_LM_INTERNAL_H

#include "lm.h"

#define RMS_EPS 1e-8f

typedef struct {
  PpxWeight *in_proj, *out_proj, *linear_in, *linear_out;
  PpxTensor *norm1, *norm2;
} LmLayer;

typedef struct {
  PpxWeight *in_full, *out_full;   /* stacked per-step attention weights */
  PpxWeight **in_proj, **out_proj; /* slices, one per step */
  PpxWeight **linear_in, **linear_out;
  PpxTensor *norm1, *norm2;
} DepLayer;

struct PpxLm {
  PpxBackend *be;
  PpxLmConfig cfg;
  PpxWeight **emb, *text_emb, *text_linear;
  PpxTensor *out_norm;
  LmLayer *layers;
  PpxWeight **dep_in, **dep_emb, *dep_text_emb, **linears;
  DepLayer *dep_layers;
  guint64 bytes;
};

#endif
