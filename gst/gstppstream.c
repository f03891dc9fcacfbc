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
 * serialized events); settings and statistics are read or written under the
 * object lock. The queries and upstream events are in gstppstream-query.c,
 * the statistics and the own latency in gstppstream-stats.c, the sample
 * conversion in gstppsamples.c. */
#include "gstppstream.h"

#include <string.h>

#include "gstppmessages.h"
#include "gstppsamples.h"
#include "gstppstream-internal.h"

#define GST_CAT_DEFAULT gst_personaplex_duplex_debug

#define RATE GST_PP_STREAM_RATE
/* Timestamp jumps smaller than this are absorbed (jitter); larger ones that
 * persist for DISCONT_WAIT, or come with the DISCONT flag, resync. */
#define ALIGNMENT_THRESHOLD (40 * GST_MSECOND)
#define DISCONT_WAIT (1 * GST_SECOND)

static GstFlowReturn sink_chain (GstPad * pad, GstObject * parent,
    GstBuffer * buffer);
static gboolean sink_event (GstPad * pad, GstObject * parent,
    GstEvent * event);

void
gst_pp_stream_init (GstPpStream * st, GstElement * element, GstPad * sinkpad,
    GstPad * srcpad, GstPad * textpad, const GstPersonaplexSettings * settings)
{
  memset (st, 0, sizeof (*st));
  st->element = element;
  st->sinkpad = sinkpad;
  st->srcpad = srcpad;
  st->textpad = textpad;
  st->settings = settings;
  gst_pad_set_element_private (sinkpad, st);
  gst_pad_set_element_private (srcpad, st);
  gst_pad_set_element_private (textpad, st);
  gst_pad_set_chain_function (st->sinkpad, GST_DEBUG_FUNCPTR (sink_chain));
  gst_pad_set_event_function (st->sinkpad, GST_DEBUG_FUNCPTR (sink_event));
  gst_pad_set_query_function (st->sinkpad, GST_DEBUG_FUNCPTR (gst_pp_stream_sink_query));
  gst_pad_set_event_function (st->srcpad, GST_DEBUG_FUNCPTR (gst_pp_stream_src_event));
  gst_pad_set_query_function (st->srcpad, GST_DEBUG_FUNCPTR (gst_pp_stream_src_query));
  gst_pad_set_event_function (st->textpad, GST_DEBUG_FUNCPTR (gst_pp_stream_src_event));
  gst_pad_set_query_function (st->textpad, GST_DEBUG_FUNCPTR (gst_pp_stream_src_query));
  gst_pad_use_fixed_caps (st->textpad);
  gst_pp_text_pad_init (&st->text, textpad);

  st->flow_combiner = gst_flow_combiner_new ();
  gst_flow_combiner_add_pad (st->flow_combiner, st->srcpad);
  gst_flow_combiner_add_pad (st->flow_combiner, st->textpad);
  st->adapter = gst_adapter_new ();
  st->stats.last_pts = GST_CLOCK_TIME_NONE;
  st->stats.last_running_time = GST_CLOCK_TIME_NONE;
  gst_pp_latency_reset (&st->latency);
}

void
gst_pp_stream_clear (GstPpStream * st)
{
  gst_flow_combiner_free (st->flow_combiner);
  g_object_unref (st->adapter);
  gst_pp_text_pad_clear (&st->text);
}

void
gst_pp_stream_set_flushing (GstPpStream * st, gboolean flushing)
{
  /* the ticker's lock is never held while taking the object lock */
  GST_OBJECT_LOCK (st->element);
  gst_pp_ticker_set_flushing (st->member, flushing);
  GST_OBJECT_UNLOCK (st->element);
}

/* ------------------------------------------------------------------------ */
/* State                                                                    */

/* Forgets the timeline (the next buffer resyncs) and any partial frame. */
static void
reset_timeline (GstPpStream * st)
{
  gst_adapter_clear (st->adapter);
  if (st->align)
    gst_audio_stream_align_mark_discont (st->align);
  st->resync_pts = GST_CLOCK_TIME_NONE;
  st->samples_since_resync = 0;
  st->lead_samples = 0;
  st->aligning = st->aligned = FALSE;
  st->align_extra_us = 0;
  gst_pp_stream_drift_forget (st);
  st->next_is_discont = TRUE;
  st->n_lag = st->next_lag = 0;
}

/* Starts a new conversation with the same prompts. */
static gboolean
reset_conversation (GstPpStream * st)
{
  GError *err = NULL;

  st->conversation_frame = 0;
  if (st->session == NULL || ppx_session_reset (st->session, &err))
    return TRUE;
  GST_ELEMENT_ERROR (st->element, STREAM, FAILED,
      ("Could not reset the conversation: %s", err->message), (NULL));
  g_error_free (err);
  return FALSE;
}

void
gst_pp_stream_start (GstPpStream * st, GstPpModelHandle * model,
    PpxSession * session)
{
  GstPpTickerMember *member =
      gst_pp_ticker_join (gst_pp_model_handle_get_ticker (model), session);

  st->session = session;
  st->frame_size =
      ppx_model_frame_size (gst_pp_model_handle_get_model (model));
  GST_OBJECT_LOCK (st->element);
  st->member = member;
  st->model = model;
  GST_OBJECT_UNLOCK (st->element);
  st->in_frame = g_new0 (gfloat, st->frame_size);
  st->out_frame = g_new0 (gfloat, st->frame_size);
  st->raw_frame = g_new0 (guint8, st->frame_size * sizeof (gfloat));
  st->align = gst_audio_stream_align_new (RATE, ALIGNMENT_THRESHOLD,
      DISCONT_WAIT);
  gst_audio_info_init (&st->info);
  st->have_caps = FALSE;
  st->text_caps_queued = FALSE;
  gst_segment_init (&st->segment, GST_FORMAT_TIME);
  gst_flow_combiner_reset (st->flow_combiner);
  reset_timeline (st);
  st->last_step_end = 0;
  st->conversation_frame = 0;
  st->frames_since_stats = 0;
  st->last_seek_seqnum = GST_SEQNUM_INVALID;

  GST_OBJECT_LOCK (st->element);
  memset (&st->stats, 0, sizeof (st->stats));
  st->stats.last_pts = GST_CLOCK_TIME_NONE;
  st->stats.last_running_time = GST_CLOCK_TIME_NONE;
  /* a new stream: its latency starts from what the engine has measured */
  gst_pp_latency_reset (&st->latency);
  GST_OBJECT_UNLOCK (st->element);
}

void
gst_pp_stream_stop (GstPpStream * st)
{
  GstPpTickerMember *member;

  /* under the object lock: FLUSH_START may come from another thread */
  GST_OBJECT_LOCK (st->element);
  member = st->member;
  st->member = NULL;
  st->model = NULL;
  GST_OBJECT_UNLOCK (st->element);
  gst_pp_ticker_leave (member);
  st->session = NULL;
  gst_adapter_clear (st->adapter);
  g_clear_pointer (&st->align, gst_audio_stream_align_free);
  g_clear_pointer (&st->in_frame, g_free);
  g_clear_pointer (&st->out_frame, g_free);
  g_clear_pointer (&st->raw_frame, g_free);
  st->have_caps = FALSE;
}

/* PTS of the sample @n samples after the resync point. */
static GstClockTime
sample_time (GstPpStream * st, guint64 n)
{
  return st->resync_pts + gst_util_uint64_scale_int (n, GST_SECOND, RATE);
}

/* ------------------------------------------------------------------------ */
/* One frame                                                                */

static GstPpFramePosition
frame_position (GstPpStream * st, guint n_samples)
{
  GstPpFramePosition pos;

  pos.frame = st->conversation_frame;
  pos.pts = sample_time (st, st->samples_since_resync);
  pos.duration = sample_time (st, st->samples_since_resync + n_samples)
      - pos.pts;
  pos.running_time = gst_segment_to_running_time (&st->segment,
      GST_FORMAT_TIME, pos.pts);
  pos.stream_time = gst_segment_to_stream_time (&st->segment,
      GST_FORMAT_TIME, pos.pts);
  return pos;
}

static GstFlowReturn
push_audio (GstPpStream * st, const gfloat * samples,
    guint n_samples, const GstPpFramePosition * pos)
{
  GstAudioFormat format = GST_AUDIO_INFO_FORMAT (&st->info);
  GstBuffer *buf;
  GstMapInfo map;

  buf = gst_buffer_new_allocate (NULL, n_samples * st->info.bpf, NULL);
  gst_buffer_map (buf, &map, GST_MAP_WRITE);
  gst_pp_f32_to_samples (format, samples, n_samples, map.data);
  gst_buffer_unmap (buf, &map);
  GST_BUFFER_PTS (buf) = pos->pts;
  GST_BUFFER_DURATION (buf) = pos->duration;
  if (st->next_is_discont) {
    GST_BUFFER_FLAG_SET (buf, GST_BUFFER_FLAG_DISCONT);
    GST_BUFFER_FLAG_SET (buf, GST_BUFFER_FLAG_RESYNC);
    st->next_is_discont = FALSE;
  }
  return gst_pad_push (st->srcpad, buf);
}

/* A text buffer, or a GAP event when the frame has no text (so that
 * downstream of text_src, e.g. a muxer, keeps moving), queued for text_src's
 * own thread (gstpptextpad.c). Returns the flow of the last text buffer that
 * thread pushed. */
static GstFlowReturn
push_text (GstPpStream * st, const gchar * text,
    const GstPpFramePosition * pos)
{
  GstBuffer *buf;

  if (text == NULL || text[0] == '\0') {
    gst_pp_text_pad_queue (&st->text, GST_MINI_OBJECT_CAST (gst_event_new_gap
            (pos->pts, pos->duration)));
  } else {
    buf = gst_buffer_new_memdup (text, strlen (text));
    GST_BUFFER_PTS (buf) = pos->pts;
    GST_BUFFER_DURATION (buf) = pos->duration;
    gst_pp_text_pad_queue (&st->text, GST_MINI_OBJECT_CAST (buf));
  }
  return gst_pp_text_pad_last_flow (&st->text);
}

/* How far the frame about to be handed in (its last real sample the
 * timeline's @n_samples-th from here) is behind its stream's real time
 * (us): its lateness (the hand-in minus the audio's duration since the
 * resync) beyond the least of the last GST_PP_LAG_FRAMES frames, when the
 * frame was complete as soon as the step before it returned (its input
 * waited); 0 otherwise. A stream that comes in real time hands its frames in
 * as they complete, at about the same lateness each; one whose audio came
 * late in a burst, or that missed ticks, hands them in at once, that much
 * later (gstppticker.h, "Behind"). */
#define AT_ONCE_US 5000
static gint64
frame_behind (GstPpStream * st, guint n_samples)
{
  gint64 now = g_get_monotonic_time (), lag, least;
  gboolean at_once = st->last_step_end > 0
      && now - st->last_step_end < AT_ONCE_US;
  guint i;

  lag = now - (gint64) gst_util_uint64_scale_int (st->samples_since_resync
      + n_samples, G_USEC_PER_SEC, RATE);
  least = lag;
  for (i = 0; i < st->n_lag; i++)
    least = MIN (least, st->lag_us[i]);
  st->lag_us[st->next_lag] = lag;
  st->next_lag = (st->next_lag + 1) % GST_PP_LAG_FRAMES;
  st->n_lag = MIN (st->n_lag + 1, GST_PP_LAG_FRAMES);
  return at_once ? lag - least : 0;
}

/* Steps the frame in st->in_frame (frame_size samples: @lead samples of
 * silence, then @n_samples of real input, then silence) and pushes the
 * answer to the real input: @n_samples from @lead on. */
static GstFlowReturn
step_and_push (GstPpStream * st, guint lead, guint n_samples)
{
  PpxFrameResult res = { 0 };
  GstPpTickInfo tick = { 0 };
  GstPpFramePosition pos;
  GstMessage *stats_msg, *text_msg = NULL, *frame_msg = NULL;
  gboolean frame_messages, latency_grew;
  GstClockTime batch_deadline;
  GstFlowReturn ret;
  GError *err = NULL;

  GST_OBJECT_LOCK (st->element);
  batch_deadline = st->settings->batch_deadline;
  if (GST_CLOCK_TIME_IS_VALID (batch_deadline))
    batch_deadline += (GstClockTime) st->align_extra_us * GST_USECOND;
  st->stats.batch_wait_ms = GST_CLOCK_TIME_IS_VALID (batch_deadline)
      ? (gdouble) batch_deadline / GST_MSECOND : -1;
  GST_OBJECT_UNLOCK (st->element);
  switch (gst_pp_ticker_step (st->member, st->in_frame, st->out_frame,
          &res, batch_deadline, frame_behind (st, n_samples), &tick, &err)) {
    case GST_PP_TICK_OK:
      break;
    case GST_PP_TICK_FLUSHING:
      GST_DEBUG_OBJECT (st->element, "flushing: frame not stepped");
      return GST_FLOW_FLUSHING;
    default:
      GST_ELEMENT_ERROR (st->element, STREAM, FAILED,
          ("PersonaPlex step failed: %s", err->message), (NULL));
      g_error_free (err);
      return GST_FLOW_ERROR;
  }
  GST_LOG_OBJECT (st->element, "stepped in a tick of %u session(s): waited %.1f ms,"
      " tick %.1f ms", tick.batch_size, tick.wait_ms, tick.tick_ms);

  pos = frame_position (st, n_samples);
  st->samples_since_resync += n_samples;
  st->conversation_frame++;

  stats_msg = gst_pp_stream_update_stats (st, res.step_ms, &tick, &pos,
      &frame_messages, &latency_grew);
  /* before the answer goes out: the pipeline grows its latency the sooner */
  if (latency_grew)
    gst_element_post_message (st->element,
        gst_message_new_latency (GST_OBJECT (st->element)));
  if (res.text != NULL && res.text[0] != '\0')
    text_msg = gst_pp_text_message_new (GST_OBJECT (st->element), res.text, &pos);
  if (frame_messages)
    frame_msg = gst_pp_frame_message_new (GST_OBJECT (st->element), &res, &pos);

  /* The text goes to text_src's own thread, so a text branch without a
   * queue does not block the audio during preroll. */
  ret = push_text (st, res.text, &pos);
  gst_flow_combiner_update_pad_flow (st->flow_combiner, st->textpad, ret);
  ret = push_audio (st, st->out_frame + lead, n_samples, &pos);
  ret = gst_flow_combiner_update_pad_flow (st->flow_combiner,
      st->srcpad, ret);

  if (frame_msg)
    gst_element_post_message (st->element, frame_msg);
  if (text_msg)
    gst_element_post_message (st->element, text_msg);
  if (stats_msg)
    gst_element_post_message (st->element, stats_msg);
  st->last_step_end = g_get_monotonic_time ();
  return ret;
}

/* Takes @n_samples (<= frame_size - lead) from the adapter, after the
 * timeline's lead of silence (frame alignment, first frame only) and padded
 * with silence, steps the frame and pushes an answer of @n_samples. */
static GstFlowReturn
step_from_adapter (GstPpStream * st, guint n_samples)
{
  gsize bytes = (gsize) n_samples * st->info.bpf;
  guint lead = st->lead_samples;

  st->lead_samples = 0;
  if (st->aligning) {
    st->aligning = FALSE;
    GST_DEBUG_OBJECT (st->element, "frame alignment: the first frame led by "
        "%u samples of silence, complete with %u", lead, n_samples);
  }
  gst_adapter_copy (st->adapter, st->raw_frame, 0, bytes);
  gst_adapter_flush (st->adapter, bytes);
  memset (st->in_frame, 0, lead * sizeof (gfloat));
  gst_pp_samples_to_f32 (GST_AUDIO_INFO_FORMAT (&st->info), st->raw_frame,
      n_samples, st->in_frame + lead);
  if (lead + n_samples < (guint) st->frame_size)
    memset (st->in_frame + lead + n_samples, 0,
        (st->frame_size - lead - n_samples) * sizeof (gfloat));
  return step_and_push (st, lead, n_samples);
}

static GstFlowReturn
step_complete_frames (GstPpStream * st)
{
  GstFlowReturn ret = GST_FLOW_OK;

  while (ret == GST_FLOW_OK) {
    guint need = st->frame_size - st->lead_samples;

    if (gst_adapter_available (st->adapter) < (gsize) need * st->info.bpf)
      break;
    ret = step_from_adapter (st, need);
  }
  return ret;
}

/* The last partial frame of a timeline (EOS, discontinuity): stepped
 * zero-padded, answered with its real length. */
static GstFlowReturn
step_partial_frame (GstPpStream * st)
{
  guint n_samples;
  GstFlowReturn ret = GST_FLOW_OK;

  if (!st->have_caps || st->session == NULL)
    return GST_FLOW_OK;
  n_samples = gst_adapter_available (st->adapter) / st->info.bpf;
  if (n_samples > 0)
    ret = step_from_adapter (st, n_samples);
  gst_adapter_clear (st->adapter);
  return ret;
}

/* ------------------------------------------------------------------------ */
/* Input                                                                    */

/* Decides whether @buffer starts a new timeline; if so, finishes the old
 * one (partial frame, optional conversation reset) and resyncs. */
static GstFlowReturn
handle_timeline (GstPpStream * st, GstBuffer * buffer,
    guint n_samples)
{
  GstClockTime pts = GST_BUFFER_PTS (buffer);
  gboolean flagged = GST_BUFFER_FLAG_IS_SET (buffer, GST_BUFFER_FLAG_DISCONT)
      || GST_BUFFER_FLAG_IS_SET (buffer, GST_BUFFER_FLAG_RESYNC);
  gboolean first = !GST_CLOCK_TIME_IS_VALID (st->resync_pts);
  gboolean discont;
  GstClockTime expected = GST_CLOCK_TIME_NONE;
  GstFlowReturn ret = GST_FLOW_OK;

  if (!first)
    expected = sample_time (st, st->samples_since_resync +
        gst_adapter_available (st->adapter) / st->info.bpf);

  if (GST_CLOCK_TIME_IS_VALID (pts)) {
    GstClockTime out_ts, out_dur;
    guint64 out_pos;

    discont = gst_audio_stream_align_process (st->align, flagged, pts,
        n_samples, &out_ts, &out_dur, &out_pos);
    /* A DISCONT flag on a buffer that continues the timeline exactly (e.g.
     * after upstream packet-loss concealment) does not break our frames. */
    if (discont && !first && flagged
        && (GstClockTimeDiff) ABS (GST_CLOCK_DIFF (expected, pts)) <
        (GstClockTimeDiff) ALIGNMENT_THRESHOLD) {
      GST_DEBUG_OBJECT (st->element, "DISCONT flag on a continuous timestamp");
      st->next_is_discont = TRUE;
      return GST_FLOW_OK;
    }
  } else {
    discont = flagged;
  }
  if (!discont && !first)
    return GST_FLOW_OK;

  if (!first) {
    GST_INFO_OBJECT (st->element, "discontinuity: expected %" GST_TIME_FORMAT
        ", got %" GST_TIME_FORMAT, GST_TIME_ARGS (expected),
        GST_TIME_ARGS (pts));
    gboolean reset;

    ret = step_partial_frame (st);
    expected = sample_time (st, st->samples_since_resync);
    GST_OBJECT_LOCK (st->element);
    reset = st->settings->reset_on_discont;
    GST_OBJECT_UNLOCK (st->element);
    if (reset && !reset_conversation (st))
      ret = GST_FLOW_ERROR;
  }

  if (GST_CLOCK_TIME_IS_VALID (pts))
    st->resync_pts = pts;
  else if (GST_CLOCK_TIME_IS_VALID (expected))
    st->resync_pts = expected;
  else if (st->segment.format == GST_FORMAT_TIME
      && GST_CLOCK_TIME_IS_VALID (st->segment.start))
    st->resync_pts = st->segment.start;
  else
    st->resync_pts = 0;
  st->samples_since_resync = 0;
  st->n_lag = st->next_lag = 0;
  st->next_is_discont = TRUE;
  st->lead_samples = 0;
  st->aligning = st->aligned = gst_pp_stream_alignment_applies (st, n_samples);
  st->arrival_us = st->arrival_interval_us = 0;
  st->arrival_samples = 0;
  st->align_extra_us = 0;
  gst_pp_stream_drift_forget (st);
  GST_DEBUG_OBJECT (st->element, "timeline starts at %" GST_TIME_FORMAT
      " (a first buffer of %u samples)%s", GST_TIME_ARGS (st->resync_pts),
      n_samples, st->aligning ? ", its frames aligned with the others'" : "");
  return ret;
}

static GstFlowReturn
sink_chain (GstPad * pad, GstObject * parent, GstBuffer * buffer)
{
  GstPpStream *st = gst_pad_get_element_private (pad);
  gsize size = gst_buffer_get_size (buffer);
  gsize carried, had;
  guint n_samples;
  gboolean gap;
  GstFlowReturn ret;

  if (!st->have_caps) {
    GST_ELEMENT_ERROR (st->element, CORE, NEGOTIATION, (NULL),
        ("received a buffer before caps"));
    gst_buffer_unref (buffer);
    return GST_FLOW_NOT_NEGOTIATED;
  }
  /* Buffers need not hold whole samples (a 16-bit stream cut at an odd
   * byte): the bytes of a split sample wait in the adapter for the rest.
   * @n_samples counts the samples this buffer completes. */
  carried = gst_adapter_available (st->adapter) % st->info.bpf;
  n_samples = (carried + size) / st->info.bpf;
  if (size == 0) {
    gst_buffer_unref (buffer);
    return GST_FLOW_OK;
  }
  if (n_samples == 0) {
    gst_adapter_push (st->adapter, buffer);
    return GST_FLOW_OK;
  }

  ret = handle_timeline (st, buffer, n_samples);
  if (ret != GST_FLOW_OK && ret != GST_FLOW_NOT_LINKED) {
    gst_buffer_unref (buffer);
    return ret;
  }
  gap = GST_BUFFER_FLAG_IS_SET (buffer, GST_BUFFER_FLAG_GAP);
  had = gst_adapter_available (st->adapter) / st->info.bpf;
  gst_adapter_push (st->adapter, buffer);
  gst_pp_stream_alignment_at_arrival (st, n_samples);
  gst_pp_stream_drift_at_arrival (st, had, gap);
  ret = step_complete_frames (st);
  st->drift_return_us = g_get_monotonic_time ();
  return ret;
}

/* GAP: silence in, so the model keeps its 80 ms clock and keeps talking.
 * Fed through the chain one frame at a time (bounded memory). */
static gboolean
handle_gap (GstPpStream * st, GstEvent * event)
{
  GstClockTime ts, duration;
  guint64 total, done = 0;
  GstFlowReturn ret = GST_FLOW_OK;

  gst_event_parse_gap (event, &ts, &duration);
  gst_event_unref (event);
  if (!st->have_caps || !GST_CLOCK_TIME_IS_VALID (duration)) {
    GST_DEBUG_OBJECT (st->element, "ignoring GAP without caps or duration");
    return TRUE;
  }
  if (!GST_CLOCK_TIME_IS_VALID (ts)
      && GST_CLOCK_TIME_IS_VALID (st->resync_pts))
    ts = sample_time (st, st->samples_since_resync +
        gst_adapter_available (st->adapter) / st->info.bpf);
  total = gst_util_uint64_scale_round (duration, RATE, GST_SECOND);
  GST_DEBUG_OBJECT (st->element, "GAP at %" GST_TIME_FORMAT ": %" G_GUINT64_FORMAT
      " samples of silence", GST_TIME_ARGS (ts), total);

  while (done < total && (ret == GST_FLOW_OK || ret == GST_FLOW_NOT_LINKED)) {
    guint n = MIN (total - done, (guint64) st->frame_size);
    GstBuffer *buf = gst_buffer_new_allocate (NULL, n * st->info.bpf, NULL);

    gst_buffer_memset (buf, 0, 0, n * st->info.bpf);
    if (GST_CLOCK_TIME_IS_VALID (ts)) {
      GST_BUFFER_PTS (buf) =
          ts + gst_util_uint64_scale_int (done, GST_SECOND, RATE);
      GST_BUFFER_DURATION (buf) =
          ts + gst_util_uint64_scale_int (done + n, GST_SECOND, RATE) -
          GST_BUFFER_PTS (buf);
    }
    GST_BUFFER_FLAG_SET (buf, GST_BUFFER_FLAG_GAP);
    ret = sink_chain (st->sinkpad, GST_OBJECT (st->element), buf);
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
handle_caps (GstPpStream * st, GstEvent * event)
{
  GstCaps *caps, *src_caps;
  GstAudioInfo info;
  gboolean ok;

  gst_event_parse_caps (event, &caps);
  if (!gst_audio_info_from_caps (&info, caps)) {
    GST_ELEMENT_ERROR (st->element, CORE, NEGOTIATION, (NULL),
        ("invalid audio caps %" GST_PTR_FORMAT, caps));
    gst_event_unref (event);
    return FALSE;
  }
  if (st->have_caps) {
    gboolean same = audio_info_same_format (&st->info, &info);

    if (!same)
      GST_ELEMENT_ERROR (st->element, CORE, NEGOTIATION,
          ("The input format changed mid-stream from %s to %s; "
              "personaplexduplex keeps one format per stream (put an "
              "audioconvert before it)",
              gst_audio_format_to_string (GST_AUDIO_INFO_FORMAT (&st->info)),
              gst_audio_format_to_string (GST_AUDIO_INFO_FORMAT (&info))),
          ("new caps %" GST_PTR_FORMAT, caps));
    gst_event_unref (event);
    return same;
  }

  st->info = info;
  st->have_caps = TRUE;
  /* the stream starts: the engine's other sessions wait for its frames */
  gst_pp_ticker_set_active (st->member, TRUE);
  src_caps = gst_audio_info_to_caps (&info);
  ok = gst_pad_push_event (st->srcpad, gst_event_new_caps (src_caps));
  gst_caps_unref (src_caps);
  if (!st->text_caps_queued) {
    GstCaps *text_caps = gst_pad_get_pad_template_caps (st->textpad);

    gst_pp_text_pad_queue (&st->text,
        GST_MINI_OBJECT_CAST (gst_event_new_caps (text_caps)));
    gst_caps_unref (text_caps);
    st->text_caps_queued = TRUE;
  }
  gst_event_unref (event);
  if (!ok)
    st->have_caps = FALSE;
  return ok;
}

/* Same stream-start for audio; `<id>/text` with the same group id for
 * text_src. */
static gboolean
handle_stream_start (GstPpStream * st, GstEvent * event)
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
  gst_pp_text_pad_queue (&st->text, GST_MINI_OBJECT_CAST (text_event));
  return gst_pad_push_event (st->srcpad, event);
}

/* Serialized events go to src directly and to text_src through its queue
 * (pushing them on text_src here would wait for its thread); the others
 * to both pads at once. */
static gboolean
forward_event (GstPpStream * st, GstEvent * event)
{
  if (!GST_EVENT_IS_SERIALIZED (event))
    return gst_pad_event_default (st->sinkpad, GST_OBJECT (st->element), event);
  gst_pp_text_pad_queue (&st->text, GST_MINI_OBJECT_CAST (gst_event_ref (event)));
  return gst_pad_push_event (st->srcpad, event);
}

static gboolean
sink_event (GstPad * pad, GstObject * parent, GstEvent * event)
{
  GstPpStream *st = gst_pad_get_element_private (pad);

  GST_LOG_OBJECT (st->element, "sink event %" GST_PTR_FORMAT, event);
  switch (GST_EVENT_TYPE (event)) {
    case GST_EVENT_STREAM_START:
      return handle_stream_start (st, event);
    case GST_EVENT_CAPS:
      return handle_caps (st, event);
    case GST_EVENT_SEGMENT:{
      const GstSegment *segment;

      gst_event_parse_segment (event, &segment);
      if (segment->format != GST_FORMAT_TIME) {
        /* our output is timestamped: downstream gets a TIME segment */
        guint32 seqnum = gst_event_get_seqnum (event);

        GST_DEBUG_OBJECT (st->element, "replacing a %s segment by a TIME one",
            gst_format_get_name (segment->format));
        gst_segment_init (&st->segment, GST_FORMAT_TIME);
        gst_event_unref (event);
        event = gst_event_new_segment (&st->segment);
        gst_event_set_seqnum (event, seqnum);
      } else {
        gst_segment_copy_into (segment, &st->segment);
      }
      return forward_event (st, event);
    }
    case GST_EVENT_GAP:
      return handle_gap (st, event);
    case GST_EVENT_EOS:
      step_partial_frame (st);
      gst_pp_ticker_set_active (st->member, FALSE);
      gst_pp_stream_post_stats (st);
      return forward_event (st, event);
    case GST_EVENT_FLUSH_START:{
      gboolean ok;

      /* a frame waiting for a tick comes back at once */
      gst_pp_stream_set_flushing (st, TRUE);
      ok = gst_pad_event_default (pad, parent, event);

      gst_pp_text_pad_flush_start (&st->text);
      return ok;
    }
    case GST_EVENT_FLUSH_STOP:{
      gboolean ok;

      /* serialized: the chain function has returned */
      gst_pp_stream_set_flushing (st, FALSE);
      reset_timeline (st);
      reset_conversation (st);
      gst_segment_init (&st->segment, GST_FORMAT_TIME);
      gst_flow_combiner_reset (st->flow_combiner);
      ok = gst_pad_push_event (st->srcpad, gst_event_ref (event));
      /* as gst_pad_event_default: TRUE when one pad took it */
      return gst_pp_text_pad_flush_stop (&st->text, event) || ok;
    }
    default:
      return forward_event (st, event);
  }
}
