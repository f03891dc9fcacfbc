/* The `personaplex` GStreamer plugin: registers personaplexduplex. */
#include "gstpersonaplexduplex.h"

static gboolean
plugin_init (GstPlugin * plugin)
{
  return GST_ELEMENT_REGISTER (personaplexduplex, plugin);
}

GST_PLUGIN_DEFINE (GST_VERSION_MAJOR, GST_VERSION_MINOR, personaplex,
    "PersonaPlex full-duplex speech-to-speech conversation",
    plugin_init, PPX_PLUGIN_VERSION, "MIT", "personaplex-gst",
    "https://github.com/personaplex-gst/personaplex-gst")
