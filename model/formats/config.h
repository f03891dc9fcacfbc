/* Model hyperparameters: built-in PersonaPlex-7B values, overridable by a model directory's config.json
 * (keys "lm" and "mimi", the reference's own names; see docs/model-directory.md). */
#ifndef PPX_CONFIG_H
#define PPX_CONFIG_H

#include "ppx-common.h"

G_BEGIN_DECLS

#define PPX_MAX_STREAMS 17 /* 1 text + 8 agent + 8 user */
#define PPX_MAX_RATIOS 8

typedef struct {
  int dim, num_heads, num_layers;
  double hidden_scale;
  int context;
  int text_card, card, n_q, dep_q;
  int existing_text_padding_id;
  int max_period;
  int depformer_dim, depformer_dim_feedforward, depformer_num_heads, depformer_num_layers;
  int delays[PPX_MAX_STREAMS];
  /* derived */
  int ffn_hidden;           /* gated FFN hidden size of the temporal transformer */
  int depformer_ffn_hidden; /* ... of the depformer */
  int n_streams;            /* 1 + n_q */
  int max_delay;
} PpxLmConfig;

typedef struct {
  /* SEANet */
  int channels, dimension, n_filters, n_residual_layers, compress, dilation_base;
  int kernel_size, residual_kernel_size, last_kernel_size;
  int n_ratios;
  int ratios[PPX_MAX_RATIOS]; /* decoder order; the encoder uses them reversed */
  /* quantizer */
  int q_dimension, q_n_q, q_bins, q_input_dimension, q_output_dimension;
  /* transformer (encoder and decoder) */
  int t_d_model, t_num_heads, t_num_layers, t_context, t_dim_feedforward, t_max_period;
  int num_codebooks; /* active codebooks (8) */
  int sample_rate;   /* 24000 */
  /* derived */
  int hop;        /* product of ratios (960) */
  int frame_size; /* samples per 80 ms frame: hop * 2 (1920) */
} PpxMimiConfig;

typedef struct {
  PpxLmConfig lm;
  PpxMimiConfig mimi;
} PpxConfig;

void ppx_config_default (PpxConfig *cfg);
/* Applies the "lm" and "mimi" objects of a JSON document (config.json or golden.json) over cfg,
 * then validates and derives sizes. `label` names the source in messages. */
gboolean ppx_config_apply_json (PpxConfig *cfg, const char *json, gssize len, const char *label, GError **error);
/* Default config, with DIR/config.json applied if it exists. */
gboolean ppx_config_load_dir (PpxConfig *cfg, const char *model_dir, GError **error);
/* Validates ranges and fills the derived fields. */
gboolean ppx_config_finish (PpxConfig *cfg, const char *label, GError **error);
/* Serialises a config in the config.json schema (g_free the result). */
char *ppx_config_to_json (const PpxConfig *cfg);

G_END_DECLS
#endif
