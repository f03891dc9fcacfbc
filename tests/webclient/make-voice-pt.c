/* webclient-make-voice MODEL-DIR NAME.pt...: writes a random voice prompt MODEL-DIR/voices/NAME.pt for each
 * name, in torch.save's layout (docs/voice-prompt-pt.md) and sized for the model in MODEL-DIR:
 * "embeddings" bf16 [12, 1, 1, dim] (Gaussian, each name its own seed) and "cache" int64 [1, streams, 4]
 * (the text padding id, then one audio token a stream, as the published files hold). The reference web
 * client offers only its own list of voice names (NATF0.pt ...), so a tiny random model needs files of
 * those names for the client to be used unchanged (tests/webclient/test-webclient.mjs). */
#include "../pt-fixtures.h"
#include "config.h"

#include <glib/gstdio.h>
#include <math.h>

#define N_FRAMES 12

static GBytes *
random_embeddings (GRand *rand, int dim)
{
  guint16 *v = g_new (guint16, N_FRAMES * dim);
  for (int i = 0; i < N_FRAMES * dim; i++) {
    /* Box-Muller: a standard normal value */
    double u = 1.0 - g_rand_double (rand), w = g_rand_double (rand);
    v[i] = GUINT16_TO_LE (ppx_f32_to_bf16 ((float) (sqrt (-2.0 * log (u)) * cos (2.0 * G_PI * w))));
  }
  return g_bytes_new_take (v, (gsize) N_FRAMES * dim * sizeof *v);
}

static GBytes *
random_cache (GRand *rand, const PpxLmConfig *lm)
{
  gint64 *v = g_new (gint64, lm->n_streams * 4);
  for (int k = 0; k < lm->n_streams; k++) {
    gint64 token = k == 0 ? lm->existing_text_padding_id : g_rand_int_range (rand, 0, lm->card);
    for (int j = 0; j < 4; j++)
      v[k * 4 + j] = GINT64_TO_LE (token);
  }
  return g_bytes_new_take (v, (gsize) lm->n_streams * 4 * sizeof *v);
}

static gboolean
write_voice (const PpxLmConfig *lm, const char *path, guint32 seed, GError **error)
{
  const PtFixtureTensor tensors[] = {
    {"embeddings", "BFloat16Storage", "0", (gint64) N_FRAMES * lm->dim, 0, 4, {N_FRAMES, 1, 1, lm->dim},
     {lm->dim, lm->dim, lm->dim, 1}},
    {"cache", "LongStorage", "1", lm->n_streams * 4, 0, 3, {1, lm->n_streams, 4}, {lm->n_streams * 4, 4, 1}},
  };
  g_autoptr (GRand) rand = g_rand_new_with_seed (seed);
  g_autoptr (GBytes) pickle = pt_fixture_pickle (tensors, G_N_ELEMENTS (tensors));
  g_autoptr (GBytes) embeddings = random_embeddings (rand, lm->dim);
  g_autoptr (GBytes) cache = random_cache (rand, lm);
  const char *keys[] = {"0", "1"};
  GBytes *storages[] = {embeddings, cache};
  g_autoptr (GBytes) file = pt_fixture_file (pickle, 2, keys, storages);
  gsize size;
  const char *data = g_bytes_get_data (file, &size);
  return g_file_set_contents (path, data, (gssize) size, error);
}

int
main (int argc, char **argv)
{
  if (argc < 3) {
    g_printerr ("usage: %s MODEL-DIR NAME.pt...\n", argv[0]);
    return 2;
  }
  g_autoptr (GError) error = NULL;
  PpxConfig cfg;
  if (!ppx_config_load_dir (&cfg, argv[1], &error)) {
    g_printerr ("%s: %s\n", argv[0], error->message);
    return 1;
  }
  g_autofree char *dir = g_build_filename (argv[1], "voices", NULL);
  if (g_mkdir_with_parents (dir, 0755) != 0) {
    g_printerr ("%s: cannot create %s: %s\n", argv[0], dir, g_strerror (errno));
    return 1;
  }
  for (int i = 2; i < argc; i++) {
    if (!g_str_has_suffix (argv[i], ".pt") || strchr (argv[i], G_DIR_SEPARATOR)) {
      g_printerr ("%s: '%s' is not a voice file name (NAME.pt)\n", argv[0], argv[i]);
      return 2;
    }
    g_autofree char *path = g_build_filename (dir, argv[i], NULL);
    if (!write_voice (&cfg.lm, path, g_str_hash (argv[i]), &error)) {
      g_printerr ("%s: %s\n", argv[0], error->message);
      return 1;
    }
  }
  return 0;
}
