/* The public API (personaplex.h), part three: sessions. A session is a slot of an engine; creating one
 * runs the reference's system prompts (voice, silence, text, silence; spec §5.5) as single-row steps on
 * the engine, one prompt frame per hold of the engine lock, so a running tick waits at most one frame. */
#include "engine-internal.h"
#include "personaplex-internal.h"

#include <sys/stat.h>

#define SILENCE_FRAMES 6 /* int(0.5 s * 12.5 Hz) */

/* Mimi codes of the reference's "zero" agent frame and of its user-channel sine placeholder (§3.10). */
static const int silence_tokens[8] = {948, 243, 1178, 546, 1736, 1030, 1978, 2008};
static const int sine_tokens[8] = {430, 1268, 381, 1611, 1095, 1495, 56, 472};

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

/* One prompt frame: a single-row step on the engine, under its lock. */
static void
step_prompt (PpxSession *s, const int *agent, int text, const float *embedding, const int *user)
{
  int out[PPX_MAX_STREAMS];
  ppx_engine_lock_for_prompt (s->engine);
  ppx_engine_lm_call (s->engine, s, user, agent, text, embedding, out);
  ppx_engine_unlock (s->engine);
}

/* Prompt frames: chunked prefill passes fitted between ticks (prompt-prefill.c), or with a prompt chunk of 1
 * one single-row step each (the reference's order of operations, kept for comparisons). */
static void
run_frames (PpxSession *s, const PpxPromptFrame *f, int n)
{
  if (s->engine->prefill && s->engine->prompt_chunk > 1) {
    ppx_engine_run_prompt (s->engine, s, f, n);
    return;
  }
  for (int i = 0; i < n; i++) {
    if (f[i].cache)
      memcpy (s->gen.cache, f[i].cache, sizeof s->gen.cache);
    step_prompt (s, f[i].agent, f[i].text, f[i].embedding, f[i].user);
  }
}

/* The voice phase (frames 0 .. n_voice-1) from the engine's snapshot of it when it has one, else run (and kept
 * when it may be: voice-snapshot.c); then the other frames. Step by step, everything runs. */
static void
run_voice_then (PpxSession *s, const PpxPromptFrame *f, int n_voice, int n)
{
  PpxEngine *e = s->engine;
  if (n_voice == 0 || e->prompt_chunk <= 1 || e->voice_snapshots <= 0) {
    run_frames (s, f, n);
    return;
  }
  g_autofree char *key = ppx_voice_snapshot_key (s->voice);
  if (!ppx_engine_voice_restore (e, s, key)) {
    run_frames (s, f, n_voice);
    ppx_engine_voice_store (e, s, key);
  }
  run_frames (s, f + n_voice, n - n_voice);
}

/* The system prompts in the reference's order: voice, silence, text, silence (spec §5.5). */
static void
run_prompts (PpxSession *s)
{
  const PpxConfig *cfg = &s->model->cfg;
  ppx_lmgen_reset (&s->gen); /* position 0: the slot's stale cache entries are never attended */
  PpxVoicePrompt *vp = s->voice;
  int dummy[8];
  for (int q = 0; q < 8; q++)
    dummy[q] = cfg->lm.card; /* step_embeddings provides start tokens on every audio stream */
  const int n_voice = vp ? vp->n_frames : 0, n = n_voice + 2 * SILENCE_FRAMES + s->n_text_tokens;
  g_autofree PpxPromptFrame *f = g_new0 (PpxPromptFrame, n);
  int i = 0;
  for (int j = 0; j < n_voice; j++, i++) {
    if (vp->from_embeddings)
      f[i] = (PpxPromptFrame){.agent = dummy, .user = dummy, .text = TEXT_PAD,
                              .embedding = vp->embeddings + (gsize) j * vp->dim};
    else
      f[i] = (PpxPromptFrame){.agent = vp->codes + (gsize) j * vp->n_codebooks, .user = sine_tokens, .text = TEXT_PAD};
  }
  for (int j = 0; j < 2 * SILENCE_FRAMES + s->n_text_tokens; j++, i++) {
    const int k = j - SILENCE_FRAMES;
    f[i] = (PpxPromptFrame){.agent = silence_tokens, .user = sine_tokens,
                            .text = k >= 0 && k < s->n_text_tokens ? s->text_tokens[k] : TEXT_PAD};
  }
  if (vp && vp->from_embeddings)
    f[n_voice].cache = (const int (*)[PPX_LMGEN_COLS]) vp->cache; /* the .pt's token cache after its vectors */
  run_voice_then (s, f, n_voice, n);
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

/* The model's voice cache: each voice file is read (and an audio one encoded) once per model, then shared
 * by every session that names it; a file changed or removed later is not read again. An audio voice's key
 * also holds the normalisation and the disk cache directory (a session with a directory writes its entry). */
static char *
voice_key (const PpxSessionParams *p, const char *path)
{
  if (g_str_has_suffix (path, ".pt"))
    return g_strdup_printf ("pt|%s", path);
  return g_strdup_printf ("audio|%d|%s|%s", p->voice_normalize, p->voice_cache_dir ? p->voice_cache_dir : "",
                          path);
}

/* The cached prompt for `key` (a reference), or NULL when the caller is to read it: it then must call
 * voice_cache_put or voice_cache_abandon. A key another session is reading is waited for. */
static PpxVoicePrompt *
voice_cache_get_or_claim (PpxModel *m, const char *key)
{
  g_mutex_lock (&m->voice_lock);
  if (!m->voices) {
    m->voices = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, (GDestroyNotify) ppx_voice_prompt_unref);
    m->voices_loading = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, NULL);
  }
  PpxVoicePrompt *vp;
  while (!(vp = g_hash_table_lookup (m->voices, key)) && g_hash_table_contains (m->voices_loading, key))
    g_cond_wait (&m->voice_cond, &m->voice_lock);
  if (vp)
    ppx_voice_prompt_ref (vp);
  else
    g_hash_table_add (m->voices_loading, g_strdup (key));
  g_mutex_unlock (&m->voice_lock);
  return vp;
}

/* Takes `vp`, stores it for `key` and returns a reference for the session. */
static PpxVoicePrompt *
voice_cache_put (PpxModel *m, const char *key, PpxVoicePrompt *vp)
{
  g_mutex_lock (&m->voice_lock);
  g_hash_table_insert (m->voices, g_strdup (key), ppx_voice_prompt_ref (vp));
  g_hash_table_remove (m->voices_loading, key);
  m->voice_reads++;
  g_cond_broadcast (&m->voice_cond);
  g_mutex_unlock (&m->voice_lock);
  return vp;
}

/* Reading `key` failed: the next session that names it tries again. */
static void
voice_cache_abandon (PpxModel *m, const char *key)
{
  g_mutex_lock (&m->voice_lock);
  g_hash_table_remove (m->voices_loading, key);
  g_cond_broadcast (&m->voice_cond);
  g_mutex_unlock (&m->voice_lock);
}

/* Reads the voice file into s->voice (the first session that names it). */
static gboolean
read_voice (PpxSession *s, const PpxSessionParams *p, const char *path, const char *key, GError **error)
{
  const PpxConfig *cfg = &s->model->cfg;
  if (!g_file_test (path, G_FILE_TEST_IS_REGULAR)) {
    if (s->model->model_dir && !strchr (p->voice_prompt, '/'))
      g_set_error (error, PPX_ERROR, PPX_ERROR_MISSING,
                   "voice prompt '%s': no such file, and no %s/voices/%s%s", p->voice_prompt, s->model->model_dir,
                   p->voice_prompt, g_str_has_suffix (p->voice_prompt, ".pt") ? "" : ".pt");
    else
      g_set_error (error, PPX_ERROR, PPX_ERROR_MISSING, "%s: voice prompt file: %s", path, ppx_file_problem (path));
    return FALSE;
  }
  if (g_str_has_suffix (path, ".pt")) {
    PpxVoicePrompt *vp = ppx_voice_prompt_from_embeddings_file (cfg, path, error);
    s->voice = vp ? voice_cache_put (s->model, key, vp) : NULL;
    return s->voice != NULL;
  }
  g_autofree char *cache = NULL;
  if (p->voice_cache_dir) {
    if (!(cache = voice_cache_path (s, p->voice_cache_dir, path, p->voice_normalize, error)))
      return FALSE;
    if (g_file_test (cache, G_FILE_TEST_EXISTS)) {
      PpxVoicePrompt *vp = ppx_voice_prompt_from_embeddings_file (cfg, cache, NULL);
      if (vp) {
        s->voice = voice_cache_put (s->model, key, vp);
        return TRUE; /* an unreadable cache entry is recomputed below */
      }
    }
  }
  /* a Mimi stream of its own for the voice audio (the engine's rows belong to running sessions) */
  PpxMimiState *mimi = ppx_mimi_state_new (s->model->mimi, error);
  if (!mimi)
    return FALSE;
  PpxVoicePrompt *vp = ppx_voice_prompt_from_audio (mimi, cfg, path, p->voice_normalize, error);
  ppx_mimi_state_free (mimi);
  if (!vp)
    return FALSE;
  s->voice = voice_cache_put (s->model, key, vp);
  if (cache) {
    /* Replay the voice phase once with capture on, then store what a .pt would hold. */
    GArray *cap = g_array_new (FALSE, FALSE, sizeof (float));
    s->gen.capture = cap;
    ppx_lmgen_reset (&s->gen);
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
load_voice (PpxSession *s, const PpxSessionParams *p, GError **error)
{
  g_autofree char *path = resolve_voice (s->model, p->voice_prompt);
  g_autofree char *key = voice_key (p, path);
  if ((s->voice = voice_cache_get_or_claim (s->model, key)))
    return TRUE;
  if (read_voice (s, p, path, key, error))
    return TRUE;
  voice_cache_abandon (s->model, key);
  return FALSE;
}

static gboolean
is_blank (const char *s)
{
  for (; *s; s++)
    if (!g_ascii_isspace (*s))
      return FALSE;
  return TRUE;
}

static gboolean
check_params (const PpxModel *model, const PpxSessionParams *p, GError **error)
{
  const PpxConfig *cfg = &model->cfg;
  if (!p) {
    g_set_error (error, PPX_ERROR, PPX_ERROR_INVALID, "no session parameters");
    return FALSE;
  }
  if (cfg->lm.card <= 2008) {
    g_set_error (error, PPX_ERROR, PPX_ERROR_CONFIG,
                 "lm.card = %d is too small for the reference's silence and sine prompt tokens", cfg->lm.card);
    return FALSE;
  }
  if (!(p->temp_audio >= 0 && p->temp_text >= 0 && p->topk_audio >= 0 && p->topk_text >= 0)) {
    g_set_error (error, PPX_ERROR, PPX_ERROR_INVALID, "sampling temperatures and top-k must be >= 0");
    return FALSE;
  }
  return TRUE;
}

PpxSession *
ppx_engine_session_new (PpxEngine *engine, const PpxSessionParams *p, GError **error)
{
  if (!engine) {
    g_set_error (error, PPX_ERROR, PPX_ERROR_INVALID, "ppx_engine_session_new: no engine");
    return NULL;
  }
  PpxModel *model = engine->model;
  const PpxConfig *cfg = &model->cfg;
  if (!check_params (model, p, error))
    return NULL;
  PpxSession *s = g_new0 (PpxSession, 1);
  s->engine = ppx_engine_ref (engine);
  s->model = model;
  s->slot = s->row = -1;
  s->smp = (PpxSampling){.greedy = p->greedy, .seed = p->seed, .temp_text = p->temp_text,
                         .temp_audio = p->temp_audio, .topk_text = p->topk_text, .topk_audio = p->topk_audio};
  ppx_lmgen_init (&s->gen, &cfg->lm);
  if (!ppx_engine_claim_slot (engine, s, error))
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
  ppx_engine_activate (engine, s);
  return s;
fail:
  ppx_session_free (s);
  return NULL;
}

PpxSession *
ppx_session_new (PpxModel *model, const PpxSessionParams *p, GError **error)
{
  if (!model) {
    g_set_error (error, PPX_ERROR, PPX_ERROR_INVALID, "ppx_session_new: no model");
    return NULL;
  }
  if (!check_params (model, p, error))
    return NULL;
  PpxEngineParams ep;
  ppx_engine_params_init (&ep);
  ep.max_sessions = 1;
  ep.kv_format = p->kv_format;
  PpxEngine *e = ppx_engine_new (model, &ep, error);
  if (!e)
    return NULL;
  PpxSession *s = ppx_engine_session_new (e, p, error);
  ppx_engine_unref (e); /* the session holds the private engine */
  return s;
}

void
ppx_session_free (PpxSession *s)
{
  if (!s)
    return;
  ppx_engine_release (s->engine, s);
  ppx_voice_prompt_unref (s->voice);
  g_free (s->text_tokens);
  g_free (s->text);
  ppx_engine_unref (s->engine);
  g_free (s);
}

PpxEngine *
ppx_session_engine (const PpxSession *s)
{
  return s->engine;
}

gboolean
ppx_session_reset (PpxSession *s, GError **error)
{
  run_prompts (s);
  ppx_engine_reset_codec (s->engine, s);
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
  if (!s) {
    g_set_error (error, PPX_ERROR, PPX_ERROR_INVALID, "ppx_session_step: no session");
    return FALSE;
  }
  return ppx_engine_step (s->engine, &s, 1, &in, &out, res, error);
}

PpxLmGen *
ppx_session_lmgen (PpxSession *s)
{
  return &s->gen;
}

void
ppx_session_text_logits (PpxSession *s, float *out)
{
  ppx_engine_lock_for_prompt (s->engine);
  ppx_lm_batch_text_logits (s->engine->lm, s->lm_row, out);
  ppx_engine_unlock (s->engine);
}

void
ppx_session_audio_logits (PpxSession *s, int step, float *out)
{
  ppx_engine_lock_for_prompt (s->engine);
  ppx_lm_batch_audio_logits (s->engine->lm, s->lm_row, step, out);
  ppx_engine_unlock (s->engine);
}
