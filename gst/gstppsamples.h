/* personaplexduplex: sample conversion between the pads' formats (F32LE,
 * S16LE, mono) and the f32 frames the model steps. Pure functions, internal
 * to the plugin. */
#ifndef __GST_PP_SAMPLES_H__
#define __GST_PP_SAMPLES_H__

#include <gst/audio/audio.h>

G_BEGIN_DECLS

/* @n samples of @format (F32LE, else S16LE) at @raw to f32 in [-1, 1) for
 * S16LE. */
void gst_pp_samples_to_f32 (GstAudioFormat format, const guint8 * raw,
    guint n, gfloat * out);

/* @n f32 samples to @format at @raw; to S16LE scaled by 32768, rounded,
 * clamped, and a non-finite sample written as 0. */
void gst_pp_f32_to_samples (GstAudioFormat format, const gfloat * in,
    guint n, guint8 * raw);

G_END_DECLS

#endif /* __GST_PP_SAMPLES_H__ */
