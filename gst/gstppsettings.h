/* personaplexduplex: the element's settings (its properties: gstppsettings.c
 * installs them and sets, gets, defaults and frees the settings from one
 * table) and step statistics, the types the element and its stream
 * (gstppstream.c) share. Internal to the plugin. */
#ifndef __GST_PP_SETTINGS_H__
#define __GST_PP_SETTINGS_H__

#include <gst/gst.h>

#include "personaplex.h"

G_BEGIN_DECLS

/* Settings, guarded by the element's object lock. Everything marked
 * MUTABLE_READY is copied into the model/session parameters in
 * READY->PAUSED. */
typedef struct
{
  gchar *model_dir;
  gchar *voice_prompt;
  gboolean voice_normalize;
  gchar *voice_cache_dir;       /* where computed audio voice prompts are cached; NULL: none */
  gchar *text_prompt;
  gchar *text_prompt_tokens;    /* "1,2,3" as set; checked when starting */
  gboolean greedy;
  guint64 seed;
  gfloat temp_audio, temp_text;
  gint topk_audio, topk_text;
  PpxQuantization quantization;
  PpxBackendKind backend;
  gint device;
  gchar *model_instance_id;
  gint max_sessions;            /* of the shared engine; 0: as many as fit */
  PpxKvFormat kv_cache_format;
  GstClockTime batch_deadline;  /* longest wait for the other sessions' frames */
  gboolean align_frames;        /* lead a live stream's frames into the others' cadence */
  guint stats_interval;         /* frames between personaplex-stats, 0: none */
  GstClockTime processing_deadline;     /* GST_CLOCK_TIME_NONE: automatic (gstpplatency.h) */
  gboolean reset_on_discont;
  gboolean frame_messages;
} GstPersonaplexSettings;

/* Step timing since READY->PAUSED, guarded by the element's object lock. */
typedef struct
{
  guint64 frames;
  guint64 overruns;             /* steps longer than one frame (80 ms) */
  gdouble total_step_ms;
  gdouble max_step_ms;
  guint batch_size;             /* sessions stepped in the last tick */
  gdouble tick_ms;              /* wall time of the last tick */
  gdouble batch_wait_ms;        /* how long the last frame might wait for the
                                 * others: batch-deadline and its frame
                                 * alignment's arrival interval; -1: none */
  gdouble drift_silence_ms;     /* silence inserted, input dropped: frame */
  gdouble drift_dropped_ms;     /* alignment kept against a drifting clock */
  GstClockTime latency;         /* own latency last answered to a LATENCY query, 0: none yet */
  GstClockTime last_pts;
  GstClockTime last_running_time;
} GstPersonaplexStats;

/* The element's property ids, in the order they are installed. */
enum
{
  GST_PP_PROP_0,
  GST_PP_PROP_MODEL_DIR,
  GST_PP_PROP_VOICE_PROMPT,
  GST_PP_PROP_VOICE_NORMALIZE,
  GST_PP_PROP_VOICE_CACHE_DIR,
  GST_PP_PROP_TEXT_PROMPT,
  GST_PP_PROP_TEXT_PROMPT_TOKENS,
  GST_PP_PROP_GREEDY,
  GST_PP_PROP_SEED,
  GST_PP_PROP_TEMP_AUDIO,
  GST_PP_PROP_TEMP_TEXT,
  GST_PP_PROP_TOPK_AUDIO,
  GST_PP_PROP_TOPK_TEXT,
  GST_PP_PROP_QUANTIZATION,
  GST_PP_PROP_BACKEND,
  GST_PP_PROP_DEVICE,
  GST_PP_PROP_MODEL_INSTANCE_ID,
  GST_PP_PROP_MAX_SESSIONS,
  GST_PP_PROP_KV_CACHE_FORMAT,
  GST_PP_PROP_BATCH_DEADLINE,
  GST_PP_PROP_ALIGN_FRAMES,
  GST_PP_PROP_STATS,            /* the stream's statistics, not a setting */
  GST_PP_PROP_STATS_INTERVAL,
  GST_PP_PROP_PROCESSING_DEADLINE,
  GST_PP_PROP_RESET_ON_DISCONT,
  GST_PP_PROP_FRAME_MESSAGES,
  GST_PP_PROP_TICK_HISTORY,     /* the engine's live ticks, not a setting */
  GST_PP_N_PROPS
};

/* Installs every property of the element on @klass (class_init). */
void gst_pp_settings_install (GObjectClass * klass);

/* Every setting at its property's default (instance init, after
 * gst_pp_settings_install). */
void gst_pp_settings_init (GstPersonaplexSettings * s);

/* Frees the strings (finalize). */
void gst_pp_settings_clear (GstPersonaplexSettings * s);

/* Sets the setting of property @id from @value (object lock held); FALSE
 * when @id is not a setting. @latency_changed: the element's latency
 * changed (a latency message is due). */
gboolean gst_pp_settings_set (GstPersonaplexSettings * s, guint id,
    const GValue * value, gboolean * latency_changed);

/* Reads the setting of property @id into @value (object lock held); FALSE
 * when @id is not a setting. */
gboolean gst_pp_settings_get (const GstPersonaplexSettings * s, guint id,
    GValue * value);

G_END_DECLS

#endif /* __GST_PP_SETTINGS_H__ */
