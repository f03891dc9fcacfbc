/* personaplex-run: the offline conversation, like the reference's offline script.
 *
 *   personaplex-run --model-dir DIR --input FILE --output OUT.wav [--output-json OUT.json]
 *                   [--voice-prompt FILE|NAME] [--text-prompt TEXT | --text-prompt-tokens 1,2,3]
 *                   [--no-voice-normalize] [--greedy] [--seed N] [--temp-audio 0.8 --temp-text 0.7
 *                   --topk-audio 250 --topk-text 25] [--quantization auto|bf16|int8|int4]
 *                   [--backend auto|cpu|cuda] [--device N] [--kv-cache-format auto|f32|bf16|fp8]
 *                   [--voice-cache-dir DIR]
 *
 * A thin GStreamer application around the personaplexduplex element: the input (any format GStreamer
 * plays; mixed to mono, resampled to 24 kHz) goes through the element frame by frame (run-pipeline.c),
 * and the agent's audio is written as a 32-bit float 24 kHz mono WAV exactly as long as the input, plus,
 * if asked, the per-frame tokens and text as JSON (run-json.h). See docs/tools.md. */
#include <errno.h>
#include <gst/gst.h>
#include <locale.h>
#include <math.h>

#include "audio-io.h"
#include "run-core.h"
#include "run-element.h"
#include "run-json.h"

#define PROG "personaplex-run"

static int
fail (const char *fmt, ...) G_GNUC_PRINTF (1, 2);

static int
fail (const char *fmt, ...)
{
  va_list ap;
  va_start (ap, fmt);
  g_autofree char *msg = g_strdup_vprintf (fmt, ap);
  va_end (ap);
  g_printerr (PROG ": %s\n", msg);
  return 1;
}

/* "1,2,3" -> ids (each in [0, G_MAXINT]); "" -> none. The library checks them against the vocabulary. */
static gboolean
parse_token_list (const char *text, int **tokens, int *n, GError **error)
{
  *tokens = NULL;
  *n = 0;
  g_auto (GStrv) parts = g_strsplit (text, ",", -1);
  guint count = g_strv_length (parts);
  if (count == 1 && !*g_strstrip (parts[0]))
    return TRUE;
  *tokens = g_new (int, count);
  for (guint i = 0; i < count; i++) {
    guint64 v;
    g_autoptr (GError) e = NULL;
    if (!g_ascii_string_to_unsigned (g_strstrip (parts[i]), 10, 0, G_MAXINT, &v, &e)) {
      g_set_error (error, PPX_ERROR, PPX_ERROR_INVALID, "--text-prompt-tokens: item %u ('%s'): %s", i + 1,
                   parts[i], e->message);
      g_clear_pointer (tokens, g_free);
      return FALSE;
    }
    (*tokens)[i] = (int) v;
  }
  *n = (int) count;
  return TRUE;
}

/* Text from the command line, as UTF-8: taken as is when it is UTF-8 (whatever the locale says: LANG=C
 * and a UTF-8 terminal are common), else converted from the locale's character set. GOption's own
 * conversion (G_OPTION_ARG_STRING) refuses any non-ASCII byte under LANG=C, naming no option. */
static gboolean
text_option_to_utf8 (const char *option, char **text, GError **error)
{
  if (!*text || g_utf8_validate (*text, -1, NULL))
    return TRUE;
  const char *charset;
  g_get_charset (&charset);
  g_autoptr (GError) e = NULL;
  char *utf8 = g_locale_to_utf8 (*text, -1, NULL, NULL, &e);
  if (!utf8) {
    g_set_error (error, PPX_ERROR, PPX_ERROR_INVALID, "%s: the text is neither UTF-8 nor in the locale's character "
                 "set (%s): %s", option, charset, e->message);
    return FALSE;
  }
  g_free (*text);
  *text = utf8;
  return TRUE;
}

/* The directory a file is written into must exist before the (long) run, not after it. */
static gboolean
check_writable_dir (const char *option, const char *path, GError **error)
{
  g_autofree char *dir = g_path_get_dirname (path);
  if (g_file_test (dir, G_FILE_TEST_IS_DIR) && !g_file_test (path, G_FILE_TEST_IS_DIR))
    return TRUE;
  g_set_error (error, PPX_ERROR, PPX_ERROR_IO, "%s %s: %s", option, path,
               g_file_test (path, G_FILE_TEST_IS_DIR) ? "is a directory" : "its directory does not exist");
  return FALSE;
}

/* A voice prompt is a file, or a bare NAME for DIR/voices/NAME.pt (the library's rule); say where it was
 * looked for before anything is loaded. */
static gboolean
check_voice_prompt (const RunSettings *s, GError **error)
{
  const char *v = s->voice_prompt;
  if (!v)
    return TRUE;
  if (g_file_test (v, G_FILE_TEST_EXISTS)) {
    const char *problem = ppx_file_problem (v);
    if (problem)
      g_set_error (error, PPX_ERROR, PPX_ERROR_INVALID,
                   "--voice-prompt %s: %s; it takes an audio or .pt file, or a NAME of the model's voices/", v,
                   problem);
    return problem == NULL;
  }
  g_autofree char *base = g_str_has_suffix (v, ".pt") ? g_strdup (v) : g_strconcat (v, ".pt", NULL);
  g_autofree char *named = g_build_filename (s->model_dir, "voices", base, NULL);
  if (!strchr (v, '/') && g_file_test (named, G_FILE_TEST_EXISTS))
    return TRUE;
  if (strchr (v, '/'))
    g_set_error (error, PPX_ERROR, PPX_ERROR_MISSING, "--voice-prompt %s: no such file", v);
  else
    g_set_error (error, PPX_ERROR, PPX_ERROR_MISSING, "--voice-prompt %s: neither a file nor %s", v, named);
  return FALSE;
}

typedef struct {
  char *seed, *quantization, *backend, *kv_cache_format, *text_prompt_tokens;
  gboolean no_voice_normalize;
} RawOptions;

/* Checks and converts what GOption cannot: names, ranges, exclusive options, empty strings. */
static gboolean
finish_settings (RunSettings *s, const RawOptions *raw, GError **error)
{
  if (!s->model_dir || !s->input || !s->output) {
    g_set_error (error, PPX_ERROR, PPX_ERROR_INVALID, "--model-dir, --input and --output are required (see --help)");
    return FALSE;
  }
  s->voice_normalize = !raw->no_voice_normalize;
  if (!text_option_to_utf8 ("--text-prompt", &s->text_prompt, error))
    return FALSE;
  if (raw->seed) {
    g_autoptr (GError) e = NULL;
    if (!g_ascii_string_to_unsigned (raw->seed, 10, 0, G_MAXINT64, &s->seed, &e)) {
      g_set_error (error, PPX_ERROR, PPX_ERROR_INVALID, "--seed '%s': %s", raw->seed, e->message);
      return FALSE;
    }
  }
  const struct {
    const char *option, *value;
    gboolean ok;
    const char *const *names;
  } choices[] = {
    {"--quantization", raw->quantization, !raw->quantization || ppx_quantization_from_name (raw->quantization, &s->quantization),
     ppx_quantization_names ()},
    {"--backend", raw->backend, !raw->backend || ppx_backend_kind_from_name (raw->backend, &s->backend),
     ppx_backend_kind_names ()},
    {"--kv-cache-format", raw->kv_cache_format,
     !raw->kv_cache_format || ppx_kv_format_from_name (raw->kv_cache_format, &s->kv_cache_format),
     ppx_kv_format_names ()},
  };
  for (guint i = 0; i < G_N_ELEMENTS (choices); i++)
    if (!choices[i].ok) {
      g_autofree char *names = ppx_names_choice (choices[i].names);
      g_set_error (error, PPX_ERROR, PPX_ERROR_INVALID, "%s '%s': use %s", choices[i].option, choices[i].value, names);
      return FALSE;
    }
  const struct { const char *name; double value; } temps[] = {{"--temp-audio", s->temp_audio},
                                                              {"--temp-text", s->temp_text}};
  for (guint i = 0; i < G_N_ELEMENTS (temps); i++)
    if (!(isfinite (temps[i].value) && temps[i].value >= 0)) {
      g_set_error (error, PPX_ERROR, PPX_ERROR_INVALID, "%s %g: must be a number >= 0 (0 = greedy)", temps[i].name,
                   temps[i].value);
      return FALSE;
    }
  const struct { const char *name; int value; } ints[] = {{"--topk-audio", s->topk_audio},
                                                          {"--topk-text", s->topk_text},
                                                          {"--device", s->device}};
  for (guint i = 0; i < G_N_ELEMENTS (ints); i++)
    if (ints[i].value < 0) {
      g_set_error (error, PPX_ERROR, PPX_ERROR_INVALID, "%s %d: must be >= 0", ints[i].name, ints[i].value);
      return FALSE;
    }
  if (raw->text_prompt_tokens &&
      !parse_token_list (raw->text_prompt_tokens, &s->text_prompt_tokens, &s->n_text_prompt_tokens, error))
    return FALSE;
  if (s->text_prompt && !*g_strstrip (s->text_prompt)) {
    g_printerr (PROG ": --text-prompt is empty: running without a text prompt\n");
    g_clear_pointer (&s->text_prompt, g_free);
  }
  if (s->text_prompt && s->n_text_prompt_tokens > 0) {
    g_set_error (error, PPX_ERROR, PPX_ERROR_INVALID, "give either --text-prompt or --text-prompt-tokens, not both");
    return FALSE;
  }
  if (s->voice_prompt && !*s->voice_prompt)
    g_clear_pointer (&s->voice_prompt, g_free);
  if (!g_file_test (s->model_dir, G_FILE_TEST_IS_DIR)) {
    g_set_error (error, PPX_ERROR, PPX_ERROR_MISSING, "%s: model directory does not exist", s->model_dir);
    return FALSE;
  }
  const char *input_problem = ppx_file_problem (s->input);
  if (input_problem) {
    g_set_error (error, PPX_ERROR, PPX_ERROR_MISSING, "%s: %s; --input takes an audio file", s->input,
                 input_problem);
    return FALSE;
  }
  return check_voice_prompt (s, error) && check_writable_dir ("--output", s->output, error) &&
         (!s->output_json || check_writable_dir ("--output-json", s->output_json, error));
}

static gboolean
run (const RunSettings *s, GError **error)
{
  RunOutput out;
  if (!run_conversation (s, &out, error))
    return FALSE;
  gboolean ok = ppx_audio_write_f32 (s->output, out.pcm, out.n_samples, RUN_SAMPLE_RATE, error) &&
                (!s->output_json || run_json_write (s->output_json, s, &out, error));
  if (ok)
    g_printerr (PROG ": %" G_GSIZE_FORMAT " frames (%.2f s of audio) in %.2f s on %s (%s, %s KV cache)\n",
                out.n_frames, (double) out.n_samples / RUN_SAMPLE_RATE, out.seconds, out.backend, out.quantization,
                out.kv_cache_format);
  run_output_clear (&out);
  return ok;
}

int
main (int argc, char **argv)
{
  setlocale (LC_ALL, ""); /* messages and the command line's character set */
  RunSettings s;
  run_settings_init (&s);
  RawOptions raw = {0};
  GOptionEntry entries[] = {
    {"model-dir", 0, 0, G_OPTION_ARG_FILENAME, &s.model_dir, "Model directory (published layout)", "DIR"},
    {"input", 0, 0, G_OPTION_ARG_FILENAME, &s.input, "The user's audio: any format GStreamer decodes", "FILE"},
    {"output", 0, 0, G_OPTION_ARG_FILENAME, &s.output, "The agent's audio: 32-bit float 24 kHz mono WAV, as long as "
     "the input", "OUT.wav"},
    {"output-json", 0, 0, G_OPTION_ARG_FILENAME, &s.output_json, "Per-frame tokens and text, and the settings",
     "OUT.json"},
    {"voice-prompt", 0, 0, G_OPTION_ARG_FILENAME, &s.voice_prompt, "Voice prompt: audio file, .pt file, or NAME "
     "(DIR/voices/NAME.pt)", "FILE|NAME"},
    {"no-voice-normalize", 0, 0, G_OPTION_ARG_NONE, &raw.no_voice_normalize, "Do not bring an audio voice prompt to "
     "-24 LUFS", NULL},
    {"voice-cache-dir", 0, 0, G_OPTION_ARG_FILENAME, &s.voice_cache_dir, "Cache computed audio voice prompts here",
     "DIR"},
    /* FILENAME: the bytes as given, made UTF-8 by text_option_to_utf8 */
    {"text-prompt", 0, 0, G_OPTION_ARG_FILENAME, &s.text_prompt, "System text prompt (needs the tokenizer; \"\" = none)",
     "TEXT"},
    {"text-prompt-tokens", 0, 0, G_OPTION_ARG_FILENAME, &raw.text_prompt_tokens, "System text prompt as token ids",
     "1,2,3"},
    {"greedy", 0, 0, G_OPTION_ARG_NONE, &s.greedy, "Greedy decoding (argmax) instead of sampling", NULL},
    {"seed", 0, 0, G_OPTION_ARG_FILENAME, &raw.seed, "Sampling seed (default 42424242)", "N"},
    {"temp-audio", 0, 0, G_OPTION_ARG_DOUBLE, &s.temp_audio, "Audio sampling temperature (default 0.8)", "T"},
    {"temp-text", 0, 0, G_OPTION_ARG_DOUBLE, &s.temp_text, "Text sampling temperature (default 0.7)", "T"},
    {"topk-audio", 0, 0, G_OPTION_ARG_INT, &s.topk_audio, "Audio top-k (default 250; 0 = all)", "K"},
    {"topk-text", 0, 0, G_OPTION_ARG_INT, &s.topk_text, "Text top-k (default 25; 0 = all)", "K"},
    {"quantization", 0, 0, G_OPTION_ARG_FILENAME, &raw.quantization, "LM weights: auto, bf16, int8 or int4 "
     "(default auto)", "Q"},
    {"backend", 0, 0, G_OPTION_ARG_FILENAME, &raw.backend, "Compute backend: auto, cpu or cuda (default auto)", "B"},
    {"device", 0, 0, G_OPTION_ARG_INT, &s.device, "GPU index for cuda (default 0)", "N"},
    {"kv-cache-format", 0, 0, G_OPTION_ARG_FILENAME, &raw.kv_cache_format, "KV cache: auto, f32, bf16 or fp8 "
     "(default auto: the library's default)", "F"},
    {NULL},
  };
  g_autoptr (GOptionContext) ctx = g_option_context_new ("- the offline PersonaPlex conversation");
  g_option_context_add_main_entries (ctx, entries, NULL);
  g_autoptr (GError) error = NULL;
  int rc = 0;
  if (!g_option_context_parse (ctx, &argc, &argv, &error) || !gst_init_check (NULL, NULL, &error) ||
      !run_element_register (&error))
    rc = fail ("%s", error->message);
  else if (argc > 1)
    rc = fail ("unexpected argument '%s' (see --help)", argv[1]);
  else if (!finish_settings (&s, &raw, &error) || !run (&s, &error))
    rc = fail ("%s", error->message);
  g_free (raw.seed);
  g_free (raw.quantization);
  g_free (raw.backend);
  g_free (raw.kv_cache_format);
  g_free (raw.text_prompt_tokens);
  run_settings_clear (&s);
  return rc;
}
