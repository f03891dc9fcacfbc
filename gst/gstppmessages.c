/* personaplexduplex: the structures of its element messages and of the
 * `stats` property (see docs/element.md for the field list). */
#include "gstppmessages.h"

void
gst_pp_structure_take_array (GstStructure * s, const gchar * field,
    GType type, gconstpointer values, guint n)
{
  GValue array = G_VALUE_INIT;
  guint i;

  gst_value_array_init (&array, n);
  for (i = 0; i < n; i++) {
    GValue v = G_VALUE_INIT;

    g_value_init (&v, type);
    if (type == G_TYPE_UINT64)
      g_value_set_uint64 (&v, ((const guint64 *) values)[i]);
    else if (type == G_TYPE_UINT)
      g_value_set_uint (&v, ((const guint *) values)[i]);
    else
      g_value_set_double (&v, ((const gdouble *) values)[i]);
    gst_value_array_append_and_take_value (&array, &v);
  }
  gst_structure_take_value (s, field, &array);
}

/* The engine's tick figures as they are now (every element of the engine
 * reads the same ones, one that never steps too: ppx_engine_tick_times never
 * waits for a tick). */
static void
set_engine_ticks (GstStructure * s, PpxEngine * e)
{
  PpxEngineTickTimes t = { 0 };

  if (e != NULL)
    ppx_engine_tick_times (e, &t);
  gst_structure_set (s, "tick-p50-ms", G_TYPE_DOUBLE, t.p50_ms,
      "tick-p99-ms", G_TYPE_DOUBLE, t.p99_ms,
      "tick-max-ms", G_TYPE_DOUBLE, t.max_ms,
      "ticks", G_TYPE_UINT64, t.ticks,
      "tick-overruns", G_TYPE_UINT64, t.overruns,
      "tick-total-ms", G_TYPE_DOUBLE, t.total_ms, NULL);
  gst_pp_structure_take_array (s, "tick-buckets", G_TYPE_UINT64, t.buckets,
      G_N_ELEMENTS (t.buckets));
  gst_pp_structure_take_array (s, "tick-bucket-bounds-ms", G_TYPE_DOUBLE,
      ppx_engine_tick_bucket_bounds_ms (), PPX_ENGINE_TICK_BUCKETS);
}

GstStructure *
gst_pp_stats_structure_new (const GstPersonaplexStats * stats,
    const GstPpModelHandle * model)
{
  PpxModel *m = model ? gst_pp_model_handle_get_model (model) : NULL;
  PpxEngine *e = model ? gst_pp_model_handle_get_engine (model) : NULL;
  gdouble mean = stats->frames ? stats->total_step_ms / stats->frames : 0.0;
  GstStructure *s;

  s = gst_structure_new (GST_PP_STATS_NAME,
      "frames", G_TYPE_UINT64, stats->frames,
      "mean-step-ms", G_TYPE_DOUBLE, mean,
      "max-step-ms", G_TYPE_DOUBLE, stats->max_step_ms,
      "overruns", G_TYPE_UINT64, stats->overruns,
      "batch-size", G_TYPE_UINT, stats->batch_size,
      "tick-ms", G_TYPE_DOUBLE, stats->tick_ms,
      "batch-wait-ms", G_TYPE_DOUBLE, stats->batch_wait_ms,
      "drift-silence-ms", G_TYPE_DOUBLE, stats->drift_silence_ms,
      "drift-dropped-ms", G_TYPE_DOUBLE, stats->drift_dropped_ms,
      "latency", G_TYPE_UINT64, stats->latency,
      "memory-bytes", G_TYPE_UINT64, m ? ppx_model_weight_bytes (m) : 0,
      "session-bytes", G_TYPE_UINT64, e ? ppx_engine_session_bytes (e) : 0,
      "engine-bytes", G_TYPE_UINT64, e ? ppx_engine_device_bytes (e) : 0,
      "max-sessions", G_TYPE_UINT, e ? (guint) ppx_engine_max_sessions (e) : 0,
      "kv-cache-format", G_TYPE_STRING,
      e ? ppx_kv_format_name (ppx_engine_kv_format (e)) : "none",
      "backend", G_TYPE_STRING, m ? ppx_model_backend_name (m) : "none",
      "quantization", G_TYPE_STRING,
      m ? ppx_model_quantization_name (m) : "none",
      "model-users", G_TYPE_UINT,
      model ? gst_pp_model_handle_get_users (model) : 0,
      "timestamp", G_TYPE_UINT64, stats->last_pts,
      "running-time", G_TYPE_UINT64, stats->last_running_time, NULL);
  set_engine_ticks (s, e);
  return s;
}

static GstStructure *
position_structure_new (const gchar * name, const GstPpFramePosition * pos)
{
  return gst_structure_new (name,
      "frame", G_TYPE_UINT64, pos->frame,
      "pts", G_TYPE_UINT64, pos->pts,
      "duration", G_TYPE_UINT64, pos->duration,
      "running-time", G_TYPE_UINT64, pos->running_time,
      "stream-time", G_TYPE_UINT64, pos->stream_time, NULL);
}

GstMessage *
gst_pp_text_message_new (GstObject * src, const gchar * text,
    const GstPpFramePosition * pos)
{
  GstStructure *s = position_structure_new (GST_PP_TEXT_NAME, pos);

  gst_structure_set (s, "text", G_TYPE_STRING, text, NULL);
  return gst_message_new_element (src, s);
}

GstMessage *
gst_pp_frame_message_new (GstObject * src, const PpxFrameResult * res,
    const GstPpFramePosition * pos)
{
  GstStructure *s = position_structure_new (GST_PP_FRAME_NAME, pos);
  GValue tokens = G_VALUE_INIT;
  guint i;

  gst_value_array_init (&tokens, G_N_ELEMENTS (res->tokens));
  for (i = 0; i < G_N_ELEMENTS (res->tokens); i++) {
    GValue v = G_VALUE_INIT;

    g_value_init (&v, G_TYPE_INT);
    g_value_set_int (&v, res->tokens[i]);
    gst_value_array_append_and_take_value (&tokens, &v);
  }
  gst_structure_take_value (s, "tokens", &tokens);
  gst_structure_set (s, "text", G_TYPE_STRING, res->text,
      "step-ms", G_TYPE_DOUBLE, res->step_ms, NULL);
  return gst_message_new_element (src, s);
}
