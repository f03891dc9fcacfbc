/* LMGen: PersonaPlex's streaming state machine around the LM (spec §5.1-5.4): the 4-column token
 * cache with per-stream delays, provided (teacher-forced) tokens, start tokens and the output lag. */
#ifndef PPX_LMGEN_H
#define PPX_LMGEN_H

#include "lm.h"

G_BEGIN_DECLS

#define PPX_LMGEN_COLS 4 /* max_delay + 3 */

struct PpxLmGen {
  PpxLmConfig cfg;
  int cache[PPX_MAX_STREAMS][PPX_LMGEN_COLS];
  gboolean provided[PPX_MAX_STREAMS][PPX_LMGEN_COLS];
  gint64 offset;
  gboolean full_depformer; /* run all dep_q steps even where their outputs are provided (tests) */
  int last_dep_steps;      /* depformer steps run by the last model call */
  GArray *capture;         /* when set: the input embedding of every model call is appended (floats);
                            * the row's capture points into it until the next prepare */
};

void ppx_lmgen_init (PpxLmGen *g, const PpxLmConfig *cfg);
/* offset 0 and nothing provided; the cache itself is kept, as in the reference. */
void ppx_lmgen_reset (PpxLmGen *g);

/* One call, in two halves around the batched model step (ppx_lm_batch_step).
 * prepare: user/agent: num_codebooks codes or NULL; text: id or -1. embedding: NULL, or dim floats that
 * replace the model input (the reference's step_embeddings, where every stream is provided by the caller).
 * Writes the inputs into the cache and returns TRUE with *row filled (all but row->slot) when the call
 * runs the model; FALSE when it does not (the first call of a token run): then the call is complete and
 * yields no frame.
 * finish: after the model step of a prepared row; returns TRUE and fills out[1 + n_q] when the call
 * yields a frame. */
gboolean ppx_lmgen_prepare (PpxLmGen *g, const int *user, const int *agent, int text, const float *embedding,
                            const PpxSampling *smp, PpxLmRow *row);
gboolean ppx_lmgen_finish (PpxLmGen *g, const PpxLmRow *row, int *out);

/* ---- the same state on the device (lmgen-state.h) ----
 * During the conversation the LM batch keeps each session's LMGen state in a device tensor and runs the
 * calls there (ppx_lm_batch_run_tick: ppx_op_lmgen_prepare/finish); prompts run here on the host. These convert
 * between the two. */
void ppx_lmgen_dims (const PpxLmConfig *c, PpxLmgenDims *d);
/* g's offset, flags, provided columns and token cache as PPX_LMGEN_STATE words (the STEPS word 0). */
void ppx_lmgen_pack (const PpxLmGen *g, int32_t *state);
/* The reverse (cfg and capture are kept; last_dep_steps = the STEPS word, 0 when negative). */
void ppx_lmgen_unpack (PpxLmGen *g, const int32_t *state);
/* What ppx_lmgen_prepare would set for the next conversation call (user codes, no agent codes, no text, no
 * embedding), g unchanged: FALSE when that call would not run the model (offset 0); else *n_steps and
 * *sample as in the row. */
gboolean ppx_lmgen_peek_conversation (const PpxLmGen *g, int *n_steps, gboolean *sample);

G_END_DECLS
#endif
