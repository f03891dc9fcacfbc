/* personaplexduplex: the frame tick shared by the elements of one engine
 * (gstppticker.h describes the rules).
 *
 * Locking: one mutex per ticker guards the members, their states and the
 * counters; it is never held while the engine steps, nor while calling
 * into GStreamer. A tick in progress is marked by `running`; frames handed
 * in meanwhile form the next batch, which starts when the running tick has
 * ended (the engine steps one tick at a time anyway). A member's buffers
 * stay with the tick until its state is DONE, and its thread does not
 * return before that, so a running tick never touches freed memory. */
#include "gstppticker.h"

#include <string.h>

/* The longest batch deadline honoured (longer ones are clamped): an hour. */
#define MAX_BATCH_DEADLINE_US ((gint64) 3600 * G_USEC_PER_SEC)
/* Frame alignment: a frame complete this long after the others' hand-in is
 * waited for rather than led by a buffer (gst_pp_ticker_lead_in). */
#define LEAD_TOLERANCE_US 5000
/* Frame alignment's reference (gst_pp_ticker_lead_in, not loaded): the phase
 * of the ticker's ticks, kept from when the ticker started ticking (or ticked
 * one member alone) rather than taken from the last tick's start, which
 * follows the latest member's hand-in: a joiner led to up to
 * LEAD_TOLERANCE_US after that made itself the latest, and the next joiner
 * aimed at it (the join ramp's split ticks, docs/server.md). A pause of the
 * ticks this many periods long starts a new cadence (as lead_in's). */
#define CADENCE_PERIODS 4
/* The engine's load: the part of the last LOAD_PERIODS periods its ticks
 * took (over the last LOAD_RING ticks at most). Loaded from LOADED_ABOVE on,
 * no longer below UNLOADED_BELOW (gstppticker.h, "Under load"). */
#define LOAD_PERIODS 4
#define LOAD_RING 16
#define LOADED_ABOVE 0.75
#define UNLOADED_BELOW 0.25
/* Catch-up ticks (gstppticker.h, "Behind"): a member is behind from half a
 * period on ... */
/* ... and behind only after that many frames in a row were: one late tick
 * makes the frames it held look behind once, a backlog stays */
#define BEHIND_FRAMES 3
/* After a tick, the next one (overdue: its deadline passed while this one
 * ran) waits up to this long for the members of this one that handed their
 * frame in at once (their next frame is likely complete): without it, the
 * frames handed in while a slow tick ran ticked alone at its end, without
 * the frames of the tick, which then ticked alone in turn (gstppticker.h,
 * "After a stall"). */
#define RETURN_GRACE_US 10000
/* A member whose catch-up did not bring its next frame into the tick on the
 * grid (its lag is its phase, less than a frame) is not caught up again at
 * that lag for this many periods (about the window its lag is measured
 * over), unless its lag grows by half a period. */
#define FUTILE_PERIODS 50

GST_DEBUG_CATEGORY_STATIC (pp_ticker_debug);
#define GST_CAT_DEFAULT pp_ticker_debug

typedef enum
{
  MEMBER_IDLE,                  /* no frame handed in */
  MEMBER_PENDING,               /* frame handed in, waiting for a tick */
  MEMBER_RUNNING,               /* frame in the running tick */
  MEMBER_DONE,                  /* stepped; the result waits to be read */
  MEMBER_WITHDRAWN,             /* taken back by a flush before a tick */
} MemberState;

struct _GstPpTickerMember
{
  GstPpTicker *ticker;
  PpxSession *session;
  MemberState state;
  gboolean waited;              /* in the wait set */
  gboolean flushing;
  const gfloat *in;
  gfloat *out;
  PpxFrameResult *res;
  gint64 handed_in;             /* monotonic us */
  gint64 behind;                /* how far its last frame was behind its
                                 * stream's real time (us, gst_pp_ticker_step),
                                 * 0 until BEHIND_FRAMES in a row were */
  guint behind_frames;          /* frames in a row handed in behind */
  gint64 wait_us;               /* its frame's batch deadline (us) */
  gboolean expected;            /* in the last tick, its frame handed in at
                                 * once: its next frame is likely complete */
  gboolean caught_up;           /* its last frame went in a catch-up tick */
  gint64 cu_behind;             /* ... that far behind */
  gint64 futile_behind;         /* a catch-up at this lag did not help it ... */
  gint64 futile_until;          /* ... until then (monotonic us); 0: none */
  /* result of the tick that stepped it */
  gboolean ok;
  GError *error;
  GstPpTickInfo info;
};

struct _GstPpTicker
{
  PpxEngine *engine;
  gint64 period;                /* of a frame (us) */
  GMutex lock;
  GCond cond;                   /* a tick ended, a batch completed, a member left */
  GPtrArray *members;           /* GstPpTickerMember*, in join order */
  guint n_waited;               /* members in the wait set */
  guint n_pending;              /* members with a frame waiting for a tick */
  gint64 deadline;              /* of the pending batch (monotonic us) */
  gint64 last_tick;             /* start of the last tick (monotonic us), 0: none yet */
  gint64 last_end;              /* end of the last tick */
  gint64 anchor;                /* frame alignment's phase: the latest hand-in
                                 * of the tick that began the cadence, or of
                                 * the last one that stepped the only member
                                 * waited for (monotonic us), 0: none yet */
  gint64 nominal;               /* under load: the start the last tick was due at (its
                                 * due time, or its start when earlier); 0 when not loaded */
  gint64 ring_start[LOAD_RING], ring_end[LOAD_RING];  /* the last ticks */
  guint ring_next;
  gboolean loaded;              /* under load: batches wait for the due tick */
  gint64 last_full_us;          /* the last tick that was not a catch-up: its run time */
  gboolean caught_up;           /* a catch-up tick ran since the last tick on the grid */
  gint64 hold_until;            /* after a tick: the next tick waits for its members
                                 * handed in at once until then, whatever its deadline */
  guint n_expected;             /* members `expected` (their next frame) */
  guint64 catch_ups;            /* catch-up ticks run */
  gint64 emulate_fixed_us, emulate_row_us;    /* PPX_TICK_EMULATE */
  gboolean running;
  /* the live ticks (gst_pp_ticker_history): a ring */
  guint hist_rows[GST_PP_TICK_HISTORY];
  gdouble hist_ms[GST_PP_TICK_HISTORY];
  gint64 hist_end[GST_PP_TICK_HISTORY];
  guint64 hist_total;
  /* the running tick's arrays, members->len long */
  guint capacity;
  GstPpTickerMember **batch;
  PpxSession **sessions;
  const gfloat **ins;
  gfloat **outs;
  PpxFrameResult *res;
};

GstPpTicker *
gst_pp_ticker_new (PpxEngine * engine, gint64 period)
{
  GstPpTicker *t = g_new0 (GstPpTicker, 1);
  const gchar *emulate;

  GST_DEBUG_CATEGORY_INIT (pp_ticker_debug, "personaplexticker", 0,
      "personaplexduplex: the shared engine's ticks");
  t->engine = ppx_engine_ref (engine);
  t->period = MAX (period, 1);
  emulate = g_getenv ("PPX_TICK_EMULATE");
  if (emulate != NULL && *emulate != '\0') {
    gchar *end = NULL;
    gdouble fixed = g_ascii_strtod (emulate, &end), row = 0;

    if (end != NULL && *end == ',')
      row = g_ascii_strtod (end + 1, &end);
    if (end == NULL || *end != '\0' || fixed < 0 || row < 0 || fixed > 1e4
        || row > 1e4)
      g_warning ("PPX_TICK_EMULATE='%s': not FIXED_MS[,PER_ROW_MS]; ignored",
          emulate);
    else {
      t->emulate_fixed_us = (gint64) (fixed * 1000);
      t->emulate_row_us = (gint64) (row * 1000);
    }
    GST_INFO ("emulated device: every tick lasts at least %.3f ms + %.3f ms "
        "a row", t->emulate_fixed_us / 1000.0, t->emulate_row_us / 1000.0);
  }
  g_mutex_init (&t->lock);
  g_cond_init (&t->cond);
  t->members = g_ptr_array_new ();
  return t;
}

void
gst_pp_ticker_free (GstPpTicker * t)
{
  if (t == NULL)
    return;
  g_assert (t->members->len == 0);
  g_ptr_array_unref (t->members);
  g_free (t->batch);
  g_free (t->sessions);
  g_free (t->ins);
  g_free (t->outs);
  g_free (t->res);
  g_mutex_clear (&t->lock);
  g_cond_clear (&t->cond);
  ppx_engine_unref (t->engine);
  g_free (t);
}

GstPpTickerMember *
gst_pp_ticker_join (GstPpTicker * t, PpxSession * session)
{
  GstPpTickerMember *m = g_new0 (GstPpTickerMember, 1);

  m->ticker = t;
  m->session = session;
  m->state = MEMBER_IDLE;
  g_mutex_lock (&t->lock);
  g_ptr_array_add (t->members, m);
  g_mutex_unlock (&t->lock);
  return m;
}

/* Leaves the wait set (call with the lock held); wakes the waiters when
 * the batch is complete without this member. */
static void
unwait_locked (GstPpTicker * t, GstPpTickerMember * m)
{
  if (!m->waited)
    return;
  m->waited = FALSE;
  t->n_waited--;
  if (t->n_pending > 0 && t->n_pending >= t->n_waited)
    g_cond_broadcast (&t->cond);
}

/* Takes back a frame that waits for a tick (lock held). */
static void
withdraw_locked (GstPpTicker * t, GstPpTickerMember * m)
{
  if (m->state != MEMBER_PENDING)
    return;
  m->state = MEMBER_WITHDRAWN;
  t->n_pending--;
  g_cond_broadcast (&t->cond);
}

/* The member handed its next frame in, or left (lock held). */
static void
unexpect_locked (GstPpTicker * t, GstPpTickerMember * m)
{
  if (!m->expected)
    return;
  m->expected = FALSE;
  if (--t->n_expected == 0)
    g_cond_broadcast (&t->cond);
}

void
gst_pp_ticker_leave (GstPpTickerMember * m)
{
  GstPpTicker *t;

  if (m == NULL)
    return;
  t = m->ticker;
  g_mutex_lock (&t->lock);
  while (m->state == MEMBER_RUNNING)
    g_cond_wait (&t->cond, &t->lock);
  withdraw_locked (t, m);
  unwait_locked (t, m);
  unexpect_locked (t, m);
  g_ptr_array_remove (t->members, m);
  g_cond_broadcast (&t->cond);
  g_mutex_unlock (&t->lock);
  g_clear_error (&m->error);
  g_free (m);
}

/* Whether the ticker is ticking at @at: a tick started within
 * CADENCE_PERIODS periods before (the cadence frame alignment aligns to). */
static gboolean
ticking_at_locked (GstPpTicker * t, gint64 at)
{
  return t->last_tick > 0 && at - t->last_tick <= CADENCE_PERIODS * t->period;
}

void
gst_pp_ticker_set_active (GstPpTickerMember * m, gboolean active)
{
  GstPpTicker *t;

  if (m == NULL)
    return;
  t = m->ticker;
  g_mutex_lock (&t->lock);
  if (!active) {
    unwait_locked (t, m);
  } else if (!m->waited && !m->flushing
      && !ticking_at_locked (t, g_get_monotonic_time ())) {
    /* streams that start together tick together from their first frames;
     * one that joins a ticker already ticking is waited for from its first
     * hand-in: its first frame completes up to a frame (and its lead) after
     * its start, and the others' tick in between waited for it until its
     * deadline (every join of a ramp delayed one tick of every call by
     * 15-20 ms: docs/server.md, "Joins and leaves") */
    m->waited = TRUE;
    t->n_waited++;
  }
  g_mutex_unlock (&t->lock);
}

void
gst_pp_ticker_set_flushing (GstPpTickerMember * m, gboolean flushing)
{
  GstPpTicker *t;

  if (m == NULL)
    return;
  t = m->ticker;
  g_mutex_lock (&t->lock);
  m->flushing = flushing;
  if (flushing) {
    withdraw_locked (t, m);
    unwait_locked (t, m);
    unexpect_locked (t, m);
  }
  g_mutex_unlock (&t->lock);
}

static void
ensure_capacity_locked (GstPpTicker * t, guint n)
{
  if (n <= t->capacity)
    return;
  t->capacity = MAX (n, 2 * t->capacity);
  t->batch = g_renew (GstPpTickerMember *, t->batch, t->capacity);
  t->sessions = g_renew (PpxSession *, t->sessions, t->capacity);
  t->ins = g_renew (const gfloat *, t->ins, t->capacity);
  t->outs = g_renew (gfloat *, t->outs, t->capacity);
  t->res = g_renew (PpxFrameResult, t->res, t->capacity);
}

/* Records a tick and updates the load (lock held). */
static void
note_load_locked (GstPpTicker * t, gint64 start, gint64 end)
{
  const gint64 window = LOAD_PERIODS * t->period;
  gint64 busy = 0, from = end - window;
  gdouble load;
  guint i;

  t->ring_start[t->ring_next] = start;
  t->ring_end[t->ring_next] = end;
  t->ring_next = (t->ring_next + 1) % LOAD_RING;
  /* the ring's oldest tick: a window that reaches further back than the
   * ring is measured from that tick on */
  if (t->ring_start[t->ring_next] > from)
    from = t->ring_start[t->ring_next];
  for (i = 0; i < LOAD_RING; i++)
    if (t->ring_end[i] > from)
      busy += t->ring_end[i] - MAX (t->ring_start[i], from);
  load = end > from ? (gdouble) busy / (end - from) : 1.0;
  if (!t->loaded && load >= LOADED_ABOVE)
    t->loaded = TRUE;
  else if (t->loaded && load < UNLOADED_BELOW)
    t->loaded = FALSE;
  GST_LOG ("engine busy %.0f %% of the last %.0f ms: %s", 100 * load,
      (end - from) / 1000.0, t->loaded ? "loaded" : "not loaded");
}

/* PPX_TICK_EMULATE (docs/testing.md): the tick that started at @start
 * lasts at least the emulated device's time for @n rows, slept (a GPU's
 * tick takes wall time, not the CPU's); the frames' step_ms say so. Returns
 * the end of the tick. Called without the lock (the members are RUNNING). */
static gint64
emulate_device (GstPpTicker * t, gint64 start, guint n)
{
  gint64 until = start + t->emulate_fixed_us + n * t->emulate_row_us, now;
  guint i;

  now = g_get_monotonic_time ();
  if (t->emulate_fixed_us == 0 && t->emulate_row_us == 0)
    return now;
  if (until > now)
    g_usleep ((gulong) (until - now));
  now = g_get_monotonic_time ();
  for (i = 0; i < n; i++)
    t->res[i].step_ms = (now - start) / 1000.0;
  return now;
}

/* Whether a catch-up tick would help member @m (lock held): its frame is
 * behind by half a period or more, and its next frame, as late as this one
 * beyond its lag, comes in time for the tick due next on the grid (a
 * member whose lag is only its phase, less than a frame, would miss that
 * tick all the same: the catch-up would cost a tick's fixed time a period
 * and bring it nothing); nor did a catch-up at about that lag fail to help
 * it lately. */
static gboolean
helpable_locked (GstPpTicker * t, GstPpTickerMember * m)
{
  if (m->behind < t->period / 2)
    return FALSE;
  if (t->nominal > 0 && m->handed_in - m->behind > t->nominal + m->wait_us)
    return FALSE;
  if (m->futile_until > m->handed_in
      && m->behind < m->futile_behind + t->period / 2)
    return FALSE;
  return TRUE;
}

/* Steps every pending frame as one batch. Called by the leader with the
 * lock held and no tick running; drops the lock while the engine steps. A
 * catch-up tick (@catch_up) steps the pending members that are behind
 * between the ticks due on the grid: the others' frames wait for the next
 * tick, none of them has missed it, and the grid stays. */
static void
run_tick_locked (GstPpTicker * t, gboolean catch_up)
{
  GError *err = NULL;
  guint n = 0, i, missed = 0, waited = t->n_waited;
  gint64 oldest = G_MAXINT64, newest = 0;
  gint64 start, end;
  gboolean ok;

  ensure_capacity_locked (t, t->members->len);
  for (i = 0; i < t->members->len; i++) {
    GstPpTickerMember *m = g_ptr_array_index (t->members, i);

    if (m->state == MEMBER_PENDING && (!catch_up || helpable_locked (t, m))) {
      if (catch_up) {
        m->caught_up = TRUE;
        m->cu_behind = m->behind;
      } else
        m->caught_up = FALSE;   /* its catch-up brought it in time */
      m->state = MEMBER_RUNNING;
      t->batch[n] = m;
      t->sessions[n] = m->session;
      t->ins[n] = m->in;
      t->outs[n] = m->out;
      memset (&t->res[n], 0, sizeof (PpxFrameResult));
      oldest = MIN (oldest, m->handed_in);
      newest = MAX (newest, m->handed_in);
      n++;
    } else if (!catch_up && m->waited && m->state != MEMBER_RUNNING) {
      /* missed this tick: not waited for until it hands in again */
      m->waited = FALSE;
      t->n_waited--;
      missed++;
      if (m->caught_up) {
        /* its catch-up did not bring its next frame in time for this tick */
        m->futile_behind = m->cu_behind;
        m->futile_until = g_get_monotonic_time ()
            + FUTILE_PERIODS * t->period;
        m->caught_up = FALSE;
      }
    }
  }
  t->n_pending -= n;
  t->running = TRUE;
  start = g_get_monotonic_time ();
  /* the alignment's phase: set by the first tick of a cadence (none for
   * CADENCE_PERIODS), and while a member ticks alone; then kept whoever
   * joins (gstppticker.h, "Frame alignment"). Its latest hand-in: the
   * tick's start when the set was complete, a member's phase when the tick
   * started on a deadline (a member in the wait set had not handed in) */
  if (!catch_up && n > 0 && (t->anchor == 0
          || !ticking_at_locked (t, start) || (waited == 1 && n == 1)))
    t->anchor = newest;
  t->last_tick = start;
  /* Under load the ticks keep to a grid of periods: a tick that starts
   * late (it waited for a frame past its due time) does not make the next
   * one due later, or the calls that were on time would each wait that
   * much longer from then on; one that starts early (every frame was in)
   * moves the grid to it. More than a period late (a stall): a new grid. */
  if (catch_up) {
    t->caught_up = TRUE;
    t->catch_ups++;
  } else if (!t->loaded)
    t->nominal = 0;
  else if (t->nominal == 0 || start < t->nominal + t->period
      || start - (t->nominal + t->period) > t->period)
    t->nominal = start;
  else
    t->nominal += t->period;
  if (!catch_up)
    t->caught_up = FALSE;
  g_mutex_unlock (&t->lock);

  ok = ppx_engine_step (t->engine, t->sessions, (int) n, t->ins, t->outs,
      t->res, &err);
  end = emulate_device (t, start, n);
  GST_DEBUG ("%s of %u rows (%u waited for, %u missed it; %u members): "
      "%.1f ms after the last one ended, its oldest frame waited %.1f ms, "
      "ran %.1f ms", catch_up ? "catch-up tick" : "tick", n, waited, missed,
      t->members->len,
      t->last_end ? (start - t->last_end) / 1000.0 : -1.0,
      (start - oldest) / 1000.0, (end - start) / 1000.0);

  g_mutex_lock (&t->lock);
  for (i = 0; i < n; i++) {
    GstPpTickerMember *m = t->batch[i];

    *m->res = t->res[i];
    m->ok = ok;
    g_clear_error (&m->error);
    if (!ok)
      m->error = g_error_copy (err);
    m->info.batch_size = n;
    m->info.tick_ms = (end - start) / 1000.0;
    m->info.wait_ms = (start - m->handed_in) / 1000.0;
    m->state = MEMBER_DONE;
  }
  t->running = FALSE;
  t->last_end = end;
  if (!catch_up)
    t->last_full_us = end - start;
  /* its members that were behind hand their next frames in at once: the
   * tick that is due (overdue, maybe) takes them along rather than leaving
   * them out of the wait set and ticking twice a period from then on */
  for (i = 0; i < t->members->len; i++)
    ((GstPpTickerMember *) g_ptr_array_index (t->members, i))->expected =
        FALSE;
  t->n_expected = 0;
  for (i = 0; i < n; i++)
    if (t->batch[i]->behind_frames > 0) {
      t->batch[i]->expected = TRUE;
      t->n_expected++;
    }
  t->hold_until = t->n_expected > 0 ? end + RETURN_GRACE_US : 0;
  if (n > 0) {
    guint h = (guint) (t->hist_total % GST_PP_TICK_HISTORY);

    t->hist_rows[h] = n;
    t->hist_ms[h] = (end - start) / 1000.0;
    t->hist_end[h] = end;
    t->hist_total++;
  }
  note_load_locked (t, start, end);
  g_clear_error (&err);
  g_cond_broadcast (&t->cond);
}

/* The fewest rows of a recent tick that are at least @from (0: none), and in
 * *@ms the shortest of the ticks of that many rows (lock held). */
static guint
least_rows_from_locked (GstPpTicker * t, guint from, gdouble * ms)
{
  guint n = (guint) MIN (t->hist_total, (guint64) GST_PP_TICK_HISTORY), i;
  guint best = 0;

  for (i = 0; i < n; i++) {
    guint r = t->hist_rows[i];

    if (r < from)
      continue;
    if (best == 0 || r < best) {
      best = r;
      *ms = t->hist_ms[i];
    } else if (r == best) {
      *ms = MIN (*ms, t->hist_ms[i]);
    }
  }
  return best;
}

/* How long a tick of @rows lasts (us, lock held), from the recent ticks: the
 * shortest tick of the fewest rows at or above @rows, less the cost of the
 * rows between, at the rate between it and the next larger count seen (a
 * tick's time is about a fixed part and a part a row; where it grows slower
 * than linearly this over-estimates); the last full tick when nothing
 * recent is that large. */
static gint64
estimate_tick_locked (GstPpTicker * t, guint rows)
{
  gdouble ms_a = -1, ms_b = -1, est;
  guint a = least_rows_from_locked (t, rows, &ms_a), b;

  if (a == 0)
    return t->last_full_us;
  b = least_rows_from_locked (t, a + 1, &ms_b);
  est = ms_a;
  if (b > 0 && ms_b > ms_a)
    est -= (ms_b - ms_a) / (b - a) * (a - rows);
  return (gint64) (CLAMP (est, 0, ms_a) * 1000);
}

/* Whether a catch-up tick may run now (lock held, no tick running): under
 * load, some frames pending are behind and a catch-up would help them
 * (helpable_locked), some member in time has not handed its frame in (when
 * every member still to come was behind, they come at once and the tick on
 * the grid takes them all: a catch-up of the first few would only delay it,
 * and the backlog with it), the members of the last tick that were behind are
 * back (or RETURN_GRACE_US passed since it ended), none ran since the last
 * tick on the grid, and the tick due next, started when the catch-up ends
 * (late, maybe), still ends by the time the one after it is due: the grid is
 * back one tick later, and no tick after it runs overdue without the members
 * that come in time (a catch-up allowed to make the next tick half a period
 * late did that, and the split ticks cost more than it caught up: 16 calls
 * joining on 64 ms ticks fell 0.5-1 s behind). *@wake: when to look again
 * (the grace's end), or G_MAXINT64. */
static gboolean
catch_up_ready_locked (GstPpTicker * t, gint64 now, gint64 * wake)
{
  const gint64 behind = t->period / 2;
  gboolean in_time_missing = FALSE;
  guint i, rows = 0;

  *wake = G_MAXINT64;
  if (!t->loaded || t->nominal == 0 || t->caught_up || t->n_pending == 0
      || t->n_pending >= t->n_waited)
    return FALSE;
  for (i = 0; i < t->members->len; i++) {
    GstPpTickerMember *o = g_ptr_array_index (t->members, i);

    if (o->state == MEMBER_PENDING && helpable_locked (t, o))
      rows++;
    if (o->state != MEMBER_PENDING && o->waited && o->behind < behind)
      in_time_missing = TRUE;
  }
  if (rows == 0 || !in_time_missing
      || now + estimate_tick_locked (t, rows) + t->last_full_us
      > t->nominal + 2 * t->period)
    return FALSE;
  if (t->n_expected > 0 && now < t->hold_until) {
    *wake = t->hold_until;
    return FALSE;
  }
  return TRUE;
}

GstPpTickResult
gst_pp_ticker_step (GstPpTickerMember * m, const gfloat * in, gfloat * out,
    PpxFrameResult * res, GstClockTime batch_deadline, gint64 behind_us,
    GstPpTickInfo * info, GError ** error)
{
  GstPpTicker *t;
  GstPpTickResult ret;
  gint64 now, wait_us, due, wake;

  g_return_val_if_fail (m != NULL, GST_PP_TICK_ERROR);
  t = m->ticker;
  g_mutex_lock (&t->lock);
  if (m->flushing) {
    g_mutex_unlock (&t->lock);
    return GST_PP_TICK_FLUSHING;
  }
  m->in = in;
  m->out = out;
  m->res = res;
  m->state = MEMBER_PENDING;
  m->behind_frames = behind_us >= t->period / 2 ? m->behind_frames + 1 : 0;
  m->behind = m->behind_frames >= BEHIND_FRAMES ? behind_us : 0;
  unexpect_locked (t, m);
  if (!m->waited) {
    m->waited = TRUE;
    t->n_waited++;
  }
  now = g_get_monotonic_time ();
  m->handed_in = now;
  wait_us = GST_CLOCK_TIME_IS_VALID (batch_deadline)
      ? (gint64) MIN (batch_deadline / GST_USECOND,
      (guint64) MAX_BATCH_DEADLINE_US) : MAX_BATCH_DEADLINE_US;
  /* Under load the others' frames are due a period after the last tick
   * started: a frame handed in before that (while a tick runs, or early in
   * the period) waits for them until then plus its batch deadline. */
  due = t->loaded && t->last_tick > 0
      ? MAX (now, (t->nominal > 0 ? t->nominal : t->last_tick) + t->period)
      : now;
  m->wait_us = wait_us;
  if (++t->n_pending == 1 || due + wait_us < t->deadline)
    t->deadline = due + wait_us;
  if (t->n_pending >= t->n_waited)
    g_cond_broadcast (&t->cond);
  GST_LOG ("member %p handed in %.1f ms after the last tick ended%s, %.1f ms behind: %u of %u waited pending",
      m, t->last_end ? (now - t->last_end) / 1000.0 : -1.0, t->running ? " (a tick runs)" : "",
      behind_us / 1000.0, t->n_pending, t->n_waited);

  while (m->state == MEMBER_PENDING || m->state == MEMBER_RUNNING) {
    if (m->state == MEMBER_PENDING && !t->running) {
      /* the members of the last tick expected back hold an overdue tick
       * until they are, RETURN_GRACE_US at most */
      gint64 hold = t->n_expected > 0 ? t->hold_until : 0;

      now = g_get_monotonic_time ();
      if (t->n_pending >= t->n_waited
          || (now >= t->deadline && now >= hold)) {
        run_tick_locked (t, FALSE);
        continue;
      }
      if (catch_up_ready_locked (t, now, &wake)) {
        run_tick_locked (t, TRUE);
        continue;
      }
      g_cond_wait_until (&t->cond, &t->lock,
          MIN (MAX (t->deadline, hold), wake));
    } else {
      g_cond_wait (&t->cond, &t->lock);
    }
  }

  if (m->state == MEMBER_DONE) {
    ret = m->ok ? GST_PP_TICK_OK : GST_PP_TICK_ERROR;
    if (!m->ok && m->error)
      g_propagate_error (error, g_steal_pointer (&m->error));
    else if (!m->ok)
      g_set_error (error, PPX_ERROR, PPX_ERROR_INVALID, "the tick failed");
    if (info)
      *info = m->info;
  } else {
    ret = GST_PP_TICK_FLUSHING;
  }
  m->state = MEMBER_IDLE;
  g_mutex_unlock (&t->lock);
  return ret;
}

/* How long after the others' hand-in (the reference phase) a frame
 * complete at @complete_at is, modulo @period; -1 when nothing to align
 * with (lock held). */
static gint64
phase_locked (GstPpTicker * t, GstPpTickerMember * m, gint64 complete_at,
    gint64 period, gint64 granularity)
{
  gint64 d, ref, cadence;
  guint others = 0, i;

  for (i = 0; i < t->members->len; i++) {
    GstPpTickerMember *o = g_ptr_array_index (t->members, i);

    others += o != m && o->waited;
  }
  /* the others' frames are handed in around ref + k * period: the phase
   * the ticker's ticks began at (`anchor`: the first call's hand-in, whom
   * the joiners were led to; not the last tick's start, which follows the
   * latest of them and, joiner by joiner, ratchets later), under load the
   * grid the ticks are due on (not a start that waited for a late frame); a
   * cadence whose last tick is older than a few periods may have gone (the
   * others paused, or left) */
  cadence = t->nominal > 0 ? t->nominal : t->last_tick;
  ref = t->nominal > 0 ? t->nominal : t->anchor > 0 ? t->anchor : t->last_tick;
  if (others == 0 || cadence == 0
      || complete_at - cadence >= CADENCE_PERIODS * period + granularity)
    return -1;
  d = (complete_at - ref) % period;
  return d < 0 ? d + period : d;
}

gint64
gst_pp_ticker_lead_in (GstPpTickerMember * m, gint64 complete_at,
    gint64 period, gint64 granularity)
{
  GstPpTicker *t;
  gint64 d, lead = -1;

  g_return_val_if_fail (m != NULL && period > 0, 0);
  t = m->ticker;
  g_mutex_lock (&t->lock);
  d = phase_locked (t, m, complete_at, period, granularity);
  if (d >= 0) {
    gint64 g = CLAMP (granularity, 1, period), tol = MIN (LEAD_TOLERANCE_US,
        g / 2);

    /* d: how long after the others' hand-in this member's frames would be
     * complete. A frame is complete only when one of its buffers arrives,
     * every g: a lead of whole buffers moves it to the last arrival at or
     * before the others' hand-in, where it waits less than g for them;
     * within tol after it, the others wait for it instead. */
    lead = d > tol ? (d - tol + g - 1) / g * g : 0;
    if (lead >= period)
      lead = 0;
  }
  g_mutex_unlock (&t->lock);
  return lead;
}

gint64
gst_pp_ticker_phase (GstPpTickerMember * m, gint64 at, gint64 period)
{
  GstPpTicker *t;
  gint64 d;

  g_return_val_if_fail (m != NULL && period > 0, -1);
  t = m->ticker;
  g_mutex_lock (&t->lock);
  d = phase_locked (t, m, at, period, 0);
  g_mutex_unlock (&t->lock);
  return d;
}

guint
gst_pp_ticker_history (GstPpTicker * t, guint * rows, gdouble * ms,
    gint64 * end_us, guint max, guint64 * total)
{
  guint n, i;
  guint64 first;

  g_mutex_lock (&t->lock);
  n = (guint) MIN (MIN (t->hist_total, (guint64) GST_PP_TICK_HISTORY), max);
  first = t->hist_total - n;
  for (i = 0; i < n; i++) {
    guint h = (guint) ((first + i) % GST_PP_TICK_HISTORY);

    if (rows)
      rows[i] = t->hist_rows[h];
    if (ms)
      ms[i] = t->hist_ms[h];
    if (end_us)
      end_us[i] = t->hist_end[h];
  }
  if (total)
    *total = t->hist_total;
  g_mutex_unlock (&t->lock);
  return n;
}

gdouble
gst_pp_ticker_emulated_ms (GstPpTicker * t, guint rows)
{
  return (t->emulate_fixed_us + (gint64) rows * t->emulate_row_us) / 1000.0;
}
