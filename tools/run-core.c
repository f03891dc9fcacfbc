#include "run-core.h"

#include "ppx-common.h"

static const char *const quantization_names[] = {
  [PPX_QUANT_AUTO] = "auto", [PPX_QUANT_BF16] = "bf16", [PPX_QUANT_INT8] = "int8", [PPX_QUANT_INT4] = "int4"};
static const char *const backend_names[] = {
  [PPX_BACKEND_AUTO] = "auto", [PPX_BACKEND_CPU] = "cpu", [PPX_BACKEND_CUDA] = "cuda"};

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
  memset (out, 0, sizeof *out);
}

static PpxModel *
load_model (const RunSettings *s, GError **error)
{
  PpxModelParams mp;
  ppx_model_params_init (&mp);
  mp.model_dir = s->model_dir;
  mp.quantization = s->quantization;
  mp.backend = s->backend;
  mp.device = s->device;
  PpxModel *model = ppx_model_load (&mp, error);
  if (model && ppx_model_sample_rate (model) != RUN_SAMPLE_RATE) {
    g_set_error (error, PPX_ERROR, PPX_ERROR_UNSUPPORTED, "%s: the model runs at %d Hz; only %d Hz is supported",
                 s->model_dir, ppx_model_sample_rate (model), RUN_SAMPLE_RATE);
    g_clear_pointer (&model, ppx_model_unref);
  }
  return model;
}

static PpxSession *
new_session (PpxModel *model, const RunSettings *s, GError **error)
{
  PpxSessionParams p;
  ppx_session_params_init (&p);
  p.voice_prompt = s->voice_prompt;
  p.voice_normalize = s->voice_normalize;
  p.voice_cache_dir = s->voice_cache_dir;
  p.text_prompt = s->text_prompt;
  p.text_prompt_tokens = s->text_prompt_tokens;
  p.n_text_prompt_tokens = s->n_text_prompt_tokens;
  p.greedy = s->greedy;
  p.seed = s->seed;
  p.temp_audio = (float) s->temp_audio;
  p.temp_text = (float) s->temp_text;
  p.topk_audio = s->topk_audio;
  p.topk_text = s->topk_text;
  return ppx_session_new (model, &p, error);
}

gboolean
run_conversation (const RunSettings *settings, const float *in, gsize n, RunOutput *out, GError **error)
{
  memset (out, 0, sizeof *out);
  gint64 t0 = g_get_monotonic_time ();
  PpxModel *model = load_model (settings, error);
  if (!model)
    return FALSE;
  PpxSession *session = new_session (model, settings, error);
  if (!session) {
    ppx_model_unref (model);
    return FALSE;
  }
  const gsize fs = (gsize) ppx_model_frame_size (model);
  out->n_frames = (n + fs - 1) / fs;
  out->n_samples = n;
  out->frames = g_new0 (RunFrame, MAX (out->n_frames, 1));
  out->pcm = g_new (float, out->n_frames * fs + 1); /* room for the padded last frame, then truncated */
  out->backend = g_strdup (ppx_model_backend_name (model));
  out->quantization = g_strdup (ppx_model_quantization_name (model));
  g_autofree float *frame = g_new (float, fs);
  gboolean ok = TRUE;
  for (gsize t = 0; t < out->n_frames && ok; t++) {
    gsize have = MIN (fs, n - t * fs);
    memcpy (frame, in + t * fs, have * sizeof (float));
    memset (frame + have, 0, (fs - have) * sizeof (float));
    PpxFrameResult res = {0};
    ok = ppx_session_step (session, frame, out->pcm + t * fs, &res, error);
    if (ok) {
      memcpy (out->frames[t].tokens, res.tokens, sizeof out->frames[t].tokens);
      out->frames[t].text = g_strdup (res.text);
    }
  }
  ppx_session_free (session);
  ppx_model_unref (model);
  out->seconds = (g_get_monotonic_time () - t0) / 1e6;
  if (!ok)
    run_output_clear (out);
  return ok;
}
