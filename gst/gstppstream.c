/* personaplexduplex: the streaming side.
 *
 * Framing: input buffers of any size go into a GstAdapter; every complete
 * frame (frame_size samples, 80 ms) is converted to f32, stepped through
 * the session, and answered by one output buffer of the same length on
 * `src` plus a text buffer or a GAP event on `text_src`.
 *
 * Timestamps: a resync point (resync_pts) is taken at the first buffer and
 * at every discontinuity; a frame that starts `n` samples after it has
 * PTS = resync_pts + n / rate, and its duration is the difference of two
 * such values, so no rounding error accumulates (as in audiobuffersplit).
 * Timestamp jumps are detected with GstAudioStreamAlign; at a
 * discontinuity the partial frame of the old timeline is stepped
 * zero-padded and answered truncated to its real length, then the new
 * timeline starts (and with reset-on-discont, a new conversation).
 *
 * Stepping: each frame is handed to the engine's ticker (gstppticker.c),
 * which steps it together with the frames of the other elements sharing
 * the engine (model-instance-id) and hands the answer back; an element with
 * an engine of its own is stepped at once. The stream joins the ticker's
 * wait set with its caps and leaves it at EOS and while flushing.
 *
 * Locking: everything here runs with the sink pad's stream lock (chain and
 * serialized events) except the queries and upstream events; settings and
 * statistics are read or written under the object lock. */
#include "gstppstream.h"

#include <math.h>
#include <string.h>

#include "gstppmessages.h"
#include "gstpptextpad.h"

#define GST_CAT_DEFAULT gst_personaplex_duplex_debug

#define RATE 24000
/* Timestamp jumps smaller than this are absorbed (jitter); larger ones that
 * persist for DISCONT_WAIT, or come with the DISCONT flag, resync. */
#define ALIGNMENT_THRESHOLD (40 * GST_MSECOND)
#define DISCONT_WAIT (1 * GST_SECOND)

static GstFlowReturn sink_chain (GstPad * pad, GstObject * parent,
    GstBuffer * buffer);
static gboolean sink_event (GstPad * pad, GstObject * parent,
    GstEvent * event);
static gboolean sink_query (GstPad * pad, GstObject * parent,
    GstQuery * query);
static gboolean src_event (GstPad * pad, GstObject * parent,
    GstEvent * event);
static gboolean src_query (GstPad * pad, GstObject * parent,
    GstQuery * query);

void
gst_pp_stream_setup_pads (GstPersonaplexDuplex * self)
{
  gst_pad_set_chain_function (self->sinkpad, GST_DEBUG_FUNCPTR (sink_chain));
  gst_pad_set_event_function (self->sinkpad, GST_DEBUG_FUNCPTR (sink_event));
  gst_pad_set_query_function (self->sinkpad, GST_DEBUG_FUNCPTR (sink_query));
  gst_pad_set_event_function (self->srcpad, GST_DEBUG_FUNCPTR (src_event));
  gst_pad_set_query_function (self->srcpad, GST_DEBUG_FUNCPTR (src_query));
  gst_pad_set_event_function (self->textpad, GST_DEBUG_FUNCPTR (src_event));
  gst_pad_set_query_function (self->textpad, GST_DEBUG_FUNCPTR (src_query));
  gst_pad_use_fixed_caps (self->textpad);
}

/* ------------------------------------------------------------------------ */
/* State                                                                    */

/* Forgets the timeline (the next buffer resyncs) and any partial frame. */
static void
reset_timeline (GstPersonaplexDuplex * self)
{
  gst_adapter_clear (self->adapter);
  if (self->align)
    gst_audio_stream_align_mark_discont (self->align);
  self->resync_pts = GST_CLOCK_TIME_NONE;
  self->samples_since_resync = 0;
  self->lead_samples = 0;
  self->next_is_discont = TRUE;
}

/* Starts a new conversation with the same prompts. */
static gboolean
reset_conversation (GstPersonaplexDuplex * self)
{
  GError *err = NULL;

  self->conversation_frame = 0;
  if (self->session == NULL || ppx_session_reset (self->session, &err))
    return TRUE;
  GST_ELEMENT_ERROR (self, STREAM, FAILED,
      ("Could not reset the conversation: %s", err->message), (NULL));
  g_error_free (err);
  return FALSE;
}

void
gst_pp_stream_start (GstPersonaplexDuplex * self)
{
  self->in_frame = g_new0 (gfloat, self->frame_size);
  self->out_frame = g_new0 (gfloat, self->frame_size);
  self->raw_frame = g_new0 (guint8, self->frame_size * sizeof (gfloat));
  self->align = gst_audio_stream_align_new (RATE, ALIGNMENT_THRESHOLD,
      DISCONT_WAIT);
  gst_audio_info_init (&self->info);
  self->have_caps = FALSE;
  self->text_caps_queued = FALSE;
  gst_segment_init (&self->segment, GST_FORMAT_TIME);
  gst_flow_combiner_reset (self->flow_combiner);
  reset_timeline (self);
  self->conversation_frame = 0;
  self->frames_since_stats = 0;
  self->last_seek_seqnum = GST_SEQNUM_INVALID;

  GST_OBJECT_LOCK (self);
  memset (&self->stats, 0, sizeof (self->stats));
  self->stats.last_pts = GST_CLOCK_TIME_NONE;
  self->stats.last_running_time = GST_CLOCK_TIME_NONE;
  GST_OBJECT_UNLOCK (self);
}

void
gst_pp_stream_stop (GstPersonaplexDuplex * self)
{
  gst_adapter_clear (self->adapter);
  g_clear_pointer (&self->align, gst_audio_stream_align_free);
  g_clear_pointer (&self->in_frame, g_free);
  g_clear_pointer (&self->out_frame, g_free);
  g_clear_pointer (&self->raw_frame, g_free);
  self->have_caps = FALSE;
}

static GstClockTime
frame_duration (GstPersonaplexDuplex * self)
{
  gint frame_size = self->frame_size > 0 ? self->frame_size : 1920;

  return gst_util_uint64_scale_int (frame_size, GST_SECOND, RATE);
}

GstClockTime
gst_pp_stream_own_latency (GstPersonaplexDuplex * self)
{
  GstPersonaplexSettings *s = &self->settings;
  GstClockTime deadline;

  GST_OBJECT_LOCK (self);
  deadline = s->processing_deadline;
  /* a shared engine: a frame may wait for the other sessions' frames */
  if (s->model_instance_id != NULL && s->model_instance_id[0] != '\0')
    deadline += s->batch_deadline;
  GST_OBJECT_UNLOCK (self);
  return frame_duration (self) + deadline;
}

/* PTS of the sample @n samples after the resync point. */
static GstClockTime
sample_time (GstPersonaplexDuplex * self, guint64 n)
{
  return self->resync_pts + gst_util_uint64_scale_int (n, GST_SECOND, RATE);
}

/* ------------------------------------------------------------------------ */
/* Sample formats                                                           */

static void
samples_to_f32 (GstAudioFormat format, const guint8 * raw, guint n,
    gfloat * out)
{
  guint i;

  if (format == GST_AUDIO_FORMAT_F32LE) {
    for (i = 0; i < n; i++)
      out[i] = GST_READ_FLOAT_LE (raw + 4 * i);
  } else {
    for (i = 0; i < n; i++)
      out[i] = (gint16) GST_READ_UINT16_LE (raw + 2 * i) / 32768.0f;
  }
}

static void
f32_to_samples (GstAudioFormat format, const gfloat * in, guint n,
    guint8 * raw)
{
  guint i;

  if (format == GST_AUDIO_FORMAT_F32LE) {
    for (i = 0; i < n; i++)
      GST_WRITE_FLOAT_LE (raw + 4 * i, in[i]);
  } else {
    for (i = 0; i < n; i++) {
      gfloat x = isfinite (in[i]) ? in[i] * 32768.0f : 0.0f;
      glong v = lrintf (CLAMP (x, -32768.0f, 32767.0f));

      GST_WRITE_UINT16_LE (raw + 2 * i, (guint16) (gint16) v);
    }
  }
}

/* ------------------------------------------------------------------------ */
/* One frame                                                                */

static GstPpFramePosition
frame_position (GstPersonaplexDuplex * self, guint n_samples)
{
  GstPpFramePosition pos;

  pos.frame = self->conversation_frame;
  pos.pts = sample_time (self, self->samples_since_resync);
  pos.duration = sample_time (self, self->samples_since_resync + n_samples)
      - pos.pts;
  pos.running_time = gst_segment_to_running_time (&self->segment,
      GST_FORMAT_TIME, pos.pts);
  pos.stream_time = gst_segment_to_stream_time (&self->segment,
      GST_FORMAT_TIME, pos.pts);
  return pos;
}

/* Accounts one step; returns a stats message when one is due. */
static GstMessage *
update_stats (GstPersonaplexDuplex * self, gdouble step_ms,
    const GstPpTickInfo * tick, const GstPpFramePosition * pos,
    gboolean * frame_messages)
{
  GstPersonaplexStats *st = &self->stats;
  gdouble frame_ms = (gdouble) frame_duration (self) / GST_MSECOND;
  GstStructure *s = NULL;
  guint interval;

  GST_OBJECT_LOCK (self);
  st->frames++;
  st->total_step_ms += step_ms;
  st->max_step_ms = MAX (st->max_step_ms, step_ms);
  if (step_ms > frame_ms)
    st->overruns++;
  st->batch_size = tick->batch_size;
  st->tick_ms = tick->tick_ms;
  st->last_pts = pos->pts;
  st->last_running_time = pos->running_time;
  interval = self->settings.stats_interval;
  *frame_messages = self->settings.frame_messages;
  if (interval > 0 && ++self->frames_since_stats >= interval) {
    self->frames_since_stats = 0;
    s = gst_pp_stats_structure_new (st, self->model);
  }
  GST_OBJECT_UNLOCK (self);

  if (step_ms > frame_ms)
    GST_DEBUG_OBJECT (self, "overrun: step took %.1f ms for a %.0f ms frame",
        step_ms, frame_ms);
  return s ? gst_message_new_element (GST_OBJECT (self), s) : NULL;
}

static void
post_stats (GstPersonaplexDuplex * self)
{
  GstStructure *s;

  GST_OBJECT_LOCK (self);
  s = gst_pp_stats_structure_new (&self->stats, self->model);
  self->frames_since_stats = 0;
  GST_OBJECT_UNLOCK (self);
  gst_element_post_message (GST_ELEMENT (self),
      gst_message_new_element (GST_OBJECT (self), s));
}

static GstFlowReturn
push_audio (GstPersonaplexDuplex * self, const gfloat * samples,
    guint n_samples, const GstPpFramePosition * pos)
{
  GstAudioFormat format = GST_AUDIO_INFO_FORMAT (&self->info);
  GstBuffer *buf;
  GstMapInfo map;

  buf = gst_buffer_new_allocate (NULL, n_samples * self->info.bpf, NULL);
  gst_buffer_map (buf, &map, GST_MAP_WRITE);
  f32_to_samples (format, samples, n_samples, map.data);
  gst_buffer_unmap (buf, &map);
  GST_BUFFER_PTS (buf) = pos->pts;
  GST_BUFFER_DURATION (buf) = pos->duration;
  if (self->next_is_discont) {
    GST_BUFFER_FLAG_SET (buf, GST_BUFFER_FLAG_DISCONT);
    GST_BUFFER_FLAG_SET (buf, GST_BUFFER_FLAG_RESYNC);
    self->next_is_discont = FALSE;
  }
  return gst_pad_push (self->srcpad, buf);
}

/* A text buffer, or a GAP event when the frame has no text (so that
 * downstream of text_src, e.g. a muxer, keeps moving), queued for text_src's
 * own thread (gstpptextpad.c). Returns the flow of the last text buffer that
 * thread pushed. */
static GstFlowReturn
push_text (GstPersonaplexDuplex * self, const gchar * text,
    const GstPpFramePosition * pos)
{
  GstBuffer *buf;

  if (text == NULL || text[0] == '\0') {
    gst_pp_text_pad_queue (self, GST_MINI_OBJECT_CAST (gst_event_new_gap
            (pos->pts, pos->duration)));
  } else {
    buf = gst_buffer_new_memdup (text, strlen (text));
    GST_BUFFER_PTS (buf) = pos->pts;
    GST_BUFFER_DURATION (buf) = pos->duration;
    gst_pp_text_pad_queue (self, GST_MINI_OBJECT_CAST (buf));
  }
  return gst_pp_text_pad_last_flow (self);
}

/* Steps the frame in self->in_frame (frame_size samples: @lead samples of
 * silence, then @n_samples of real input, then silence) and pushes the
 * answer to the real input: @n_samples from @lead on. */
static GstFlowReturn
step_and_push (GstPersonaplexDuplex * self, guint lead, guint n_samples)
{
  PpxFrameResult res = { 0 };
  GstPpTickInfo tick = { 0 };
  GstPpFramePosition pos;
  GstMessage *stats_msg, *text_msg = NULL, *frame_msg = NULL;
  gboolean frame_messages;
  GstClockTime batch_deadline;
  GstFlowReturn ret;
  GError *err = NULL;

  GST_OBJECT_LOCK (self);
  batch_deadline = self->settings.batch_deadline;
  GST_OBJECT_UNLOCK (self);
  switch (gst_pp_ticker_step (self->member, self->in_frame, self->out_frame,
          &res, batch_deadline, &tick, &err)) {
    case GST_PP_TICK_OK:
      break;
    case GST_PP_TICK_FLUSHING:
      GST_DEBUG_OBJECT (self, "flushing: frame not stepped");
      return GST_FLOW_FLUSHING;
    default:
      GST_ELEMENT_ERROR (self, STREAM, FAILED,
          ("PersonaPlex step failed: %s", err->message), (NULL));
      g_error_free (err);
      return GST_FLOW_ERROR;
  }
  GST_LOG_OBJECT (self, "stepped in a tick of %u session(s): waited %.1f ms,"
      " tick %.1f ms", tick.batch_size, tick.wait_ms, tick.tick_ms);

  pos = frame_position (self, n_samples);
  self->samples_since_resync += n_samples;
  self->conversation_frame++;

  stats_msg = update_stats (self, res.step_ms, &tick, &pos,
      &frame_messages);
  if (res.text != NULL && res.text[0] != '\0')
    text_msg = gst_pp_text_message_new (GST_OBJECT (self), res.text, &pos);
  if (frame_messages)
    frame_msg = gst_pp_frame_message_new (GST_OBJECT (self), &res, &pos);

  /* The text goes to text_src's own thread, so a text branch without a
   * queue does not block the audio during preroll. */
  ret = push_text (self, res.text, &pos);
  gst_flow_combiner_update_pad_flow (self->flow_combiner, self->textpad, ret);
  ret = push_audio (self, self->out_frame + lead, n_samples, &pos);
  ret = gst_flow_combiner_update_pad_flow (self->flow_combiner,
      self->srcpad, ret);

  if (frame_msg)
    gst_element_post_message (GST_ELEMENT (self), frame_msg);
  if (text_msg)
    gst_element_post_message (GST_ELEMENT (self), text_msg);
  if (stats_msg)
    gst_element_post_message (GST_ELEMENT (self), stats_msg);
  return ret;
}

/* Takes @n_samples (<= frame_size - lead) from the adapter, after the
 * timeline's lead of silence (frame alignment, first frame only) and padded
 * with silence, steps the frame and pushes an answer of @n_samples. */
static GstFlowReturn
step_from_adapter (GstPersonaplexDuplex * self, guint n_samples)
{
  gsize bytes = (gsize) n_samples * self->info.bpf;
  guint lead = self->lead_samples;

  self->lead_samples = 0;
  gst_adapter_copy (self->adapter, self->raw_frame, 0, bytes);
  gst_adapter_flush (self->adapter, bytes);
  memset (self->in_frame, 0, lead * sizeof (gfloat));
  samples_to_f32 (GST_AUDIO_INFO_FORMAT (&self->info), self->raw_frame,
      n_samples, self->in_frame + lead);
  if (lead + n_samples < (guint) self->frame_size)
    memset (self->in_frame + lead + n_samples, 0,
        (self->frame_size - lead - n_samples) * sizeof (gfloat));
  return step_and_push (self, lead, n_samples);
}

static GstFlowReturn
step_complete_frames (GstPersonaplexDuplex * self)
{
  GstFlowReturn ret = GST_FLOW_OK;

  while (ret == GST_FLOW_OK) {
    guint need = self->frame_size - self->lead_samples;

    if (gst_adapter_available (self->adapter) < (gsize) need * self->info.bpf)
      break;
    ret = step_from_adapter (self, need);
  }
  return ret;
}

/* Frame alignment (docs/element.md): at the start of a timeline whose first
 * buffer (@n_samples) has just arrived from a live source, the lead of
 * silence that makes this stream's frames complete together with those of
 * the other streams ticking on the shared engine. */
static guint
alignment_lead (GstPersonaplexDuplex * self, guint n_samples)
{
  gboolean align, shared, live = FALSE;
  GstQuery *q;
  gint64 now, period, granularity, lead;

  GST_OBJECT_LOCK (self);
  align = self->settings.align_frames;
  shared = self->settings.model_instance_id != NULL
      && self->settings.model_instance_id[0] != '\0';
  GST_OBJECT_UNLOCK (self);
  /* a buffer of half a frame or more leaves little to align */
  if (!align || !shared || self->member == NULL
      || n_samples >= (guint) self->frame_size / 2)
    return 0;
  q = gst_query_new_latency ();
  if (gst_pad_peer_query (self->sinkpad, q))
    gst_query_parse_latency (q, &live, NULL, NULL);
  gst_query_unref (q);
  if (!live) {
    GST_DEBUG_OBJECT (self, "frame alignment: upstream is not live");
    return 0;
  }
  now = g_get_monotonic_time ();
  period = (gint64) self->frame_size * G_USEC_PER_SEC / RATE;
  granularity = (gint64) n_samples * G_USEC_PER_SEC / RATE;
  lead = gst_pp_ticker_lead_in (self->member, now + period - granularity,
      period, granularity);
  return (guint) MIN (lead * RATE / G_USEC_PER_SEC,
      (gint64) self->frame_size - 1);
}

/* The last partial frame of a timeline (EOS, discontinuity): stepped
 * zero-padded, answered with its real length. */
static GstFlowReturn
step_partial_frame (GstPersonaplexDuplex * self)
{
  guint n_samples;
  GstFlowReturn ret = GST_FLOW_OK;

  if (!self->have_caps || self->session == NULL)
    return GST_FLOW_OK;
  n_samples = gst_adapter_available (self->adapter) / self->info.bpf;
  if (n_samples > 0)
    ret = step_from_adapter (self, n_samples);
  gst_adapter_clear (self->adapter);
  return ret;
}

/* ------------------------------------------------------------------------ */
/* Input                                                                    */

/* Decides whether @buffer starts a new timeline; if so, finishes the old
 * one (partial frame, optional conversation reset) and resyncs. */
static GstFlowReturn
handle_timeline (GstPersonaplexDuplex * self, GstBuffer * buffer,
    guint n_samples)
{
  GstClockTime pts = GST_BUFFER_PTS (buffer);
  gboolean flagged = GST_BUFFER_FLAG_IS_SET (buffer, GST_BUFFER_FLAG_DISCONT)
      || GST_BUFFER_FLAG_IS_SET (buffer, GST_BUFFER_FLAG_RESYNC);
  gboolean first = !GST_CLOCK_TIME_IS_VALID (self->resync_pts);
  gboolean discont;
  GstClockTime expected = GST_CLOCK_TIME_NONE;
  GstFlowReturn ret = GST_FLOW_OK;

  if (!first)
    expected = sample_time (self, self->samples_since_resync +
        gst_adapter_available (self->adapter) / self->info.bpf);

  if (GST_CLOCK_TIME_IS_VALID (pts)) {
    GstClockTime out_ts, out_dur;
    guint64 out_pos;

    discont = gst_audio_stream_align_process (self->align, flagged, pts,
        n_samples, &out_ts, &out_dur, &out_pos);
    /* A DISCONT flag on a buffer that continues the timeline exactly (e.g.
     * after upstream packet-loss concealment) does not break our frames. */
    if (discont && !first && flagged
        && (GstClockTimeDiff) ABS (GST_CLOCK_DIFF (expected, pts)) <
        (GstClockTimeDiff) ALIGNMENT_THRESHOLD) {
      GST_DEBUG_OBJECT (self, "DISCONT flag on a continuous timestamp");
      self->next_is_discont = TRUE;
      return GST_FLOW_OK;
    }
  } else {
    discont = flagged;
  }
  if (!discont && !first)
    return GST_FLOW_OK;

  if (!first) {
    GST_INFO_OBJECT (self, "discontinuity: expected %" GST_TIME_FORMAT
        ", got %" GST_TIME_FORMAT, GST_TIME_ARGS (expected),
        GST_TIME_ARGS (pts));
    gboolean reset;

    ret = step_partial_frame (self);
    expected = sample_time (self, self->samples_since_resync);
    GST_OBJECT_LOCK (self);
    reset = self->settings.reset_on_discont;
    GST_OBJECT_UNLOCK (self);
    if (reset && !reset_conversation (self))
      ret = GST_FLOW_ERROR;
  }

  if (GST_CLOCK_TIME_IS_VALID (pts))
    self->resync_pts = pts;
  else if (GST_CLOCK_TIME_IS_VALID (expected))
    self->resync_pts = expected;
  else if (self->segment.format == GST_FORMAT_TIME
      && GST_CLOCK_TIME_IS_VALID (self->segment.start))
    self->resync_pts = self->segment.start;
  else
    self->resync_pts = 0;
  self->samples_since_resync = 0;
  self->next_is_discont = TRUE;
  self->lead_samples = alignment_lead (self, n_samples);
  GST_DEBUG_OBJECT (self, "timeline starts at %" GST_TIME_FORMAT
      " (a first buffer of %u samples), frames led by %u samples of silence",
      GST_TIME_ARGS (self->resync_pts), n_samples, self->lead_samples);
  return ret;
}

static GstFlowReturn
sink_chain (GstPad * pad, GstObject * parent, GstBuffer * buffer)
{
  GstPersonaplexDuplex *self = GST_PERSONAPLEX_DUPLEX (parent);
  gsize size = gst_buffer_get_size (buffer);
  gsize carried;
  guint n_samples;
  GstFlowReturn ret;

  if (!self->have_caps) {
    GST_ELEMENT_ERROR (self, CORE, NEGOTIATION, (NULL),
        ("received a buffer before caps"));
    gst_buffer_unref (buffer);
    return GST_FLOW_NOT_NEGOTIATED;
  }
  /* Buffers need not hold whole samples (a 16-bit stream cut at an odd
   * byte): the bytes of a split sample wait in the adapter for the rest.
   * @n_samples counts the samples this buffer completes. */
  carried = gst_adapter_available (self->adapter) % self->info.bpf;
  n_samples = (carried + size) / self->info.bpf;
  if (size == 0) {
    gst_buffer_unref (buffer);
    return GST_FLOW_OK;
  }
  if (n_samples == 0) {
    gst_adapter_push (self->adapter, buffer);
    return GST_FLOW_OK;
  }

  ret = handle_timeline (self, buffer, n_samples);
  if (ret != GST_FLOW_OK && ret != GST_FLOW_NOT_LINKED) {
    gst_buffer_unref (buffer);
    return ret;
  }
  gst_adapter_push (self->adapter, buffer);
  return step_complete_frames (self);
}

/* GAP: silence in, so the model keeps its 80 ms clock and keeps talking.
 * Fed through the chain one frame at a time (bounded memory). */
static gboolean
handle_gap (GstPersonaplexDuplex * self, GstEvent * event)
{
  GstClockTime ts, duration;
  guint64 total, done = 0;
  GstFlowReturn ret = GST_FLOW_OK;

  gst_event_parse_gap (event, &ts, &duration);
  gst_event_unref (event);
  if (!self->have_caps || !GST_CLOCK_TIME_IS_VALID (duration)) {
    GST_DEBUG_OBJECT (self, "ignoring GAP without caps or duration");
    return TRUE;
  }
  if (!GST_CLOCK_TIME_IS_VALID (ts)
      && GST_CLOCK_TIME_IS_VALID (self->resync_pts))
    ts = sample_time (self, self->samples_since_resync +
        gst_adapter_available (self->adapter) / self->info.bpf);
  total = gst_util_uint64_scale_round (duration, RATE, GST_SECOND);
  GST_DEBUG_OBJECT (self, "GAP at %" GST_TIME_FORMAT ": %" G_GUINT64_FORMAT
      " samples of silence", GST_TIME_ARGS (ts), total);

  while (done < total && (ret == GST_FLOW_OK || ret == GST_FLOW_NOT_LINKED)) {
    guint n = MIN (total - done, (guint64) self->frame_size);
    GstBuffer *buf = gst_buffer_new_allocate (NULL, n * self->info.bpf, NULL);

    gst_buffer_memset (buf, 0, 0, n * self->info.bpf);
    if (GST_CLOCK_TIME_IS_VALID (ts)) {
      GST_BUFFER_PTS (buf) =
          ts + gst_util_uint64_scale_int (done, GST_SECOND, RATE);
      GST_BUFFER_DURATION (buf) =
          ts + gst_util_uint64_scale_int (done + n, GST_SECOND, RATE) -
          GST_BUFFER_PTS (buf);
    }
    GST_BUFFER_FLAG_SET (buf, GST_BUFFER_FLAG_GAP);
    ret = sink_chain (self->sinkpad, GST_OBJECT (self), buf);
    done += n;
  }
  return ret == GST_FLOW_OK || ret == GST_FLOW_NOT_LINKED
      || ret == GST_FLOW_FLUSHING || ret == GST_FLOW_EOS;
}

static gboolean
audio_info_same_format (const GstAudioInfo * a, const GstAudioInfo * b)
{
  return GST_AUDIO_INFO_FORMAT (a) == GST_AUDIO_INFO_FORMAT (b)
      && GST_AUDIO_INFO_RATE (a) == GST_AUDIO_INFO_RATE (b)
      && GST_AUDIO_INFO_CHANNELS (a) == GST_AUDIO_INFO_CHANNELS (b)
      && GST_AUDIO_INFO_LAYOUT (a) == GST_AUDIO_INFO_LAYOUT (b);
}

static gboolean
handle_caps (GstPersonaplexDuplex * self, GstEvent * event)
{
  GstCaps *caps, *src_caps;
  GstAudioInfo info;
  gboolean ok;

  gst_event_parse_caps (event, &caps);
  if (!gst_audio_info_from_caps (&info, caps)) {
    GST_ELEMENT_ERROR (self, CORE, NEGOTIATION, (NULL),
        ("invalid audio caps %" GST_PTR_FORMAT, caps));
    gst_event_unref (event);
    return FALSE;
  }
  if (self->have_caps) {
    gboolean same = audio_info_same_format (&self->info, &info);

    if (!same)
      GST_ELEMENT_ERROR (self, CORE, NEGOTIATION,
          ("The input format changed mid-stream from %s to %s; "
              "personaplexduplex keeps one format per stream (put an "
              "audioconvert before it)",
              gst_audio_format_to_string (GST_AUDIO_INFO_FORMAT (&self->info)),
              gst_audio_format_to_string (GST_AUDIO_INFO_FORMAT (&info))),
          ("new caps %" GST_PTR_FORMAT, caps));
    gst_event_unref (event);
    return same;
  }

  self->info = info;
  self->have_caps = TRUE;
  /* the stream starts: the engine's other sessions wait for its frames */
  gst_pp_ticker_set_active (self->member, TRUE);
  src_caps = gst_audio_info_to_caps (&info);
  ok = gst_pad_push_event (self->srcpad, gst_event_new_caps (src_caps));
  gst_caps_unref (src_caps);
  if (!self->text_caps_queued) {
    GstCaps *text_caps = gst_pad_get_pad_template_caps (self->textpad);

    gst_pp_text_pad_queue (self,
        GST_MINI_OBJECT_CAST (gst_event_new_caps (text_caps)));
    gst_caps_unref (text_caps);
    self->text_caps_queued = TRUE;
  }
  gst_event_unref (event);
  if (!ok)
    self->have_caps = FALSE;
  return ok;
}

/* Same stream-start for audio; `<id>/text` with the same group id for
 * text_src. */
static gboolean
handle_stream_start (GstPersonaplexDuplex * self, GstEvent * event)
{
  const gchar *stream_id;
  gchar *text_id;
  GstEvent *text_event;
  guint group_id;

  gst_event_parse_stream_start (event, &stream_id);
  text_id = g_strdup_printf ("%s/text", stream_id ? stream_id : "");
  text_event = gst_event_new_stream_start (text_id);
  g_free (text_id);
  if (gst_event_parse_group_id (event, &group_id))
    gst_event_set_group_id (text_event, group_id);
  gst_event_set_seqnum (text_event, gst_event_get_seqnum (event));
  gst_pp_text_pad_queue (self, GST_MINI_OBJECT_CAST (text_event));
  return gst_pad_push_event (self->srcpad, event);
}

/* Serialized events go to src directly and to text_src through its queue
 * (pushing them on text_src here would wait for its thread); the others
 * to both pads at once. */
static gboolean
forward_event (GstPersonaplexDuplex * self, GstEvent * event)
{
  if (!GST_EVENT_IS_SERIALIZED (event))
    return gst_pad_event_default (self->sinkpad, GST_OBJECT (self), event);
  gst_pp_text_pad_queue (self, GST_MINI_OBJECT_CAST (gst_event_ref (event)));
  return gst_pad_push_event (self->srcpad, event);
}

static gboolean
sink_event (GstPad * pad, GstObject * parent, GstEvent * event)
{
  GstPersonaplexDuplex *self = GST_PERSONAPLEX_DUPLEX (parent);

  GST_LOG_OBJECT (self, "sink event %" GST_PTR_FORMAT, event);
  switch (GST_EVENT_TYPE (event)) {
    case GST_EVENT_STREAM_START:
      return handle_stream_start (self, event);
    case GST_EVENT_CAPS:
      return handle_caps (self, event);
    case GST_EVENT_SEGMENT:{
      const GstSegment *segment;

      gst_event_parse_segment (event, &segment);
      if (segment->format != GST_FORMAT_TIME) {
        /* our output is timestamped: downstream gets a TIME segment */
        guint32 seqnum = gst_event_get_seqnum (event);

        GST_DEBUG_OBJECT (self, "replacing a %s segment by a TIME one",
            gst_format_get_name (segment->format));
        gst_segment_init (&self->segment, GST_FORMAT_TIME);
        gst_event_unref (event);
        event = gst_event_new_segment (&self->segment);
        gst_event_set_seqnum (event, seqnum);
      } else {
        gst_segment_copy_into (segment, &self->segment);
      }
      return forward_event (self, event);
    }
    case GST_EVENT_GAP:
      return handle_gap (self, event);
    case GST_EVENT_EOS:
      step_partial_frame (self);
      gst_pp_ticker_set_active (self->member, FALSE);
      post_stats (self);
      return forward_event (self, event);
    case GST_EVENT_FLUSH_START:{
      gboolean ok;

      /* a frame waiting for a tick comes back at once */
      gst_pp_duplex_set_flushing (self, TRUE);
      ok = gst_pad_event_default (pad, parent, event);

      gst_pp_text_pad_flush_start (self);
      return ok;
    }
    case GST_EVENT_FLUSH_STOP:{
      gboolean ok;

      /* serialized: the chain function has returned */
      gst_pp_duplex_set_flushing (self, FALSE);
      reset_timeline (self);
      reset_conversation (self);
      gst_segment_init (&self->segment, GST_FORMAT_TIME);
      gst_flow_combiner_reset (self->flow_combiner);
      ok = gst_pad_push_event (self->srcpad, gst_event_ref (event));
      /* as gst_pad_event_default: TRUE when one pad took it */
      return gst_pp_text_pad_flush_stop (self, event) || ok;
    }
    default:
      return forward_event (self, event);
  }
}

/* ------------------------------------------------------------------------ */
/* Queries and upstream events                                              */

/* The caps of @pad: its template, narrowed by what the peer of the audio
 * pad on the other side accepts (both sides carry the same format). */
static GstCaps *
query_audio_caps (GstPersonaplexDuplex * self, GstPad * pad,
    GstCaps * filter)
{
  GstPad *other = pad == self->sinkpad ? self->srcpad : self->sinkpad;
  GstCaps *templ = gst_pad_get_pad_template_caps (pad);
  GstCaps *peer = gst_pad_peer_query_caps (other, templ);
  GstCaps *result;

  result = gst_caps_intersect_full (templ, peer, GST_CAPS_INTERSECT_FIRST);
  gst_caps_unref (peer);
  gst_caps_unref (templ);
  if (filter) {
    GstCaps *tmp = gst_caps_intersect_full (filter, result,
        GST_CAPS_INTERSECT_FIRST);

    gst_caps_unref (result);
    result = tmp;
  }
  return result;
}

static gboolean
sink_query (GstPad * pad, GstObject * parent, GstQuery * query)
{
  GstPersonaplexDuplex *self = GST_PERSONAPLEX_DUPLEX (parent);

  switch (GST_QUERY_TYPE (query)) {
    case GST_QUERY_CAPS:{
      GstCaps *filter, *caps;

      gst_query_parse_caps (query, &filter);
      caps = query_audio_caps (self, pad, filter);
      gst_query_set_caps_result (query, caps);
      gst_caps_unref (caps);
      return TRUE;
    }
    default:
      return gst_pad_query_default (pad, parent, query);
  }
}

/* Our output for input frame j can only be computed once frame j has fully
 * arrived (one frame) and then takes up to processing-deadline. */
static gboolean
handle_latency_query (GstPersonaplexDuplex * self, GstQuery * query)
{
  gboolean live;
  GstClockTime min, max, ours;

  if (!gst_pad_peer_query (self->sinkpad, query))
    return FALSE;
  gst_query_parse_latency (query, &live, &min, &max);
  ours = gst_pp_stream_own_latency (self);
  GST_DEBUG_OBJECT (self, "upstream latency min %" GST_TIME_FORMAT " max %"
      GST_TIME_FORMAT ", ours %" GST_TIME_FORMAT, GST_TIME_ARGS (min),
      GST_TIME_ARGS (max), GST_TIME_ARGS (ours));
  min += ours;
  if (GST_CLOCK_TIME_IS_VALID (max))
    max += ours;
  gst_query_set_latency (query, live, min, max);
  return TRUE;
}

static gboolean
src_query (GstPad * pad, GstObject * parent, GstQuery * query)
{
  GstPersonaplexDuplex *self = GST_PERSONAPLEX_DUPLEX (parent);

  switch (GST_QUERY_TYPE (query)) {
    case GST_QUERY_LATENCY:
      return handle_latency_query (self, query);
    case GST_QUERY_CAPS:
      if (pad == self->srcpad) {
        GstCaps *filter, *caps;

        gst_query_parse_caps (query, &filter);
        caps = query_audio_caps (self, pad, filter);
        gst_query_set_caps_result (query, caps);
        gst_caps_unref (caps);
        return TRUE;
      }
      return gst_pad_query_default (pad, parent, query);
    default:
      return gst_pad_query_default (pad, parent, query);
  }
}

static gboolean
src_event (GstPad * pad, GstObject * parent, GstEvent * event)
{
  GstPersonaplexDuplex *self = GST_PERSONAPLEX_DUPLEX (parent);

  if (GST_EVENT_TYPE (event) == GST_EVENT_SEEK) {
    guint32 seqnum = gst_event_get_seqnum (event);
    gboolean duplicate;

    GST_OBJECT_LOCK (self);
    duplicate = seqnum == self->last_seek_seqnum;
    self->last_seek_seqnum = seqnum;
    GST_OBJECT_UNLOCK (self);
    if (duplicate) {
      GST_DEBUG_OBJECT (pad, "seek %u already forwarded", seqnum);
      gst_event_unref (event);
      return TRUE;
    }
  }
  return gst_pad_push_event (self->sinkpad, event);
}
