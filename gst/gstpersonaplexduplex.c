/* personaplexduplex: full-duplex speech-to-speech conversation element.
 *
 * This file holds the element class: pad templates, properties (and the
 * enforcement of GST_PARAM_MUTABLE_READY), and the state changes that load
 * the model and create the conversation session. The streaming side lives
 * in gstppstream.c. */

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
#include "gstpplatency.h"
#include "gstppmessages.h"
#include "gstppstream.h"
#include "gstpptextpad.h"
#include "gstpptokens.h"

GST_DEBUG_CATEGORY (gst_personaplex_duplex_debug);
#define GST_CAT_DEFAULT gst_personaplex_duplex_debug

#define DEFAULT_VOICE_NORMALIZE TRUE
#define DEFAULT_GREEDY FALSE
#define DEFAULT_SEED 0
#define DEFAULT_TEMP_AUDIO 0.8f
#define DEFAULT_TEMP_TEXT 0.7f
#define DEFAULT_TOPK_AUDIO 250
#define DEFAULT_TOPK_TEXT 25
#define DEFAULT_QUANTIZATION PPX_QUANT_AUTO
#define DEFAULT_BACKEND PPX_BACKEND_AUTO
#define DEFAULT_DEVICE 0
#define DEFAULT_MAX_SESSIONS 0
#define DEFAULT_KV_CACHE_FORMAT PPX_KV_AUTO
#define DEFAULT_BATCH_DEADLINE (20 * GST_MSECOND)
#define DEFAULT_ALIGN_FRAMES TRUE
#define DEFAULT_STATS_INTERVAL 25
#define DEFAULT_PROCESSING_DEADLINE GST_PP_PROCESSING_DEADLINE_AUTO
#define DEFAULT_RESET_ON_DISCONT FALSE
#define DEFAULT_FRAME_MESSAGES FALSE

enum
{
  PROP_0,
  PROP_MODEL_DIR,
  PROP_VOICE_PROMPT,
  PROP_VOICE_NORMALIZE,
  PROP_VOICE_CACHE_DIR,
  PROP_TEXT_PROMPT,
  PROP_TEXT_PROMPT_TOKENS,
  PROP_GREEDY,
  PROP_SEED,
  PROP_TEMP_AUDIO,
  PROP_TEMP_TEXT,
  PROP_TOPK_AUDIO,
  PROP_TOPK_TEXT,
  PROP_QUANTIZATION,
  PROP_BACKEND,
  PROP_DEVICE,
  PROP_MODEL_INSTANCE_ID,
  PROP_MAX_SESSIONS,
  PROP_KV_CACHE_FORMAT,
  PROP_BATCH_DEADLINE,
  PROP_ALIGN_FRAMES,
  PROP_STATS,
  PROP_STATS_INTERVAL,
  PROP_PROCESSING_DEADLINE,
  PROP_RESET_ON_DISCONT,
  PROP_FRAME_MESSAGES,
  PROP_TICK_HISTORY,
};

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

#define READY_FLAGS (G_PARAM_READWRITE | G_PARAM_STATIC_STRINGS | \
    GST_PARAM_MUTABLE_READY)
#define PLAYING_FLAGS (G_PARAM_READWRITE | G_PARAM_STATIC_STRINGS | \
    GST_PARAM_MUTABLE_PLAYING)

static void
gst_personaplex_duplex_class_init (GstPersonaplexDuplexClass * klass)
{
  GObjectClass *gobject_class = G_OBJECT_CLASS (klass);
  GstElementClass *element_class = GST_ELEMENT_CLASS (klass);

  gobject_class->set_property = gst_personaplex_duplex_set_property;
  gobject_class->get_property = gst_personaplex_duplex_get_property;
  gobject_class->finalize = gst_personaplex_duplex_finalize;

  /**
   * GstPersonaplexDuplex:model-dir:
   *
   * Model directory in the published layout: model.safetensors (LM),
   * tokenizer-e351c8d8-checkpoint125.safetensors (Mimi),
   * tokenizer_spm_32k_3.model (text pieces), optional voices/ and config.json.
   */
  g_object_class_install_property (gobject_class, PROP_MODEL_DIR,
      g_param_spec_string ("model-dir", "Model directory",
          "Directory holding model.safetensors, the Mimi checkpoint, the "
          "tokenizer and optional config.json and voices/ (loaded when going "
          "to PAUSED)", NULL, READY_FLAGS));

  g_object_class_install_property (gobject_class, PROP_VOICE_PROMPT,
      g_param_spec_string ("voice-prompt", "Voice prompt",
          "Voice of the agent: an audio file, a .pt voice prompt, or NAME for "
          "MODEL-DIR/voices/NAME.pt; unset for no voice prompt", NULL,
          READY_FLAGS));

  g_object_class_install_property (gobject_class, PROP_VOICE_NORMALIZE,
      g_param_spec_boolean ("voice-normalize", "Normalize voice prompt",
          "Normalize an audio voice prompt to -24 LUFS before encoding it",
          DEFAULT_VOICE_NORMALIZE, READY_FLAGS));

  g_object_class_install_property (gobject_class, PROP_VOICE_CACHE_DIR,
      g_param_spec_string ("voice-cache-dir", "Voice prompt cache",
          "Directory where an audio voice prompt is stored after its first use "
          "(embeddings and token cache, as a .pt holds them), so the next start "
          "with the same voice skips decoding and encoding it; unset: no cache",
          NULL, READY_FLAGS));

  g_object_class_install_property (gobject_class, PROP_TEXT_PROMPT,
      g_param_spec_string ("text-prompt", "Text prompt",
          "System text prompt (role, persona); needs the model's "
          "sentencepiece tokenizer; ignored when text-prompt-tokens is set",
          NULL, READY_FLAGS));

  g_object_class_install_property (gobject_class, PROP_TEXT_PROMPT_TOKENS,
      g_param_spec_string ("text-prompt-tokens", "Text prompt tokens",
          "System text prompt as comma-separated token ids (\"1,529,2047\"); "
          "overrides text-prompt", NULL, READY_FLAGS));

  g_object_class_install_property (gobject_class, PROP_GREEDY,
      g_param_spec_boolean ("greedy", "Greedy decoding",
          "Take the most likely text token and audio codes instead of "
          "sampling (deterministic)", DEFAULT_GREEDY, READY_FLAGS));

  g_object_class_install_property (gobject_class, PROP_SEED,
      g_param_spec_uint64 ("seed", "Seed",
          "Seed of the sampling random generator (each conversation, and each "
          "flush, starts from it)", 0, G_MAXUINT64, DEFAULT_SEED,
          READY_FLAGS));

  g_object_class_install_property (gobject_class, PROP_TEMP_AUDIO,
      g_param_spec_float ("temp-audio", "Audio temperature",
          "Sampling temperature of the agent's audio codes (0: greedy)",
          0.0f, 10.0f, DEFAULT_TEMP_AUDIO, READY_FLAGS));

  g_object_class_install_property (gobject_class, PROP_TEMP_TEXT,
      g_param_spec_float ("temp-text", "Text temperature",
          "Sampling temperature of the agent's text tokens (0: greedy)",
          0.0f, 10.0f, DEFAULT_TEMP_TEXT, READY_FLAGS));

  g_object_class_install_property (gobject_class, PROP_TOPK_AUDIO,
      g_param_spec_int ("topk-audio", "Audio top-k",
          "Sample audio codes among the k most likely (codebook entries)",
          1, 65536, DEFAULT_TOPK_AUDIO, READY_FLAGS));

  g_object_class_install_property (gobject_class, PROP_TOPK_TEXT,
      g_param_spec_int ("topk-text", "Text top-k",
          "Sample text tokens among the k most likely (vocabulary entries)",
          1, 65536, DEFAULT_TOPK_TEXT, READY_FLAGS));

  g_object_class_install_property (gobject_class, PROP_QUANTIZATION,
      g_param_spec_enum ("quantization", "Quantization",
          "Weight format of the language model",
          GST_TYPE_PERSONAPLEX_QUANTIZATION, DEFAULT_QUANTIZATION,
          READY_FLAGS));

  g_object_class_install_property (gobject_class, PROP_BACKEND,
      g_param_spec_enum ("backend", "Backend", "Compute backend",
          GST_TYPE_PERSONAPLEX_BACKEND, DEFAULT_BACKEND, READY_FLAGS));

  g_object_class_install_property (gobject_class, PROP_DEVICE,
      g_param_spec_int ("device", "GPU device",
          "Index of the CUDA device (backend cuda or auto)", 0, 1024,
          DEFAULT_DEVICE, READY_FLAGS));

  g_object_class_install_property (gobject_class, PROP_MODEL_INSTANCE_ID,
      g_param_spec_string ("model-instance-id", "Model instance id",
          "Elements of one process with the same id share one loaded model "
          "and one engine, which steps their conversations together in one "
          "batch per 80 ms tick (same model-dir, quantization, backend, "
          "device, max-sessions and kv-cache-format required); each keeps "
          "its own conversation. Unset: a private model and engine", NULL,
          READY_FLAGS));

  /**
   * GstPersonaplexDuplex:max-sessions:
   *
   * Conversations the shared engine holds (its slots of per-session state,
   * allocated when the first element of a model-instance-id starts). An
   * element over the limit fails to start with a RESOURCE/BUSY error.
   */
  g_object_class_install_property (gobject_class, PROP_MAX_SESSIONS,
      g_param_spec_int ("max-sessions", "Maximum sessions",
          "Conversations the engine shared through model-instance-id holds; "
          "0: as many as fit in the memory free when it is made. An element "
          "over the limit fails to start. Without model-instance-id the "
          "engine holds this element's conversation only", 0, 4096,
          DEFAULT_MAX_SESSIONS, READY_FLAGS));

  g_object_class_install_property (gobject_class, PROP_KV_CACHE_FORMAT,
      g_param_spec_enum ("kv-cache-format", "KV cache format",
          "How the language model's KV cache is stored: auto (the library's "
          "default), f32 (exact reference numerics), bf16, fp8 (e4m3)",
          GST_TYPE_PERSONAPLEX_KV_CACHE_FORMAT, DEFAULT_KV_CACHE_FORMAT,
          READY_FLAGS));

  /**
   * GstPersonaplexDuplex:batch-deadline:
   *
   * With a shared engine: how long a frame may wait for the frames of the
   * other conversations before the tick runs without them. Part of the
   * reported latency when model-instance-id is set.
   */
  g_object_class_install_property (gobject_class, PROP_BATCH_DEADLINE,
      g_param_spec_uint64 ("batch-deadline", "Batch deadline",
          "With model-instance-id: longest time (ns) a frame waits for the "
          "other conversations of the engine to hand in theirs before the "
          "tick runs without them; added to the latency", 0,
          G_MAXUINT64, DEFAULT_BATCH_DEADLINE, PLAYING_FLAGS));

  /**
   * GstPersonaplexDuplex:align-frames:
   *
   * With a shared engine and a live source: when a stream starts (or
   * resyncs) while other conversations tick on the engine, its first frame
   * begins with up to 80 ms of silence so that its frames complete when
   * theirs do, and every conversation is stepped in the same tick instead
   * of calls at random phases splitting the 80 ms period into several
   * smaller ticks. The first answer is shortened by the same amount (the
   * output timeline stays that of the input); no latency is added. See
   * docs/element.md, "Frame alignment".
   */
  g_object_class_install_property (gobject_class, PROP_ALIGN_FRAMES,
      g_param_spec_boolean ("align-frames", "Align frames",
          "With model-instance-id and a live source: lead a starting "
          "stream's first frame with silence so that its frames complete "
          "with those of the engine's other conversations (one tick for "
          "all)", DEFAULT_ALIGN_FRAMES, PLAYING_FLAGS));

  /**
   * GstPersonaplexDuplex:stats:
   *
   * A `personaplex-stats` structure with the same fields as the bus message
   * of that name (see docs/element.md).
   */
  g_object_class_install_property (gobject_class, PROP_STATS,
      g_param_spec_boxed ("stats", "Statistics",
          "personaplex-stats structure: frames, mean-step-ms, max-step-ms, "
          "overruns, batch-size, tick-ms, latency, "
          "memory-bytes, session-bytes, "
          "engine-bytes, max-sessions, kv-cache-format, backend, "
          "quantization, model-users, timestamp, running-time; the "
          "engine's ticks: tick-p50-ms, tick-p99-ms, tick-max-ms, ticks, "
          "tick-overruns, tick-total-ms, tick-buckets, tick-bucket-bounds-ms",
          GST_TYPE_STRUCTURE,
          G_PARAM_READABLE | G_PARAM_STATIC_STRINGS));

  g_object_class_install_property (gobject_class, PROP_STATS_INTERVAL,
      g_param_spec_uint ("stats-interval", "Statistics interval",
          "Frames (of 80 ms) between personaplex-stats element messages; "
          "0: only the one at EOS", 0, G_MAXUINT, DEFAULT_STATS_INTERVAL,
          PLAYING_FLAGS));

  /**
   * GstPersonaplexDuplex:processing-deadline:
   *
   * Time budget for computing one frame, added to the reported latency on
   * top of the 80 ms frame. -1 (GST_CLOCK_TIME_NONE, the default) is
   * automatic: the engine's measured tick p99 plus a margin (max (10 ms,
   * p99 / 4)), one frame (80 ms) before the engine has measured a tick.
   * Within a stream the automatic value only grows: when the ticks outgrow
   * it the element posts a latency message. See docs/element.md, "Latency".
   */
  g_object_class_install_property (gobject_class, PROP_PROCESSING_DEADLINE,
      g_param_spec_uint64 ("processing-deadline", "Processing deadline",
          "Time budget (ns) for computing one frame, added to the latency "
          "on top of the 80 ms frame; -1 (the default): automatic, the "
          "engine's measured tick p99 plus a margin (80 ms until a tick is "
          "measured), growing with the load and posting a latency message, "
          "never shrinking within a stream", 0, G_MAXUINT64,
          DEFAULT_PROCESSING_DEADLINE, PLAYING_FLAGS));

  g_object_class_install_property (gobject_class, PROP_RESET_ON_DISCONT,
      g_param_spec_boolean ("reset-on-discont", "Reset on discont",
          "Start a new conversation (same prompts) at a timestamp "
          "discontinuity instead of only resynchronizing the timestamps",
          DEFAULT_RESET_ON_DISCONT, PLAYING_FLAGS));

  g_object_class_install_property (gobject_class, PROP_FRAME_MESSAGES,
      g_param_spec_boolean ("frame-messages", "Frame messages",
          "Post a personaplex-frame element message (the frame's 17 tokens "
          "and step time) for every frame", DEFAULT_FRAME_MESSAGES,
          PLAYING_FLAGS));

  /**
   * GstPersonaplexDuplex:tick-history:
   *
   * The live ticks of the element's engine (its ticker's last 256): a
   * `personaplex-tick-history` structure (docs/element.md, "Measuring the
   * tick").
   */
  g_object_class_install_property (gobject_class, PROP_TICK_HISTORY,
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

  s->voice_normalize = DEFAULT_VOICE_NORMALIZE;
  s->greedy = DEFAULT_GREEDY;
  s->seed = DEFAULT_SEED;
  s->temp_audio = DEFAULT_TEMP_AUDIO;
  s->temp_text = DEFAULT_TEMP_TEXT;
  s->topk_audio = DEFAULT_TOPK_AUDIO;
  s->topk_text = DEFAULT_TOPK_TEXT;
  s->quantization = DEFAULT_QUANTIZATION;
  s->backend = DEFAULT_BACKEND;
  s->device = DEFAULT_DEVICE;
  s->max_sessions = DEFAULT_MAX_SESSIONS;
  s->kv_cache_format = DEFAULT_KV_CACHE_FORMAT;
  s->batch_deadline = DEFAULT_BATCH_DEADLINE;
  s->align_frames = DEFAULT_ALIGN_FRAMES;
  s->stats_interval = DEFAULT_STATS_INTERVAL;
  s->processing_deadline = DEFAULT_PROCESSING_DEADLINE;
  s->reset_on_discont = DEFAULT_RESET_ON_DISCONT;
  s->frame_messages = DEFAULT_FRAME_MESSAGES;
}

static void
gst_personaplex_duplex_finalize (GObject * object)
{
  GstPersonaplexDuplex *self = GST_PERSONAPLEX_DUPLEX (object);
  GstPersonaplexSettings *s = &self->settings;

  g_free (s->model_dir);
  g_free (s->voice_prompt);
  g_free (s->voice_cache_dir);
  g_free (s->text_prompt);
  g_free (s->text_prompt_tokens);
  g_free (s->model_instance_id);
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
  switch (prop_id) {
    case PROP_MODEL_DIR:
      g_free (s->model_dir);
      s->model_dir = g_value_dup_string (value);
      break;
    case PROP_VOICE_PROMPT:
      g_free (s->voice_prompt);
      s->voice_prompt = g_value_dup_string (value);
      break;
    case PROP_VOICE_NORMALIZE:
      s->voice_normalize = g_value_get_boolean (value);
      break;
    case PROP_VOICE_CACHE_DIR:
      g_free (s->voice_cache_dir);
      s->voice_cache_dir = g_value_dup_string (value);
      break;
    case PROP_TEXT_PROMPT:
      g_free (s->text_prompt);
      s->text_prompt = g_value_dup_string (value);
      break;
    case PROP_TEXT_PROMPT_TOKENS:
      /* checked when the element starts: a bad list fails the state change
       * with an error naming the item */
      g_free (s->text_prompt_tokens);
      s->text_prompt_tokens = g_value_dup_string (value);
      break;
    case PROP_GREEDY:
      s->greedy = g_value_get_boolean (value);
      break;
    case PROP_SEED:
      s->seed = g_value_get_uint64 (value);
      break;
    case PROP_TEMP_AUDIO:
      s->temp_audio = g_value_get_float (value);
      break;
    case PROP_TEMP_TEXT:
      s->temp_text = g_value_get_float (value);
      break;
    case PROP_TOPK_AUDIO:
      s->topk_audio = g_value_get_int (value);
      break;
    case PROP_TOPK_TEXT:
      s->topk_text = g_value_get_int (value);
      break;
    case PROP_QUANTIZATION:
      s->quantization = g_value_get_enum (value);
      break;
    case PROP_BACKEND:
      s->backend = g_value_get_enum (value);
      break;
    case PROP_DEVICE:
      s->device = g_value_get_int (value);
      break;
    case PROP_MODEL_INSTANCE_ID:
      g_free (s->model_instance_id);
      s->model_instance_id = g_value_dup_string (value);
      break;
    case PROP_MAX_SESSIONS:
      s->max_sessions = g_value_get_int (value);
      break;
    case PROP_KV_CACHE_FORMAT:
      s->kv_cache_format = g_value_get_enum (value);
      break;
    case PROP_BATCH_DEADLINE:{
      guint64 deadline = g_value_get_uint64 (value);

      /* part of the latency only with a shared engine */
      latency_changed = deadline != s->batch_deadline
          && s->model_instance_id != NULL && s->model_instance_id[0] != '\0';
      s->batch_deadline = deadline;
      break;
    }
    case PROP_ALIGN_FRAMES:
      s->align_frames = g_value_get_boolean (value);
      break;
    case PROP_STATS_INTERVAL:
      s->stats_interval = g_value_get_uint (value);
      break;
    case PROP_PROCESSING_DEADLINE:{
      guint64 deadline = g_value_get_uint64 (value);

      latency_changed = deadline != s->processing_deadline;
      s->processing_deadline = deadline;
      break;
    }
    case PROP_RESET_ON_DISCONT:
      s->reset_on_discont = g_value_get_boolean (value);
      break;
    case PROP_FRAME_MESSAGES:
      s->frame_messages = g_value_get_boolean (value);
      break;
    default:
      G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
      break;
  }
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
  switch (prop_id) {
    case PROP_MODEL_DIR:
      g_value_set_string (value, s->model_dir);
      break;
    case PROP_VOICE_PROMPT:
      g_value_set_string (value, s->voice_prompt);
      break;
    case PROP_VOICE_NORMALIZE:
      g_value_set_boolean (value, s->voice_normalize);
      break;
    case PROP_VOICE_CACHE_DIR:
      g_value_set_string (value, s->voice_cache_dir);
      break;
    case PROP_TEXT_PROMPT:
      g_value_set_string (value, s->text_prompt);
      break;
    case PROP_TEXT_PROMPT_TOKENS:
      g_value_set_string (value, s->text_prompt_tokens);
      break;
    case PROP_GREEDY:
      g_value_set_boolean (value, s->greedy);
      break;
    case PROP_SEED:
      g_value_set_uint64 (value, s->seed);
      break;
    case PROP_TEMP_AUDIO:
      g_value_set_float (value, s->temp_audio);
      break;
    case PROP_TEMP_TEXT:
      g_value_set_float (value, s->temp_text);
      break;
    case PROP_TOPK_AUDIO:
      g_value_set_int (value, s->topk_audio);
      break;
    case PROP_TOPK_TEXT:
      g_value_set_int (value, s->topk_text);
      break;
    case PROP_QUANTIZATION:
      g_value_set_enum (value, s->quantization);
      break;
    case PROP_BACKEND:
      g_value_set_enum (value, s->backend);
      break;
    case PROP_DEVICE:
      g_value_set_int (value, s->device);
      break;
    case PROP_MODEL_INSTANCE_ID:
      g_value_set_string (value, s->model_instance_id);
      break;
    case PROP_MAX_SESSIONS:
      g_value_set_int (value, s->max_sessions);
      break;
    case PROP_KV_CACHE_FORMAT:
      g_value_set_enum (value, s->kv_cache_format);
      break;
    case PROP_BATCH_DEADLINE:
      g_value_set_uint64 (value, s->batch_deadline);
      break;
    case PROP_ALIGN_FRAMES:
      g_value_set_boolean (value, s->align_frames);
      break;
    case PROP_STATS:
      g_value_take_boxed (value,
          gst_pp_stats_structure_new (&self->stream.stats, self->model));
      break;
    case PROP_STATS_INTERVAL:
      g_value_set_uint (value, s->stats_interval);
      break;
    case PROP_TICK_HISTORY:
      g_value_take_boxed (value,
          gst_pp_tick_history_structure_new (self->model));
      break;
    case PROP_PROCESSING_DEADLINE:
      g_value_set_uint64 (value, s->processing_deadline);
      break;
    case PROP_RESET_ON_DISCONT:
      g_value_set_boolean (value, s->reset_on_discont);
      break;
    case PROP_FRAME_MESSAGES:
      g_value_set_boolean (value, s->frame_messages);
      break;
    default:
      G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
      break;
  }
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
  g_ptr_array_add (strings, g_strdup (s->model_dir));
  mp->model_dir = g_ptr_array_index (strings, strings->len - 1);
  mp->quantization = s->quantization;
  mp->backend = s->backend;
  mp->device = s->device;
  *instance_id = g_strdup (s->model_instance_id);
  ep->max_sessions = s->max_sessions;
  ep->kv_format = s->kv_cache_format;
  sp->kv_format = s->kv_cache_format;

  g_ptr_array_add (strings, g_strdup (s->voice_prompt));
  sp->voice_prompt = g_ptr_array_index (strings, strings->len - 1);
  sp->voice_normalize = s->voice_normalize;
  g_ptr_array_add (strings, g_strdup (s->voice_cache_dir));
  sp->voice_cache_dir = g_ptr_array_index (strings, strings->len - 1);
  g_ptr_array_add (strings, g_strdup (s->text_prompt));
  sp->text_prompt = g_ptr_array_index (strings, strings->len - 1);
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
