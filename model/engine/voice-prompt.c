#include "voice-prompt.h"

#include "audio-io.h"
#include "safetensors.h"
#include "torch-pt.h"

void
ppx_voice_prompt_free (PpxVoicePrompt *vp)
{
  if (!vp)
    return;
  g_free (vp->codes);
  g_free (vp->embeddings);
  g_free (vp);
}

PpxVoicePrompt *
ppx_voice_prompt_from_audio (PpxMimiState *mimi, const PpxConfig *cfg, const char *path, gboolean normalize,
                             GError **error)
{
  const int fs = cfg->mimi.frame_size, nq = cfg->mimi.num_codebooks;
  gsize n = 0;
  g_autofree float *pcm = ppx_audio_read (path, cfg->mimi.sample_rate, &n, error);
  if (!pcm)
    return NULL;
  if (n == 0) {
    g_set_error (error, PPX_ERROR, PPX_ERROR_FORMAT, "%s: the voice prompt has no samples", path);
    return NULL;
  }
  if (normalize) {
    double gain;
    if (!ppx_audio_loudness_gain (pcm, n, cfg->mimi.sample_rate, -24.0, &gain, error))
      return NULL;
    for (gsize i = 0; i < n; i++)
      pcm[i] = (float) (pcm[i] * gain);
  }
  PpxVoicePrompt *vp = g_new0 (PpxVoicePrompt, 1);
  vp->n_frames = (int) ((n + fs - 1) / fs);
  vp->n_codebooks = nq;
  vp->codes = g_new (int, (gsize) vp->n_frames * nq);
  g_autofree float *frame = g_new (float, fs);
  ppx_mimi_reset (mimi);
  for (int f = 0; f < vp->n_frames; f++) {
    gsize off = (gsize) f * fs, len = MIN ((gsize) fs, n - off);
    memset (frame, 0, fs * sizeof (float));
    memcpy (frame, pcm + off, len * sizeof (float));
    ppx_mimi_encode_host (mimi, frame, vp->codes + (gsize) f * nq, NULL);
  }
  return vp;
}

/* Both containers hold "embeddings" [N, 1, 1, dim] (float, 1 <= N <= PPX_VOICE_PROMPT_MAX_FRAMES) and
 * "cache" [1, streams, 4] (int64): what is checked of a tensor from its declaration (name, dtype, shape).
 * Other names pass. */
static gboolean
check_declared (const char *path, const PpxConfig *cfg, const char *name, PpxDType dt, int ndim,
                const int64_t *shape, GError **error)
{
  const int dim = cfg->lm.dim, ns = cfg->lm.n_streams;
  if (strcmp (name, "embeddings") == 0) {
    if (ndim != 4 || shape[1] != 1 || shape[2] != 1 || shape[3] != dim || shape[0] < 1 ||
        shape[0] > PPX_VOICE_PROMPT_MAX_FRAMES) {
      g_autofree char *s = ppx_shape_str (ndim, shape);
      g_set_error (error, PPX_ERROR, PPX_ERROR_SHAPE,
                   "%s: 'embeddings' has shape %s, expected [N, 1, 1, %d] with 1 <= N <= %d (the frames a voice "
                   "prompt may have)", path, s, dim, PPX_VOICE_PROMPT_MAX_FRAMES);
      return FALSE;
    }
    if (dt != PPX_DTYPE_F32 && dt != PPX_DTYPE_BF16 && dt != PPX_DTYPE_F16) {
      g_set_error (error, PPX_ERROR, PPX_ERROR_SHAPE, "%s: 'embeddings' has dtype %s, expected a float type", path,
                   ppx_dtype_name (dt));
      return FALSE;
    }
  } else if (strcmp (name, "cache") == 0) {
    if (ndim != 3 || shape[0] != 1 || shape[1] != ns || shape[2] != 4 || dt != PPX_DTYPE_I64) {
      g_autofree char *s = ppx_shape_str (ndim, shape);
      g_set_error (error, PPX_ERROR, PPX_ERROR_SHAPE, "%s: 'cache' is %s %s, expected I64 [1, %d, 4]", path,
                   ppx_dtype_name (dt), s, ns);
      return FALSE;
    }
  }
  return TRUE;
}

typedef struct {
  const char *path;
  const PpxConfig *cfg;
} DeclaredCheck;

/* ppx_pt_load_checked's check: a voice .pt is judged from its pickle before any storage is inflated. */
static gboolean
check_pt_declared (const char *name, PpxDType dt, int ndim, const int64_t *shape, gpointer user_data, GError **error)
{
  const DeclaredCheck *c = user_data;
  return check_declared (c->path, c->cfg, name, dt, ndim, shape, error);
}

static PpxVoicePrompt *
from_tensors (const PpxConfig *cfg, const char *path, PpxDType edt, const int64_t *eshape, int endim,
              const void *edata, PpxDType cdt, const int64_t *cshape, int cndim, const void *cdata, GError **error)
{
  const int dim = cfg->lm.dim, ns = cfg->lm.n_streams;
  if (!check_declared (path, cfg, "embeddings", edt, endim, eshape, error) ||
      !check_declared (path, cfg, "cache", cdt, cndim, cshape, error))
    return NULL;
  PpxVoicePrompt *vp = g_new0 (PpxVoicePrompt, 1);
  vp->from_embeddings = TRUE;
  vp->n_frames = (int) eshape[0];
  vp->dim = dim;
  vp->embeddings = g_new (float, (gsize) vp->n_frames * dim);
  ppx_convert_to_f32 (edt, edata, vp->embeddings, (gsize) vp->n_frames * dim);
  const int64_t *c = cdata;
  for (int k = 0; k < ns; k++)
    for (int j = 0; j < 4; j++) {
      int64_t v = c[k * 4 + j];
      int card = k == 0 ? cfg->lm.text_card : cfg->lm.card;
      if (v < -2 || v > card) {
        g_set_error (error, PPX_ERROR, PPX_ERROR_FORMAT, "%s: 'cache' holds token %" G_GINT64_FORMAT
                     " for stream %d, outside [-2, %d]", path, v, k, card);
        ppx_voice_prompt_free (vp);
        return NULL;
      }
      vp->cache[k][j] = (int) v;
    }
  return vp;
}

PpxVoicePrompt *
ppx_voice_prompt_from_embeddings_file (const PpxConfig *cfg, const char *path, GError **error)
{
  if (g_str_has_suffix (path, ".safetensors")) {
    PpxSafetensors *st = ppx_st_open (path, error);
    if (!st)
      return NULL;
    const PpxStTensor *e = ppx_st_find (st, "embeddings"), *c = ppx_st_find (st, "cache");
    PpxVoicePrompt *vp = NULL;
    if (!e || !c)
      g_set_error (error, PPX_ERROR, PPX_ERROR_MISSING, "%s: needs tensors 'embeddings' and 'cache'", path);
    else
      vp = from_tensors (cfg, path, e->dtype, e->shape, e->ndim, e->data, c->dtype, c->shape, c->ndim, c->data, error);
    ppx_st_close (st);
    return vp;
  }
  DeclaredCheck check = {path, cfg};
  PpxPtFile *pt = ppx_pt_load_checked (path, check_pt_declared, &check, error);
  if (!pt)
    return NULL;
  const PpxPtTensor *e = ppx_pt_find (pt, "embeddings"), *c = ppx_pt_find (pt, "cache");
  PpxVoicePrompt *vp = NULL;
  if (!e || !c)
    g_set_error (error, PPX_ERROR, PPX_ERROR_MISSING, "%s: a voice .pt needs the entries 'embeddings' and 'cache'",
                 path);
  else
    vp = from_tensors (cfg, path, e->dtype, e->shape, e->ndim, e->data, c->dtype, c->shape, c->ndim, c->data, error);
  ppx_pt_free (pt);
  return vp;
}

gboolean
ppx_voice_prompt_save (const PpxVoicePrompt *vp, const char *path, GError **error)
{
  g_return_val_if_fail (vp->from_embeddings, FALSE);
  PpxStWriter *w = ppx_st_writer_new ();
  int64_t es[4] = {vp->n_frames, 1, 1, vp->dim}, cs[3] = {1, PPX_MAX_STREAMS, 4};
  int64_t cache[PPX_MAX_STREAMS * 4];
  for (int k = 0; k < PPX_MAX_STREAMS; k++)
    for (int j = 0; j < 4; j++)
      cache[k * 4 + j] = vp->cache[k][j];
  ppx_st_writer_set_metadata (w, "ppx.voice_prompt", "1");
  ppx_st_writer_declare (w, "embeddings", PPX_DTYPE_F32, 4, es);
  ppx_st_writer_declare (w, "cache", PPX_DTYPE_I64, 3, cs);
  gboolean ok = ppx_st_writer_begin (w, path, error) &&
                ppx_st_writer_write (w, vp->embeddings, (gsize) vp->n_frames * vp->dim * 4, error) &&
                ppx_st_writer_write (w, cache, sizeof cache, error) && ppx_st_writer_finish (w, error);
  ppx_st_writer_free (w);
  return ok;
}
