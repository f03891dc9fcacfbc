/* personaplexduplex: the structures of its element messages and of the
 * `stats` property. Field names and types are a public contract, listed in
 * docs/element.md; change them only together with that file. */
#ifndef __GST_PP_MESSAGES_H__
#define __GST_PP_MESSAGES_H__

#include "gstppmodelpool.h"
#include "gstppsettings.h"

G_BEGIN_DECLS

#define GST_PP_STATS_NAME "personaplex-stats"
#define GST_PP_TEXT_NAME "personaplex-text"
#define GST_PP_FRAME_NAME "personaplex-frame"

/* Takes into @s at @field a GstValueArray of the @n values at @values, of
 * @type G_TYPE_UINT, G_TYPE_UINT64 or G_TYPE_DOUBLE. */
void gst_pp_structure_take_array (GstStructure * s, const gchar * field,
    GType type, gconstpointer values, guint n);

/* Call with the object lock held; @model may be NULL (not loaded). */
GstStructure *gst_pp_stats_structure_new (const GstPersonaplexStats * stats,
    const GstPpModelHandle * model);

/* Where in the stream one output frame sits. */
typedef struct
{
  guint64 frame;                /* index since the conversation started */
  GstClockTime pts;
  GstClockTime duration;
  GstClockTime running_time;
  GstClockTime stream_time;
} GstPpFramePosition;

GstMessage *gst_pp_text_message_new (GstObject * src, const gchar * text,
    const GstPpFramePosition * pos);

GstMessage *gst_pp_frame_message_new (GstObject * src,
    const PpxFrameResult * res, const GstPpFramePosition * pos);

G_END_DECLS

#endif /* __GST_PP_MESSAGES_H__ */
