/* personaplexduplex: the streaming side (pads, framing, events, queries).
 * Internal to the plugin. */
#ifndef __GST_PP_STREAM_H__
#define __GST_PP_STREAM_H__

#include "gstpersonaplexduplex.h"

G_BEGIN_DECLS

/* Installs the chain, event and query functions on the element's pads. */
void gst_pp_stream_setup_pads (GstPersonaplexDuplex * self);

/* READY->PAUSED, after the session exists: fresh streaming state. */
void gst_pp_stream_start (GstPersonaplexDuplex * self);

/* PAUSED->READY, after the pads are deactivated: frees frame buffers. */
void gst_pp_stream_stop (GstPersonaplexDuplex * self);

/* The element's own latency: one frame plus processing-deadline. */
GstClockTime gst_pp_stream_own_latency (GstPersonaplexDuplex * self);

G_END_DECLS

#endif /* __GST_PP_STREAM_H__ */
