/* The public API (personaplex.h): a shareable model and per-conversation sessions that run the
 * reference's prompt phases and conversation loop (spec §5.5-5.8). */
#include "personaplex-internal.h"

#include <math.h>
#include <sys/stat.h>

#include "config.h"
#include "lm.h"
#include "lmgen.h"
#include "mimi.h"
#include "quant-load.h"
#include "tokenizer.h"
#include "voice-prompt.h"

#define MIMI_FILE "tokenizer-e351c8d8-checkpoint125.safetensors"
#define TOKENIZER_FILE "tokenizer_spm_32k_3.model"
#define TEXT_PAD 3
#define SILENCE_FRAMES 6 /* int(0.5 s * 12.5 Hz) */

/* Mimi codes of the reference's "zero" agent frame and of its user-channel sine placeholder (§3.10). */
static const int silence_tokens[8] = {948, 243, 1178, 546, 1736, 1030, 1978, 2008};
static const int sine_tokens[8] = {430, 1268, 381, 1611, 1095, 1495, 56, 472};

struct PpxModel {
  gint refcount;
  PpxConfig cfg;
  PpxBackend *be;
  PpxSafetensors *lm_st, *mimi_st;
  PpxLm *lm;
  PpxMimi *mimi;
  PpxTokenizer *tok;
  PpxQuantization quant;
  char *lm_path;
  char *model_dir;
};

struct PpxSession {
  PpxModel *model;
  PpxSampling smp;
  int *text_tokens;
  int n_text_tokens;
  PpxVoicePrompt *voice;
  PpxMimiState *mimi;
  PpxLmState *lm;
  PpxLmGen gen;
  guint64 frames;
  char *text;
  float *in;
  int user_codes[8];
};

void
ppx_model_params_init (PpxModelParams *p)
{
  memset (p, 0, sizeof *p);
}

/* The Mimi checkpoint: the published name, else another tokenizer-*.safetensors, else mimi.safetensors. */
static char *
find_mimi_file (const char *dir)
{
  char *p = g_build_filename (dir, MIMI_FILE, NULL);
  if (g_file_test (p, G_FILE_TEST_EXISTS))
    return p;
  g_free (p);
  g_autoptr (GDir) d = g_dir_open (dir, 0, NULL);
  const char *name;
  while (d && (name = g_dir_read_name (d)))
    if (g_str_has_prefix (name, "tokenizer-") && g_str_has_suffix (name, ".safetensors"))
      return g_build_filename (dir, name, NULL);
  p = g_build_filename (dir, "mimi.safetensors", NULL);
  if (g_file_test (p, G_FILE_TEST_EXISTS))
    return p;
  g_free (p);
  return g_build_filename (dir, MIMI_FILE, NULL); /* for the error message */
}

/* CUDA when asked for (a clear error when the build has no CUDA or no GPU is usable), or for AUTO when
 * the build has CUDA and a GPU is present; the CPU otherwise. */
static PpxBackend *
backend_new (const PpxModelParams *params, GError **error)
{
  if (params->backend == PPX_BACKEND_CUDA ||
      (params->backend == PPX_BACKEND_AUTO && ppx_backend_cuda_available (NULL)))
    return ppx_backend_cuda_new (params->device, error);
  return ppx_backend_cpu_new (params->n_threads, error);
}

/* Fills m from the params; on failure m holds what was loaded so far (freed by the caller). */
static gboolean
model_load_parts (PpxModel *m, const PpxModelParams *params, GError **error)
{
  if (params->config_json) {
    g_autofree char *text = NULL;
    gsize len;
    ppx_config_default (&m->cfg);
    if (!g_file_get_contents (params->config_json, &text, &len, error) ||
        !ppx_config_apply_json (&m->cfg, text, (gssize) len, params->config_json, error))
      return FALSE;
  } else if (!ppx_config_load_dir (&m->cfg, params->model_dir, error)) {
    return FALSE;
  }
  m->lm_path = params->lm_file ? g_strdup (params->lm_file) : g_build_filename (params->model_dir, "model.safetensors", NULL);
  g_autofree char *mimi_path = params->mimi_file ? g_strdup (params->mimi_file) : find_mimi_file (params->model_dir);
  if (!(m->be = backend_new (params, error)) || !(m->mimi_st = ppx_st_open (mimi_path, error)) ||
      !(m->mimi = ppx_mimi_load (m->be, &m->cfg.mimi, m->mimi_st, error)) ||
      !(m->lm_st = ppx_st_open (m->lm_path, error)))
    return FALSE;
  int group;
  PpxQuantization stored;
  if (!ppx_quant_file_format (m->lm_st, &stored, &group, error))
    return FALSE;
  m->quant = stored != PPX_QUANT_BF16 ? stored : (params->quantization == PPX_QUANT_AUTO ? PPX_QUANT_BF16 : params->quantization);
  if (!(m->lm = ppx_lm_load (m->be, &m->cfg.lm, m->lm_st, params->quantization, error)))
    return FALSE;
  if (!ppx_backend_borrows_host_memory (m->be)) {
    /* every weight now lives on the device: give the mapped checkpoints' pages back */
    ppx_backend_sync (m->be);
    g_clear_pointer (&m->lm_st, ppx_st_close);
    g_clear_pointer (&m->mimi_st, ppx_st_close);
  }
  if (params->model_dir) {
    g_autofree char *tp = g_build_filename (params->model_dir, TOKENIZER_FILE, NULL);
    if (g_file_test (tp, G_FILE_TEST_EXISTS) && !(m->tok = ppx_tokenizer_load (tp, error)))
      return FALSE;
  }
  return TRUE;
}

PpxModel *
ppx_model_load (const PpxModelParams *params, GError **error)
{
  if (!params->model_dir && (!params->lm_file || !params->mimi_file)) {
    g_set_error (error, PPX_ERROR, PPX_ERROR_INVALID, "no model directory given");
    return NULL;
  }
  if (params->model_dir && !g_file_test (params->model_dir, G_FILE_TEST_IS_DIR)) {
    g_set_error (error, PPX_ERROR, PPX_ERROR_MISSING, "%s: model directory does not exist", params->model_dir);
    return NULL;
  }
  PpxModel *m = g_new0 (PpxModel, 1);
  m->refcount = 1;
  m->model_dir = g_strdup (params->model_dir);
  if (!model_load_parts (m, params, error)) {
    ppx_model_unref (m);
    return NULL;
  }
  return m;
}

PpxModel *
ppx_model_ref (PpxModel *m)
{
  g_atomic_int_inc (&m->refcount);
  return m;
}

void
ppx_model_unref (PpxModel *m)
{
  if (!m || !g_atomic_int_dec_and_test (&m->refcount))
    return;
  ppx_lm_free (m->lm);
  ppx_mimi_free (m->mimi);
  if (m->tok)
    ppx_tokenizer_free (m->tok);
  ppx_st_close (m->lm_st);
  ppx_st_close (m->mimi_st);
  ppx_backend_free (m->be);
  g_free (m->lm_path);
  g_free (m->model_dir);
  g_free (m);
}

int
ppx_model_frame_size (const PpxModel *m)
{
  return m->cfg.mimi.frame_size;
}

int
ppx_model_sample_rate (const PpxModel *m)
{
  return m->cfg.mimi.sample_rate;
}

const char *
ppx_model_backend_name (const PpxModel *m)
{
  return ppx_backend_name (m->be);
}

const char *
ppx_model_quantization_name (const PpxModel *m)
{
  return ppx_quant_format_name (m->quant);
}

guint64
ppx_model_weight_bytes (const PpxModel *m)
{
  return ppx_lm_weight_bytes (m->lm) + ppx_mimi_weight_bytes (m->mimi);
}

char *
ppx_model_token_text (const PpxModel *m, int token)
{
  if (token == 0 || token == TEXT_PAD || token < 0 || !m->tok)
    return NULL;
  return ppx_tokenizer_piece_text (m->tok, token);
}

int *
ppx_model_tokenize_prompt (const PpxModel *m, const char *text, int *n_tokens, GError **error)
{
  if (!m->tok) {
    g_set_error (error, PPX_ERROR, PPX_ERROR_MISSING,
                 "%s: no %s in the model directory: give the text prompt as token ids instead",
                 m->model_dir ? m->model_dir : "model", TOKENIZER_FILE);
    return NULL;
  }
  return ppx_tokenizer_encode_prompt (m->tok, text, n_tokens, error);
}

/* ---- sessions ---- */

void
ppx_session_params_init (PpxSessionParams *p)
{
  memset (p, 0, sizeof *p);
  p->voice_normalize = TRUE;
  p->temp_audio = 0.8f;
  p->temp_text = 0.7f;
  p->topk_audio = 250;
  p->topk_text = 25;
}

static gboolean
step_prompt (PpxSession *s, const int *agent, int text, const float *embedding, const int *user)
{
  int out[PPX_MAX_STREAMS];
  return ppx_lmgen_step (&s->gen, s->lm, user, agent, text, embedding, &s->smp, out);
}

/* The system prompts in the reference's order: voice, silence, text, silence (spec §5.5). */
static void
run_prompts (PpxSession *s)
{
  const PpxConfig *cfg = &s->model->cfg;
  ppx_lmgen_reset (&s->gen);
  ppx_lm_state_reset (s->lm);
  ppx_mimi_reset (s->mimi);
  PpxVoicePrompt *vp = s->voice;
  if (vp && vp->from_embeddings) {
    int dummy[8];
    for (int q = 0; q < 8; q++)
      dummy[q] = cfg->lm.card; /* step_embeddings provides start tokens on every audio stream */
    for (int j = 0; j < vp->n_frames; j++)
      step_prompt (s, dummy, TEXT_PAD, vp->embeddings + (gsize) j * vp->dim, dummy);
    memcpy (s->gen.cache, vp->cache, sizeof s->gen.cache);
  } else if (vp) {
    for (int f = 0; f < vp->n_frames; f++)
      step_prompt (s, vp->codes + (gsize) f * vp->n_codebooks, TEXT_PAD, NULL, sine_tokens);
  }
  for (int i = 0; i < SILENCE_FRAMES; i++)
    step_prompt (s, silence_tokens, TEXT_PAD, NULL, sine_tokens);
  for (int i = 0; i < s->n_text_tokens; i++)
    step_prompt (s, silence_tokens, s->text_tokens[i], NULL, sine_tokens);
  for (int i = 0; i < SILENCE_FRAMES; i++)
    step_prompt (s, silence_tokens, TEXT_PAD, NULL, sine_tokens);
  ppx_mimi_reset (s->mimi);
  s->frames = 0;
}

/* DIR/voices/NAME.pt for a bare name, else the path itself. */
static char *
resolve_voice (const PpxModel *m, const char *v)
{
  if (m->model_dir && !strchr (v, '/') && !g_file_test (v, G_FILE_TEST_EXISTS)) {
    g_autofree char *base = g_str_has_suffix (v, ".pt") ? g_strdup (v) : g_strconcat (v, ".pt", NULL);
    char *p = g_build_filename (m->model_dir, "voices", base, NULL);
    if (g_file_test (p, G_FILE_TEST_EXISTS))
      return p;
    g_free (p);
  }
  return g_strdup (v);
}

/* Cache key of a computed voice prompt: the audio bytes, the normalisation flag, and the LM file. */
static char *
voice_cache_path (const PpxSession *s, const char *dir, const char *audio, gboolean normalize, GError **error)
{
  g_autofree char *bytes = NULL;
  gsize len;
  if (!g_file_get_contents (audio, &bytes, &len, error))
    return NULL;
  struct stat sb = {0};
  stat (s->model->lm_path, &sb);
  g_autoptr (GChecksum) ck = g_checksum_new (G_CHECKSUM_SHA256);
  g_checksum_update (ck, (const guchar *) bytes, len);
  g_autofree char *extra = g_strdup_printf ("|%d|%s|%lld|%lld", normalize, s->model->lm_path, (long long) sb.st_size,
                                            (long long) sb.st_mtime);
  g_checksum_update (ck, (const guchar *) extra, strlen (extra));
  g_autofree char *name = g_strdup_printf ("voice-%.32s.safetensors", g_checksum_get_string (ck));
  return g_build_filename (dir, name, NULL);
}

static gboolean
load_voice (PpxSession *s, const PpxSessionParams *p, GError **error)
{
  const PpxConfig *cfg = &s->model->cfg;
  g_autofree char *path = resolve_voice (s->model, p->voice_prompt);
  if (!g_file_test (path, G_FILE_TEST_IS_REGULAR)) {
    if (s->model->model_dir && !strchr (p->voice_prompt, '/'))
      g_set_error (error, PPX_ERROR, PPX_ERROR_MISSING,
                   "voice prompt '%s': no such file, and no %s/voices/%s%s", p->voice_prompt, s->model->model_dir,
                   p->voice_prompt, g_str_has_suffix (p->voice_prompt, ".pt") ? "" : ".pt");
    else
      g_set_error (error, PPX_ERROR, PPX_ERROR_MISSING, "%s: voice prompt file does not exist", path);
    return FALSE;
  }
  if (g_str_has_suffix (path, ".pt")) {
    s->voice = ppx_voice_prompt_from_embeddings_file (cfg, path, error);
    return s->voice != NULL;
  }
  g_autofree char *cache = NULL;
  if (p->voice_cache_dir) {
    if (!(cache = voice_cache_path (s, p->voice_cache_dir, path, p->voice_normalize, error)))
      return FALSE;
    if (g_file_test (cache, G_FILE_TEST_EXISTS)) {
      s->voice = ppx_voice_prompt_from_embeddings_file (cfg, cache, NULL);
      if (s->voice)
        return TRUE; /* an unreadable cache entry is recomputed below */
    }
  }
  s->voice = ppx_voice_prompt_from_audio (s->mimi, cfg, path, p->voice_normalize, error);
  if (!s->voice)
    return FALSE;
  if (cache) {
    /* Replay the voice phase once with capture on, then store what a .pt would hold. */
    GArray *cap = g_array_new (FALSE, FALSE, sizeof (float));
    s->gen.capture = cap;
    ppx_lmgen_reset (&s->gen);
    ppx_lm_state_reset (s->lm);
    for (int f = 0; f < s->voice->n_frames; f++)
      step_prompt (s, s->voice->codes + (gsize) f * s->voice->n_codebooks, TEXT_PAD, NULL, sine_tokens);
    s->gen.capture = NULL;
    PpxVoicePrompt saved = {.from_embeddings = TRUE, .dim = cfg->lm.dim,
                            .n_frames = (int) (cap->len / cfg->lm.dim), .embeddings = (float *) cap->data};
    memcpy (saved.cache, s->gen.cache, sizeof saved.cache);
    g_mkdir_with_parents (p->voice_cache_dir, 0755);
    g_autoptr (GError) werr = NULL;
    if (saved.n_frames > 0 && !ppx_voice_prompt_save (&saved, cache, &werr))
      g_warning ("voice prompt cache not written: %s", werr->message);
    g_array_free (cap, TRUE);
  }
  return TRUE;
}

static gboolean
is_blank (const char *s)
{
  for (; *s; s++)
    if (!g_ascii_isspace (*s))
      return FALSE;
  return TRUE;
}

PpxSession *
ppx_session_new (PpxModel *model, const PpxSessionParams *p, GError **error)
{
  const PpxConfig *cfg = &model->cfg;
  if (cfg->lm.card <= 2008) {
    g_set_error (error, PPX_ERROR, PPX_ERROR_CONFIG,
                 "lm.card = %d is too small for the reference's silence and sine prompt tokens", cfg->lm.card);
    return NULL;
  }
  if (!(p->temp_audio >= 0 && p->temp_text >= 0 && p->topk_audio >= 0 && p->topk_text >= 0)) {
    g_set_error (error, PPX_ERROR, PPX_ERROR_INVALID, "sampling temperatures and top-k must be >= 0");
    return NULL;
  }
  PpxSession *s = g_new0 (PpxSession, 1);
  s->model = ppx_model_ref (model);
  s->smp = (PpxSampling){.greedy = p->greedy, .seed = p->seed, .temp_text = p->temp_text,
                         .temp_audio = p->temp_audio, .topk_text = p->topk_text, .topk_audio = p->topk_audio};
  s->in = g_new (float, cfg->mimi.frame_size);
  ppx_lmgen_init (&s->gen, &cfg->lm);
  if (!(s->mimi = ppx_mimi_state_new (model->mimi, error)) || !(s->lm = ppx_lm_state_new (model->lm, error)))
    goto fail;
  if (p->n_text_prompt_tokens > 0) {
    for (int i = 0; i < p->n_text_prompt_tokens; i++) {
      if (p->text_prompt_tokens[i] < 0 || p->text_prompt_tokens[i] >= cfg->lm.text_card) {
        g_set_error (error, PPX_ERROR, PPX_ERROR_INVALID, "text prompt token %d is outside [0, %d)",
                     p->text_prompt_tokens[i], cfg->lm.text_card);
        goto fail;
      }
    }
    s->text_tokens = g_memdup2 (p->text_prompt_tokens, sizeof (int) * p->n_text_prompt_tokens);
    s->n_text_tokens = p->n_text_prompt_tokens;
  } else if (p->text_prompt && !is_blank (p->text_prompt)) {
    if (!(s->text_tokens = ppx_model_tokenize_prompt (model, p->text_prompt, &s->n_text_tokens, error)))
      goto fail;
  }
  if (p->voice_prompt && *p->voice_prompt && !load_voice (s, p, error))
    goto fail;
  run_prompts (s);
  return s;
fail:
  ppx_session_free (s);
  return NULL;
}

void
ppx_session_free (PpxSession *s)
{
  if (!s)
    return;
  ppx_mimi_state_free (s->mimi);
  ppx_lm_state_free (s->lm);
  ppx_voice_prompt_free (s->voice);
  g_free (s->text_tokens);
  g_free (s->text);
  g_free (s->in);
  ppx_model_unref (s->model);
  g_free (s);
}

gboolean
ppx_session_reset (PpxSession *s, GError **error)
{
  run_prompts (s);
  return TRUE;
}

guint64
ppx_session_frames (const PpxSession *s)
{
  return s->frames;
}

gboolean
ppx_session_step (PpxSession *s, const float *in, float *out, PpxFrameResult *res, GError **error)
{
  const PpxConfig *cfg = &s->model->cfg;
  const int fs = cfg->mimi.frame_size, nq = cfg->mimi.num_codebooks;
  gint64 t0 = g_get_monotonic_time ();
  for (int i = 0; i < fs; i++)
    s->in[i] = isfinite (in[i]) ? in[i] : 0.0f; /* NaN/Inf: silence, never poison the state */
  ppx_mimi_encode_host (s->mimi, s->in, s->user_codes, NULL);
  int tokens[PPX_MAX_STREAMS];
  if (!ppx_lmgen_step (&s->gen, s->lm, s->user_codes, NULL, -1, NULL, &s->smp, tokens)) {
    g_set_error (error, PPX_ERROR, PPX_ERROR_INVALID, "the model produced no frame (prompt phase too short)");
    return FALSE;
  }
  ppx_mimi_decode_host (s->mimi, tokens + 1, out);
  g_free (s->text);
  s->text = ppx_model_token_text (s->model, tokens[0]);
  s->frames++;
  if (res) {
    for (int k = 0; k < 1 + 2 * nq; k++)
      res->tokens[k] = tokens[k];
    res->text = s->text;
    res->step_ms = (g_get_monotonic_time () - t0) / 1000.0;
  }
  return TRUE;
}

PpxLmGen *
ppx_session_lmgen (PpxSession *s)
{
  return &s->gen;
}

PpxLmState *
ppx_session_lm_state (PpxSession *s)
{
  return s->lm;
}

char *
ppx_model_dir_mimi_path (const char *model_dir)
{
  return find_mimi_file (model_dir);
}
