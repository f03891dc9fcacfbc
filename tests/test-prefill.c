/* Prompt prefill on the CPU (docs/engine.md, "Prompt prefill"):
 *  - the attention op with T rows of one session equals T one-row calls, bit for bit, over f32, bf16 and fp8
 *    caches (row t sees the new keys of rows <= t only; the stores of all T rows are there for the later rows);
 *  - the golden model (context 20: the prompts wrap the ring, so the frames past position 18 go one a chunk):
 *    after the prompts, the KV caches and LMGen state of chunked prompts equal the step-by-step ones bit for
 *    bit (f32, bf16, fp8; audio and .pt voices), and the conversation's greedy tokens are the reference's;
 *  - the same weights with a context of 160, so that every prompt frame goes into a chunk: chunks of 5, 16 and
 *    64 frames give the step-by-step caches and conversations bit for bit, in the expected number of chunks. */
#include "prefill-compare.h"

static GoldenModel G;

/* ---- the op ---- */

static void
test_attention_rows (void)
{
  g_autoptr (GError) err = NULL;
  PpxBackend *be = ppx_backend_cpu_new (0, &err);
  g_assert_no_error (err);
  const PpxKvFormat fmts[] = {PPX_KV_F32, PPX_KV_BF16, PPX_KV_FP8};
  for (guint f = 0; f < G_N_ELEMENTS (fmts); f++) {
    const int shapes[][5] = {{4, 16, 64, 0, 62}, {4, 16, 64, 17, 29}, {3, 128, 300, 100, 64}}; /* H, Dh, cap, p0, T */
    for (guint k = 0; k < G_N_ELEMENTS (shapes); k++) {
      const int *x = shapes[k];
      PrefillRowsDiff d = prefill_attention_rows (be, fmts[f], x[0], x[1], x[2], x[3], x[4]);
      g_assert_cmpuint (d.differ, ==, 0);
      g_assert_true (d.caches_equal);
    }
  }
  ppx_backend_free (be);
}

/* ---- the golden model ---- */

static void
check_golden (PpxModel *m, PpxKvFormat kv, const char *voice)
{
  PpxSessionParams p;
  golden_run_params (&G, voice, &p);
  p.kv_format = kv;
  PpxPromptClock clock;
  PpxSession *step = prefill_session (m, kv, 1, &p, NULL), *pre = prefill_session (m, kv, 0, &p, &clock);
  g_assert_cmpint (ppx_session_lmgen (pre)->offset, ==, G.prompt_offset);
  prefill_assert_same_lmgen (pre, step);
  KvDiff d = prefill_kv_diff (pre, step);
  g_autofree char *what = g_strdup_printf ("golden %s, %s voice, %" G_GUINT64_FORMAT " chunks (the first of %d frames)",
                                           ppx_kv_format_name (kv), g_str_has_suffix (voice, ".pt") ? ".pt" : "audio",
                                           clock.chunks, 19);
  prefill_kv_print (what, &d);
  g_assert_cmpuint (d.differ, ==, 0);
  g_assert_cmpuint (d.bytes_differ, ==, 0);
  /* positions 0..18 in one chunk (context 20), then one frame a chunk up to the last call at offset - 2 */
  g_assert_cmpuint (clock.chunks, ==, 1 + (G.prompt_offset - 2 - 19 + 1));
  if (kv == PPX_KV_F32) {
    const gboolean pt = g_str_has_suffix (voice, ".pt");
    GoldenRun r = golden_run_conversation (&G, pre, ppx_model_frame_size (m), pt ? "lm_replay_out_tokens" : "lm_run_out_tokens",
                                           pt ? "lm_replay_pcm" : "lm_run_pcm", FALSE, NULL);
    g_printerr ("  golden conversation after chunked prompts: %d frames, %d token mismatches, pcm max abs err %.3g\n",
                r.frames, r.token_mismatches, r.pcm_err);
    g_assert_cmpint (r.token_mismatches, ==, 0);
    g_assert_cmpfloat (r.pcm_err, <, 1e-4);
  } else {
    int mism;
    double pcm;
    prefill_run_both (&G, pre, step, 50, &mism, &pcm);
    g_assert_cmpint (mism, ==, 0);
    g_assert_cmpfloat (pcm, ==, 0.0);
  }
  ppx_session_free (step);
  ppx_session_free (pre);
}

static void
test_golden (void)
{
  PpxModel *m = golden_model_load (&G, PPX_BACKEND_CPU);
  const PpxKvFormat fmts[] = {PPX_KV_F32, PPX_KV_BF16, PPX_KV_FP8};
  for (guint f = 0; f < G_N_ELEMENTS (fmts); f++) {
    check_golden (m, fmts[f], G.voice_wav);
    check_golden (m, fmts[f], G.voice_pt);
  }
  ppx_model_unref (m);
}

/* ---- every prompt frame in a chunk: the golden weights with context 160 ---- */

static void
test_long_context (void)
{
  char *dir = prefill_model_dir (&G, 160);
  PpxModel *m = prefill_model_load (dir, PPX_BACKEND_CPU);
  int text[100];
  for (int i = 0; i < 100; i++)
    text[i] = G.text_tokens[i % G.n_text_tokens];
  const PpxKvFormat fmts[] = {PPX_KV_F32, PPX_KV_BF16, PPX_KV_FP8};
  for (guint f = 0; f < G_N_ELEMENTS (fmts); f++) {
    for (int v = 0; v < 2; v++) {
      PpxSessionParams p;
      golden_run_params (&G, v ? G.voice_pt : G.voice_wav, &p);
      p.kv_format = fmts[f];
      p.text_prompt_tokens = text;
      p.n_text_prompt_tokens = 100;
      PpxSession *step = prefill_session (m, fmts[f], 1, &p, NULL);
      const int calls = (int) ppx_session_lmgen (step)->offset - 1; /* model calls: positions 0 .. calls - 1 */
      const int chunks[] = {5, 16, 64};
      for (guint c = 0; c < G_N_ELEMENTS (chunks); c++) {
        PpxPromptClock clock;
        PpxSession *pre = prefill_session (m, fmts[f], chunks[c], &p, &clock);
        prefill_assert_same_lmgen (pre, step);
        KvDiff d = prefill_kv_diff (pre, step);
        g_autofree char *what = g_strdup_printf ("context 160, %s, %s voice, %d prompt calls in %" G_GUINT64_FORMAT
                                                 " chunks of <= %d", ppx_kv_format_name (fmts[f]), v ? ".pt" : "audio",
                                                 calls, clock.chunks, chunks[c]);
        prefill_kv_print (what, &d);
        g_assert_cmpuint (d.differ, ==, 0);
        g_assert_cmpuint (d.bytes_differ, ==, 0);
        g_assert_cmpuint (clock.chunks, ==, (guint64) (calls + chunks[c] - 1) / chunks[c]); /* nothing ticks */
        if (c == G_N_ELEMENTS (chunks) - 1) {
          int mism;
          double pcm;
          prefill_run_both (&G, pre, step, 60, &mism, &pcm);
          g_assert_cmpint (mism, ==, 0);
          g_assert_cmpfloat (pcm, ==, 0.0);
        }
        ppx_session_free (pre);
      }
      ppx_session_free (step);
    }
  }
  ppx_model_unref (m);
  prefill_model_dir_remove (dir);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  golden_model_setup (&G);
  g_test_add_func ("/prefill/attention-rows", test_attention_rows);
  g_test_add_func ("/prefill/golden", test_golden);
  g_test_add_func ("/prefill/long-context", test_long_context);
  int rc = g_test_run ();
  golden_model_teardown (&G);
  return rc;
}
