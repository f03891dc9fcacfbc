/* Decodes any audio file GStreamer can play into mono 32-bit float samples at one rate:
 * uridecodebin ! audioconvert ! audioresample ! audio/x-raw,format=F32LE,rate=R,channels=1 ! appsink.
 * The caller has run gst_init(). */
#ifndef PPX_DECODE_AUDIO_H
#define PPX_DECODE_AUDIO_H

#include <glib.h>

G_BEGIN_DECLS

/* Returns g_malloc'd samples (*n_samples may be 0 for an audio file without samples); errors name the
 * file: missing, not decodable, or without an audio stream. */
float *decode_audio_file (const char *path, int rate, gsize *n_samples, GError **error);

G_END_DECLS
#endif
