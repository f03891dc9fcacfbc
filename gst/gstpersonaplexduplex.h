/* personaplexduplex: full-duplex speech-to-speech conversation element.
 *
 * One 80 ms frame of user audio in, one 80 ms frame of agent audio out, plus
 * the text piece of the frame on text_src. See docs/element.md. */
#ifndef __GST_PERSONAPLEX_DUPLEX_H__
#define __GST_PERSONAPLEX_DUPLEX_H__

#include <gst/gst.h>
#include <gst/audio/audio.h>
#include <gst/base/base.h>

#include "gstppmodelpool.h"
#include "gstppticker.h"
#include "personaplex.h"

G_BEGIN_DECLS

#define GST_TYPE_PERSONAPLEX_DUPLEX (gst_personaplex_duplex_get_type ())
G_DECLARE_FINAL_TYPE (GstPersonaplexDuplex, gst_personaplex_duplex,
    GST, PERSONAPLEX_DUPLEX, GstElement);

GST_ELEMENT_REGISTER_DECLARE (personaplexduplex);

GST_DEBUG_CATEGORY_EXTERN (gst_personaplex_duplex_debug);

/* Settings, guarded by the object lock. Everything marked MUTABLE_READY is
 * copied into the model/session parameters in READY->PAUSED. */
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
  GstClockTime processing_deadline;
  gboolean reset_on_discont;
  gboolean frame_messages;
} GstPersonaplexSettings;

/* Step timing since READY->PAUSED, guarded by the object lock. */
typedef struct
{
  guint64 frames;
  guint64 overruns;             /* steps longer than one frame (80 ms) */
  gdouble total_step_ms;
  gdouble max_step_ms;
  guint batch_size;             /* sessions stepped in the last tick */
  gdouble tick_ms;              /* wall time of the last tick */
  GstClockTime last_pts;
  GstClockTime last_running_time;
} GstPersonaplexStats;

struct _GstPersonaplexDuplex
{
  GstElement parent;

  GstPad *sinkpad;
  GstPad *srcpad;
  GstPad *textpad;

  GstPersonaplexSettings settings;
  GstPersonaplexStats stats;

  /* Model, engine, session: created in READY->PAUSED, freed in
   * PAUSED->READY. The session is a slot of the (maybe shared) engine and
   * is stepped through the engine's ticker (gstppticker.c) by `member`,
   * only with the sink stream lock held (flushing is set from any thread). */
  GstPpModelHandle *model;
  PpxSession *session;
  GstPpTickerMember *member;    /* set and cleared under the object lock */
  gint frame_size;              /* samples per frame (1920) */

  /* Streaming state, guarded by the sink pad's stream lock. */
  GstFlowCombiner *flow_combiner;
  GstAudioInfo info;
  gboolean have_caps;
  GstSegment segment;
  GstAdapter *adapter;
  GstAudioStreamAlign *align;
  GstClockTime resync_pts;      /* PTS of the first sample since a resync */
  guint64 samples_since_resync; /* samples already stepped since then */
  guint lead_samples;           /* silence before the timeline's first frame (frame alignment) */
  gboolean next_is_discont;
  guint64 conversation_frame;   /* frames since the prompts (reset on flush) */
  guint frames_since_stats;
  gfloat *in_frame;
  gfloat *out_frame;
  guint8 *raw_frame;

  /* text_src's own streaming thread (gstpptextpad.c): what waits for it,
   * guarded by text_lock. */
  GMutex text_lock;
  GCond text_cond;
  GQueue text_items;            /* GstBuffer / serialized GstEvent */
  gboolean text_flushing;
  gboolean text_warned;
  GstFlowReturn text_flow;      /* the peer's answer to the last buffer */
  gboolean text_caps_queued;    /* caps queued for this stream (sink stream lock) */

  /* Upstream SEEKs arrive on both source pads; forward each seqnum once. */
  guint32 last_seek_seqnum;
};

/* Sets the ticker member flushing (any thread; nothing before the model is
 * loaded). Internal to the plugin. */
void gst_pp_duplex_set_flushing (GstPersonaplexDuplex * self,
    gboolean flushing);

G_END_DECLS

#endif /* __GST_PERSONAPLEX_DUPLEX_H__ */
