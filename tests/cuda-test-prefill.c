/* Prompt prefill on the GPU (docs/engine.md, "Prompt prefill"; the CPU side is test-prefill.c):
 *  - the attention kernel's T rows of one session against T one-row calls on the GPU, over f32, bf16 and fp8
 *    caches at the 7B's head shape (32 x 128, cap 3000) and T = 64: the caches hold the same bytes, the outputs
 *    agree to TOL (reported: how many are bit-identical);
 *  - the golden model on the GPU, and its weights at context 160 (every prompt frame in a chunk of up to 64):
 *    the KV caches after chunked prompts against the step-by-step ones (tolerances below), the LMGen states
 *    identical, the conversations' greedy tokens identical (and the reference's at context 20, f32);
 *  - the GPU's chunked f32 caches against the CPU's within TOL;
 *  - voice snapshots on the GPU: ppx_kv_cache_copy (values and fp8 scales) byte for byte, and a session whose
 *    voice phase was copied from the engine's snapshot against one that ran it (same tolerances).
 * Cache tolerances (max |diff| over max |value|): f32 TOL; bf16 2^-8 (one rounding step of the stored value);
 * fp8 2^-3 (one e4m3 step; its per-position scale follows the head's amax). */
#include "cuda-test.h"
#include "prefill-compare.h"

static double
kv_tolerance (PpxKvFormat kv)
{
  return kv == PPX_KV_FP8 ? 0.125 : kv == PPX_KV_BF16 ? 1.0 / 256 : TOL;
}

static void
assert_kv_close (const char *what, const KvDiff *d, PpxKvFormat kv)
{
  prefill_kv_print (what, d);
  g_assert_cmpfloat (d->max_abs, <=, kv_tolerance (kv) * MAX (1.0, d->max_ref));
}

static void
check_model (const GoldenModel *G, PpxModel *gm, PpxModel *cm, int n_text, gboolean golden_tokens)
{
  g_autofree int *text = g_new (int, n_text);
  for (int i = 0; i < n_text; i++)
    text[i] = G->text_tokens[i % G->n_text_tokens];
  const PpxKvFormat fmts[] = {PPX_KV_F32, PPX_KV_BF16, PPX_KV_FP8};
  for (guint f = 0; f < G_N_ELEMENTS (fmts); f++) {
    for (int v = 0; v < 2; v++) {
      const char *voice = v ? G->voice_pt : G->voice_wav;
      PpxSessionParams p;
      golden_run_params (G, voice, &p);
      p.kv_format = fmts[f];
      p.text_prompt_tokens = text;
      p.n_text_prompt_tokens = n_text;
      PpxPromptClock clock;
      PpxSession *step = prefill_session (gm, fmts[f], 1, &p, NULL), *pre = prefill_session (gm, fmts[f], 0, &p, &clock);
      prefill_assert_same_lmgen (pre, step);
      KvDiff d = prefill_kv_diff (pre, step);
      g_autofree char *what = g_strdup_printf ("GPU context %d, %s, %s voice, %" G_GUINT64_FORMAT " chunks (largest %d): "
                                               "chunked vs step by step", gm->cfg.lm.context, ppx_kv_format_name (fmts[f]),
                                               v ? ".pt" : "audio", clock.chunks, clock.sizes[clock.n_sizes - 1]);
      assert_kv_close (what, &d, fmts[f]);
      {
        g_autoptr (GError) err = NULL;
        PpxEngineParams ep;
        ppx_engine_params_init (&ep);
        ep.max_sessions = 2;
        ep.kv_format = fmts[f];
        PpxEngine *e = ppx_engine_new (gm, &ep, &err);
        g_assert_no_error (err);
        PpxSession *keep = ppx_engine_session_new (e, &p, &err), *copied = ppx_engine_session_new (e, &p, &err);
        g_assert_no_error (err);
        PpxPromptClock vc;
        ppx_engine_prompt_clock (e, &vc);
        g_assert_cmpuint (vc.voice_restores, ==, vc.voice_stores); /* kept once and copied once, or neither */
        prefill_assert_same_lmgen (copied, pre);
        KvDiff x = prefill_kv_diff (copied, pre);
        g_autofree char *how = g_strdup_printf ("  voice phase copied from the snapshot (%" G_GUINT64_FORMAT " kept) vs run",
                                                vc.voice_stores);
        assert_kv_close (how, &x, fmts[f]);
        ppx_session_free (keep);
        ppx_session_free (copied);
        ppx_engine_unref (e);
      }
      if (fmts[f] == PPX_KV_F32) {
        PpxSession *cpu_pre = prefill_session (cm, fmts[f], 0, &p, NULL);
        KvDiff x = prefill_kv_diff (pre, cpu_pre);
        assert_kv_close ("  GPU chunked vs CPU chunked", &x, PPX_KV_F32);
        ppx_session_free (cpu_pre);
      }
      if (golden_tokens && fmts[f] == PPX_KV_F32) {
        GoldenRun r = golden_run_conversation (G, pre, ppx_model_frame_size (gm), v ? "lm_replay_out_tokens" : "lm_run_out_tokens",
                                               v ? "lm_replay_pcm" : "lm_run_pcm", FALSE, NULL);
        g_printerr ("  golden conversation after chunked prompts on the GPU: %d token mismatches, pcm max abs err %.3g\n",
                    r.token_mismatches, r.pcm_err);
        g_assert_cmpint (r.token_mismatches, ==, 0);
        g_assert_cmpfloat (r.pcm_err, <, 1e-4);
      } else {
        int mism;
        double pcm;
        prefill_run_both (G, pre, step, 60, &mism, &pcm);
        g_printerr ("  conversation after chunked vs step-by-step prompts: %d token mismatches, pcm max |diff| %.3g\n",
                    mism, pcm);
        g_assert_cmpint (mism, ==, 0);
      }
      ppx_session_free (step);
      ppx_session_free (pre);
    }
  }
}

void
test_prefill (void)
{
  for (guint f = 0; f < N_KV_FORMATS; f++) {
    const int shapes[][5] = {{32, 128, 3000, 0, 64}, {32, 128, 3000, 300, 64}, {32, 128, 3000, 1000, 17}};
    for (guint k = 0; k < G_N_ELEMENTS (shapes); k++) {
      const int *x = shapes[k];
      PrefillRowsDiff d = prefill_attention_rows (gpu, kv_formats[f], x[0], x[1], x[2], x[3], x[4]);
      g_printerr ("  attention %s, %d rows at %d..%d: %" G_GSIZE_FORMAT " of %" G_GSIZE_FORMAT " outputs not bit-identical "
                  "to one-row calls, max |diff| %.3g; caches %s\n",
                  ppx_kv_format_name (kv_formats[f]), x[4], x[3], x[3] + x[4] - 1, d.differ, d.values, d.max_abs,
                  d.caches_equal ? "identical" : "DIFFER");
      g_assert_true (d.caches_equal);
      g_assert_cmpfloat (d.max_abs, <=, TOL * MAX (1.0, d.max_ref));
    }
  }
  for (guint f = 0; f < N_KV_FORMATS; f++)
    g_assert_true (prefill_kv_copy_check (gpu, kv_formats[f], 32, 128, 3000, 40, 125));
  if (!ppx_test_golden_dir ()) {
    g_test_skip ("golden data not found (set PPX_GOLDEN_DIR)");
    return;
  }
  GoldenModel G;
  golden_model_setup (&G);
  PpxModel *gm = golden_model_load (&G, PPX_BACKEND_CUDA), *cm = golden_model_load (&G, PPX_BACKEND_CPU);
  check_model (&G, gm, cm, G.n_text_tokens, TRUE);
  ppx_model_unref (gm);
  ppx_model_unref (cm);
  char *dir = prefill_model_dir (&G, 160);
  gm = prefill_model_load (dir, PPX_BACKEND_CUDA);
  cm = prefill_model_load (dir, PPX_BACKEND_CPU);
  check_model (&G, gm, cm, 100, FALSE);
  ppx_model_unref (gm);
  ppx_model_unref (cm);
  prefill_model_dir_remove (dir);
  golden_model_teardown (&G);
}
