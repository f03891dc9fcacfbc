/* Which LM tensors are quantized by default (docs/quantization.md, "Policy"). */
#ifndef PPX_QUANT_POLICY_H
#define PPX_QUANT_POLICY_H

#include "ppx-common.h"
#include "personaplex.h"

G_BEGIN_DECLS

/* TRUE when `tensor_name` (an LM checkpoint name, e.g. "transformer.layers.3.gating.linear_in.weight")
 * is stored as `q` under the default policy. Only INT8 and INT4 select anything: every linear of the
 * temporal transformer and of the depformer, depformer_in.*, linears.* and text_linear. Embeddings,
 * norms and the whole Mimi codec are never selected. */
gboolean ppx_quant_policy_selects (const char *tensor_name, PpxQuantization q);

G_END_DECLS
#endif
