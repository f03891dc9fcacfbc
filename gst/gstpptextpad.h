/* personaplexduplex: text_src on a streaming thread of its own.
 * Internal to the plugin. */
#ifndef __GST_PP_TEXT_PAD_H__
#define __GST_PP_TEXT_PAD_H__

#include "gstpersonaplexduplex.h"

G_BEGIN_DECLS

/* Installs the activation function of text_src (which starts and stops its
 * task) and initialises the queue. */
void gst_pp_text_pad_init (GstPersonaplexDuplex * self);

/* Frees what is still queued. */
void gst_pp_text_pad_finalize (GstPersonaplexDuplex * self);

/* Queues a buffer or a serialized event for text_src (takes ownership);
 * never blocks. */
void gst_pp_text_pad_queue (GstPersonaplexDuplex * self, GstMiniObject * item);

/* What text_src's peer answered to the last buffer pushed (GST_FLOW_OK
 * before any). */
GstFlowReturn gst_pp_text_pad_last_flow (GstPersonaplexDuplex * self);

/* FLUSH_START (after it was sent downstream) and FLUSH_STOP (before it is
 * sent downstream; pushes it itself): drop the queue, park and restart the
 * task. */
void gst_pp_text_pad_flush_start (GstPersonaplexDuplex * self);
gboolean gst_pp_text_pad_flush_stop (GstPersonaplexDuplex * self,
    GstEvent * event);

G_END_DECLS

#endif /* __GST_PP_TEXT_PAD_H__ */
