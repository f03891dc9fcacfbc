/* personaplexduplex: the tick measured at full context and the live ticks
 * (gstppcapacity.h). */
#include "gstppcapacity.h"
#include "gstppmessages.h"

#include <stdlib.h>

static gint
cmp_double (gconstpointer a, gconstpointer b)
{
  const gdouble x = *(const gdouble *) a, y = *(const gdouble *) b;

  return (x > y) - (x < y);
}

GstStructure *
gst_pp_measure_tick (const GstPpModelHandle * model, guint rows, guint ticks)
{
  PpxEngine *e = model ? gst_pp_model_handle_get_engine (model) : NULL;
  GstPpTicker *t = model ? gst_pp_model_handle_get_ticker (model) : NULL;
  GstStructure *s = gst_structure_new (GST_PP_TICK_MEASURE_NAME,
      "rows", G_TYPE_UINT, rows, NULL);
  GError *err = NULL;
  gdouble *ms, floor_ms;
  gint padded = (gint) rows;
  guint i, r99;

  if (e == NULL || t == NULL) {
    gst_structure_set (s, "error", G_TYPE_STRING, "no model loaded", NULL);
    return s;
  }
  ticks = CLAMP (ticks, 1, 1000);
  ms = g_new0 (gdouble, ticks);
  if (!ppx_engine_measure_tick (e, (int) rows, (int) ticks, ms, &padded,
          &err)) {
    gst_structure_set (s, "error", G_TYPE_STRING, err->message, NULL);
    g_clear_error (&err);
    g_free (ms);
    return s;
  }
  /* the emulated device's tick is at least this long (its sleep is not
   * taken here: start-up need not wait for it) */
  floor_ms = gst_pp_ticker_emulated_ms (t, rows);
  for (i = 0; i < ticks; i++)
    ms[i] = MAX (ms[i], floor_ms);
  qsort (ms, ticks, sizeof (gdouble), (int (*)(const void *,
              const void *)) cmp_double);
  /* p99 by nearest rank, but never the largest of 2 to 99 ticks (one
   * outlier does not make it), as the engine's tick times */
  r99 = (guint) ((99 * (guint64) ticks + 99) / 100);
  if (ticks >= 2)
    r99 = MIN (r99, ticks - 1);
  gst_structure_set (s, "padded-rows", G_TYPE_UINT, (guint) padded,
      "ticks", G_TYPE_UINT, ticks,
      "min-ms", G_TYPE_DOUBLE, ms[0],
      "p50-ms", G_TYPE_DOUBLE, ms[(ticks + 1) / 2 - 1],
      "p99-ms", G_TYPE_DOUBLE, ms[r99 - 1],
      "max-ms", G_TYPE_DOUBLE, ms[ticks - 1],
      "emulated-ms", G_TYPE_DOUBLE, floor_ms, NULL);
  g_free (ms);
  return s;
}

GstStructure *
gst_pp_tick_history_structure_new (const GstPpModelHandle * model,
    guint64 since)
{
  GstPpTicker *t = model ? gst_pp_model_handle_get_ticker (model) : NULL;
  guint rows[GST_PP_TICK_HISTORY];
  gdouble ms[GST_PP_TICK_HISTORY], age[GST_PP_TICK_HISTORY];
  gint64 end[GST_PP_TICK_HISTORY], now = g_get_monotonic_time ();
  guint64 total = 0;
  guint n = 0, first, i;
  GstStructure *s;

  if (t != NULL)
    n = gst_pp_ticker_history (t, rows, ms, end, GST_PP_TICK_HISTORY, &total);
  /* the ticks after the since-th: the last total - since of the n */
  first = n - (guint) MIN (total - MIN (since, total), (guint64) n);
  for (i = first; i < n; i++)
    age[i] = MAX (now - end[i], 0) / 1000.0;
  s = gst_structure_new (GST_PP_TICK_HISTORY_NAME,
      "total", G_TYPE_UINT64, total, NULL);
  gst_pp_structure_take_array (s, "rows", G_TYPE_UINT, rows + first,
      n - first);
  gst_pp_structure_take_array (s, "ms", G_TYPE_DOUBLE, ms + first, n - first);
  gst_pp_structure_take_array (s, "age-ms", G_TYPE_DOUBLE, age + first,
      n - first);
  return s;
}
