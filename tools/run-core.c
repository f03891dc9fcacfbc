/* personaplex-run's settings and results (the conversation itself is in run-pipeline.c). */
#include "run-core.h"

#include "ppx-common.h"

static const char *const quantization_names[] = {
  [PPX_QUANT_AUTO] = "auto", [PPX_QUANT_BF16] = "bf16", [PPX_QUANT_INT8] = "int8", [PPX_QUANT_INT4] = "int4"};
static const char *const backend_names[] = {
  [PPX_BACKEND_AUTO] = "auto", [PPX_BACKEND_CPU] = "cpu", [PPX_BACKEND_CUDA] = "cuda"};
static const char *const kv_format_names[] = {
  [PPX_KV_AUTO] = "auto", [PPX_KV_F32] = "f32", [PPX_KV_BF16] = "bf16", [PPX_KV_FP8] = "fp8"};

static int
index_of (const char *const *names, guint n, const char *name)
{
  for (guint i = 0; i < n; i++)
    if (g_strcmp0 (names[i], name) == 0)
      return (int) i;
  return -1;
}

gboolean
run_quantization_from_name (const char *name, PpxQuantization *out)
{
  int i = index_of (quantization_names, G_N_ELEMENTS (quantization_names), name);
  if (i >= 0)
    *out = (PpxQuantization) i;
  return i >= 0;
}

const char *
run_quantization_to_name (PpxQuantization q)
{
  return (guint) q < G_N_ELEMENTS (quantization_names) ? quantization_names[q] : "?";
}

gboolean
run_backend_from_name (const char *name, PpxBackendKind *out)
{
  int i = index_of (backend_names, G_N_ELEMENTS (backend_names), name);
  if (i >= 0)
    *out = (PpxBackendKind) i;
  return i >= 0;
}

const char *
run_backend_to_name (PpxBackendKind b)
{
  return (guint) b < G_N_ELEMENTS (backend_names) ? backend_names[b] : "?";
}

gboolean
run_kv_format_from_name (const char *name, PpxKvFormat *out)
{
  int i = index_of (kv_format_names, G_N_ELEMENTS (kv_format_names), name);
  if (i >= 0)
    *out = (PpxKvFormat) i;
  return i >= 0;
}

const char *
run_kv_format_to_name (PpxKvFormat f)
{
  return (guint) f < G_N_ELEMENTS (kv_format_names) ? kv_format_names[f] : "?";
}

void
run_settings_init (RunSettings *s)
{
  memset (s, 0, sizeof *s);
  PpxSessionParams p;
  ppx_session_params_init (&p);
  s->voice_normalize = p.voice_normalize;
  s->seed = RUN_DEFAULT_SEED;
  s->temp_audio = 0.8; /* the library's defaults, as the user would type them */
  s->temp_text = 0.7;
  s->topk_audio = p.topk_audio;
  s->topk_text = p.topk_text;
  s->quantization = PPX_QUANT_AUTO;
  s->backend = PPX_BACKEND_AUTO;
}

void
run_settings_clear (RunSettings *s)
{
  g_free (s->model_dir);
  g_free (s->input);
  g_free (s->output);
  g_free (s->output_json);
  g_free (s->voice_prompt);
  g_free (s->voice_cache_dir);
  g_free (s->text_prompt);
  g_free (s->text_prompt_tokens);
  memset (s, 0, sizeof *s);
}

void
run_output_clear (RunOutput *out)
{
  for (gsize i = 0; i < out->n_frames; i++)
    g_free (out->frames[i].text);
  g_free (out->frames);
  g_free (out->pcm);
  g_free (out->backend);
  g_free (out->quantization);
  g_free (out->kv_cache_format);
  memset (out, 0, sizeof *out);
}
