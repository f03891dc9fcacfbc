/* The public API (personaplex.h), part one: the shareable model (loading, tokenizer, sizes). Engines are
 * in engine.c, sessions and their prompts in session.c. */
#include "model-internal.h"

#include "quant-load.h"

#define MIMI_FILE "tokenizer-e351c8d8-checkpoint125.safetensors"

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
  g_mutex_init (&m->voice_lock);
  g_cond_init (&m->voice_cond);
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
  if (m->voices)
    g_hash_table_unref (m->voices);
  if (m->voices_loading)
    g_hash_table_unref (m->voices_loading);
  g_mutex_clear (&m->voice_lock);
  g_cond_clear (&m->voice_cond);
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
  return ppx_quantization_name (m->quant);
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

char *
ppx_model_dir_mimi_path (const char *model_dir)
{
  return find_mimi_file (model_dir);
}
