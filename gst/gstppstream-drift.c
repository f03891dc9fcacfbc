/* personaplexduplex: frame alignment kept over a call whose source runs on a
 * clock of its own (docs/element.md, "Clocks that drift").
 *
 * An aligned stream's frames complete within an arrival before the others'
 * hand-in (the ticker's reference phase) to LEAD_TOLERANCE after it. A
 * source on another clock (a client's sound card: 10-100 ppm) slides out of
 * that window over a long call. Measured on the emulated tick (8 calls,
 * +-2000 ppm, not loaded): a call sliding later was waited for by every tick,
 * so the ticks followed its clock; every call faster than it then handed in
 * each frame at once after the tick before, its latency growing at the
 * difference of the clocks (+2 ms/s for the server's, +4 ms/s for +2000 ppm),
 * without bound (to --max-input-backlog). So at each frame complete, the
 * stream tracks its phase against the reference (unwrapped: it moves a little
 * a frame), and when its frames complete more than DRIFT_MARGIN_US after the
 * window DRIFT_FRAMES frames in a row, it moves its frame boundary by one
 * arrival: silence inserted at the frame's start when late (the frame
 * completes an arrival earlier; its answer left out, as the first frame's
 * lead), the frame's first arrival of input dropped when early (it completes
 * an arrival later; the answer's timeline skips it, the next buffer flagged
 * DISCONT). At a quiet moment when one comes within DRIFT_PATIENCE frames
 * (that arrival's RMS under QUIET_RMS), else then. */
#include "gstppstream-internal.h"
#include "gstppsamples.h"

#include <math.h>

#define GST_CAT_DEFAULT gst_personaplex_duplex_debug

/* the others wait for a frame up to this long after their hand-in
 * (gstppticker.c's LEAD_TOLERANCE_US) */
#define LEAD_TOLERANCE_US 5000
/* beyond the window by more than this (hand-in jitter) ... */
#define DRIFT_MARGIN_US 5000
/* ... this many frames in a row (about 1 s) */
#define DRIFT_FRAMES 12
/* then at the first quiet arrival, or this many frames later at most */
#define DRIFT_PATIENCE 12
/* -40 dBFS */
#define QUIET_RMS 0.01

static void
drift_forget (GstPpStream * st)
{
  st->drift_have_phase = FALSE;
  st->drift_late = st->drift_early = 0;
}

/* The RMS of the adapter's first @n samples (st->in_frame as scratch: the
 * frame is built there only when it is stepped, after this). */
static gdouble
head_rms (GstPpStream * st, guint n)
{
  const guint8 *raw = gst_adapter_map (st->adapter, (gsize) n * st->info.bpf);
  gdouble sum = 0;
  guint i;

  if (raw == NULL)
    return 1.0;
  gst_pp_samples_to_f32 (GST_AUDIO_INFO_FORMAT (&st->info), raw, n,
      st->in_frame);
  gst_adapter_unmap (st->adapter);
  for (i = 0; i < n; i++)
    sum += (gdouble) st->in_frame[i] * st->in_frame[i];
  return n ? sqrt (sum / n) : 0;
}

void
gst_pp_stream_drift_at_arrival (GstPpStream * st, gsize had, gboolean gap)
{
  const gint64 rate = GST_PP_STREAM_RATE;
  gint64 now = g_get_monotonic_time (), period, g, tol, p, e;
  gsize have, need;
  guint gs;
  gboolean late, early;

  if (!st->aligned || st->aligning || st->arrival_interval_us == 0 || gap
      || st->member == NULL || st->arrival_samples == 0) {
    drift_forget (st);
    return;
  }
  need = (gsize) (st->frame_size - st->lead_samples);
  have = gst_adapter_available (st->adapter) / st->info.bpf;
  if (had >= need || have < need)
    return;                     /* no frame completes at this buffer */
  period = (gint64) st->frame_size * G_USEC_PER_SEC / rate;
  /* an arrival: its interval in whole buffers (the two 20 ms buffers of a
   * 40 ms client page: 40 ms), at most half a frame */
  gs = (guint) ((st->arrival_interval_us * rate / G_USEC_PER_SEC
          + st->arrival_samples / 2) / st->arrival_samples
      * st->arrival_samples);
  gs = CLAMP (gs, st->arrival_samples, (guint) st->frame_size / 2);
  g = (gint64) gs * G_USEC_PER_SEC / rate;
  tol = MIN (LEAD_TOLERANCE_US, g / 2);
  p = gst_pp_ticker_phase (st->member, now, period);
  if (p < 0) {
    drift_forget (st);
    return;
  }
  if (!st->drift_have_phase) {
    e = p > tol ? p - period : p;
  } else {
    gint64 d = ((p - st->drift_phase_us) % period + period + period / 2)
        % period - period / 2;

    e = st->drift_phase_us + d;
  }
  st->drift_have_phase = TRUE;
  late = e > tol + DRIFT_MARGIN_US;
  early = e < -(g + DRIFT_MARGIN_US);
  st->drift_late = late ? st->drift_late + 1 : 0;
  st->drift_early = early ? st->drift_early + 1 : 0;
  st->drift_phase_us = e;
  GST_LOG_OBJECT (st->element, "drift: frame complete %.1f ms after the "
      "others' hand-in (%u late, %u early in a row)", e / 1000.0,
      st->drift_late, st->drift_early);
  if (MAX (st->drift_late, st->drift_early) < DRIFT_FRAMES)
    return;
  if (MAX (st->drift_late, st->drift_early) < DRIFT_FRAMES + DRIFT_PATIENCE
      && head_rms (st, gs) > QUIET_RMS)
    return;                     /* wait for a quiet arrival */
  if (late && st->lead_samples == 0) {
    /* this frame starts with an arrival of silence: it takes that much
     * less input, and the next ones complete an arrival earlier */
    st->lead_samples = gs;
    st->drift_phase_us -= g;
    GST_OBJECT_LOCK (st->element);
    st->stats.drift_silence_ms += gs * 1000.0 / rate;
    GST_OBJECT_UNLOCK (st->element);
    GST_INFO_OBJECT (st->element, "frames complete %.1f ms after the "
        "others' for %u frames: %u samples of silence inserted",
        e / 1000.0, st->drift_late, gs);
  } else if (early && have >= gs) {
    /* this frame's first arrival of input is dropped: it completes an
     * arrival later, and so do the next ones */
    gst_adapter_flush (st->adapter, (gsize) gs * st->info.bpf);
    st->samples_since_resync += gs;
    st->next_is_discont = TRUE;
    st->drift_phase_us += g;
    GST_OBJECT_LOCK (st->element);
    st->stats.drift_dropped_ms += gs * 1000.0 / rate;
    GST_OBJECT_UNLOCK (st->element);
    GST_INFO_OBJECT (st->element, "frames complete %.1f ms before the "
        "others' for %u frames: %u samples of input dropped",
        -e / 1000.0, st->drift_early, gs);
  }
  st->drift_late = st->drift_early = 0;
}
