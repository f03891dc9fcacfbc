/* The tensor names and shapes a config implies, in the published checkpoint layouts
 * (model.safetensors for the LM, tokenizer-*.safetensors for Mimi). The loader checks files against
 * these; the random-model generator writes them. */
#ifndef PPX_MANIFEST_H
#define PPX_MANIFEST_H

#include "config.h"

G_BEGIN_DECLS

typedef struct {
  char *name;
  int ndim;
  int64_t shape[4];
} PpxManifestEntry;

/* GPtrArray of PpxManifestEntry*, owning them. */
GPtrArray *ppx_manifest_lm (const PpxLmConfig *lm);
GPtrArray *ppx_manifest_mimi (const PpxMimiConfig *m);

/* SEANet layer layout, derived from the config the way the reference builds its nn.Sequential. */
typedef enum { PPX_SEANET_CONV, PPX_SEANET_CONVTR, PPX_SEANET_RESBLOCK, PPX_SEANET_ELU } PpxSeanetKind;

typedef struct {
  PpxSeanetKind kind;
  int index; /* position in the nn.Sequential: name prefix "encoder.model.<index>" */
  int c_in, c_out, kernel, stride, dilation;
  int hidden; /* resblock only: c_in -> hidden (kernel, dilation) -> c_in (k=1) */
} PpxSeanetLayer;

/* Fills up to max layers; returns the count. */
int ppx_seanet_encoder_layers (const PpxMimiConfig *m, PpxSeanetLayer *out, int max);
int ppx_seanet_decoder_layers (const PpxMimiConfig *m, PpxSeanetLayer *out, int max);
#define PPX_SEANET_MAX_LAYERS 64

G_END_DECLS
#endif
