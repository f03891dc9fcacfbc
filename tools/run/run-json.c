/* Written by hand rather than by a pretty printer so that each frame stays on one line and the
 * temperatures read as given (0.8, not 0.80000001192092896); strings are escaped by json-glib. */
#include "run-json.h"

#include <json-glib/json-glib.h>

#include "ppx-common.h"
#include "tool-file.h"

static void
append_string (GString *s, const char *value)
{
  if (!value) {
    g_string_append (s, "null");
    return;
  }
  g_autofree char *valid = g_utf8_make_valid (value, -1); /* a piece may be a partial UTF-8 sequence */
  JsonNode *n = json_node_init_string (json_node_alloc (), valid);
  char *text = json_to_string (n, FALSE);
  g_string_append (s, text);
  g_free (text);
  json_node_unref (n);
}

/* The shortest decimal that reads back as the same float (the value the library samples with). */
static void
append_float (GString *s, float value)
{
  static const char *const formats[] = {"%.1g", "%.2g", "%.3g", "%.4g", "%.5g", "%.6g", "%.7g", "%.8g", "%.9g"};
  char buf[G_ASCII_DTOSTR_BUF_SIZE];
  for (guint i = 0; i < G_N_ELEMENTS (formats); i++) {
    g_ascii_formatd (buf, sizeof buf, formats[i], value);
    if ((float) g_ascii_strtod (buf, NULL) == value)
      break;
  }
  g_string_append (s, buf);
}

/* An object member of the top-level object ("settings", "run"): its members one a line, 4 spaces in. */
typedef struct {
  GString *s;
  guint n; /* members written */
} Section;

static Section
section_begin (GString *s, const char *name)
{
  g_string_append_printf (s, "  \"%s\": {", name);
  return (Section){.s = s};
}

static void
section_end (Section *o)
{
  g_string_append (o->s, "\n  },\n");
}

/* A member's key: ,\n    "key": (no comma before the first) */
static void
append_key (Section *o, const char *key)
{
  g_string_append_printf (o->s, "%s\n    \"%s\": ", o->n++ ? "," : "", key);
}

static void
member_string (Section *o, const char *key, const char *value)
{
  append_key (o, key);
  append_string (o->s, value);
}

static void
member_float (Section *o, const char *key, float value)
{
  append_key (o, key);
  append_float (o->s, value);
}

static void G_GNUC_PRINTF (3, 4)
member_printf (Section *o, const char *key, const char *format, ...)
{
  va_list ap;
  append_key (o, key);
  va_start (ap, format);
  g_string_append_vprintf (o->s, format, ap);
  va_end (ap);
}

static void
append_settings (GString *json, const RunSettings *st)
{
  Section sec = section_begin (json, "settings"), *s = &sec;
  member_string (s, "model_dir", st->model_dir);
  member_string (s, "input", st->input);
  member_string (s, "output", st->output);
  member_string (s, "output_json", st->output_json);
  member_string (s, "voice_prompt", st->voice_prompt);
  member_printf (s, "voice_normalize", "%s", st->voice_normalize ? "true" : "false");
  member_string (s, "voice_cache_dir", st->voice_cache_dir);
  member_string (s, "text_prompt", st->text_prompt);
  append_key (s, "text_prompt_tokens");
  if (st->n_text_prompt_tokens > 0) {
    g_string_append_c (json, '[');
    for (int i = 0; i < st->n_text_prompt_tokens; i++)
      g_string_append_printf (json, i ? ", %d" : "%d", st->text_prompt_tokens[i]);
    g_string_append_c (json, ']');
  } else {
    g_string_append (json, "null");
  }
  member_printf (s, "greedy", "%s", st->greedy ? "true" : "false");
  member_printf (s, "seed", "%" G_GUINT64_FORMAT, st->seed);
  member_float (s, "temp_audio", st->temp_audio);
  member_float (s, "temp_text", st->temp_text);
  member_printf (s, "topk_audio", "%d", st->topk_audio);
  member_printf (s, "topk_text", "%d", st->topk_text);
  member_string (s, "quantization", ppx_quantization_name (st->quantization));
  member_string (s, "backend", ppx_backend_kind_name (st->backend));
  member_printf (s, "device", "%d", st->device);
  member_string (s, "kv_cache_format", ppx_kv_format_name (st->kv_cache_format));
  section_end (s);
}

static void
append_run (GString *json, const RunOutput *out)
{
  Section sec = section_begin (json, "run"), *s = &sec;
  member_string (s, "backend", out->backend);
  member_string (s, "quantization", out->quantization);
  member_string (s, "kv_cache_format", out->kv_cache_format);
  member_printf (s, "sample_rate", "%d", RUN_SAMPLE_RATE);
  member_printf (s, "samples", "%" G_GSIZE_FORMAT, out->n_samples);
  member_printf (s, "frames", "%" G_GSIZE_FORMAT, out->n_frames);
  section_end (s);
}

static void
append_frames (GString *s, const RunOutput *out)
{
  GString *transcript = g_string_new (NULL);
  g_string_append (s, "  \"frames\": [");
  for (gsize t = 0; t < out->n_frames; t++) {
    const RunFrame *f = &out->frames[t];
    g_string_append (s, t ? ",\n    {\"tokens\": [" : "\n    {\"tokens\": [");
    for (int k = 0; k < RUN_TOKENS_PER_FRAME; k++)
      g_string_append_printf (s, k ? ", %d" : "%d", f->tokens[k]);
    g_string_append (s, "], \"text\": ");
    append_string (s, f->text);
    g_string_append_c (s, '}');
    if (f->text)
      g_string_append (transcript, f->text);
  }
  g_string_append (s, out->n_frames ? "\n  ],\n  \"transcript\": " : "],\n  \"transcript\": ");
  append_string (s, transcript->str);
  g_string_append (s, "\n");
  g_string_free (transcript, TRUE);
}

gboolean
run_json_write (const char *path, const RunSettings *settings, const RunOutput *out, GError **error)
{
  GString *s = g_string_new ("{\n");
  append_settings (s, settings);
  append_run (s, out);
  append_frames (s, out);
  g_string_append (s, "}\n");
  gboolean ok = tool_write_file (path, s->str, s->len, error);
  g_string_free (s, TRUE);
  return ok;
}
