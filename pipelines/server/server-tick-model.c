/* personaplex-server: the learnt tick cost (server-tick-model.h). */
#include "server-tick-model.h"

#include "personaplex.h"

#include <stdlib.h>
#include <string.h>

/* Known costs: ascending row counts, their cost (ms), the least-squares slope of cost on rows. */
typedef struct {
  guint n;
  guint *rows;
  double *ms;
  double slope;
} Points;

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
  /* the known points, rebuilt when dirty: ascending rows, their cost, the least-squares slope; `known` with the
   * live ticks in (they replace the measurement at their count), `measured` from the start-up measurement alone */
  gboolean dirty;
  Points known, measured;
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
  m->known.rows = g_new0 (guint, m->max_rows + 1);
  m->known.ms = g_new0 (double, m->max_rows + 1);
  m->measured.rows = g_new0 (guint, m->max_rows + 1);
  m->measured.ms = g_new0 (double, m->max_rows + 1);
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
  g_free (m->known.rows);
  g_free (m->known.ms);
  g_free (m->measured.rows);
  g_free (m->measured.ms);
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
  return (guint) ppx_engine_bucket_rows ((int) MIN (n, (guint) G_MAXINT / 2), (int) m->max_rows);
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

/* The points of every row count with a cost (`measured_only`: the start-up measurement's alone), and their slope. */
static void
build_points (PpxTickModel *m, gboolean measured_only, Points *pt)
{
  pt->n = 0;
  for (guint r = 1; r <= m->max_rows; r++) {
    const double c = !m->rows[r] ? 0 : measured_only ? m->rows[r]->measured : cost_of (m->rows[r], m->now);
    if (c > 0) {
      pt->rows[pt->n] = r;
      pt->ms[pt->n++] = c;
    }
  }
  /* least squares of cost on rows */
  pt->slope = 0;
  if (pt->n >= 2) {
    double sx = 0, sy = 0, sxx = 0, sxy = 0;
    const double n = pt->n;
    for (guint i = 0; i < pt->n; i++) {
      sx += pt->rows[i];
      sy += pt->ms[i];
      sxx += (double) pt->rows[i] * pt->rows[i];
      sxy += pt->rows[i] * pt->ms[i];
    }
    const double d = n * sxx - sx * sx;
    pt->slope = d > 0 ? MAX ((n * sxy - sx * sy) / d, 0.0) : 0;
  } else if (pt->n == 1) {
    /* one point: as if the cost were all per row (the cautious guess) */
    pt->slope = pt->ms[0] / pt->rows[0];
  }
}

static void
rebuild (PpxTickModel *m)
{
  if (!m->dirty)
    return;
  m->dirty = FALSE;
  build_points (m, FALSE, &m->known);
  build_points (m, TRUE, &m->measured);
}

double
ppx_tick_model_rise (PpxTickModel *m, guint open, guint capacity, double live_ms)
{
  if (open >= capacity)
    return 0;
  double now = ppx_tick_model_predict (m, MAX (open, 1));
  if (live_ms > 0 && live_ms < now)
    now = live_ms;
  return MAX (ppx_tick_model_predict (m, capacity) - now, 0);
}

guint
ppx_tick_model_known (PpxTickModel *m)
{
  rebuild (m);
  return m->known.n;
}

/* The rule (server-tick-model.h) over one set of points, for a tick of r rows; 0 without points. */
static double
predict_from (const Points *pt, guint r)
{
  if (pt->n == 0)
    return 0;
  double p, floor_ms = 0;
  guint i = 0;
  for (; i < pt->n && pt->rows[i] < r; i++)
    floor_ms = MAX (floor_ms, pt->ms[i]);
  if (i < pt->n && pt->rows[i] == r)
    p = pt->ms[i];
  else if (i == 0)
    p = pt->ms[0]; /* below the smallest known count: its cost */
  else if (i == pt->n)
    p = pt->ms[i - 1] + pt->slope * (r - pt->rows[i - 1]);
  else
    p = pt->ms[i - 1] + (pt->ms[i] - pt->ms[i - 1]) * (double) (r - pt->rows[i - 1]) /
                          (double) (pt->rows[i] - pt->rows[i - 1]);
  return MAX (p, floor_ms);
}

double
ppx_tick_model_predict (PpxTickModel *m, guint n)
{
  rebuild (m);
  if (m->known.n == 0 || n == 0)
    return 0;
  const guint r = ppx_tick_model_rows (m, n);
  /* live ticks run at their calls' context, shorter than the measurement's full one until the calls are minutes
   * old: they may raise the prediction (a GPU that slowed down), never lower it below the measurement's */
  return MAX (predict_from (&m->known, r), predict_from (&m->measured, r));
}

guint
ppx_tick_model_calls_within (PpxTickModel *m, double budget_ms, guint limit)
{
  rebuild (m);
  if (m->known.n == 0)
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
