/* personaplex-live-bench: machine readings (see live-machine.h). */
#include "live-machine.h"

#include <stdlib.h>
#include <string.h>

gdouble
live_memory_rss_mib (void)
{
  g_autofree char *status = NULL;
  if (!g_file_get_contents ("/proc/self/status", &status, NULL, NULL))
    return -1;
  const char *line = strstr (status, "\nVmRSS:");
  if (!line)
    return -1;
  return g_ascii_strtod (line + strlen ("\nVmRSS:"), NULL) / 1024.0; /* kB */
}

gboolean
live_memory_have_nvidia_smi (void)
{
  g_autofree char *path = g_find_program_in_path ("nvidia-smi");
  return path != NULL;
}

/* The first line nvidia-smi prints for `query` on GPU `device`. */
static char *
nvidia_smi_query (int device, const char *query, GError **error)
{
  g_autofree char *index = g_strdup_printf ("%d", device);
  g_autofree char *q = g_strdup_printf ("--query-gpu=%s", query);
  const char *argv[] = {"nvidia-smi", q, "--format=csv,noheader,nounits", "-i", index, NULL};
  g_autofree char *out = NULL, *err = NULL;
  int status = 0;
  if (!g_spawn_sync (NULL, (char **) argv, NULL, G_SPAWN_SEARCH_PATH, NULL, NULL, &out, &err, &status, error))
    return NULL;
  if (!g_spawn_check_wait_status (status, error)) {
    g_prefix_error (error, "nvidia-smi %s: %s: ", q, g_strstrip (err ? err : g_strdup ("")));
    return NULL;
  }
  char *nl = strchr (out, '\n');
  if (nl)
    *nl = '\0';
  return g_strdup (g_strstrip (out));
}

gdouble
live_memory_gpu_mib (int device, GError **error)
{
  g_autofree char *line = nvidia_smi_query (device, "memory.used", error);
  if (!line)
    return -1;
  char *end = NULL;
  gdouble v = g_ascii_strtod (line, &end);
  if (end == line) {
    g_set_error (error, G_SPAWN_ERROR, G_SPAWN_ERROR_FAILED, "nvidia-smi printed '%s' for memory.used", line);
    return -1;
  }
  return v;
}

char *
live_memory_gpu_name (int device)
{
  g_autofree char *line = nvidia_smi_query (device, "name,driver_version", NULL);
  if (!line || !*line)
    return NULL;
  char *comma = strchr (line, ',');
  if (!comma)
    return g_strdup (line);
  *comma = '\0';
  return g_strdup_printf ("%s, driver %s", g_strstrip (line), g_strstrip (comma + 1));
}

void
live_cpu_counters_read (LiveCpuCounters *c)
{
  c->wall_us = g_get_monotonic_time ();
  c->pressure_us = -1;
  c->ticks = c->steal = 0;
  g_autofree char *psi = NULL, *stat = NULL;
  if (g_file_get_contents ("/proc/pressure/cpu", &psi, NULL, NULL)) {
    const char *total = strstr (psi, "total=");
    if (g_str_has_prefix (psi, "some") && total)
      c->pressure_us = g_ascii_strtoll (total + strlen ("total="), NULL, 10);
  }
  if (g_file_get_contents ("/proc/stat", &stat, NULL, NULL) && g_str_has_prefix (stat, "cpu ")) {
    /* user nice system idle iowait irq softirq steal ... */
    char *p = stat + 4;
    for (int i = 0; i < 8; i++) {
      char *end;
      guint64 v = g_ascii_strtoull (p, &end, 10);
      if (end == p)
        break;
      c->ticks += v;
      if (i == 7)
        c->steal = v;
      p = end;
    }
  }
}

void
live_cpu_contention (const LiveCpuCounters *a, const LiveCpuCounters *b, gdouble *pressure_pct, gdouble *steal_pct)
{
  gint64 wall = b->wall_us - a->wall_us;
  *pressure_pct = a->pressure_us >= 0 && b->pressure_us >= 0 && wall > 0
                    ? 100.0 * (gdouble) (b->pressure_us - a->pressure_us) / (gdouble) wall
                    : -1;
  *steal_pct = b->ticks > a->ticks ? 100.0 * (gdouble) (b->steal - a->steal) / (gdouble) (b->ticks - a->ticks) : -1;
}
