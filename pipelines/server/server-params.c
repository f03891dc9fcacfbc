/* personaplex-server: a call's parameters (server-params.h). */
#include "server-params.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MAX_VOICES 4096

static GQuark
params_error_quark (void)
{
  return g_quark_from_static_string ("ppx-server-params");
}

static gboolean
is_voice_file (const char *name)
{
  static const char *const suffixes[] = {".pt", ".wav", ".flac"};
  if (name[0] == '.')
    return FALSE;
  for (guint i = 0; i < G_N_ELEMENTS (suffixes); i++)
    if (g_str_has_suffix (name, suffixes[i]) && strlen (name) > strlen (suffixes[i]))
      return TRUE;
  return FALSE;
}

static int
compare_names (gconstpointer a, gconstpointer b)
{
  return strcmp (*(char *const *) a, *(char *const *) b);
}

GStrv
ppx_server_list_voices (const char *model_dir)
{
  g_autofree char *dir = g_build_filename (model_dir, "voices", NULL);
  g_autoptr (GPtrArray) names = g_ptr_array_new ();
  g_autoptr (GDir) d = g_dir_open (dir, 0, NULL);
  g_autofree char *real_dir = realpath (dir, NULL);
  const char *name;
  while (d && real_dir && (name = g_dir_read_name (d)) && names->len < MAX_VOICES) {
    g_autofree char *path = g_build_filename (dir, name, NULL);
    /* a link is followed only within voices/: a call must not read what the directory merely points at */
    g_autofree char *real = realpath (path, NULL);
    gboolean inside = real && g_str_has_prefix (real, real_dir) && real[strlen (real_dir)] == '/';
    if (is_voice_file (name) && g_utf8_validate (name, -1, NULL) && inside && g_file_test (real, G_FILE_TEST_IS_REGULAR))
      g_ptr_array_add (names, g_strdup (name));
  }
  g_ptr_array_sort (names, compare_names);
  g_ptr_array_add (names, NULL);
  return (GStrv) g_ptr_array_free (g_steal_pointer (&names), FALSE);
}

/* "NATF2.pt" as listed, or "NATF2" for NATF2.pt (as --voice-prompt takes it); never a path. */
static const char *
find_voice (const char *name, const char *const *voices)
{
  for (guint i = 0; voices && voices[i]; i++) {
    if (g_str_equal (name, voices[i]))
      return voices[i];
    if (g_str_has_suffix (voices[i], ".pt") && strlen (voices[i]) == strlen (name) + 3 &&
        strncmp (voices[i], name, strlen (name)) == 0)
      return voices[i];
  }
  return NULL;
}

static gboolean
parse_double (const char *key, const char *text, double min, double max, double *out, GError **error)
{
  char *end = NULL;
  double v = g_ascii_strtod (text, &end);
  if (end == text || *end || !isfinite (v) || v < min || v > max) {
    g_autofree char *shown = g_strescape (text, NULL);
    g_set_error (error, params_error_quark (), 0, "%s '%.40s': use a number from %g to %g", key, shown, min, max);
    return FALSE;
  }
  *out = v;
  return TRUE;
}

static gboolean
parse_int (const char *key, const char *text, gint64 min, gint64 max, gint64 *out, GError **error)
{
  if (!g_ascii_string_to_signed (text, 10, min, max, out, NULL)) {
    g_autofree char *shown = g_strescape (text, NULL);
    g_set_error (error, params_error_quark (), 0, "%s '%.40s': use an integer from %" G_GINT64_FORMAT " to %"
                 G_GINT64_FORMAT, key, shown, min, max);
    return FALSE;
  }
  return TRUE;
}

/* Parameters the element has no counterpart for, named once per server. */
static void
note_ignored (const char *key)
{
  static GMutex lock;
  static GHashTable *seen;
  g_mutex_lock (&lock);
  if (!seen)
    seen = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, NULL);
  gboolean first = g_hash_table_size (seen) < 64 && g_hash_table_add (seen, g_strdup (key));
  g_mutex_unlock (&lock);
  if (first) {
    g_autofree char *shown = g_strescape (key, NULL);
    g_printerr ("personaplex-server: note: call parameter '%.64s' has no counterpart here and is ignored (said once)\n",
                shown);
  }
}

/* A seed: -1 (or absent) leaves the server's; audio_seed is accepted but the element has one seed for both
 * streams, so it is ignored (named once); text_seed counts when seed is absent. */
static gboolean
parse_seed (GHashTable *query, PpxCallParams *p, GError **error)
{
  const char *keys[] = {"seed", "text_seed", "audio_seed"};
  for (guint i = 0; i < G_N_ELEMENTS (keys); i++) {
    const char *text = g_hash_table_lookup (query, keys[i]);
    gint64 v;
    if (!text || !*text)
      continue;
    if (!parse_int (keys[i], text, -1, G_MAXINT64, &v, error))
      return FALSE;
    if (i == 2)
      note_ignored (keys[i]);
    else if (v >= 0 && !p->has_seed) {
      p->has_seed = TRUE;
      p->seed = (guint64) v;
    }
  }
  return TRUE;
}

static gboolean
parse_sampling (GHashTable *query, PpxCallParams *p, GError **error)
{
  const char *v;
  gint64 k;
  if ((v = g_hash_table_lookup (query, "text_temperature")) && *v) {
    if (!parse_double ("text_temperature", v, 0, 10, &p->temp_text, error))
      return FALSE;
    p->has_temp_text = TRUE;
  }
  if ((v = g_hash_table_lookup (query, "audio_temperature")) && *v) {
    if (!parse_double ("audio_temperature", v, 0, 10, &p->temp_audio, error))
      return FALSE;
    p->has_temp_audio = TRUE;
  }
  if ((v = g_hash_table_lookup (query, "text_topk")) && *v) {
    if (!parse_int ("text_topk", v, 1, 65536, &k, error))
      return FALSE;
    p->topk_text = (int) k;
    p->has_topk_text = TRUE;
  }
  if ((v = g_hash_table_lookup (query, "audio_topk")) && *v) {
    if (!parse_int ("audio_topk", v, 1, 65536, &k, error))
      return FALSE;
    p->topk_audio = (int) k;
    p->has_topk_audio = TRUE;
  }
  return TRUE;
}

static gboolean
parse_prompts (GHashTable *query, const char *model_dir, const char *const *voices, PpxCallParams *p,
               GError **error)
{
  const char *text = g_hash_table_lookup (query, "text_prompt");
  if (text && *text) {
    if (strlen (text) > PPX_CALL_MAX_TEXT_PROMPT || !g_utf8_validate (text, -1, NULL)) {
      g_set_error (error, params_error_quark (), 0, "text_prompt: use UTF-8 text of at most %d bytes",
                   PPX_CALL_MAX_TEXT_PROMPT);
      return FALSE;
    }
    p->text_prompt = g_strdup (text);
  }
  const char *voice = g_hash_table_lookup (query, "voice_prompt");
  if (voice && *voice) {
    const char *file = find_voice (voice, voices);
    if (!file) {
      g_autofree char *shown = g_strescape (voice, NULL);
      g_set_error (error, params_error_quark (), 0, "voice_prompt '%.64s': not one of the model's voices "
                   "(GET /api/voices lists them)", shown);
      return FALSE;
    }
    p->voice_prompt = g_build_filename (model_dir, "voices", file, NULL);
  }
  return TRUE;
}

gboolean
ppx_call_params_parse (GHashTable *query, const char *model_dir, const char *const *voices, PpxCallParams *p,
                       GError **error)
{
  static const char *const known[] = {"text_prompt", "voice_prompt", "seed", "text_seed", "audio_seed",
                                      "text_temperature", "text_topk", "audio_temperature", "audio_topk",
                                      "token", NULL};
  memset (p, 0, sizeof *p);
  if (!query)
    return TRUE;
  if (!parse_prompts (query, model_dir, voices, p, error) || !parse_seed (query, p, error) ||
      !parse_sampling (query, p, error)) {
    ppx_call_params_clear (p);
    return FALSE;
  }
  GHashTableIter it;
  gpointer key;
  g_hash_table_iter_init (&it, query);
  while (g_hash_table_iter_next (&it, &key, NULL))
    if (!g_strv_contains (known, key))
      note_ignored (key);
  return TRUE;
}

char *
ppx_call_params_describe (const PpxCallParams *p, const char *default_voice, gboolean default_text)
{
  return g_strdup_printf ("voice %s, text prompt %s%s",
                          p->voice_prompt ? p->voice_prompt : default_voice ? default_voice : "none",
                          p->text_prompt ? "of the call" : default_text ? "default" : "none",
                          p->has_seed ? ", seed of the call" : "");
}

void
ppx_call_params_clear (PpxCallParams *p)
{
  g_free (p->text_prompt);
  g_free (p->voice_prompt);
  memset (p, 0, sizeof *p);
}
