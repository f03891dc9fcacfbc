/* personaplexduplex: the stream's step statistics (the personaplex-stats
 * messages and the `stats` property's figures) and its own latency, as
 * answered to LATENCY queries (gstpplatency.h). Everything here runs under
 * the element's object lock. */
#include "gstppstream-internal.h"

#define GST_CAT_DEFAULT gst_personaplex_duplex_debug

static GstClockTime
frame_duration (GstPpStream * st)
{
  gint frame_size = st->frame_size > 0 ? st->frame_size : 1920;

  return gst_util_uint64_scale_int (frame_size, GST_SECOND, GST_PP_STREAM_RATE);
}

/* The engine of the stream's model, or NULL (object lock held). */
static PpxEngine *
engine_locked (GstPpStream * st)
{
  return st->model ? gst_pp_model_handle_get_engine (st->model) : NULL;
}

GstClockTime
gst_pp_stream_own_latency (GstPpStream * st)
{
  const GstPersonaplexSettings *s = st->settings;
  GstClockTime deadline, ours;

  GST_OBJECT_LOCK (st->element);
  deadline = gst_pp_latency_answer (&st->latency, s->processing_deadline,
      engine_locked (st));
  /* a shared engine: a frame may wait for the other sessions' frames */
  if (s->model_instance_id != NULL && s->model_instance_id[0] != '\0')
    deadline += s->batch_deadline;
  ours = frame_duration (st) + deadline;
  st->stats.latency = ours;
  GST_OBJECT_UNLOCK (st->element);
  return ours;
}

GstMessage *
gst_pp_stream_update_stats (GstPpStream * st, gdouble step_ms,
    const GstPpTickInfo * tick, const GstPpFramePosition * pos,
    gboolean * frame_messages, gboolean * latency_grew)
{
  GstPersonaplexStats *stats = &st->stats;
  gdouble frame_ms = (gdouble) frame_duration (st) / GST_MSECOND;
  GstStructure *s = NULL;
  PpxEngineTickTimes times = { 0 };
  PpxEngine *engine;
  guint interval;

  GST_OBJECT_LOCK (st->element);
  if ((engine = engine_locked (st)) != NULL)
    ppx_engine_tick_times (engine, &times);
  *latency_grew = gst_pp_latency_grown (&st->latency,
      st->settings->processing_deadline, &times);
  stats->frames++;
  stats->total_step_ms += step_ms;
  stats->max_step_ms = MAX (stats->max_step_ms, step_ms);
  if (step_ms > frame_ms)
    stats->overruns++;
  stats->batch_size = tick->batch_size;
  stats->tick_ms = tick->tick_ms;
  stats->last_pts = pos->pts;
  stats->last_running_time = pos->running_time;
  interval = st->settings->stats_interval;
  *frame_messages = st->settings->frame_messages;
  if (interval > 0 && ++st->frames_since_stats >= interval) {
    st->frames_since_stats = 0;
    s = gst_pp_stats_structure_new (stats, st->model);
  }
  GST_OBJECT_UNLOCK (st->element);

  if (step_ms > frame_ms)
    GST_DEBUG_OBJECT (st->element, "overrun: step took %.1f ms for a %.0f ms frame",
        step_ms, frame_ms);
  if (*latency_grew)
    GST_INFO_OBJECT (st->element, "tick p99 %.1f ms over %u ticks outgrew "
        "the processing deadline answered: posting a latency message",
        times.p99_ms, times.n);
  return s ? gst_message_new_element (GST_OBJECT (st->element), s) : NULL;
}

void
gst_pp_stream_post_stats (GstPpStream * st)
{
  GstStructure *s;

  GST_OBJECT_LOCK (st->element);
  s = gst_pp_stats_structure_new (&st->stats, st->model);
  st->frames_since_stats = 0;
  GST_OBJECT_UNLOCK (st->element);
  gst_element_post_message (st->element,
      gst_message_new_element (GST_OBJECT (st->element), s));
}
