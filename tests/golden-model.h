/* Builds a model directory from the golden files (symlinks + config.json = golden.json) and loads
 * the golden expectations; shared by the LM/generation golden tests. */
#ifndef PPX_GOLDEN_MODEL_H
#define PPX_GOLDEN_MODEL_H

#include <glib/gstdio.h>
#include <math.h>
#include <json-glib/json-glib.h>
#include <unistd.h>

#include "audio-io.h"
#include "personaplex-internal.h"
#include "personaplex.h"
#include "safetensors.h"
#include "test-util.h"

typedef struct {
  char *dir;        /* temp model directory */
  char *voice_wav;  /* golden voice_pcm as a float WAV */
  char *voice_pt;   /* the reference's voice_prompt.pt */
  PpxSafetensors *golden;
  int text_tokens[256];
  int n_text_tokens;
  int prompt_offset;
} GoldenModel;

/* max |a - b| / max |b| (max |a - b| when b is all zeros): how far logits are from the reference's */
static inline double
golden_rel_err (const float *a, const float *b, gsize n)
{
  double num = 0, den = 0;
  for (gsize i = 0; i < n; i++) {
    num = MAX (num, fabs ((double) a[i] - b[i]));
    den = MAX (den, fabs ((double) b[i]));
  }
  return den > 0 ? num / den : num;
}

static inline void
golden_model_setup (GoldenModel *g)
{
  const char *src = ppx_test_golden_or_skip ();
  g_autoptr (GError) err = NULL;
  g->dir = g_dir_make_tmp ("ppx-golden-XXXXXX", &err);
  g_assert_no_error (err);
  const char *links[][2] = {{"model.safetensors", "model.safetensors"},
                            {"mimi.safetensors", "tokenizer-e351c8d8-checkpoint125.safetensors"},
                            {"golden.json", "config.json"}};
  for (guint i = 0; i < G_N_ELEMENTS (links); i++) {
    g_autofree char *from = g_build_filename (src, links[i][0], NULL);
    g_autofree char *abs = g_canonicalize_filename (from, NULL);
    g_autofree char *to = g_build_filename (g->dir, links[i][1], NULL);
    g_assert_cmpint (symlink (abs, to), ==, 0);
  }
  g_autofree char *gpath = g_build_filename (src, "golden.safetensors", NULL);
  g->golden = ppx_st_open (gpath, &err);
  g_assert_no_error (err);
  const PpxStTensor *v = ppx_st_find (g->golden, "voice_pcm");
  g_assert_nonnull (v);
  g->voice_wav = g_build_filename (g->dir, "voice.wav", NULL);
  g_assert_true (ppx_audio_write_f32 (g->voice_wav, v->data, (gsize) v->shape[0], 24000, &err));
  g->voice_pt = g_build_filename (src, "voice_prompt.pt", NULL);
  g_autofree char *jpath = g_build_filename (src, "golden.json", NULL);
  g_autoptr (JsonParser) p = json_parser_new ();
  g_assert_true (json_parser_load_from_file (p, jpath, &err));
  JsonObject *o = json_node_get_object (json_parser_get_root (p));
  JsonArray *a = json_object_get_array_member (o, "text_prompt_tokens");
  g->n_text_tokens = (int) json_array_get_length (a);
  for (int i = 0; i < g->n_text_tokens; i++)
    g->text_tokens[i] = (int) json_array_get_int_element (a, i);
  g->prompt_offset = (int) json_object_get_int_member (o, "lm_run_prompt_offset");
}

/* The golden model on `backend` (the test fails on an error). */
static inline PpxModel *
golden_model_load (const GoldenModel *g, PpxBackendKind backend)
{
  g_autoptr (GError) err = NULL;
  PpxModelParams mp;
  ppx_model_params_init (&mp);
  mp.model_dir = g->dir;
  mp.backend = backend;
  PpxModel *m = ppx_model_load (&mp, &err);
  g_assert_no_error (err);
  return m;
}

/* The reference run's session: f32 KV cache (the reference computes in f32), `voice` (a WAV or .pt, or NULL),
 * the whole text prompt, greedy. */
static inline void
golden_run_params (const GoldenModel *g, const char *voice, PpxSessionParams *p)
{
  ppx_session_params_init (p);
  p->kv_format = PPX_KV_F32;
  p->voice_prompt = voice;
  p->voice_normalize = FALSE;
  p->text_prompt_tokens = g->text_tokens;
  p->n_text_prompt_tokens = g->n_text_tokens;
  p->greedy = TRUE;
}

typedef struct {
  int frames, token_mismatches;
  double pcm_err, text_rel, audio_rel; /* PCM max abs error; logits: the largest golden_rel_err of a frame */
} GoldenRun;

/* Steps session `s` (after its prompts) through the golden user PCM, a frame of `frame_size` samples at a time,
 * comparing the 17 tokens of every frame with `tokens_name` and the answer with `pcm_name` (golden.safetensors),
 * and with `logits`, the text and every depformer step's audio logits with the reference's (the session must
 * compute all depformer steps). The tokens go to *all_tokens (frames x 17, g_free) when it is not NULL. */
static inline GoldenRun
golden_run_conversation (const GoldenModel *g, PpxSession *s, int frame_size, const char *tokens_name,
                     const char *pcm_name, gboolean logits, int **all_tokens)
{
  GoldenRun r = {0};
  g_autoptr (GError) err = NULL;
  const PpxStTensor *user = ppx_st_find (g->golden, "user_pcm"), *tok = ppx_st_find (g->golden, tokens_name),
                    *pcm = ppx_st_find (g->golden, pcm_name), *tl = ppx_st_find (g->golden, "lm_run_text_logits"),
                    *al = ppx_st_find (g->golden, "lm_run_audio_logits");
  g_assert_true (user && tok && pcm && tl && al);
  const int fs = frame_size, T = (int) tok->shape[0], V = (int) tl->shape[1];
  const int card = (int) al->shape[2], nsteps = (int) al->shape[1];
  g_assert_cmpint (tok->shape[1], ==, 17);
  g_assert_cmpint (pcm->shape[0], ==, (gint64) T * fs);
  const gint64 S = user->shape[0];
  g_autofree float *in = g_new (float, fs), *out = g_new (float, fs), *logit = g_new (float, MAX (V, card));
  if (all_tokens)
    *all_tokens = g_new (int, T * 17);
  for (int t = 0; t < T; t++) {
    gint64 n = MIN (fs, S - (gint64) t * fs);
    memset (in, 0, fs * sizeof (float));
    if (n > 0)
      memcpy (in, (const float *) user->data + (gsize) t * fs, n * sizeof (float));
    PpxFrameResult fr;
    g_assert_true (ppx_session_step (s, in, out, &fr, &err));
    g_assert_no_error (err);
    for (int k = 0; k < 17; k++) {
      if (all_tokens)
        (*all_tokens)[t * 17 + k] = fr.tokens[k];
      if (fr.tokens[k] != ((const int64_t *) tok->data)[t * 17 + k]) {
        if (r.token_mismatches < 8)
          g_printerr ("frame %d stream %d: got %d expected %" G_GINT64_FORMAT "\n", t, k, fr.tokens[k],
                      ((const int64_t *) tok->data)[t * 17 + k]);
        r.token_mismatches++;
      }
    }
    for (int i = 0; i < fs; i++)
      r.pcm_err = MAX (r.pcm_err, fabs (out[i] - ((const float *) pcm->data)[(gsize) t * fs + i]));
    if (logits && t < tl->shape[0]) {
      ppx_session_text_logits (s, logit);
      r.text_rel = MAX (r.text_rel, golden_rel_err (logit, (const float *) tl->data + (gsize) t * V, V));
      for (int st = 0; st < nsteps; st++) {
        ppx_session_audio_logits (s, st, logit);
        r.audio_rel = MAX (r.audio_rel,
                           golden_rel_err (logit, (const float *) al->data + ((gsize) t * nsteps + st) * card, card));
      }
    }
  }
  r.frames = T;
  return r;
}

/* Session i of the engine schedule tests (test-engine-buckets, test-gpu-tick): no voice, the golden voice
 * prompt or its WAV in turn, the whole text prompt or a part of it; greedy when `greedy` or i is even, else
 * sampled with seed 77 + i. */
static inline void
golden_session_params (const GoldenModel *g, int i, gboolean greedy, PpxSessionParams *p)
{
  ppx_session_params_init (p);
  p->voice_prompt = i % 3 == 1 ? g->voice_pt : i % 3 == 2 ? g->voice_wav : NULL;
  p->voice_normalize = FALSE;
  p->text_prompt_tokens = g->text_tokens;
  p->n_text_prompt_tokens = i % 2 ? g->n_text_tokens : MIN (2 + i, g->n_text_tokens);
  p->greedy = greedy || i % 2 == 0;
  p->seed = 77 + (guint64) i;
}

static inline void
golden_model_teardown (GoldenModel *g)
{
  const char *names[] = {"model.safetensors", "tokenizer-e351c8d8-checkpoint125.safetensors", "config.json",
                         "voice.wav"};
  for (guint i = 0; i < G_N_ELEMENTS (names); i++) {
    g_autofree char *p = g_build_filename (g->dir, names[i], NULL);
    g_unlink (p);
  }
  g_rmdir (g->dir);
  ppx_st_close (g->golden);
  g_free (g->dir);
  g_free (g->voice_wav);
  g_free (g->voice_pt);
}

#endif
