/* personaplexduplex: text_src on a streaming thread of its own.
 *
 * The audio and the text of a frame leave on two source pads. Pushed from
 * one thread, a text branch without a queue deadlocks the preroll: the
 * text sink takes the first text buffer (or GAP) and blocks our thread
 * until the pipeline plays, while the audio sink, which never got its first
 * buffer, keeps the pipeline from playing. So text_src is served by a task
 * of its own, as sparse streams after a demuxer are by the queue that
 * follows it: the streaming thread of the sink pad queues the text buffers
 * and the serialized events for text_src here and never waits for the text
 * branch. The queue holds one item per 80 ms frame (a short string or a
 * GAP), and the audio side stops producing when its own sink blocks.
 *
 * Locking: text->lock guards the queue, the flushing flag and the last flow
 * return; the task pushes without holding it. text->task_lock orders
 * FLUSH_STOP's restart of the task with text_src's deactivation. */
#include "gstpptextpad.h"

GST_DEBUG_CATEGORY_EXTERN (gst_personaplex_duplex_debug);
#define GST_CAT_DEFAULT gst_personaplex_duplex_debug

/* The pad's GstPpTextPad, for its activation function. */
#define TEXT_PAD_KEY "gst-pp-text-pad"

/* Beyond this many waiting items, say once that the text branch is stuck. */
#define TEXT_QUEUE_WARN 1000

static void
text_loop (gpointer user_data)
{
  GstPpTextPad *text = user_data;
  GstMiniObject *item;
  GstFlowReturn ret;

  g_mutex_lock (&text->lock);
  while (!text->flushing && g_queue_is_empty (&text->items))
    g_cond_wait (&text->cond, &text->lock);
  if (text->flushing) {
    g_mutex_unlock (&text->lock);
    gst_pad_pause_task (text->pad);
    return;
  }
  item = g_queue_pop_head (&text->items);
  g_mutex_unlock (&text->lock);

  if (GST_IS_BUFFER (item)) {
    ret = gst_pad_push (text->pad, GST_BUFFER_CAST (item));
    GST_LOG_OBJECT (text->pad, "text buffer pushed: %s", gst_flow_get_name (ret));
    g_mutex_lock (&text->lock);
    /* FLUSHING belongs to a flush that resets the flow anyway */
    if (!text->flushing && ret != GST_FLOW_FLUSHING)
      text->flow = ret;
    g_mutex_unlock (&text->lock);
  } else {
    gst_pad_push_event (text->pad, GST_EVENT_CAST (item));
  }
}

/* Everything queued goes, except the sticky events that survive a flush
 * (stream-start, caps, tags): they still have to reach the peer first. */
static void
drop_queue_locked (GstPpTextPad * text)
{
  GQueue keep = G_QUEUE_INIT;
  GstMiniObject *item;

  while ((item = g_queue_pop_head (&text->items))) {
    if (GST_IS_EVENT (item) && GST_EVENT_IS_STICKY (item)
        && GST_EVENT_TYPE (item) != GST_EVENT_SEGMENT
        && GST_EVENT_TYPE (item) != GST_EVENT_EOS)
      g_queue_push_tail (&keep, item);
    else
      gst_mini_object_unref (item);
  }
  text->items = keep;
}

static void
set_flushing (GstPpTextPad * text, gboolean flushing)
{
  g_mutex_lock (&text->lock);
  text->flushing = flushing;
  text->flow = GST_FLOW_OK;
  text->warned = FALSE;
  if (flushing)
    drop_queue_locked (text);
  g_cond_signal (&text->cond);
  g_mutex_unlock (&text->lock);
}

static gboolean
text_activate_mode (GstPad * pad, GstObject * parent, GstPadMode mode,
    gboolean active)
{
  GstPpTextPad *text = g_object_get_data (G_OBJECT (pad), TEXT_PAD_KEY);

  if (mode != GST_PAD_MODE_PUSH)
    return FALSE;
  /* Under task_lock, against FLUSH_STOP's restart: a restart before this
   * is stopped below, none comes after it. */
  g_mutex_lock (&text->task_lock);
  /* Deactivated, the queue is cleared and stays empty until the next
   * activation: the sink pad is deactivated after text_src, so its thread
   * may still queue this run's sticky events (a CAPS), which must not be
   * pushed ahead of the next run's STREAM_START. */
  g_mutex_lock (&text->lock);
  text->active = active;
  g_queue_clear_full (&text->items, (GDestroyNotify) gst_mini_object_unref);
  g_mutex_unlock (&text->lock);
  set_flushing (text, !active);
  g_mutex_unlock (&text->task_lock);
  if (active)
    return gst_pad_start_task (pad, text_loop, text, NULL);
  /* not under task_lock: this waits for the task's current push, within
   * which a FLUSH_STOP may reach the sink pad (a flushing seek sent
   * upstream by text_src's peer in the task's thread) */
  return gst_pad_stop_task (pad);
}

void
gst_pp_text_pad_init (GstPpTextPad * text, GstPad * pad)
{
  text->pad = pad;
  g_mutex_init (&text->task_lock);
  g_mutex_init (&text->lock);
  g_cond_init (&text->cond);
  g_queue_init (&text->items);
  text->flushing = TRUE;
  text->flow = GST_FLOW_OK;
  g_object_set_data (G_OBJECT (pad), TEXT_PAD_KEY, text);
  gst_pad_set_activatemode_function (text->pad,
      GST_DEBUG_FUNCPTR (text_activate_mode));
}

void
gst_pp_text_pad_clear (GstPpTextPad * text)
{
  g_queue_clear_full (&text->items,
      (GDestroyNotify) gst_mini_object_unref);
  g_mutex_clear (&text->lock);
  g_mutex_clear (&text->task_lock);
  g_cond_clear (&text->cond);
}

void
gst_pp_text_pad_queue (GstPpTextPad * text, GstMiniObject * item)
{
  guint waiting;

  g_mutex_lock (&text->lock);
  /* inactive: nothing is kept; flushing: only the sticky events */
  if (!text->active || (text->flushing && !(GST_IS_EVENT (item)
          && GST_EVENT_IS_STICKY (item)
          && GST_EVENT_TYPE (item) != GST_EVENT_SEGMENT
          && GST_EVENT_TYPE (item) != GST_EVENT_EOS))) {
    g_mutex_unlock (&text->lock);
    gst_mini_object_unref (item);
    return;
  }
  g_queue_push_tail (&text->items, item);
  waiting = g_queue_get_length (&text->items);
  g_cond_signal (&text->cond);
  if (waiting > TEXT_QUEUE_WARN && !text->warned) {
    text->warned = TRUE;
    g_mutex_unlock (&text->lock);
    GST_WARNING_OBJECT (text->pad, "%u text items wait for text_src's peer, "
        "which takes none", waiting);
    return;
  }
  g_mutex_unlock (&text->lock);
}

GstFlowReturn
gst_pp_text_pad_last_flow (GstPpTextPad * text)
{
  GstFlowReturn ret;

  g_mutex_lock (&text->lock);
  ret = text->flow;
  g_mutex_unlock (&text->lock);
  return ret;
}

void
gst_pp_text_pad_flush_start (GstPpTextPad * text)
{
  set_flushing (text, TRUE);
  /* the peer was flushed first, so a push in progress returns now */
  gst_pad_pause_task (text->pad);
}

gboolean
gst_pp_text_pad_flush_stop (GstPpTextPad * text, GstEvent * event)
{
  gboolean ok = gst_pad_push_event (text->pad, event);

  /* Checked and restarted under task_lock: text_src deactivated between
   * the two would keep a task on the inactive pad (holding a thread of the
   * task pool until the pad is activated again or freed; waiting for items
   * forever when the deactivation ran before the flushing flag was
   * cleared). */
  g_mutex_lock (&text->task_lock);
  if (text->active) {
    set_flushing (text, FALSE);
    gst_pad_start_task (text->pad, text_loop, text, NULL);
  }
  g_mutex_unlock (&text->task_lock);
  return ok;
}
