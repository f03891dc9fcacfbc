/* personaplex-server: personaplexduplex settings and the keeper that holds the shared model. */
#include "server-model.h"

#include <string.h>

struct _PpxServerModelKeeper {
  GstElement *pipeline; /* just the keeper's personaplexduplex, in PAUSED */
  GstElement *duplex;
};

static GQuark
model_error_quark (void)
{
  return g_quark_from_static_string ("ppx-server-model");
}

/* The plugin may not be installed yet when the server runs from the build tree. */
static GstElementFactory *
find_duplex_factory (void)
{
  GstElementFactory *f = gst_element_factory_find ("personaplexduplex");
#ifdef PPX_SERVER_BUILD_PLUGIN_DIR
  if (!f && gst_registry_scan_path (gst_registry_get (), PPX_SERVER_BUILD_PLUGIN_DIR))
    f = gst_element_factory_find ("personaplexduplex");
#endif
  return f;
}

GstElement *
ppx_server_duplex_new (const PpxServerOptions *o, const PpxCallParams *call, const char *name, GError **error)
{
  g_autoptr (GstElementFactory) factory = find_duplex_factory ();
  GstElement *duplex = factory ? gst_element_factory_create (factory, name) : NULL;
  if (!duplex) {
    g_set_error (error, model_error_quark (), 0,
                 "GStreamer element personaplexduplex not found: install the plugin or set GST_PLUGIN_PATH "
                 "to the directory holding libgstpersonaplex.so");
    return NULL;
  }
  g_object_set (duplex, "model-dir", o->model_dir, "model-instance-id", o->model_instance_id, "greedy", o->greedy,
                "align-frames", !o->no_align_frames, NULL);
  /* Each conversation samples with its own seed, so two callers saying the same words get
   * different replies (reproducible from --seed), unless the call gives its own. */
  static gint sessions = 0;
  guint n = (guint) g_atomic_int_add (&sessions, 1);
  guint64 seed = o->seed >= 0 ? (guint64) o->seed + (guint64) n
                              : ((guint64) g_random_int () << 32) | g_random_int ();
  if (call && call->has_seed)
    seed = call->seed;
  g_object_set (duplex, "seed", seed, NULL);
  /* The element's enums have the library's values. One engine for every call: all elements ask for the same one
   * (the keeper holds a slot too). */
  g_object_set (duplex, "backend", (gint) o->backend, "quantization", (gint) o->quantization, "kv-cache-format",
                (gint) o->kv_cache_format, NULL);
  if (o->device != PPX_SERVER_DEVICE_UNSET)
    g_object_set (duplex, "device", o->device, NULL);
  g_object_set (duplex, "max-sessions", o->max_sessions > 0 ? o->max_sessions + 1 : 0, NULL);
  if (o->batch_deadline_ms >= 0)
    g_object_set (duplex, "batch-deadline", (guint64) o->batch_deadline_ms * GST_MSECOND, NULL);
  const char *voice = call && call->voice_prompt ? call->voice_prompt : o->voice_prompt;
  if (voice)
    g_object_set (duplex, "voice-prompt", voice, NULL);
  if (call && call->text_prompt)
    g_object_set (duplex, "text-prompt", call->text_prompt, NULL);
  else if (o->text_prompt)
    g_object_set (duplex, "text-prompt", o->text_prompt, NULL);
  else if (o->text_prompt_tokens)
    g_object_set (duplex, "text-prompt-tokens", o->text_prompt_tokens, NULL);
  if (call && call->has_temp_text)
    g_object_set (duplex, "temp-text", (float) call->temp_text, NULL);
  if (call && call->has_temp_audio)
    g_object_set (duplex, "temp-audio", (float) call->temp_audio, NULL);
  if (call && call->has_topk_text)
    g_object_set (duplex, "topk-text", call->topk_text, NULL);
  if (call && call->has_topk_audio)
    g_object_set (duplex, "topk-audio", call->topk_audio, NULL);
  return duplex;
}

void
ppx_server_duplex_log_drift (GstElement *pipeline, const char *what)
{
  g_autoptr (GstElement) duplex = gst_bin_get_by_name (GST_BIN (pipeline), "duplex");
  GstStructure *stats = NULL;
  double silence = 0, dropped = 0;
  if (!duplex)
    return;
  g_object_get (duplex, "stats", &stats, NULL);
  if (!stats)
    return;
  gst_structure_get_double (stats, "drift-silence-ms", &silence);
  gst_structure_get_double (stats, "drift-dropped-ms", &dropped);
  gst_structure_free (stats);
  if (silence > 0 || dropped > 0)
    g_printerr ("personaplex-server: %s: its frames moved to keep in the engine's tick (its clock drifts against "
                "the server's): %.0f ms of silence inserted, %.0f ms of its audio dropped\n",
                what, silence, dropped);
}

/* The element's own error message (it names the file and the problem; a GPU that does not exist: "CUDA backend:
 * GPU 3 does not exist (2 present)") instead of a bare state failure, with the GPU asked for. */
static void
take_bus_error (GstElement *pipeline, const PpxServerOptions *o, GError **error)
{
  g_autoptr (GstBus) bus = gst_element_get_bus (pipeline);
  g_autoptr (GstMessage) msg = gst_bus_pop_filtered (bus, GST_MESSAGE_ERROR);
  g_autofree char *where = o->device == PPX_SERVER_DEVICE_UNSET
                               ? g_strdup (o->model_dir)
                               : g_strdup_printf ("%s on GPU %d (--device %d)", o->model_dir, o->device, o->device);
  if (msg) {
    g_autoptr (GError) e = NULL;
    g_autofree char *debug = NULL;
    gst_message_parse_error (msg, &e, &debug);
    g_set_error (error, model_error_quark (), 0, "loading the model from %s: %s", where, e->message);
  } else {
    g_set_error (error, model_error_quark (), 0, "loading the model from %s failed", where);
  }
}

PpxServerModelKeeper *
ppx_server_model_keeper_new (const PpxServerOptions *o, GError **error)
{
  GstElement *duplex = ppx_server_duplex_new (o, NULL, "model-keeper", error);
  if (!duplex)
    return NULL;
  PpxServerModelKeeper *k = g_new0 (PpxServerModelKeeper, 1);
  k->pipeline = gst_pipeline_new ("model-keeper");
  k->duplex = duplex;
  gst_bin_add (GST_BIN (k->pipeline), duplex);
  /* No sink: PAUSED is reached at once, after the element loaded the model and ran the prompts. */
  if (gst_element_set_state (k->pipeline, GST_STATE_PAUSED) == GST_STATE_CHANGE_FAILURE) {
    take_bus_error (k->pipeline, o, error);
    ppx_server_model_keeper_free (k);
    return NULL;
  }
  return k;
}

int
ppx_server_model_keeper_device (PpxServerModelKeeper *k)
{
  int device = 0;
  g_object_get (k->duplex, "device", &device, NULL);
  return device;
}

gboolean
ppx_server_keep_first_error (GMutex *lock, char **first, gboolean *busy, const GError *e, const char *text)
{
  g_mutex_lock (lock);
  const gboolean was_first = !*first;
  if (was_first) {
    *first = g_strdup (text);
    *busy = g_error_matches (e, GST_RESOURCE_ERROR, GST_RESOURCE_ERROR_BUSY);
  }
  g_mutex_unlock (lock);
  return was_first;
}

/* The element's GstStructure property @name (NULL when it has none). */
static GstStructure *
duplex_structure (PpxServerModelKeeper *k, const char *name)
{
  GstStructure *s = NULL;
  g_object_get (k->duplex, name, &s, NULL);
  return s;
}

GstStructure *
ppx_server_model_keeper_stats (PpxServerModelKeeper *k)
{
  return duplex_structure (k, "stats");
}

void
ppx_server_engine_ticks (const GstStructure *stats, PpxServerTicks *t)
{
  memset (t, 0, sizeof *t);
  if (!stats)
    return;
  gst_structure_get (stats, "tick-p50-ms", G_TYPE_DOUBLE, &t->p50_ms, "tick-p99-ms", G_TYPE_DOUBLE, &t->p99_ms,
                     "tick-total-ms", G_TYPE_DOUBLE, &t->total_ms, "ticks", G_TYPE_UINT64, &t->ticks, "tick-overruns",
                     G_TYPE_UINT64, &t->overruns, NULL);
  const GValue *bounds = gst_structure_get_value (stats, "tick-bucket-bounds-ms");
  const GValue *counts = gst_structure_get_value (stats, "tick-buckets");
  if (!bounds || !counts || !GST_VALUE_HOLDS_ARRAY (bounds) || !GST_VALUE_HOLDS_ARRAY (counts))
    return;
  const guint n = gst_value_array_get_size (bounds);
  if (n > PPX_METRICS_MAX_TICK_BOUNDS || gst_value_array_get_size (counts) != n + 1)
    return;
  for (guint i = 0; i <= n; i++) {
    if (i < n)
      t->bounds_ms[i] = g_value_get_double (gst_value_array_get_value (bounds, i));
    t->counts[i] = g_value_get_uint64 (gst_value_array_get_value (counts, i));
  }
  t->n_bounds = n;
}

char *
ppx_server_model_keeper_describe (PpxServerModelKeeper *k)
{
  g_autoptr (GstStructure) stats = duplex_structure (k, "stats");
  const char *backend = stats ? gst_structure_get_string (stats, "backend") : NULL;
  const char *quantization = stats ? gst_structure_get_string (stats, "quantization") : NULL;
  return g_strdup_printf ("%s / %s", backend ? backend : "?", quantization ? quantization : "?");
}

void
ppx_server_model_keeper_engine (PpxServerModelKeeper *k, PpxServerEngineInfo *info)
{
  g_autoptr (GstStructure) stats = duplex_structure (k, "stats");
  memset (info, 0, sizeof *info);
  if (!stats)
    return;
  gst_structure_get (stats, "max-sessions", G_TYPE_UINT, &info->max_sessions, "session-bytes", G_TYPE_UINT64,
                     &info->session_bytes, "engine-bytes", G_TYPE_UINT64, &info->engine_bytes, NULL);
  info->kv_cache_format = g_strdup (gst_structure_get_string (stats, "kv-cache-format"));
}

GstStructure *
ppx_server_model_keeper_measure_tick (PpxServerModelKeeper *k, guint rows, guint ticks)
{
  GstStructure *s = NULL;
  g_signal_emit_by_name (k->duplex, "measure-tick", rows, ticks, &s);
  return s;
}

GstStructure *
ppx_server_model_keeper_tick_history (PpxServerModelKeeper *k, guint64 since)
{
  GstStructure *s = NULL;
  g_signal_emit_by_name (k->duplex, "tick-history-since", since, &s);
  return s;
}

void
ppx_server_model_keeper_free (PpxServerModelKeeper *k)
{
  if (!k)
    return;
  gst_element_set_state (k->pipeline, GST_STATE_NULL);
  gst_object_unref (k->pipeline);
  g_free (k);
}
