/* personaplex-server: the bound on a call's audio waiting for the model (server-backlog.h). */
#include "server-backlog.h"

/* The queue holds this many bounds at most (it then blocks: TCP flow control slows the client down), reached only
 * by a client that sends faster than real time, or a model that takes nothing. */
#define QUEUE_BOUNDS 4
/* The decoded audio's format (server-chat.c's RECEIVE_CHAIN): F32 mono at 24 kHz. */
#define SAMPLE_RATE 24000
#define BYTES_PER_SAMPLE 4

struct _PpxBacklog {
  PpxProto proto;
  guint call_id, max_ms;
  GstElement *queue;  /* not a reference: the probe lives on its pad */
  gint ahead_ms;      /* atomic: how far the audio that came runs ahead of the wall clock since the first */
  /* the decoder's streaming thread's */
  gint64 first_us;    /* when the first buffer came */
  guint64 in_samples; /* every buffer that came, by its size */
  /* the model's streaming thread's */
  gboolean dropping;  /* from over the bound down to half of it */
  GstClockTime next;  /* the end of the last buffer let through */
  guint64 taken_samples; /* every buffer that left, by its size */
  gint dropped_ms;    /* atomic */
  gint taken_ms;      /* atomic: taken_samples in ms */
};

static PpxBacklog *
backlog_ref (PpxBacklog *b)
{
  return g_atomic_rc_box_acquire (b);
}

void
ppx_backlog_unref (PpxBacklog *b)
{
  if (b)
    g_atomic_rc_box_release (b);
}

static void
backlog_unref_notify (gpointer b)
{
  ppx_backlog_unref (b);
}

/* Each buffer entering the queue: how far the call's audio runs ahead of real time. A client that sends in real time
 * stays near 0 (its first audio may come in a burst: what it said during the prompts); one that sends a file as
 * fast as it can runs ahead. */
static GstPadProbeReturn
on_buffer_in (GstPad *pad, GstPadProbeInfo *info, gpointer user_data)
{
  PpxBacklog *b = user_data;
  GstBuffer *buf = GST_PAD_PROBE_INFO_BUFFER (info);
  gint64 now = g_get_monotonic_time ();
  if (!b->in_samples)
    b->first_us = now;
  /* by its size, not its timestamps (the client's granule positions: issue 25, defect 6) */
  b->in_samples += gst_buffer_get_size (buf) / BYTES_PER_SAMPLE;
  gint64 ahead_us = (gint64) (b->in_samples * G_USEC_PER_SEC / SAMPLE_RATE) - (now - b->first_us);
  g_atomic_int_set (&b->ahead_ms, (gint) CLAMP (ahead_us / 1000, -G_MAXINT / 2, G_MAXINT / 2));
  return GST_PAD_PROBE_OK;
}

/* Each buffer leaving the queue: while more than the bound waits behind it (and the call's audio came in real time,
 * not ahead of it), it is dropped, and the ones after it, until half the bound is left; the first buffer let
 * through after a gap carries DISCONT, and the gap is counted. */
static GstPadProbeReturn
on_buffer_out (GstPad *pad, GstPadProbeInfo *info, gpointer user_data)
{
  PpxBacklog *b = user_data;
  GstBuffer *buf = GST_PAD_PROBE_INFO_BUFFER (info);
  b->taken_samples += gst_buffer_get_size (buf) / BYTES_PER_SAMPLE;
  g_atomic_int_set (&b->taken_ms, (gint) MIN (b->taken_samples / (SAMPLE_RATE / 1000), G_MAXINT));
  guint64 level = 0, level_bytes = 0;
  g_object_get (b->queue, "current-level-time", &level, "current-level-bytes", &level_bytes, NULL);
  /* by its size too: the timestamps are the client's granule positions, which need not move */
  level = MAX (level, gst_util_uint64_scale (level_bytes / BYTES_PER_SAMPLE, GST_SECOND, SAMPLE_RATE));
  if (!b->dropping && level > (guint64) b->max_ms * GST_MSECOND && g_atomic_int_get (&b->ahead_ms) < (gint) b->max_ms)
    b->dropping = TRUE;
  else if (b->dropping && level <= (guint64) b->max_ms * GST_MSECOND / 2)
    b->dropping = FALSE;
  if (b->dropping)
    return GST_PAD_PROBE_DROP;
  GstClockTime pts = GST_BUFFER_PTS (buf);
  if (!GST_CLOCK_TIME_IS_VALID (pts))
    return GST_PAD_PROBE_OK;
  if (GST_CLOCK_TIME_IS_VALID (b->next) && pts > b->next + GST_MSECOND) {
    GstClockTime gap = pts - b->next;
    if (g_atomic_int_add (&b->dropped_ms, (gint) MAX (gap / GST_MSECOND, 1)) == 0)
      g_printerr ("personaplex-server: call %u: the model is more than %u ms behind the call's audio: the oldest is "
                  "dropped\n", b->call_id, b->max_ms);
    ppx_metrics_input_dropped (b->proto, (double) gap / GST_SECOND);
    if (!GST_BUFFER_FLAG_IS_SET (buf, GST_BUFFER_FLAG_DISCONT)) {
      buf = gst_buffer_make_writable (buf);
      GST_BUFFER_FLAG_SET (buf, GST_BUFFER_FLAG_DISCONT);
      GST_PAD_PROBE_INFO_DATA (info) = buf;
    }
  }
  b->next = pts + (GST_BUFFER_DURATION_IS_VALID (buf) ? GST_BUFFER_DURATION (buf) : 0);
  return GST_PAD_PROBE_OK;
}

PpxBacklog *
ppx_backlog_attach (GstElement *queue, PpxProto proto, guint call_id, guint max_ms)
{
  PpxBacklog *b = g_atomic_rc_box_new0 (PpxBacklog);
  b->proto = proto;
  b->call_id = call_id;
  b->max_ms = max_ms;
  b->queue = queue;
  b->next = GST_CLOCK_TIME_NONE;
  /* bounded by its size as well as by its timestamps (a client's granule positions that never move made the
   * time level 0, and the queue unbounded: issue 25, defect 6) */
  g_object_set (queue, "max-size-time", (guint64) max_ms * QUEUE_BOUNDS * GST_MSECOND, "max-size-buffers", 0,
                "max-size-bytes", (guint) ((guint64) max_ms * QUEUE_BOUNDS * SAMPLE_RATE / 1000 * BYTES_PER_SAMPLE),
                NULL);
  g_autoptr (GstPad) sink = gst_element_get_static_pad (queue, "sink");
  gst_pad_add_probe (sink, GST_PAD_PROBE_TYPE_BUFFER, on_buffer_in, backlog_ref (b), backlog_unref_notify);
  g_autoptr (GstPad) src = gst_element_get_static_pad (queue, "src");
  gst_pad_add_probe (src, GST_PAD_PROBE_TYPE_BUFFER, on_buffer_out, backlog_ref (b), backlog_unref_notify);
  return b;
}

gint64
ppx_backlog_taken_ms (PpxBacklog *b)
{
  return b ? g_atomic_int_get (&b->taken_ms) : 0;
}

double
ppx_backlog_dropped_s (PpxBacklog *b)
{
  return b ? g_atomic_int_get (&b->dropped_ms) / 1e3 : 0;
}
