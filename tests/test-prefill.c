/* Prompt prefill on the CPU (docs/engine.md, "Prompt prefill"):
 *  - the attention op with T rows of one session equals T one-row calls, bit for bit, over f32, bf16 and fp8
 *    caches (row t sees the new keys of rows <= t only; the stores of all T rows are there for the later rows);
 *  - the golden model (context 20: the prompts wrap the ring, so the frames past position 18 go one a chunk):
 *    after the prompts, the KV caches and LMGen state of chunked prompts equal the step-by-step ones bit for
 *    bit (f32, bf16, fp8; audio and .pt voices), and the conversation's greedy tokens are the reference's;
 *  - the same weights with a context of 160, so that every prompt frame goes into a chunk: chunks of 5, 16 and
 *    64 frames give the step-by-step caches and conversations bit for bit, in the expected number of chunks;
 *  - voice snapshots: ppx_kv_cache_copy (values and fp8 scales, between capacities and slots; bad ranges
 *    refused); sessions whose voice phase was copied from the engine's snapshot equal their step-by-step twins
 *    bit for bit (f32, bf16, fp8; audio and .pt voices; another text after the same voice), a voice phase that
 *    wrapped the ring is not kept, and the least recently used voice goes first. */
#include "prefill-compare.h"

static GoldenModel G;

/* ---- the ops ---- */

static void
test_kv_cache_copy (void)
{
  g_autoptr (GError) err = NULL;
  PpxBackend *be = ppx_backend_cpu_new (0, &err);
  g_assert_no_error (err);
  const PpxKvFormat fmts[] = {PPX_KV_F32, PPX_KV_BF16, PPX_KV_FP8};
  for (guint f = 0; f < G_N_ELEMENTS (fmts); f++) {
    g_assert_true (prefill_kv_copy_check (be, fmts[f], 4, 16, 20, 0, 19));
    g_assert_true (prefill_kv_copy_check (be, fmts[f], 3, 128, 300, 37, 125));
  }
  /* a row that is not a whole number of words */
  PpxTensor *a = ppx_kv_cache_new (be, ppx_kv_storage (PPX_KV_FP8), 2, 8, 1, 6, &err), *b = ppx_kv_cache_new (be, ppx_kv_storage (PPX_KV_FP8), 1, 4, 1, 6, &err);
  g_assert_no_error (err);
  g_assert_false (ppx_kv_cache_copy (b, 0, 4, 0, a, 1, 8, 0, 4, 1, 6));
  ppx_tensor_free (a);
  ppx_tensor_free (b);
  ppx_backend_free (be);
}

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

/* ---- voice snapshots: the voice phase kept once per engine, copied into later sessions' slots ---- */

static PpxEngine *
snapshot_engine (PpxModel *m, PpxKvFormat kv, int n_slots, int snapshots)
{
  g_autoptr (GError) err = NULL;
  PpxEngineParams ep;
  ppx_engine_params_init (&ep);
  ep.max_sessions = n_slots;
  ep.kv_format = kv;
  ep.voice_snapshots = snapshots;
  PpxEngine *e = ppx_engine_new (m, &ep, &err);
  g_assert_no_error (err);
  return e;
}

/* Sessions a (voice, whole text), b (the voice, another text), c (as a) on one engine: a keeps the voice phase
 * (when it did not wrap the ring: `kept`), b and c copy it; each equals its step-by-step twin bit for bit. */
static void
check_snapshots (PpxModel *m, PpxKvFormat kv, const char *voice, gboolean kept)
{
  g_autoptr (GError) err = NULL;
  const PpxLmConfig *c = &m->cfg.lm;
  PpxEngine *e = snapshot_engine (m, kv, 3, 0);
  PpxSessionParams p, q;
  golden_run_params (&G, voice, &p);
  p.kv_format = kv;
  q = p;
  int text[5] = {G.text_tokens[3], G.text_tokens[1], 7, 99, G.text_tokens[0]};
  q.text_prompt_tokens = text;
  q.n_text_prompt_tokens = 5;
  const PpxSessionParams *params[3] = {&p, &q, &p};
  PpxSession *s[3], *ref[3];
  for (int i = 0; i < 3; i++) {
    s[i] = ppx_engine_session_new (e, params[i], &err);
    g_assert_no_error (err);
    ref[i] = prefill_session (m, kv, 1, params[i], NULL);
  }
  PpxPromptClock clock;
  ppx_engine_prompt_clock (e, &clock);
  int n_voices;
  const guint64 bytes = ppx_engine_voice_snapshot_bytes (e, &n_voices);
  const int n_pos = kept ? (int) (ppx_session_lmgen (ref[0])->offset - 1 - 2 * 6 - G.n_text_tokens) : 0;
  g_printerr ("  voice snapshot, %s, %s voice, context %d: %" G_GUINT64_FORMAT " kept, %" G_GUINT64_FORMAT
              " copied in; %d voices, %" G_GUINT64_FORMAT " bytes (%d positions)\n",
              ppx_kv_format_name (kv), g_str_has_suffix (voice, ".pt") ? ".pt" : "audio", c->context,
              clock.voice_stores, clock.voice_restores, n_voices, bytes, n_pos);
  g_assert_cmpuint (clock.voice_stores, ==, kept ? 1 : 0);
  g_assert_cmpuint (clock.voice_restores, ==, kept ? 2 : 0);
  g_assert_cmpuint (bytes, ==, kept ? 2 * c->num_layers * ppx_kv_cache_bytes (ppx_kv_storage (kv), 1, n_pos, c->num_heads, c->dim / c->num_heads) : 0);
  for (int i = 0; i < 3; i++) {
    prefill_assert_same_lmgen (s[i], ref[i]);
    KvDiff d = prefill_kv_diff (s[i], ref[i]);
    g_assert_cmpuint (d.differ, ==, 0);
    g_assert_cmpuint (d.bytes_differ, ==, 0);
  }
  int mism;
  double pcm;
  prefill_run_both (&G, s[1], ref[1], 30, &mism, &pcm);
  g_assert_cmpint (mism, ==, 0);
  g_assert_cmpfloat (pcm, ==, 0.0);
  for (int i = 0; i < 3; i++) {
    ppx_session_free (s[i]);
    ppx_session_free (ref[i]);
  }
  ppx_engine_unref (e);
}

static void
test_voice_snapshots (void)
{
  PpxModel *m = golden_model_load (&G, PPX_BACKEND_CPU); /* context 20: the voice phases' 19 positions fit */
  char *dir = prefill_model_dir (&G, 16);                 /* context 16: they wrap the ring, none is kept */
  PpxModel *small = prefill_model_load (dir, PPX_BACKEND_CPU);
  const PpxKvFormat fmts[] = {PPX_KV_F32, PPX_KV_BF16, PPX_KV_FP8};
  for (guint f = 0; f < G_N_ELEMENTS (fmts); f++) {
    check_snapshots (m, fmts[f], G.voice_wav, TRUE);
    check_snapshots (m, fmts[f], G.voice_pt, TRUE);
  }
  check_snapshots (small, PPX_KV_FP8, G.voice_wav, FALSE);
  /* one kept at most: the least recently used goes */
  g_autoptr (GError) err = NULL;
  PpxEngine *e = snapshot_engine (m, PPX_KV_BF16, 1, 1);
  const char *voices[] = {G.voice_wav, G.voice_pt, G.voice_wav, G.voice_wav};
  for (guint i = 0; i < G_N_ELEMENTS (voices); i++) {
    PpxSessionParams p;
    golden_run_params (&G, voices[i], &p);
    PpxSession *s = ppx_engine_session_new (e, &p, &err);
    g_assert_no_error (err);
    ppx_session_free (s);
  }
  PpxPromptClock clock;
  ppx_engine_prompt_clock (e, &clock);
  int n_voices;
  ppx_engine_voice_snapshot_bytes (e, &n_voices);
  g_assert_cmpuint (clock.voice_stores, ==, 3);
  g_assert_cmpuint (clock.voice_restores, ==, 1);
  g_assert_cmpint (n_voices, ==, 1);
  ppx_engine_unref (e);
  ppx_model_unref (small);
  ppx_model_unref (m);
  prefill_model_dir_remove (dir);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  golden_model_setup (&G);
  g_test_add_func ("/prefill/attention-rows", test_attention_rows);
  g_test_add_func ("/prefill/kv-cache-copy", test_kv_cache_copy);
  g_test_add_func ("/prefill/golden", test_golden);
  g_test_add_func ("/prefill/long-context", test_long_context);
  g_test_add_func ("/prefill/voice-snapshots", test_voice_snapshots);
  int rc = g_test_run ();
  golden_model_teardown (&G);
  return rc;
}
