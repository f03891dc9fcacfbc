/* personaplexduplex: the element's settings (its properties) and step
 * statistics, the types the element and its stream (gstppstream.c) share.
 * Internal to the plugin. */
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
  GstClockTime latency;         /* own latency last answered to a LATENCY query, 0: none yet */
  GstClockTime last_pts;
  GstClockTime last_running_time;
} GstPersonaplexStats;

G_END_DECLS

#endif /* __GST_PP_SETTINGS_H__ */
