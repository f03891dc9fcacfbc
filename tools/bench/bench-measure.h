/* personaplex-bench: clocks, timing statistics, process memory and machine facts (Linux /proc). */
#ifndef BENCH_MEASURE_H
#define BENCH_MEASURE_H

#include <glib.h>

G_BEGIN_DECLS

/* Monotonic wall clock in milliseconds. */
double bench_now_ms (void);

typedef struct {
  guint n;
  double mean, p50, p95, p99, min, max; /* ms; all 0 when n = 0 */
} BenchStats;

/* Statistics of n samples (ms). Percentiles are nearest-rank on the sorted samples. */
void bench_stats_compute (const double *ms, guint n, BenchStats *out);

/* Resident set size now (VmRSS) and its peak (VmHWM) in bytes; 0 when /proc is unreadable. */
guint64 bench_rss_bytes (void);
guint64 bench_rss_peak_bytes (void);
/* Resets the peak to the current RSS (writes 5 to /proc/self/clear_refs); FALSE when not allowed. */
gboolean bench_rss_peak_reset (void);
/* MemAvailable of /proc/meminfo in bytes, or 0 when unknown. */
guint64 bench_mem_available_bytes (void);

/* "model name" of /proc/cpuinfo (g_free), or "unknown CPU". */
char *bench_cpu_model (void);
/* Online logical CPUs. */
int bench_cpu_cores (void);
/* The 1-minute load average of /proc/loadavg, or -1 when unknown (other work skews timings). */
double bench_load_average (void);

G_END_DECLS
#endif
