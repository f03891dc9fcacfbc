/* The whole conversation loop against the reference (golden, greedy): prompts, then per frame Mimi
 * encode -> LM step -> Mimi decode. Tokens exact for every frame, logits of the first 8 steps to 1e-3
 * relative, PCM to 1e-4 max abs; the same with the voice prompt replayed from voice_prompt.pt. */
#include <glib/gstdio.h>
#include <math.h>

#include "golden-model.h"
#include "personaplex-internal.h"

static GoldenModel G;
static PpxModel *model;

typedef struct {
  int frames, token_mismatches;
  double pcm_err, text_rel, audio_rel;
} RunResult;

static const char *voice_cache_dir;

static RunResult
run (const char *voice, const char *tokens_name, const char *pcm_name, gboolean full_depformer, gboolean logits,
     int **all_tokens)
{
  RunResult r = {0};
  g_autoptr (GError) err = NULL;
  PpxSessionParams p;
  ppx_session_params_init (&p);
  p.kv_format = PPX_KV_F32; /* the golden reference computes in f32 */
  p.voice_prompt = voice;
  p.voice_cache_dir = voice_cache_dir;
  p.voice_normalize = FALSE;
  p.text_prompt_tokens = G.text_tokens;
  p.n_text_prompt_tokens = G.n_text_tokens;
  p.greedy = TRUE;
  PpxSession *s = ppx_session_new (model, &p, &err);
  g_assert_no_error (err);
  PpxLmGen *gen = ppx_session_lmgen (s);
  g_assert_cmpint (gen->offset, ==, G.prompt_offset);
  gen->full_depformer = full_depformer;
  const PpxStTensor *user = ppx_st_find (G.golden, "user_pcm"), *tok = ppx_st_find (G.golden, tokens_name),
                    *pcm = ppx_st_find (G.golden, pcm_name), *tl = ppx_st_find (G.golden, "lm_run_text_logits"),
                    *al = ppx_st_find (G.golden, "lm_run_audio_logits");
  g_assert_true (user && tok && pcm && tl && al);
  const int fs = ppx_model_frame_size (model), T = (int) tok->shape[0], V = (int) tl->shape[1];
  const int card = (int) al->shape[2], nsteps = (int) al->shape[1];
  g_assert_cmpint (tok->shape[1], ==, 17);
  g_assert_cmpint (pcm->shape[0], ==, (gint64) T * fs);
  const gint64 S = user->shape[0];
  g_autofree float *in = g_new (float, fs), *out = g_new (float, fs), *logit = g_new (float, MAX (V, card));
  *all_tokens = g_new (int, T * 17);
  for (int t = 0; t < T; t++) {
    gint64 n = MIN (fs, S - (gint64) t * fs);
    memset (in, 0, fs * sizeof (float));
    if (n > 0)
      memcpy (in, (const float *) user->data + (gsize) t * fs, n * sizeof (float));
    PpxFrameResult fr;
    g_assert_true (ppx_session_step (s, in, out, &fr, &err));
    for (int k = 0; k < 17; k++) {
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
  ppx_session_free (s);
  return r;
}

static void
test_run (void)
{
  g_autofree int *tokens = NULL;
  RunResult r = run (G.voice_wav, "lm_run_out_tokens", "lm_run_pcm", TRUE, TRUE, &tokens);
  g_printerr ("run: %d frames, %d token mismatches, pcm max abs err %.3g, text logits rel %.3g, audio logits rel %.3g\n",
              r.frames, r.token_mismatches, r.pcm_err, r.text_rel, r.audio_rel);
  g_assert_cmpint (r.token_mismatches, ==, 0);
  g_assert_cmpfloat (r.text_rel, <, 1e-3);
  g_assert_cmpfloat (r.audio_rel, <, 1e-3);
  g_assert_cmpfloat (r.pcm_err, <, 1e-4);
}

/* Skipping the depformer steps whose outputs are always provided changes no token. */
static void
test_skip_depformer_steps (void)
{
  g_autofree int *full = NULL, *skipped = NULL;
  RunResult a = run (G.voice_wav, "lm_run_out_tokens", "lm_run_pcm", TRUE, FALSE, &full);
  RunResult b = run (G.voice_wav, "lm_run_out_tokens", "lm_run_pcm", FALSE, FALSE, &skipped);
  g_assert_cmpint (a.frames, ==, b.frames);
  g_assert_cmpmem (full, a.frames * 17 * sizeof (int), skipped, b.frames * 17 * sizeof (int));
  g_assert_cmpint (b.token_mismatches, ==, 0);
}

static void
test_replay (void)
{
  g_autofree int *tokens = NULL;
  RunResult r = run (G.voice_pt, "lm_replay_out_tokens", "lm_replay_pcm", FALSE, FALSE, &tokens);
  g_printerr ("replay: %d frames, %d token mismatches, pcm max abs err %.3g\n", r.frames, r.token_mismatches,
              r.pcm_err);
  g_assert_cmpint (r.token_mismatches, ==, 0);
  g_assert_cmpfloat (r.pcm_err, <, 1e-4);
}

/* An audio voice prompt is cached on first use; the second start replays the cache and the
 * conversation is unchanged (the reference's .pt replay equals its audio path). */
static void
test_voice_cache (void)
{
  g_autofree char *dir = g_dir_make_tmp ("ppx-voice-cache-XXXXXX", NULL);
  voice_cache_dir = dir;
  for (int pass = 0; pass < 2; pass++) {
    g_autofree int *tokens = NULL;
    RunResult r = run (G.voice_wav, "lm_run_out_tokens", "lm_run_pcm", FALSE, FALSE, &tokens);
    g_assert_cmpint (r.token_mismatches, ==, 0);
    g_assert_cmpfloat (r.pcm_err, <, 1e-4);
    g_autoptr (GDir) d = g_dir_open (dir, 0, NULL);
    const char *name = g_dir_read_name (d);
    g_assert_nonnull (name); /* the first pass wrote exactly one cache entry */
    g_assert_true (g_str_has_suffix (name, ".safetensors"));
    g_assert_null (g_dir_read_name (d));
    /* ... holding what the reference saved in voice_prompt.pt */
    g_autofree char *path = g_build_filename (dir, name, NULL);
    g_autoptr (GError) err = NULL;
    PpxSafetensors *c = ppx_st_open (path, &err);
    g_assert_no_error (err);
    const PpxStTensor *e = ppx_st_find (c, "embeddings"), *k = ppx_st_find (c, "cache");
    const PpxStTensor *ge = ppx_st_find (G.golden, "voice_prompt_embeddings"), *gk = ppx_st_find (G.golden, "voice_prompt_cache");
    g_assert_true (e && k && ge && gk);
    g_assert_cmpint (ppx_st_numel (e), ==, ppx_st_numel (ge));
    g_assert_cmpfloat (golden_rel_err (e->data, ge->data, (gsize) ppx_st_numel (e)), <, 1e-6);
    g_assert_cmpmem (k->data, k->nbytes, gk->data, gk->nbytes);
    ppx_st_close (c);
  }
  g_autoptr (GDir) d = g_dir_open (dir, 0, NULL);
  const char *name;
  while ((name = g_dir_read_name (d))) {
    g_autofree char *p = g_build_filename (dir, name, NULL);
    g_unlink (p);
  }
  g_rmdir (dir);
  voice_cache_dir = NULL;
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  golden_model_setup (&G);
  model = golden_model_load (&G, PPX_BACKEND_CPU);
  g_test_add_func ("/lm/golden/run", test_run);
  g_test_add_func ("/lm/golden/skip-depformer-steps", test_skip_depformer_steps);
  g_test_add_func ("/lm/golden/replay", test_replay);
  g_test_add_func ("/lm/golden/voice-cache", test_voice_cache);
  int rc = g_test_run ();
  ppx_model_unref (model);
  golden_model_teardown (&G);
  return rc;
}
