/* Voice snapshots (docs/engine.md, "Voice snapshots"): the voice phase of the system prompts is the same for
 * every session with that voice, so its result, the temporal KV rows of positions 0 .. n-1 and the LMGen state
 * after it, is kept once per engine and copied into a new session's slot (a device copy), leaving only the
 * silence and text frames to run. A voice's key is a hash of what the phase reads (its codes, or its
 * embeddings and token cache). Only a voice phase that did not wrap the ring is kept (n <= context: its
 * positions are its ring indices, all still there); fp8 caches copy their per-position scales with the
 * values. Up to `voice_snapshots` voices are kept, the least
 * recently used one dropped first; a snapshot that cannot be allocated is simply not kept. Everything here
 * runs under the engine lock. */
#include "engine-internal.h"

struct PpxVoiceSnapshot {
  char *key;
  int n_pos;               /* positions 0 .. n_pos - 1 */
  PpxTensor **k, **v;      /* per layer: caches of one slot and capacity n_pos, the engine's format */
  PpxLmGen gen;            /* after the voice phase (capture cleared) */
  guint64 bytes, last_use; /* device bytes; the clock's use counter when last stored or restored */
};

static void
snapshot_free (PpxVoiceSnapshot *v, int layers)
{
  if (!v)
    return;
  for (int l = 0; l < layers; l++) {
    ppx_tensor_free (v->k ? v->k[l] : NULL);
    ppx_tensor_free (v->v ? v->v[l] : NULL);
  }
  g_free (v->k);
  g_free (v->v);
  g_free (v->key);
  g_free (v);
}

void
ppx_engine_voice_snapshots_free (PpxEngine *e)
{
  for (guint i = 0; e->voices && i < e->voices->len; i++)
    snapshot_free (g_ptr_array_index (e->voices, i), e->model->cfg.lm.num_layers);
  if (e->voices)
    g_ptr_array_free (e->voices, TRUE);
  e->voices = NULL;
}

/* What the voice phase reads, hashed: the kind, the frames, and the codes or the embeddings and token cache. */
char *
ppx_voice_snapshot_key (const PpxVoicePrompt *vp)
{
  g_autoptr (GChecksum) ck = g_checksum_new (G_CHECKSUM_SHA256);
  const int head[4] = {vp->from_embeddings, vp->n_frames, vp->n_codebooks, vp->dim};
  g_checksum_update (ck, (const guchar *) head, sizeof head);
  if (vp->from_embeddings) {
    g_checksum_update (ck, (const guchar *) vp->embeddings, (gsize) vp->n_frames * vp->dim * sizeof (float));
    g_checksum_update (ck, (const guchar *) vp->cache, sizeof vp->cache);
  } else {
    g_checksum_update (ck, (const guchar *) vp->codes, (gsize) vp->n_frames * vp->n_codebooks * sizeof (int));
  }
  return g_strdup (g_checksum_get_string (ck));
}

static PpxVoiceSnapshot *
find (PpxEngine *e, const char *key)
{
  for (guint i = 0; e->voices && i < e->voices->len; i++) {
    PpxVoiceSnapshot *v = g_ptr_array_index (e->voices, i);
    if (g_str_equal (v->key, key))
      return v;
  }
  return NULL;
}

/* Copies positions 0 .. n-1 of every layer between the session's slot and a snapshot. */
static gboolean
copy_rows (PpxEngine *e, PpxSession *s, PpxVoiceSnapshot *v, gboolean to_snapshot)
{
  const PpxLmConfig *c = &e->model->cfg.lm;
  const int H = c->num_heads, Dh = c->dim / H, cap = c->context;
  gboolean ok = TRUE;
  for (int l = 0; ok && l < c->num_layers; l++) {
    for (int value = 0; ok && value < 2; value++) {
      PpxTensor *cache = ppx_lm_batch_cache (e->lm, l, value), *snap = value ? v->v[l] : v->k[l];
      ok = to_snapshot ? ppx_kv_cache_copy (snap, 0, v->n_pos, 0, cache, s->slot, cap, 0, v->n_pos, H, Dh)
                       : ppx_kv_cache_copy (cache, s->slot, cap, 0, snap, 0, v->n_pos, 0, v->n_pos, H, Dh);
    }
  }
  return ok;
}

gboolean
ppx_engine_voice_restore (PpxEngine *e, PpxSession *s, const char *key)
{
  gboolean ok = FALSE;
  ppx_engine_lock_for_prompt (e);
  PpxVoiceSnapshot *v = e->voice_snapshots > 0 ? find (e, key) : NULL;
  if (v && copy_rows (e, s, v, FALSE)) {
    s->gen.offset = v->gen.offset; /* the session keeps its own flags */
    memcpy (s->gen.cache, v->gen.cache, sizeof s->gen.cache);
    memcpy (s->gen.provided, v->gen.provided, sizeof s->gen.provided);
    s->gen.last_dep_steps = v->gen.last_dep_steps;
    v->last_use = ++e->clock.voice_uses;
    e->clock.voice_restores++;
    ok = TRUE;
  }
  ppx_engine_unlock (e);
  return ok;
}

void
ppx_engine_voice_store (PpxEngine *e, PpxSession *s, const char *key)
{
  const PpxLmConfig *c = &e->model->cfg.lm;
  const int n_pos = (int) s->gen.offset - 1, H = c->num_heads, Dh = c->dim / H;
  if (e->voice_snapshots <= 0 || n_pos < 1 || n_pos > c->context)
    return; /* nothing kept, or the phase wrapped the ring */
  ppx_engine_lock_for_prompt (e);
  if (!find (e, key)) {
    if (!e->voices)
      e->voices = g_ptr_array_new ();
    while ((int) e->voices->len >= e->voice_snapshots) { /* drop the least recently used */
      guint old = 0;
      for (guint i = 1; i < e->voices->len; i++)
        if (((PpxVoiceSnapshot *) g_ptr_array_index (e->voices, i))->last_use <
            ((PpxVoiceSnapshot *) g_ptr_array_index (e->voices, old))->last_use)
          old = i;
      snapshot_free (g_ptr_array_steal_index (e->voices, old), c->num_layers);
    }
    PpxVoiceSnapshot *v = g_new0 (PpxVoiceSnapshot, 1);
    v->n_pos = n_pos;
    v->k = g_new0 (PpxTensor *, c->num_layers);
    v->v = g_new0 (PpxTensor *, c->num_layers);
    gboolean ok = TRUE;
    for (int l = 0; ok && l < c->num_layers; l++) {
      g_autoptr (GError) err = NULL;
      ok = (v->k[l] = ppx_kv_cache_new (e->model->be, e->kv_storage, 1, n_pos, H, Dh, &err)) &&
           (v->v[l] = ppx_kv_cache_new (e->model->be, e->kv_storage, 1, n_pos, H, Dh, &err));
      if (!ok)
        g_debug ("voice snapshot not kept: %s", err->message);
      else
        v->bytes += ppx_tensor_bytes (v->k[l]) + ppx_tensor_bytes (v->v[l]);
    }
    if (ok && copy_rows (e, s, v, TRUE)) {
      v->key = g_strdup (key);
      v->gen = s->gen;
      v->gen.capture = NULL;
      v->last_use = ++e->clock.voice_uses;
      g_ptr_array_add (e->voices, v);
      e->clock.voice_stores++;
    } else {
      snapshot_free (v, c->num_layers);
    }
  }
  ppx_engine_unlock (e);
}

guint64
ppx_engine_voice_snapshot_bytes (PpxEngine *e, int *n_voices)
{
  guint64 bytes = 0;
  g_mutex_lock (&e->lock);
  for (guint i = 0; e->voices && i < e->voices->len; i++)
    bytes += ((PpxVoiceSnapshot *) g_ptr_array_index (e->voices, i))->bytes;
  if (n_voices)
    *n_voices = e->voices ? (int) e->voices->len : 0;
  g_mutex_unlock (&e->lock);
  return bytes;
}

void
ppx_engine_set_voice_snapshots (PpxEngine *e, int n)
{
  g_mutex_lock (&e->lock);
  e->voice_snapshots = MAX (n, 0);
  while (e->voices && (int) e->voices->len > e->voice_snapshots)
    snapshot_free (g_ptr_array_steal_index (e->voices, e->voices->len - 1), e->model->cfg.lm.num_layers);
  g_mutex_unlock (&e->lock);
}
