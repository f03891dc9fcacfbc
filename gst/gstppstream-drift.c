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
 * without bound (to --max-input-backlog).
 *
 * So the stream follows its source's clock against the monotonic one: the
 * offset of each arrival (its time less the audio received, counted in
 * samples) from the arrivals that came while the stream was idle (one that
 * waited upstream while a frame was stepped is read late), their least over
 * the last few (the lower envelope: an arrival is only ever delayed), and,
 * while none comes idle (a stream whose frames all wait for the tick reads
 * every arrival late), the rate measured over the call. Its frames' phase
 * against the others' is where the first frame was aligned plus how far the
 * source's clock moved since, plus the moves below: when it is more than
 * DRIFT_MARGIN_US beyond the window DRIFT_FRAMES frames in a row, the frame
 * boundary moves by one arrival: silence inserted at the frame's start when
 * late (the frame completes an arrival earlier; its answer left out, as the
 * first frame's lead), the frame's first arrival of input dropped when early
 * (it completes an arrival later; the answer's timeline skips it, the next
 * buffer flagged DISCONT). At a quiet moment when one comes within
 * DRIFT_PATIENCE frames (that arrival's RMS under QUIET_RMS), else then.
 * Measured from the stream's own arrivals, not from the ticker's reference at
 * each frame: that reference moves when one member ticks alone (after a
 * stall), and a first version read that as a drift (a 0 ppm call of 8 had
 * 120 ms of input dropped). */
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
/* an arrival that comes this long after the last buffer was taken came
 * while the stream was idle (its time is its own) */
#define IDLE_US 1000
/* the origin: the first arrivals that came idle over this long */
#define ORIGIN_US (3 * G_USEC_PER_SEC)
/* the rate is measured over at least this long ... */
#define RATE_BASE_US (4 * G_USEC_PER_SEC)
/* ... and used once no arrival came idle for this long */
#define STALE_US G_USEC_PER_SEC

void
gst_pp_stream_drift_forget (GstPpStream * st)
{
  st->drift_ready = FALSE;
  st->drift_n_first = st->drift_n_ring = st->drift_next = 0;
  st->drift_moves_us = 0;
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

/* An arrival that came idle, @off (its time less the audio received) at
 * @now: into the origin (the least over the first ORIGIN_US: a call's first
 * arrivals may come late, the backlog of its start) or the ring of the
 * last few. */
static void
note_offset (GstPpStream * st, gint64 off, gint64 now)
{
  if (st->drift_n_first == 0 || now - st->drift_first_us < ORIGIN_US) {
    if (st->drift_n_first == 0)
      st->drift_first_us = now;
    if (st->drift_n_first == 0 || off < st->drift_off0_us) {
      st->drift_off0_us = off;
      st->drift_t0_us = now;
    }
    st->drift_n_first++;
    return;
  }
  st->drift_ring_off[st->drift_next] = off;
  st->drift_ring_t[st->drift_next] = now;
  st->drift_next = (st->drift_next + 1) % GST_PP_DRIFT_RING;
  st->drift_n_ring = MIN (st->drift_n_ring + 1, GST_PP_DRIFT_RING);
}

/* How far the source's clock moved against the monotonic one since the
 * origin (us, negative: it runs fast), at @now. */
static gint64
clock_moved (GstPpStream * st, gint64 now)
{
  gint64 env = G_MAXINT64, env_t = 0, last = 0;
  guint i;

  if (st->drift_n_ring == 0)
    return 0;
  for (i = 0; i < st->drift_n_ring; i++) {
    if (st->drift_ring_off[i] < env) {
      env = st->drift_ring_off[i];
      env_t = st->drift_ring_t[i];
    }
    last = MAX (last, st->drift_ring_t[i]);
  }
  /* the least of the last few; where none came idle lately, carried on at
   * the rate measured from the origin to it */
  if (now - last > STALE_US && env_t - st->drift_t0_us >= RATE_BASE_US)
    env += (gint64) ((gdouble) (env - st->drift_off0_us)
        / (env_t - st->drift_t0_us) * (now - env_t));
  return env - st->drift_off0_us;
}

void
gst_pp_stream_drift_at_arrival (GstPpStream * st, gsize had, gboolean gap)
{
  const gint64 rate = GST_PP_STREAM_RATE;
  gint64 now = g_get_monotonic_time (), period, g, tol, e;
  gsize have, need;
  guint gs;
  gboolean late, early, idle;

  if (!st->aligned || st->aligning || st->arrival_interval_us == 0 || gap
      || st->member == NULL || st->arrival_samples == 0) {
    gst_pp_stream_drift_forget (st);
    return;
  }
  have = gst_adapter_available (st->adapter) / st->info.bpf;
  period = (gint64) st->frame_size * G_USEC_PER_SEC / rate;
  /* an arrival: its interval in whole buffers (the two 20 ms buffers of a
   * 40 ms client page: 40 ms), at most half a frame */
  gs = (guint) ((st->arrival_interval_us * rate / G_USEC_PER_SEC
          + st->arrival_samples / 2) / st->arrival_samples
      * st->arrival_samples);
  gs = CLAMP (gs, st->arrival_samples, (guint) st->frame_size / 2);
  g = (gint64) gs * G_USEC_PER_SEC / rate;
  tol = MIN (LEAD_TOLERANCE_US, g / 2);
  /* the buffers within GST_PP_ARRIVAL_GAP_US of an arrival's first are that
   * arrival (a client page's two packets): idle when its first was */
  if (st->drift_arrival_us > 0 && now - st->drift_arrival_us < GST_PP_ARRIVAL_GAP_US) {
    idle = st->drift_arrival_idle;
  } else {
    idle = st->drift_arrival_idle = now - st->drift_return_us >= IDLE_US;
    st->drift_arrival_us = now;
    if (idle)
      note_offset (st, now - (gint64) ((st->samples_since_resync + have)
              * G_USEC_PER_SEC / rate), now);
  }
  need = (gsize) (st->frame_size - st->lead_samples);
  if (had >= need || have < need)
    return;                     /* no frame completes at this buffer */
  if (st->drift_n_ring == 0) {
    /* in the origin: where the frames complete against the others'
     * hand-in, the earliest of those that came idle (0 with nobody to
     * align with: this stream is the reference) */
    gint64 p = gst_pp_ticker_phase (st->member, now, period);
    /* around the window's middle, -(g - tol) / 2 (it is (-g, tol]) */
    gint64 mid = -(g - tol) / 2;

    p = p < 0 ? 0 : ((p - mid) % period + period + period / 2) % period
        - period / 2 + mid;
    if (idle && (!st->drift_ready || p < st->drift_e0_us))
      st->drift_e0_us = p;
    st->drift_ready |= idle;
    return;
  }
  if (!st->drift_ready)
    return;
  e = st->drift_e0_us + clock_moved (st, now) + st->drift_moves_us;
  late = e > tol + DRIFT_MARGIN_US;
  early = e < -(g + DRIFT_MARGIN_US);
  st->drift_late = late ? st->drift_late + 1 : 0;
  st->drift_early = early ? st->drift_early + 1 : 0;
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
    st->drift_moves_us -= g;
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
    st->drift_moves_us += g;
    GST_OBJECT_LOCK (st->element);
    st->stats.drift_dropped_ms += gs * 1000.0 / rate;
    GST_OBJECT_UNLOCK (st->element);
    GST_INFO_OBJECT (st->element, "frames complete %.1f ms before the "
        "others' for %u frames: %u samples of input dropped",
        -e / 1000.0, st->drift_early, gs);
  }
  st->drift_late = st->drift_early = 0;
}
