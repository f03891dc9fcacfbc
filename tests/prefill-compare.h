/* Prompt prefill against the step-by-step prompts (test-prefill on the CPU, cuda-test-prefill on the GPU):
 * the golden model, or the same weights with a longer context (so that every prompt frame goes into a chunk),
 * sessions whose prompts ran as chunks and step by step, their temporal KV caches compared value by value and
 * byte by byte, their LMGen states, and their conversations. */
#ifndef PPX_TEST_PREFILL_COMPARE_H
#define PPX_TEST_PREFILL_COMPARE_H

#include "engine-internal.h"
#include "golden-model.h"
#include "kv-format.h"

/* A model directory with the golden weights and config, its LM context set to `context` (> 0). */
static inline char *
prefill_model_dir (const GoldenModel *g, int context)
{
  g_autoptr (GError) err = NULL;
  char *dir = g_dir_make_tmp ("ppx-prefill-XXXXXX", &err);
  g_assert_no_error (err);
  const char *links[] = {"model.safetensors", "tokenizer-e351c8d8-checkpoint125.safetensors"};
  for (guint i = 0; i < G_N_ELEMENTS (links); i++) {
    g_autofree char *from = g_build_filename (g->dir, links[i], NULL);
    g_autofree char *target = g_file_read_link (from, &err);
    g_assert_no_error (err);
    g_autofree char *to = g_build_filename (dir, links[i], NULL);
    g_assert_cmpint (symlink (target, to), ==, 0);
  }
  g_autofree char *src = g_build_filename (g->dir, "config.json", NULL);
  g_autoptr (JsonParser) p = json_parser_new ();
  g_assert_true (json_parser_load_from_file (p, src, &err));
  JsonObject *lm = json_object_get_object_member (json_node_get_object (json_parser_get_root (p)), "lm");
  json_object_set_int_member (lm, "context", context);
  g_autoptr (JsonGenerator) gen = json_generator_new ();
  json_generator_set_root (gen, json_parser_get_root (p));
  g_autofree char *dst = g_build_filename (dir, "config.json", NULL);
  g_assert_true (json_generator_to_file (gen, dst, &err));
  return dir;
}

static inline void
prefill_model_dir_remove (char *dir)
{
  const char *names[] = {"model.safetensors", "tokenizer-e351c8d8-checkpoint125.safetensors", "config.json"};
  for (guint i = 0; i < G_N_ELEMENTS (names); i++) {
    g_autofree char *p = g_build_filename (dir, names[i], NULL);
    g_unlink (p);
  }
  g_rmdir (dir);
  g_free (dir);
}

static inline PpxModel *
prefill_model_load (const char *dir, PpxBackendKind backend)
{
  g_autoptr (GError) err = NULL;
  PpxModelParams mp;
  ppx_model_params_init (&mp);
  mp.model_dir = dir;
  mp.backend = backend;
  PpxModel *m = ppx_model_load (&mp, &err);
  g_assert_no_error (err);
  return m;
}

/* A session with parameters p on an engine of its own (one slot, `kv` caches), its prompts in chunks of at most
 * `chunk` frames (1: step by step). The engine's prompt clock goes to *clock when it is not NULL. */
static inline PpxSession *
prefill_session (PpxModel *m, PpxKvFormat kv, int chunk, const PpxSessionParams *p, PpxPromptClock *clock)
{
  g_autoptr (GError) err = NULL;
  PpxEngineParams ep;
  ppx_engine_params_init (&ep);
  ep.max_sessions = 1;
  ep.kv_format = kv;
  ep.prompt_chunk = chunk;
  PpxEngine *e = ppx_engine_new (m, &ep, &err);
  g_assert_no_error (err);
  PpxSession *s = ppx_engine_session_new (e, p, &err);
  g_assert_no_error (err);
  if (clock)
    ppx_engine_prompt_clock (e, clock);
  ppx_engine_unref (e);
  return s;
}

typedef struct {
  gsize values, differ;   /* cache values compared (K and V of every layer), values not bit-identical */
  gsize bytes, bytes_differ; /* the storage as stored (values, and fp8 scales), bytes that differ */
  double max_abs, max_ref; /* max |a - b| of the decoded values; max |b| */
} KvDiff;

/* A cache's storage decoded to f32, [cap, dim] of slot 0 (the engines above have one slot). */
static inline float *
prefill_decode (PpxTensor *t, int cap, int H, int Dh, guint8 *raw)
{
  const gsize n = ppx_tensor_numel (t), HD = (gsize) H * Dh;
  g_assert_cmpuint (n, ==, (gsize) cap * HD);
  float *v = g_new (float, n);
  ppx_tensor_download_raw (t, raw);
  switch (ppx_tensor_type (t)) {
    case PPX_TENSOR_BF16:
      for (gsize i = 0; i < n; i++)
        v[i] = ppx_kv_from_bf16 (((const uint16_t *) raw)[i]);
      break;
    case PPX_TENSOR_FP8: {
      const float *scales = (const float *) (raw + ((n + 15) & ~(gsize) 15)); /* [slot, H, cap] */
      for (gsize i = 0; i < n; i++) {
        const gsize pos = i / HD, h = (i % HD) / Dh;
        v[i] = ppx_kv_from_e4m3 (raw[i]) * scales[h * cap + pos];
      }
      break;
    }
    default:
      memcpy (v, raw, n * sizeof (float));
      break;
  }
  return v;
}

/* The temporal KV caches of two sessions on one-slot engines of the same model and format. */
static inline KvDiff
prefill_kv_diff (PpxSession *a, PpxSession *b)
{
  const PpxLmConfig *c = &a->model->cfg.lm;
  const int H = c->num_heads, Dh = c->dim / H;
  KvDiff d = {0};
  for (int l = 0; l < c->num_layers; l++) {
    for (int value = 0; value < 2; value++) {
      PpxTensor *ta = ppx_lm_batch_cache (a->engine->lm, l, value), *tb = ppx_lm_batch_cache (b->engine->lm, l, value);
      const gsize nb = ppx_tensor_bytes (ta);
      g_assert_cmpuint (nb, ==, ppx_tensor_bytes (tb));
      g_autofree guint8 *ra = g_malloc (nb), *rb = g_malloc (nb);
      g_autofree float *va = prefill_decode (ta, c->context, H, Dh, ra), *vb = prefill_decode (tb, c->context, H, Dh, rb);
      for (gsize i = 0; i < nb; i++)
        d.bytes_differ += ra[i] != rb[i];
      d.bytes += nb;
      const gsize n = ppx_tensor_numel (ta);
      for (gsize i = 0; i < n; i++) {
        d.differ += memcmp (&va[i], &vb[i], sizeof (float)) != 0;
        d.max_abs = MAX (d.max_abs, fabs ((double) va[i] - vb[i]));
        d.max_ref = MAX (d.max_ref, fabs ((double) vb[i]));
      }
      d.values += n;
    }
  }
  return d;
}

static inline void
prefill_kv_print (const char *what, const KvDiff *d)
{
  g_printerr ("  %s: %" G_GSIZE_FORMAT " cache values, %" G_GSIZE_FORMAT " not bit-identical, max |diff| %.3g "
              "(max |value| %.3g); %" G_GSIZE_FORMAT " of %" G_GSIZE_FORMAT " stored bytes differ\n",
              what, d->values, d->differ, d->max_abs, d->max_ref, d->bytes_differ, d->bytes);
}

/* The LMGen states after the prompts are the same (offset, token cache, provided flags). */
static inline void
prefill_assert_same_lmgen (PpxSession *a, PpxSession *b)
{
  int32_t sa[PPX_LMGEN_STATE], sb[PPX_LMGEN_STATE];
  ppx_lmgen_pack (ppx_session_lmgen (a), sa);
  ppx_lmgen_pack (ppx_session_lmgen (b), sb);
  g_assert_cmpmem (sa, sizeof sa, sb, sizeof sb);
}

/* Steps both sessions `frames` frames of the golden user audio in lockstep: *token_mismatches and the PCM max
 * |diff| between them. */
static inline void
prefill_run_both (const GoldenModel *g, PpxSession *a, PpxSession *b, int frames, int *token_mismatches,
                  double *pcm_diff)
{
  g_autoptr (GError) err = NULL;
  const PpxStTensor *user = ppx_st_find (g->golden, "user_pcm");
  const int fs = ppx_model_frame_size (a->model);
  g_autofree float *in = g_new0 (float, fs), *oa = g_new (float, fs), *ob = g_new (float, fs);
  *token_mismatches = 0;
  *pcm_diff = 0;
  for (int t = 0; t < frames; t++) {
    const gint64 at = (gint64) t * fs, n = CLAMP (user->shape[0] - at, 0, fs);
    memset (in, 0, fs * sizeof (float));
    if (n > 0)
      memcpy (in, (const float *) user->data + at, n * sizeof (float));
    PpxFrameResult ra, rb;
    g_assert_true (ppx_session_step (a, in, oa, &ra, &err));
    g_assert_true (ppx_session_step (b, in, ob, &rb, &err));
    for (int k = 0; k < 17; k++)
      *token_mismatches += ra.tokens[k] != rb.tokens[k];
    for (int i = 0; i < fs; i++)
      *pcm_diff = MAX (*pcm_diff, fabs ((double) oa[i] - ob[i]));
  }
}

#endif
