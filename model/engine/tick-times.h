/* Private: the wall times of an engine's recent ticks (ppx_engine_tick_times in personaplex.h) and the
 * debug delay that tests add to them (PPX_DEBUG_TICK_DELAY, docs/engine.md "Tick times"). Its own lock, a
 * leaf: taken inside the engine's lock by the tick, alone by readers, so reading never waits for a tick. */
#ifndef PPX_TICK_TIMES_H
#define PPX_TICK_TIMES_H

#include "personaplex.h"

typedef struct PpxTickTimes PpxTickTimes;

/* A tick longer than @frame_ms is an overrun. Reads PPX_DEBUG_TICK_DELAY (a malformed value is ignored with a
 * warning). */
PpxTickTimes *ppx_tick_times_new (double frame_ms);
void ppx_tick_times_free (PpxTickTimes *t);
/* Sleeps the debug delay due to the tick being run (the engine's lock held: a slower tick), if any. */
void ppx_tick_times_debug_delay (PpxTickTimes *t);
/* Records a tick that started at @t0 (g_get_monotonic_time) and ends now; returns its wall time in us. */
gint64 ppx_tick_times_add (PpxTickTimes *t, gint64 t0);
/* Records a tick of @us microseconds (what ppx_tick_times_add measured; tests give exact ones). */
void ppx_tick_times_record (PpxTickTimes *t, gint64 us);
void ppx_tick_times_get (PpxTickTimes *t, PpxEngineTickTimes *out);

#endif
