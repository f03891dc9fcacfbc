/* The engine lock (engine-internal.h): one mutex over the engine's slots, rows and prompt schedule, held by
 * a tick for the whole tick and by the prompts one frame, or one prefill chunk, at a time; a tick that waits
 * for it goes first (ticks_waiting, turn). A tick notes its arrival and run time in the prompt clock before
 * it lets go, for the prompt schedule (prompt-prefill.c) to read.
 *
 * The tick (engine.c) and the prompt machinery (session.c, prompt-prefill.c, voice-snapshot.c) both lock
 * through here: the arrows run engine.c -> prompt-prefill.c, voice-snapshot.c (the engine creates and frees
 * them) -> engine-lock.c, and nothing of the prompts calls back into the tick. */
#include "engine-internal.h"

void
ppx_engine_lock_for_prompt (PpxEngine *e)
{
  g_mutex_lock (&e->lock);
  while (g_atomic_int_get (&e->ticks_waiting) > 0)
    g_cond_wait (&e->turn, &e->lock);
}

void
ppx_engine_unlock (PpxEngine *e)
{
  g_mutex_unlock (&e->lock);
}

void
ppx_engine_lock_for_tick (PpxEngine *e)
{
  g_atomic_int_inc (&e->ticks_waiting);
  g_mutex_lock (&e->lock);
  g_atomic_int_dec_and_test (&e->ticks_waiting);
}

void
ppx_engine_unlock_after_tick (PpxEngine *e)
{
  g_cond_broadcast (&e->turn);
  g_mutex_unlock (&e->lock);
}

void
ppx_engine_note_tick (PpxEngine *e, gint64 arrival, gint64 start, gint64 end)
{
  PpxPromptClock *c = &e->clock;
  c->arrival[c->n_ticks % G_N_ELEMENTS (c->arrival)] = arrival;
  c->n_ticks++;
  c->last_run_us = end - start;
  c->stalled = FALSE;
}
