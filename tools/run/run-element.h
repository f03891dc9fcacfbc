/* personaplex-run's personaplexduplex element: the program carries the plugin (its sources are built in
 * and registered statically), so it always runs the element of its own build, with no plugin path to
 * set; and the run's settings become the element's properties. */
#ifndef PPX_RUN_ELEMENT_H
#define PPX_RUN_ELEMENT_H

#include <gst/gst.h>

#include "run-core.h"

G_BEGIN_DECLS

#define RUN_ELEMENT_NAME "personaplexduplex"

/* Registers the built-in plugin; call once after gst_init(). */
gboolean run_element_register (GError **error);

/* Sets every property of a personaplexduplex from the settings (frame-messages on). A value the element
 * does not accept, or an option it has no property for, is an error naming the option; nothing is
 * loaded yet. */
gboolean run_element_configure (GstElement *element, const RunSettings *settings, GError **error);

G_END_DECLS
#endif
