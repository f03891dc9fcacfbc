/* Library-internal access to a session's parts, for tests and benchmarks (not installed). */
#ifndef PERSONAPLEX_INTERNAL_H
#define PERSONAPLEX_INTERNAL_H

#include "lm.h"
#include "lmgen.h"
#include "personaplex.h"

PpxLmGen *ppx_session_lmgen (PpxSession *s);
/* The logits of the session's row in the last LM step that stepped it (valid until the engine's next
 * tick or prompt frame): text_card floats, and card floats of depformer step `step`. */
void ppx_session_text_logits (PpxSession *s, float *out);
void ppx_session_audio_logits (PpxSession *s, int step, float *out);

#endif
