/* personaplexduplex: the automatic processing deadline (gstpplatency.h). */
#include "gstpplatency.h"

void
gst_pp_latency_reset (GstPpLatency * l)
{
  l->answered = GST_CLOCK_TIME_NONE;
  l->posted = GST_CLOCK_TIME_NONE;
}

static GstClockTime
margin_for (GstClockTime p99)
{
  return MAX (GST_PP_AUTO_MARGIN_MIN, p99 / GST_PP_AUTO_MARGIN_DIVISOR);
}

static GstClockTime
p99_of (const PpxEngineTickTimes * times)
{
  return (GstClockTime) (times->p99_ms * GST_MSECOND);
}

GstClockTime
gst_pp_latency_auto_deadline (const PpxEngineTickTimes * times)
{
  GstClockTime p99, d;

  if (times == NULL || times->n < 2)
    return GST_PP_AUTO_DEADLINE_UNMEASURED;
  p99 = p99_of (times);
  d = p99 + margin_for (p99);
  return (d + GST_MSECOND - 1) / GST_MSECOND * GST_MSECOND;
}

GstClockTime
gst_pp_latency_answer (GstPpLatency * l, GstClockTime setting,
    PpxEngine * engine)
{
  GstClockTime d = setting;

  if (setting == GST_PP_PROCESSING_DEADLINE_AUTO) {
    PpxEngineTickTimes times = { 0 };

    if (engine != NULL)
      ppx_engine_tick_times (engine, &times);
    d = gst_pp_latency_auto_deadline (&times);
    /* a live pipeline's latency must not drop while it plays */
    if (GST_CLOCK_TIME_IS_VALID (l->answered))
      d = MAX (d, l->answered);
  }
  l->answered = d;
  return d;
}

gboolean
gst_pp_latency_grown (GstPpLatency * l, GstClockTime setting,
    const PpxEngineTickTimes * times)
{
  GstClockTime p99, reference;

  if (setting != GST_PP_PROCESSING_DEADLINE_AUTO
      || !GST_CLOCK_TIME_IS_VALID (l->answered) || times->n < 2)
    return FALSE;
  /* against what was answered, or what a message posted for and the
   * pipeline has not asked for yet: one message a growth of half a margin */
  reference = l->answered;
  if (GST_CLOCK_TIME_IS_VALID (l->posted))
    reference = MAX (reference, l->posted);
  p99 = p99_of (times);
  if (p99 + margin_for (p99) / 2 <= reference)
    return FALSE;
  l->posted = gst_pp_latency_auto_deadline (times);
  return TRUE;
}
