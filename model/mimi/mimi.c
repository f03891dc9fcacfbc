/* Mimi: loading, per-stream state, and the frame-level encode/decode (spec §4.1, §4.5, §4.7). */
#include "mimi-internal.h"

struct PpxMimi {
  PpxBackend *be;
  PpxMimiConfig cfg;
  PpxSeanet encoder, decoder;
  PpxMimiTransformer enc_tf, dec_tf;
  PpxTensor *downsample_w; /* [D, D, 4], stride 2, replicate padding */
  PpxTensor *upsample_w;   /* [D, 1, 4], depthwise, stride 2 */
  PpxWeight *in_first, *out_first, *in_rest, *out_rest;
  PpxTensor *cb_first, *cb_rest; /* [1, bins, qd], [n_rest, bins, qd] */
  int n_rest;
  guint64 bytes;
};

struct PpxMimiState {
  PpxMimi *mimi;
  PpxSeanetState enc, dec;
  PpxMimiTransformerState enc_tf, dec_tf;
  PpxTensor *down_prev, *up_partial;
  gboolean enc_started;
  PpxTensor *a, *b, *c;      /* SEANet scratch */
  PpxTensor *lat, *lat2, *r; /* [D], [D*2], [qd] */
  PpxTensor *pcm_in, *pcm_out, *codes; /* host-convenience staging */
};

#define DOWN_K 4
#define DOWN_S 2

/* Codebook j of a quantizer: embedding_sum / max(cluster_usage, 1e-5), row-wise (reference's epsilon). */
static gboolean
load_codebooks (PpxLoader *ld, const PpxMimiConfig *m, const char *q, int ncb, PpxTensor **out)
{
  if (ld->error)
    return FALSE;
  const gsize per = (gsize) m->q_bins * m->q_dimension;
  g_autofree float *all = g_new (float, per * ncb);
  for (int j = 0; j < ncb; j++) {
    g_autofree char *sn = g_strdup_printf ("quantizer.%s.vq.layers.%d._codebook.embedding_sum", q, j);
    g_autofree char *un = g_strdup_printf ("quantizer.%s.vq.layers.%d._codebook.cluster_usage", q, j);
    int64_t ss[2] = {m->q_bins, m->q_dimension}, us[1] = {m->q_bins};
    g_autofree float *sum = ppx_st_load_f32 (ld->st, sn, 2, ss, &ld->error);
    g_autofree float *usage = sum ? ppx_st_load_f32 (ld->st, un, 1, us, &ld->error) : NULL;
    if (!usage)
      return FALSE;
    for (int i = 0; i < m->q_bins; i++) {
      float u = MAX (usage[i], 1e-5f);
      for (int d = 0; d < m->q_dimension; d++)
        all[j * per + (gsize) i * m->q_dimension + d] = sum[(gsize) i * m->q_dimension + d] / u;
    }
  }
  *out = ppx_tensor_new (ld->be, PPX_TENSOR_F32, per * ncb, &ld->error);
  if (!*out)
    return FALSE;
  ppx_tensor_upload (*out, 0, all, per * ncb);
  ld->bytes += per * ncb * 4;
  return TRUE;
}

PpxMimi *
ppx_mimi_load (PpxBackend *be, const PpxMimiConfig *cfg, const PpxSafetensors *st, GError **error)
{
  PpxMimi *mm = g_new0 (PpxMimi, 1);
  mm->be = be;
  mm->cfg = *cfg;
  mm->n_rest = cfg->num_codebooks - 1;
  PpxLoader ld;
  ppx_loader_init (&ld, be, st, PPX_QUANT_BF16);
  const int64_t D = cfg->dimension, qd = cfg->q_dimension;
  ppx_seanet_load (&mm->encoder, &ld, cfg, FALSE, cfg->frame_size);
  ppx_seanet_load (&mm->decoder, &ld, cfg, TRUE, 2);
  ppx_mimi_transformer_load (&mm->enc_tf, &ld, cfg, "encoder_transformer");
  ppx_mimi_transformer_load (&mm->dec_tf, &ld, cfg, "decoder_transformer");
  mm->downsample_w = ppx_loader_tensor (&ld, 3, D, D, DOWN_K, "downsample.conv.conv.conv.weight");
  mm->upsample_w = ppx_loader_tensor (&ld, 3, D, 1, DOWN_K, "upsample.convtr.convtr.convtr.weight");
  mm->in_first = ppx_loader_linear_f32 (&ld, 3, qd, D, "quantizer.rvq_first.input_proj.weight");
  mm->out_first = ppx_loader_linear_f32 (&ld, 3, D, qd, "quantizer.rvq_first.output_proj.weight");
  mm->in_rest = ppx_loader_linear_f32 (&ld, 3, qd, D, "quantizer.rvq_rest.input_proj.weight");
  mm->out_rest = ppx_loader_linear_f32 (&ld, 3, D, qd, "quantizer.rvq_rest.output_proj.weight");
  load_codebooks (&ld, cfg, "rvq_first", 1, &mm->cb_first);
  load_codebooks (&ld, cfg, "rvq_rest", mm->n_rest, &mm->cb_rest);
  mm->bytes = ld.bytes;
  if (!ppx_loader_finish (&ld, error)) {
    ppx_mimi_free (mm);
    return NULL;
  }
  return mm;
}

void
ppx_mimi_free (PpxMimi *mm)
{
  if (!mm)
    return;
  ppx_seanet_clear (&mm->encoder);
  ppx_seanet_clear (&mm->decoder);
  ppx_mimi_transformer_clear (&mm->enc_tf);
  ppx_mimi_transformer_clear (&mm->dec_tf);
  ppx_tensor_free (mm->downsample_w);
  ppx_tensor_free (mm->upsample_w);
  ppx_weight_free (mm->in_first);
  ppx_weight_free (mm->out_first);
  ppx_weight_free (mm->in_rest);
  ppx_weight_free (mm->out_rest);
  ppx_tensor_free (mm->cb_first);
  ppx_tensor_free (mm->cb_rest);
  g_free (mm);
}

guint64
ppx_mimi_weight_bytes (const PpxMimi *mm)
{
  return mm->bytes;
}

const PpxMimiConfig *
ppx_mimi_config (const PpxMimi *mm)
{
  return &mm->cfg;
}

PpxMimiState *
ppx_mimi_state_new (PpxMimi *mm, GError **error)
{
  PpxMimiState *s = g_new0 (PpxMimiState, 1);
  PpxBackend *be = mm->be;
  const gsize D = mm->cfg.dimension;
  const gsize scratch = MAX (mm->encoder.max_elems, mm->decoder.max_elems);
  s->mimi = mm;
  gboolean ok = ppx_seanet_state_init (&s->enc, &mm->encoder, be, error) &&
                ppx_seanet_state_init (&s->dec, &mm->decoder, be, error) &&
                ppx_mimi_transformer_state_init (&s->enc_tf, &mm->enc_tf, be, 2, error) &&
                ppx_mimi_transformer_state_init (&s->dec_tf, &mm->dec_tf, be, 2, error) &&
                (s->down_prev = ppx_tensor_new (be, PPX_TENSOR_F32, D * (DOWN_K - DOWN_S), error)) &&
                (s->up_partial = ppx_tensor_new (be, PPX_TENSOR_F32, D * (DOWN_K - DOWN_S), error)) &&
                (s->a = ppx_tensor_new (be, PPX_TENSOR_F32, scratch, error)) &&
                (s->b = ppx_tensor_new (be, PPX_TENSOR_F32, scratch, error)) &&
                (s->c = ppx_tensor_new (be, PPX_TENSOR_F32, scratch, error)) &&
                (s->lat = ppx_tensor_new (be, PPX_TENSOR_F32, D, error)) &&
                (s->lat2 = ppx_tensor_new (be, PPX_TENSOR_F32, D * 2, error)) &&
                (s->r = ppx_tensor_new (be, PPX_TENSOR_F32, mm->cfg.q_dimension, error)) &&
                (s->pcm_in = ppx_tensor_new (be, PPX_TENSOR_F32, mm->cfg.frame_size, error)) &&
                (s->pcm_out = ppx_tensor_new (be, PPX_TENSOR_F32, mm->cfg.frame_size, error)) &&
                (s->codes = ppx_tensor_new (be, PPX_TENSOR_I32, mm->cfg.num_codebooks, error));
  if (!ok) {
    ppx_mimi_state_free (s);
    return NULL;
  }
  ppx_mimi_reset (s);
  return s;
}

void
ppx_mimi_state_free (PpxMimiState *s)
{
  if (!s)
    return;
  ppx_seanet_state_clear (&s->enc);
  ppx_seanet_state_clear (&s->dec);
  ppx_mimi_transformer_state_clear (&s->enc_tf);
  ppx_mimi_transformer_state_clear (&s->dec_tf);
  PpxTensor *ts[] = {s->down_prev, s->up_partial, s->a, s->b, s->c, s->lat, s->lat2, s->r, s->pcm_in, s->pcm_out,
                     s->codes};
  for (guint i = 0; i < G_N_ELEMENTS (ts); i++)
    ppx_tensor_free (ts[i]);
  g_free (s);
}

void
ppx_mimi_reset (PpxMimiState *s)
{
  ppx_seanet_state_reset (&s->enc);
  ppx_seanet_state_reset (&s->dec);
  ppx_mimi_transformer_state_reset (&s->enc_tf);
  ppx_mimi_transformer_state_reset (&s->dec_tf);
  if (s->enc_tf.slot) {
    ppx_tensor_fill (s->enc_tf.slot, 0);
    ppx_tensor_fill (s->dec_tf.slot, 0);
  }
  ppx_tensor_fill (s->down_prev, 0.0f);
  ppx_tensor_fill (s->up_partial, 0.0f);
  s->enc_started = FALSE;
}

void
ppx_mimi_encode_frame (PpxMimiState *s, const PpxTensor *pcm, PpxTensor *codes, int code_off)
{
  PpxMimi *mm = s->mimi;
  PpxBackend *be = mm->be;
  const int D = mm->cfg.dimension, qd = mm->cfg.q_dimension, bins = mm->cfg.q_bins;
  int C, L;
  PpxTensor *y = ppx_seanet_forward (&mm->encoder, &s->enc, be, (PpxTensor *) pcm, s->a, s->b, s->c, &C, &L);
  /* y: [D, 2] at 25 Hz */
  ppx_mimi_transformer_forward (&mm->enc_tf, &s->enc_tf, be, y);
  if (!s->enc_started) { /* replicate padding: the history starts as copies of the first frame */
    for (int j = 0; j < DOWN_K - DOWN_S; j++)
      ppx_tensor_copy2d (s->down_prev, j, DOWN_K - DOWN_S, y, 0, L, D, 1);
    s->enc_started = TRUE;
  }
  ppx_op_conv1d (be, mm->downsample_w, NULL, y, s->down_prev, s->lat, 1, D, D, DOWN_K, L, DOWN_S, 1, 1);
  /* split RVQ: both halves start from the same latent */
  ppx_op_linear (be, mm->in_first, s->lat, D, s->r, qd, 1, FALSE);
  ppx_op_vq_encode (be, mm->cb_first, s->r, codes, code_off, 0, 1, 1, bins, qd);
  ppx_op_linear (be, mm->in_rest, s->lat, D, s->r, qd, 1, FALSE);
  ppx_op_vq_encode (be, mm->cb_rest, s->r, codes, code_off + 1, 0, 1, mm->n_rest, bins, qd);
}

void
ppx_mimi_decode_frame (PpxMimiState *s, const PpxTensor *codes, int code_off, PpxTensor *pcm)
{
  PpxMimi *mm = s->mimi;
  PpxBackend *be = mm->be;
  const int D = mm->cfg.dimension, qd = mm->cfg.q_dimension, bins = mm->cfg.q_bins;
  ppx_op_vq_decode (be, mm->cb_first, codes, code_off, 0, s->r, 1, 1, bins, qd);
  ppx_op_linear (be, mm->out_first, s->r, qd, s->lat, D, 1, FALSE);
  ppx_op_vq_decode (be, mm->cb_rest, codes, code_off + 1, 0, s->r, 1, mm->n_rest, bins, qd);
  ppx_op_linear (be, mm->out_rest, s->r, qd, s->lat, D, 1, TRUE);
  ppx_op_conv_transpose1d (be, mm->upsample_w, NULL, s->lat, s->up_partial, s->lat2, 1, D, D, DOWN_K, 1, DOWN_S, D);
  ppx_mimi_transformer_forward (&mm->dec_tf, &s->dec_tf, be, s->lat2);
  int C, L;
  PpxTensor *y = ppx_seanet_forward (&mm->decoder, &s->dec, be, s->lat2, s->a, s->b, s->c, &C, &L);
  ppx_tensor_copy2d (pcm, 0, 0, y, 0, 0, 1, (gsize) C * L);
}

void
ppx_mimi_encode_host (PpxMimiState *s, const float *pcm, int *codes, float *latent)
{
  const PpxMimiConfig *c = &s->mimi->cfg;
  ppx_tensor_upload (s->pcm_in, 0, pcm, c->frame_size);
  ppx_mimi_encode_frame (s, s->pcm_in, s->codes, 0);
  int32_t out[PPX_MAX_STREAMS];
  ppx_tensor_download (s->codes, 0, out, c->num_codebooks);
  for (int i = 0; i < c->num_codebooks; i++)
    codes[i] = out[i];
  if (latent)
    ppx_tensor_download (s->lat, 0, latent, c->dimension);
}

void
ppx_mimi_decode_host (PpxMimiState *s, const int *codes, float *pcm)
{
  const PpxMimiConfig *c = &s->mimi->cfg;
  int32_t in[PPX_MAX_STREAMS];
  for (int i = 0; i < c->num_codebooks; i++)
    in[i] = codes[i];
  ppx_tensor_upload (s->codes, 0, in, c->num_codebooks);
  ppx_mimi_decode_frame (s, s->codes, 0, s->pcm_out);
  ppx_tensor_download (s->pcm_out, 0, pcm, c->frame_size);
}
