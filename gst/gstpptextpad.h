/* personaplexduplex: text_src on a streaming thread of its own.
 * Internal to the plugin. */
#ifndef __GST_PP_TEXT_PAD_H__
#define __GST_PP_TEXT_PAD_H__

#include <gst/gst.h>

G_BEGIN_DECLS

/* The text pad's queue and task state; lock guards everything but pad and
 * task_lock. task_lock orders FLUSH_STOP's check-and-restart of the task
 * (the sink pad's streaming thread) with the activation function's change
 * of active (the state-change thread), so a flush that ends while text_src
 * is being deactivated cannot restart the task after it was stopped; active
 * is written under both locks and read under either. */
typedef struct
{
  GstPad *pad;                  /* text_src (not a reference) */
  GMutex task_lock;
  GMutex lock;
  GCond cond;
  GQueue items;                 /* GstBuffer / serialized GstEvent */
  gboolean active;              /* text_src is active: items may be queued */
  gboolean flushing;
  gboolean warned;
  GstFlowReturn flow;           /* the peer's answer to the last buffer */
} GstPpTextPad;

/* Installs the activation function of @pad (which starts and stops its
 * task) and initialises the queue. */
void gst_pp_text_pad_init (GstPpTextPad * text, GstPad * pad);

/* Frees what is still queued. */
void gst_pp_text_pad_clear (GstPpTextPad * text);

/* Queues a buffer or a serialized event for text_src (takes ownership);
 * never blocks. While text_src is inactive nothing is kept; while it is
 * flushing, only the sticky events that survive a flush. */
void gst_pp_text_pad_queue (GstPpTextPad * text, GstMiniObject * item);

/* What text_src's peer answered to the last buffer pushed (GST_FLOW_OK
 * before any). */
GstFlowReturn gst_pp_text_pad_last_flow (GstPpTextPad * text);

/* FLUSH_START (after it was sent downstream) and FLUSH_STOP (before it is
 * sent downstream; pushes it itself): drop the queue, park and restart the
 * task. */
void gst_pp_text_pad_flush_start (GstPpTextPad * text);
gboolean gst_pp_text_pad_flush_stop (GstPpTextPad * text, GstEvent * event);

G_END_DECLS

#endif /* __GST_PP_TEXT_PAD_H__ */
