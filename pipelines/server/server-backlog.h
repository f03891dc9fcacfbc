/* personaplex-server: the bound on a call's audio waiting for the model (docs/server.md, "Falling behind").
 *
 * The decoded audio of a call waits in a queue in front of its personaplexduplex. When the model is behind that
 * call (the engine overloaded, a burst of late audio), the queue holds at most the bound: beyond it the oldest
 * audio is dropped (queue leaky=downstream), as a live system must, rather than answered ever later. A probe on
 * the queue's output counts what was dropped (the jump of the timestamps at the buffer the queue marks DISCONT
 * after a drop) in /metrics (personaplex_input_dropped_seconds_total) and logs the call's first drop; the element
 * then starts a new timeline (docs/element.md, "Framing and timestamps"), without resetting the conversation. */
#ifndef PPX_SERVER_BACKLOG_H
#define PPX_SERVER_BACKLOG_H

#include <gst/gst.h>

#include "server-metrics.h"

G_BEGIN_DECLS

typedef struct _PpxBacklog PpxBacklog;

/* Bounds `queue` (a queue element) to `max_ms` of audio, leaky downstream, and watches what it drops for call
 * `call_id` of `proto`. The watch lives as long as the queue's src pad, or the reference returned. */
PpxBacklog *ppx_backlog_attach (GstElement *queue, PpxProto proto, guint call_id, guint max_ms);
/* Seconds dropped so far; from any thread. */
double ppx_backlog_dropped_s (PpxBacklog *b);
void ppx_backlog_unref (PpxBacklog *b);

G_END_DECLS
#endif
