/* The default quantization policy: name patterns (where '#' stands for a decimal index), each with the
 * format it takes in an int4 model. In an int8 model every listed tensor is int8. */
#include "quant-policy.h"

static const struct {
  const char *pattern;
  PpxQuantization in_int4_model;
} policy[] = {
  /* temporal transformer: 79% of the parameters, read once per frame */
  {"transformer.layers.#.self_attn.in_proj_weight", PPX_QUANT_INT4},
  {"transformer.layers.#.self_attn.out_proj.weight", PPX_QUANT_INT4},
  {"transformer.layers.#.gating.linear_in.weight", PPX_QUANT_INT4},
  {"transformer.layers.#.gating.linear_out.weight", PPX_QUANT_INT4},
  /* depformer (stacked per-step attention weights; per-step gatings) */
  {"depformer.layers.#.self_attn.in_proj_weight", PPX_QUANT_INT8},
  {"depformer.layers.#.self_attn.out_proj.weight", PPX_QUANT_INT8},
  {"depformer.layers.#.gating.#.linear_in.weight", PPX_QUANT_INT8},
  {"depformer.layers.#.gating.#.linear_out.weight", PPX_QUANT_INT8},
  {"depformer_in.#.weight", PPX_QUANT_INT8},
  /* output heads */
  {"linears.#.weight", PPX_QUANT_INT8},
  {"text_linear.weight", PPX_QUANT_INT8},
};

/* '#' matches one or more ASCII digits; everything else matches itself. */
static gboolean
name_matches (const char *name, const char *pattern)
{
  while (*pattern) {
    if (*pattern == '#') {
      if (!g_ascii_isdigit (*name))
        return FALSE;
      while (g_ascii_isdigit (*name))
        name++;
      pattern++;
    } else if (*name++ != *pattern++) {
      return FALSE;
    }
  }
  return *name == '\0';
}

PpxQuantization
ppx_quant_policy_format (const char *tensor_name, PpxQuantization q)
{
  if (!tensor_name || (q != PPX_QUANT_INT8 && q != PPX_QUANT_INT4))
    return PPX_QUANT_BF16;
  for (gsize i = 0; i < G_N_ELEMENTS (policy); i++)
    if (name_matches (tensor_name, policy[i].pattern))
      return q == PPX_QUANT_INT8 ? PPX_QUANT_INT8 : policy[i].in_int4_model;
  return PPX_QUANT_BF16;
}

gboolean
ppx_quant_policy_selects (const char *tensor_name, PpxQuantization q)
{
  return ppx_quant_policy_format (tensor_name, q) != PPX_QUANT_BF16;
}
