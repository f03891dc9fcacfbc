/* personaplexduplex: full-duplex speech-to-speech conversation element.
 *
 * This file holds the element class: pad templates, properties (and the
 * enforcement of GST_PARAM_MUTABLE_READY), and the state changes that load
 * the model and create the conversation session. The properties' specs,
 * defaults and storage are a table in gstppsettings.c; the streaming side
 * lives in gstppstream.c. */

/**
 * SECTION:element-personaplexduplex
 * @title: personaplexduplex
 *
 * Runs a PersonaPlex (Moshi architecture) full-duplex conversation: every
 * 80 ms of user audio on `sink` produces 80 ms of agent audio on `src`,
 * timestamped like the input frame it answers, and the frame's text piece on
 * `text_src` (or a GAP event when the frame has no text).
 *
 * ## Example launch line
 * |[
 * gst-launch-1.0 filesrc location=in.wav ! decodebin ! audioconvert !
 *     audioresample ! audio/x-raw,rate=24000,channels=1,format=F32LE !
 *     personaplexduplex model-dir=/models/personaplex name=pp !
 *     audioconvert ! wavenc ! filesink location=out.wav
 *     pp.text_src ! fakesink dump=true
 * ]|
 *
 * Element messages (`personaplex-stats`, `personaplex-text`,
 * `personaplex-frame`), latency and event handling are described in
 * docs/element.md.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "gstpersonaplexduplex.h"

#include "gstppcapacity.h"
#include "gstppenums.h"
#include "gstppmessages.h"
#include "gstppstream.h"
#include "gstpptextpad.h"
#include "gstpptokens.h"

GST_DEBUG_CATEGORY (gst_personaplex_duplex_debug);
#define GST_CAT_DEFAULT gst_personaplex_duplex_debug

/* The measure-tick action signal: the handle is read under the object lock;
 * the element must stay in PAUSED or PLAYING while it measures. */
static GstStructure *
measure_tick (GstPersonaplexDuplex * self, guint rows, guint ticks)
{
  GstPpModelHandle *model;

  GST_OBJECT_LOCK (self);
  model = self->model;
  GST_OBJECT_UNLOCK (self);
  return gst_pp_measure_tick (model, rows, ticks);
}

/* The tick-history-since action signal: the live ticks after the since-th
 * (read under the object lock, as the tick-history property). */
static GstStructure *
tick_history_since (GstPersonaplexDuplex * self, guint64 since)
{
  GstStructure *s;

  GST_OBJECT_LOCK (self);
  s = gst_pp_tick_history_structure_new (self->model, since);
  GST_OBJECT_UNLOCK (self);
  return s;
}

#define AUDIO_CAPS \
  "audio/x-raw, format = (string) { F32LE, S16LE }, rate = (int) 24000, " \
  "channels = (int) 1, layout = (string) interleaved"

static GstStaticPadTemplate sink_template = GST_STATIC_PAD_TEMPLATE ("sink",
    GST_PAD_SINK, GST_PAD_ALWAYS, GST_STATIC_CAPS (AUDIO_CAPS));

static GstStaticPadTemplate src_template = GST_STATIC_PAD_TEMPLATE ("src",
    GST_PAD_SRC, GST_PAD_ALWAYS, GST_STATIC_CAPS (AUDIO_CAPS));

static GstStaticPadTemplate text_src_template =
GST_STATIC_PAD_TEMPLATE ("text_src", GST_PAD_SRC, GST_PAD_ALWAYS,
    GST_STATIC_CAPS ("text/x-raw, format = (string) utf8"));

#define gst_personaplex_duplex_parent_class parent_class
G_DEFINE_TYPE_WITH_CODE (GstPersonaplexDuplex, gst_personaplex_duplex,
    GST_TYPE_ELEMENT,
    GST_DEBUG_CATEGORY_INIT (gst_personaplex_duplex_debug,
        "personaplexduplex", 0, "PersonaPlex full-duplex conversation"));

GST_ELEMENT_REGISTER_DEFINE (personaplexduplex, "personaplexduplex",
    GST_RANK_NONE, GST_TYPE_PERSONAPLEX_DUPLEX);

static void gst_personaplex_duplex_set_property (GObject * object,
    guint prop_id, const GValue * value, GParamSpec * pspec);
static void gst_personaplex_duplex_get_property (GObject * object,
    guint prop_id, GValue * value, GParamSpec * pspec);
static void gst_personaplex_duplex_finalize (GObject * object);
static GstStateChangeReturn gst_personaplex_duplex_change_state (GstElement *
    element, GstStateChange transition);

static void
gst_personaplex_duplex_class_init (GstPersonaplexDuplexClass * klass)
{
  GObjectClass *gobject_class = G_OBJECT_CLASS (klass);
  GstElementClass *element_class = GST_ELEMENT_CLASS (klass);

  gobject_class->set_property = gst_personaplex_duplex_set_property;
  gobject_class->get_property = gst_personaplex_duplex_get_property;
  gobject_class->finalize = gst_personaplex_duplex_finalize;

  gst_pp_settings_install (gobject_class);

  /**
   * GstPersonaplexDuplex:tick-history:
   *
   * The live ticks of the element's engine (its ticker's last 256): a
   * `personaplex-tick-history` structure (docs/element.md, "Measuring the
   * tick").
   */
  g_object_class_install_property (gobject_class, GST_PP_PROP_TICK_HISTORY,
      g_param_spec_boxed ("tick-history", "Tick history",
          "The engine's last ticks: total, rows, ms, age-ms",
          GST_TYPE_STRUCTURE, G_PARAM_READABLE | G_PARAM_STATIC_STRINGS));

  /**
   * GstPersonaplexDuplex::measure-tick:
   * @rows: sessions in the tick
   * @ticks: ticks measured
   *
   * Action signal, in PAUSED or PLAYING: measures a tick of @rows sessions
   * at full context on the element's engine (free slots needed) and returns
   * a `personaplex-tick-measure` structure (docs/element.md, "Measuring the
   * tick"). Takes the engine for as long; meant for start-up.
   */
  g_signal_new_class_handler ("measure-tick", G_TYPE_FROM_CLASS (klass),
      G_SIGNAL_RUN_LAST | G_SIGNAL_ACTION, G_CALLBACK (measure_tick), NULL,
      NULL, NULL, GST_TYPE_STRUCTURE, 2, G_TYPE_UINT, G_TYPE_UINT);

  /**
   * GstPersonaplexDuplex::tick-history-since:
   * @since: ticks already read (a `total` of an earlier history)
   *
   * Action signal: the live ticks after the @since-th, a
   * `personaplex-tick-history` structure as the tick-history property's
   * with only those in its arrays (docs/element.md, "Measuring the tick"):
   * what a reader polling the ticks needs, without the whole history.
   */
  g_signal_new_class_handler ("tick-history-since", G_TYPE_FROM_CLASS (klass),
      G_SIGNAL_RUN_LAST | G_SIGNAL_ACTION, G_CALLBACK (tick_history_since),
      NULL, NULL, NULL, GST_TYPE_STRUCTURE, 1, G_TYPE_UINT64);

  gst_element_class_add_static_pad_template (element_class, &sink_template);
  gst_element_class_add_static_pad_template (element_class, &src_template);
  gst_element_class_add_static_pad_template (element_class,
      &text_src_template);

  gst_element_class_set_static_metadata (element_class,
      "PersonaPlex full-duplex conversation", "Filter/Audio/Text",
      "Answers 24 kHz speech with speech and text, 80 ms frame for frame "
      "(PersonaPlex / Moshi speech-to-speech model)",
      "personaplex-gst developers");

  element_class->change_state =
      GST_DEBUG_FUNCPTR (gst_personaplex_duplex_change_state);

  gst_type_mark_as_plugin_api (GST_TYPE_PERSONAPLEX_QUANTIZATION, 0);
  gst_type_mark_as_plugin_api (GST_TYPE_PERSONAPLEX_BACKEND, 0);
  gst_type_mark_as_plugin_api (GST_TYPE_PERSONAPLEX_KV_CACHE_FORMAT, 0);
}

static void
gst_personaplex_duplex_init (GstPersonaplexDuplex * self)
{
  GstPersonaplexSettings *s = &self->settings;
  GstPad *sinkpad, *srcpad, *textpad;

  sinkpad = gst_pad_new_from_static_template (&sink_template, "sink");
  srcpad = gst_pad_new_from_static_template (&src_template, "src");
  textpad = gst_pad_new_from_static_template (&text_src_template, "text_src");
  gst_pp_stream_init (&self->stream, GST_ELEMENT (self), sinkpad, srcpad,
      textpad, &self->settings);
  gst_element_add_pad (GST_ELEMENT (self), sinkpad);
  gst_element_add_pad (GST_ELEMENT (self), srcpad);
  gst_element_add_pad (GST_ELEMENT (self), textpad);

  gst_pp_settings_init (s);
}

static void
gst_personaplex_duplex_finalize (GObject * object)
{
  GstPersonaplexDuplex *self = GST_PERSONAPLEX_DUPLEX (object);
  GstPersonaplexSettings *s = &self->settings;

  gst_pp_settings_clear (s);
  gst_pp_stream_clear (&self->stream);

  G_OBJECT_CLASS (parent_class)->finalize (object);
}

/* GStreamer core does not enforce GST_PARAM_MUTABLE_READY: refuse changes
 * to settings that are only read when going to PAUSED (call with the object
 * lock held). */
static gboolean
refuse_change_now (GstPersonaplexDuplex * self, GParamSpec * pspec)
{
  if (!(pspec->flags & GST_PARAM_MUTABLE_READY))
    return FALSE;
  if (GST_STATE (self) < GST_STATE_PAUSED
      && GST_STATE_NEXT (self) < GST_STATE_PAUSED)
    return FALSE;
  g_warning ("%s: property '%s' can only be changed in the NULL or READY "
      "state (it is applied when the element goes to PAUSED); change "
      "ignored", GST_OBJECT_NAME (self), pspec->name);
  return TRUE;
}

static void
gst_personaplex_duplex_set_property (GObject * object, guint prop_id,
    const GValue * value, GParamSpec * pspec)
{
  GstPersonaplexDuplex *self = GST_PERSONAPLEX_DUPLEX (object);
  GstPersonaplexSettings *s = &self->settings;
  gboolean latency_changed = FALSE;

  GST_OBJECT_LOCK (self);
  if (refuse_change_now (self, pspec)) {
    GST_OBJECT_UNLOCK (self);
    return;
  }
  if (!gst_pp_settings_set (s, prop_id, value, &latency_changed))
    G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
  GST_OBJECT_UNLOCK (self);

  if (latency_changed)
    gst_element_post_message (GST_ELEMENT (self),
        gst_message_new_latency (GST_OBJECT (self)));
}

static void
gst_personaplex_duplex_get_property (GObject * object, guint prop_id,
    GValue * value, GParamSpec * pspec)
{
  GstPersonaplexDuplex *self = GST_PERSONAPLEX_DUPLEX (object);
  GstPersonaplexSettings *s = &self->settings;

  GST_OBJECT_LOCK (self);
  if (prop_id == GST_PP_PROP_STATS)
    g_value_take_boxed (value,
        gst_pp_stats_structure_new (&self->stream.stats, self->model));
  else if (prop_id == GST_PP_PROP_TICK_HISTORY)
    g_value_take_boxed (value,
        gst_pp_tick_history_structure_new (self->model, 0));
  else if (!gst_pp_settings_get (s, prop_id, value))
    G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
  GST_OBJECT_UNLOCK (self);
}

/* Maps a library error to a GStreamer error and posts it; the message text
 * is the GError's, which names the file and the problem. */
static void
post_library_error (GstPersonaplexDuplex * self, const gchar * what,
    const GError * err, const gchar * model_dir)
{
  GQuark domain = GST_RESOURCE_ERROR;
  gint code = GST_RESOURCE_ERROR_FAILED;
  gchar *text = g_strdup_printf ("%s: %s", what, err->message);
  gchar *debug = g_strdup_printf ("model-dir: %s", model_dir);

  if (err->domain == PPX_ERROR) {
    switch (err->code) {
      case PPX_ERROR_IO:
        code = GST_RESOURCE_ERROR_OPEN_READ;
        break;
      case PPX_ERROR_MISSING:
        code = GST_RESOURCE_ERROR_NOT_FOUND;
        break;
      case PPX_ERROR_FORMAT:
      case PPX_ERROR_SHAPE:
        code = GST_RESOURCE_ERROR_READ;
        break;
      case PPX_ERROR_CONFIG:
      case PPX_ERROR_INVALID:
        code = GST_RESOURCE_ERROR_SETTINGS;
        break;
      case PPX_ERROR_UNSUPPORTED:
        domain = GST_LIBRARY_ERROR;
        code = GST_LIBRARY_ERROR_SETTINGS;
        break;
      case PPX_ERROR_NOMEM:
        code = GST_RESOURCE_ERROR_NO_SPACE_LEFT;
        break;
      case PPX_ERROR_LIMIT:
        code = GST_RESOURCE_ERROR_BUSY;
        break;
      default:
        break;
    }
  }
  gst_element_message_full (GST_ELEMENT (self), GST_MESSAGE_ERROR, domain,
      code, text, debug, __FILE__, GST_FUNCTION, __LINE__);
}

/* A copy of @str (NULL for NULL) that @strings owns. */
static const gchar *
held_copy (GPtrArray * strings, const gchar * str)
{
  gchar *copy = g_strdup (str);

  g_ptr_array_add (strings, copy);
  return copy;
}

/* Copies the settings that apply at start into library parameters. The
 * strings are owned by @strings and freed with it. */
static gboolean
settings_to_params (GstPersonaplexDuplex * self, PpxModelParams * mp,
    PpxEngineParams * ep, PpxSessionParams * sp, GArray ** tokens,
    GPtrArray * strings, gchar ** instance_id, GError ** error)
{
  GstPersonaplexSettings *s = &self->settings;

  ppx_model_params_init (mp);
  ppx_engine_params_init (ep);
  ppx_session_params_init (sp);

  GST_OBJECT_LOCK (self);
  mp->model_dir = held_copy (strings, s->model_dir);
  mp->quantization = s->quantization;
  mp->backend = s->backend;
  mp->device = s->device;
  *instance_id = g_strdup (s->model_instance_id);
  ep->max_sessions = s->max_sessions;
  /* the engine's: the session is a slot of it (sp->kv_format is for ppx_session_new only) */
  ep->kv_format = s->kv_cache_format;

  sp->voice_prompt = held_copy (strings, s->voice_prompt);
  sp->voice_normalize = s->voice_normalize;
  sp->voice_cache_dir = held_copy (strings, s->voice_cache_dir);
  sp->text_prompt = held_copy (strings, s->text_prompt);
  *tokens = gst_pp_parse_token_list (s->text_prompt_tokens, error);
  sp->greedy = s->greedy;
  sp->seed = s->seed;
  sp->temp_audio = s->temp_audio;
  sp->temp_text = s->temp_text;
  sp->topk_audio = s->topk_audio;
  sp->topk_text = s->topk_text;
  GST_OBJECT_UNLOCK (self);

  if (*tokens == NULL)
    return FALSE;
  if ((*tokens)->len > 0) {
    sp->text_prompt_tokens = (const int *) (*tokens)->data;
    sp->n_text_prompt_tokens = (*tokens)->len;
  }
  return TRUE;
}

static gboolean
open_model (GstPersonaplexDuplex * self)
{
  PpxModelParams mp;
  PpxEngineParams ep;
  PpxSessionParams sp;
  g_autoptr (GPtrArray) strings = g_ptr_array_new_with_free_func (g_free);
  g_autoptr (GArray) tokens = NULL;
  g_autofree gchar *instance_id = NULL;
  GError *err = NULL;
  GstPpModelHandle *handle;
  PpxModel *model;
  PpxEngine *engine;

  if (!settings_to_params (self, &mp, &ep, &sp, &tokens, strings,
          &instance_id, &err)) {
    GST_ELEMENT_ERROR (self, RESOURCE, SETTINGS, ("%s", err->message),
        (NULL));
    g_error_free (err);
    return FALSE;
  }
  if (mp.model_dir == NULL || mp.model_dir[0] == '\0') {
    GST_ELEMENT_ERROR (self, RESOURCE, NOT_FOUND,
        ("No model directory: set the model-dir property"), (NULL));
    return FALSE;
  }

  GST_INFO_OBJECT (self, "loading model from %s (instance id %s)",
      mp.model_dir, GST_STR_NULL (instance_id));
  handle = gst_pp_model_pool_acquire (instance_id, &mp, &ep, &err);
  if (handle == NULL) {
    post_library_error (self, "Could not load the PersonaPlex model", err,
        mp.model_dir);
    g_error_free (err);
    return FALSE;
  }
  model = gst_pp_model_handle_get_model (handle);
  if (ppx_model_sample_rate (model) != 24000) {
    GST_ELEMENT_ERROR (self, RESOURCE, SETTINGS,
        ("The model in %s runs at %d Hz; this element supports 24000 Hz",
            mp.model_dir, ppx_model_sample_rate (model)), (NULL));
    gst_pp_model_pool_release (handle);
    return FALSE;
  }

  engine = gst_pp_model_handle_get_engine (handle);
  self->session = ppx_engine_session_new (engine, &sp, &err);
  if (self->session == NULL) {
    if (g_error_matches (err, PPX_ERROR, PPX_ERROR_LIMIT))
      g_prefix_error (&err, "model-instance-id '%s' (max-sessions %d): ",
          GST_STR_NULL (instance_id), ppx_engine_max_sessions (engine));
    post_library_error (self, "Could not start the conversation", err,
        mp.model_dir);
    g_error_free (err);
    gst_pp_model_pool_release (handle);
    return FALSE;
  }
  GST_OBJECT_LOCK (self);
  self->model = handle;
  GST_OBJECT_UNLOCK (self);

  GST_INFO_OBJECT (self, "model ready: backend %s, quantization %s, "
      "%" G_GUINT64_FORMAT " weight bytes, %u user(s); engine of %d "
      "session(s), %s KV cache, %" G_GUINT64_FORMAT " bytes a session",
      ppx_model_backend_name (model), ppx_model_quantization_name (model),
      ppx_model_weight_bytes (model), gst_pp_model_handle_get_users (handle),
      ppx_engine_max_sessions (engine),
      ppx_kv_format_name (ppx_engine_kv_format (engine)),
      ppx_engine_session_bytes (engine));
  return TRUE;
}

static void
close_model (GstPersonaplexDuplex * self)
{
  GstPpModelHandle *model;

  /* the stream has left the ticker (gst_pp_stream_stop) */
  g_clear_pointer (&self->session, ppx_session_free);
  GST_OBJECT_LOCK (self);
  model = self->model;
  self->model = NULL;
  GST_OBJECT_UNLOCK (self);
  gst_pp_model_pool_release (model);
}

static GstStateChangeReturn
gst_personaplex_duplex_change_state (GstElement * element,
    GstStateChange transition)
{
  GstPersonaplexDuplex *self = GST_PERSONAPLEX_DUPLEX (element);
  GstStateChangeReturn ret;

  switch (transition) {
    case GST_STATE_CHANGE_READY_TO_PAUSED:
      if (!open_model (self))
        return GST_STATE_CHANGE_FAILURE;
      gst_pp_stream_start (&self->stream, self->model, self->session);
      break;
    case GST_STATE_CHANGE_PAUSED_TO_READY:
      /* a frame waiting for the other sessions' frames returns at once, so
       * deactivating the pads (which takes the stream lock) never waits
       * for a tick */
      gst_pp_stream_set_flushing (&self->stream, TRUE);
      break;
    default:
      break;
  }

  ret = GST_ELEMENT_CLASS (parent_class)->change_state (element, transition);
  if (ret == GST_STATE_CHANGE_FAILURE) {
    if (transition == GST_STATE_CHANGE_READY_TO_PAUSED) {
      gst_pp_stream_stop (&self->stream);
      close_model (self);
    }
    return ret;
  }

  switch (transition) {
    case GST_STATE_CHANGE_PAUSED_TO_READY:
      gst_pp_stream_stop (&self->stream);
      close_model (self);
      break;
    default:
      break;
  }
  return ret;
}
