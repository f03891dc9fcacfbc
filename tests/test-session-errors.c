/* Bad input to the library: each case gives a clear GError naming the file, or a documented safe
 * behaviour, and never crashes. */
#include <math.h>

#include "golden-model.h"
#include "personaplex-internal.h"

static GoldenModel G;

static PpxModel *
load (const char *dir, GError **err)
{
  PpxModelParams mp;
  ppx_model_params_init (&mp);
  mp.model_dir = dir;
  return ppx_model_load (&mp, err);
}

static void
test_missing_dir (void)
{
  g_autoptr (GError) err = NULL;
  g_assert_null (load ("/nonexistent/ppx-model", &err));
  g_assert_error (err, PPX_ERROR, PPX_ERROR_MISSING);
  g_assert_nonnull (strstr (err->message, "/nonexistent/ppx-model"));
}

/* Copies the golden LM into `dir` with one tensor's shape altered (same bytes, other shape). */
static void
write_reshaped_lm (const char *dir, const char *victim)
{
  g_autoptr (GError) err = NULL;
  g_autofree char *src = g_build_filename (G.dir, "model.safetensors", NULL);
  g_autofree char *dst = g_build_filename (dir, "model.safetensors", NULL);
  PpxSafetensors *st = ppx_st_open (src, &err);
  g_assert_no_error (err);
  PpxStWriter *w = ppx_st_writer_new ();
  for (guint i = 0; i < ppx_st_n_tensors (st); i++) {
    const PpxStTensor *t = ppx_st_tensor_at (st, i);
    int64_t shape[8];
    memcpy (shape, t->shape, sizeof shape);
    if (strcmp (t->name, victim) == 0) { /* [a, b] -> [b, a] */
      int64_t tmp = shape[0];
      shape[0] = shape[1];
      shape[1] = tmp;
    }
    ppx_st_writer_declare (w, t->name, t->dtype, t->ndim, shape);
  }
  g_assert_true (ppx_st_writer_begin (w, dst, &err));
  for (guint i = 0; i < ppx_st_n_tensors (st); i++)
    g_assert_true (ppx_st_writer_write (w, ppx_st_tensor_at (st, i)->data, ppx_st_tensor_at (st, i)->nbytes, &err));
  g_assert_true (ppx_st_writer_finish (w, &err));
  ppx_st_writer_free (w);
  ppx_st_close (st);
}

static void
link_into (const char *dir, const char *name)
{
  g_autofree char *from = g_build_filename (G.dir, name, NULL);
  g_autofree char *real = g_file_read_link (from, NULL);
  g_autofree char *to = g_build_filename (dir, name, NULL);
  g_assert_cmpint (symlink (real ? real : from, to), ==, 0);
}

static void
test_wrong_shape (void)
{
  g_autofree char *dir = g_dir_make_tmp ("ppx-shape-XXXXXX", NULL);
  write_reshaped_lm (dir, "transformer.layers.0.self_attn.out_proj.weight");
  link_into (dir, "config.json");
  link_into (dir, "tokenizer-e351c8d8-checkpoint125.safetensors");
  g_autoptr (GError) err = NULL;
  /* out_proj is square in the tiny model; alter a rectangular one instead if so */
  PpxModel *m = load (dir, &err);
  if (m) {
    ppx_model_unref (m);
    g_clear_error (&err);
    write_reshaped_lm (dir, "transformer.layers.0.gating.linear_out.weight");
    m = load (dir, &err);
  }
  g_assert_null (m);
  g_assert_error (err, PPX_ERROR, PPX_ERROR_SHAPE);
  g_assert_nonnull (strstr (err->message, "model.safetensors"));
  g_assert_nonnull (strstr (err->message, "expected"));
  g_printerr ("%s\n", err->message);
  const char *names[] = {"model.safetensors", "config.json", "tokenizer-e351c8d8-checkpoint125.safetensors"};
  for (guint i = 0; i < G_N_ELEMENTS (names); i++) {
    g_autofree char *p = g_build_filename (dir, names[i], NULL);
    g_unlink (p);
  }
  g_rmdir (dir);
}

static PpxSession *
session (PpxModel *m, const char *voice, const int *tokens, int n, const char *text, GError **err)
{
  PpxSessionParams p;
  ppx_session_params_init (&p);
  p.voice_prompt = voice;
  p.voice_normalize = FALSE;
  p.text_prompt_tokens = tokens;
  p.n_text_prompt_tokens = n;
  p.text_prompt = text;
  p.greedy = TRUE;
  return ppx_session_new (m, &p, err);
}

static void
test_session_inputs (void)
{
  g_autoptr (GError) err = NULL;
  PpxModel *m = load (G.dir, &err);
  g_assert_no_error (err);

  /* a truncated .pt */
  g_autofree char *bytes = NULL;
  gsize len;
  g_assert_true (g_file_get_contents (G.voice_pt, &bytes, &len, NULL));
  g_autofree char *bad = g_build_filename (G.dir, "bad.pt", NULL);
  g_assert_true (g_file_set_contents (bad, bytes, len / 2, NULL));
  g_assert_null (session (m, bad, NULL, 0, NULL, &err));
  g_assert_nonnull (err);
  g_assert_nonnull (strstr (err->message, "bad.pt"));
  g_clear_error (&err);
  g_unlink (bad);

  /* a voice file that is not audio */
  g_autofree char *txt = g_build_filename (G.dir, "voice.txt", NULL);
  g_assert_true (g_file_set_contents (txt, "not audio at all", -1, NULL));
  g_assert_null (session (m, txt, NULL, 0, NULL, &err));
  g_assert_nonnull (err);
  g_assert_nonnull (strstr (err->message, "voice.txt"));
  g_clear_error (&err);
  g_unlink (txt);

  /* a missing voice file */
  g_assert_null (session (m, "/nonexistent/voice.wav", NULL, 0, NULL, &err));
  g_assert_nonnull (strstr (err->message, "/nonexistent/voice.wav"));
  g_clear_error (&err);

  /* out-of-range text prompt tokens */
  int toks[2] = {1, 1 << 30};
  g_assert_null (session (m, NULL, toks, 2, NULL, &err));
  g_assert_error (err, PPX_ERROR, PPX_ERROR_INVALID);
  g_clear_error (&err);

  /* a text prompt without a tokenizer file: clear error */
  g_assert_null (session (m, NULL, NULL, 0, "hello", &err));
  g_assert_error (err, PPX_ERROR, PPX_ERROR_MISSING);
  g_clear_error (&err);

  /* an empty (blank) text prompt: documented safe behaviour, the text phase is skipped */
  PpxSession *s = session (m, NULL, NULL, 0, "   ", &err);
  g_assert_no_error (err);
  g_assert_cmpint (ppx_session_lmgen (s)->offset, ==, 12); /* 6 + 6 silence frames */

  /* NaN / Inf samples become silence: finite output, same as a silent frame */
  const int fs = ppx_model_frame_size (m);
  g_autofree float *in = g_new0 (float, fs), *out = g_new (float, fs), *out2 = g_new (float, fs);
  for (int i = 0; i < fs; i += 3)
    in[i] = i % 2 ? NAN : INFINITY;
  g_assert_true (ppx_session_step (s, in, out, NULL, &err));
  for (int i = 0; i < fs; i++)
    g_assert_true (isfinite (out[i]));
  g_assert_true (ppx_session_reset (s, &err));
  memset (in, 0, fs * sizeof (float));
  g_assert_true (ppx_session_step (s, in, out2, NULL, &err));
  g_assert_cmpmem (out, fs * sizeof (float), out2, fs * sizeof (float));
  ppx_session_free (s);
  ppx_model_unref (m);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  golden_model_setup (&G);
  g_test_add_func ("/session/missing-dir", test_missing_dir);
  g_test_add_func ("/session/wrong-shape", test_wrong_shape);
  g_test_add_func ("/session/bad-inputs", test_session_inputs);
  int rc = g_test_run ();
  golden_model_teardown (&G);
  return rc;
}
