/* The default quantization policy: a list of name patterns where '#' stands for a decimal index. */
#include "quant-policy.h"

static const char *const quantized_patterns[] = {
  /* temporal transformer */
  "transformer.layers.#.self_attn.in_proj_weight",
  "transformer.layers.#.self_attn.out_proj.weight",
  "transformer.layers.#.gating.linear_in.weight",
  "transformer.layers.#.gating.linear_out.weight",
  /* depformer (stacked per-step attention weights; per-step gatings) */
  "depformer.layers.#.self_attn.in_proj_weight",
  "depformer.layers.#.self_attn.out_proj.weight",
  "depformer.layers.#.gating.#.linear_in.weight",
  "depformer.layers.#.gating.#.linear_out.weight",
  "depformer_in.#.weight",
  /* output heads */
  "linears.#.weight",
  "text_linear.weight",
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

gboolean
ppx_quant_policy_selects (const char *tensor_name, PpxQuantization q)
{
  if (!tensor_name || (q != PPX_QUANT_INT8 && q != PPX_QUANT_INT4))
    return FALSE;
  for (gsize i = 0; i < G_N_ELEMENTS (quantized_patterns); i++)
    if (name_matches (tensor_name, quantized_patterns[i]))
      return TRUE;
  return FALSE;
}
