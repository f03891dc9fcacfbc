/* personaplexduplex: frame alignment at a timeline's start (docs/element.md,
 * "Frame alignment (`align-frames`)"): whether a live stream's frames are
 * aligned with the others' on the shared engine, and the lead of silence
 * that makes its first frame complete at the last arrival before their
 * hand-in. What keeps them there over a call whose source drifts is
 * gstppstream-drift.c. */
#include "gstppstream-internal.h"

#define GST_CAT_DEFAULT gst_personaplex_duplex_debug

/* Frame alignment (docs/element.md): at the start of a timeline whose first
 * buffer (@n_samples) has just arrived from a live source, whether to align
 * its frames with those of the other streams ticking on the shared engine
 * (gst_pp_stream_alignment_at_arrival then decides the lead). */
gboolean
gst_pp_stream_alignment_applies (GstPpStream * st, guint n_samples)
{
  gboolean align, shared, live = FALSE;
  GstQuery *q;

  GST_OBJECT_LOCK (st->element);
  align = st->settings->align_frames;
  shared = st->settings->model_instance_id != NULL
      && st->settings->model_instance_id[0] != '\0';
  GST_OBJECT_UNLOCK (st->element);
  /* a buffer of half a frame or more leaves little to align */
  if (!align || !shared || st->member == NULL
      || n_samples >= (guint) st->frame_size / 2)
    return FALSE;
  q = gst_query_new_latency ();
  if (gst_pad_peer_query (st->sinkpad, q))
    gst_query_parse_latency (q, &live, NULL, NULL);
  gst_query_unref (q);
  if (!live)
    GST_DEBUG_OBJECT (st->element, "frame alignment: upstream is not live");
  return live;
}

/* Frame alignment, counted in arrivals: a frame is complete only when one of
 * the stream's arrivals (a buffer, or the buffers that come together: the
 * two 20 ms packets of a 40 ms client page) brings its last sample. At every
 * arrival before the timeline's first frame is complete (@n_samples: the
 * buffer just taken into the adapter), the lead is the silence that
 * completes the frame now when this arrival is the last one at or before
 * the others' hand-in (the next one, an arrival interval later, would come
 * after it, gst_pp_ticker_lead_in), else none (the frame waits for a later
 * arrival). The interval is the longest of the last one measured and the
 * audio of this arrival (a live source brings its audio in real time). The
 * lead used to be predicted once, at the first buffer, in whole buffers of
 * that buffer's length: with client pages the first decoded buffer is
 * 13.5 ms (the Opus pre-skip taken off) while the frames complete a page,
 * 40 ms, at a time, so the frame completed up to 20 ms from where the rule
 * aimed, more than batch-deadline before the others' (it ticked alone) or
 * up to 19 ms after them (every call waited for it). */
void
gst_pp_stream_alignment_at_arrival (GstPpStream * st, guint n_samples)
{
  gint64 now = g_get_monotonic_time (), period, g, lead;
  gsize have;

  /* after the first frame, until an arrival interval is measured: a first
   * frame complete at the stream's first arrival (led by silence) had only
   * that arrival's audio for its interval, 13.5 ms with client pages (the
   * Opus pre-skip), and its frames' deadline 20 ms short of the others'
   * (one ticked alone in the ramp of a 64-call H100 run, and 14 calls
   * missed that tick) */
  if (!st->aligning && !(st->aligned && st->arrival_interval_us == 0))
    return;
  if (st->arrival_us > 0 && now - st->arrival_us < GST_PP_ARRIVAL_GAP_US) {
    st->arrival_samples += n_samples;
  } else {
    if (st->arrival_us > 0)
      st->arrival_interval_us = now - st->arrival_us;
    st->arrival_us = now;
    st->arrival_samples = n_samples;
  }
  period = (gint64) st->frame_size * G_USEC_PER_SEC / GST_PP_STREAM_RATE;
  g = MAX (st->arrival_interval_us,
      (gint64) st->arrival_samples * G_USEC_PER_SEC / GST_PP_STREAM_RATE);
  g = CLAMP (g, 1, period);
  if (!st->aligning) {
    st->align_extra_us = MAX (st->align_extra_us, g);
    return;
  }
  have = gst_adapter_available (st->adapter) / st->info.bpf;
  if (have >= (gsize) st->frame_size) {
    st->lead_samples = 0;
    return;
  }
  /* a frame that would be complete at the next arrival, led by one arrival:
   * complete now */
  lead = gst_pp_ticker_lead_in (st->member, now + g, period, g);
  st->lead_samples = lead == g ? (guint) (st->frame_size - have) : 0;
  /* aligned: its frames complete up to an arrival before the others' and
   * wait for them that long beyond batch-deadline (with 40 ms pages and
   * the 20 ms default, one that completed 20-35 ms before them waited its
   * deadline and ticked alone, and they then waited theirs for it, every
   * period). The first call too (nothing to align with, lead -1): the
   * joiners are led to its phase, up to 5 ms after it, and it waits for
   * them as they wait for each other; with 20 ms it started the ticks
   * before the late ones were in once their phases had moved 20 ms after
   * it (the join ramp's split ticks, docs/server.md) */
  st->align_extra_us = g;
  GST_LOG_OBJECT (st->element, "frame alignment: an arrival of %u samples "
      "(%" G_GSIZE_FORMAT " in all, arrivals %.1f ms apart): %s",
      st->arrival_samples, have, g / 1000.0,
      st->lead_samples ? "the first frame completes now" : "waits");
}
