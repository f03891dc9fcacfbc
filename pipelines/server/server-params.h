/* personaplex-server: a call's persona, voice and sampling, from its query (both protocols take the same
 * parameters as the reference server's /api/chat): text_prompt, voice_prompt, seed / text_seed / audio_seed,
 * text_temperature, text_topk, audio_temperature, audio_topk. What is absent (or empty) keeps the server's
 * default (--text-prompt, --voice-prompt, --seed, --greedy). */
#ifndef PPX_SERVER_PARAMS_H
#define PPX_SERVER_PARAMS_H

#include <glib.h>

G_BEGIN_DECLS

#define PPX_CALL_MAX_TEXT_PROMPT 4096 /* bytes of a call's text prompt */

typedef struct {
  char *text_prompt;  /* as given (the library wraps it in <system> ... <system> unless it already is); NULL: default */
  char *voice_prompt; /* a path in the model's voices/; NULL: default */
  gboolean has_seed;
  guint64 seed;
  gboolean has_temp_text, has_temp_audio, has_topk_text, has_topk_audio;
  double temp_text, temp_audio;
  int topk_text, topk_audio;
} PpxCallParams;

/* The voice files of DIR/voices (.pt embeddings, or .wav/.flac audio), sorted; an empty list without the folder. */
GStrv ppx_server_list_voices (const char *model_dir);

/* Reads the call's parameters from `query` (NULL: none). A bad value (not a number, out of range, an unknown
 * voice, an oversized or non-UTF-8 prompt) is an error naming the parameter: the caller answers 400. Parameters
 * that have no counterpart here are accepted and named once in the log per server. */
gboolean ppx_call_params_parse (GHashTable *query, const char *model_dir, const char *const *voices,
                                PpxCallParams *p, GError **error);
void ppx_call_params_clear (PpxCallParams *p);
/* The log's words for a call's persona: "voice V, text prompt of the call|default|none[, seed of the call]", where
 * what the call leaves out is the server's (`default_voice`, NULL: none; `default_text`: the server has one). */
char *ppx_call_params_describe (const PpxCallParams *p, const char *default_voice, gboolean default_text);

G_END_DECLS
#endif
