/* The model's voice cache (model/engine/session.c): each voice file is read (an audio one also encoded) once
 * per model; later sessions naming it share the prompt, even after the file is removed or replaced, and
 * still give the reference's conversation (golden tiny model: tokens exact). */
#include "golden-model.h"
#include "model-internal.h"

static GoldenModel G;

static guint
voice_reads (PpxModel *m)
{
  g_mutex_lock (&m->voice_lock);
  guint n = m->voice_reads;
  g_mutex_unlock (&m->voice_lock);
  return n;
}

/* Runs the golden conversation on a session with `voice`; the tokens must be the reference's. */
static void
run_golden (PpxModel *m, const char *voice, const char *tokens, const char *pcm)
{
  PpxSessionParams p;
  golden_run_params (&G, voice, &p);
  g_autoptr (GError) err = NULL;
  PpxSession *s = ppx_session_new (m, &p, &err);
  g_assert_no_error (err);
  GoldenRun r = golden_run_conversation (&G, s, ppx_model_frame_size (m), tokens, pcm, FALSE, NULL);
  g_assert_cmpint (r.token_mismatches, ==, 0);
  ppx_session_free (s);
}

static char *
copy_to (const char *from, const char *dir, const char *name)
{
  g_autofree char *data = NULL;
  gsize len;
  g_autoptr (GError) err = NULL;
  g_assert_true (g_file_get_contents (from, &data, &len, &err));
  char *to = g_build_filename (dir, name, NULL);
  g_assert_true (g_file_set_contents (to, data, (gssize) len, &err));
  return to;
}

/* A .pt voice and an audio voice: read once each; the second session with each works with the file gone, a
 * third with the path now holding garbage still gets the cached prompt. A voice given by another path is read
 * again (the key is the resolved path), and a missing file that was never read is still an error. */
static void
test_read_once (void)
{
  PpxModel *m = golden_model_load (&G, PPX_BACKEND_CPU);
  g_autoptr (GError) err = NULL;
  g_autofree char *dir = g_dir_make_tmp ("ppx-voice-cache-XXXXXX", &err);
  g_assert_no_error (err);
  g_autofree char *pt = copy_to (G.voice_pt, dir, "voice.pt");
  g_autofree char *wav = copy_to (G.voice_wav, dir, "voice.wav");

  run_golden (m, pt, "lm_replay_out_tokens", "lm_replay_pcm");
  g_assert_cmpuint (voice_reads (m), ==, 1);
  run_golden (m, wav, "lm_run_out_tokens", "lm_run_pcm");
  g_assert_cmpuint (voice_reads (m), ==, 2);

  g_assert_cmpint (g_unlink (pt), ==, 0);
  g_assert_cmpint (g_unlink (wav), ==, 0);
  run_golden (m, pt, "lm_replay_out_tokens", "lm_replay_pcm");
  run_golden (m, wav, "lm_run_out_tokens", "lm_run_pcm");
  g_assert_true (g_file_set_contents (pt, "not a voice", -1, &err));
  g_assert_true (g_file_set_contents (wav, "not a voice", -1, &err));
  run_golden (m, pt, "lm_replay_out_tokens", "lm_replay_pcm");
  run_golden (m, wav, "lm_run_out_tokens", "lm_run_pcm");
  g_assert_cmpuint (voice_reads (m), ==, 2);

  /* the original .pt under its own path: a new entry, read once */
  run_golden (m, G.voice_pt, "lm_replay_out_tokens", "lm_replay_pcm");
  g_assert_cmpuint (voice_reads (m), ==, 3);

  g_autofree char *missing = g_build_filename (dir, "missing.pt", NULL);
  PpxSessionParams p;
  golden_run_params (&G, missing, &p);
  PpxSession *s = ppx_session_new (m, &p, &err);
  g_assert_null (s);
  g_assert_error (err, PPX_ERROR, PPX_ERROR_MISSING);
  g_assert_cmpuint (voice_reads (m), ==, 3);

  g_unlink (pt);
  g_unlink (wav);
  g_rmdir (dir);
  ppx_model_unref (m);
}

/* Sessions created on several threads at once with the same voice share one prompt and all succeed. */
static gpointer
make_session (gpointer model)
{
  PpxSessionParams p;
  golden_run_params (&G, G.voice_pt, &p);
  g_autoptr (GError) err = NULL;
  PpxSession *s = ppx_session_new (model, &p, &err);
  g_assert_no_error (err);
  return s;
}

static void
test_threads (void)
{
  PpxModel *m = golden_model_load (&G, PPX_BACKEND_CPU);
  GThread *threads[4];
  for (guint i = 0; i < G_N_ELEMENTS (threads); i++)
    threads[i] = g_thread_new ("session", make_session, m);
  for (guint i = 0; i < G_N_ELEMENTS (threads); i++)
    ppx_session_free (g_thread_join (threads[i]));
  g_assert_cmpuint (voice_reads (m), ==, 1);
  ppx_model_unref (m);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  golden_model_setup (&G);
  g_test_add_func ("/voice-cache/read-once", test_read_once);
  g_test_add_func ("/voice-cache/threads", test_threads);
  int rc = g_test_run ();
  golden_model_teardown (&G);
  return rc;
}
