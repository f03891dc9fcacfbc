/* personaplexduplex: the frame tick shared by the elements of one engine.
 *
 * Every element whose session lives on a shared PpxEngine hands its 80 ms
 * frame to the engine's ticker and waits for its answer; one
 * ppx_engine_step() then steps all the frames handed in as one batch. A
 * tick runs as soon as every member in the wait set has handed in its
 * frame, or when the batch deadline (the earliest of the hand-in time plus
 * the member's batch-deadline over the frames waiting) passes. Under load
 * (the engine's ticks took 3/4 of the last four periods, until less than
 * 1/4) a frame's deadline counts from the next tick's due time (a period
 * after the last tick started, or was due) when that is later than its hand-in: one
 * tick a period steps every member, and members behind real time merge
 * into full ticks instead of alternating in ticks of their own. Those due
 * times keep to a grid of periods: a tick that started late (it waited for
 * a frame past its due time) does not make the next one due later. The tick
 * runs on the thread of one of the waiting members (the leader: whichever
 * finds the set complete or the deadline passed first); there is no
 * thread of the ticker's own. See docs/element.md ("The tick").
 *
 * The wait set: a member joins it at every hand-in, and when its stream
 * starts (caps) if the ticker is not ticking (streams that start together
 * tick together; one that joins a ticking ticker is not waited for before
 * its first frame is in), and leaves it at EOS, when flushing, and when a tick runs
 * without it (it missed the deadline: a stalled, paused or blocked
 * pipeline). So a stalled member costs the others one deadline at most
 * (under load, counted from the due tick); afterwards they tick without
 * waiting for it until it hands in again.
 *
 * Behind: a member whose input waits (its audio came late in a burst, or
 * it missed ticks) hands in each frame as soon as it has stepped the one
 * before, behind its stream's real time by up to the backlog. Under load one
 * tick a period steps one frame of every member, so such a member stayed
 * that far behind for good (its latency that much higher) unless every
 * member was. A member says how far behind each frame is (the stream's
 * lateness beyond the least of its last 4 s, when it handed the frame in at
 * once: gstppstream.c), and from half a period behind, 3 frames in a row
 * (not one late tick), it is behind: a
 * catch-up tick steps the frames pending that are behind at once, between
 * the ticks on the grid (the others' frames wait for the next one), at most
 * one per period, when the tick due next,
 * started as the catch-up ends, still ends by the time the one after it is
 * due (it starts that much later, once; the grid does not move). A backlog
 * of n frames is stepped away in n periods or more where the engine has the
 * time: a catch-up and two full ticks fit in two periods.
 *
 * After a stall (docs/server.md, "After a stall"): a catch-up runs only
 * where it helps. Not while every member still to come was behind (they
 * come at once, and the tick due takes them all: a catch-up of the first
 * few delayed it and the whole backlog with it); not for a member whose
 * next frame would still miss the tick due next (its lag is its phase, less
 * than a frame: the catch-up cost a tick's fixed time a period and brought
 * nothing); not again, for 50 periods, at about the lag at which a member's
 * catch-up did not bring its next frame in time. And a tick overdue when the
 * last one ended waits up to 10 ms for the members of that one that were
 * behind (their next frame is complete): run at once, it left them out, and
 * the two groups ticked in turn, each without the other's frames.
 *
 * Internal to the plugin. */
#ifndef __GST_PP_TICKER_H__
#define __GST_PP_TICKER_H__

#include <gst/gst.h>
#include "personaplex.h"

G_BEGIN_DECLS

typedef struct _GstPpTicker GstPpTicker;
typedef struct _GstPpTickerMember GstPpTickerMember;

/* What one element's frame went through. */
typedef struct
{
  guint batch_size;             /* sessions stepped in the tick */
  gdouble tick_ms;              /* wall time of the tick (ppx_engine_step) */
  gdouble wait_ms;              /* from the hand-in to the start of the tick */
} GstPpTickInfo;

typedef enum
{
  GST_PP_TICK_OK,
  GST_PP_TICK_FLUSHING,         /* the member is flushing; its frame was not stepped */
  GST_PP_TICK_ERROR,
} GstPpTickResult;

/* A ticker for @engine (takes a reference), whose frames last @period us. */
GstPpTicker *gst_pp_ticker_new (PpxEngine * engine, gint64 period);
/* Every member must have left. */
void gst_pp_ticker_free (GstPpTicker * ticker);

/* A member stepping @session (a session of the ticker's engine; the member
 * does not own it). Not in the wait set until its stream starts. */
GstPpTickerMember *gst_pp_ticker_join (GstPpTicker * ticker,
    PpxSession * session);
/* Leaves (waits for a tick that is stepping its frame) and frees @member.
 * This and the two below do nothing for a NULL member. */
void gst_pp_ticker_leave (GstPpTickerMember * member);

/* The member's stream started (TRUE: it joins the wait set, unless the
 * ticker is ticking: then at its first hand-in) or ended (FALSE, at EOS:
 * the others stop waiting for it). */
void gst_pp_ticker_set_active (GstPpTickerMember * member, gboolean active);

/* Flushing: a frame waiting for a tick is withdrawn (its step returns
 * GST_PP_TICK_FLUSHING at once), later steps return that too, and the
 * member leaves the wait set. A frame already in a running tick finishes
 * with it. Call from any thread. */
void gst_pp_ticker_set_flushing (GstPpTickerMember * member,
    gboolean flushing);

/* Hands in one frame (@in, @out: frame_size samples each, @res: the
 * session's tokens and text) and waits until a tick stepped it.
 * @batch_deadline: how long this frame may wait for the others (ns).
 * @behind_us: how far the frame is behind its stream's real time, beyond
 * the least the stream was lately (0: not behind; "Behind", above).
 * Call from the member's streaming thread only. */
GstPpTickResult gst_pp_ticker_step (GstPpTickerMember * member,
    const gfloat * in, gfloat * out, PpxFrameResult * res,
    GstClockTime batch_deadline, gint64 behind_us, GstPpTickInfo * info,
    GError ** error);

/* Frame alignment (docs/element.md "Frame alignment"): how much earlier
 * (us, 0 <= lead < @period) a member starting a new stream should begin its
 * frames, by stepping that much silence before its first samples, so that
 * its frames are complete when the other members' frames are handed in and
 * all of them tick together. @complete_at: when its first frame would be
 * complete without a lead (monotonic us); @granularity: the duration of its
 * input buffers (a frame is complete only when the buffer holding its last
 * sample arrives): the lead is a whole number of buffers that makes the
 * frame complete at the last arrival before the others' hand-in (or up to
 * 5 ms after it). The others' hand-in: the phase the ticker's cadence began
 * at (the latest hand-in of its first tick, or of the last one that stepped
 * the only member waited for; not the last tick's start, which follows the
 * latest member, so that each joiner up to 5 ms after it moved the phase
 * later and the first call's frames, on their deadline, ticked apart from
 * the tail: the join ramp's split ticks, docs/server.md), under load the
 * grid the ticks are due on. -1 when no other member of the ticker is active or the
 * ticker has not ticked in the last few periods (nothing to align with).
 * The element asks at each arrival whether that arrival completes its frame
 * (@complete_at: the next arrival, @granularity: the arrival interval; a
 * lead of one interval: yes). */
gint64 gst_pp_ticker_lead_in (GstPpTickerMember * member, gint64 complete_at,
    gint64 period, gint64 granularity);

/* Frame alignment kept over a call (docs/element.md, "Clocks that drift"):
 * how long after the others' hand-in (the reference of
 * gst_pp_ticker_lead_in) a frame complete at @at is, modulo @period
 * (0 <= phase < @period); -1 when there is nothing to align with (as
 * gst_pp_ticker_lead_in). */
gint64 gst_pp_ticker_phase (GstPpTickerMember * member, gint64 at,
    gint64 period);

/* The live ticks (docs/element.md, "Tick history"): the last
 * GST_PP_TICK_HISTORY ticks the ticker ran, oldest first: rows stepped, wall
 * time (ms, an emulated device's included) and when each ended (monotonic
 * us). Copies up to @max of the newest into the arrays (any may be NULL) and
 * returns how many; *@total: the ticks run since the ticker was made. */
#define GST_PP_TICK_HISTORY 256
guint gst_pp_ticker_history (GstPpTicker * ticker, guint * rows,
    gdouble * ms, gint64 * end_us, guint max, guint64 * total);

/* The least time (ms) a tick of @rows lasts on the emulated device of
 * PPX_TICK_EMULATE (docs/testing.md); 0 without it. */
gdouble gst_pp_ticker_emulated_ms (GstPpTicker * ticker, guint rows);

G_END_DECLS

#endif /* __GST_PP_TICKER_H__ */
