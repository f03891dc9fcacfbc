/* What personaplex-live-bench records during a live run, and how it summarises it: per-frame step times
 * (from the element's personaplex-frame messages), per-buffer arrival at the clock-synced sink, memory
 * samples, the latency answers and the counters; percentiles, the summary table and the raw CSV files. */
#ifndef PPX_LIVE_RECORD_H
#define PPX_LIVE_RECORD_H

#include <glib.h>

G_BEGIN_DECLS

#define LIVE_FRAME_MS 80.0 /* one frame: 1920 samples at 24 kHz */

/* One frame stepped by the element (a personaplex-frame message). */
typedef struct {
  guint64 frame;         /* index since the conversation started */
  guint64 pts_ns;        /* PTS of the input frame */
  guint64 running_ns;    /* its running time */
  gdouble step_ms;       /* the element's step time (encode + LM + decode) */
} LiveFrame;

/* One audio buffer as it reached the sink's pad, before the sink waits for the clock. */
typedef struct {
  guint64 pts_ns;
  guint64 running_ns;    /* its running time */
  gint64 arrival_ns;     /* clock time - base time when it arrived (the running time of its arrival) */
  gdouble queue_ms;      /* the input queue's level (time) at that moment */
  guint64 latency_ns;    /* the latency the sink synced with at that moment; 0: not configured yet */
  gdouble lateness_ms;   /* set by live_record_finish: arrival - (running time + the sink's latency); > 0: late */
} LiveArrival;

/* A memory sample taken every few seconds. */
typedef struct {
  gdouble elapsed_s;     /* since PLAYING (negative: before the pipeline started) */
  guint64 frames;        /* frames stepped so far */
  gdouble rss_mib;       /* this process's VmRSS */
  gdouble gpu_mib;       /* GPU memory in use (nvidia-smi), < 0: not available */
  const char *when;      /* "before", "start", "run", "end", "after" */
} LiveMemory;

/* A latency answer (times in ns; max G_MAXUINT64: none). */
typedef struct {
  gboolean answered, live;
  guint64 min_ns, max_ns;
} LiveLatency;

typedef struct {
  /* set before the run */
  char *model_dir, *backend_asked, *quant_asked, *source, *gpu_name;
  guint context_frames;
  gdouble seconds_asked;
  guint calls;           /* live calls on the element's engine, the measured one included */

  /* filled by the run */
  GArray *frames;        /* LiveFrame, in arrival order */
  GArray *arrivals;      /* LiveArrival */
  GArray *memory;        /* LiveMemory */
  GMutex lock;           /* arrivals are appended from the streaming thread */
  LiveLatency element, upstream, pipeline;
  guint64 sink_latency_ns;            /* the latency the sink syncs with */
  gdouble seconds_run;                /* PLAYING to the EOS request */
  gdouble start_s;                    /* NULL to PLAYING (model load + prompts) */
  guint64 late_buffers, qos_messages, sink_rendered, sink_dropped, queue_overruns, text_buffers, text_gaps;
  /* the element's statistics (its `stats` property at the end, else its last personaplex-stats message) */
  gboolean have_stats;
  guint64 stats_frames, stats_overruns, stats_memory_bytes;
  gdouble stats_mean_ms, stats_max_ms;
  guint64 stats_latency_ns;           /* the element's own latency in its last LATENCY answer */
  gdouble stats_tick_p99_ms;          /* its engine's tick p99 (all calls' ticks) */
  guint latency_messages;             /* latency messages it posted (its automatic deadline grew) */
  char *stats_backend, *stats_quantization;
  gdouble cpu_pressure_pct, cpu_steal_pct;  /* over the PLAYING time; -1: not available */
  gboolean got_eos;
  char *error;                        /* the first error, if any */
} LiveRecord;

LiveRecord *live_record_new (void);
void live_record_free (LiveRecord *r);

/* After the run: each arrival's lateness against the latency the sink synced with when it arrived (the
 * element's automatic latency may grow during the run); a buffer that arrived before the pipeline had
 * configured its latency (the first: the sink holds it until then) against the first latency configured after
 * it, else `sink_latency_ns`, the latency at the end; and the count of late buffers. */
void live_record_finish (LiveRecord *r, guint64 sink_latency_ns);

/* Frames stepped past `context_frames` and the memory/overrun checks: TRUE when the run kept real time
 * (no step over a frame, no late buffer, nothing dropped), stepped frames past the context, and the GPU
 * (or, without a GPU, the process's) memory stayed within `tolerance_mib` from start to end. `why` gets the
 * reasons of a failure. */
gboolean live_record_verdict (const LiveRecord *r, gdouble tolerance_mib, GString *why);

/* The human-readable table (also written as summary.txt), then key=value lines for scripts. */
char *live_record_summary (const LiveRecord *r, gdouble tolerance_mib);

/* summary.txt, frames.csv and memory.csv in `dir` (created). */
gboolean live_record_write (const LiveRecord *r, const char *dir, gdouble tolerance_mib, GError **error);

G_END_DECLS
#endif
