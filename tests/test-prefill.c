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

/* ---- the op: T rows of one session against T one-row calls ---- */

static void
check_attention_rows (PpxBackend *be, PpxKvFormat fmt, int H, int Dh, int cap, int p0, int T)
{
  g_autoptr (GError) err = NULL;
  const gsize HD = (gsize) H * Dh, width = 3 * HD;
  const int slots = 2, slot = 1, rows = p0 + T;
  PpxTensor *ka = ppx_kv_cache_new (be, fmt, slots, cap, H, Dh, &err), *va = ppx_kv_cache_new (be, fmt, slots, cap, H, Dh, &err);
  PpxTensor *kb = ppx_kv_cache_new (be, fmt, slots, cap, H, Dh, &err), *vb = ppx_kv_cache_new (be, fmt, slots, cap, H, Dh, &err);
  g_assert_no_error (err);
  GRand *r = g_rand_new_with_seed (1234 + fmt);
  g_autofree float *x = g_new (float, (gsize) rows * width);
  for (gsize i = 0; i < (gsize) rows * width; i++)
    x[i] = (float) g_rand_double_range (r, -2.0, 2.0);
  g_rand_free (r);
  g_autofree int32_t *pos = g_new (int32_t, rows);
  for (int i = 0; i < rows; i++)
    pos[i] = i;
  PpxTensor *qkv = ppx_tensor_new (be, PPX_TENSOR_F32, (gsize) rows * width, &err);
  PpxTensor *p = ppx_tensor_new (be, PPX_TENSOR_I32, rows, &err), *s = ppx_tensor_new (be, PPX_TENSOR_I32, 1, &err);
  PpxTensor *out = ppx_tensor_new (be, PPX_TENSOR_F32, (gsize) rows * HD, &err);
  g_assert_no_error (err);
  ppx_tensor_upload (qkv, 0, x, (gsize) rows * width);
  ppx_tensor_upload (p, 0, pos, rows);
  ppx_tensor_upload (s, 0, &slot, 1);
  g_autofree float *one = g_new (float, (gsize) rows * HD), *chunk = g_new (float, (gsize) T * HD);
  /* cache b: every row alone; cache a: the first p0 rows alone, then one call of T rows */
  for (int i = 0; i < rows; i++) {
    PpxTensor *qi = ppx_tensor_view (qkv, (gsize) i * width, width), *pi = ppx_tensor_view (p, i, 1);
    PpxTensor *oi = ppx_tensor_view (out, (gsize) i * HD, HD);
    ppx_op_attention (be, qi, pi, s, kb, vb, oi, 1, 1, H, Dh, cap, cap);
    if (i < p0)
      ppx_op_attention (be, qi, pi, s, ka, va, oi, 1, 1, H, Dh, cap, cap);
    ppx_tensor_free (qi);
    ppx_tensor_free (pi);
    ppx_tensor_free (oi);
  }
  ppx_tensor_download (out, 0, one, (gsize) rows * HD);
  PpxTensor *qt = ppx_tensor_view (qkv, (gsize) p0 * width, (gsize) T * width), *pt = ppx_tensor_view (p, p0, T);
  PpxTensor *ot = ppx_tensor_view (out, (gsize) p0 * HD, (gsize) T * HD);
  ppx_op_attention (be, qt, pt, s, ka, va, ot, 1, T, H, Dh, cap, cap);
  ppx_tensor_download (ot, 0, chunk, (gsize) T * HD);
  g_assert_cmpmem (chunk, (gsize) T * HD * sizeof (float), one + (gsize) p0 * HD, (gsize) T * HD * sizeof (float));
  PpxTensor *caches[2][2] = {{ka, kb}, {va, vb}};
  for (int c = 0; c < 2; c++) {
    const gsize n = ppx_tensor_bytes (caches[c][0]);
    g_autofree guint8 *a = g_malloc (n), *b = g_malloc (n);
    ppx_tensor_download_raw (caches[c][0], a);
    ppx_tensor_download_raw (caches[c][1], b);
    g_assert_cmpmem (a, n, b, n);
  }
  PpxTensor *all[] = {ka, va, kb, vb, qkv, p, s, out, qt, pt, ot};
  for (int i = G_N_ELEMENTS (all) - 1; i >= 0; i--)
    ppx_tensor_free (all[i]);
}

static void
test_attention_rows (void)
{
  g_autoptr (GError) err = NULL;
  PpxBackend *be = ppx_backend_cpu_new (0, &err);
  g_assert_no_error (err);
  const PpxKvFormat fmts[] = {PPX_KV_F32, PPX_KV_BF16, PPX_KV_FP8};
  for (guint f = 0; f < G_N_ELEMENTS (fmts); f++) {
    check_attention_rows (be, fmts[f], 4, 16, 64, 0, 63 - 1);  /* a new session: rows 0..61 at once */
    check_attention_rows (be, fmts[f], 4, 16, 64, 17, 29);     /* after 17 single rows */
    check_attention_rows (be, fmts[f], 3, 128, 300, 100, 64);  /* the 7B's head size */
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
