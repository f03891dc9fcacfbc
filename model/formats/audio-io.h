/* Audio files for the library (libsndfile): read any format libsndfile reads as 24 kHz mono f32
 * (channel 0, resampled with libsamplerate when needed); write 32-bit float WAV. */
#ifndef PPX_AUDIO_IO_H
#define PPX_AUDIO_IO_H

#include "ppx-common.h"

G_BEGIN_DECLS

/* Returns g_malloc'd samples; NaN/Inf samples are an error naming the file. */
float *ppx_audio_read (const char *path, int target_rate, gsize *n_samples, GError **error);
gboolean ppx_audio_write_f32 (const char *path, const float *pcm, gsize n, int rate, GError **error);
/* Gain that brings the integrated loudness (EBU R128 / BS.1770) to `target_lufs`; 1 for silence. */
gboolean ppx_audio_loudness_gain (const float *pcm, gsize n, int rate, double target_lufs, double *gain,
                                  GError **error);

G_END_DECLS
#endif
