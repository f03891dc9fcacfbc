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
 * Locking: text_lock guards the queue, the flushing flag and the last flow
 * return; the task pushes without holding it. */
#include "gstpptextpad.h"

#define GST_CAT_DEFAULT gst_personaplex_duplex_debug

/* Beyond this many waiting items, say once that the text branch is stuck. */
#define TEXT_QUEUE_WARN 1000

static void
text_loop (gpointer user_data)
{
  GstPersonaplexDuplex *self = user_data;
  GstMiniObject *item;
  GstFlowReturn ret;

  g_mutex_lock (&self->text_lock);
  while (!self->text_flushing && g_queue_is_empty (&self->text_items))
    g_cond_wait (&self->text_cond, &self->text_lock);
  if (self->text_flushing) {
    g_mutex_unlock (&self->text_lock);
    gst_pad_pause_task (self->textpad);
    return;
  }
  item = g_queue_pop_head (&self->text_items);
  g_mutex_unlock (&self->text_lock);

  if (GST_IS_BUFFER (item)) {
    ret = gst_pad_push (self->textpad, GST_BUFFER_CAST (item));
    GST_LOG_OBJECT (self, "text buffer pushed: %s", gst_flow_get_name (ret));
    g_mutex_lock (&self->text_lock);
    /* FLUSHING belongs to a flush that resets the flow anyway */
    if (!self->text_flushing && ret != GST_FLOW_FLUSHING)
      self->text_flow = ret;
    g_mutex_unlock (&self->text_lock);
  } else {
    gst_pad_push_event (self->textpad, GST_EVENT_CAST (item));
  }
}

/* Everything queued goes, except the sticky events that survive a flush
 * (stream-start, caps, tags): they still have to reach the peer first. */
static void
drop_queue_locked (GstPersonaplexDuplex * self)
{
  GQueue keep = G_QUEUE_INIT;
  GstMiniObject *item;

  while ((item = g_queue_pop_head (&self->text_items))) {
    if (GST_IS_EVENT (item) && GST_EVENT_IS_STICKY (item)
        && GST_EVENT_TYPE (item) != GST_EVENT_SEGMENT
        && GST_EVENT_TYPE (item) != GST_EVENT_EOS)
      g_queue_push_tail (&keep, item);
    else
      gst_mini_object_unref (item);
  }
  self->text_items = keep;
}

static void
set_flushing (GstPersonaplexDuplex * self, gboolean flushing)
{
  g_mutex_lock (&self->text_lock);
  self->text_flushing = flushing;
  self->text_flow = GST_FLOW_OK;
  self->text_warned = FALSE;
  if (flushing)
    drop_queue_locked (self);
  g_cond_signal (&self->text_cond);
  g_mutex_unlock (&self->text_lock);
}

static gboolean
text_activate_mode (GstPad * pad, GstObject * parent, GstPadMode mode,
    gboolean active)
{
  GstPersonaplexDuplex *self = GST_PERSONAPLEX_DUPLEX (parent);

  if (mode != GST_PAD_MODE_PUSH)
    return FALSE;
  if (active) {
    set_flushing (self, FALSE);
    return gst_pad_start_task (pad, text_loop, self, NULL);
  }
  set_flushing (self, TRUE);
  g_mutex_lock (&self->text_lock);
  g_queue_clear_full (&self->text_items,
      (GDestroyNotify) gst_mini_object_unref);
  g_mutex_unlock (&self->text_lock);
  return gst_pad_stop_task (pad);
}

void
gst_pp_text_pad_init (GstPersonaplexDuplex * self)
{
  g_mutex_init (&self->text_lock);
  g_cond_init (&self->text_cond);
  g_queue_init (&self->text_items);
  self->text_flushing = TRUE;
  self->text_flow = GST_FLOW_OK;
  gst_pad_set_activatemode_function (self->textpad,
      GST_DEBUG_FUNCPTR (text_activate_mode));
}

void
gst_pp_text_pad_finalize (GstPersonaplexDuplex * self)
{
  g_queue_clear_full (&self->text_items,
      (GDestroyNotify) gst_mini_object_unref);
  g_mutex_clear (&self->text_lock);
  g_cond_clear (&self->text_cond);
}

void
gst_pp_text_pad_queue (GstPersonaplexDuplex * self, GstMiniObject * item)
{
  guint waiting;

  g_mutex_lock (&self->text_lock);
  /* while flushing (or inactive), only the sticky events are kept */
  if (self->text_flushing && !(GST_IS_EVENT (item)
          && GST_EVENT_IS_STICKY (item)
          && GST_EVENT_TYPE (item) != GST_EVENT_SEGMENT
          && GST_EVENT_TYPE (item) != GST_EVENT_EOS)) {
    g_mutex_unlock (&self->text_lock);
    gst_mini_object_unref (item);
    return;
  }
  g_queue_push_tail (&self->text_items, item);
  waiting = g_queue_get_length (&self->text_items);
  g_cond_signal (&self->text_cond);
  if (waiting > TEXT_QUEUE_WARN && !self->text_warned) {
    self->text_warned = TRUE;
    g_mutex_unlock (&self->text_lock);
    GST_WARNING_OBJECT (self, "%u text items wait for text_src's peer, "
        "which takes none", waiting);
    return;
  }
  g_mutex_unlock (&self->text_lock);
}

GstFlowReturn
gst_pp_text_pad_last_flow (GstPersonaplexDuplex * self)
{
  GstFlowReturn ret;

  g_mutex_lock (&self->text_lock);
  ret = self->text_flow;
  g_mutex_unlock (&self->text_lock);
  return ret;
}

void
gst_pp_text_pad_flush_start (GstPersonaplexDuplex * self)
{
  set_flushing (self, TRUE);
  /* the peer was flushed first, so a push in progress returns now */
  gst_pad_pause_task (self->textpad);
}

gboolean
gst_pp_text_pad_flush_stop (GstPersonaplexDuplex * self, GstEvent * event)
{
  gboolean ok = gst_pad_push_event (self->textpad, event);

  if (!GST_PAD_IS_ACTIVE (self->textpad))
    return ok;
  set_flushing (self, FALSE);
  gst_pad_start_task (self->textpad, text_loop, self, NULL);
  return ok;
}
