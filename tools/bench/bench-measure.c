#include "bench-measure.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tool-stats.h"

double
bench_now_ms (void)
{
  return (double) g_get_monotonic_time () / 1000.0;
}

void
bench_stats_compute (const double *ms, guint n, BenchStats *out)
{
  memset (out, 0, sizeof *out);
  out->n = n;
  if (n == 0)
    return;
  double *sorted = g_memdup2 (ms, sizeof (double) * n);
  tool_sort_doubles (sorted, n);
  double sum = 0;
  for (guint i = 0; i < n; i++)
    sum += sorted[i];
  out->mean = sum / n;
  out->p50 = tool_percentile (sorted, n, 0.50);
  out->p95 = tool_percentile (sorted, n, 0.95);
  out->p99 = tool_percentile (sorted, n, 0.99);
  out->min = sorted[0];
  out->max = sorted[n - 1];
  g_free (sorted);
}

/* The value in kB of a "Key:   123 kB" line of a /proc file, in bytes; 0 when absent. */
static guint64
proc_kb_field (const char *path, const char *key)
{
  g_autofree char *text = NULL;
  if (!g_file_get_contents (path, &text, NULL, NULL))
    return 0;
  gsize klen = strlen (key);
  for (const char *line = text; *line;) {
    if (strncmp (line, key, klen) == 0 && line[klen] == ':')
      return g_ascii_strtoull (line + klen + 1, NULL, 10) * 1024;
    const char *next = strchr (line, '\n');
    if (!next)
      break;
    line = next + 1;
  }
  return 0;
}

guint64
bench_rss_bytes (void)
{
  return proc_kb_field ("/proc/self/status", "VmRSS");
}

guint64
bench_rss_peak_bytes (void)
{
  return proc_kb_field ("/proc/self/status", "VmHWM");
}

gboolean
bench_rss_peak_reset (void)
{
  FILE *f = fopen ("/proc/self/clear_refs", "w");
  if (!f)
    return FALSE;
  gboolean ok = fputs ("5", f) >= 0;
  return fclose (f) == 0 && ok;
}

guint64
bench_mem_available_bytes (void)
{
  return proc_kb_field ("/proc/meminfo", "MemAvailable");
}

char *
bench_cpu_model (void)
{
  g_autofree char *text = NULL;
  if (g_file_get_contents ("/proc/cpuinfo", &text, NULL, NULL)) {
    g_auto (GStrv) lines = g_strsplit (text, "\n", -1);
    for (char **l = lines; *l; l++) {
      if (g_str_has_prefix (*l, "model name")) {
        const char *colon = strchr (*l, ':');
        if (colon)
          return g_strstrip (g_strdup (colon + 1));
      }
    }
  }
  return g_strdup ("unknown CPU");
}

int
bench_cpu_cores (void)
{
  long n = sysconf (_SC_NPROCESSORS_ONLN);
  return n > 0 ? (int) n : 1;
}

double
bench_load_average (void)
{
  g_autofree char *text = NULL;
  if (!g_file_get_contents ("/proc/loadavg", &text, NULL, NULL))
    return -1;
  return g_ascii_strtod (text, NULL);
}
