/* personaplex-mimi, through the program. Without arguments: a deterministic random tiny model
 * (personaplex-make-model) for the frame count, the round trip, other input formats, --help and every
 * error a user can cause. With `golden`: encoding the golden user audio reproduces the reference's codes
 * exactly and decoding the reference's codes reproduces its PCM to 1e-4 (exit 77 without golden data). */
#include <json-glib/json-glib.h>

#include "test-tool-harness.h"

#define NQ 8
#define FRAME 1920
#define CARD 2048

static const char *
mimi_tool (void)
{
  return tool_path ("PPX_MIMI_TOOL", "personaplex-mimi");
}

/* CODES.json -> rows of NQ codes (asserts the documented shape). */
static gint64 *
read_codes (const char *path, gsize *n_rows)
{
  g_autoptr (JsonParser) p = json_parser_new ();
  g_autoptr (GError) err = NULL;
  g_assert_true (json_parser_load_from_file (p, path, &err));
  g_assert_no_error (err);
  JsonObject *o = json_node_get_object (json_parser_get_root (p));
  JsonArray *rows = json_object_get_array_member (o, "codes");
  g_assert_nonnull (rows);
  *n_rows = json_array_get_length (rows);
  gint64 *codes = g_new (gint64, MAX (*n_rows * NQ, 1));
  for (guint t = 0; t < *n_rows; t++) {
    JsonArray *row = json_array_get_array_element (rows, t);
    g_assert_cmpuint (json_array_get_length (row), ==, NQ);
    for (guint q = 0; q < NQ; q++)
      codes[t * NQ + q] = json_array_get_int_element (row, q);
  }
  return codes;
}

static void
encode_ok (const char *wav, const char *codes)
{
  ToolResult r = tool_run (mimi_tool (), "encode", "--model-dir", model_dir, "--input", wav, "--output", codes);
  tool_assert_ok (&r);
  tool_result_clear (&r);
}

static void
decode_ok (const char *codes, const char *wav)
{
  ToolResult r = tool_run (mimi_tool (), "decode", "--model-dir", model_dir, "--input", codes, "--output", wav);
  tool_assert_ok (&r);
  tool_result_clear (&r);
}

static void
test_help (void)
{
  ToolResult r = tool_run (mimi_tool (), "--help");
  tool_assert_ok (&r);
  g_assert_nonnull (strstr (r.out, "encode"));
  g_assert_nonnull (strstr (r.out, "--model-dir"));
  tool_result_clear (&r);
}

/* 5000 samples -> 3 rows (the last frame zero-padded); decoding them gives 3 whole frames of audio. */
static void
test_round_trip (void)
{
  g_autofree char *wav = tmp_path ("odd.wav"), *codes = tmp_path ("odd.json"), *out = tmp_path ("odd-out.wav");
  g_autofree float *pcm = test_signal (5000, 24000);
  wav_write (wav, pcm, 5000, 24000, 1, SF_FORMAT_FLOAT);
  encode_ok (wav, codes);
  gsize rows;
  g_autofree gint64 *c = read_codes (codes, &rows);
  g_assert_cmpuint (rows, ==, 3);
  for (gsize i = 0; i < rows * NQ; i++)
    g_assert_true (c[i] >= 0 && c[i] < CARD);
  decode_ok (codes, out);
  gsize n;
  g_autofree float *dec = wav_read (out, 24000, &n);
  g_assert_cmpuint (n, ==, 3 * FRAME);
  for (gsize i = 0; i < n; i++)
    g_assert_true (isfinite (dec[i]));
  /* An empty codes file decodes to an empty WAV. */
  g_autofree char *empty = tmp_path ("empty.json"), *empty_wav = tmp_path ("empty.wav");
  write_text (empty, "{\"codes\": []}");
  decode_ok (empty, empty_wav);
  g_autofree float *none = wav_read (empty_wav, 24000, &n);
  g_assert_cmpuint (n, ==, 0);
  g_assert_nonnull (none);
}

/* 16-bit stereo at 48 kHz: channel 0, resampled to 24 kHz, so 9600 frames -> 4800 samples -> 3 rows. */
static void
test_other_format (void)
{
  g_autofree char *wav = tmp_path ("s16-48k.wav"), *codes = tmp_path ("s16.json");
  g_autofree float *pcm = test_signal (9600, 48000);
  wav_write (wav, pcm, 9600, 48000, 2, SF_FORMAT_PCM_16);
  encode_ok (wav, codes);
  gsize rows;
  g_autofree gint64 *c = read_codes (codes, &rows);
  g_assert_cmpuint (rows, ==, 3);
  for (gsize i = 0; i < rows * NQ; i++)
    g_assert_true (c[i] >= 0 && c[i] < CARD);
}

static void
test_errors (void)
{
  g_autofree char *wav = tmp_path ("err.wav"), *codes = tmp_path ("err.json"), *out = tmp_path ("err-out");
  g_autofree char *text = tmp_path ("not-audio.wav"), *missing = tmp_path ("missing.wav");
  g_autofree char *missing_dir = tmp_path ("no-such-model"), *empty_dir = tmp_path ("empty-model");
  g_autofree float *pcm = test_signal (1920, 24000);
  wav_write (wav, pcm, 1920, 24000, 1, SF_FORMAT_FLOAT);
  write_text (text, "this is not audio\n");
  g_assert_cmpint (g_mkdir (empty_dir, 0755), ==, 0);
  const char *md = model_dir;
  ToolResult r;

  r = tool_run (mimi_tool (), "encode", "--model-dir", missing_dir, "--input", wav, "--output", codes);
  tool_assert_fails (&r, missing_dir);
  tool_result_clear (&r);
  r = tool_run (mimi_tool (), "encode", "--model-dir", empty_dir, "--input", wav, "--output", codes);
  tool_assert_fails (&r, "tokenizer-e351c8d8-checkpoint125.safetensors");
  tool_result_clear (&r);
  r = tool_run (mimi_tool (), "encode", "--model-dir", md, "--input", text, "--output", codes);
  tool_assert_fails (&r, text);
  tool_result_clear (&r);
  r = tool_run (mimi_tool (), "encode", "--model-dir", md, "--input", missing, "--output", codes);
  tool_assert_fails (&r, missing);
  tool_result_clear (&r);
  g_autofree char *unwritable = g_build_filename (missing_dir, "codes.json", NULL);
  r = tool_run (mimi_tool (), "encode", "--model-dir", md, "--input", wav, "--output", unwritable);
  tool_assert_fails (&r, unwritable);
  tool_result_clear (&r);

  /* Malformed CODES.json: each message names the file and, where one is at fault, the row. */
  const struct { const char *json, *needle; } bad[] = {
    {"not json at all", "Parse error"},
    {"[[1, 2, 3, 4, 5, 6, 7, 8]]", "not a JSON object"},
    {"{\"frames\": []}", "no \"codes\""},
    {"{\"codes\": 3}", "not an array"},
    {"{\"codes\": [[1, 2, 3, 4, 5, 6, 7, 8], 5]}", "row 1 is not an array"},
    {"{\"codes\": [[1, 2, 3, 4, 5, 6, 7, 8], [1, 2, 3]]}", "row 1 has 3 codes, expected 8"},
    {"{\"codes\": [[1, 2, 3, 4, 5, 6, 7, 8], [1, 2, 3, 4, 5, 6, 7, 8], [1, 2, 3, 4, 5, 6, 7, 2048]]}",
     "row 2, code 7: 2048 is outside [0, 2048)"},
    {"{\"codes\": [[-1, 2, 3, 4, 5, 6, 7, 8]]}", "row 0, code 0: -1 is outside"},
    {"{\"codes\": [[1, 2.5, 3, 4, 5, 6, 7, 8]]}", "row 0, code 1 is not an integer"},
    {"{\"codes\": [[1, \"2\", 3, 4, 5, 6, 7, 8]]}", "row 0, code 1 is not an integer"},
  };
  for (guint i = 0; i < G_N_ELEMENTS (bad); i++) {
    write_text (codes, bad[i].json);
    r = tool_run (mimi_tool (), "decode", "--model-dir", md, "--input", codes, "--output", out);
    tool_assert_fails (&r, codes, bad[i].needle);
    tool_result_clear (&r);
  }
  g_autofree char *missing_json = tmp_path ("missing.json");
  r = tool_run (mimi_tool (), "decode", "--model-dir", md, "--input", missing_json, "--output", out);
  tool_assert_fails (&r, missing_json);
  tool_result_clear (&r);

  /* Usage errors. */
  r = tool_run (mimi_tool (), "transcode", "--model-dir", md, "--input", wav, "--output", codes);
  tool_assert_fails (&r, "encode or decode");
  tool_result_clear (&r);
  r = tool_run (mimi_tool (), "--model-dir", md, "--input", wav, "--output", codes);
  tool_assert_fails (&r, "encode or decode");
  tool_result_clear (&r);
  r = tool_run (mimi_tool (), "encode", "--model-dir", md, "--input", wav);
  tool_assert_fails (&r, "--output");
  tool_result_clear (&r);
  r = tool_run (mimi_tool (), "encode", "--no-such-option");
  tool_assert_fails (&r, "--no-such-option");
  tool_result_clear (&r);
}

/* ---- golden ---- */

static const PpxStTensor *
golden_tensor (const char *name)
{
  const PpxStTensor *t = ppx_st_find (G.golden, name);
  g_assert_nonnull (t);
  return t;
}

static void
test_golden_encode (void)
{
  const PpxStTensor *user = golden_tensor ("user_pcm"), *ref = golden_tensor ("mimi_encode_codes");
  g_autofree char *wav = tmp_path ("user.wav"), *codes = tmp_path ("user.json");
  wav_write (wav, user->data, (gsize) user->shape[0], 24000, 1, SF_FORMAT_FLOAT);
  encode_ok (wav, codes);
  gsize rows;
  g_autofree gint64 *c = read_codes (codes, &rows);
  g_assert_cmpint ((gint64) rows, ==, ref->shape[0]);
  g_assert_cmpint (ref->shape[1], ==, NQ);
  int mismatches = 0;
  for (gsize i = 0; i < rows * NQ; i++)
    mismatches += c[i] != ((const int64_t *) ref->data)[i];
  g_test_message ("encode: %" G_GSIZE_FORMAT " rows, %d mismatches", rows, mismatches);
  g_assert_cmpint (mismatches, ==, 0);
}

static void
test_golden_decode (void)
{
  const PpxStTensor *codes_t = golden_tensor ("mimi_encode_codes"), *ref = golden_tensor ("mimi_decode_pcm");
  g_autofree char *codes = tmp_path ("golden-codes.json"), *wav = tmp_path ("golden-decoded.wav");
  GString *json = g_string_new ("{\"codes\": [");
  for (gint64 t = 0; t < codes_t->shape[0]; t++) {
    g_string_append (json, t ? ", [" : "[");
    for (int q = 0; q < NQ; q++)
      g_string_append_printf (json, q ? ", %" G_GINT64_FORMAT : "%" G_GINT64_FORMAT,
                              ((const int64_t *) codes_t->data)[t * NQ + q]);
    g_string_append_c (json, ']');
  }
  g_string_append (json, "]}");
  write_text (codes, json->str);
  g_string_free (json, TRUE);
  decode_ok (codes, wav);
  gsize n;
  g_autofree float *pcm = wav_read (wav, 24000, &n);
  g_assert_cmpint ((gint64) n, ==, ref->shape[0]);
  double max_err = 0;
  for (gsize i = 0; i < n; i++)
    max_err = MAX (max_err, fabs (pcm[i] - ((const float *) ref->data)[i]));
  g_test_message ("decode: %" G_GSIZE_FORMAT " samples, max abs err %.3g", n, max_err);
  g_assert_cmpfloat (max_err, <, 1e-4);
}

static void
add_golden (void)
{
  g_test_add_func ("/tool-mimi/golden/encode", test_golden_encode);
  g_test_add_func ("/tool-mimi/golden/decode", test_golden_decode);
}

static void
add_tiny (void)
{
  g_test_add_func ("/tool-mimi/help", test_help);
  g_test_add_func ("/tool-mimi/round-trip", test_round_trip);
  g_test_add_func ("/tool-mimi/other-format", test_other_format);
  g_test_add_func ("/tool-mimi/errors", test_errors);
}

int
main (int argc, char **argv)
{
  return tool_test_main (argc, argv, "tool-mimi", add_golden, add_tiny);
}
