/* personaplex-run's settings and results (the conversation itself is in run-pipeline.c). */
#include "run-core.h"

#include "ppx-common.h"

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
