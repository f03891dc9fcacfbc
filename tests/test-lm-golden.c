/* The whole conversation loop against the reference (golden, greedy): prompts, then per frame Mimi
 * encode -> LM step -> Mimi decode. Tokens exact for every frame, logits of the first 8 steps to 1e-3
 * relative, PCM to 1e-4 max abs; the same with the voice prompt replayed from voice_prompt.pt. */
#include <glib/gstdio.h>
#include <math.h>

#include "golden-model.h"
#include "personaplex-internal.h"

static GoldenModel G;
static PpxModel *model;

static const char *voice_cache_dir;

static GoldenRun
run (const char *voice, const char *tokens_name, const char *pcm_name, gboolean full_depformer, gboolean logits,
     int **all_tokens)
{
  g_autoptr (GError) err = NULL;
  PpxSessionParams p;
  golden_run_params (&G, voice, &p);
  p.voice_cache_dir = voice_cache_dir;
  PpxSession *s = ppx_session_new (model, &p, &err);
  g_assert_no_error (err);
  PpxLmGen *gen = ppx_session_lmgen (s);
  g_assert_cmpint (gen->offset, ==, G.prompt_offset);
  gen->full_depformer = full_depformer;
  GoldenRun r = golden_run_conversation (&G, s, ppx_model_frame_size (model), tokens_name, pcm_name, logits, all_tokens);
  ppx_session_free (s);
  return r;
}

static void
test_run (void)
{
  g_autofree int *tokens = NULL;
  GoldenRun r = run (G.voice_wav, "lm_run_out_tokens", "lm_run_pcm", TRUE, TRUE, &tokens);
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
  GoldenRun a = run (G.voice_wav, "lm_run_out_tokens", "lm_run_pcm", TRUE, FALSE, &full);
  GoldenRun b = run (G.voice_wav, "lm_run_out_tokens", "lm_run_pcm", FALSE, FALSE, &skipped);
  g_assert_cmpint (a.frames, ==, b.frames);
  g_assert_cmpmem (full, a.frames * 17 * sizeof (int), skipped, b.frames * 17 * sizeof (int));
  g_assert_cmpint (b.token_mismatches, ==, 0);
}

static void
test_replay (void)
{
  g_autofree int *tokens = NULL;
  GoldenRun r = run (G.voice_pt, "lm_replay_out_tokens", "lm_replay_pcm", FALSE, FALSE, &tokens);
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
    GoldenRun r = run (G.voice_wav, "lm_run_out_tokens", "lm_run_pcm", FALSE, FALSE, &tokens);
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
