/* Voice prompts (spec §5.5 step 1, §6): from audio (any libsndfile format, -24 LUFS unless disabled,
 * encoded with Mimi) or from a published `.pt` file (embeddings + token cache, replayed). */
#ifndef PPX_VOICE_PROMPT_H
#define PPX_VOICE_PROMPT_H

#include "config.h"
#include "mimi.h"

G_BEGIN_DECLS

/* Frames a voice prompt may have (embedding vectors or code frames); a file declaring more is refused. */
#define PPX_VOICE_PROMPT_MAX_FRAMES (1 << 20)

typedef struct {
  gboolean from_embeddings;
  int n_frames;      /* audio: code frames N_v; embeddings: vectors (N_v - 1) */
  int n_codebooks;
  int *codes;        /* audio: [n_frames, n_codebooks] agent codes */
  int dim;
  float *embeddings; /* embeddings: [n_frames, dim] */
  int cache[PPX_MAX_STREAMS][4]; /* embeddings: the token cache to restore */
} PpxVoicePrompt;

/* From audio: read, normalise to -24 LUFS if asked, encode with a fresh Mimi state. */
PpxVoicePrompt *ppx_voice_prompt_from_audio (PpxMimiState *mimi, const PpxConfig *cfg, const char *path,
                                             gboolean normalize, GError **error);
/* From a `.pt` file (or a safetensors file with the same two tensors, as our cache writes). */
PpxVoicePrompt *ppx_voice_prompt_from_embeddings_file (const PpxConfig *cfg, const char *path, GError **error);
gboolean ppx_voice_prompt_save (const PpxVoicePrompt *vp, const char *path, GError **error);
void ppx_voice_prompt_free (PpxVoicePrompt *vp);

G_END_DECLS
#endif
