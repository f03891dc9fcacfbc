/* Mimi, the streaming neural audio codec (spec §4): 80 ms of 24 kHz audio <-> 8 codes per frame. */
#ifndef PPX_MIMI_H
#define PPX_MIMI_H

#include "backend.h"
#include "config.h"
#include "safetensors.h"

G_BEGIN_DECLS

typedef struct PpxMimi PpxMimi;           /* weights, read-only, shareable */
typedef struct PpxMimiState PpxMimiState; /* one stream's encoder + decoder state */

PpxMimi *ppx_mimi_load (PpxBackend *be, const PpxMimiConfig *cfg, const PpxSafetensors *st, GError **error);
void ppx_mimi_free (PpxMimi *mimi);
guint64 ppx_mimi_weight_bytes (const PpxMimi *mimi);
const PpxMimiConfig *ppx_mimi_config (const PpxMimi *mimi);

PpxMimiState *ppx_mimi_state_new (PpxMimi *mimi, GError **error);
void ppx_mimi_state_free (PpxMimiState *s);
/* Fresh encoder and decoder state (the reference's reset_streaming). */
void ppx_mimi_reset (PpxMimiState *s);

/* Device-side: encode one frame (frame_size samples in `pcm`) into codes[code_off .. +num_codebooks). */
void ppx_mimi_encode_frame (PpxMimiState *s, const PpxTensor *pcm, PpxTensor *codes, int code_off);
/* Device-side: decode num_codebooks codes at codes[code_off] into frame_size samples. */
void ppx_mimi_decode_frame (PpxMimiState *s, const PpxTensor *codes, int code_off, PpxTensor *pcm);
/* Host conveniences (upload, run, download). `latent` (dimension floats) may be NULL. */
void ppx_mimi_encode_host (PpxMimiState *s, const float *pcm, int *codes, float *latent);
void ppx_mimi_decode_host (PpxMimiState *s, const int *codes, float *pcm);

G_END_DECLS
#endif
