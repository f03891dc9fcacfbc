/* personaplex-loadgen: the run's record, its summary table, its JSON file and its verdict. */
#ifndef LOADGEN_REPORT_H
#define LOADGEN_REPORT_H

#include "loadgen-stats.h"

#include <stdio.h>

G_BEGIN_DECLS

/* CPU time of a process, in seconds. */
typedef struct {
  double user_s, system_s;
} LoadgenCpu;

/* A server process whose CPU the run records (--server-pid): at the start and at the last reading. */
typedef struct {
  int pid;
  char name[48];          /* what --server-pid called it ("s1", "haproxy"), or "" */
  LoadgenCpu first, last;
  double first_t, last_t; /* run clock of the two readings */
  gboolean seen;          /* read at least once */
  gboolean ended;         /* gone before the end of the run (the last reading is its last one alive) */
} LoadgenProcess;

/* A server's /health polled during the run (--health): its tick p99 at each reading. */
typedef struct {
  char *name;
  char *url;
  GArray *t_s;         /* double: run clock of each reading */
  GArray *tick_p99_ms; /* double: its "tick_ms_p99" then */
  guint failures;      /* readings that got no answer or no figure */
} LoadgenHealth;

typedef struct {
  /* what was asked */
  char *url;
  guint calls;
  double seconds, ramp_s, gap_ms;
  char *input;          /* NULL: the test signal */
  int expect_refused;   /* calls refused with HTTP 503 that the run expects, exactly */
  int expect_failed;    /* calls that fail otherwise that the run expects, exactly */
  double max_missed_ms; /* --max-missed-ms: the most audio a call may miss at the reference player; < 0: no limit */
  double max_latency_ms; /* the frame latency p99 (all frames) a passing run stays within (default 1000) */
  /* what happened */
  char *started_utc;
  gint64 start_us;      /* the run's start on the monotonic clock (g_get_monotonic_time) */
  double wall_s;
  LoadgenCpu cpu;       /* the loadgen's own (getrusage) */
  GArray *processes;    /* LoadgenProcess */
  GPtrArray *records;   /* LoadgenCall, in call order */
  GPtrArray *health;    /* LoadgenHealth, one per --health server */
} LoadgenReport;

LoadgenHealth *loadgen_health_new (const char *name, const char *url);
void loadgen_health_free (LoadgenHealth *h);

LoadgenReport *loadgen_report_new (void);
void loadgen_report_free (LoadgenReport *r);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (LoadgenReport, loadgen_report_free)

void loadgen_report_counts (const LoadgenReport *r, guint *ok, guint *refused, guint *failed);
/* TRUE when exactly the expected numbers of calls were refused and failed and no quality rule is broken:
 *   dropped        no call that ended ok lost audio at the server (an input frame sent and never answered: the
 *                  server dropped it, its model behind the call);
 *   latency        the frame latency p99 over every answered frame is within max_latency_ms;
 *   max-missed-ms  no call missed more audio at the reference player than max_missed_ms (when >= 0). */
gboolean loadgen_report_passed (const LoadgenReport *r);
/* The quality rules the run breaks, "dropped: ...; latency: ..." (g_free), or NULL when none. */
char *loadgen_report_broken_rules (const LoadgenReport *r);
/* The rule --max-missed-ms alone: NULL when it holds (or has no limit), else a sentence naming the calls over it. */
char *loadgen_report_missed_rule (const LoadgenReport *r);

/* The summary table (p50, p95, p99, max over the calls), the outcomes by reason, calls per server, CPU. */
void loadgen_report_print (const LoadgenReport *r, FILE *out);
/* The whole record as JSON: the run, the summaries, the CPU, and every call's figures. */
char *loadgen_report_to_json (const LoadgenReport *r);
gboolean loadgen_report_write_json (const LoadgenReport *r, const char *path, GError **error);

G_END_DECLS
#endif
