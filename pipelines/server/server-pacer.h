/* personaplex-server: one call's answer pages, sent on a steady per-call clock (docs/server.md, "Pacing").
 *
 * The engine answers a call an 80 ms frame a tick, and the encoder makes two 40 ms Ogg pages of it at once. Sent as
 * they come, they leave as a burst of two every 80 ms, and a tick late by a few ms leaves a player that holds little
 * (the reference web client's: 80 ms) dry. The pacer sends one page per page duration instead: each page's slot is
 * the previous page's slot plus its duration, and a page waits for its slot.
 *
 * The playout delay adapts to the tick's jitter as measured, bounded:
 *   - a page that comes after its slot is late: it goes at once and the clock restarts from it, so the pages after
 *     it wait by as much (the delay grows by the lateness observed);
 *   - once a second, the smallest margin of that second's pages (slot minus arrival: how early the earliest-needed
 *     page came) is how much delay went unused: the clock moves earlier by 1 ms of it a second, and at once by all
 *     of what exceeds max_delay; never more than 4 ms a page, so no interval is shorter than 36 ms;
 *   - a gap of a second or more (no audio) starts the clock again.
 * Pages of no duration (the OpusHead and OpusTags pages, an empty last page) take no slot: they go when they reach
 * the head of the queue.
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
