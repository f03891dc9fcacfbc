/* The PersonaPlex LM (spec §3): temporal transformer + depformer, one frame at a time. */
#ifndef PPX_LM_H
#define PPX_LM_H

#include "backend.h"
#include "config.h"
#include "personaplex.h"
#include "safetensors.h"

G_BEGIN_DECLS

typedef struct PpxLm PpxLm;
typedef struct PpxLmState PpxLmState;

typedef struct {
  gboolean greedy;
  guint64 seed;
  float temp_text, temp_audio;
  int topk_text, topk_audio;
} PpxSampling;

PpxLm *ppx_lm_load (PpxBackend *be, const PpxLmConfig *cfg, const PpxSafetensors *st, PpxQuantization quant,
                    GError **error);
void ppx_lm_free (PpxLm *lm);
guint64 ppx_lm_weight_bytes (const PpxLm *lm);
const PpxLmConfig *ppx_lm_config (const PpxLm *lm);

PpxLmState *ppx_lm_state_new (PpxLm *lm, GError **error);
void ppx_lm_state_free (PpxLmState *s);
/* Position back to 0 (the reference's reset_streaming of the transformer). */
void ppx_lm_state_reset (PpxLmState *s);
gint64 ppx_lm_state_position (const PpxLmState *s);

/* The summed input embedding of 17 ids (audio tables in order, text last; -1 gives zeros). */
void ppx_lm_embed (PpxLmState *s, const int *ids, float *out);
/* One temporal step at the next position, from 17 ids or from an embedding (dim floats). */
void ppx_lm_temporal_tokens (PpxLmState *s, const int *ids);
void ppx_lm_temporal_embedding (PpxLmState *s, const float *emb);
/* After a temporal step: text logits, text sampling and `n_steps` depformer steps with teacher forcing.
 * forced[0..dep_q]: the provided token of each stream (text, then audio 1..dep_q) or -1.
 * out[0..n_steps]: the sampled tokens (always the sample, as the reference returns). */
void ppx_lm_sample_frame (PpxLmState *s, const int *forced, int n_steps, const PpxSampling *smp, guint64 frame,
                          int *out);
/* Logits of the last sample_frame (text_card floats; card floats of depformer step `step`). */
void ppx_lm_text_logits (PpxLmState *s, float *out);
void ppx_lm_audio_logits (PpxLmState *s, int step, float *out);

G_END_DECLS
#endif
