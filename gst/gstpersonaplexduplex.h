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
#include "gstppsettings.h"
#include "gstppstream.h"
#include "personaplex.h"

G_BEGIN_DECLS

#define GST_TYPE_PERSONAPLEX_DUPLEX (gst_personaplex_duplex_get_type ())
G_DECLARE_FINAL_TYPE (GstPersonaplexDuplex, gst_personaplex_duplex,
    GST, PERSONAPLEX_DUPLEX, GstElement);

GST_ELEMENT_REGISTER_DECLARE (personaplexduplex);

GST_DEBUG_CATEGORY_EXTERN (gst_personaplex_duplex_debug);

struct _GstPersonaplexDuplex
{
  GstElement parent;

  GstPersonaplexSettings settings;

  /* Model (a handle of the shared pool) and session: created in
   * READY->PAUSED, freed in PAUSED->READY; `model` is set and cleared under
   * the object lock. The session is a slot of the (maybe shared) engine,
   * stepped by the stream through the engine's ticker. */
  GstPpModelHandle *model;
  PpxSession *session;

  /* The pads and everything that streams through them (gstppstream.c). */
  GstPpStream stream;
};

G_END_DECLS

#endif /* __GST_PERSONAPLEX_DUPLEX_H__ */
