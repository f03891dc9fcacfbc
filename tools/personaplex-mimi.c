/* personaplex-mimi: the streaming Mimi codec on its own.
 *
 *   personaplex-mimi encode --model-dir DIR --input IN.wav --output CODES.json
 *   personaplex-mimi decode --model-dir DIR --input CODES.json --output OUT.wav
 *
 * Loads only DIR/config.json and the Mimi checkpoint. encode reads any audio libsndfile reads (channel 0,
 * resampled to 24 kHz), cuts it into 80 ms frames (the last one zero-padded) and writes one row of codes
 * per frame; decode writes every decoded frame as a 32-bit float 24 kHz mono WAV. Both run the codec
 * streaming from a fresh state, frame by frame, as the conversation does. See docs/tools.md. */
#include <stdio.h>

#include "audio-io.h"
#include "backend.h"
#include "codes-json.h"
#include "config.h"
#include "mimi.h"
#include "personaplex.h"
#include "tool-fail.h"

#define PROG "personaplex-mimi"

typedef struct {
  PpxConfig cfg;
  PpxSafetensors *st;
  PpxBackend *be;
  PpxMimi *mimi;
  PpxMimiState *state;
} Codec;

static void
codec_clear (Codec *c)
{
  ppx_mimi_state_free (c->state);
  ppx_mimi_free (c->mimi);
  ppx_backend_free (c->be);
  ppx_st_close (c->st);
}

/* The configuration alone: cheap, and enough to validate the inputs before the weights are loaded. */
static gboolean
load_config (const char *model_dir, PpxConfig *cfg, GError **error)
{
  if (!g_file_test (model_dir, G_FILE_TEST_IS_DIR)) {
    g_set_error (error, PPX_ERROR, PPX_ERROR_MISSING, "%s: model directory does not exist", model_dir);
    return FALSE;
  }
  return ppx_config_load_dir (cfg, model_dir, error);
}

static gboolean
codec_load (Codec *c, const char *model_dir, GError **error)
{
  g_autofree char *path = ppx_model_dir_mimi_path (model_dir);
  return (c->st = ppx_st_open (path, error)) && (c->be = ppx_backend_cpu_new (0, error)) &&
         (c->mimi = ppx_mimi_load (c->be, &c->cfg.mimi, c->st, error)) &&
         (c->state = ppx_mimi_state_new (c->mimi, error));
}

/* Streaming encode from a fresh state: one row of codes per frame, the last frame zero-padded. */
static int *
encode_frames (Codec *c, const float *pcm, gsize n, gsize *n_frames)
{
  const int fs = c->cfg.mimi.frame_size, nq = c->cfg.mimi.num_codebooks;
  *n_frames = (n + fs - 1) / fs;
  int *codes = g_new (int, MAX (*n_frames * nq, 1));
  g_autofree float *frame = g_new (float, fs);
  for (gsize t = 0; t < *n_frames; t++) {
    gsize have = MIN ((gsize) fs, n - t * fs);
    memcpy (frame, pcm + t * fs, have * sizeof (float));
    memset (frame + have, 0, (fs - have) * sizeof (float));
    ppx_mimi_encode_host (c->state, frame, codes + t * nq, NULL);
  }
  return codes;
}

/* Streaming decode from a fresh state: frame_size samples per row. */
static float *
decode_frames (Codec *c, const int *codes, gsize n_frames)
{
  const int fs = c->cfg.mimi.frame_size, nq = c->cfg.mimi.num_codebooks;
  float *pcm = g_new (float, MAX (n_frames * fs, 1));
  for (gsize t = 0; t < n_frames; t++)
    ppx_mimi_decode_host (c->state, codes + t * nq, pcm + t * fs);
  return pcm;
}

/* One command from a fresh codec: the configuration, the input (read before the weights load, so that a bad
 * one fails fast), the codec, then the frames encoded to codes or decoded to audio, written to output. */
static gboolean
run (gboolean encode, const char *model_dir, const char *input, const char *output, GError **error)
{
  Codec c = {0};
  const PpxMimiConfig *m = &c.cfg.mimi;
  g_autofree float *pcm = NULL;
  g_autofree int *codes = NULL;
  gsize n = 0, n_frames = 0;
  gboolean ok = load_config (model_dir, &c.cfg, error);
  if (ok && encode)
    ok = (pcm = ppx_audio_read (input, m->sample_rate, &n, error)) && codec_load (&c, model_dir, error) &&
         (codes = encode_frames (&c, pcm, n, &n_frames)) &&
         codes_json_write (output, codes, n_frames, m->num_codebooks, error);
  else if (ok)
    ok = (codes = codes_json_read (input, m->num_codebooks, m->q_bins, &n_frames, error)) &&
         codec_load (&c, model_dir, error) && (pcm = decode_frames (&c, codes, n_frames)) &&
         ppx_audio_write_f32 (output, pcm, n_frames * m->frame_size, m->sample_rate, error);
  codec_clear (&c);
  return ok;
}

int
main (int argc, char **argv)
{
  g_autofree char *model_dir = NULL, *input = NULL, *output = NULL;
  GOptionEntry entries[] = {
    {"model-dir", 0, 0, G_OPTION_ARG_FILENAME, &model_dir, "Model directory (config.json + Mimi checkpoint)", "DIR"},
    {"input", 0, 0, G_OPTION_ARG_FILENAME, &input, "encode: audio file; decode: CODES.json", "FILE"},
    {"output", 0, 0, G_OPTION_ARG_FILENAME, &output, "encode: CODES.json; decode: 32-bit float WAV", "FILE"},
    {NULL},
  };
  g_autoptr (GOptionContext) ctx = g_option_context_new ("encode|decode - the streaming Mimi codec on its own");
  g_option_context_set_summary (ctx,
    "  encode: audio (any format libsndfile reads; channel 0, resampled to 24 kHz) -> CODES.json,\n"
    "          {\"codes\": [[8 ids], ...]}, one row per 80 ms frame, the last frame zero-padded.\n"
    "  decode: CODES.json -> 32-bit float 24 kHz mono WAV, 1920 samples per row.");
  g_option_context_add_main_entries (ctx, entries, NULL);
  g_autoptr (GError) error = NULL;
  if (!g_option_context_parse (ctx, &argc, &argv, &error))
    return tool_fail (PROG, error->message);
  if (argc != 2 || (strcmp (argv[1], "encode") != 0 && strcmp (argv[1], "decode") != 0))
    return tool_fail (PROG, argc < 2 ? "give a command: encode or decode (see --help)"
                                      : "the command must be exactly one of encode or decode (see --help)");
  if (!model_dir || !input || !output)
    return tool_fail (PROG, "--model-dir, --input and --output are required (see --help)");
  if (!run (strcmp (argv[1], "encode") == 0, model_dir, input, output, &error))
    return tool_fail (PROG, error->message);
  return 0;
}
