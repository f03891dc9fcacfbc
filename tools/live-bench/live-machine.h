/* Machine readings for personaplex-live-bench: this process's resident size, the GPU's memory in use
 * through nvidia-smi (the driver's own count, so it shows what cudaMalloc really took), and how contended
 * the CPUs were (other work on the machine delays the streaming thread and shows as overruns). */
#ifndef PPX_LIVE_MACHINE_H
#define PPX_LIVE_MACHINE_H

#include <glib.h>

G_BEGIN_DECLS

/* VmRSS of this process in MiB; -1 when /proc/self/status cannot be read. */
gdouble live_memory_rss_mib (void);

/* TRUE when nvidia-smi is on the PATH. */
gboolean live_memory_have_nvidia_smi (void);

/* memory.used of GPU `device` in MiB from nvidia-smi; -1 when it fails (the reason in `error`). */
gdouble live_memory_gpu_mib (int device, GError **error);

/* The GPU's name and driver ("NVIDIA H100 80GB HBM3, driver 580.159.04"), or NULL. */
char *live_memory_gpu_name (int device);

/* CPU contention counters, read at the start and the end of a run. */
typedef struct {
  gint64 wall_us;        /* g_get_monotonic_time */
  gint64 pressure_us;    /* /proc/pressure/cpu "some" total: time some runnable task waited for a CPU; -1: none */
  guint64 ticks, steal;  /* /proc/stat "cpu" line: all ticks, and those the hypervisor took (steal) */
} LiveCpuCounters;

void live_cpu_counters_read (LiveCpuCounters *c);
/* Between two readings: the share of time some task waited for a CPU (%, -1 without PSI) and the share of
 * CPU time stolen by the hypervisor (%, -1 without /proc/stat). */
void live_cpu_contention (const LiveCpuCounters *a, const LiveCpuCounters *b, gdouble *pressure_pct,
                          gdouble *steal_pct);

G_END_DECLS
#endif
