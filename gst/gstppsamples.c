/* personaplexduplex: conversion between the pads' sample formats and the
 * model's f32 frames (gstppsamples.h). */
#include "gstppsamples.h"

#include <math.h>

void
gst_pp_samples_to_f32 (GstAudioFormat format, const guint8 * raw, guint n,
    gfloat * out)
{
  guint i;

  if (format == GST_AUDIO_FORMAT_F32LE) {
    for (i = 0; i < n; i++)
      out[i] = GST_READ_FLOAT_LE (raw + 4 * i);
  } else {
    for (i = 0; i < n; i++)
      out[i] = (gint16) GST_READ_UINT16_LE (raw + 2 * i) / 32768.0f;
  }
}

void
gst_pp_f32_to_samples (GstAudioFormat format, const gfloat * in, guint n,
    guint8 * raw)
{
  guint i;

  if (format == GST_AUDIO_FORMAT_F32LE) {
    for (i = 0; i < n; i++)
      GST_WRITE_FLOAT_LE (raw + 4 * i, in[i]);
  } else {
    for (i = 0; i < n; i++) {
      gfloat x = isfinite (in[i]) ? in[i] * 32768.0f : 0.0f;
      glong v = lrintf (CLAMP (x, -32768.0f, 32767.0f));

      GST_WRITE_UINT16_LE (raw + 2 * i, (guint16) (gint16) v);
    }
  }
}
