/* Library-internal access to a session's parts, for tests and benchmarks (not installed). */
#ifndef PERSONAPLEX_INTERNAL_H
#define PERSONAPLEX_INTERNAL_H

#include "lm.h"
#include "lmgen.h"
#include "personaplex.h"

PpxLmGen *ppx_session_lmgen (PpxSession *s);
PpxLmState *ppx_session_lm_state (PpxSession *s);

#endif
