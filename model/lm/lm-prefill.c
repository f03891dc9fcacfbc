/* The prompt prefill (lm.h, docs/engine.md "Prompt prefill"): T consecutive prompt frames of one session as
 * one temporal pass of T rows, in a scratch of its own (so a tick's rows, and its recorded graphs, are never
 * touched), over the session's slot of the batch's KV caches. */
#include "lm-internal.h"

#define W PPX_MAX_STREAMS /* row stride of the id tensor */

struct PpxLmPrefill {
  PpxLmBatch *b;
  PpxLm *lm;
  int max_rows;
  LmPass pass; /* [max_rows] rows, one slot */
};

int
ppx_lm_prefill_rows_for (const PpxLmConfig *c, int want)
{
  return CLAMP (want, 1, MAX (c->context - 1, 1));
}

guint64
ppx_lm_prefill_bytes (const PpxLmConfig *c, int max_rows)
{
  LmPass a;
  PpxTensorPlan p = {0};
  ppx_lm_plan_pass (&a, c, ppx_lm_prefill_rows_for (c, max_rows), 1, &p); /* one session */
  return p.bytes;
}

PpxLmPrefill *
ppx_lm_prefill_new (PpxLm *lm, PpxLmBatch *b, int max_rows, GError **error)
{
  PpxLmPrefill *f = g_new0 (PpxLmPrefill, 1);
  f->b = b;
  f->lm = lm;
  f->max_rows = ppx_lm_prefill_rows_for (&lm->cfg, max_rows);
  PpxTensorPlan p = {.be = lm->be, .error = error};
  ppx_lm_plan_pass (&f->pass, &lm->cfg, f->max_rows, 1, &p);
  if (p.failed) {
    ppx_lm_prefill_free (f);
    return NULL;
  }
  return f;
}

void
ppx_lm_prefill_free (PpxLmPrefill *f)
{
  if (!f)
    return;
  ppx_lm_pass_free (&f->pass);
  g_free (f);
}

int
ppx_lm_prefill_max_rows (const PpxLmPrefill *f)
{
  return f->max_rows;
}

gboolean
ppx_lm_prefill_row_fits (const PpxLmConfig *c, int t, gint64 pos)
{
  /* A chunk's rows share one window start, max(0, E - context + 1) with E its last position + 1 (the
   * reference's ring rule, ppx_op_attention), where a frame of its own has E = its position + 1: the two
   * agree for every row, and no row overwrites a ring entry an earlier row reads, while E <= context - 1. */
  return t == 0 || pos <= (gint64) c->context - 2;
}

void
ppx_lm_prefill (PpxLmPrefill *f, int slot, const PpxLmRow *rows, int T)
{
  PpxLm *lm = f->lm;
  const PpxLmConfig *c = &lm->cfg;
  g_return_if_fail (T > 0 && T <= f->max_rows);
  g_autofree int32_t *ids = g_new (int32_t, (gsize) T * W), *pos = g_new (int32_t, T);
  gboolean any_emb = FALSE;
  for (int t = 0; t < T; t++) {
    const PpxLmRow *r = &rows[t];
    g_return_if_fail (t == 0 || r->pos == rows[t - 1].pos + 1);
    g_return_if_fail (ppx_lm_prefill_row_fits (c, t, r->pos));
    for (int k = 0; k < W; k++)
      ids[t * W + k] = k < c->n_streams && !r->emb ? r->ids[k] : -1;
    pos[t] = (int32_t) r->pos;
    any_emb |= r->emb != NULL;
  }
  const int32_t s = slot;
  ppx_tensor_upload (f->pass.ids, 0, ids, (gsize) T * W);
  ppx_tensor_upload (f->pass.pos, 0, pos, T);
  ppx_tensor_upload (f->pass.slot, 0, &s, 1);
  ppx_lm_embed_rows (lm, &f->pass, T);
  for (int t = 0; any_emb && t < T; t++)
    if (rows[t].emb)
      ppx_tensor_upload (f->pass.a.x, (gsize) t * c->dim, rows[t].emb, c->dim);
  for (int t = 0; t < T; t++)
    if (rows[t].capture)
      ppx_tensor_download (f->pass.a.x, (gsize) t * c->dim, rows[t].capture, c->dim);
  ppx_lm_temporal_layers (lm, &f->pass, ppx_lm_batch_kcache (f->b), ppx_lm_batch_vcache (f->b), 1, T);
}
