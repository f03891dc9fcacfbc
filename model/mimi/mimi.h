/* Mimi, the streaming neural audio codec (spec §4): 80 ms of 24 kHz audio <-> 8 codes per frame. */
#ifndef PPX_MIMI_H
#define PPX_MIMI_H

#include "backend.h"
#include "config.h"
#include "safetensors.h"

G_BEGIN_DECLS

typedef struct PpxMimi PpxMimi;           /* weights, read-only, shareable */
typedef struct PpxMimiBatch PpxMimiBatch; /* the streaming state of n rows + the scratch of a batch of n */
typedef struct PpxMimiState PpxMimiState; /* one stream (a batch of one row), for tools and voice prompts */

PpxMimi *ppx_mimi_load (PpxBackend *be, const PpxMimiConfig *cfg, const PpxSafetensors *st, GError **error);
void ppx_mimi_free (PpxMimi *mimi);
guint64 ppx_mimi_weight_bytes (const PpxMimi *mimi);
const PpxMimiConfig *ppx_mimi_config (const PpxMimi *mimi);

/* ---- batches: M rows per op ----
 * Row r holds one stream's encoder and decoder state (conv histories, transposed-conv tails, transformer
 * positions and KV caches). A call steps the consecutive rows [row0, row0 + M); each row's result depends
 * only on its own input and state. Rows start fresh (ppx_mimi_batch_reset_row); a stream moves to another
 * row with ppx_mimi_batch_move_row (the transformer caches stay where they are, found by indirection). */
PpxMimiBatch *ppx_mimi_batch_new (PpxMimi *mimi, int n_rows, GError **error);
void ppx_mimi_batch_free (PpxMimiBatch *b);
/* Device bytes ppx_mimi_batch_new allocates for n_rows. */
guint64 ppx_mimi_batch_bytes (const PpxMimi *mimi, int n_rows);
/* Fresh encoder and decoder state for a row (the reference's reset_streaming). */
void ppx_mimi_batch_reset_row (PpxMimiBatch *b, int row);
/* Row `to` takes over row `from`'s stream (from's old contents are lost; from is free afterwards). */
void ppx_mimi_batch_move_row (PpxMimiBatch *b, int from, int to);
/* Whether a row's encoder has had its first frame (its downsample history replicates that frame, a step
 * that depends on the host: a graph-recorded encode must only see started rows). mark_started makes a
 * row count as started without it (a row whose results are discarded). */
gboolean ppx_mimi_batch_row_started (const PpxMimiBatch *b, int row);
void ppx_mimi_batch_mark_started (PpxMimiBatch *b, int row);
/* Device-side: encode pcm [M, frame_size] into codes[m*code_stride + code_off + j], j < num_codebooks. */
void ppx_mimi_batch_encode (PpxMimiBatch *b, int row0, int M, const PpxTensor *pcm, PpxTensor *codes, int code_off,
                            int code_stride);
/* Device-side: decode codes[m*code_stride + code_off + j] into pcm [M, frame_size]. */
void ppx_mimi_batch_decode (PpxMimiBatch *b, int row0, int M, const PpxTensor *codes, int code_off, int code_stride,
                            PpxTensor *pcm);

/* ---- one stream ---- */
PpxMimiState *ppx_mimi_state_new (PpxMimi *mimi, GError **error);
void ppx_mimi_state_free (PpxMimiState *s);
/* Fresh encoder and decoder state (the reference's reset_streaming). */
void ppx_mimi_reset (PpxMimiState *s);
/* Host conveniences (upload, run, download). `latent` (dimension floats) may be NULL. */
void ppx_mimi_encode_host (PpxMimiState *s, const float *pcm, int *codes, float *latent);
void ppx_mimi_decode_host (PpxMimiState *s, const int *codes, float *pcm);

G_END_DECLS
#endif
