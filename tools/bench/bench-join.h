/* personaplex-bench --join: the join time of a new call while others run (docs/engine.md, "Prompt prefill").
 * B running sessions (--batch, at --context) are ticked in real time, one tick every frame period on a thread
 * of their own, while the main thread creates a session with a voice prompt and a text prompt and frees it
 * again, `joins` times, with the prompts step by step (when `compare`), as chunked prefill, and as chunked
 * prefill after copying the voice phase from the engine's snapshot of it (docs/engine.md). Printed per
 * mode: the join time (ppx_engine_session_new), its prompt chunks, and the running sessions' ticks during the
 * joins: their response (tick end minus the frame's arrival) and how many passed the frame period (a missed
 * frame), against the ticks without a join; then the chunk sizes' measured costs. */
#ifndef BENCH_JOIN_H
#define BENCH_JOIN_H

#include <stdio.h>

#include "bench-run.h"

G_BEGIN_DECLS

typedef struct {
  int joins;            /* measured joins per mode */
  double voice_seconds; /* the voice prompt (test audio, replayed from its embeddings as a .pt voice is) */
  int text_tokens;      /* the text prompt's tokens */
  int prompt_chunk;     /* the engine's largest chunk (0: its default) */
  gboolean compare;     /* also measure the step-by-step prompts, first */
} BenchJoin;

gboolean bench_run_join (const BenchSetup *s, const BenchJoin *j, FILE *out, GError **error);

G_END_DECLS
#endif
