/* personaplex-make-model: writes a deterministic random model directory in the published layout.
 *
 *   personaplex-make-model --output-dir DIR [--preset tiny|mid|full] [--config FILE.json] [--seed N]
 *                          [--format bf16|int8|int4] [--lm-only | --mimi-only | --no-lm]
 *
 * Files: model.safetensors (LM: BF16, or pre-quantized as personaplex-quantize writes it),
 * tokenizer-e351c8d8-checkpoint125.safetensors (Mimi, F32) and config.json. Tensor names and shapes
 * come from the manifests, so the directory loads like a real one. Values come from random-model.c
 * (shared with personaplex-bench): a pure function of (seed, tensor name, element index), so runs are
 * byte-identical and memory stays bounded (tensors are streamed in chunks; a full LM is 16.7 GB).
 * No sentencepiece model is written; tools that need text pieces accept token ids instead. */
#include "config.h"
#include "quant-load.h"
#include "random-model.h"

#include <errno.h>
#include <glib/gstdio.h>

#define LM_FILE "model.safetensors"
#define MIMI_FILE "tokenizer-e351c8d8-checkpoint125.safetensors"

static gboolean
load_config (PpxConfig *cfg, const char *preset, const char *config_path, GError **error)
{
  if (!g_strv_contains ((const char *const[]){"tiny", "mid", "full", NULL}, preset)) {
    g_set_error (error, PPX_ERROR, PPX_ERROR_INVALID, "unknown preset '%s' (expected tiny, mid or full)", preset);
    return FALSE;
  }
  if (!random_model_config (preset, cfg, error))
    return FALSE;
  if (!config_path)
    return TRUE;
  g_autofree char *text = NULL;
  gsize len;
  if (!g_file_get_contents (config_path, &text, &len, error))
    return FALSE;
  return ppx_config_apply_json (cfg, text, (gssize) len, config_path, error);
}

static gboolean
parse_format (const char *name, PpxQuantization *out, GError **error)
{
  if (ppx_quantization_from_name (name, out) && *out != PPX_QUANT_AUTO)
    return TRUE;
  g_set_error (error, PPX_ERROR, PPX_ERROR_INVALID, "unknown format '%s' (expected bf16, int8 or int4)", name);
  return FALSE;
}

static gboolean
make_model (const char *dir, const PpxConfig *cfg, guint64 seed, PpxQuantization format, gboolean lm, gboolean mimi,
            GError **error)
{
  if (g_mkdir_with_parents (dir, 0755) != 0) {
    g_set_error (error, PPX_ERROR, PPX_ERROR_IO, "%s: cannot create directory: %s", dir, g_strerror (errno));
    return FALSE;
  }
  g_autofree char *config_path = g_build_filename (dir, "config.json", NULL);
  g_autofree char *lm_path = g_build_filename (dir, LM_FILE, NULL);
  g_autofree char *mimi_path = g_build_filename (dir, MIMI_FILE, NULL);
  gboolean ok = random_model_write_config (cfg, config_path, error) &&
                (!lm || random_model_write_lm (&cfg->lm, format, seed, lm_path, "personaplex-make-model", error)) &&
                (!mimi || random_model_write_mimi (&cfg->mimi, seed, mimi_path, "personaplex-make-model", error));
  if (!ok) { /* no half-written checkpoint left behind */
    g_unlink (lm_path);
    g_unlink (mimi_path);
  }
  return ok;
}

int
main (int argc, char **argv)
{
  g_autofree char *output_dir = NULL, *preset = NULL, *config_path = NULL, *format_name = NULL;
  gint64 seed = 0;
  gboolean lm_only = FALSE, mimi_only = FALSE, no_lm = FALSE;
  GOptionEntry entries[] = {
    {"output-dir", 'o', 0, G_OPTION_ARG_FILENAME, &output_dir, "Directory to write (created if needed)", "DIR"},
    {"preset", 'p', 0, G_OPTION_ARG_STRING, &preset,
     "Base hyperparameters: tiny (default, the golden tiny model's), mid or full (PersonaPlex-7B)", "NAME"},
    {"config", 'c', 0, G_OPTION_ARG_FILENAME, &config_path, "config.json-style overrides applied over the preset",
     "FILE"},
    {"seed", 's', 0, G_OPTION_ARG_INT64, &seed, "Random seed (default 0)", "N"},
    {"format", 'f', 0, G_OPTION_ARG_STRING, &format_name,
     "LM weights: bf16 (default, as published), or int8/int4 pre-quantized by the default policy", "FORMAT"},
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
  PpxQuantization format = PPX_QUANT_BF16;
  if (format_name && !parse_format (format_name, &format, &error)) {
    g_printerr ("personaplex-make-model: %s\n", error->message);
    return 2;
  }
  PpxConfig cfg;
  if (!load_config (&cfg, preset ? preset : "tiny", config_path, &error) ||
      !make_model (output_dir, &cfg, (guint64) seed, format, !(mimi_only || no_lm), !lm_only, &error)) {
    g_printerr ("personaplex-make-model: %s\n", error->message);
    return 1;
  }
  return 0;
}
