/* Builds a model directory from the golden files (symlinks + config.json = golden.json) and loads
 * the golden expectations; shared by the LM/generation golden tests. */
#ifndef PPX_GOLDEN_MODEL_H
#define PPX_GOLDEN_MODEL_H

#include <glib/gstdio.h>
#include <math.h>
#include <json-glib/json-glib.h>
#include <unistd.h>

#include "audio-io.h"
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
