/* personaplex-server: the bound on a call's audio waiting for the model (docs/server.md, "Falling behind").
 *
 * The decoded audio of a call waits in a queue in front of its personaplexduplex. When the model is behind a call
 * whose audio comes in real time (the engine overloaded, a burst of late audio), more than the bound never waits:
 * the oldest is dropped, down to half the bound at once, as a live system must, rather than answered ever later.
 * Probes on the queue do it: on its input, how far the call's audio runs ahead of the wall clock; on its output,
 * the drop (each one a single gap, so the element starts one new timeline, docs/element.md "Framing and
 * timestamps", without resetting the conversation), counted in /metrics (personaplex_input_dropped_seconds_total),
 * the call's first drop logged. A client that sends faster than real time (a file) is not dropped: the queue
 * blocks at 4 bounds and TCP flow control slows it to the model's pace. */
#ifndef PPX_SERVER_BACKLOG_H
#define PPX_SERVER_BACKLOG_H

#include <gst/gst.h>

#include "server-metrics.h"

G_BEGIN_DECLS

typedef struct _PpxBacklog PpxBacklog;

/* Bounds `queue` (a queue element) to `max_ms` of audio, leaky downstream, and watches what it drops for call
 * `call_id` of `proto`. The watch lives as long as the queue's src pad, or the reference returned. */
PpxBacklog *ppx_backlog_attach (GstElement *queue, PpxProto proto, guint call_id, guint max_ms);
/* Milliseconds of audio that left the queue so far (taken by the model or dropped), by its size; from any thread. */
gint64 ppx_backlog_taken_ms (PpxBacklog *b);
/* Seconds dropped so far; from any thread. */
double ppx_backlog_dropped_s (PpxBacklog *b);
void ppx_backlog_unref (PpxBacklog *b);

G_END_DECLS
#endif
