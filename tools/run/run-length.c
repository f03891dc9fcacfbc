#include "run-length.h"

#include <gst/audio/audio.h>
#include <math.h>

/* The resampler's edges differ from the count by a sample or two; more means the count is wrong. */
#define MAX_EDGE_SAMPLES 256
#define BYTES_PER_SAMPLE ((gsize) sizeof (float)) /* mono 32-bit float after the resampler */

struct _RunLength {
  int rate;
  double decoded;  /* the decoded input so far, in output samples */
  guint64 passed;  /* samples let through after the resampler */
  guint64 trimmed; /* edge samples dropped */
  GstPad *resampled_src;
};

RunLength *
run_length_new (int rate)
{
  RunLength *length = g_new0 (RunLength, 1);
  length->rate = rate;
  return length;
}

void
run_length_free (RunLength *length)
{
  if (!length)
    return;
  g_clear_object (&length->resampled_src);
  g_free (length);
}

guint64
run_length_expected (const RunLength *length)
{
  return (guint64) llround (length->decoded);
}

static GstPadProbeReturn
count_decoded (GstPad *pad, GstPadProbeInfo *info, gpointer data)
{
  RunLength *length = data;
  GstBuffer *buf = GST_PAD_PROBE_INFO_BUFFER (info);
  g_autoptr (GstCaps) caps = gst_pad_get_current_caps (pad);
  GstAudioInfo ai;
  if (buf && caps && gst_audio_info_from_caps (&ai, caps) && ai.bpf > 0 && ai.rate > 0)
    length->decoded += (double) (gst_buffer_get_size (buf) / ai.bpf) * length->rate / ai.rate;
  return GST_PAD_PROBE_OK;
}

/* Drops what goes past the count. The resampler's output lags its input (its filter's delay) until it
 * drains at EOS, so only the drained edge can go past a count that is already complete. */
static GstPadProbeReturn
trim_excess (RunLength *length, GstPadProbeInfo *info)
{
  GstBuffer *buf = GST_PAD_PROBE_INFO_BUFFER (info);
  guint64 n = gst_buffer_get_size (buf) / BYTES_PER_SAMPLE, expected = run_length_expected (length);
  guint64 allowed = expected > length->passed ? expected - length->passed : 0;
  if (n > allowed && length->trimmed + (n - allowed) <= MAX_EDGE_SAMPLES) {
    length->trimmed += n - allowed;
    n = allowed;
    if (n == 0)
      return GST_PAD_PROBE_DROP;
    buf = gst_buffer_make_writable (buf);
    gst_buffer_resize (buf, 0, (gssize) (n * BYTES_PER_SAMPLE));
    GST_BUFFER_DURATION (buf) = gst_util_uint64_scale_int (n, GST_SECOND, length->rate);
    GST_PAD_PROBE_INFO_DATA (info) = buf;
  }
  length->passed += n;
  return GST_PAD_PROBE_OK;
}

/* At EOS, silence for the samples the resampler fell short by, pushed (untimestamped: it continues the
 * stream) before the EOS goes on. */
static void
pad_missing (RunLength *length)
{
  guint64 expected = run_length_expected (length);
  if (expected <= length->passed || expected - length->passed > MAX_EDGE_SAMPLES ||
      !gst_pad_has_current_caps (length->resampled_src))
    return;
  gsize n = (gsize) (expected - length->passed);
  GstBuffer *silence = gst_buffer_new_allocate (NULL, n * BYTES_PER_SAMPLE, NULL);
  gst_buffer_memset (silence, 0, 0, n * BYTES_PER_SAMPLE);
  length->passed += n;
  gst_pad_push (length->resampled_src, silence);
}

static GstPadProbeReturn
correct_resampled (GstPad *pad, GstPadProbeInfo *info, gpointer data)
{
  RunLength *length = data;
  if (info->type & GST_PAD_PROBE_TYPE_BUFFER)
    return trim_excess (length, info);
  GstEvent *event = GST_PAD_PROBE_INFO_EVENT (info);
  if (event && GST_EVENT_TYPE (event) == GST_EVENT_EOS)
    pad_missing (length);
  return GST_PAD_PROBE_OK;
}

void
run_length_attach (RunLength *length, GstPad *decoded, GstPad *resampled_sink, GstPad *resampled_src)
{
  length->resampled_src = gst_object_ref (resampled_src);
  gst_pad_add_probe (decoded, GST_PAD_PROBE_TYPE_BUFFER, count_decoded, length, NULL);
  gst_pad_add_probe (resampled_sink, GST_PAD_PROBE_TYPE_BUFFER | GST_PAD_PROBE_TYPE_EVENT_DOWNSTREAM,
                     correct_resampled, length, NULL);
}
