/* Prompt prefill against the step-by-step prompts (test-prefill on the CPU, cuda-test-prefill on the GPU):
 * the golden model, or the same weights with a longer context (so that every prompt frame goes into a chunk),
 * sessions whose prompts ran as chunks and step by step, their temporal KV caches compared value by value and
 * byte by byte, their LMGen states, and their conversations. */
#ifndef PPX_TEST_PREFILL_COMPARE_H
#define PPX_TEST_PREFILL_COMPARE_H

#include "engine-internal.h"
#include "golden-model.h"
#include "kv-format.h"

/* ---- the attention op: T rows of one session against T one-row calls ---- */

typedef struct {
  gsize values, differ;  /* output values of the T rows, not bit-identical to the one-row calls' */
  double max_abs, max_ref; /* max |diff|, max |one-row output| */
  gboolean caches_equal; /* the K and V caches hold the same bytes afterwards */
} PrefillRowsDiff;

/* On a slot of its own (slot 1 of 2): rows 0..p0-1 one at a time, then rows p0..p0+T-1 as one call of T rows,
 * against all rows one at a time on another pair of caches; random q, k, v in [-2, 2]. */
static inline PrefillRowsDiff
prefill_attention_rows (PpxBackend *be, PpxKvFormat fmt, int H, int Dh, int cap, int p0, int T)
{
  PrefillRowsDiff d = {.values = (gsize) T * H * Dh, .caches_equal = TRUE};
  g_autoptr (GError) err = NULL;
  const gsize HD = (gsize) H * Dh, width = 3 * HD;
  const int slots = 2, slot = 1, rows = p0 + T;
  PpxTensor *ka = ppx_kv_cache_new (be, ppx_kv_storage (fmt), slots, cap, H, Dh, &err), *va = ppx_kv_cache_new (be, ppx_kv_storage (fmt), slots, cap, H, Dh, &err);
  PpxTensor *kb = ppx_kv_cache_new (be, ppx_kv_storage (fmt), slots, cap, H, Dh, &err), *vb = ppx_kv_cache_new (be, ppx_kv_storage (fmt), slots, cap, H, Dh, &err);
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
  for (gsize i = 0; i < (gsize) T * HD; i++) {
    const float a = chunk[i], b = one[(gsize) p0 * HD + i];
    d.differ += memcmp (&a, &b, sizeof a) != 0;
    d.max_abs = MAX (d.max_abs, fabs ((double) a - b));
    d.max_ref = MAX (d.max_ref, fabs ((double) b));
  }
  PpxTensor *caches[2][2] = {{ka, kb}, {va, vb}};
  for (int c = 0; c < 2; c++) {
    const gsize n = ppx_tensor_bytes (caches[c][0]);
    g_autofree guint8 *a = g_malloc (n), *b = g_malloc (n);
    ppx_tensor_download_raw (caches[c][0], a);
    ppx_tensor_download_raw (caches[c][1], b);
    d.caches_equal &= memcmp (a, b, n) == 0;
  }
  PpxTensor *all[] = {ka, va, kb, vb, qkv, p, s, out, qt, pt, ot};
  for (int i = G_N_ELEMENTS (all) - 1; i >= 0; i--)
    ppx_tensor_free (all[i]);
  return d;
}

/* ---- ppx_kv_cache_copy ---- */

/* Random bytes in two caches (slots x cap of H x Dh, and 1 x n of the same), ppx_kv_cache_copy of n positions
 * from slot 1 at position p of the first to the second at 0, then back to slot 2 at position p: what the
 * caches hold afterwards against the same copies on the host. Also the ranges it must refuse. TRUE when all
 * agree. */
static inline gboolean
prefill_kv_copy_check (PpxBackend *be, PpxKvFormat fmt, int H, int Dh, int cap, int p, int n)
{
  g_autoptr (GError) err = NULL;
  const int slots = 3;
  const gsize HD = (gsize) H * Dh;
  PpxTensor *big = ppx_kv_cache_new (be, ppx_kv_storage (fmt), slots, cap, H, Dh, &err), *snap = ppx_kv_cache_new (be, ppx_kv_storage (fmt), 1, n, H, Dh, &err);
  g_assert_no_error (err);
  const gsize nb = ppx_tensor_bytes (big), ns = ppx_tensor_bytes (snap);
  g_autofree guint8 *hb = g_malloc (nb), *hs = g_malloc (ns), *gb = g_malloc (nb), *gs = g_malloc (ns);
  GRand *r = g_rand_new_with_seed (77 + fmt);
  for (gsize i = 0; i < nb; i++)
    hb[i] = (guint8) g_rand_int (r);
  for (gsize i = 0; i < ns; i++)
    hs[i] = (guint8) g_rand_int (r);
  g_rand_free (r);
  ppx_tensor_upload_raw (big, hb);
  ppx_tensor_upload_raw (snap, hs);
  gboolean ok = ppx_kv_cache_copy (snap, 0, n, 0, big, 1, cap, p, n, H, Dh) &&
                ppx_kv_cache_copy (big, 2, cap, p, snap, 0, n, 0, n, H, Dh);
  /* refused: past a capacity, a slot that does not exist, another format */
  ok &= !ppx_kv_cache_copy (snap, 0, n, 1, big, 1, cap, p, n, H, Dh);
  ok &= !ppx_kv_cache_copy (big, 3, cap, 0, snap, 0, n, 0, n, H, Dh);
  ok &= !ppx_kv_cache_copy (big, 0, cap, cap - n + 1, snap, 0, n, 0, n, H, Dh);
  PpxTensor *other = ppx_kv_cache_new (be, ppx_kv_storage (fmt == PPX_KV_F32 ? PPX_KV_BF16 : PPX_KV_F32), 1, n, H, Dh, &err);
  g_assert_no_error (err);
  ok &= !ppx_kv_cache_copy (other, 0, n, 0, big, 1, cap, p, n, H, Dh);
  ppx_tensor_free (other);
  ppx_tensor_download_raw (big, gb);
  ppx_tensor_download_raw (snap, gs);
  /* the same on the host: values [slot, cap, HD] of es bytes, fp8 scales [slot, H, cap] after round_up(n, 16) */
  const gsize vs = fmt == PPX_KV_F32 ? 4 : fmt == PPX_KV_BF16 ? 2 : 1, row = HD * vs;
  memcpy (hs, hb + ((gsize) 1 * cap + p) * row, (gsize) n * row);
  memcpy (hb + ((gsize) 2 * cap + p) * row, hs, (gsize) n * row);
  if (fmt == PPX_KV_FP8) {
    float *sb = (float *) (hb + ((ppx_tensor_numel (big) + 15) & ~(gsize) 15));
    float *ss = (float *) (hs + ((ppx_tensor_numel (snap) + 15) & ~(gsize) 15));
    for (int h = 0; h < H; h++) {
      memcpy (ss + (gsize) h * n, sb + ((gsize) 1 * H + h) * cap + p, (gsize) n * sizeof (float));
      memcpy (sb + ((gsize) 2 * H + h) * cap + p, ss + (gsize) h * n, (gsize) n * sizeof (float));
    }
  }
  ok &= memcmp (gb, hb, nb) == 0 && memcmp (gs, hs, ns) == 0;
  ppx_tensor_free (big);
  ppx_tensor_free (snap);
  return ok;
}

/* ---- the golden model ---- */

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
 * `chunk` frames (1: step by step), no voice snapshots. The engine's prompt clock goes to *clock when it is not
 * NULL. */
static inline PpxSession *
prefill_session (PpxModel *m, PpxKvFormat kv, int chunk, const PpxSessionParams *p, PpxPromptClock *clock)
{
  g_autoptr (GError) err = NULL;
  PpxEngineParams ep;
  ppx_engine_params_init (&ep);
  ep.max_sessions = 1;
  ep.kv_format = kv;
  ep.prompt_chunk = chunk;
  ep.voice_snapshots = -1;
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

/* Slot `slot` of a cache of n_slots: its stored bytes (values, then for fp8 its scales [H, cap]) appended to
 * *bytes, and its values decoded to f32 [cap, H * Dh] (g_free). */
static inline float *
prefill_decode (PpxTensor *t, int slot, int cap, int H, int Dh, GByteArray *bytes)
{
  const gsize HD = (gsize) H * Dh, n = ppx_tensor_numel (t), per = (gsize) cap * HD;
  g_assert_cmpuint (n % per, ==, 0);
  g_autofree guint8 *raw = g_malloc (ppx_tensor_bytes (t));
  ppx_tensor_download_raw (t, raw);
  float *v = g_new (float, per);
  switch (ppx_tensor_type (t)) {
    case PPX_TENSOR_BF16: {
      const uint16_t *x = (const uint16_t *) raw + slot * per;
      g_byte_array_append (bytes, (const guint8 *) x, per * 2);
      for (gsize i = 0; i < per; i++)
        v[i] = ppx_kv_from_bf16 (x[i]);
      break;
    }
    case PPX_TENSOR_FP8: {
      const guint8 *x = raw + slot * per;
      const float *scales = (const float *) (raw + ((n + 15) & ~(gsize) 15)) + (gsize) slot * H * cap; /* [H, cap] */
      g_byte_array_append (bytes, x, per);
      g_byte_array_append (bytes, (const guint8 *) scales, (gsize) H * cap * sizeof (float));
      for (gsize i = 0; i < per; i++) {
        const gsize pos = i / HD, h = (i % HD) / Dh;
        v[i] = ppx_kv_from_e4m3 (x[i]) * scales[h * cap + pos];
      }
      break;
    }
    default:
      memcpy (v, (const float *) raw + slot * per, per * sizeof (float));
      g_byte_array_append (bytes, (const guint8 *) v, per * sizeof (float));
      break;
  }
  return v;
}

/* The temporal KV caches of two sessions' slots (engines of the same model and format). */
static inline KvDiff
prefill_kv_diff (PpxSession *a, PpxSession *b)
{
  const PpxLmConfig *c = &a->model->cfg.lm;
  const int H = c->num_heads, Dh = c->dim / H;
  KvDiff d = {0};
  for (int l = 0; l < c->num_layers; l++) {
    for (int value = 0; value < 2; value++) {
      PpxTensor *ta = ppx_lm_batch_cache (a->engine->lm, l, value), *tb = ppx_lm_batch_cache (b->engine->lm, l, value);
      g_autoptr (GByteArray) ra = g_byte_array_new (), rb = g_byte_array_new ();
      g_autofree float *va = prefill_decode (ta, a->slot, c->context, H, Dh, ra);
      g_autofree float *vb = prefill_decode (tb, b->slot, c->context, H, Dh, rb);
      g_assert_cmpuint (ra->len, ==, rb->len);
      for (guint i = 0; i < ra->len; i++)
        d.bytes_differ += ra->data[i] != rb->data[i];
      d.bytes += ra->len;
      const gsize n = (gsize) c->context * H * Dh;
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
