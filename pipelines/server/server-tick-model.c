/* personaplex-server: the learnt tick cost (server-tick-model.h). */
#include "server-tick-model.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
  double measured;                       /* start-up p99, 0: none */
  double live[PPX_TICK_MODEL_LIVE_KEEP]; /* a ring of the last live ticks */
  gint64 live_t[PPX_TICK_MODEL_LIVE_KEEP]; /* when each ended */
  guint n_live, next;
} RowCost;

struct _PpxTickModel {
  guint max_rows;
  gboolean bucketed;
  gint64 now;     /* of the predictions (monotonic us) */
  RowCost **rows; /* [max_rows + 1], NULL until a tick of that many rows is known */
  /* the known points, rebuilt when dirty: ascending rows, their cost, the least-squares slope */
  gboolean dirty;
  guint n_known;
  guint *k_rows;
  double *k_ms;
  double slope;
};

static int
cmp_double (const void *a, const void *b)
{
  const double x = *(const double *) a, y = *(const double *) b;
  return (x > y) - (x < y);
}

double
ppx_tick_p99 (double *v, guint n)
{
  if (n == 0)
    return 0;
  qsort (v, n, sizeof (double), cmp_double);
  guint r = (guint) ((99 * (guint64) n + 99) / 100);
  if (n >= 2)
    r = MIN (r, n - 1);
  return v[r - 1];
}

PpxTickModel *
ppx_tick_model_new (guint max_rows, gboolean bucketed)
{
  PpxTickModel *m = g_new0 (PpxTickModel, 1);
  m->max_rows = MAX (max_rows, 1);
  m->bucketed = bucketed;
  m->rows = g_new0 (RowCost *, m->max_rows + 1);
  m->k_rows = g_new0 (guint, m->max_rows + 1);
  m->k_ms = g_new0 (double, m->max_rows + 1);
  return m;
}

void
ppx_tick_model_free (PpxTickModel *m)
{
  if (!m)
    return;
  for (guint i = 0; i <= m->max_rows; i++)
    g_free (m->rows[i]);
  g_free (m->rows);
  g_free (m->k_rows);
  g_free (m->k_ms);
  g_free (m);
}

void
ppx_tick_model_set_bucketed (PpxTickModel *m, gboolean bucketed)
{
  m->bucketed = bucketed;
}

guint
ppx_tick_model_rows (const PpxTickModel *m, guint n)
{
  if (!m->bucketed || n == 0)
    return n;
  guint b = 1;
  while (b < n && b < m->max_rows)
    b *= 2;
  return MIN (b, m->max_rows);
}

static RowCost *
row_cost (PpxTickModel *m, guint rows)
{
  if (rows == 0 || rows > m->max_rows)
    return NULL;
  if (!m->rows[rows])
    m->rows[rows] = g_new0 (RowCost, 1);
  m->dirty = TRUE;
  return m->rows[rows];
}

void
ppx_tick_model_add_measured (PpxTickModel *m, guint rows, double p99_ms)
{
  RowCost *c = row_cost (m, rows);
  if (c && p99_ms > 0)
    c->measured = p99_ms;
}

void
ppx_tick_model_set_now (PpxTickModel *m, gint64 now_us)
{
  if (now_us != m->now)
    m->dirty = TRUE;
  m->now = now_us;
}

void
ppx_tick_model_add_live (PpxTickModel *m, guint rows, double ms, gint64 t_us)
{
  RowCost *c = row_cost (m, rows);
  if (!c || !(ms >= 0))
    return;
  c->live[c->next] = ms;
  c->live_t[c->next] = t_us;
  c->next = (c->next + 1) % PPX_TICK_MODEL_LIVE_KEEP;
  c->n_live = MIN (c->n_live + 1, PPX_TICK_MODEL_LIVE_KEEP);
}

/* A count's cost: the p99 of its recent live ticks once there are enough of them, else the measurement; 0:
 * unknown. */
static double
cost_of (const RowCost *c, gint64 now)
{
  double v[PPX_TICK_MODEL_LIVE_KEEP];
  guint n = 0;
  for (guint i = 0; i < c->n_live; i++)
    if (now - c->live_t[i] <= (gint64) PPX_TICK_MODEL_LIVE_TTL_S * G_USEC_PER_SEC)
      v[n++] = c->live[i];
  return n >= PPX_TICK_MODEL_LIVE_MIN ? ppx_tick_p99 (v, n) : c->measured;
}

static void
rebuild (PpxTickModel *m)
{
  if (!m->dirty)
    return;
  m->dirty = FALSE;
  m->n_known = 0;
  for (guint r = 1; r <= m->max_rows; r++) {
    const double c = m->rows[r] ? cost_of (m->rows[r], m->now) : 0;
    if (c > 0) {
      m->k_rows[m->n_known] = r;
      m->k_ms[m->n_known++] = c;
    }
  }
  /* least squares of cost on rows */
  m->slope = 0;
  if (m->n_known >= 2) {
    double sx = 0, sy = 0, sxx = 0, sxy = 0;
    const double n = m->n_known;
    for (guint i = 0; i < m->n_known; i++) {
      sx += m->k_rows[i];
      sy += m->k_ms[i];
      sxx += (double) m->k_rows[i] * m->k_rows[i];
      sxy += m->k_rows[i] * m->k_ms[i];
    }
    const double d = n * sxx - sx * sx;
    m->slope = d > 0 ? MAX ((n * sxy - sx * sy) / d, 0.0) : 0;
  } else if (m->n_known == 1) {
    /* one point: as if the cost were all per row (the cautious guess) */
    m->slope = m->k_ms[0] / m->k_rows[0];
  }
}

guint
ppx_tick_model_known (PpxTickModel *m)
{
  rebuild (m);
  return m->n_known;
}

double
ppx_tick_model_predict (PpxTickModel *m, guint n)
{
  rebuild (m);
  if (m->n_known == 0 || n == 0)
    return 0;
  const guint r = ppx_tick_model_rows (m, n);
  double p, floor_ms = 0;
  guint i = 0;
  for (; i < m->n_known && m->k_rows[i] < r; i++)
    floor_ms = MAX (floor_ms, m->k_ms[i]);
  if (i < m->n_known && m->k_rows[i] == r)
    p = m->k_ms[i];
  else if (i == 0)
    p = m->k_ms[0]; /* below the smallest known count: its cost */
  else if (i == m->n_known)
    p = m->k_ms[i - 1] + m->slope * (r - m->k_rows[i - 1]);
  else
    p = m->k_ms[i - 1] + (m->k_ms[i] - m->k_ms[i - 1]) * (double) (r - m->k_rows[i - 1]) /
                           (double) (m->k_rows[i] - m->k_rows[i - 1]);
  return MAX (p, floor_ms);
}

guint
ppx_tick_model_calls_within (PpxTickModel *m, double budget_ms, guint limit)
{
  rebuild (m);
  if (m->n_known == 0)
    return limit;
  /* the prediction grows with n: the last n within the budget, by bisection */
  guint lo = 0, hi = limit;
  while (lo < hi) {
    const guint mid = lo + (hi - lo + 1) / 2;
    if (ppx_tick_model_predict (m, mid) <= budget_ms)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}
