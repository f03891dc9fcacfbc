/* personaplexduplex: the element's own latency and its automatic processing deadline (docs/element.md,
 * "Latency").
 *
 * processing-deadline = GST_CLOCK_TIME_NONE (-1, the default) is automatic: the engine's tick p99 over its
 * last ticks (ppx_engine_tick_times) plus a margin, one frame (80 ms) before the engine has measured a tick.
 * Within a stream (from READY->PAUSED) the answer never goes below what was last answered: it only grows,
 * and when the measured p99 has eaten half the margin, the element posts a latency message so that the
 * pipeline asks again and grows its latency. Pure logic over a GstPpLatency that the stream keeps under its
 * element's object lock; the stream answers the queries and posts the messages. Internal to the plugin. */
#ifndef __GST_PP_LATENCY_H__
#define __GST_PP_LATENCY_H__

#include <gst/gst.h>
#include "personaplex.h"

G_BEGIN_DECLS

/* The value of processing-deadline that selects the automatic deadline. */
#define GST_PP_PROCESSING_DEADLINE_AUTO GST_CLOCK_TIME_NONE
/* The automatic deadline before any tick was measured: one frame, the bound of any tick in real time. */
#define GST_PP_AUTO_DEADLINE_UNMEASURED (80 * GST_MSECOND)
/* The margin over the measured p99: max (GST_PP_AUTO_MARGIN_MIN, p99 / GST_PP_AUTO_MARGIN_DIVISOR). */
#define GST_PP_AUTO_MARGIN_MIN (10 * GST_MSECOND)
#define GST_PP_AUTO_MARGIN_DIVISOR 4

/* What a stream answered (its element's object lock). */
typedef struct
{
  GstClockTime answered;        /* processing deadline of the last LATENCY answer; NONE: none since start */
  GstClockTime posted;          /* automatic deadline a latency message was last posted for; NONE: none */
} GstPpLatency;

/* A new stream: nothing answered yet. */
void gst_pp_latency_reset (GstPpLatency * l);

/* The automatic deadline for these tick times: p99 + margin rounded up to a whole millisecond, or
 * GST_PP_AUTO_DEADLINE_UNMEASURED while the engine has measured fewer than 2 ticks. */
GstClockTime gst_pp_latency_auto_deadline (const PpxEngineTickTimes * times);

/* The processing deadline to answer a LATENCY query with, recorded as answered: @setting when explicit;
 * automatic: the automatic deadline of @engine's ticks (NULL: none measured), never below the last answer. */
GstClockTime gst_pp_latency_answer (GstPpLatency * l, GstClockTime setting,
    PpxEngine * engine);

/* After a tick, in automatic mode: TRUE (the caller posts a latency message) when the p99 of @times plus
 * half its margin has passed the last answer and the deadline of the last message posted, if any: a message
 * for every growth of at least half a margin, none while the p99 stays within it. FALSE for an explicit
 * @setting or before any answer (the first answer will be the measured one). */
gboolean gst_pp_latency_grown (GstPpLatency * l, GstClockTime setting,
    const PpxEngineTickTimes * times);

G_END_DECLS

#endif /* __GST_PP_LATENCY_H__ */
