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
 * samples). Arrivals that came while the stream was idle (one that waited
 * upstream while a frame was stepped is read late) are kept by half second,
 * the least of each (an arrival is only ever delayed); the clock's rate is
 * the median of the slopes between those minima, at most MAX_PPM (seconds
 * of arrivals all read late, a loaded machine, move it by that rate over
 * their length: a least of the last few was moved by all of their delay,
 * and 0 ppm calls had silence inserted and input dropped), and its offset
 * now the least of the minima carried to now at that rate, over the last 64
 * half seconds that had one (the lower envelope). Its frames' phase against
 * the others' hand-in is q plus that offset, q being where a frame in its
 * first 3 s completed against that hand-in less the offset of the arrival
 * that completed it: both are read late by the same delay, so q holds
 * whenever that frame came (an earlier version took the two from different
 * arrivals, and a call whose first arrivals all came 60 ms late on a loaded
 * machine had input dropped when they came on time), plus the moves below.
 * An offset that moved more than the bound allows since the origin is no
 * drift: followed anew. When the phase is more than DRIFT_MARGIN_US beyond
 * the window DRIFT_FRAMES frames in a row, the frame boundary moves by one
 * arrival: silence inserted at the frame's start when
 * late (the frame completes an arrival earlier; its answer left out, as the
 * first frame's lead), the frame's first arrival of input dropped when early
 * (it completes an arrival later; the answer's timeline skips it, the next
 * buffer flagged DISCONT). At a quiet moment when one comes within
 * DRIFT_PATIENCE frames (that arrival's RMS under QUIET_RMS), else then.
 * Followed from the stream's own arrivals after its origin, not from the
 * ticker's reference at each frame: that reference moves when one member
 * ticks alone (after a stall), and a first version read that as a drift (a
 * 0 ppm call of 8 had 120 ms of input dropped). */
#include "gstppstream-internal.h"
#include "gstppsamples.h"

#include <math.h>
#include <stdlib.h>

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
/* the origin: where the frames complete is read over the first arrivals
 * that came idle over this long */
#define ORIGIN_US (3 * G_USEC_PER_SEC)
/* the minima of the idle arrivals' offsets: by this long */
#define BUCKET_US (G_USEC_PER_SEC / 2)
/* the rate: slopes between minima half the ring apart, this far or more,
 * at least this many */
#define RATE_SPAN_US (2 * G_USEC_PER_SEC)
#define RATE_MIN_PAIRS 3
/* at most this much (ppm; PPX_DRIFT_MAX_PPM): a sound card is within 100.
 * It bounds what a stretch of arrivals all read late can move the offset
 * by (0.5 ms a second of them), where the median slope cannot tell them from
 * a clock run slow: a server busy with calls joining delays every arrival
 * by 20-40 ms for 10 s and more. element-drift's clocks run 2500 ppm fast
 * or slow (to see its moves in 20 s), and it sets 3000 */
#define MAX_PPM 500
/* the offset moved more than the bound allows since the origin, and this:
 * not a drift */
#define REBASE_US 10000

static gdouble
max_rate (void)
{
  static gsize once = 0;
  static gdouble rate;

  if (g_once_init_enter (&once)) {
    const gchar *env = g_getenv ("PPX_DRIFT_MAX_PPM");
    gdouble ppm = env ? g_ascii_strtod (env, NULL) : MAX_PPM;

    rate = (ppm > 0 && ppm <= 100000 ? ppm : MAX_PPM) / 1e6;
    g_once_init_leave (&once, 1);
  }
  return rate;
}

void
gst_pp_stream_drift_forget (GstPpStream * st)
{
  st->drift_ready = st->drift_wrapped = FALSE;
  st->drift_first_us = 0;
  st->drift_n_buckets = st->drift_next = 0;
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
 * @now: into the minimum of its half second. */
static void
note_offset (GstPpStream * st, gint64 off, gint64 now)
{
  guint last = (st->drift_next + GST_PP_DRIFT_BUCKETS - 1)
      % GST_PP_DRIFT_BUCKETS;

  if (st->drift_first_us == 0)
    st->drift_first_us = now;
  if (st->drift_n_buckets > 0
      && (now - st->drift_first_us) / BUCKET_US
      == (st->drift_bucket_t[last] - st->drift_first_us) / BUCKET_US) {
    if (off < st->drift_bucket_off[last]) {
      st->drift_bucket_off[last] = off;
      st->drift_bucket_t[last] = now;
    }
    return;
  }
  st->drift_bucket_off[st->drift_next] = off;
  st->drift_bucket_t[st->drift_next] = now;
  st->drift_next = (st->drift_next + 1) % GST_PP_DRIFT_BUCKETS;
  st->drift_n_buckets = MIN (st->drift_n_buckets + 1, GST_PP_DRIFT_BUCKETS);
}

static int
compare_double (gconstpointer a, gconstpointer b)
{
  gdouble x = *(const gdouble *) a, y = *(const gdouble *) b;

  return x < y ? -1 : x > y;
}

/* The source clock's rate against the monotonic one (us a us, positive: it
 * runs slow): the median slope between half-second minima half the ring
 * apart (RATE_SPAN_US or more; 0 with fewer than RATE_MIN_PAIRS), within
 * the bound. */
static gdouble
clock_rate (GstPpStream * st)
{
  gdouble slopes[GST_PP_DRIFT_BUCKETS / 2 + 1], bound = max_rate ();
  guint n = 0, k, h = st->drift_n_buckets / 2, first =
      (st->drift_next + GST_PP_DRIFT_BUCKETS - st->drift_n_buckets)
      % GST_PP_DRIFT_BUCKETS;

  for (k = 0; h > 0 && k + h < st->drift_n_buckets; k++) {
    guint i = (first + k) % GST_PP_DRIFT_BUCKETS;
    guint j = (first + k + h) % GST_PP_DRIFT_BUCKETS;
    gint64 dt = st->drift_bucket_t[j] - st->drift_bucket_t[i];

    if (dt >= RATE_SPAN_US)
      slopes[n++] = (gdouble) (st->drift_bucket_off[j]
          - st->drift_bucket_off[i]) / dt;
  }
  if (n < RATE_MIN_PAIRS)
    return 0;
  qsort (slopes, n, sizeof *slopes, compare_double);
  return CLAMP (slopes[n / 2], -bound, bound);
}

/* The source clock's offset at @now: the least of the minima carried to
 * @now at its rate (the lower envelope). */
static gint64
clock_offset (GstPpStream * st, gint64 now)
{
  gdouble rate = clock_rate (st);
  gint64 env = G_MAXINT64;
  guint i;

  for (i = 0; i < st->drift_n_buckets; i++)
    env = MIN (env, st->drift_bucket_off[i]
        + (gint64) (rate * (now - st->drift_bucket_t[i])));
  return env;
}

void
gst_pp_stream_drift_at_arrival (GstPpStream * st, gsize had, gboolean gap)
{
  const gint64 rate = GST_PP_STREAM_RATE;
  gint64 now = g_get_monotonic_time (), period, g, tol, e, mid, off;
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
    st->drift_arrival_off_us = now - (gint64) ((st->samples_since_resync
            + have) * G_USEC_PER_SEC / rate);
    if (idle)
      note_offset (st, st->drift_arrival_off_us, now);
  }
  need = (gsize) (st->frame_size - st->lead_samples);
  if (had >= need || have < need || st->drift_n_buckets == 0)
    return;                     /* no frame completes at this buffer */
  /* around the window's middle, -(g - tol) / 2 (it is (-g, tol]) */
  mid = -(g - tol) / 2;
  if (now - st->drift_first_us < ORIGIN_US) {
    /* in the origin: where this frame completes against the others'
     * hand-in (0 with nobody to align with: this stream is the reference)
     * less its arrival's offset, kept from the arrival least delayed */
    gint64 p = MAX (gst_pp_ticker_phase (st->member, now, period), 0);
    gint64 delay = st->drift_arrival_off_us - clock_offset (st, now);

    if (!st->drift_ready || delay < st->drift_qoff_us) {
      st->drift_q_us = p - st->drift_arrival_off_us;
      st->drift_qoff_us = delay;
    }
    st->drift_ready = TRUE;
    return;
  }
  if (!st->drift_ready)
    return;
  off = clock_offset (st, now);
  e = st->drift_q_us + off + st->drift_moves_us;
  if (!st->drift_wrapped) {
    /* the period's multiple that puts the first phase after the origin
     * around the window's middle, kept (a slow drift must not wrap) */
    st->drift_wrap_us = ((e - mid) % period + period + period / 2) % period
        - period / 2 + mid - e;
    st->drift_wrapped = TRUE;
    st->drift_off0_us = off;
    st->drift_t0_us = now;
  }
  e += st->drift_wrap_us;
  if (ABS (off - st->drift_off0_us) > max_rate () * (now - st->drift_t0_us)
      + REBASE_US) {
    /* no clock drifts that fast: the arrivals came late all through the
     * origin (a backlog at the call's start, read since) or come late now
     * (one that builds up): followed anew from here */
    GST_INFO_OBJECT (st->element, "the arrivals moved %.1f ms against the "
        "source's clock in %.1f s: not a drift, followed anew",
        (off - st->drift_off0_us) / 1000.0, (now - st->drift_t0_us) / 1e6);
    gst_pp_stream_drift_forget (st);
    return;
  }
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
