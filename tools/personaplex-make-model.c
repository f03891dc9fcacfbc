/* personaplex-make-model: writes a deterministic random model directory in the published layout.
 *
 *   personaplex-make-model --output-dir DIR [--preset tiny|full] [--config FILE.json] [--seed N]
 *                          [--lm-only | --mimi-only | --no-lm]
 *
 * Files: model.safetensors (LM, BF16), tokenizer-e351c8d8-checkpoint125.safetensors (Mimi, F32) and
 * config.json. Tensor names and shapes come from the manifests, so the directory loads like a real one.
 * Every value is a pure function of (seed, tensor name, element index), so runs are byte-identical and
 * memory stays bounded: tensors are generated and streamed in chunks (a full LM is 16.7 GB).
 * No sentencepiece model is written; tools that need text pieces accept token ids instead. */
#include "config.h"
#include "manifest.h"
#include "safetensors.h"

#include <errno.h>
#include <glib/gstdio.h>
#include <math.h>
#include <stdio.h>

#define LM_FILE "model.safetensors"
#define MIMI_FILE "tokenizer-e351c8d8-checkpoint125.safetensors"
#define CHUNK_ELEMS (1u << 20)

/* The hyperparameters of ../shared/golden/tiny/golden.json (the reference's tiny test model). */
static const char tiny_config_json[] =
  "{\"lm\": {\"dim\": 64, \"num_heads\": 4, \"num_layers\": 2, \"hidden_scale\": 4.125, \"context\": 20,"
  " \"text_card\": 2048, \"card\": 2048, \"n_q\": 16, \"dep_q\": 16, \"existing_text_padding_id\": 3,"
  " \"max_period\": 10000, \"depformer_dim\": 32, \"depformer_dim_feedforward\": 132,"
  " \"depformer_num_heads\": 2, \"depformer_num_layers\": 2,"
  " \"delays\": [0, 0, 1, 1, 1, 1, 1, 1, 1, 0, 1, 1, 1, 1, 1, 1, 1]},"
  " \"mimi\": {\"seanet\": {\"channels\": 1, \"dimension\": 32, \"n_filters\": 4, \"n_residual_layers\": 1,"
  " \"compress\": 2, \"dilation_base\": 2, \"kernel_size\": 7, \"residual_kernel_size\": 3,"
  " \"last_kernel_size\": 3, \"ratios\": [8, 6, 5, 4]},"
  " \"quantizer\": {\"dimension\": 16, \"n_q\": 32, \"bins\": 2048, \"input_dimension\": 32,"
  " \"output_dimension\": 32},"
  " \"transformer\": {\"d_model\": 32, \"num_heads\": 2, \"num_layers\": 2, \"context\": 30,"
  " \"dim_feedforward\": 64, \"max_period\": 10000},"
  " \"num_codebooks\": 8}}";

/* ---- values ---- */

/* splitmix64 evaluated at a counter: element i of a stream is independent of every other element. */
static inline guint64
splitmix64_at (guint64 key, guint64 i)
{
  guint64 z = key + (i + 1) * 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* Uniform in [-1, 1). */
static inline float
uniform_at (guint64 key, guint64 i)
{
  return (float) ((double) (splitmix64_at (key, i) >> 11) * (2.0 / 9007199254740992.0) - 1.0);
}

typedef enum { FILL_UNIFORM, FILL_NORMALISH, FILL_AROUND_ONE, FILL_CONSTANT } FillKind;

/* How one tensor is filled: value = offset + scale * noise(kind). */
typedef struct {
  FillKind kind;
  float scale, offset;
} Fill;

static gboolean
has_suffix (const char *name, const char *suffix)
{
  return g_str_has_suffix (name, suffix);
}

/* Picks a distribution from the tensor's role so a forward pass stays finite and non-degenerate. */
static Fill
fill_for (const PpxManifestEntry *e)
{
  const char *n = e->name;
  if (has_suffix (n, "._initialized") || has_suffix (n, ".cluster_usage"))
    return (Fill){FILL_CONSTANT, 0.0f, 1.0f};
  if (has_suffix (n, ".embedding_sum"))
    return (Fill){FILL_NORMALISH, 1.0f, 0.0f};
  if (has_suffix (n, ".alpha") || has_suffix (n, "norm1.weight") || has_suffix (n, "norm2.weight"))
    return (Fill){FILL_AROUND_ONE, 0.05f, 1.0f};
  if (strstr (n, "layer_scale_"))
    return (Fill){FILL_UNIFORM, 0.045f, 0.055f}; /* in [0.01, 0.1] */
  if (has_suffix (n, ".bias"))
    return (Fill){FILL_UNIFORM, 0.01f, 0.0f};
  if (g_str_has_prefix (n, "emb.") || g_str_has_prefix (n, "text_emb.") || g_str_has_prefix (n, "depformer_emb.") ||
      g_str_has_prefix (n, "depformer_text_emb."))
    return (Fill){FILL_UNIFORM, 1.0f, 0.0f};
  double fan_in;
  if (strstr (n, "upsample.convtr"))
    fan_in = 2.0; /* depthwise, stride 2: each output sees two taps */
  else if (strstr (n, ".convtr."))
    fan_in = 2.0 * (double) e->shape[0]; /* kernel = 2 * stride: two taps per input channel */
  else if (e->ndim == 3)
    fan_in = (double) e->shape[1] * (double) e->shape[2]; /* conv [C_out, C_in, K] */
  else
    fan_in = e->ndim >= 2 ? (double) e->shape[1] : 1.0; /* linear [out, in] */
  return (Fill){FILL_UNIFORM, (float) (1.0 / sqrt (MAX (fan_in, 1.0))), 0.0f};
}

static inline float
value_at (Fill f, guint64 key, guint64 i)
{
  switch (f.kind) {
  case FILL_CONSTANT:
    return f.offset;
  case FILL_NORMALISH: /* Irwin-Hall with 4 terms: mean 0, variance 1 */
    return f.scale * 0.8660254f *
           (uniform_at (key, 4 * i) + uniform_at (key, 4 * i + 1) + uniform_at (key, 4 * i + 2) +
            uniform_at (key, 4 * i + 3));
  case FILL_AROUND_ONE:
  case FILL_UNIFORM:
  default:
    return f.offset + f.scale * uniform_at (key, i);
  }
}

static guint64
tensor_key (guint64 seed, const char *name)
{
  guint64 h = 0xcbf29ce484222325ull; /* FNV-1a */
  for (const char *p = name; *p; p++)
    h = (h ^ (guint8) *p) * 0x100000001b3ull;
  return splitmix64_at (seed, h);
}

/* ---- files ---- */

static gboolean
write_checkpoint (const char *path, GPtrArray *manifest, PpxDType dtype, guint64 seed, GError **error)
{
  PpxStWriter *w = ppx_st_writer_new ();
  ppx_st_writer_set_metadata (w, "format", "pt");
  ppx_st_writer_set_metadata (w, "generator", "personaplex-make-model");
  g_autofree char *seed_str = g_strdup_printf ("%" G_GUINT64_FORMAT, seed);
  ppx_st_writer_set_metadata (w, "seed", seed_str);
  for (guint t = 0; t < manifest->len; t++) {
    const PpxManifestEntry *e = g_ptr_array_index (manifest, t);
    ppx_st_writer_declare (w, e->name, dtype, e->ndim, e->shape);
  }
  gboolean ok = ppx_st_writer_begin (w, path, error);
  float *vals = g_new (float, CHUNK_ELEMS);
  guint16 *half = g_new (guint16, CHUNK_ELEMS);
  for (guint t = 0; ok && t < manifest->len; t++) {
    const PpxManifestEntry *e = g_ptr_array_index (manifest, t);
    Fill fill = fill_for (e);
    guint64 key = tensor_key (seed, e->name), numel = 1;
    for (int d = 0; d < e->ndim; d++)
      numel *= (guint64) e->shape[d];
    for (guint64 start = 0; ok && start < numel; start += CHUNK_ELEMS) {
      gsize n = (gsize) MIN ((guint64) CHUNK_ELEMS, numel - start);
      for (gsize i = 0; i < n; i++)
        vals[i] = value_at (fill, key, start + i);
      if (dtype == PPX_DTYPE_BF16) {
        for (gsize i = 0; i < n; i++)
          half[i] = ppx_f32_to_bf16 (vals[i]);
        ok = ppx_st_writer_write (w, half, n * sizeof *half, error);
      } else {
        ok = ppx_st_writer_write (w, vals, n * sizeof *vals, error);
      }
    }
  }
  ok = ok && ppx_st_writer_finish (w, error);
  g_free (vals);
  g_free (half);
  ppx_st_writer_free (w);
  if (!ok)
    g_unlink (path);
  return ok;
}

static gboolean
load_config (PpxConfig *cfg, const char *preset, const char *config_path, GError **error)
{
  ppx_config_default (cfg);
  if (g_strcmp0 (preset, "tiny") == 0) {
    if (!ppx_config_apply_json (cfg, tiny_config_json, -1, "built-in tiny preset", error))
      return FALSE;
  } else if (g_strcmp0 (preset, "full") != 0) {
    g_set_error (error, PPX_ERROR, PPX_ERROR_INVALID, "unknown preset '%s' (expected tiny or full)", preset);
    return FALSE;
  }
  if (!config_path)
    return ppx_config_finish (cfg, preset, error);
  g_autofree char *text = NULL;
  gsize len;
  if (!g_file_get_contents (config_path, &text, &len, error))
    return FALSE;
  return ppx_config_apply_json (cfg, text, (gssize) len, config_path, error);
}

static gboolean
make_model (const char *dir, const PpxConfig *cfg, guint64 seed, gboolean lm, gboolean mimi, GError **error)
{
  if (g_mkdir_with_parents (dir, 0755) != 0) {
    g_set_error (error, PPX_ERROR, PPX_ERROR_IO, "%s: cannot create directory: %s", dir, g_strerror (errno));
    return FALSE;
  }
  g_autofree char *config_path = g_build_filename (dir, "config.json", NULL);
  g_autofree char *json = ppx_config_to_json (cfg);
  if (!g_file_set_contents (config_path, json, -1, error))
    return FALSE;
  if (lm) {
    g_autofree char *path = g_build_filename (dir, LM_FILE, NULL);
    g_autoptr (GPtrArray) manifest = ppx_manifest_lm (&cfg->lm);
    if (!write_checkpoint (path, manifest, PPX_DTYPE_BF16, seed, error))
      return FALSE;
  }
  if (mimi) {
    g_autofree char *path = g_build_filename (dir, MIMI_FILE, NULL);
    g_autoptr (GPtrArray) manifest = ppx_manifest_mimi (&cfg->mimi);
    if (!write_checkpoint (path, manifest, PPX_DTYPE_F32, seed ^ 0x6d696d69ull, error))
      return FALSE;
  }
  return TRUE;
}

int
main (int argc, char **argv)
{
  g_autofree char *output_dir = NULL, *preset = NULL, *config_path = NULL;
  gint64 seed = 0;
  gboolean lm_only = FALSE, mimi_only = FALSE, no_lm = FALSE;
  GOptionEntry entries[] = {
    {"output-dir", 'o', 0, G_OPTION_ARG_FILENAME, &output_dir, "Directory to write (created if needed)", "DIR"},
    {"preset", 'p', 0, G_OPTION_ARG_STRING, &preset, "Base hyperparameters: tiny (default) or full (PersonaPlex-7B)",
     "NAME"},
    {"config", 'c', 0, G_OPTION_ARG_FILENAME, &config_path, "config.json-style overrides applied over the preset",
     "FILE"},
    {"seed", 's', 0, G_OPTION_ARG_INT64, &seed, "Random seed (default 0)", "N"},
    {"lm-only", 0, 0, G_OPTION_ARG_NONE, &lm_only, "Write only the LM checkpoint (and config.json)", NULL},
    {"mimi-only", 0, 0, G_OPTION_ARG_NONE, &mimi_only, "Write only the Mimi checkpoint (and config.json)", NULL},
    {"no-lm", 0, 0, G_OPTION_ARG_NONE, &no_lm, "Same as --mimi-only", NULL},
    {NULL},
  };
  g_autoptr (GOptionContext) ctx = g_option_context_new ("- write a deterministic random PersonaPlex model directory");
  g_option_context_add_main_entries (ctx, entries, NULL);
  g_autoptr (GError) error = NULL;
  if (!g_option_context_parse (ctx, &argc, &argv, &error)) {
    g_printerr ("personaplex-make-model: %s\n", error->message);
    return 2;
  }
  if (!output_dir || argc > 1 || (lm_only && (mimi_only || no_lm))) {
    g_printerr ("personaplex-make-model: %s\n", !output_dir ? "--output-dir is required"
                                                : argc > 1  ? "unexpected argument"
                                                            : "--lm-only excludes --mimi-only/--no-lm");
    return 2;
  }
  PpxConfig cfg;
  if (!load_config (&cfg, preset ? preset : "tiny", config_path, &error) ||
      !make_model (output_dir, &cfg, (guint64) seed, !(mimi_only || no_lm), !lm_only, &error)) {
    g_printerr ("personaplex-make-model: %s\n", error->message);
    return 1;
  }
  return 0;
}
