/* personaplexduplex: the stream's queries (caps on the audio pads, latency)
 * and upstream events (a SEEK that arrives on both source pads goes upstream
 * once). These run on any thread, without the sink pad's stream lock. */
#include "gstppstream-internal.h"

#define GST_CAT_DEFAULT gst_personaplex_duplex_debug

/* The caps of @pad: its template, narrowed by what the peer of the audio
 * pad on the other side accepts (both sides carry the same format). */
static GstCaps *
query_audio_caps (GstPpStream * st, GstPad * pad,
    GstCaps * filter)
{
  GstPad *other = pad == st->sinkpad ? st->srcpad : st->sinkpad;
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

/* Answers a caps query on @pad with the audio caps it can take or give. */
static gboolean
answer_caps_query (GstPpStream * st, GstPad * pad, GstQuery * query)
{
  GstCaps *filter, *caps;

  gst_query_parse_caps (query, &filter);
  caps = query_audio_caps (st, pad, filter);
  gst_query_set_caps_result (query, caps);
  gst_caps_unref (caps);
  return TRUE;
}

gboolean
gst_pp_stream_sink_query (GstPad * pad, GstObject * parent, GstQuery * query)
{
  GstPpStream *st = gst_pad_get_element_private (pad);

  if (GST_QUERY_TYPE (query) == GST_QUERY_CAPS)
    return answer_caps_query (st, pad, query);
  return gst_pad_query_default (pad, parent, query);
}

/* Our output for input frame j can only be computed once frame j has fully
 * arrived (one frame) and then takes up to processing-deadline (automatic:
 * the engine's tick p99 plus a margin, gstpplatency.h). */
static gboolean
handle_latency_query (GstPpStream * st, GstQuery * query)
{
  gboolean live;
  GstClockTime min, max, ours;

  if (!gst_pad_peer_query (st->sinkpad, query))
    return FALSE;
  gst_query_parse_latency (query, &live, &min, &max);
  ours = gst_pp_stream_own_latency (st);
  GST_DEBUG_OBJECT (st->element, "upstream latency min %" GST_TIME_FORMAT " max %"
      GST_TIME_FORMAT ", ours %" GST_TIME_FORMAT, GST_TIME_ARGS (min),
      GST_TIME_ARGS (max), GST_TIME_ARGS (ours));
  min += ours;
  if (GST_CLOCK_TIME_IS_VALID (max))
    max += ours;
  gst_query_set_latency (query, live, min, max);
  return TRUE;
}

gboolean
gst_pp_stream_src_query (GstPad * pad, GstObject * parent, GstQuery * query)
{
  GstPpStream *st = gst_pad_get_element_private (pad);

  switch (GST_QUERY_TYPE (query)) {
    case GST_QUERY_LATENCY:
      return handle_latency_query (st, query);
    case GST_QUERY_CAPS:
      if (pad == st->srcpad)
        return answer_caps_query (st, pad, query);
      return gst_pad_query_default (pad, parent, query);
    default:
      return gst_pad_query_default (pad, parent, query);
  }
}

gboolean
gst_pp_stream_src_event (GstPad * pad, GstObject * parent, GstEvent * event)
{
  GstPpStream *st = gst_pad_get_element_private (pad);

  if (GST_EVENT_TYPE (event) == GST_EVENT_SEEK) {
    guint32 seqnum = gst_event_get_seqnum (event);
    gboolean duplicate;

    GST_OBJECT_LOCK (st->element);
    duplicate = seqnum == st->last_seek_seqnum;
    st->last_seek_seqnum = seqnum;
    GST_OBJECT_UNLOCK (st->element);
    if (duplicate) {
      GST_DEBUG_OBJECT (pad, "seek %u already forwarded", seqnum);
      gst_event_unref (event);
      return TRUE;
    }
  }
  return gst_pad_push_event (st->sinkpad, event);
}
