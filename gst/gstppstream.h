/* personaplexduplex: the streaming side (pads, framing, events, queries).
 * Internal to the plugin.
 *
 * The element owns one GstPpStream and calls into it; the stream knows
 * nothing of the element's type: it gets the pads, the element (for its
 * object lock, messages and errors) and the element's settings when it is
 * made, and the model, the session and its ticker membership between
 * gst_pp_stream_start and gst_pp_stream_stop. The pads' functions find the
 * stream through their element_private pointer. */
#ifndef __GST_PP_STREAM_H__
#define __GST_PP_STREAM_H__

#include <gst/gst.h>
#include <gst/audio/audio.h>
#include <gst/base/base.h>

#include "gstpplatency.h"
#include "gstppmodelpool.h"
#include "gstppsettings.h"
#include "gstpptextpad.h"
#include "gstppticker.h"

/* The half seconds over which a source's clock is followed (32 s):
 * gstppstream-drift.c. */
#define GST_PP_DRIFT_BUCKETS 64
/* The frames over which a stream's lateness is judged (4 s): see
 * gstppticker.h, "Behind". */
#define GST_PP_LAG_FRAMES 50

G_BEGIN_DECLS

typedef struct
{
  GstElement *element;          /* the owner (not a reference) */
  GstPad *sinkpad, *srcpad, *textpad;
  const GstPersonaplexSettings *settings;       /* the owner's (object lock) */
  GstPersonaplexStats stats;    /* object lock */
  GstPpLatency latency;         /* what LATENCY queries were answered (object lock) */

  /* Between start and stop. The session is stepped through the engine's
   * ticker by `member`, only with the sink stream lock held (flushing is set
   * from any thread); model and member are set and cleared under the object
   * lock. */
  GstPpModelHandle *model;
  PpxSession *session;
  GstPpTickerMember *member;
  gint frame_size;              /* samples per frame (1920) */

  /* Streaming state, guarded by the sink pad's stream lock. */
  GstFlowCombiner *flow_combiner;
  GstAudioInfo info;
  gboolean have_caps;
  GstSegment segment;
  GstAdapter *adapter;
  GstAudioStreamAlign *align;
  GstClockTime resync_pts;      /* PTS of the first sample since a resync */
  guint64 samples_since_resync; /* samples already stepped since then */
  guint lead_samples;           /* silence before the timeline's first frame (frame alignment) */
  /* frame alignment, decided at the arrivals before the timeline's first
   * frame is complete (gstppstream-align.c) */
  gboolean aligning;            /* the first frame is not complete yet */
  gboolean aligned;             /* the timeline's frames are aligned (until
                                 * an arrival interval is measured, the
                                 * arrivals still set align_extra_us) */
  gint64 arrival_us;            /* when the current arrival's first buffer came */
  gint64 arrival_interval_us;   /* between the last two arrivals (0: one seen) */
  guint arrival_samples;        /* the samples the current arrival brought */
  /* frame alignment kept over the call (gstppstream-drift.c): where its
   * frames complete against the others' hand-in less the offset of the
   * arrival that completed them (q, the origin's), the source clock's offset
   * (the least of the arrivals that came idle, by half second: a ring), the
   * frame boundary's moves, frames in a row complete after / before the
   * window, when the last buffer was taken */
  gboolean drift_ready, drift_wrapped;
  gint64 drift_q_us, drift_qoff_us, drift_first_us, drift_moves_us,
      drift_wrap_us, drift_off0_us, drift_t0_us;
  gint64 drift_bucket_off[GST_PP_DRIFT_BUCKETS],
      drift_bucket_t[GST_PP_DRIFT_BUCKETS];
  guint drift_n_buckets, drift_next;
  guint drift_late, drift_early;
  gint64 drift_return_us;
  gint64 drift_arrival_us;      /* the current arrival's first buffer */
  gint64 drift_arrival_off_us;  /* ... its offset (time less audio received) */
  gboolean drift_arrival_idle;  /* ... came while the stream was idle */
  gint64 align_extra_us;        /* what this stream's frames may wait beyond
                                 * batch-deadline: its arrival interval once
                                 * aligned (its frames complete up to one
                                 * arrival before the others') */
  /* how late the frames are (gst_pp_stream_behind): each frame's hand-in
   * minus its audio's duration since the resync, the last ones (a ring) */
  gint64 lag_us[GST_PP_LAG_FRAMES];
  guint n_lag, next_lag;
  gint64 last_step_end;         /* when the last step returned (monotonic us) */
  gboolean next_is_discont;
  guint64 conversation_frame;   /* frames since the prompts (reset on flush) */
  guint frames_since_stats;
  gfloat *in_frame;
  gfloat *out_frame;
  guint8 *raw_frame;
  gboolean text_caps_queued;    /* caps queued for this stream */

  /* text_src's own streaming thread (gstpptextpad.c) */
  GstPpTextPad text;

  /* Upstream SEEKs arrive on both source pads; forward each seqnum once
   * (object lock). */
  guint32 last_seek_seqnum;
} GstPpStream;

/* Installs the pads' chain, event, query and activation functions; the
 * settings stay the element's, read under its object lock. */
void gst_pp_stream_init (GstPpStream * st, GstElement * element,
    GstPad * sinkpad, GstPad * srcpad, GstPad * textpad,
    const GstPersonaplexSettings * settings);

/* Frees what the stream holds (finalize). */
void gst_pp_stream_clear (GstPpStream * st);

/* READY->PAUSED, after the session exists: joins the model's ticker with
 * @session and starts fresh streaming state (@model and @session stay the
 * caller's, borrowed until gst_pp_stream_stop). */
void gst_pp_stream_start (GstPpStream * st, GstPpModelHandle * model,
    PpxSession * session);

/* PAUSED->READY, after the pads are deactivated: leaves the ticker, frees
 * frame buffers and forgets the model and session. */
void gst_pp_stream_stop (GstPpStream * st);

/* Sets the ticker membership flushing: a frame waiting for a tick returns
 * at once (any thread; nothing before start). */
void gst_pp_stream_set_flushing (GstPpStream * st, gboolean flushing);

/* The element's own latency, answered to a LATENCY query (and recorded as
 * answered): one frame plus the processing deadline (explicit, or automatic:
 * gstpplatency.h), plus batch-deadline with a model-instance-id. */
GstClockTime gst_pp_stream_own_latency (GstPpStream * st);

G_END_DECLS

#endif /* __GST_PP_STREAM_H__ */
