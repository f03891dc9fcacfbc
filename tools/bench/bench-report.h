/* personaplex-bench: the collected results and their text and JSON forms. */
#ifndef BENCH_REPORT_H
#define BENCH_REPORT_H

#include "bench-measure.h"

#include <stdio.h>

G_BEGIN_DECLS

/* One timed load (a checkpoint onto the backend, a whole model, a session's prompt phase). */
typedef struct {
  char *name;
  char *note; /* may be NULL */
  double ms;
} BenchLoad;

/* Per-frame timings of one component: `tick` is the time to step all `batch` sessions once. */
typedef struct {
  char *name;  /* mimi-encode, mimi-decode, lm-prompt-step, lm-step, session-step */
  char *phase; /* the memory phase it belongs to: mimi, lm, session */
  char *note;  /* may be NULL */
  int batch;
  BenchStats tick;
} BenchComponent;

/* Memory of one phase (one model part loaded with `batch` sessions' state). */
typedef struct {
  char *phase;
  guint64 weight_bytes;   /* what the loader placed on the backend (ppx_*_weight_bytes) */
  guint64 state_bytes;    /* per session: growth of the backend bytes when the sessions were made */
  gboolean state_known;   /* FALSE for the session phase (its parts are in the mimi and lm phases) */
  guint64 backend_bytes;  /* ppx_backend_allocated_bytes after the sessions were made (0: not known) */
  guint64 rss_bytes;      /* VmRSS at the end of the phase */
  guint64 peak_rss_bytes; /* VmHWM during the phase (or since start, see peak_per_phase) */
} BenchMemory;

/* Repeated loads of one LM file one way (--measure-load). */
typedef struct {
  char *name; /* "bf16", "int8 quantized at load", "int8 pre-quantized", ... */
  char *file;
  BenchStats ms;
  guint64 weight_bytes, peak_rss_bytes;
} BenchLoadRun;

typedef struct {
  /* header */
  char *cpu;
  int cores, threads;
  double load_average; /* 1-minute load average at the start, -1 if unknown */
  char *model_source; /* "random tiny (in memory)" or the directory */
  char *config_summary;
  double generate_ms;     /* random weights: generation time (0 otherwise) */
  guint64 lm_file_bytes, mimi_file_bytes;
  char *lm_file_format;   /* bf16, int8, int4 or NULL */
  char *backend;         /* backend name */
  char *device;          /* the GPU's name, or NULL */
  const char *quantization;
  const char *kv_cache_format; /* resolved: f32, bf16, fp8 */
  int batch, frames, warmup;
  gint64 context;         /* LM position the sessions start timing at (--context), 0: after the prompts */
  double frame_ms;
  gboolean peak_per_phase; /* the peak RSS could be reset at the start of each phase */
  /* results */
  GPtrArray *loads;      /* BenchLoad */
  GPtrArray *components; /* BenchComponent */
  GPtrArray *memory;     /* BenchMemory */
  GPtrArray *load_runs;  /* BenchLoadRun */
} BenchReport;

BenchReport *bench_report_new (void);
void bench_report_free (BenchReport *r);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (BenchReport, bench_report_free)

void bench_report_add_load (BenchReport *r, const char *name, const char *note, double ms);
void bench_report_add_component (BenchReport *r, const char *name, const char *phase, const char *note, int batch,
                                 const double *tick_ms, guint n);
BenchMemory *bench_report_add_memory (BenchReport *r, const char *phase);
BenchLoadRun *bench_report_add_load_run (BenchReport *r, const char *name, const char *file);

void bench_report_print_text (const BenchReport *r, FILE *out);
/* The report as a JSON document (g_free). */
char *bench_report_to_json (const BenchReport *r);

G_END_DECLS
#endif
