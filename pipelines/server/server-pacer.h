/* personaplex-server: one call's answer pages, sent on a steady per-call clock (docs/server.md, "Pacing").
 *
 * The engine answers a call an 80 ms frame a tick, and the encoder makes two 40 ms Ogg pages of it at once. Sent as
 * they come, they leave as a burst of two every 80 ms, and a tick late by a few ms leaves a player that holds little
 * (the reference web client's: 80 ms) dry. The pacer sends one page per page duration instead: each page's slot is
 * the previous page's slot plus its duration, and a page waits for its slot.
 *
 * The playout delay is measured, bounded:
 *   - each page's offset is its arrival minus its stream position (the durations of the pages before it) on the
 *     call's clock; its lateness is that offset beyond the earliest offset of the 50 pages (2 s) up to it, or beyond
 *     the earliest offset of the 25 pages after it when that is later (judged a second late): jitter is late
 *     against both, a new level of the latency (it stepped up for good) is not late against the pages after it;
 *   - a stall (a page later than max_delay plus one page: no delay covers it) and the pages that come late after it
 *     (the catch-up) are no jitter: their lateness is not counted, until a page comes in time again;
 *   - the delay is the p99.5 of the lateness of the last 250 pages judged (10 s), measured again every 25 pages (in a
 *     call's first 2 s: with the pages not judged yet, against the earliest before them), at most max_delay plus one page;
 *     a page's slot is the earliest offset plus its stream position plus the delay;
 *   - a page that comes after its slot goes at once, with whatever still waits before it (after a stall of the
 *     engine the pages it catches up with go as they come, as before the pacer: the lag does not stay in the call's
 *     latency);
 *   - a page in time is not sent earlier than the previous slot plus its duration minus 4 ms (when the delay falls
 *     the clock moves earlier by at most 4 ms a page: no interval under 36 ms; but by half a page when more than
 *     the delay and two pages wait: the engine catching up, faster than real time); a main loop that wakes late
 *     sends what is due then (after a stall of the server a burst rather than a lag kept);
 *   - and, but in a stall, no earlier than the caller's player has room for (server-player.h: the reference web
 *     client's player, modelled from the send times): the latency comes down (calls left, the ticks got shorter,
 *     a late tick left the delay's window) only as far as the player holds less than at its start, for a page
 *     earlier than that is audio it drops; held so at most max_delay beyond what the delay asks (bursts of late
 *     ticks would otherwise add up in the latency for good);
 *   - a new call's first pages (its first 2 s, before its own lateness is judged) wait at least the largest jitter
 *     (the delay beyond one page) of the calls that have run 2 s or more: from a delay of 0, its delay grew as its
 *     pages came later than its first ones, and each step later was audio its player missed; and at least the
 *     tick's growth the admission predicts from the tick when it joined to the capacity at full context (the rise,
 *     ppx_pacer_set_rise): the calls that join an idle or lightly loaded engine saw their latency rise with every
 *     call after them, after their player had started, and missed what the rise took beyond its 50 ms. Held after
 *     the first 2 s by the player's room (below) while the tick grows into it;
 *   - a gap of a second or more (no audio) starts the clock again.
 * As the two pages of a frame come together, the second one's offset is one page duration less: the delay counts
 * from it, so one page duration of the delay is the pacing itself and the rest covers the tick's jitter.
 * Pages of no duration (the OpusHead and OpusTags pages, an empty last page) take no slot: they go when they reach
 * the head of the queue. At most 2 s of audio wait: a client that sends faster than real time (a file) is answered
 * faster than real time, and beyond 2 s queued its pages go as they come (to the WebSocket's own bound).
 *
 * Every page sent is traced (GStreamer debug category `personaplexpacing`, level LOG; the clock's changes at
 * DEBUG) with the times of its stages, and counted in /metrics (server-metrics.h): the interval since the call's
 * previous page, and each stage's time. Main thread only (the default main context). */
#ifndef PPX_SERVER_PACER_H
#define PPX_SERVER_PACER_H

#include <glib.h>

#include "server-metrics.h"

G_BEGIN_DECLS

/* When a page went through the stages before the pacer (g_get_monotonic_time; 0: not known). */
typedef struct {
  gint64 tick_end_us;   /* the answer frame it comes from left the engine (entered the encoder) */
  gint64 encoded_us;    /* the page was complete (the encoder's thread) */
  gint64 dispatched_us; /* the main loop took it */
} PpxPageTrace;

/* Sends one page (the pacer keeps its reference); FALSE when the call can send nothing more. */
typedef gboolean (*PpxPacerSend) (GBytes *page, gpointer user_data);

typedef struct _PpxPacer PpxPacer;

/* `enabled` FALSE: every page goes as soon as it comes, as before the pacer (traced and counted all the same).
 * max_delay_ms bounds the delay the pacer adds to the earliest page of a frame. */
PpxPacer *ppx_pacer_new (PpxProto proto, guint call_id, gboolean enabled, guint max_delay_ms, PpxPacerSend send,
                         gpointer user_data);
/* The tick's predicted growth while the server fills (server-http.h): the call's first pages wait at least that
 * (bounded by max_delay), as they wait for the other calls' jitter. */
void ppx_pacer_set_rise (PpxPacer *p, gint64 rise_us);
/* Queues `page` (taken) of `duration_us` of audio (0: a header page). */
void ppx_pacer_push (PpxPacer *p, GBytes *page, gint64 duration_us, const PpxPageTrace *trace);
/* Calls `drained` once, from the main loop, when every page queued so far is sent (or the pacer stopped). */
void ppx_pacer_finish (PpxPacer *p, void (*drained) (gpointer user_data));
/* Drops what is queued and sends nothing more (the call ended). */
void ppx_pacer_stop (PpxPacer *p);
/* Stops and frees; safe from the pacer's own `send` callback (the memory goes after it returns). */
void ppx_pacer_free (PpxPacer *p);

G_END_DECLS
#endif
