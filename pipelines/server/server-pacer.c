/* personaplex-server: a call's answer pages on a steady clock (server-pacer.h). */
#include "server-pacer.h"

#include "server-player.h"

#include <gst/gst.h>
#include <stdlib.h>
#include <string.h>

GST_DEBUG_CATEGORY_STATIC (pacing_debug);
#define GST_CAT_DEFAULT pacing_debug

#define HISTORY 250                     /* pages (10 s) the delay is measured over */
#define BASE_PAGES 50                   /* pages (2 s) the earliest offset is taken over */
#define QUANTILE 0.995                  /* of their lateness, covered */
#define LEVEL_PAGES 25                  /* a lateness that lasts twice this (2 s) is a new level, not jitter */
#define UPDATE_PAGES 25                 /* the delay is measured again every second */
#define MAX_STEP_US 4000                /* earlier than one page duration after the previous slot at most */
#define RESTART_US G_USEC_PER_SEC       /* a gap this long starts the clock again */
#define EARLY_US 500                    /* a slot this close is due now */
#define MAX_QUEUED_US (2 * G_USEC_PER_SEC) /* audio held at most: beyond it (a client faster than real time) at once */
#define PRIOR_PAGES LEVEL_PAGES     /* a call whose pacer judged this many pages (2 s in) gives new calls their prior */
#define PLAYER_MARGIN_US 5000       /* room kept in the player's buffer (server-player.h) */
#define OPUS_FRAME_US 20000         /* the player plays the first page's pre-skip: whole frames */

/* A page whose lateness is not judged yet: it waits for the LEVEL_PAGES after it. */
typedef struct {
  gint64 offset, base; /* its offset; the earliest offset of the BASE_PAGES up to it */
  gint64 later;        /* the earliest offset of the pages after it so far (its own at first) */
} Pending;

typedef struct {
  GBytes *page;
  gint64 duration_us, slot_us, arrival_us;
  gint64 player_pos_us, player_duration_us; /* as the player counts them */
  PpxPageTrace trace;
} Page;

struct _PpxPacer {
  PpxProto proto;
  guint call_id;
  gboolean enabled, stopped;
  gint64 max_delay_us;
  PpxPacerSend send;
  gpointer user_data;
  GQueue queue;          /* Page */
  gint64 queued_us;      /* the audio in it */
  GSource *source;       /* ready when the head's slot comes */
  gint64 last_sent_us;   /* the previous audio page's send time; 0: none yet */
  guint64 pages;         /* audio pages sent */
  /* the clock (0: none yet) */
  gint64 clock_us, last_arrival_us, pos_us; /* pos: the stream position of the next page */
  gint64 prev_slot_us, prev_duration_us;
  gint64 offsets[BASE_PAGES]; /* arrival - stream position of the latest pages */
  gint64 lateness[HISTORY];   /* each page's offset beyond its level (next_slot) */
  guint n_offsets, n_lateness, next_lateness, since_update;
  Pending pending[LEVEL_PAGES]; /* the latest pages, a ring, not judged yet */
  guint n_pending, next_pending;
  gint64 base_us, delay_us;   /* the earliest offset; the delay beyond it that covers QUANTILE of the lateness */
  gint64 jitter_us;           /* the delay beyond one page duration (the pacing itself), for the prior */
  gint64 prior_us;            /* the other calls' jitter when the clock started: the least delay of its first 2 s */
  gint64 rise_us;             /* the tick's predicted growth to capacity when the call joined (ppx_pacer_set_rise) */
  PpxPlayerModel player;      /* what the caller's player holds (server-player.h) */
  gint64 player_pos_us;       /* the stream position of the next page, as the player counts it */
  gboolean stalled;           /* a page came later than any delay covers; until one comes in time again */
  guint64 stalls;             /* how many times */
  void (*drained) (gpointer user_data);
  gboolean dispatching, freed;
};

/* The pacers of the calls in progress (main thread only): a new call's delay starts from theirs (next_slot). */
static GList *live_pacers;

static void
page_free (gpointer data)
{
  Page *pg = data;
  g_bytes_unref (pg->page);
  g_free (pg);
}

static void
schedule (PpxPacer *p)
{
  if (p->stopped || p->freed) {
    g_source_set_ready_time (p->source, -1);
    return;
  }
  Page *head = g_queue_peek_head (&p->queue);
  if (head)
    g_source_set_ready_time (p->source, head->slot_us);
  else
    g_source_set_ready_time (p->source, p->drained ? 0 : -1);
}

static double
ms (gint64 from, gint64 to)
{
  return from && to ? (double) (to - from) / 1000.0 : -1.0;
}

static void
send_page (PpxPacer *p, Page *pg, gint64 now)
{
  double interval_s = -1;
  if (pg->duration_us > 0) {
    if (p->last_sent_us)
      interval_s = (double) (now - p->last_sent_us) / G_USEC_PER_SEC;
    p->last_sent_us = now;
    p->pages++;
  }
  const PpxPageTrace *t = &pg->trace;
  GST_LOG ("call %u page %" G_GUINT64_FORMAT ": tick end at %.3f ms, encoded %+.2f ms, dispatched %+.2f ms, sent "
           "%+.2f ms (slot %+.2f ms from arrival), interval %.2f ms, delay %.2f ms", p->call_id, p->pages,
           t->tick_end_us / 1000.0, ms (t->tick_end_us, t->encoded_us), ms (t->tick_end_us, t->dispatched_us),
           ms (t->tick_end_us, now), ms (pg->arrival_us, pg->slot_us), interval_s * 1000, p->delay_us / 1000.0);
  double stages[PPX_PAGE_STAGES] = {
    t->tick_end_us && t->encoded_us ? (double) (t->encoded_us - t->tick_end_us) / G_USEC_PER_SEC : -1,
    t->encoded_us && t->dispatched_us ? (double) (t->dispatched_us - t->encoded_us) / G_USEC_PER_SEC : -1,
    t->dispatched_us ? (double) (now - t->dispatched_us) / G_USEC_PER_SEC : -1,
  };
  ppx_metrics_answer_page (p->proto, interval_s, stages);
  if (pg->duration_us > 0)
    ppx_player_model_push (&p->player, now, pg->player_pos_us, pg->player_duration_us);
  if (!p->send (pg->page, p->user_data))
    ppx_pacer_stop (p);
}

static gboolean
dispatch (GSource *source, GSourceFunc callback, gpointer user_data)
{
  PpxPacer *p = user_data;
  p->dispatching = TRUE;
  gint64 now = g_get_monotonic_time ();
  Page *head;
  while (!p->stopped && !p->freed && (head = g_queue_peek_head (&p->queue)) && head->slot_us <= now + EARLY_US) {
    g_queue_pop_head (&p->queue);
    p->queued_us -= head->duration_us;
    send_page (p, head, now);
    page_free (head);
  }
  if (!p->freed && (p->stopped || g_queue_is_empty (&p->queue)) && p->drained) {
    void (*drained) (gpointer) = p->drained;
    p->drained = NULL;
    drained (p->user_data);
  }
  p->dispatching = FALSE;
  if (p->freed) {
    g_source_destroy (p->source);
    g_source_unref (p->source);
    g_queue_clear_full (&p->queue, page_free);
    g_free (p);
    return G_SOURCE_REMOVE;
  }
  schedule (p);
  return G_SOURCE_CONTINUE;
}

static GSourceFuncs pacer_funcs = {NULL, NULL, dispatch, NULL, NULL, NULL};

PpxPacer *
ppx_pacer_new (PpxProto proto, guint call_id, gboolean enabled, guint max_delay_ms, PpxPacerSend send,
               gpointer user_data)
{
  static gsize once = 0;
  if (g_once_init_enter (&once)) {
    GST_DEBUG_CATEGORY_INIT (pacing_debug, "personaplexpacing", 0,
                             "personaplex-server: answer pages, their stages and the per-call clock");
    g_once_init_leave (&once, 1);
  }
  PpxPacer *p = g_new0 (PpxPacer, 1);
  p->proto = proto;
  p->call_id = call_id;
  p->enabled = enabled;
  p->max_delay_us = (gint64) max_delay_ms * 1000;
  p->send = send;
  p->user_data = user_data;
  g_queue_init (&p->queue);
  ppx_player_model_init (&p->player);
  p->source = g_source_new (&pacer_funcs, sizeof (GSource));
  g_source_set_callback (p->source, NULL, p, NULL); /* dispatch reads user_data */
  g_source_set_priority (p->source, G_PRIORITY_HIGH);
  g_source_set_name (p->source, "personaplex answer pacer");
  g_source_set_ready_time (p->source, -1);
  g_source_attach (p->source, NULL);
  if (enabled)
    live_pacers = g_list_prepend (live_pacers, p);
  return p;
}

static int
compare_gint64 (gconstpointer a, gconstpointer b)
{
  gint64 x = *(const gint64 *) a, y = *(const gint64 *) b;
  return x < y ? -1 : x > y;
}

/* The delay that covers QUANTILE of the lateness judged, bounded. In a call's first two seconds, the pages waiting
 * to be judged count too, each against the earliest offset before it alone (as much as it can be judged, or more):
 * the delay grows as the pages come, never by what is judged a second later (a sudden larger delay is a gap). */
static void
measure_delay (PpxPacer *p, gint64 duration_us)
{
  gint64 late[HISTORY + LEVEL_PAGES];
  guint n = p->n_lateness;
  memcpy (late, p->lateness, n * sizeof *late);
  if (p->n_lateness < LEVEL_PAGES)
    for (guint i = 0; i < p->n_pending; i++)
      late[n++] = p->pending[i].offset - p->pending[i].base;
  if (n == 0)
    return;
  qsort (late, n, sizeof *late, compare_gint64);
  gint64 delay = late[(guint) (QUANTILE * (n - 1) + 0.5)];
  delay = MIN (delay, p->max_delay_us + duration_us);
  if (ABS (delay - p->delay_us) >= 1000)
    GST_DEBUG ("call %u: delay %.2f ms (lateness p%.1f of %u pages; the largest %.2f ms)", p->call_id,
               delay / 1000.0, QUANTILE * 100, n, late[n - 1] / 1000.0);
  p->delay_us = delay;
  p->jitter_us = MAX (delay - duration_us, 0);
}

/* The prior of a new call's delay: the largest jitter (the delay beyond one page) measured by the pacers of the
 * calls that have run 2 s or more. A new call's own history is empty: starting from 0, its delay grew over its first
 * seconds (as its pages came later than its first ones: the tick's jitter, and its own first frames, stepped in
 * ticks of their own before it joined the others' grid), and every step later was audio its player missed. */
static gint64
prior_jitter (const PpxPacer *self)
{
  gint64 prior = 0;
  for (GList *l = live_pacers; l; l = l->next) {
    const PpxPacer *o = l->data;
    if (o != self && o->clock_us && o->n_lateness >= PRIOR_PAGES)
      prior = MAX (prior, o->jitter_us);
  }
  return MIN (prior, self->max_delay_us);
}

/* The page's lateness, judged once the LEVEL_PAGES after it came: its offset beyond the earliest of the BASE_PAGES
 * up to it, or beyond the earliest of the pages after it when that is later. Jitter (a late tick, a burst of them)
 * is late against both; a new level (the latency stepped up as calls joined and the tick grew, or the ticks moved)
 * is not late against the pages after it. Taken as jitter, each step of the latency made the delay as much larger
 * for the next 10 s, on top of the step itself (a join ramp of 8 calls on the emulated tick: the delay went to its
 * bound, +70 ms). */
static void
judge_page (PpxPacer *p, const Pending *pg)
{
  p->lateness[p->next_lateness] = pg->offset - MAX (pg->base, pg->later);
  p->next_lateness = (p->next_lateness + 1) % HISTORY;
  p->n_lateness = MIN (p->n_lateness + 1, HISTORY);
}

/* A page's offset: the pages waiting to be judged see it; `judged` FALSE: the page itself is not judged (a stall). */
static void
note_offset (PpxPacer *p, gint64 offset, gboolean judged)
{
  for (guint i = 0; i < p->n_pending; i++)
    p->pending[i].later = MIN (p->pending[i].later, offset);
  if (!judged)
    return;
  if (p->n_pending == LEVEL_PAGES)
    judge_page (p, &p->pending[p->next_pending]);
  p->pending[p->next_pending] = (Pending) {offset, p->base_us, offset};
  p->next_pending = (p->next_pending + 1) % LEVEL_PAGES;
  p->n_pending = MIN (p->n_pending + 1, LEVEL_PAGES);
}

/* The slot of an audio page arriving at `now` (the clock described in server-pacer.h). */
static gint64
next_slot (PpxPacer *p, gint64 now, gint64 duration_us, gint64 player_duration)
{
  if (!p->enabled)
    return now;
  if (!p->clock_us || now - p->last_arrival_us >= RESTART_US) {
    GST_DEBUG ("call %u: clock %s", p->call_id, p->clock_us ? "restarts after a gap" : "starts");
    p->clock_us = now;
    p->pos_us = 0;
    p->n_offsets = p->n_lateness = p->next_lateness = p->since_update = 0;
    p->n_pending = p->next_pending = 0;
    p->prev_slot_us = 0;
    p->delay_us = p->jitter_us = 0;
    p->stalled = FALSE;
    p->prior_us = MAX (prior_jitter (p), MIN (p->rise_us, p->max_delay_us));
    GST_DEBUG ("call %u: the first pages wait %.2f ms at least (the other calls' jitter, the tick's rise %.2f ms)",
               p->call_id, p->prior_us / 1000.0, p->rise_us / 1000.0);
  }
  p->last_arrival_us = now;
  gint64 offset = now - p->clock_us - p->pos_us;
  p->offsets[p->n_offsets++ % BASE_PAGES] = offset;
  p->base_us = G_MAXINT64;
  for (guint i = 0; i < MIN (p->n_offsets, BASE_PAGES); i++)
    p->base_us = MIN (p->base_us, p->offsets[i]);
  gint64 lateness = offset - p->base_us;
  /* A stall (the engine, the server, the host): a page later than the largest delay the pacer may hold is no jitter
   * a delay could cover, and the pages of the catch-up after it come late together, each a little less. Taken as
   * jitter they made the delay its bound for the next 10 s (every call's latency 80 ms higher, and for good where a
   * stall came every few seconds): they are left out of the lateness until a page comes in time again. */
  if (!p->stalled && lateness > p->max_delay_us + duration_us) {
    p->stalled = TRUE;
    p->stalls++;
    GST_DEBUG ("call %u: stall %" G_GUINT64_FORMAT ": a page %.2f ms late (beyond any delay): not jitter", p->call_id,
               p->stalls, lateness / 1000.0);
  } else if (p->stalled && p->clock_us + p->base_us + p->pos_us + p->delay_us >= now) {
    p->stalled = FALSE;
  }
  note_offset (p, offset, !p->stalled);
  if (!p->stalled && (++p->since_update >= UPDATE_PAGES || p->n_lateness < HISTORY)) {
    measure_delay (p, duration_us);
    p->since_update = 0;
  }
  /* A new call's own history is empty: in its first 2 s (before its first pages are judged) its delay is the other
   * calls' jitter at least (the first page's offset is 0) */
  gint64 level = p->base_us + p->delay_us;
  if (p->n_lateness < LEVEL_PAGES)
    level = MAX (level, p->prior_us);
  const gint64 due = p->clock_us + level + p->pos_us;
  gint64 slot = due;
  if (slot < now) {
    /* late (the tick, or the engine catching up after a stall): at once, as before the pacer, so that a lag does
     * not stay in the call's latency */
    GST_DEBUG ("call %u: page %.2f ms late for its slot", p->call_id, (now - slot) / 1000.0);
    slot = now;
  } else if (p->prev_slot_us) {
    /* in time: never a burst. The clock moves earlier by 4 ms a page at most; but when more waits than the delay
     * and two pages (the engine catching up, its pages faster than real time), by half a page, so that the
     * pacer does not keep the lag (one page every 20 ms: still never two at once) */
    gint64 step = p->queued_us > p->delay_us + 2 * duration_us ? p->prev_duration_us / 2 : MAX_STEP_US;
    slot = MAX (slot, p->prev_slot_us + p->prev_duration_us - step);
  }
  /* Never earlier than the caller's player has room for (server-player.h): it has set its buffer by the pages it
   * got, and a page that comes earlier than those is audio it drops. The latency comes down (calls left and the
   * ticks got shorter, a late tick left the delay's window, the last frame of a period came earlier) only as far as
   * the player holds less than at its start: before, the clock moved earlier by 4 ms a page however far, and every
   * ms beyond the player's 10 ms of room was dropped. A stall's catch-up goes as it comes (After a stall). And
   * the hold beyond what the measured delay asks is bounded by max_delay: bursts of late ticks short of a stall
   * take the delay up for 10 s and the player re-buffers at that latency, and held for good each such burst added
   * to the call's latency (on a busy 2-core machine +150-200 ms in 20 s); beyond the bound the clock comes down as
   * before, and the player drops what it cannot hold. */
  if (!p->stalled) {
    gint64 earliest = ppx_player_model_earliest (&p->player, p->player_pos_us, player_duration, PLAYER_MARGIN_US);
    earliest = MIN (earliest, due + p->max_delay_us);
    if (earliest > slot) {
      GST_LOG ("call %u: page held %.2f ms more for the player's room", p->call_id, (earliest - slot) / 1000.0);
      slot = earliest;
    }
  }
  p->prev_slot_us = slot;
  p->prev_duration_us = duration_us;
  p->pos_us += duration_us;
  return slot;
}

void
ppx_pacer_set_rise (PpxPacer *p, gint64 rise_us)
{
  p->rise_us = MAX (rise_us, 0);
}

void
ppx_pacer_push (PpxPacer *p, GBytes *page, gint64 duration_us, const PpxPageTrace *trace)
{
  if (p->stopped) {
    g_bytes_unref (page);
    return;
  }
  gint64 now = g_get_monotonic_time ();
  Page *pg = g_new0 (Page, 1);
  pg->page = page;
  pg->duration_us = duration_us;
  pg->arrival_us = now;
  if (trace)
    pg->trace = *trace;
  if (duration_us > 0) {
    /* the player plays the first page's pre-skip too (the decoder's output), whole 20 ms frames */
    gint64 player_duration = p->player_pos_us ? duration_us
                                              : (duration_us + OPUS_FRAME_US - 1) / OPUS_FRAME_US * OPUS_FRAME_US;
    pg->player_pos_us = p->player_pos_us;
    pg->player_duration_us = player_duration;
    pg->slot_us = next_slot (p, now, duration_us, player_duration);
    p->player_pos_us += player_duration;
    if (pg->slot_us <= now) /* late: what waits before it (earlier in the stream) is late too, and goes with it */
      for (GList *l = p->queue.head; l; l = l->next)
        ((Page *) l->data)->slot_us = MIN (((Page *) l->data)->slot_us, now);
  } else {
    Page *tail = g_queue_peek_tail (&p->queue);
    pg->slot_us = tail ? tail->slot_us : now; /* no slot of its own: right after the page before it */
  }
  g_queue_push_tail (&p->queue, pg);
  p->queued_us += duration_us;
  /* A client that sends faster than real time is answered faster too: the pacer holds at most MAX_QUEUED_US of it
   * (its memory bounded), the rest goes as it comes, to the WebSocket's own bound (a client that does not read). */
  gint64 excess = p->queued_us - MAX_QUEUED_US;
  for (GList *l = p->queue.head; l && excess > 0; l = l->next) {
    Page *q = l->data;
    q->slot_us = MIN (q->slot_us, now);
    excess -= q->duration_us;
  }
  if (!p->dispatching)
    schedule (p);
}

void
ppx_pacer_finish (PpxPacer *p, void (*drained) (gpointer user_data))
{
  p->drained = drained;
  if (!p->dispatching)
    schedule (p);
}

void
ppx_pacer_stop (PpxPacer *p)
{
  p->stopped = TRUE;
  g_queue_clear_full (&p->queue, page_free);
  g_queue_init (&p->queue);
  p->queued_us = 0;
  p->drained = NULL;
  if (!p->dispatching && !p->freed)
    schedule (p);
}

void
ppx_pacer_free (PpxPacer *p)
{
  if (!p)
    return;
  live_pacers = g_list_remove (live_pacers, p);
  p->stopped = TRUE;
  p->drained = NULL;
  if (p->dispatching) {
    p->freed = TRUE; /* dispatch frees it when `send` returns */
    return;
  }
  g_source_destroy (p->source);
  g_source_unref (p->source);
  g_queue_clear_full (&p->queue, page_free);
  g_free (p);
}
