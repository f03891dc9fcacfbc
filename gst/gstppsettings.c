/* personaplexduplex: the element's properties, as a table over its
 * settings (gstppsettings.h): the specs, where each setting lives in
 * GstPersonaplexSettings, and the generic set, get, defaults and free that
 * follow from the two. The element adds only what is not a setting: the
 * refusal of MUTABLE_READY changes past READY and the `stats` property. */
#include "gstppsettings.h"

#include <string.h>

#include "gstppenums.h"
#include "gstpplatency.h"

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

#define READY_FLAGS (G_PARAM_READWRITE | G_PARAM_STATIC_STRINGS | \
    GST_PARAM_MUTABLE_READY)
#define PLAYING_FLAGS (G_PARAM_READWRITE | G_PARAM_STATIC_STRINGS | \
    GST_PARAM_MUTABLE_PLAYING)

#define AT(field) G_STRUCT_OFFSET (GstPersonaplexSettings, field)

/* Where each property's setting lives; -1: not a setting (stats, tick-history). */
static const glong setting_offset[GST_PP_N_PROPS] = {
  [GST_PP_PROP_0] = -1,
  [GST_PP_PROP_MODEL_DIR] = AT (model_dir),
  [GST_PP_PROP_VOICE_PROMPT] = AT (voice_prompt),
  [GST_PP_PROP_VOICE_NORMALIZE] = AT (voice_normalize),
  [GST_PP_PROP_VOICE_CACHE_DIR] = AT (voice_cache_dir),
  [GST_PP_PROP_TEXT_PROMPT] = AT (text_prompt),
  [GST_PP_PROP_TEXT_PROMPT_TOKENS] = AT (text_prompt_tokens),
  [GST_PP_PROP_GREEDY] = AT (greedy),
  [GST_PP_PROP_SEED] = AT (seed),
  [GST_PP_PROP_TEMP_AUDIO] = AT (temp_audio),
  [GST_PP_PROP_TEMP_TEXT] = AT (temp_text),
  [GST_PP_PROP_TOPK_AUDIO] = AT (topk_audio),
  [GST_PP_PROP_TOPK_TEXT] = AT (topk_text),
  [GST_PP_PROP_QUANTIZATION] = AT (quantization),
  [GST_PP_PROP_BACKEND] = AT (backend),
  [GST_PP_PROP_DEVICE] = AT (device),
  [GST_PP_PROP_MODEL_INSTANCE_ID] = AT (model_instance_id),
  [GST_PP_PROP_MAX_SESSIONS] = AT (max_sessions),
  [GST_PP_PROP_KV_CACHE_FORMAT] = AT (kv_cache_format),
  [GST_PP_PROP_BATCH_DEADLINE] = AT (batch_deadline),
  [GST_PP_PROP_ALIGN_FRAMES] = AT (align_frames),
  [GST_PP_PROP_STATS] = -1,
  [GST_PP_PROP_STATS_INTERVAL] = AT (stats_interval),
  [GST_PP_PROP_PROCESSING_DEADLINE] = AT (processing_deadline),
  [GST_PP_PROP_RESET_ON_DISCONT] = AT (reset_on_discont),
  [GST_PP_PROP_FRAME_MESSAGES] = AT (frame_messages),
  [GST_PP_PROP_TICK_HISTORY] = -1,
};

/* The enum settings are written as gint (g_value_get_enum). */
G_STATIC_ASSERT (sizeof (PpxQuantization) == sizeof (gint));
G_STATIC_ASSERT (sizeof (PpxBackendKind) == sizeof (gint));
G_STATIC_ASSERT (sizeof (PpxKvFormat) == sizeof (gint));
G_STATIC_ASSERT (sizeof (GstClockTime) == sizeof (guint64));

/* The specs as installed (their defaults are the settings' defaults). */
static GParamSpec *specs[GST_PP_N_PROPS];

static void
install (GObjectClass * klass, guint id, GParamSpec * pspec)
{
  specs[id] = pspec;
  g_object_class_install_property (klass, id, pspec);
}

void
gst_pp_settings_install (GObjectClass * klass)
{
  /**
   * GstPersonaplexDuplex:model-dir:
   *
   * Model directory in the published layout: model.safetensors (LM),
   * tokenizer-e351c8d8-checkpoint125.safetensors (Mimi),
   * tokenizer_spm_32k_3.model (text pieces), optional voices/ and config.json.
   */
  install (klass, GST_PP_PROP_MODEL_DIR,
      g_param_spec_string ("model-dir", "Model directory",
          "Directory holding model.safetensors, the Mimi checkpoint, the "
          "tokenizer and optional config.json and voices/ (loaded when going "
          "to PAUSED)", NULL, READY_FLAGS));

  install (klass, GST_PP_PROP_VOICE_PROMPT,
      g_param_spec_string ("voice-prompt", "Voice prompt",
          "Voice of the agent: an audio file, a .pt voice prompt, or NAME for "
          "MODEL-DIR/voices/NAME.pt; unset for no voice prompt", NULL,
          READY_FLAGS));

  install (klass, GST_PP_PROP_VOICE_NORMALIZE,
      g_param_spec_boolean ("voice-normalize", "Normalize voice prompt",
          "Normalize an audio voice prompt to -24 LUFS before encoding it",
          DEFAULT_VOICE_NORMALIZE, READY_FLAGS));

  install (klass, GST_PP_PROP_VOICE_CACHE_DIR,
      g_param_spec_string ("voice-cache-dir", "Voice prompt cache",
          "Directory where an audio voice prompt is stored after its first use "
          "(embeddings and token cache, as a .pt holds them), so the next start "
          "with the same voice skips decoding and encoding it; unset: no cache",
          NULL, READY_FLAGS));

  install (klass, GST_PP_PROP_TEXT_PROMPT,
      g_param_spec_string ("text-prompt", "Text prompt",
          "System text prompt (role, persona); needs the model's "
          "sentencepiece tokenizer; ignored when text-prompt-tokens is set",
          NULL, READY_FLAGS));

  install (klass, GST_PP_PROP_TEXT_PROMPT_TOKENS,
      g_param_spec_string ("text-prompt-tokens", "Text prompt tokens",
          "System text prompt as comma-separated token ids (\"1,529,2047\"); "
          "overrides text-prompt", NULL, READY_FLAGS));

  install (klass, GST_PP_PROP_GREEDY,
      g_param_spec_boolean ("greedy", "Greedy decoding",
          "Take the most likely text token and audio codes instead of "
          "sampling (deterministic)", DEFAULT_GREEDY, READY_FLAGS));

  install (klass, GST_PP_PROP_SEED,
      g_param_spec_uint64 ("seed", "Seed",
          "Seed of the sampling random generator (each conversation, and each "
          "flush, starts from it)", 0, G_MAXUINT64, DEFAULT_SEED,
          READY_FLAGS));

  install (klass, GST_PP_PROP_TEMP_AUDIO,
      g_param_spec_float ("temp-audio", "Audio temperature",
          "Sampling temperature of the agent's audio codes (0: greedy)",
          0.0f, 10.0f, DEFAULT_TEMP_AUDIO, READY_FLAGS));

  install (klass, GST_PP_PROP_TEMP_TEXT,
      g_param_spec_float ("temp-text", "Text temperature",
          "Sampling temperature of the agent's text tokens (0: greedy)",
          0.0f, 10.0f, DEFAULT_TEMP_TEXT, READY_FLAGS));

  install (klass, GST_PP_PROP_TOPK_AUDIO,
      g_param_spec_int ("topk-audio", "Audio top-k",
          "Sample audio codes among the k most likely (codebook entries)",
          1, 65536, DEFAULT_TOPK_AUDIO, READY_FLAGS));

  install (klass, GST_PP_PROP_TOPK_TEXT,
      g_param_spec_int ("topk-text", "Text top-k",
          "Sample text tokens among the k most likely (vocabulary entries)",
          1, 65536, DEFAULT_TOPK_TEXT, READY_FLAGS));

  install (klass, GST_PP_PROP_QUANTIZATION,
      g_param_spec_enum ("quantization", "Quantization",
          "Weight format of the language model",
          GST_TYPE_PERSONAPLEX_QUANTIZATION, DEFAULT_QUANTIZATION,
          READY_FLAGS));

  install (klass, GST_PP_PROP_BACKEND,
      g_param_spec_enum ("backend", "Backend", "Compute backend",
          GST_TYPE_PERSONAPLEX_BACKEND, DEFAULT_BACKEND, READY_FLAGS));

  install (klass, GST_PP_PROP_DEVICE,
      g_param_spec_int ("device", "GPU device",
          "Index of the CUDA device (backend cuda or auto)", 0, 1024,
          DEFAULT_DEVICE, READY_FLAGS));

  install (klass, GST_PP_PROP_MODEL_INSTANCE_ID,
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
  install (klass, GST_PP_PROP_MAX_SESSIONS,
      g_param_spec_int ("max-sessions", "Maximum sessions",
          "Conversations the engine shared through model-instance-id holds; "
          "0: as many as fit in the memory free when it is made. An element "
          "over the limit fails to start. Without model-instance-id the "
          "engine holds this element's conversation only", 0, 4096,
          DEFAULT_MAX_SESSIONS, READY_FLAGS));

  install (klass, GST_PP_PROP_KV_CACHE_FORMAT,
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
  install (klass, GST_PP_PROP_BATCH_DEADLINE,
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
  install (klass, GST_PP_PROP_ALIGN_FRAMES,
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
  install (klass, GST_PP_PROP_STATS,
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

  install (klass, GST_PP_PROP_STATS_INTERVAL,
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
  install (klass, GST_PP_PROP_PROCESSING_DEADLINE,
      g_param_spec_uint64 ("processing-deadline", "Processing deadline",
          "Time budget (ns) for computing one frame, added to the latency "
          "on top of the 80 ms frame; -1 (the default): automatic, the "
          "engine's measured tick p99 plus a margin (80 ms until a tick is "
          "measured), growing with the load and posting a latency message, "
          "never shrinking within a stream", 0, G_MAXUINT64,
          DEFAULT_PROCESSING_DEADLINE, PLAYING_FLAGS));

  install (klass, GST_PP_PROP_RESET_ON_DISCONT,
      g_param_spec_boolean ("reset-on-discont", "Reset on discont",
          "Start a new conversation (same prompts) at a timestamp "
          "discontinuity instead of only resynchronizing the timestamps",
          DEFAULT_RESET_ON_DISCONT, PLAYING_FLAGS));

  install (klass, GST_PP_PROP_FRAME_MESSAGES,
      g_param_spec_boolean ("frame-messages", "Frame messages",
          "Post a personaplex-frame element message (the frame's 17 tokens "
          "and step time) for every frame", DEFAULT_FRAME_MESSAGES,
          PLAYING_FLAGS));
}

/* Writes @value into the setting of property @id (not stats). */
static void
set_field (GstPersonaplexSettings * s, guint id, const GValue * value)
{
  gpointer field = G_STRUCT_MEMBER_P (s, setting_offset[id]);

  switch (G_TYPE_FUNDAMENTAL (G_VALUE_TYPE (value))) {
    case G_TYPE_STRING:
      g_free (*(gchar **) field);
      *(gchar **) field = g_value_dup_string (value);
      break;
    case G_TYPE_BOOLEAN:
      *(gboolean *) field = g_value_get_boolean (value);
      break;
    case G_TYPE_INT:
      *(gint *) field = g_value_get_int (value);
      break;
    case G_TYPE_UINT:
      *(guint *) field = g_value_get_uint (value);
      break;
    case G_TYPE_UINT64:
      *(guint64 *) field = g_value_get_uint64 (value);
      break;
    case G_TYPE_FLOAT:
      *(gfloat *) field = g_value_get_float (value);
      break;
    case G_TYPE_ENUM:
      *(gint *) field = g_value_get_enum (value);
      break;
    default:
      g_assert_not_reached ();
  }
}

static gboolean
is_setting (guint id)
{
  return id > 0 && id < GST_PP_N_PROPS && setting_offset[id] >= 0;
}

void
gst_pp_settings_init (GstPersonaplexSettings * s)
{
  guint id;

  memset (s, 0, sizeof (*s));
  for (id = 0; id < GST_PP_N_PROPS; id++)
    if (is_setting (id))
      set_field (s, id, g_param_spec_get_default_value (specs[id]));
}

void
gst_pp_settings_clear (GstPersonaplexSettings * s)
{
  guint id;

  for (id = 0; id < GST_PP_N_PROPS; id++)
    if (is_setting (id)
        && G_PARAM_SPEC_VALUE_TYPE (specs[id]) == G_TYPE_STRING)
      g_clear_pointer ((gchar **) G_STRUCT_MEMBER_P (s, setting_offset[id]),
          g_free);
}

gboolean
gst_pp_settings_set (GstPersonaplexSettings * s, guint id,
    const GValue * value, gboolean * latency_changed)
{
  *latency_changed = FALSE;
  if (!is_setting (id))
    return FALSE;
  if (id == GST_PP_PROP_BATCH_DEADLINE) {
    /* part of the latency only with a shared engine */
    *latency_changed = g_value_get_uint64 (value) != s->batch_deadline
        && s->model_instance_id != NULL && s->model_instance_id[0] != '\0';
  } else if (id == GST_PP_PROP_PROCESSING_DEADLINE) {
    *latency_changed = g_value_get_uint64 (value) != s->processing_deadline;
  }
  /* text-prompt-tokens is checked when the element starts: a bad list fails
   * the state change with an error naming the item */
  set_field (s, id, value);
  return TRUE;
}

gboolean
gst_pp_settings_get (const GstPersonaplexSettings * s, guint id,
    GValue * value)
{
  gconstpointer field;

  if (!is_setting (id))
    return FALSE;
  field = G_STRUCT_MEMBER_P (s, setting_offset[id]);
  switch (G_TYPE_FUNDAMENTAL (G_VALUE_TYPE (value))) {
    case G_TYPE_STRING:
      g_value_set_string (value, *(gchar * const *) field);
      break;
    case G_TYPE_BOOLEAN:
      g_value_set_boolean (value, *(const gboolean *) field);
      break;
    case G_TYPE_INT:
      g_value_set_int (value, *(const gint *) field);
      break;
    case G_TYPE_UINT:
      g_value_set_uint (value, *(const guint *) field);
      break;
    case G_TYPE_UINT64:
      g_value_set_uint64 (value, *(const guint64 *) field);
      break;
    case G_TYPE_FLOAT:
      g_value_set_float (value, *(const gfloat *) field);
      break;
    case G_TYPE_ENUM:
      g_value_set_enum (value, *(const gint *) field);
      break;
    default:
      g_assert_not_reached ();
  }
  return TRUE;
}
