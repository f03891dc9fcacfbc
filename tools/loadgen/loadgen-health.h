/* personaplex-loadgen --health NAME=URL: each server's /health read once a second during the run, its
 * "tick_ms_p99" (the p99 of the engine's last 256 ticks) kept in the report's LoadgenHealth series for --report.
 * One request at a time a server (a reading still out when the next is due is skipped); a reading without an
 * answer or a figure counts as a failure and adds no point. */
#ifndef LOADGEN_HEALTH_H
#define LOADGEN_HEALTH_H

#include "loadgen-report.h"

G_BEGIN_DECLS

typedef struct _LoadgenPoller LoadgenPoller;

/* Adds a LoadgenHealth to `report` for each of `targets` ("NAME=URL", checked by the options) and starts polling
 * on the thread-default main context; the report's start_us must be set. NULL when there are no targets. */
LoadgenPoller *loadgen_poller_start (LoadgenReport *report, char **targets, guint interval_ms);
/* Stops polling (requests still out are cancelled) and frees the poller. */
void loadgen_poller_stop (LoadgenPoller *p);
/* The "tick_ms_p99" of a /health body; NAN when it has none. */
double loadgen_health_tick_p99 (const char *body, gsize len);

G_END_DECLS
#endif
