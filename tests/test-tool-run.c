/* personaplex-run, through the program. Without arguments: a deterministic random tiny model
 * (personaplex-make-model) for output length, input formats, seeds, NaN input, the JSON layout and every
 * user error. With `golden`: the reference's conversation (voice prompt from audio, and replayed from
 * voice_prompt.pt) reproduces its tokens exactly and its PCM to 1e-4 (exit 77 without golden data). */
#include <json-glib/json-glib.h>

#include "test-tokenizer-dir.h"
#include "test-tool-harness.h"

#define FRAME 1920
#define NTOK 17

static const char *
run_tool (void)
{
  return tool_path ("PPX_RUN_TOOL", "personaplex-run");
}

/* The output JSON, checked for the documented layout; returns the frames' tokens (n_frames x 17). */
typedef struct {
  JsonParser *parser;
  JsonObject *settings, *run;
  int *tokens;
  guint n_frames;
  const char *transcript;
} RunJson;

static void
run_json_load (RunJson *j, const char *path)
{
  g_autoptr (GError) err = NULL;
  j->parser = json_parser_new ();
  g_assert_true (json_parser_load_from_file (j->parser, path, &err));
  g_assert_no_error (err);
  JsonObject *root = json_node_get_object (json_parser_get_root (j->parser));
  j->settings = json_object_get_object_member (root, "settings");
  j->run = json_object_get_object_member (root, "run");
  g_assert_true (j->settings && j->run);
  JsonArray *frames = json_object_get_array_member (root, "frames");
  g_assert_nonnull (frames);
  j->n_frames = json_array_get_length (frames);
  g_assert_cmpint (json_object_get_int_member (j->run, "frames"), ==, j->n_frames);
  j->tokens = g_new (int, MAX (j->n_frames * NTOK, 1));
  GString *transcript = g_string_new (NULL);
  for (guint t = 0; t < j->n_frames; t++) {
    JsonObject *f = json_array_get_object_element (frames, t);
    JsonArray *tok = json_object_get_array_member (f, "tokens");
    g_assert_cmpuint (json_array_get_length (tok), ==, NTOK);
    for (int k = 0; k < NTOK; k++)
      j->tokens[t * NTOK + k] = (int) json_array_get_int_element (tok, k);
    g_assert_true (json_object_has_member (f, "text"));
    if (!json_object_get_null_member (f, "text"))
      g_string_append (transcript, json_object_get_string_member (f, "text"));
  }
  j->transcript = json_object_get_string_member (root, "transcript");
  g_assert_cmpstr (j->transcript, ==, transcript->str);
  g_string_free (transcript, TRUE);
}

static void
run_json_clear (RunJson *j)
{
  g_clear_object (&j->parser);
  g_clear_pointer (&j->tokens, g_free);
}

/* Runs the program on `input` with the extra NULL-terminated options; asserts success. */
static void
run_ok_argv (const char *input, const char *out_wav, const char *out_json, const char *const *extra)
{
  g_autoptr (GPtrArray) args = g_ptr_array_new ();
  const char *base[] = {"--model-dir", model_dir, "--input", input, "--output", out_wav, "--output-json", out_json};
  for (guint i = 0; i < G_N_ELEMENTS (base); i++)
    g_ptr_array_add (args, (char *) base[i]);
  for (const char *const *a = extra; a && *a; a++)
    g_ptr_array_add (args, (char *) *a);
  g_ptr_array_add (args, NULL);
  ToolResult r = tool_run_argv (run_tool (), (const char *const *) args->pdata);
  tool_assert_ok (&r);
  tool_result_clear (&r);
}

#define run_ok(input, wav, json, ...) run_ok_argv ((input), (wav), (json), (const char *const[]){__VA_ARGS__, NULL})

static void
test_help (void)
{
  ToolResult r = tool_run (run_tool (), "--help");
  tool_assert_ok (&r);
  const char *options[] = {"--model-dir", "--input", "--output", "--output-json", "--voice-prompt", "--text-prompt",
                           "--text-prompt-tokens", "--no-voice-normalize", "--greedy", "--seed", "--temp-audio",
                           "--temp-text", "--topk-audio", "--topk-text", "--quantization", "--backend", "--device",
                           "--voice-cache-dir", "--kv-cache-format"};
  for (guint i = 0; i < G_N_ELEMENTS (options); i++)
    g_assert_nonnull (strstr (r.out, options[i]));
  tool_result_clear (&r);
}

/* 5000 samples (2 whole frames and a partial one) in, exactly 5000 out; the JSON records 3 frames and
 * every setting with its default. */
static void
test_length_and_json (void)
{
  g_autofree char *in = tmp_path ("odd.wav"), *out = tmp_path ("odd-out.wav"), *json = tmp_path ("odd.json");
  g_autofree float *pcm = test_signal (5000, 24000);
  wav_write (in, pcm, 5000, 24000, 1, SF_FORMAT_FLOAT);
  run_ok (in, out, json, "--greedy");
  gsize n;
  g_autofree float *res = wav_read (out, 24000, &n);
  g_assert_cmpuint (n, ==, 5000);
  for (gsize i = 0; i < n; i++)
    g_assert_true (isfinite (res[i]));
  RunJson j = {0};
  run_json_load (&j, json);
  g_assert_cmpuint (j.n_frames, ==, 3);
  g_assert_cmpint (json_object_get_int_member (j.run, "samples"), ==, 5000);
  g_assert_cmpint (json_object_get_int_member (j.run, "sample_rate"), ==, 24000);
  g_assert_cmpstr (json_object_get_string_member (j.run, "backend"), ==, "cpu");
  JsonObject *s = j.settings;
  g_assert_cmpstr (json_object_get_string_member (s, "model_dir"), ==, model_dir);
  g_assert_cmpstr (json_object_get_string_member (s, "input"), ==, in);
  g_assert_true (json_object_get_boolean_member (s, "greedy"));
  g_assert_true (json_object_get_boolean_member (s, "voice_normalize"));
  g_assert_cmpint (json_object_get_int_member (s, "seed"), ==, 42424242);
  g_assert_cmpfloat (json_object_get_double_member (s, "temp_audio"), ==, 0.8);
  g_assert_cmpfloat (json_object_get_double_member (s, "temp_text"), ==, 0.7);
  g_assert_cmpint (json_object_get_int_member (s, "topk_audio"), ==, 250);
  g_assert_cmpint (json_object_get_int_member (s, "topk_text"), ==, 25);
  g_assert_cmpstr (json_object_get_string_member (s, "quantization"), ==, "auto");
  g_assert_cmpstr (json_object_get_string_member (s, "backend"), ==, "auto");
  g_assert_cmpstr (json_object_get_string_member (s, "kv_cache_format"), ==, "auto");
  /* what auto resolved to */
  const char *kv = json_object_get_string_member (j.run, "kv_cache_format");
  g_assert_true (g_strcmp0 (kv, "f32") == 0 || g_strcmp0 (kv, "bf16") == 0 || g_strcmp0 (kv, "fp8") == 0);
  g_assert_true (json_object_get_null_member (s, "voice_prompt"));
  g_assert_true (json_object_get_null_member (s, "text_prompt"));
  g_assert_true (json_object_get_null_member (s, "text_prompt_tokens"));
  run_json_clear (&j);
}

/* Formats GStreamer decodes: 16-bit stereo WAV at 48 kHz, FLAC at 16 kHz and WAV at 96 kHz come out as
 * long as they went in, at 24 kHz (the resampler makes 4799 of the FLAC's 4800 samples and 3087 of the
 * 96 kHz file's 3086.25: padded and trimmed to the exact count). */
static void
test_other_formats (void)
{
  const struct { const char *name; int rate, channels, format; gsize frames, expected; } cases[] = {
    {"s16-48k.wav", 48000, 2, SF_FORMAT_WAV | SF_FORMAT_PCM_16, 9600, 4800},
    {"mono-16k.flac", 16000, 1, SF_FORMAT_FLAC | SF_FORMAT_PCM_16, 3200, 4800},
    {"mono-96k.wav", 96000, 1, SF_FORMAT_WAV | SF_FORMAT_PCM_16, 12345, 3086},
  };
  for (guint i = 0; i < G_N_ELEMENTS (cases); i++) {
    g_autofree char *in = tmp_path (cases[i].name), *out = tmp_path ("fmt-out.wav"), *json = tmp_path ("fmt.json");
    g_autofree float *pcm = test_signal (cases[i].frames, cases[i].rate);
    SF_INFO info = {.samplerate = cases[i].rate, .channels = cases[i].channels, .format = cases[i].format};
    SNDFILE *f = sf_open (in, SFM_WRITE, &info);
    g_assert_nonnull (f);
    g_autofree float *inter = g_new (float, cases[i].frames * cases[i].channels);
    for (gsize k = 0; k < cases[i].frames * cases[i].channels; k++)
      inter[k] = pcm[k / cases[i].channels];
    g_assert_cmpint (sf_writef_float (f, inter, (sf_count_t) cases[i].frames), ==, (sf_count_t) cases[i].frames);
    sf_close (f);
    run_ok (in, out, json, "--greedy");
    gsize n;
    g_autofree float *res = wav_read (out, 24000, &n);
    g_test_message ("%s: %" G_GSIZE_FORMAT " samples out", cases[i].name, n);
    g_assert_cmpuint (n, ==, cases[i].expected);
    for (gsize k = 0; k < n; k++)
      g_assert_true (isfinite (res[k]));
  }
}

/* Sampling: the same seed twice gives the same tokens and audio; another seed other tokens. */
static void
test_seed (void)
{
  g_autofree char *in = tmp_path ("seed.wav");
  g_autofree float *pcm = test_signal (12 * FRAME, 24000);
  wav_write (in, pcm, 12 * FRAME, 24000, 1, SF_FORMAT_FLOAT);
  const char *seeds[] = {"7", "7", "8"};
  RunJson j[3] = {{0}};
  float *audio[3];
  gsize n[3];
  for (int i = 0; i < 3; i++) {
    g_autofree char *out = g_strdup_printf ("%s/seed-%d.wav", tmp, i), *json = g_strdup_printf ("%s/seed-%d.json", tmp, i);
    run_ok (in, out, json, "--seed", seeds[i]);
    run_json_load (&j[i], json);
    g_assert_cmpint (json_object_get_int_member (j[i].settings, "seed"), ==, atoi (seeds[i]));
    g_assert_false (json_object_get_boolean_member (j[i].settings, "greedy"));
    audio[i] = wav_read (out, 24000, &n[i]);
  }
  g_assert_cmpuint (j[0].n_frames, ==, 12);
  g_assert_cmpmem (j[0].tokens, j[0].n_frames * NTOK * sizeof (int), j[1].tokens, j[1].n_frames * NTOK * sizeof (int));
  g_assert_cmpmem (audio[0], n[0] * sizeof (float), audio[1], n[1] * sizeof (float));
  int differ = 0;
  for (guint k = 0; k < j[0].n_frames * NTOK; k++)
    differ += j[0].tokens[k] != j[2].tokens[k];
  g_test_message ("seed 7 vs seed 8: %d of %u tokens differ", differ, j[0].n_frames * NTOK);
  g_assert_cmpint (differ, >, 0);
  for (int i = 0; i < 3; i++) {
    run_json_clear (&j[i]);
    g_free (audio[i]);
  }
}

/* NaN and Inf input samples are silence to the model: the run succeeds and the output is finite. */
static void
test_nan_input (void)
{
  g_autofree char *in = tmp_path ("nan.wav"), *out = tmp_path ("nan-out.wav"), *json = tmp_path ("nan.json");
  const gsize len = 3 * FRAME + 100;
  g_autofree float *pcm = test_signal (len, 24000);
  for (gsize i = 0; i < len; i += 7)
    pcm[i] = i % 2 ? NAN : INFINITY;
  for (gsize i = FRAME; i < 2 * FRAME; i++)
    pcm[i] = NAN; /* one whole frame */
  wav_write (in, pcm, len, 24000, 1, SF_FORMAT_FLOAT);
  run_ok (in, out, json, "--greedy");
  gsize n;
  g_autofree float *res = wav_read (out, 24000, &n);
  g_assert_cmpuint (n, ==, len);
  for (gsize i = 0; i < n; i++)
    g_assert_true (isfinite (res[i]));
}

/* --text-prompt "" means no text prompt (said on stderr, recorded as null). */
static void
test_empty_text_prompt (void)
{
  g_autofree char *in = tmp_path ("short.wav"), *out = tmp_path ("short-out.wav"), *json = tmp_path ("short.json");
  g_autofree float *pcm = test_signal (FRAME, 24000);
  wav_write (in, pcm, FRAME, 24000, 1, SF_FORMAT_FLOAT);
  ToolResult r = tool_run (run_tool (), "--model-dir", model_dir, "--input", in, "--output", out, "--output-json",
                           json, "--text-prompt", "", "--greedy");
  tool_assert_ok (&r);
  g_assert_nonnull (strstr (r.err, "without a text prompt"));
  tool_result_clear (&r);
  RunJson j = {0};
  run_json_load (&j, json);
  g_assert_true (json_object_get_null_member (j.settings, "text_prompt"));
  run_json_clear (&j);
}

/* --text-prompt takes any UTF-8 text in every locale (GOption alone refused "très" under LANG=C with
 * "Invalid byte sequence in conversion input"); the JSON records it unchanged. Text that is neither UTF-8
 * nor in the locale's character set is an error naming the option. */
static void
test_text_prompt_utf8 (void)
{
  g_autofree char *dir = tmp_path ("with-tokenizer");
  g_assert_cmpint (g_mkdir (dir, 0755), ==, 0);
  const char *links[] = {"config.json", "model.safetensors", "tokenizer-e351c8d8-checkpoint125.safetensors"};
  for (guint i = 0; i < G_N_ELEMENTS (links); i++) {
    g_autofree char *from = g_build_filename (model_dir, links[i], NULL), *to = g_build_filename (dir, links[i], NULL);
    g_autofree char *abs = g_canonicalize_filename (from, NULL);
    g_assert_cmpint (symlink (abs, to), ==, 0);
  }
  ppx_test_add_tokenizer (dir);
  g_autofree char *in = tmp_path ("utf8.wav"), *out = tmp_path ("utf8-out.wav"), *json = tmp_path ("utf8.json");
  g_autofree float *pcm = test_signal (FRAME, 24000);
  wav_write (in, pcm, FRAME, 24000, 1, SF_FORMAT_FLOAT);
  static const char *const prompts[] = {"tr\xc3\xa8s", "Tu es tr\xc3\xa8s aimable \xe2\x80\x94 \xe6\x97\xa5\xe6\x9c\xac "
                                        "\xf0\x9f\x99\x82"};
  static const char *const locales[][2] = {{"LC_ALL", "C"}, {"LANG", "C"}, {"LC_ALL", "POSIX"}, {"LC_ALL", "C.UTF-8"}};
  for (guint p = 0; p < G_N_ELEMENTS (prompts); p++)
    for (guint l = 0; l < G_N_ELEMENTS (locales); l++) {
      g_auto (GStrv) env = g_get_environ ();
      env = g_environ_unsetenv (env, "LC_ALL");
      env = g_environ_unsetenv (env, "LC_CTYPE");
      env = g_environ_unsetenv (env, "LANG");
      env = g_environ_setenv (env, locales[l][0], locales[l][1], TRUE);
      const char *args[] = {"--model-dir", dir, "--input", in, "--output", out, "--output-json", json,
                            "--text-prompt", prompts[p], "--greedy", NULL};
      ToolResult r = tool_run_envp_argv (run_tool (), env, args);
      if (r.exit_status != 0)
        g_printerr ("%s=%s: %s\n", locales[l][0], locales[l][1], r.err);
      tool_assert_ok (&r);
      tool_result_clear (&r);
      RunJson j = {0};
      run_json_load (&j, json);
      g_assert_cmpstr (json_object_get_string_member (j.settings, "text_prompt"), ==, prompts[p]);
      run_json_clear (&j);
    }
  /* Latin-1 bytes under LANG=C: not UTF-8, not ASCII */
  g_auto (GStrv) env = g_environ_setenv (g_get_environ (), "LC_ALL", "C", TRUE);
  const char *args[] = {"--model-dir", dir, "--input", in, "--output", out, "--text-prompt", "tr\xe8s", NULL};
  ToolResult r = tool_run_envp_argv (run_tool (), env, args);
  tool_assert_fails_naming (&r, (const char *const[]){"--text-prompt", "UTF-8", NULL});
  tool_result_clear (&r);
  ppx_test_remove_tree (dir);
}

/* A copy of the model directory whose model.safetensors has one 2-D tensor transposed. Returns the
 * tensor's name. */
static char *
make_wrong_shape_model (const char *dir)
{
  g_assert_cmpint (g_mkdir (dir, 0755), ==, 0);
  const char *copies[] = {"config.json", "tokenizer-e351c8d8-checkpoint125.safetensors"};
  for (guint i = 0; i < G_N_ELEMENTS (copies); i++) {
    g_autofree char *from = g_build_filename (model_dir, copies[i], NULL), *to = g_build_filename (dir, copies[i], NULL);
    g_autofree char *abs = g_canonicalize_filename (from, NULL);
    g_assert_cmpint (symlink (abs, to), ==, 0);
  }
  g_autoptr (GError) err = NULL;
  g_autofree char *src = g_build_filename (model_dir, "model.safetensors", NULL);
  g_autofree char *dst = g_build_filename (dir, "model.safetensors", NULL);
  PpxSafetensors *st = ppx_st_open (src, &err);
  g_assert_no_error (err);
  PpxStWriter *w = ppx_st_writer_new ();
  char *changed = NULL;
  for (guint i = 0; i < ppx_st_n_tensors (st); i++) {
    const PpxStTensor *t = ppx_st_tensor_at (st, i);
    int64_t shape[PPX_ST_MAX_DIMS];
    memcpy (shape, t->shape, sizeof shape);
    if (!changed && t->ndim == 2 && shape[0] != shape[1]) {
      shape[0] = t->shape[1];
      shape[1] = t->shape[0];
      changed = g_strdup (t->name);
    }
    ppx_st_writer_declare (w, t->name, t->dtype, t->ndim, shape);
  }
  g_assert_nonnull (changed);
  g_assert_true (ppx_st_writer_begin (w, dst, &err));
  for (guint i = 0; i < ppx_st_n_tensors (st); i++) {
    const PpxStTensor *t = ppx_st_tensor_at (st, i);
    g_assert_true (ppx_st_writer_write (w, t->data, t->nbytes, &err));
  }
  g_assert_true (ppx_st_writer_finish (w, &err));
  g_assert_no_error (err);
  ppx_st_writer_free (w);
  ppx_st_close (st);
  return changed;
}

/* --kv-cache-format reaches the element: the JSON records the option and the format that ran. */
static void
test_kv_cache_format (void)
{
  g_autofree char *in = tmp_path ("kv.wav"), *out = tmp_path ("kv-out.wav"), *json = tmp_path ("kv.json");
  g_autofree float *pcm = test_signal (4000, 24000);
  wav_write (in, pcm, 4000, 24000, 1, SF_FORMAT_FLOAT);
  const char *formats[] = {"f32", "bf16", "fp8"};
  for (guint i = 0; i < G_N_ELEMENTS (formats); i++) {
    run_ok (in, out, json, "--greedy", "--kv-cache-format", formats[i]);
    RunJson j = {0};
    run_json_load (&j, json);
    g_assert_cmpstr (json_object_get_string_member (j.settings, "kv_cache_format"), ==, formats[i]);
    g_assert_cmpstr (json_object_get_string_member (j.run, "kv_cache_format"), ==, formats[i]);
    g_assert_cmpint (json_object_get_int_member (j.run, "samples"), ==, 4000);
    run_json_clear (&j);
  }
}

static void
test_errors (void)
{
  g_autofree char *in = tmp_path ("err.wav"), *out = tmp_path ("err-out.wav");
  g_autofree char *text = tmp_path ("not-audio.wav"), *missing = tmp_path ("missing.wav");
  g_autofree char *missing_dir = tmp_path ("no-such-model"), *wrong_dir = tmp_path ("wrong-shape");
  g_autofree char *bad_pt = tmp_path ("corrupt.pt"), *unwritable = g_build_filename (missing_dir, "out.wav", NULL);
  g_autofree float *pcm = test_signal (FRAME, 24000);
  wav_write (in, pcm, FRAME, 24000, 1, SF_FORMAT_FLOAT);
  write_text (text, "this is not audio, just text\n");
  write_text (bad_pt, "PK\003\004 this is not a torch zip file");
  g_autofree char *wrong_tensor = make_wrong_shape_model (wrong_dir);
  const char *md = model_dir;
  ToolResult r;
#define EXPECT_FAIL(needles, ...)                                              \
  do {                                                                         \
    r = tool_run (run_tool (), __VA_ARGS__);                                   \
    tool_assert_fails_naming (&r, (const char *const[]){PPX_UNPAREN needles, NULL}); \
    tool_result_clear (&r);                                                    \
  } while (0)
#define PPX_UNPAREN(...) __VA_ARGS__

  EXPECT_FAIL ((missing_dir), "--model-dir", missing_dir, "--input", in, "--output", out);
  EXPECT_FAIL (("model.safetensors", wrong_tensor), "--model-dir", wrong_dir, "--input", in, "--output", out);
  EXPECT_FAIL ((bad_pt), "--model-dir", md, "--input", in, "--output", out, "--voice-prompt", bad_pt);
  EXPECT_FAIL (("--voice-prompt", "voices/no-such-voice.pt"), "--model-dir", md, "--input", in, "--output", out, "--voice-prompt",
               "no-such-voice");
  EXPECT_FAIL (("--voice-prompt", missing), "--model-dir", md, "--input", in, "--output", out, "--voice-prompt",
               missing);
  EXPECT_FAIL ((text), "--model-dir", md, "--input", in, "--output", out, "--voice-prompt", text);
  EXPECT_FAIL ((text), "--model-dir", md, "--input", text, "--output", out);
  /* the input is found not to be audio before the (broken) model is loaded */
  EXPECT_FAIL ((text, "cannot decode audio"), "--model-dir", wrong_dir, "--input", text, "--output", out);
  EXPECT_FAIL ((missing, "no such file"), "--model-dir", md, "--input", missing, "--output", out);
  /* what the problem is (issue 17, defect 9): a folder, a device, a folder as the voice prompt, an integer
   * out of range printed as the integer it is */
  EXPECT_FAIL ((tmp, "is a directory"), "--model-dir", md, "--input", tmp, "--output", out);
  EXPECT_FAIL (("/dev/zero", "not a regular file"), "--model-dir", md, "--input", "/dev/zero", "--output", out);
  EXPECT_FAIL (("--voice-prompt", tmp, "is a directory"), "--model-dir", md, "--input", in, "--output", out,
               "--voice-prompt", tmp);
  EXPECT_FAIL (("--topk-text 2147483647:", "1 .. 65536"), "--model-dir", md, "--input", in, "--output", out,
               "--topk-text", "2147483647");
  EXPECT_FAIL ((unwritable), "--model-dir", md, "--input", in, "--output", unwritable);
  EXPECT_FAIL (("--output-json", unwritable), "--model-dir", md, "--input", in, "--output", out, "--output-json",
               unwritable);
  EXPECT_FAIL (("--input"), "--model-dir", md, "--output", out);
  EXPECT_FAIL (("unexpected argument"), "--model-dir", md, "--input", in, "--output", out, "extra");
  EXPECT_FAIL (("--quantization", "int3"), "--model-dir", md, "--input", in, "--output", out, "--quantization", "int3");
  EXPECT_FAIL (("--backend", "tpu"), "--model-dir", md, "--input", in, "--output", out, "--backend", "tpu");
  EXPECT_FAIL (("--kv-cache-format", "f16"), "--model-dir", md, "--input", in, "--output", out, "--kv-cache-format",
               "f16");
  EXPECT_FAIL (("--temp-audio"), "--model-dir", md, "--input", in, "--output", out, "--temp-audio", "-1");
  EXPECT_FAIL (("--temp-text"), "--model-dir", md, "--input", in, "--output", out, "--temp-text", "warm");
  EXPECT_FAIL (("--temp-text"), "--model-dir", md, "--input", in, "--output", out, "--temp-text", "nan");
  EXPECT_FAIL (("--temp-audio 11", "0 .. 10"), "--model-dir", md, "--input", in, "--output", out, "--temp-audio", "11");
  EXPECT_FAIL (("--topk-text 70000"), "--model-dir", md, "--input", in, "--output", out, "--topk-text", "70000");
  EXPECT_FAIL (("--topk-audio"), "--model-dir", md, "--input", in, "--output", out, "--topk-audio", "-5");
  EXPECT_FAIL (("--device"), "--model-dir", md, "--input", in, "--output", out, "--device", "-1");
  EXPECT_FAIL (("--seed", "x1"), "--model-dir", md, "--input", in, "--output", out, "--seed", "x1");
  EXPECT_FAIL (("--seed"), "--model-dir", md, "--input", in, "--output", out, "--seed", "-3");
  EXPECT_FAIL (("--text-prompt-tokens", "abc"), "--model-dir", md, "--input", in, "--output", out,
               "--text-prompt-tokens", "1,abc,3");
  EXPECT_FAIL (("--text-prompt-tokens"), "--model-dir", md, "--input", in, "--output", out, "--text-prompt-tokens",
               "1,,3");
  EXPECT_FAIL (("either"), "--model-dir", md, "--input", in, "--output", out, "--text-prompt", "hello",
               "--text-prompt-tokens", "1,2");
  EXPECT_FAIL (("99999", "outside"), "--model-dir", md, "--input", in, "--output", out, "--text-prompt-tokens",
               "1,99999");
  /* The random model has no sentencepiece model: a text prompt must be given as token ids. */
  EXPECT_FAIL (("tokenizer_spm_32k_3.model"), "--model-dir", md, "--input", in, "--output", out, "--text-prompt",
               "You are a helpful assistant.");
#undef EXPECT_FAIL
  g_assert_false (g_file_test (out, G_FILE_TEST_EXISTS)); /* no failed run leaves an output behind */
}

/* ---- golden ---- */


static void
golden_conversation_with (const char *voice, const char *extra_option, const char *extra_value,
                          const char *tokens_name, const char *pcm_name)
{
  const PpxStTensor *user = ppx_st_find (G.golden, "user_pcm"), *ref_tok = ppx_st_find (G.golden, tokens_name),
                    *ref_pcm = ppx_st_find (G.golden, pcm_name);
  g_assert_true (user && ref_tok && ref_pcm);
  g_autofree char *in = tmp_path ("user.wav"), *out = tmp_path ("golden-out.wav"), *json = tmp_path ("golden.json");
  const gsize len = (gsize) user->shape[0];
  wav_write (in, user->data, len, 24000, 1, SF_FORMAT_FLOAT);
  GString *ids = g_string_new (NULL);
  for (int i = 0; i < G.n_text_tokens; i++)
    g_string_append_printf (ids, i ? ",%d" : "%d", G.text_tokens[i]);
  /* the reference's numerics: an f32 KV cache, whatever the library's default */
  if (extra_option)
    run_ok (in, out, json, "--voice-prompt", voice, "--no-voice-normalize", "--text-prompt-tokens", ids->str,
            "--greedy", "--kv-cache-format", "f32", extra_option, extra_value);
  else
    run_ok (in, out, json, "--voice-prompt", voice, "--no-voice-normalize", "--text-prompt-tokens", ids->str,
            "--greedy", "--kv-cache-format", "f32");
  g_string_free (ids, TRUE);

  RunJson j = {0};
  run_json_load (&j, json);
  g_assert_cmpint (j.n_frames, ==, ref_tok->shape[0]);
  int mismatches = 0;
  for (guint k = 0; k < j.n_frames * NTOK; k++) {
    gint64 want = ((const int64_t *) ref_tok->data)[k];
    if (j.tokens[k] != want && mismatches++ < 8)
      g_printerr ("frame %u stream %u: got %d expected %" G_GINT64_FORMAT "\n", k / NTOK, k % NTOK, j.tokens[k], want);
  }
  run_json_clear (&j);
  gsize n;
  g_autofree float *pcm = wav_read (out, 24000, &n);
  g_assert_cmpuint (n, ==, len);
  g_assert_cmpint (ref_pcm->shape[0], >=, (gint64) len);
  double max_err = 0;
  for (gsize i = 0; i < n; i++)
    max_err = MAX (max_err, fabs (pcm[i] - ((const float *) ref_pcm->data)[i]));
  g_test_message ("%s: %u frames, %d token mismatches, pcm max abs err %.3g", tokens_name, j.n_frames, mismatches,
                  max_err);
  g_assert_cmpint (mismatches, ==, 0);
  g_assert_cmpfloat (max_err, <, 1e-4);
}

static void
golden_conversation (const char *voice, const char *tokens_name, const char *pcm_name)
{
  golden_conversation_with (voice, NULL, NULL, tokens_name, pcm_name);
}

static void
test_golden_run (void)
{
  golden_conversation (G.voice_wav, "lm_run_out_tokens", "lm_run_pcm");
}

static void
test_golden_replay (void)
{
  golden_conversation (G.voice_pt, "lm_replay_out_tokens", "lm_replay_pcm");
}

/* --voice-prompt NAME is DIR/voices/NAME.pt. */
static void
test_golden_voice_name (void)
{
  g_autofree char *voices = g_build_filename (G.dir, "voices", NULL);
  g_autofree char *link = g_build_filename (voices, "golden-voice.pt", NULL);
  g_autofree char *target = g_canonicalize_filename (G.voice_pt, NULL);
  g_assert_cmpint (g_mkdir (voices, 0755), ==, 0);
  g_assert_cmpint (symlink (target, link), ==, 0);
  golden_conversation ("golden-voice", "lm_replay_out_tokens", "lm_replay_pcm");
  g_unlink (link);
  g_rmdir (voices);
}

/* --voice-cache-dir: the first run computes and stores the voice prompt, the second replays the stored
 * one; both reproduce the reference's conversation (its replay matches its run). */
static void
test_golden_voice_cache (void)
{
  g_autofree char *cache = tmp_path ("voice-cache");
  /* The option is the element's voice-cache-dir property; an element without one is refused, by name. */
  g_autofree char *in = tmp_path ("cache-probe.wav"), *out = tmp_path ("cache-probe-out.wav");
  g_autofree float *pcm = test_signal (FRAME, 24000);
  wav_write (in, pcm, FRAME, 24000, 1, SF_FORMAT_FLOAT);
  ToolResult r = tool_run (run_tool (), "--model-dir", model_dir, "--input", in, "--output", out, "--voice-prompt",
                           G.voice_wav, "--voice-cache-dir", cache);
  gboolean unsupported = r.exit_status == 1 && strstr (r.err, "no voice-cache-dir property");
  if (!unsupported)
    tool_assert_ok (&r);
  tool_result_clear (&r);
  if (unsupported) {
    g_test_skip ("the personaplexduplex element has no voice-cache-dir property");
    return;
  }
  ppx_test_remove_tree (cache);
  golden_conversation_with (G.voice_wav, "--voice-cache-dir", cache, "lm_run_out_tokens", "lm_run_pcm");
  g_autoptr (GDir) d = g_dir_open (cache, 0, NULL);
  g_assert_nonnull (d);
  g_assert_nonnull (g_dir_read_name (d));
  golden_conversation_with (G.voice_wav, "--voice-cache-dir", cache, "lm_run_out_tokens", "lm_run_pcm");
}

static void
add_golden (void)
{
  g_test_add_func ("/tool-run/golden/run", test_golden_run);
  g_test_add_func ("/tool-run/golden/replay", test_golden_replay);
  g_test_add_func ("/tool-run/golden/voice-name", test_golden_voice_name);
  g_test_add_func ("/tool-run/golden/voice-cache", test_golden_voice_cache);
}

static void
add_tiny (void)
{
  g_test_add_func ("/tool-run/help", test_help);
  g_test_add_func ("/tool-run/length-and-json", test_length_and_json);
  g_test_add_func ("/tool-run/other-formats", test_other_formats);
  g_test_add_func ("/tool-run/seed", test_seed);
  g_test_add_func ("/tool-run/nan-input", test_nan_input);
  g_test_add_func ("/tool-run/empty-text-prompt", test_empty_text_prompt);
  g_test_add_func ("/tool-run/text-prompt-utf8", test_text_prompt_utf8);
  g_test_add_func ("/tool-run/errors", test_errors);
  g_test_add_func ("/tool-run/kv-cache-format", test_kv_cache_format);
}

int
main (int argc, char **argv)
{
  return tool_test_main (argc, argv, "tool-run", add_golden, add_tiny);
}
