/* The wall times of an engine's recent ticks, and the debug tick delay (tick-times.h). */
#include "tick-times.h"

#include <stdlib.h>
#include <string.h>

/* PPX_DEBUG_TICK_DELAY: at most this many FROM:MS steps. */
#define MAX_DELAY_STEPS 8

struct PpxTickTimes {
  GMutex lock;
  float ms[PPX_ENGINE_TICK_WINDOW]; /* a ring: the last n ticks end at next - 1 */
  guint n, next;
  guint64 ticks;
  double last_ms;
  /* every tick since made */
  double frame_ms;
  guint64 overruns;
  double total_ms;
  guint64 buckets[PPX_ENGINE_TICK_BUCKETS + 1];
  /* the window's figures, computed when first asked for after a tick */
  gboolean summary_valid;
  PpxEngineTickTimes summary;
  /* from tick delay_from[i] on (0-based, ascending), every tick is made delay_us[i] longer */
  guint n_delays;
  guint64 delay_from[MAX_DELAY_STEPS];
  gint64 delay_us[MAX_DELAY_STEPS];
};

static const double bucket_bounds_ms[PPX_ENGINE_TICK_BUCKETS] = {1, 2, 5, 10, 20, 40, 60, 80, 100, 160, 320, 640};

const double *
ppx_engine_tick_bucket_bounds_ms (void)
{
  return bucket_bounds_ms;
}

/* "MS" (every tick) or "FROM:MS[,FROM:MS...]" with FROM ascending tick indices; FALSE when malformed. */
static gboolean
parse_delays (PpxTickTimes *t, const char *spec)
{
  g_auto (GStrv) steps = g_strsplit (spec, ",", -1);
  for (guint i = 0; steps[i]; i++) {
    const char *s = steps[i], *colon = strchr (s, ':');
    char *end = NULL;
    guint64 from = 0;
    if (t->n_delays == MAX_DELAY_STEPS)
      return FALSE;
    if (colon) {
      from = g_ascii_strtoull (s, &end, 10);
      if (end != colon || end == s)
        return FALSE;
      s = colon + 1;
    } else if (steps[1]) {
      return FALSE;
    }
    const double ms = g_ascii_strtod (s, &end);
    if (end == s || *end || !(ms >= 0 && ms <= 10000))
      return FALSE;
    if (t->n_delays > 0 && from <= t->delay_from[t->n_delays - 1])
      return FALSE;
    t->delay_from[t->n_delays] = from;
    t->delay_us[t->n_delays++] = (gint64) (ms * 1000);
  }
  return t->n_delays > 0;
}

PpxTickTimes *
ppx_tick_times_new (double frame_ms)
{
  PpxTickTimes *t = g_new0 (PpxTickTimes, 1);
  t->frame_ms = frame_ms;
  const char *spec = g_getenv ("PPX_DEBUG_TICK_DELAY");
  g_mutex_init (&t->lock);
  if (spec && *spec && !parse_delays (t, spec)) {
    g_warning ("PPX_DEBUG_TICK_DELAY='%s' is not MS or FROM:MS[,FROM:MS...] (tick indices ascending, at most %d "
               "steps, 0 <= MS <= 10000): ignored", spec, MAX_DELAY_STEPS);
    t->n_delays = 0;
  }
  return t;
}

void
ppx_tick_times_free (PpxTickTimes *t)
{
  if (!t)
    return;
  g_mutex_clear (&t->lock);
  g_free (t);
}

void
ppx_tick_times_debug_delay (PpxTickTimes *t)
{
  gint64 delay = 0;
  g_mutex_lock (&t->lock);
  for (guint i = 0; i < t->n_delays && t->delay_from[i] <= t->ticks; i++)
    delay = t->delay_us[i];
  g_mutex_unlock (&t->lock);
  if (delay > 0)
    g_usleep (delay);
}

gint64
ppx_tick_times_add (PpxTickTimes *t, gint64 t0)
{
  const gint64 us = g_get_monotonic_time () - t0;
  ppx_tick_times_record (t, us);
  return us;
}

void
ppx_tick_times_record (PpxTickTimes *t, gint64 us)
{
  g_mutex_lock (&t->lock);
  t->last_ms = us / 1000.0;
  t->ms[t->next] = (float) t->last_ms;
  t->next = (t->next + 1) % PPX_ENGINE_TICK_WINDOW;
  t->n = MIN (t->n + 1, PPX_ENGINE_TICK_WINDOW);
  t->ticks++;
  guint b = 0;
  while (b < PPX_ENGINE_TICK_BUCKETS && t->last_ms > bucket_bounds_ms[b])
    b++;
  t->buckets[b]++;
  t->total_ms += t->last_ms;
  t->overruns += t->last_ms > t->frame_ms;
  t->summary_valid = FALSE;
  g_mutex_unlock (&t->lock);
}

static int
cmp_float (const void *a, const void *b)
{
  const float x = *(const float *) a, y = *(const float *) b;
  return (x > y) - (x < y);
}

/* Nearest rank (1-based) of the p99 of n values, below the largest while 2 <= n < 100. */
static guint
p99_rank (guint n)
{
  guint r = (guint) ((99 * (guint64) n + 99) / 100); /* ceil (0.99 n) */
  return n >= 2 ? MIN (r, n - 1) : r;
}

static void
summarize_locked (PpxTickTimes *t)
{
  PpxEngineTickTimes *s = &t->summary;
  float sorted[PPX_ENGINE_TICK_WINDOW];
  memset (s, 0, sizeof *s);
  s->n = t->n;
  s->ticks = t->ticks;
  s->last_ms = t->last_ms;
  s->overruns = t->overruns;
  s->total_ms = t->total_ms;
  memcpy (s->buckets, t->buckets, sizeof s->buckets);
  if (t->n > 0) {
    /* the ring holds exactly the window once full; before that, its first n entries */
    memcpy (sorted, t->ms, t->n * sizeof (float));
    qsort (sorted, t->n, sizeof (float), cmp_float);
    s->p50_ms = sorted[(t->n + 1) / 2 - 1];
    s->p99_ms = sorted[p99_rank (t->n) - 1];
    s->max_ms = sorted[t->n - 1];
  }
  t->summary_valid = TRUE;
}

void
ppx_tick_times_get (PpxTickTimes *t, PpxEngineTickTimes *out)
{
  g_mutex_lock (&t->lock);
  if (!t->summary_valid)
    summarize_locked (t);
  *out = t->summary;
  g_mutex_unlock (&t->lock);
}
