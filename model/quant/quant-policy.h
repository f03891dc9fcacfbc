/* Which LM tensors are quantized by default, and to what (docs/quantization.md, "Policy"). */
#ifndef PPX_QUANT_POLICY_H
#define PPX_QUANT_POLICY_H

#include "ppx-common.h"

G_BEGIN_DECLS

/* The format the LM tensor `tensor_name` (e.g. "transformer.layers.3.gating.linear_in.weight") is stored
 * in when the model is quantized as `q`: PPX_QUANT_BF16 (kept as it is), PPX_QUANT_INT8 or PPX_QUANT_INT4.
 *  - int8: every linear (temporal transformer, depformer, depformer_in.*, linears.*, text_linear) is int8.
 *  - int4: the temporal transformer's linears are int4; the depformer's linears, depformer_in.* and the
 *    output heads (linears.*, text_linear) are int8 (measured: they carry most of the logit error).
 * Embeddings, norms and the whole Mimi codec are never quantized; BF16 and AUTO select nothing. */
PpxQuantization ppx_quant_policy_format (const char *tensor_name, PpxQuantization q);

/* ppx_quant_policy_format (tensor_name, q) != PPX_QUANT_BF16 */
gboolean ppx_quant_policy_selects (const char *tensor_name, PpxQuantization q);

G_END_DECLS
#endif
