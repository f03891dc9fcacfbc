#include "audio-io.h"

#include <ebur128.h>
#include <math.h>
#include <samplerate.h>
#include <sndfile.h>

float *
ppx_audio_read (const char *path, int target_rate, gsize *n_samples, GError **error)
{
  SF_INFO info = {0};
  SNDFILE *f = sf_open (path, SFM_READ, &info);
  if (!f) {
    g_set_error (error, PPX_ERROR, g_file_test (path, G_FILE_TEST_EXISTS) ? PPX_ERROR_FORMAT : PPX_ERROR_MISSING,
                 "%s: cannot read audio: %s", path, sf_strerror (NULL));
    return NULL;
  }
  if (info.channels < 1 || info.samplerate < 1000 || info.frames < 0 || info.frames > (sf_count_t) 1 << 31) {
    g_set_error (error, PPX_ERROR, PPX_ERROR_FORMAT, "%s: unsupported audio (%d channels, %d Hz)", path,
                 info.channels, info.samplerate);
    sf_close (f);
    return NULL;
  }
  gsize frames = (gsize) info.frames;
  float *inter = g_try_new (float, MAX (frames, 1) * info.channels);
  if (!inter) {
    g_set_error (error, PPX_ERROR, PPX_ERROR_NOMEM, "%s: out of memory reading audio", path);
    sf_close (f);
    return NULL;
  }
  sf_count_t got = sf_readf_float (f, inter, (sf_count_t) frames);
  sf_close (f);
  frames = got > 0 ? (gsize) got : 0;
  float *mono = g_new (float, MAX (frames, 1));
  for (gsize i = 0; i < frames; i++) {
    mono[i] = inter[i * info.channels]; /* channel 0, as the reference */
    if (!isfinite (mono[i])) {
      g_set_error (error, PPX_ERROR, PPX_ERROR_FORMAT, "%s: sample %" G_GSIZE_FORMAT " is not a finite number", path,
                   i);
      g_free (inter);
      g_free (mono);
      return NULL;
    }
  }
  g_free (inter);
  if (info.samplerate == target_rate || frames == 0) {
    *n_samples = frames;
    return mono;
  }
  double ratio = (double) target_rate / info.samplerate;
  gsize out_n = (gsize) ceil (frames * ratio);
  float *out = g_new0 (float, MAX (out_n, 1));
  SRC_DATA d = {.data_in = mono, .data_out = out, .input_frames = (long) frames, .output_frames = (long) out_n,
                .src_ratio = ratio, .end_of_input = 1};
  int rc = src_simple (&d, SRC_SINC_BEST_QUALITY, 1);
  g_free (mono);
  if (rc != 0) {
    g_set_error (error, PPX_ERROR, PPX_ERROR_FORMAT, "%s: resampling %d Hz -> %d Hz failed: %s", path,
                 info.samplerate, target_rate, src_strerror (rc));
    g_free (out);
    return NULL;
  }
  *n_samples = (gsize) d.output_frames_gen;
  return out;
}

gboolean
ppx_audio_write_f32 (const char *path, const float *pcm, gsize n, int rate, GError **error)
{
  SF_INFO info = {.samplerate = rate, .channels = 1, .format = SF_FORMAT_WAV | SF_FORMAT_FLOAT};
  SNDFILE *f = sf_open (path, SFM_WRITE, &info);
  if (!f) {
    g_set_error (error, PPX_ERROR, PPX_ERROR_IO, "%s: cannot write: %s", path, sf_strerror (NULL));
    return FALSE;
  }
  sf_count_t w = sf_writef_float (f, pcm, (sf_count_t) n);
  int rc = sf_close (f);
  if (w != (sf_count_t) n || rc != 0) {
    g_set_error (error, PPX_ERROR, PPX_ERROR_IO, "%s: write failed", path);
    return FALSE;
  }
  return TRUE;
}

gboolean
ppx_audio_loudness_gain (const float *pcm, gsize n, int rate, double target_lufs, double *gain, GError **error)
{
  ebur128_state *st = ebur128_init (1, (unsigned long) rate, EBUR128_MODE_I);
  if (!st) {
    g_set_error (error, PPX_ERROR, PPX_ERROR_NOMEM, "libebur128: cannot create a loudness meter");
    return FALSE;
  }
  double lufs = -HUGE_VAL;
  int rc = ebur128_add_frames_float (st, pcm, n);
  if (rc == EBUR128_SUCCESS)
    rc = ebur128_loudness_global (st, &lufs);
  ebur128_destroy (&st);
  if (rc != EBUR128_SUCCESS) {
    g_set_error (error, PPX_ERROR, PPX_ERROR_INVALID, "libebur128: loudness measurement failed (%d)", rc);
    return FALSE;
  }
  *gain = isfinite (lufs) ? pow (10.0, (target_lufs - lufs) / 20.0) : 1.0;
  return TRUE;
}
