/* personaplex-bench --sweep: one model load, then the batched engine tick measured for every listed KV
 * format and batch size (at --context), one table row each, and the largest batch whose tick p99 stays
 * under the frame time: the figure "sessions held in real time" of docs/performance.md. */
#ifndef BENCH_SWEEP_H
#define BENCH_SWEEP_H

#include <stdio.h>

#include "bench-run.h"

G_BEGIN_DECLS

/* Parses "1,8,32,64" into batch sizes in [1, 4096] (at most max_n of them). */
gboolean bench_parse_batches (const char *list, int *out, int max_n, int *n, GError **error);

/* Loads the model of s once and prints one row per (KV format, batch) to out. A batch that does not fit
 * the device's memory is reported as such and ends that format's sweep (larger ones cannot fit either). */
gboolean bench_run_sweep (const BenchSetup *s, const int *batches, int n_batches, const PpxKvFormat *kvs, int n_kvs,
                          const char *device_name, FILE *out, GError **error);

G_END_DECLS
#endif
