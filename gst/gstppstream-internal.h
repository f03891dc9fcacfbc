/* personaplexduplex: what the stream's files (gstppstream.c: pads, framing,
 * events; gstppstream-query.c: queries and upstream events;
 * gstppstream-align.c, gstppstream-drift.c: frame alignment;
 * gstppstream-stats.c: statistics and the own latency) share. Internal to
 * the stream. */
#ifndef __GST_PP_STREAM_INTERNAL_H__
#define __GST_PP_STREAM_INTERNAL_H__

#include "gstppmessages.h"
#include "gstppstream.h"

G_BEGIN_DECLS

GST_DEBUG_CATEGORY_EXTERN (gst_personaplex_duplex_debug);

/* The sample rate of the pads' audio. */
#define GST_PP_STREAM_RATE 24000

/* Buffers that come within this of an arrival's first buffer belong to it
 * (a source that delivers several at once: an Ogg page's Opus packets). */
#define GST_PP_ARRIVAL_GAP_US 3000

/* Pad functions (gstppstream-query.c), installed by gst_pp_stream_init. */
gboolean gst_pp_stream_sink_query (GstPad * pad, GstObject * parent,
    GstQuery * query);
gboolean gst_pp_stream_src_query (GstPad * pad, GstObject * parent,
    GstQuery * query);
gboolean gst_pp_stream_src_event (GstPad * pad, GstObject * parent,
    GstEvent * event);

/* Accounts one step; returns a stats message when one is due, and sets
 * @latency_grew when the engine's ticks outgrew the automatic deadline last
 * answered (a latency message is due). */
GstMessage *gst_pp_stream_update_stats (GstPpStream * st, gdouble step_ms,
    const GstPpTickInfo * tick, const GstPpFramePosition * pos,
    gboolean * frame_messages, gboolean * latency_grew);

/* Frame alignment at a timeline's start (gstppstream-align.c): whether the
 * timeline whose first buffer (@n_samples) just arrived aligns its frames
 * with the others' (a shared engine, a live upstream, short buffers) ... */
gboolean gst_pp_stream_alignment_applies (GstPpStream * st,
    guint n_samples);
/* ... and, at each arrival until its first frame is complete, the lead that
 * completes it at the last arrival before the others' hand-in; after it,
 * the arrival interval its frames may wait beyond batch-deadline. */
void gst_pp_stream_alignment_at_arrival (GstPpStream * st, guint n_samples);

/* Frame alignment kept over a call (gstppstream-drift.c): a buffer was
 * taken into the adapter, which held @had samples before it (@gap: a GAP's
 * silence); when it completes a frame of an aligned stream whose frames
 * complete outside the others' window, the frame boundary may move by an
 * arrival (st->lead_samples set, or input dropped from the adapter). */
void gst_pp_stream_drift_at_arrival (GstPpStream * st, gsize had,
    gboolean gap);
/* Forgets the source clock followed (a new timeline). */
void gst_pp_stream_drift_forget (GstPpStream * st);

/* Posts a personaplex-stats message now (EOS) and restarts the interval. */
void gst_pp_stream_post_stats (GstPpStream * st);

G_END_DECLS

#endif /* __GST_PP_STREAM_INTERNAL_H__ */
