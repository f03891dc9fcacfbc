/* The golden conversation through the element, in a real pipeline:
 *
 *   appsrc (golden user_pcm, odd chunk sizes) ! personaplexduplex greedy=true
 *       voice-prompt=VOICE.wav voice-normalize=false text-prompt-tokens=...
 *       frame-messages=true ! appsink      (text_src ! queue ! fakesink)
 *
 * must reproduce the reference's lm_run_pcm (max abs err 1e-4, truncated to
 * the input length) and lm_run_out_tokens exactly (from the
 * personaplex-frame messages). Then the same with 16-bit samples: user_pcm
 * rounded to S16LE, pushed in chunks of an odd number of bytes (samples cut
 * in two), and text_src straight into a fakesink (no queue): the same tokens
 * exactly, and the reference's PCM to 16-bit rounding (clipped to 16-bit
 * full scale where the reference exceeds it). Skips (77) without the golden
 * data. */
#include "test-element-util.h"

#include <gst/app/app.h>
#include <sndfile.h>

#include "safetensors.h"

#define CHUNK 1001              /* not a divisor of the frame */
#define S16_CHUNK_BYTES 2001    /* odd: samples cut in two */
#define PCM_TOLERANCE 1e-4
/* 16-bit output: half a step of rounding, plus the float tolerance */
#define S16_TOLERANCE (0.5 / 32768 + PCM_TOLERANCE)

static void
write_wav (const char *path, const float *pcm, gint64 n)
{
  SF_INFO info = { 0 };
  SNDFILE *f;

  info.samplerate = PPX_RATE;
  info.channels = 1;
  info.format = SF_FORMAT_WAV | SF_FORMAT_FLOAT;
  f = sf_open (path, SFM_WRITE, &info);
  g_assert_nonnull (f);
  g_assert_cmpint (sf_writef_float (f, pcm, n), ==, n);
  sf_close (f);
}

static const PpxStTensor *
need (PpxSafetensors * st, const char *name)
{
  const PpxStTensor *t = ppx_st_find (st, name);

  if (!t)
    g_error ("golden.safetensors has no %s", name);
  return t;
}

typedef struct
{
  const char *model_dir, *voice_wav, *tokens;
  const float *user;
  gint64 n_samples;
} GoldenInput;

/* Runs the conversation with the input as F32LE or S16LE; returns the
 * agent's audio (as floats) and fills @frames with the 17 tokens of each
 * frame. */
static GArray *
run_pipeline (const GoldenInput * in, gboolean s16, GArray * frames)
{
  g_autoptr (GError) err = NULL;
  GArray *out = g_array_new (FALSE, FALSE, sizeof (float));
  GstElement *pipeline, *src, *pp, *sink;
  GstBus *bus;
  GstMessage *msg;
  GstCaps *caps;
  gboolean eos = FALSE;
  gint64 done;

  /* with 16 bits, text_src goes to a sink directly (no queue) */
  pipeline = gst_parse_launch ("appsrc name=src format=time ! "
      "personaplexduplex name=pp greedy=true voice-normalize=false "
      "kv-cache-format=f32 frame-messages=true stats-interval=0 ! "
      "appsink name=sink sync=false "
      "wait-on-eos=false ", &err);
  g_assert_no_error (err);
  {
    GstElement *pp0 = gst_bin_get_by_name (GST_BIN (pipeline), "pp");
    GstElement *tsink = gst_element_factory_make ("fakesink", NULL);

    g_object_set (tsink, "sync", FALSE, NULL);
    gst_bin_add (GST_BIN (pipeline), tsink);
    if (s16) {
      g_assert_true (gst_element_link_pads (pp0, "text_src", tsink, NULL));
    } else {
      GstElement *queue = gst_element_factory_make ("queue", NULL);

      gst_bin_add (GST_BIN (pipeline), queue);
      g_assert_true (gst_element_link_pads (pp0, "text_src", queue, NULL));
      g_assert_true (gst_element_link (queue, tsink));
    }
    gst_object_unref (pp0);
  }
  src = gst_bin_get_by_name (GST_BIN (pipeline), "src");
  pp = gst_bin_get_by_name (GST_BIN (pipeline), "pp");
  sink = gst_bin_get_by_name (GST_BIN (pipeline), "sink");
  g_object_set (pp, "model-dir", in->model_dir, "voice-prompt", in->voice_wav,
      "text-prompt-tokens", in->tokens, NULL);
  caps = gst_caps_from_string (s16 ? PPX_S16_CAPS : PPX_F32_CAPS);
  g_object_set (src, "caps", caps, NULL);
  gst_caps_unref (caps);
  g_assert_cmpint (gst_element_set_state (pipeline, GST_STATE_PLAYING), !=,
      GST_STATE_CHANGE_FAILURE);

  if (s16) {
    gint16 *pcm = g_new (gint16, in->n_samples);
    gsize total = in->n_samples * 2;

    for (done = 0; done < in->n_samples; done++) {
      float x = CLAMP (in->user[done] * 32768.0f, -32768.0f, 32767.0f);

      pcm[done] = (gint16) lrintf (x);
    }
    for (done = 0; done < (gint64) total; done += S16_CHUNK_BYTES) {
      gsize n = MIN (S16_CHUNK_BYTES, total - done);

      g_assert_cmpint (gst_app_src_push_buffer (GST_APP_SRC (src),
              gst_buffer_new_memdup ((const guint8 *) pcm + done, n)), ==,
          GST_FLOW_OK);
    }
    g_free (pcm);
  } else {
    for (done = 0; done < in->n_samples; done += CHUNK) {
      guint n = MIN (CHUNK, in->n_samples - done);
      GstBuffer *buf = gst_buffer_new_memdup (in->user + done,
          n * sizeof (float));

      GST_BUFFER_PTS (buf) = gst_util_uint64_scale_int (done, GST_SECOND,
          PPX_RATE);
      GST_BUFFER_DURATION (buf) = gst_util_uint64_scale_int (done + n,
          GST_SECOND, PPX_RATE) - GST_BUFFER_PTS (buf);
      g_assert_cmpint (gst_app_src_push_buffer (GST_APP_SRC (src), buf), ==,
          GST_FLOW_OK);
    }
  }
  gst_app_src_end_of_stream (GST_APP_SRC (src));

  bus = gst_element_get_bus (pipeline);
  while (!eos) {
    msg = gst_bus_timed_pop (bus, 120 * GST_SECOND);
    if (!msg)
      g_error ("timeout waiting for EOS (%s input)", s16 ? "S16LE" : "F32LE");
    switch (GST_MESSAGE_TYPE (msg)) {
      case GST_MESSAGE_ERROR:{
        gchar *debug = NULL;

        gst_message_parse_error (msg, &err, &debug);
        g_error ("pipeline error: %s (%s)", err->message, debug);
        break;
      }
      case GST_MESSAGE_EOS:
        eos = TRUE;
        break;
      case GST_MESSAGE_ELEMENT:
        if (gst_message_has_name (msg, "personaplex-frame")) {
          const GValue *v = gst_structure_get_value
              (gst_message_get_structure (msg), "tokens");
          int row[17];
          guint k;

          g_assert_cmpint (gst_value_array_get_size (v), ==, 17);
          for (k = 0; k < 17; k++)
            row[k] = g_value_get_int (gst_value_array_get_value (v, k));
          g_array_append_vals (frames, row, 1);
        }
        break;
      default:
        break;
    }
    gst_message_unref (msg);
  }

  {
    GstSample *sample;

    while ((sample = gst_app_sink_try_pull_sample (GST_APP_SINK (sink), 0))) {
      GstBuffer *buf = gst_sample_get_buffer (sample);
      GstMapInfo map;
      gsize k;

      gst_buffer_map (buf, &map, GST_MAP_READ);
      if (s16) {
        for (k = 0; k < map.size / 2; k++) {
          float x = ((const gint16 *) map.data)[k] / 32768.0f;

          g_array_append_val (out, x);
        }
      } else {
        g_array_append_vals (out, map.data, map.size / sizeof (float));
      }
      gst_buffer_unmap (buf, &map);
      gst_sample_unref (sample);
    }
  }

  gst_element_set_state (pipeline, GST_STATE_NULL);
  gst_object_unref (bus);
  gst_object_unref (src);
  gst_object_unref (pp);
  gst_object_unref (sink);
  gst_object_unref (pipeline);
  return out;
}

/* Compares one run with the reference; returns the max abs PCM error. With
 * 16 bits, the reference is first clipped to 16-bit full scale. */
static double
check_run (const char *what, GArray * out, GArray * frames,
    const PpxStTensor * pcm_t, const PpxStTensor * tok_t, gint64 S,
    gboolean s16)
{
  gint64 T = tok_t->shape[0], token_mismatches = 0, i;
  double max_err = 0;

  /* audio: exactly as long as the input, equal to the reference */
  g_assert_cmpint (out->len, ==, S);
  g_assert_cmpint (pcm_t->shape[0], >=, S);
  for (i = 0; i < S; i++) {
    float want = ((const float *) pcm_t->data)[i];
    double e;

    if (s16)
      want = CLAMP (want, -1.0f, 32767.0f / 32768.0f);
    e = fabs (g_array_index (out, float, i) - want);
    max_err = MAX (max_err, e);
  }
  /* tokens: one row per frame, equal to the reference */
  g_assert_cmpint (frames->len, ==, T);
  for (i = 0; i < T * 17; i++) {
    int got = ((int *) frames->data)[i];
    int64_t want = ((const int64_t *) tok_t->data)[i];

    if (got != want) {
      if (token_mismatches < 10)
        g_printerr ("%s: frame %" G_GINT64_FORMAT " token %" G_GINT64_FORMAT
            ": got %d expected %" G_GINT64_FORMAT "\n", what, i / 17, i % 17,
            got, want);
      token_mismatches++;
    }
  }
  g_printerr ("element golden (%s): %" G_GINT64_FORMAT " frames, %"
      G_GINT64_FORMAT " token mismatches, PCM max abs err %.3g\n", what, T,
      token_mismatches, max_err);
  g_assert_cmpint (token_mismatches, ==, 0);
  return max_err;
}

int
main (int argc, char **argv)
{
  const char *golden = ppx_test_golden_or_skip ();
  g_autofree char *golden_st = g_build_filename (golden, "golden.safetensors",
      NULL);
  g_autoptr (GError) err = NULL;
  PpxSafetensors *st;
  const PpxStTensor *user_t, *voice_t, *pcm_t, *tok_t;
  char *model_dir, *tmp, *voice_wav, *tokens;
  GArray *out, *frames = g_array_new (FALSE, FALSE, sizeof (int) * 17);
  GoldenInput in;
  gint64 S, T;

  gst_init (&argc, &argv);
  st = ppx_st_open (golden_st, &err);
  g_assert_no_error (err);
  user_t = need (st, "user_pcm");
  voice_t = need (st, "voice_pcm");
  pcm_t = need (st, "lm_run_pcm");
  tok_t = need (st, "lm_run_out_tokens");
  S = user_t->shape[0];
  T = tok_t->shape[0];
  g_assert_cmpint (T, ==, (S + PPX_FRAME - 1) / PPX_FRAME);
  g_assert_cmpint (tok_t->shape[1], ==, 17);

  model_dir = ppx_test_golden_model_dir (golden);
  tmp = g_dir_make_tmp ("ppx-golden-voice-XXXXXX", &err);
  g_assert_no_error (err);
  voice_wav = g_build_filename (tmp, "voice.wav", NULL);
  write_wav (voice_wav, voice_t->data, voice_t->shape[0]);
  tokens = ppx_test_golden_prompt_tokens (golden);
  in.model_dir = model_dir;
  in.voice_wav = voice_wav;
  in.tokens = tokens;
  in.user = user_t->data;
  in.n_samples = S;

  out = run_pipeline (&in, FALSE, frames);
  g_assert_cmpfloat (check_run ("F32LE", out, frames, pcm_t, tok_t, S, FALSE),
      <=, PCM_TOLERANCE);
  g_array_unref (out);

  g_array_set_size (frames, 0);
  out = run_pipeline (&in, TRUE, frames);
  g_assert_cmpfloat (check_run ("S16LE", out, frames, pcm_t, tok_t, S, TRUE),
      <=, S16_TOLERANCE);
  g_array_unref (out);

  g_array_unref (frames);
  ppx_st_close (st);
  ppx_test_remove_tree (tmp);
  ppx_test_remove_tree (model_dir);
  g_free (tmp);
  g_free (model_dir);
  g_free (voice_wav);
  g_free (tokens);
  return 0;
}
