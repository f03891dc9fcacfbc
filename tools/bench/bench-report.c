#include "bench-report.h"

#include "tool-json.h"

#include <json-glib/json-glib.h>

#ifndef PPX_BENCH_VERSION
#define PPX_BENCH_VERSION "unknown"
#endif
#ifndef PPX_BENCH_BUILD_TYPE
#define PPX_BENCH_BUILD_TYPE "unknown"
#endif
#ifndef PPX_BENCH_SANITIZE
#define PPX_BENCH_SANITIZE "none"
#endif
#ifdef _OPENMP
#define OPENMP_ON TRUE
#else
#define OPENMP_ON FALSE
#endif

#if defined(__clang__)
#define COMPILER "clang " __clang_version__
#elif defined(__GNUC__)
#define COMPILER "gcc " __VERSION__
#else
#define COMPILER "unknown compiler"
#endif

#define MB(b) ((double) (b) / 1e6)

static void
load_free (gpointer p)
{
  BenchLoad *l = p;
  g_free (l->name);
  g_free (l->note);
  g_free (l);
}

static void
component_free (gpointer p)
{
  BenchComponent *c = p;
  g_free (c->name);
  g_free (c->phase);
  g_free (c->note);
  g_free (c);
}

static void
memory_free (gpointer p)
{
  BenchMemory *m = p;
  g_free (m->phase);
  g_free (m);
}

static void
load_run_free (gpointer p)
{
  BenchLoadRun *l = p;
  g_free (l->name);
  g_free (l->file);
  g_free (l);
}

BenchReport *
bench_report_new (void)
{
  BenchReport *r = g_new0 (BenchReport, 1);
  r->loads = g_ptr_array_new_with_free_func (load_free);
  r->components = g_ptr_array_new_with_free_func (component_free);
  r->memory = g_ptr_array_new_with_free_func (memory_free);
  r->load_runs = g_ptr_array_new_with_free_func (load_run_free);
  return r;
}

void
bench_report_free (BenchReport *r)
{
  if (!r)
    return;
  g_free (r->cpu);
  g_free (r->backend);
  g_free (r->device);
  g_free (r->model_source);
  g_free (r->config_summary);
  g_free (r->lm_file_format);
  g_ptr_array_unref (r->loads);
  g_ptr_array_unref (r->components);
  g_ptr_array_unref (r->memory);
  g_ptr_array_unref (r->load_runs);
  g_free (r);
}

void
bench_report_add_load (BenchReport *r, const char *name, const char *note, double ms)
{
  BenchLoad *l = g_new0 (BenchLoad, 1);
  l->name = g_strdup (name);
  l->note = g_strdup (note);
  l->ms = ms;
  g_ptr_array_add (r->loads, l);
}

void
bench_report_add_component (BenchReport *r, const char *name, const char *phase, const char *note, int batch,
                            const double *tick_ms, guint n)
{
  BenchComponent *c = g_new0 (BenchComponent, 1);
  c->name = g_strdup (name);
  c->phase = g_strdup (phase);
  c->note = g_strdup (note);
  c->batch = batch;
  bench_stats_compute (tick_ms, n, &c->tick);
  g_ptr_array_add (r->components, c);
}

BenchMemory *
bench_report_add_memory (BenchReport *r, const char *phase)
{
  BenchMemory *m = g_new0 (BenchMemory, 1);
  m->phase = g_strdup (phase);
  g_ptr_array_add (r->memory, m);
  return m;
}

BenchLoadRun *
bench_report_add_load_run (BenchReport *r, const char *name, const char *file)
{
  BenchLoadRun *l = g_new0 (BenchLoadRun, 1);
  l->name = g_strdup (name);
  l->file = g_strdup (file);
  g_ptr_array_add (r->load_runs, l);
  return l;
}

static char *
build_line (void)
{
  GString *s = g_string_new (PPX_BENCH_BUILD_TYPE);
  g_string_append_printf (s, ", %s", COMPILER);
  g_string_append_printf (s, ", OpenMP %s", OPENMP_ON ? "on" : "off");
  if (g_strcmp0 (PPX_BENCH_SANITIZE, "none") != 0)
    g_string_append_printf (s, ", sanitizer %s (timings are not representative)", PPX_BENCH_SANITIZE);
  return g_string_free (s, FALSE);
}

/* ---- text ---- */

static void
print_header (const BenchReport *r, FILE *out)
{
  g_autofree char *build = build_line ();
  fprintf (out, "personaplex-bench %s\n", PPX_BENCH_VERSION);
  fprintf (out, "machine: %s, %d cores, %d threads used, load average %.2f at start\n", r->cpu, r->cores, r->threads,
           r->load_average);
  if (r->device)
    fprintf (out, "device:  %s\n", r->device);
  fprintf (out, "build:   %s\n", build);
  fprintf (out, "model:   %s", r->model_source);
  if (r->generate_ms > 0)
    fprintf (out, ", generated in %.0f ms", r->generate_ms);
  if (r->lm_file_bytes)
    fprintf (out, "; LM file %.1f MB (%s)", MB (r->lm_file_bytes), r->lm_file_format ? r->lm_file_format : "?");
  if (r->mimi_file_bytes)
    fprintf (out, "; Mimi file %.1f MB", MB (r->mimi_file_bytes));
  fprintf (out, "\nconfig:  %s\n", r->config_summary);
  if (r->frames > 0)
    fprintf (out, "run:     backend %s, quantization %s, %s KV cache, batch %d, %d frames after %d warm-up frames of "
             "%.0f ms, from LM position %" G_GINT64_FORMAT "\n", r->backend, r->quantization, r->kv_cache_format,
             r->batch, r->frames, r->warmup, r->frame_ms, r->context);
  else
    fprintf (out, "run:     backend %s, load times only (--measure-load)\n", r->backend);
}

static void
print_loads (const BenchReport *r, FILE *out)
{
  if (r->loads->len == 0)
    return;
  fprintf (out, "\n%-30s %10s\n", "load", "ms");
  for (guint i = 0; i < r->loads->len; i++) {
    const BenchLoad *l = g_ptr_array_index (r->loads, i);
    fprintf (out, "  %-28s %10.1f%s%s\n", l->name, l->ms, l->note ? "  " : "", l->note ? l->note : "");
  }
}

static void
print_components (const BenchReport *r, FILE *out)
{
  if (r->components->len == 0)
    return;
  fprintf (out, "\n%-18s %6s %9s %9s %9s %9s %9s %14s %7s\n", "per frame (ms)", "frames", "mean", "p50", "p95", "p99",
           "max", "per-session", "RTF");
  for (guint i = 0; i < r->components->len; i++) {
    const BenchComponent *c = g_ptr_array_index (r->components, i);
    const BenchStats *t = &c->tick;
    fprintf (out, "  %-16s %6u %9.3f %9.3f %9.3f %9.3f %9.3f %14.3f %7.3f%s%s\n", c->name, t->n, t->mean, t->p50, t->p95,
             t->p99, t->max, t->mean / c->batch, t->mean / r->frame_ms, c->note ? "  " : "", c->note ? c->note : "");
  }
  fprintf (out, "  (a frame is %.0f ms of audio for each of the %d sessions; RTF = mean / %.0f ms, < 1 is faster than "
                "real time)\n",
           r->frame_ms, r->batch, r->frame_ms);
}

static void
print_memory (const BenchReport *r, FILE *out)
{
  if (r->memory->len == 0)
    return;
  fprintf (out, "\n%-12s %12s %16s %12s %10s %12s\n", "memory (MB)", "weights", "state/session", "backend", "RSS",
           "peak RSS");
  for (guint i = 0; i < r->memory->len; i++) {
    const BenchMemory *m = g_ptr_array_index (r->memory, i);
    g_autofree char *backend = m->backend_bytes ? g_strdup_printf ("%.1f", MB (m->backend_bytes)) : g_strdup ("-");
    g_autofree char *state = m->state_known ? g_strdup_printf ("%.1f", MB (m->state_bytes)) : g_strdup ("-");
    fprintf (out, "  %-10s %12.1f %16s %12s %10.1f %12.1f\n", m->phase, MB (m->weight_bytes), state, backend,
             MB (m->rss_bytes), MB (m->peak_rss_bytes));
  }
  fprintf (out, "  (peak RSS %s; state/session: backend bytes per session, with its share of the batch scratch)\n",
           r->peak_per_phase ? "is per phase" : "is since the start of the process");
}

static void
print_load_runs (const BenchReport *r, FILE *out)
{
  if (r->load_runs->len == 0)
    return;
  fprintf (out, "\n%-26s %7s %10s %10s %10s %12s %12s\n", "LM load", "repeats", "mean ms", "min ms", "max ms",
           "weights MB", "peak RSS MB");
  for (guint i = 0; i < r->load_runs->len; i++) {
    const BenchLoadRun *l = g_ptr_array_index (r->load_runs, i);
    fprintf (out, "  %-24s %7u %10.1f %10.1f %10.1f %12.1f %12.1f\n", l->name, l->ms.n, l->ms.mean, l->ms.min,
             l->ms.max, MB (l->weight_bytes), MB (l->peak_rss_bytes));
  }
}

void
bench_report_print_text (const BenchReport *r, FILE *out)
{
  print_header (r, out);
  print_loads (r, out);
  print_components (r, out);
  print_memory (r, out);
  print_load_runs (r, out);
  fflush (out);
}

/* ---- JSON ---- */

static void
add_double (JsonBuilder *b, const char *key, double v)
{
  json_builder_set_member_name (b, key);
  json_builder_add_double_value (b, v);
}

static void
add_stats (JsonBuilder *b, const BenchStats *s)
{
  tool_json_add_int (b, "n", s->n);
  add_double (b, "mean_ms", s->mean);
  add_double (b, "p50_ms", s->p50);
  add_double (b, "p95_ms", s->p95);
  add_double (b, "p99_ms", s->p99);
  add_double (b, "min_ms", s->min);
  add_double (b, "max_ms", s->max);
}

static void
json_header (JsonBuilder *b, const BenchReport *r)
{
  tool_json_add_string (b, "program", "personaplex-bench");
  tool_json_add_string (b, "version", PPX_BENCH_VERSION);
  json_builder_set_member_name (b, "machine");
  json_builder_begin_object (b);
  tool_json_add_string (b, "cpu", r->cpu);
  tool_json_add_int (b, "cores", r->cores);
  tool_json_add_int (b, "threads", r->threads);
  add_double (b, "load_average", r->load_average);
  tool_json_add_string (b, "device", r->device);
  json_builder_end_object (b);
  json_builder_set_member_name (b, "build");
  json_builder_begin_object (b);
  tool_json_add_string (b, "type", PPX_BENCH_BUILD_TYPE);
  tool_json_add_string (b, "compiler", COMPILER);
  json_builder_set_member_name (b, "openmp");
  json_builder_add_boolean_value (b, OPENMP_ON);
  tool_json_add_string (b, "sanitize", PPX_BENCH_SANITIZE);
  json_builder_end_object (b);
  json_builder_set_member_name (b, "model");
  json_builder_begin_object (b);
  tool_json_add_string (b, "source", r->model_source);
  tool_json_add_string (b, "config", r->config_summary);
  add_double (b, "generate_ms", r->generate_ms);
  tool_json_add_int (b, "lm_file_bytes", (gint64) r->lm_file_bytes);
  tool_json_add_string (b, "lm_file_format", r->lm_file_format);
  tool_json_add_int (b, "mimi_file_bytes", (gint64) r->mimi_file_bytes);
  json_builder_end_object (b);
  json_builder_set_member_name (b, "run");
  json_builder_begin_object (b);
  tool_json_add_string (b, "backend", r->backend);
  tool_json_add_string (b, "quantization", r->quantization);
  tool_json_add_string (b, "kv_cache_format", r->kv_cache_format);
  tool_json_add_int (b, "context", r->context);
  tool_json_add_int (b, "batch", r->batch);
  tool_json_add_int (b, "frames", r->frames);
  tool_json_add_int (b, "warmup", r->warmup);
  add_double (b, "frame_ms", r->frame_ms);
  json_builder_end_object (b);
}

static void
json_results (JsonBuilder *b, const BenchReport *r)
{
  json_builder_set_member_name (b, "loads");
  json_builder_begin_array (b);
  for (guint i = 0; i < r->loads->len; i++) {
    const BenchLoad *l = g_ptr_array_index (r->loads, i);
    json_builder_begin_object (b);
    tool_json_add_string (b, "name", l->name);
    tool_json_add_string (b, "note", l->note);
    add_double (b, "ms", l->ms);
    json_builder_end_object (b);
  }
  json_builder_end_array (b);

  json_builder_set_member_name (b, "components");
  json_builder_begin_array (b);
  for (guint i = 0; i < r->components->len; i++) {
    const BenchComponent *c = g_ptr_array_index (r->components, i);
    json_builder_begin_object (b);
    tool_json_add_string (b, "name", c->name);
    tool_json_add_string (b, "phase", c->phase);
    tool_json_add_string (b, "note", c->note);
    tool_json_add_int (b, "batch", c->batch);
    add_stats (b, &c->tick);
    add_double (b, "per_session_ms", c->tick.mean / c->batch);
    add_double (b, "rtf", c->tick.mean / r->frame_ms);
    json_builder_end_object (b);
  }
  json_builder_end_array (b);

  json_builder_set_member_name (b, "memory");
  json_builder_begin_array (b);
  for (guint i = 0; i < r->memory->len; i++) {
    const BenchMemory *m = g_ptr_array_index (r->memory, i);
    json_builder_begin_object (b);
    tool_json_add_string (b, "phase", m->phase);
    tool_json_add_int (b, "weight_bytes", (gint64) m->weight_bytes);
    json_builder_set_member_name (b, "state_bytes_per_session");
    if (m->state_known)
      json_builder_add_int_value (b, (gint64) m->state_bytes);
    else
      json_builder_add_null_value (b);
    tool_json_add_int (b, "backend_bytes", (gint64) m->backend_bytes);
    tool_json_add_int (b, "rss_bytes", (gint64) m->rss_bytes);
    tool_json_add_int (b, "peak_rss_bytes", (gint64) m->peak_rss_bytes);
    json_builder_set_member_name (b, "peak_is_per_phase");
    json_builder_add_boolean_value (b, r->peak_per_phase);
    json_builder_end_object (b);
  }
  json_builder_end_array (b);

  json_builder_set_member_name (b, "load_measurements");
  json_builder_begin_array (b);
  for (guint i = 0; i < r->load_runs->len; i++) {
    const BenchLoadRun *l = g_ptr_array_index (r->load_runs, i);
    json_builder_begin_object (b);
    tool_json_add_string (b, "name", l->name);
    tool_json_add_string (b, "file", l->file);
    add_stats (b, &l->ms);
    tool_json_add_int (b, "weight_bytes", (gint64) l->weight_bytes);
    tool_json_add_int (b, "peak_rss_bytes", (gint64) l->peak_rss_bytes);
    json_builder_end_object (b);
  }
  json_builder_end_array (b);
}

char *
bench_report_to_json (const BenchReport *r)
{
  g_autoptr (JsonBuilder) b = json_builder_new ();
  json_builder_begin_object (b);
  json_header (b, r);
  json_results (b, r);
  json_builder_end_object (b);
  return tool_json_to_text (b);
}
