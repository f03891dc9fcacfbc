/* personaplex-live-bench's other calls (--calls N): N - 1 live pipelines like the measured one (its source,
 * format and element settings, model-instance-id included, so all share one engine), started before it, so
 * that the measured call joins an engine under load. Each renders to a clock-synced fakesink and has its
 * latency messages handled as gst-launch-1.0 does (gst_bin_recalculate_latency), by a bus watch on the
 * default main context. */
#ifndef PPX_LIVE_CALLS_H
#define PPX_LIVE_CALLS_H

#include <gst/gst.h>

G_BEGIN_DECLS

typedef struct LiveCalls LiveCalls;

/* Sets the element's properties as the measured call's are set (its own messages aside). */
typedef gboolean (*LiveCallsConfigure) (GstElement *pp, gpointer data, GError **error);

/* Builds @n pipelines "@source ! audioconvert ! audioresample ! audio/x-raw,format=@format,rate=24000,
 * channels=1 ! queue ! personaplexduplex ! fakesink sync=true" (text to a fakesink) and sets them PLAYING,
 * one after the other; NULL and @error when one cannot be built, configured or started. */
LiveCalls *live_calls_start (guint n, const char *source, const char *format, LiveCallsConfigure configure,
                             gpointer data, GError **error);
/* The first error one of them posted (owned by @calls), or NULL. */
const char *live_calls_error (LiveCalls *calls);
/* Stops and frees them (NULL: nothing). */
void live_calls_free (LiveCalls *calls);

G_END_DECLS

#endif
