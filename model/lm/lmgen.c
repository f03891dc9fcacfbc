#include "lmgen.h"

G_STATIC_ASSERT (PPX_LMGEN_MAX_STREAMS == PPX_MAX_STREAMS);
G_STATIC_ASSERT (PPX_LMGEN_NCOLS == PPX_LMGEN_COLS);

void
ppx_lmgen_init (PpxLmGen *g, const PpxLmConfig *cfg)
{
  memset (g, 0, sizeof *g);
  g->cfg = *cfg;
  for (int k = 0; k < PPX_MAX_STREAMS; k++)
    for (int c = 0; c < PPX_LMGEN_COLS; c++)
      g->cache[k][c] = -2; /* "ungenerated" */
}

void
ppx_lmgen_reset (PpxLmGen *g)
{
  g->offset = 0;
  memset (g->provided, 0, sizeof g->provided);
}

static inline int
col (gint64 n)
{
  return (int) (n % PPX_LMGEN_COLS);
}

static int
start_token (const PpxLmConfig *c, int k)
{
  return k == 0 ? c->text_card : c->card;
}

static void
provide (PpxLmGen *g, int k, gint64 at, int token)
{
  g->cache[k][col (at)] = token;
  g->provided[k][col (at)] = TRUE;
}

static void
write_inputs (PpxLmGen *g, const int *user, const int *agent, int text)
{
  const PpxLmConfig *c = &g->cfg;
  const int nq = c->n_q / 2;
  const gint64 o = g->offset;
  for (int q = 0; user && q < nq; q++)
    provide (g, 1 + nq + q, o + c->delays[1 + nq + q], user[q]);
  for (int q = 0; agent && q < nq; q++)
    provide (g, 1 + q, o + c->delays[1 + q], agent[q]);
  if (text >= 0)
    provide (g, 0, o, text);
  for (int k = 0; k < c->n_streams; k++)
    if (o <= c->delays[k])
      provide (g, k, o, start_token (c, k));
}

gboolean
ppx_lmgen_prepare (PpxLmGen *g, const int *user, const int *agent, int text, const float *embedding,
                   const PpxSampling *smp, PpxLmRow *row)
{
  const PpxLmConfig *c = &g->cfg;
  const int ns = c->n_streams;
  write_inputs (g, user, agent, text);
  if (g->offset == 0) {
    for (int k = 0; k < ns; k++)
      provide (g, k, 0, start_token (c, k));
    g->offset = 1;
    if (!embedding)
      return FALSE;
    /* step_embeddings runs the model once on its first call: write its inputs again at o = 1 */
    write_inputs (g, user, agent, text);
  }
  const gint64 o = g->offset;
  const int in = col (o - 1), tg = col (o);
  memset (row, 0, sizeof *row);
  row->pos = o - 1; /* one model call per LMGen call from o = 1 on */
  row->n_steps = 0;
  for (int k = 0; k <= c->dep_q; k++) {
    row->forced[k] = g->provided[k][tg] ? g->cache[k][tg] : -1;
    if (k > 0 && row->forced[k] < 0)
      row->n_steps = k; /* the depformer must reach the last stream that is not provided */
  }
  if (g->full_depformer)
    row->n_steps = c->dep_q;
  row->sample = row->n_steps > 0 || row->forced[0] < 0;
  row->smp = *smp;
  row->frame = (guint64) o;
  row->emb = embedding;
  if (!embedding) {
    for (int k = 0; k < ns; k++)
      row->ids[k] = g->cache[k][in];
    if (g->capture) {
      guint at = g->capture->len;
      g_array_set_size (g->capture, at + c->dim);
      row->capture = &g_array_index (g->capture, float, at);
    }
  }
  return TRUE;
}

gboolean
ppx_lmgen_finish (PpxLmGen *g, const PpxLmRow *row, int *out)
{
  const PpxLmConfig *c = &g->cfg;
  const int ns = c->n_streams;
  const gint64 o = g->offset;
  const int in = col (o - 1), tg = col (o);
  const int n_steps = row->sample ? row->n_steps : -1;
  g->last_dep_steps = row->sample ? row->n_steps : 0;
  for (int k = 0; k < ns; k++)
    g->provided[k][in] = FALSE;
  for (int k = 0; k <= MIN (n_steps, ns - 1); k++)
    if (!g->provided[k][tg])
      g->cache[k][tg] = row->out[k];
  if (o <= c->max_delay) {
    g->offset++;
    return FALSE;
  }
  for (int k = 0; k < ns; k++)
    out[k] = g->cache[k][col (o - 1 + c->delays[k])];
  g->offset++;
  return TRUE;
}

/* ---- the device layout ---- */

void
ppx_lmgen_dims (const PpxLmConfig *c, PpxLmgenDims *d)
{
  memset (d, 0, sizeof *d);
  d->n_streams = c->n_streams;
  d->n_user = c->n_q / 2;
  d->dep_q = c->dep_q;
  d->max_delay = c->max_delay;
  d->text_start = start_token (c, 0);
  d->audio_start = start_token (c, 1);
  for (int k = 0; k < PPX_MAX_STREAMS; k++)
    d->delays[k] = c->delays[k];
}

void
ppx_lmgen_pack (const PpxLmGen *g, int32_t *st)
{
  memset (st, 0, PPX_LMGEN_STATE * sizeof (int32_t));
  ppx_lmgen_set_offset (st, g->offset);
  st[PPX_LMGEN_S_FLAGS] = g->full_depformer ? PPX_LMGEN_FLAG_FULL_DEPFORMER : 0;
  for (int k = 0; k < PPX_MAX_STREAMS; k++) {
    for (int c = 0; c < PPX_LMGEN_COLS; c++) {
      st[PPX_LMGEN_S_CACHE + k * PPX_LMGEN_COLS + c] = g->cache[k][c];
      if (g->provided[k][c])
        st[PPX_LMGEN_S_PROVIDED + k] |= 1 << c;
    }
  }
}

void
ppx_lmgen_unpack (PpxLmGen *g, const int32_t *st)
{
  g->offset = ppx_lmgen_offset (st);
  g->full_depformer = (st[PPX_LMGEN_S_FLAGS] & PPX_LMGEN_FLAG_FULL_DEPFORMER) != 0;
  g->last_dep_steps = MAX (st[PPX_LMGEN_S_STEPS], 0);
  for (int k = 0; k < PPX_MAX_STREAMS; k++) {
    for (int c = 0; c < PPX_LMGEN_COLS; c++) {
      g->cache[k][c] = st[PPX_LMGEN_S_CACHE + k * PPX_LMGEN_COLS + c];
      g->provided[k][c] = ppx_lmgen_is_provided (st, k, c);
    }
  }
}

gboolean
ppx_lmgen_peek_conversation (const PpxLmGen *g, int *n_steps, gboolean *sample)
{
  PpxLmGen copy = *g;
  copy.capture = NULL;
  const int user[PPX_MAX_STREAMS] = {0}; /* the values do not change what is provided */
  const PpxSampling smp = {0};
  PpxLmRow row;
  if (!ppx_lmgen_prepare (&copy, user, NULL, -1, NULL, &smp, &row))
    return FALSE;
  *n_steps = row.n_steps;
  *sample = row.sample;
  return TRUE;
}
