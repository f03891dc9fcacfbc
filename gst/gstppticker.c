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
  /* result of the tick that stepped it */
  gboolean ok;
  GError *error;
  GstPpTickInfo info;
};

struct _GstPpTicker
{
  PpxEngine *engine;
  GMutex lock;
  GCond cond;                   /* a tick ended, a batch completed, a member left */
  GPtrArray *members;           /* GstPpTickerMember*, in join order */
  guint n_waited;               /* members in the wait set */
  guint n_pending;              /* members with a frame waiting for a tick */
  gint64 deadline;              /* of the pending batch (monotonic us) */
  gint64 last_tick;             /* start of the last tick (monotonic us), 0: none yet */
  gboolean running;
  /* the running tick's arrays, members->len long */
  guint capacity;
  GstPpTickerMember **batch;
  PpxSession **sessions;
  const gfloat **ins;
  gfloat **outs;
  PpxFrameResult *res;
};

GstPpTicker *
gst_pp_ticker_new (PpxEngine * engine)
{
  GstPpTicker *t = g_new0 (GstPpTicker, 1);

  t->engine = ppx_engine_ref (engine);
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
  g_ptr_array_remove (t->members, m);
  g_cond_broadcast (&t->cond);
  g_mutex_unlock (&t->lock);
  g_clear_error (&m->error);
  g_free (m);
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
  } else if (!m->waited && !m->flushing) {
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

/* Steps every pending frame as one batch. Called by the leader with the
 * lock held and no tick running; drops the lock while the engine steps. */
static void
run_tick_locked (GstPpTicker * t)
{
  GError *err = NULL;
  guint n = 0, i;
  gint64 start, end;
  gboolean ok;

  ensure_capacity_locked (t, t->members->len);
  for (i = 0; i < t->members->len; i++) {
    GstPpTickerMember *m = g_ptr_array_index (t->members, i);

    if (m->state == MEMBER_PENDING) {
      m->state = MEMBER_RUNNING;
      t->batch[n] = m;
      t->sessions[n] = m->session;
      t->ins[n] = m->in;
      t->outs[n] = m->out;
      memset (&t->res[n], 0, sizeof (PpxFrameResult));
      n++;
    } else if (m->waited && m->state != MEMBER_RUNNING) {
      /* missed this tick: not waited for until it hands in again */
      m->waited = FALSE;
      t->n_waited--;
    }
  }
  t->n_pending = 0;
  t->running = TRUE;
  start = g_get_monotonic_time ();
  t->last_tick = start;
  g_mutex_unlock (&t->lock);

  ok = ppx_engine_step (t->engine, t->sessions, (int) n, t->ins, t->outs,
      t->res, &err);
  end = g_get_monotonic_time ();

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
  g_clear_error (&err);
  g_cond_broadcast (&t->cond);
}

GstPpTickResult
gst_pp_ticker_step (GstPpTickerMember * m, const gfloat * in, gfloat * out,
    PpxFrameResult * res, GstClockTime batch_deadline, GstPpTickInfo * info,
    GError ** error)
{
  GstPpTicker *t;
  GstPpTickResult ret;
  gint64 now, wait_us;

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
  if (!m->waited) {
    m->waited = TRUE;
    t->n_waited++;
  }
  now = g_get_monotonic_time ();
  m->handed_in = now;
  wait_us = GST_CLOCK_TIME_IS_VALID (batch_deadline)
      ? (gint64) MIN (batch_deadline / GST_USECOND,
      (guint64) MAX_BATCH_DEADLINE_US) : MAX_BATCH_DEADLINE_US;
  if (++t->n_pending == 1 || now + wait_us < t->deadline)
    t->deadline = now + wait_us;
  if (t->n_pending >= t->n_waited)
    g_cond_broadcast (&t->cond);

  while (m->state == MEMBER_PENDING || m->state == MEMBER_RUNNING) {
    if (m->state == MEMBER_PENDING && !t->running) {
      if (t->n_pending >= t->n_waited
          || g_get_monotonic_time () >= t->deadline) {
        run_tick_locked (t);
        continue;
      }
      g_cond_wait_until (&t->cond, &t->lock, t->deadline);
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

gint64
gst_pp_ticker_lead_in (GstPpTickerMember * m, gint64 complete_at,
    gint64 period, gint64 granularity)
{
  GstPpTicker *t;
  gint64 d, lead = 0;
  guint others = 0, i;

  g_return_val_if_fail (m != NULL && period > 0, 0);
  t = m->ticker;
  g_mutex_lock (&t->lock);
  for (i = 0; i < t->members->len; i++) {
    GstPpTickerMember *o = g_ptr_array_index (t->members, i);

    others += o != m && o->waited;
  }
  /* the others' frames are handed in around last_tick + k * period (a tick
   * starts when the last of them arrives); a cadence older than a few
   * periods may have gone (the others paused, or left) */
  if (others > 0 && t->last_tick > 0
      && complete_at - t->last_tick < 4 * period + granularity) {
    gint64 g = CLAMP (granularity, 1, period), tol = MIN (LEAD_TOLERANCE_US,
        g / 2);

    /* d: how long after the others' hand-in this member's frames would be
     * complete. A frame is complete only when one of its buffers arrives,
     * every g: a lead of whole buffers moves it to the last arrival at or
     * before the others' hand-in, where it waits less than g for them;
     * within tol after it, the others wait for it instead. */
    d = (complete_at - t->last_tick) % period;
    if (d < 0)
      d += period;
    lead = d > tol ? (d - tol + g - 1) / g * g : 0;
    if (lead >= period)
      lead = 0;
  }
  g_mutex_unlock (&t->lock);
  return lead;
}
