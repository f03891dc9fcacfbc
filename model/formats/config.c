#include "config.h"

#include "json-strict.h"

/* ---- JSON helpers ---- */

static gboolean
get_int (JsonObject *o, const char *key, int *out, const char *label, const char *section, GError **error)
{
  JsonNode *n = json_object_get_member (o, key);
  if (!n || JSON_NODE_HOLDS_NULL (n))
    return TRUE;
  if (!JSON_NODE_HOLDS_VALUE (n) || json_node_get_value_type (n) != G_TYPE_INT64) {
    g_set_error (error, PPX_ERROR, PPX_ERROR_CONFIG, "%s: %s.%s must be an integer", label, section, key);
    return FALSE;
  }
  gint64 v = json_node_get_int (n);
  if (v < G_MININT || v > G_MAXINT) {
    g_set_error (error, PPX_ERROR, PPX_ERROR_CONFIG, "%s: %s.%s is out of range", label, section, key);
    return FALSE;
  }
  *out = (int) v;
  return TRUE;
}

static gboolean
get_double (JsonObject *o, const char *key, double *out, const char *label, const char *section, GError **error)
{
  JsonNode *n = json_object_get_member (o, key);
  if (!n || JSON_NODE_HOLDS_NULL (n))
    return TRUE;
  if (!JSON_NODE_HOLDS_VALUE (n) ||
      (json_node_get_value_type (n) != G_TYPE_INT64 && json_node_get_value_type (n) != G_TYPE_DOUBLE)) {
    g_set_error (error, PPX_ERROR, PPX_ERROR_CONFIG, "%s: %s.%s must be a number", label, section, key);
    return FALSE;
  }
  *out = json_node_get_double (n);
  return TRUE;
}

static gboolean
get_int_array (JsonObject *o, const char *key, int *out, int max, int *count, const char *label, const char *section,
               GError **error)
{
  JsonNode *n = json_object_get_member (o, key);
  if (!n || JSON_NODE_HOLDS_NULL (n))
    return TRUE;
  if (!JSON_NODE_HOLDS_ARRAY (n) || json_array_get_length (json_node_get_array (n)) > (guint) max) {
    g_set_error (error, PPX_ERROR, PPX_ERROR_CONFIG, "%s: %s.%s must be an array of at most %d integers", label,
                 section, key, max);
    return FALSE;
  }
  JsonArray *a = json_node_get_array (n);
  guint len = json_array_get_length (a);
  for (guint i = 0; i < len; i++) {
    JsonNode *e = json_array_get_element (a, i);
    if (!JSON_NODE_HOLDS_VALUE (e) || json_node_get_value_type (e) != G_TYPE_INT64) {
      g_set_error (error, PPX_ERROR, PPX_ERROR_CONFIG, "%s: %s.%s[%u] must be an integer", label, section, key, i);
      return FALSE;
    }
    out[i] = (int) CLAMP (json_node_get_int (e), G_MININT, G_MAXINT);
  }
  *count = (int) len;
  return TRUE;
}

/* ---- the fields ---- */

/* One number of the config: its JSON member, where it lives in PpxLmConfig or PpxMimiConfig, and its
 * PersonaPlex-7B value (docs/personaplex-arch.md 1.1). Each table is read (ppx_config_apply_json), written
 * (ppx_config_to_json) and defaulted (ppx_config_default) in its order. */
typedef struct {
  const char *key;
  gsize offset;
  gboolean is_double; /* else an int */
  double value;       /* the default */
} Field;

#define LM(k, v) {#k, G_STRUCT_OFFSET (PpxLmConfig, k), FALSE, v}
static const Field lm_fields[] = {
  LM (dim, 4096), LM (num_heads, 32), LM (num_layers, 32),
  {"hidden_scale", G_STRUCT_OFFSET (PpxLmConfig, hidden_scale), TRUE, 4.125}, LM (context, 3000),
  LM (text_card, 32000), LM (card, 2048), LM (n_q, 16), LM (dep_q, 16), LM (existing_text_padding_id, 3),
  LM (max_period, 10000), LM (depformer_dim, 1024), LM (depformer_dim_feedforward, (int) (4.125 * 1024)),
  LM (depformer_num_heads, 16), LM (depformer_num_layers, 6),
};
#undef LM

#define MIMI(k, field, v) {k, G_STRUCT_OFFSET (PpxMimiConfig, field), FALSE, v}
static const Field seanet_fields[] = {
  MIMI ("channels", channels, 1), MIMI ("dimension", dimension, 512), MIMI ("n_filters", n_filters, 64),
  MIMI ("n_residual_layers", n_residual_layers, 1), MIMI ("compress", compress, 2),
  MIMI ("dilation_base", dilation_base, 2), MIMI ("kernel_size", kernel_size, 7),
  MIMI ("residual_kernel_size", residual_kernel_size, 3), MIMI ("last_kernel_size", last_kernel_size, 3),
};
static const Field quantizer_fields[] = {
  MIMI ("dimension", q_dimension, 256), MIMI ("n_q", q_n_q, 32), MIMI ("bins", q_bins, 2048),
  MIMI ("input_dimension", q_input_dimension, 512), MIMI ("output_dimension", q_output_dimension, 512),
};
static const Field transformer_fields[] = {
  MIMI ("d_model", t_d_model, 512), MIMI ("num_heads", t_num_heads, 8), MIMI ("num_layers", t_num_layers, 8),
  MIMI ("context", t_context, 250), MIMI ("dim_feedforward", t_dim_feedforward, 2048),
  MIMI ("max_period", t_max_period, 10000),
};
#undef MIMI

/* Sets the n fields of the struct at base to their defaults. */
static void
set_defaults (const Field *fields, guint n, void *base)
{
  for (guint i = 0; i < n; i++) {
    const Field *f = &fields[i];
    if (f->is_double)
      G_STRUCT_MEMBER (double, base, f->offset) = f->value;
    else
      G_STRUCT_MEMBER (int, base, f->offset) = (int) f->value;
  }
}

void
ppx_config_default (PpxConfig *cfg)
{
  static const int delays[PPX_MAX_STREAMS] = {0, 0, 1, 1, 1, 1, 1, 1, 1, 0, 1, 1, 1, 1, 1, 1, 1};
  static const int ratios[] = {8, 6, 5, 4};
  memset (cfg, 0, sizeof *cfg);
  set_defaults (lm_fields, G_N_ELEMENTS (lm_fields), &cfg->lm);
  memcpy (cfg->lm.delays, delays, sizeof delays);
  PpxMimiConfig *m = &cfg->mimi;
  set_defaults (seanet_fields, G_N_ELEMENTS (seanet_fields), m);
  set_defaults (quantizer_fields, G_N_ELEMENTS (quantizer_fields), m);
  set_defaults (transformer_fields, G_N_ELEMENTS (transformer_fields), m);
  m->n_ratios = G_N_ELEMENTS (ratios);
  memcpy (m->ratios, ratios, sizeof ratios);
  m->num_codebooks = 8;
  m->sample_rate = 24000;
}

/* Reads the n fields present in o into the struct at base; FALSE at the first that is not a number of its kind. */
static gboolean
get_fields (JsonObject *o, const Field *fields, guint n, void *base, const char *label, const char *section,
            GError **error)
{
  for (guint i = 0; i < n; i++) {
    const Field *f = &fields[i];
    void *at = G_STRUCT_MEMBER_P (base, f->offset);
    if (!(f->is_double ? get_double (o, f->key, at, label, section, error)
                       : get_int (o, f->key, at, label, section, error)))
      return FALSE;
  }
  return TRUE;
}

static gboolean
apply_lm (PpxLmConfig *lm, JsonObject *o, const char *label, GError **error)
{
  const char *s = "lm";
  int ndel = -1;
  return get_fields (o, lm_fields, G_N_ELEMENTS (lm_fields), lm, label, s, error) &&
         get_int_array (o, "delays", lm->delays, PPX_MAX_STREAMS, &ndel, label, s, error) &&
         (ndel < 0 || ndel == 1 + lm->n_q ||
          (g_set_error (error, PPX_ERROR, PPX_ERROR_CONFIG, "%s: lm.delays has %d entries, expected 1 + n_q = %d",
                        label, ndel, 1 + lm->n_q),
           FALSE));
}

/* The object member @key of o, or NULL when absent or not an object. */
static JsonObject *
object_member (JsonObject *o, const char *key)
{
  JsonNode *n = json_object_get_member (o, key);
  return n && JSON_NODE_HOLDS_OBJECT (n) ? json_node_get_object (n) : NULL;
}

static gboolean
apply_mimi (PpxMimiConfig *m, JsonObject *o, const char *label, GError **error)
{
  JsonObject *so, *qo, *to;
  if ((so = object_member (o, "seanet"))) {
    const char *s = "mimi.seanet";
    int nr = -1;
    if (!(get_fields (so, seanet_fields, G_N_ELEMENTS (seanet_fields), m, label, s, error) &&
          get_int_array (so, "ratios", m->ratios, PPX_MAX_RATIOS, &nr, label, s, error)))
      return FALSE;
    if (nr >= 0)
      m->n_ratios = nr;
  }
  if ((qo = object_member (o, "quantizer")) &&
      !get_fields (qo, quantizer_fields, G_N_ELEMENTS (quantizer_fields), m, label, "mimi.quantizer", error))
    return FALSE;
  if ((to = object_member (o, "transformer")) &&
      !get_fields (to, transformer_fields, G_N_ELEMENTS (transformer_fields), m, label, "mimi.transformer", error))
    return FALSE;
  return get_int (o, "num_codebooks", &m->num_codebooks, label, "mimi", error);
}

/* The top-level section @key: *out NULL when absent; FALSE with an error when it is not an object. */
static gboolean
section (JsonObject *o, const char *key, JsonObject **out, const char *label, GError **error)
{
  JsonNode *n = json_object_get_member (o, key);
  *out = NULL;
  if (!n)
    return TRUE;
  if (!JSON_NODE_HOLDS_OBJECT (n)) {
    g_set_error (error, PPX_ERROR, PPX_ERROR_CONFIG, "%s: \"%s\" is not an object", label, key);
    return FALSE;
  }
  *out = json_node_get_object (n);
  return TRUE;
}

gboolean
ppx_config_apply_json (PpxConfig *cfg, const char *json, gssize len, const char *label, GError **error)
{
  GError *perr = NULL;
  g_autoptr (JsonParser) p =
    ppx_json_parse_strict (json, len < 0 ? strlen (json) : (gsize) len, label, "the config", NULL, &perr);
  if (!p) {
    perr->code = PPX_ERROR_CONFIG;
    g_propagate_error (error, perr);
    return FALSE;
  }
  JsonNode *root = json_parser_get_root (p);
  if (!root || !JSON_NODE_HOLDS_OBJECT (root)) {
    g_set_error (error, PPX_ERROR, PPX_ERROR_CONFIG, "%s: top level is not a JSON object", label);
    return FALSE;
  }
  JsonObject *o = json_node_get_object (root), *lm, *mimi;
  return section (o, "lm", &lm, label, error) && (!lm || apply_lm (&cfg->lm, lm, label, error)) &&
         section (o, "mimi", &mimi, label, error) && (!mimi || apply_mimi (&cfg->mimi, mimi, label, error)) &&
         ppx_config_finish (cfg, label, error);
}

gboolean
ppx_config_load_dir (PpxConfig *cfg, const char *model_dir, GError **error)
{
  ppx_config_default (cfg);
  g_autofree char *path = g_build_filename (model_dir, "config.json", NULL);
  if (!g_file_test (path, G_FILE_TEST_EXISTS))
    return ppx_config_finish (cfg, path, error);
  g_autofree char *text = NULL;
  gsize len;
  if (!g_file_get_contents (path, &text, &len, error))
    return FALSE;
  return ppx_config_apply_json (cfg, text, (gssize) len, path, error);
}

#define CHECK(cond, ...)                                                                                             \
  do {                                                                                                               \
    if (!(cond)) {                                                                                                   \
      g_autofree char *_m = g_strdup_printf (__VA_ARGS__);                                                           \
      g_set_error (error, PPX_ERROR, PPX_ERROR_CONFIG, "%s: invalid config: %s", label, _m);                          \
      return FALSE;                                                                                                  \
    }                                                                                                                \
  } while (0)

static int
gated_hidden (int dim, int dim_ff)
{
  return dim_ff == 4 * dim ? 21 * dim / 8 : 2 * dim_ff / 3;
}

gboolean
ppx_config_finish (PpxConfig *cfg, const char *label, GError **error)
{
  PpxLmConfig *lm = &cfg->lm;
  PpxMimiConfig *m = &cfg->mimi;
  const int big = 1 << 20;
  CHECK (lm->dim > 0 && lm->dim <= big, "lm.dim = %d", lm->dim);
  CHECK (lm->num_heads > 0 && lm->dim % lm->num_heads == 0 && (lm->dim / lm->num_heads) % 2 == 0,
         "lm.num_heads = %d must divide dim = %d into even head sizes", lm->num_heads, lm->dim);
  CHECK (lm->num_layers > 0 && lm->num_layers <= 1024, "lm.num_layers = %d", lm->num_layers);
  CHECK (lm->hidden_scale > 0 && lm->hidden_scale < 64, "lm.hidden_scale = %g", lm->hidden_scale);
  CHECK (lm->context > 0 && lm->context <= big, "lm.context = %d", lm->context);
  CHECK (lm->text_card > 4 && lm->text_card <= big, "lm.text_card = %d", lm->text_card);
  CHECK (lm->card > 0 && lm->card <= big, "lm.card = %d", lm->card);
  CHECK (lm->n_q == 16, "lm.n_q = %d (PersonaPlex has 8 agent + 8 user streams: 16)", lm->n_q);
  CHECK (lm->dep_q >= 8 && lm->dep_q <= lm->n_q, "lm.dep_q = %d must be in 8..n_q", lm->dep_q);
  CHECK (lm->existing_text_padding_id >= 0 && lm->existing_text_padding_id < lm->text_card,
         "lm.existing_text_padding_id = %d", lm->existing_text_padding_id);
  CHECK (lm->max_period > 0, "lm.max_period = %d", lm->max_period);
  CHECK (lm->depformer_dim > 0 && lm->depformer_dim <= big, "lm.depformer_dim = %d", lm->depformer_dim);
  CHECK (lm->depformer_num_heads > 0 && lm->depformer_dim % lm->depformer_num_heads == 0,
         "lm.depformer_num_heads = %d must divide depformer_dim = %d", lm->depformer_num_heads, lm->depformer_dim);
  CHECK (lm->depformer_num_layers > 0 && lm->depformer_num_layers <= 1024, "lm.depformer_num_layers = %d",
         lm->depformer_num_layers);
  CHECK (lm->depformer_dim_feedforward > 0 && lm->depformer_dim_feedforward <= 64 * big,
         "lm.depformer_dim_feedforward = %d", lm->depformer_dim_feedforward);
  lm->n_streams = 1 + lm->n_q;
  lm->max_delay = 0;
  for (int k = 0; k < lm->n_streams; k++) {
    CHECK (lm->delays[k] >= 0 && lm->delays[k] <= 1, "lm.delays[%d] = %d (0 or 1 supported)", k, lm->delays[k]);
    lm->max_delay = MAX (lm->max_delay, lm->delays[k]);
  }
  lm->ffn_hidden = gated_hidden (lm->dim, (int) (lm->hidden_scale * lm->dim));
  lm->depformer_ffn_hidden = gated_hidden (lm->depformer_dim, lm->depformer_dim_feedforward);
  CHECK (lm->ffn_hidden > 0 && lm->depformer_ffn_hidden > 0, "feed-forward sizes must be positive");

  CHECK (m->channels == 1, "mimi.seanet.channels = %d (mono only)", m->channels);
  CHECK (m->dimension > 0 && m->dimension <= big, "mimi.seanet.dimension = %d", m->dimension);
  CHECK (m->n_filters > 0 && m->n_filters <= big, "mimi.seanet.n_filters = %d", m->n_filters);
  CHECK (m->n_residual_layers >= 1 && m->n_residual_layers <= 8, "mimi.seanet.n_residual_layers = %d",
         m->n_residual_layers);
  CHECK (m->compress > 0 && m->dilation_base > 0, "mimi.seanet.compress/dilation_base must be positive");
  CHECK (m->kernel_size > 0 && m->residual_kernel_size > 0 && m->last_kernel_size > 0,
         "mimi.seanet kernel sizes must be positive");
  CHECK (m->n_ratios > 0 && m->n_ratios <= PPX_MAX_RATIOS, "mimi.seanet.ratios has %d entries", m->n_ratios);
  m->hop = 1;
  for (int i = 0; i < m->n_ratios; i++) {
    CHECK (m->ratios[i] > 0 && m->ratios[i] <= 64, "mimi.seanet.ratios[%d] = %d", i, m->ratios[i]);
    m->hop *= m->ratios[i];
  }
  CHECK (m->q_dimension > 0 && m->q_bins > 0 && m->q_n_q >= 2, "mimi.quantizer sizes must be positive");
  CHECK (m->q_input_dimension == m->dimension && m->q_output_dimension == m->dimension,
         "mimi.quantizer input/output_dimension (%d/%d) must equal seanet.dimension (%d)", m->q_input_dimension,
         m->q_output_dimension, m->dimension);
  CHECK (m->t_d_model == m->dimension, "mimi.transformer.d_model = %d must equal seanet.dimension = %d", m->t_d_model,
         m->dimension);
  CHECK (m->t_num_heads > 0 && m->t_d_model % m->t_num_heads == 0 && (m->t_d_model / m->t_num_heads) % 2 == 0,
         "mimi.transformer.num_heads = %d", m->t_num_heads);
  CHECK (m->t_num_layers > 0 && m->t_num_layers <= 1024, "mimi.transformer.num_layers = %d", m->t_num_layers);
  CHECK (m->t_context >= 2, "mimi.transformer.context = %d", m->t_context);
  CHECK (m->t_dim_feedforward > 0, "mimi.transformer.dim_feedforward = %d", m->t_dim_feedforward);
  CHECK (m->t_max_period > 0, "mimi.transformer.max_period = %d", m->t_max_period);
  CHECK (m->num_codebooks == lm->n_q / 2, "mimi.num_codebooks = %d must be n_q / 2 = %d", m->num_codebooks,
         lm->n_q / 2);
  CHECK (m->num_codebooks - 1 <= m->q_n_q - 1, "mimi.num_codebooks = %d exceeds the quantizer's %d codebooks",
         m->num_codebooks, m->q_n_q);
  CHECK (m->q_bins == lm->card, "mimi.quantizer.bins = %d must equal lm.card = %d", m->q_bins, lm->card);
  m->frame_size = m->hop * 2;
  return TRUE;
}

/* Writes the n fields of the struct at base as members of the open object. */
static void
add_fields (JsonBuilder *b, const Field *fields, guint n, const void *base)
{
  for (guint i = 0; i < n; i++) {
    const Field *f = &fields[i];
    json_builder_set_member_name (b, f->key);
    if (f->is_double)
      json_builder_add_double_value (b, G_STRUCT_MEMBER (double, base, f->offset));
    else
      json_builder_add_int_value (b, G_STRUCT_MEMBER (int, base, f->offset));
  }
}

static void
add_int_array (JsonBuilder *b, const char *key, const int *v, int n)
{
  json_builder_set_member_name (b, key);
  json_builder_begin_array (b);
  for (int i = 0; i < n; i++)
    json_builder_add_int_value (b, v[i]);
  json_builder_end_array (b);
}

char *
ppx_config_to_json (const PpxConfig *cfg)
{
  const PpxLmConfig *lm = &cfg->lm;
  const PpxMimiConfig *m = &cfg->mimi;
  g_autoptr (JsonBuilder) b = json_builder_new ();
  json_builder_begin_object (b);
  json_builder_set_member_name (b, "lm");
  json_builder_begin_object (b);
  add_fields (b, lm_fields, G_N_ELEMENTS (lm_fields), lm);
  add_int_array (b, "delays", lm->delays, 1 + lm->n_q);
  json_builder_end_object (b);
  json_builder_set_member_name (b, "mimi");
  json_builder_begin_object (b);
  json_builder_set_member_name (b, "seanet");
  json_builder_begin_object (b);
  add_fields (b, seanet_fields, G_N_ELEMENTS (seanet_fields), m);
  add_int_array (b, "ratios", m->ratios, m->n_ratios);
  json_builder_end_object (b);
  json_builder_set_member_name (b, "quantizer");
  json_builder_begin_object (b);
  add_fields (b, quantizer_fields, G_N_ELEMENTS (quantizer_fields), m);
  json_builder_end_object (b);
  json_builder_set_member_name (b, "transformer");
  json_builder_begin_object (b);
  add_fields (b, transformer_fields, G_N_ELEMENTS (transformer_fields), m);
  json_builder_end_object (b);
  json_builder_set_member_name (b, "num_codebooks");
  json_builder_add_int_value (b, m->num_codebooks);
  json_builder_end_object (b);
  json_builder_end_object (b);
  g_autoptr (JsonGenerator) g = json_generator_new ();
  g_autoptr (JsonNode) root = json_builder_get_root (b);
  json_generator_set_root (g, root);
  json_generator_set_pretty (g, TRUE);
  return json_generator_to_data (g, NULL);
}
