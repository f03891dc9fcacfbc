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

struct PpxMimiBatch {
  PpxMimi *mimi;
  int n;
  PpxSeanetState enc, dec;                /* [n] rows */
  PpxMimiTransformerState enc_tf, dec_tf; /* KV caches [n] slots, scratch [n] rows */
  PpxTensor *down_prev, *up_partial;      /* [n, D, 2] */
  PpxTensor *a, *b, *c;                   /* SEANet scratch [n, max_elems] */
  PpxTensor *lat, *lat2, *r;              /* [n, D], [n, D, 2], [n, qd] */
  PpxTensor *slots;                       /* [n] i32: the transformer cache slot of each row */
  PpxTensor *enc_off, *dec_off;           /* [n] i32: each row's next transformer position (device-side,
                                           * so a tick needs no upload: ppx_op_positions) */
  int *slot_of_row;                       /* host copy of slots */
  gboolean *enc_started;                  /* per row: the downsample's replicate padding is done */
};

struct PpxMimiState {
  PpxMimiBatch *b;
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

/* Every device tensor of a batch of n rows (b's fields, or only counted when p->be is NULL). */
static void
batch_plan (PpxMimiBatch *b, const PpxMimi *mm, PpxTensorPlan *p, int n)
{
  const gsize D = mm->cfg.dimension;
  const gsize scratch = (gsize) n * MAX (mm->encoder.max_elems, mm->decoder.max_elems);
  ppx_seanet_state_plan (&b->enc, &mm->encoder, p, n);
  ppx_seanet_state_plan (&b->dec, &mm->decoder, p, n);
  ppx_mimi_transformer_state_plan (&b->enc_tf, &mm->enc_tf, p, n, 2);
  ppx_mimi_transformer_state_plan (&b->dec_tf, &mm->dec_tf, p, n, 2);
  b->down_prev = ppx_plan_tensor (p, PPX_TENSOR_F32, n * D * (DOWN_K - DOWN_S));
  b->up_partial = ppx_plan_tensor (p, PPX_TENSOR_F32, n * D * (DOWN_K - DOWN_S));
  b->a = ppx_plan_tensor (p, PPX_TENSOR_F32, scratch);
  b->b = ppx_plan_tensor (p, PPX_TENSOR_F32, scratch);
  b->c = ppx_plan_tensor (p, PPX_TENSOR_F32, scratch);
  b->lat = ppx_plan_tensor (p, PPX_TENSOR_F32, n * D);
  b->lat2 = ppx_plan_tensor (p, PPX_TENSOR_F32, n * D * 2);
  b->r = ppx_plan_tensor (p, PPX_TENSOR_F32, (gsize) n * mm->cfg.q_dimension);
  b->slots = ppx_plan_tensor (p, PPX_TENSOR_I32, n);
  b->enc_off = ppx_plan_tensor (p, PPX_TENSOR_I32, n);
  b->dec_off = ppx_plan_tensor (p, PPX_TENSOR_I32, n);
}

static void
batch_clear (PpxMimiBatch *b)
{
  ppx_seanet_state_clear (&b->enc);
  ppx_seanet_state_clear (&b->dec);
  ppx_mimi_transformer_state_clear (&b->enc_tf);
  ppx_mimi_transformer_state_clear (&b->dec_tf);
  PpxTensor *ts[] = {b->down_prev, b->up_partial, b->a, b->b, b->c, b->lat, b->lat2, b->r, b->slots, b->enc_off,
                     b->dec_off};
  for (guint i = 0; i < G_N_ELEMENTS (ts); i++)
    ppx_tensor_free (ts[i]);
}

guint64
ppx_mimi_batch_bytes (const PpxMimi *mm, int n)
{
  PpxMimiBatch b = {0};
  PpxTensorPlan p = {0};
  batch_plan (&b, mm, &p, n);
  batch_clear (&b);
  return p.bytes;
}

PpxMimiBatch *
ppx_mimi_batch_new (PpxMimi *mm, int n, GError **error)
{
  g_return_val_if_fail (n > 0, NULL);
  PpxMimiBatch *b = g_new0 (PpxMimiBatch, 1);
  b->mimi = mm;
  b->n = n;
  b->slot_of_row = g_new (int, n);
  b->enc_started = g_new0 (gboolean, n);
  PpxTensorPlan p = {.be = mm->be, .error = error};
  batch_plan (b, mm, &p, n);
  if (p.failed) {
    ppx_mimi_batch_free (b);
    return NULL;
  }
  for (int i = 0; i < n; i++)
    b->slot_of_row[i] = i;
  ppx_tensor_upload (b->slots, 0, b->slot_of_row, n);
  for (int i = 0; i < n; i++)
    ppx_mimi_batch_reset_row (b, i);
  return b;
}

void
ppx_mimi_batch_free (PpxMimiBatch *b)
{
  if (!b)
    return;
  batch_clear (b);
  g_free (b->slot_of_row);
  g_free (b->enc_started);
  g_free (b);
}

/* One direction's streaming state of rows [row0, row0 + M): the SEANet state, the transformer's KV slots and
 * offsets, and the latent conv's history (encoder) or tail (decoder), D * (DOWN_K - DOWN_S) floats a row. The
 * batch's own tensors when the rows start at 0, else views of them (released by batch_rows_release). */
typedef struct {
  gboolean views;
  PpxSeanetState net;
  PpxTensor *slots, *conv, *offsets;
} BatchRows;

static BatchRows
batch_rows (const PpxMimiBatch *b, const PpxSeanetState *net, PpxTensor *conv, PpxTensor *offsets, int row0, int M)
{
  BatchRows r = {row0 != 0, *net, b->slots, conv, offsets};
  if (r.views) {
    const gsize conv_row = (gsize) b->mimi->cfg.dimension * (DOWN_K - DOWN_S);
    ppx_seanet_state_rows (net, row0, M, &r.net);
    r.slots = ppx_tensor_view (b->slots, row0, M);
    r.conv = ppx_tensor_view (conv, (gsize) row0 * conv_row, (gsize) M * conv_row);
    r.offsets = ppx_tensor_view (offsets, row0, M);
  }
  return r;
}

static void
batch_rows_release (BatchRows *r)
{
  if (!r->views)
    return;
  ppx_seanet_state_clear (&r->net);
  ppx_tensor_free (r->slots);
  ppx_tensor_free (r->conv);
  ppx_tensor_free (r->offsets);
}

static void
fill_row (PpxTensor *t, gsize per, int row)
{
  PpxTensor *v = ppx_tensor_view (t, (gsize) row * per, per);
  ppx_tensor_fill (v, 0.0f);
  ppx_tensor_free (v);
}

/* Only the counters of the transformer caches: stale entries are outside every later window (as in the
 * reference), since a stream writes its positions 0, 1, 2, ... before it attends them. */
void
ppx_mimi_batch_reset_row (PpxMimiBatch *b, int row)
{
  const gsize D = b->mimi->cfg.dimension;
  g_return_if_fail (row >= 0 && row < b->n);
  ppx_seanet_state_reset_rows (&b->enc, row, 1);
  ppx_seanet_state_reset_rows (&b->dec, row, 1);
  fill_row (b->down_prev, D * (DOWN_K - DOWN_S), row);
  fill_row (b->up_partial, D * (DOWN_K - DOWN_S), row);
  fill_row (b->enc_off, 1, row);
  fill_row (b->dec_off, 1, row);
  b->enc_started[row] = FALSE;
}

void
ppx_mimi_batch_move_row (PpxMimiBatch *b, int from, int to)
{
  const gsize per = (gsize) b->mimi->cfg.dimension * (DOWN_K - DOWN_S);
  g_return_if_fail (from >= 0 && from < b->n && to >= 0 && to < b->n);
  if (from == to)
    return;
  ppx_seanet_state_move_row (&b->enc, from, to);
  ppx_seanet_state_move_row (&b->dec, from, to);
  ppx_tensor_copy2d (b->down_prev, (gsize) to * per, 0, b->down_prev, (gsize) from * per, 0, 1, per);
  ppx_tensor_copy2d (b->up_partial, (gsize) to * per, 0, b->up_partial, (gsize) from * per, 0, 1, per);
  int freed = b->slot_of_row[to]; /* the slots stay a permutation of the rows */
  b->slot_of_row[to] = b->slot_of_row[from];
  b->slot_of_row[from] = freed;
  ppx_tensor_upload (b->slots, 0, b->slot_of_row, b->n);
  ppx_tensor_copy2d (b->enc_off, to, 0, b->enc_off, from, 0, 1, 1);
  ppx_tensor_copy2d (b->dec_off, to, 0, b->dec_off, from, 0, 1, 1);
  b->enc_started[to] = b->enc_started[from];
}

gboolean
ppx_mimi_batch_row_started (const PpxMimiBatch *b, int row)
{
  g_return_val_if_fail (row >= 0 && row < b->n, FALSE);
  return b->enc_started[row];
}

void
ppx_mimi_batch_mark_started (PpxMimiBatch *b, int row)
{
  g_return_if_fail (row >= 0 && row < b->n);
  b->enc_started[row] = TRUE;
}

void
ppx_mimi_batch_encode (PpxMimiBatch *b, int row0, int M, const PpxTensor *pcm, PpxTensor *codes, int code_off,
                       int code_stride)
{
  PpxMimi *mm = b->mimi;
  PpxBackend *be = mm->be;
  const int D = mm->cfg.dimension, qd = mm->cfg.q_dimension, bins = mm->cfg.q_bins;
  g_return_if_fail (row0 >= 0 && M > 0 && row0 + M <= b->n);
  BatchRows r = batch_rows (b, &b->enc, b->down_prev, b->enc_off, row0, M);
  PpxTensor *down_prev = r.conv;
  int C, L;
  PpxTensor *y = ppx_seanet_forward (&mm->encoder, &r.net, be, (PpxTensor *) pcm, b->a, b->b, b->c, M, &C, &L);
  /* y: [M, D, 2] at 25 Hz */
  ppx_mimi_transformer_forward (&mm->enc_tf, &b->enc_tf, be, y, M, r.offsets, r.slots);
  for (int m = 0; m < M; m++) {
    if (b->enc_started[row0 + m])
      continue;
    /* replicate padding: the history starts as copies of the stream's first frame */
    for (int j = 0; j < DOWN_K - DOWN_S; j++)
      ppx_tensor_copy2d (down_prev, (gsize) m * D * (DOWN_K - DOWN_S) + j, DOWN_K - DOWN_S, y, (gsize) m * D * L, L,
                         D, 1);
    b->enc_started[row0 + m] = TRUE;
  }
  ppx_op_conv1d (be, mm->downsample_w, NULL, y, down_prev, b->lat, M, D, D, DOWN_K, L, DOWN_S, 1, 1);
  /* split RVQ: both halves start from the same latent */
  ppx_op_linear (be, mm->in_first, b->lat, D, b->r, qd, M, FALSE);
  ppx_op_vq_encode (be, mm->cb_first, b->r, codes, code_off, code_stride, M, 1, bins, qd);
  ppx_op_linear (be, mm->in_rest, b->lat, D, b->r, qd, M, FALSE);
  ppx_op_vq_encode (be, mm->cb_rest, b->r, codes, code_off + 1, code_stride, M, mm->n_rest, bins, qd);
  batch_rows_release (&r);
}

void
ppx_mimi_batch_decode (PpxMimiBatch *b, int row0, int M, const PpxTensor *codes, int code_off, int code_stride,
                       PpxTensor *pcm)
{
  PpxMimi *mm = b->mimi;
  PpxBackend *be = mm->be;
  const int D = mm->cfg.dimension, qd = mm->cfg.q_dimension, bins = mm->cfg.q_bins;
  g_return_if_fail (row0 >= 0 && M > 0 && row0 + M <= b->n);
  BatchRows r = batch_rows (b, &b->dec, b->up_partial, b->dec_off, row0, M);
  ppx_op_vq_decode (be, mm->cb_first, codes, code_off, code_stride, b->r, M, 1, bins, qd);
  ppx_op_linear (be, mm->out_first, b->r, qd, b->lat, D, M, FALSE);
  ppx_op_vq_decode (be, mm->cb_rest, codes, code_off + 1, code_stride, b->r, M, mm->n_rest, bins, qd);
  ppx_op_linear (be, mm->out_rest, b->r, qd, b->lat, D, M, TRUE);
  ppx_op_conv_transpose1d (be, mm->upsample_w, NULL, b->lat, r.conv, b->lat2, M, D, D, DOWN_K, 1, DOWN_S, D);
  ppx_mimi_transformer_forward (&mm->dec_tf, &b->dec_tf, be, b->lat2, M, r.offsets, r.slots);
  int C, L;
  PpxTensor *y = ppx_seanet_forward (&mm->decoder, &r.net, be, b->lat2, b->a, b->b, b->c, M, &C, &L);
  ppx_tensor_copy2d (pcm, 0, 0, y, 0, 0, 1, (gsize) M * C * L);
  batch_rows_release (&r);
}

/* ---- one stream ---- */

PpxMimiState *
ppx_mimi_state_new (PpxMimi *mm, GError **error)
{
  PpxMimiState *s = g_new0 (PpxMimiState, 1);
  PpxBackend *be = mm->be;
  gboolean ok = (s->b = ppx_mimi_batch_new (mm, 1, error)) &&
                (s->pcm_in = ppx_tensor_new (be, PPX_TENSOR_F32, mm->cfg.frame_size, error)) &&
                (s->pcm_out = ppx_tensor_new (be, PPX_TENSOR_F32, mm->cfg.frame_size, error)) &&
                (s->codes = ppx_tensor_new (be, PPX_TENSOR_I32, mm->cfg.num_codebooks, error));
  if (!ok) {
    ppx_mimi_state_free (s);
    return NULL;
  }
  return s;
}

void
ppx_mimi_state_free (PpxMimiState *s)
{
  if (!s)
    return;
  ppx_mimi_batch_free (s->b);
  ppx_tensor_free (s->pcm_in);
  ppx_tensor_free (s->pcm_out);
  ppx_tensor_free (s->codes);
  g_free (s);
}

void
ppx_mimi_reset (PpxMimiState *s)
{
  ppx_mimi_batch_reset_row (s->b, 0);
}

void
ppx_mimi_encode_host (PpxMimiState *s, const float *pcm, int *codes, float *latent)
{
  const PpxMimiConfig *c = &s->b->mimi->cfg;
  ppx_tensor_upload (s->pcm_in, 0, pcm, c->frame_size);
  ppx_mimi_batch_encode (s->b, 0, 1, s->pcm_in, s->codes, 0, 0);
  int32_t out[PPX_MAX_STREAMS];
  ppx_tensor_download (s->codes, 0, out, c->num_codebooks);
  for (int i = 0; i < c->num_codebooks; i++)
    codes[i] = out[i];
  if (latent)
    ppx_tensor_download (s->b->lat, 0, latent, c->dimension);
}

void
ppx_mimi_decode_host (PpxMimiState *s, const int *codes, float *pcm)
{
  const PpxMimiConfig *c = &s->b->mimi->cfg;
  int32_t in[PPX_MAX_STREAMS];
  for (int i = 0; i < c->num_codebooks; i++)
    in[i] = codes[i];
  ppx_tensor_upload (s->codes, 0, in, c->num_codebooks);
  ppx_mimi_batch_decode (s->b, 0, 1, s->codes, 0, 0, s->pcm_out);
  ppx_tensor_download (s->pcm_out, 0, pcm, c->frame_size);
}
