/* personaplex-live-bench's records: percentiles, the verdict, the summary and the raw files. */
#include "live-record.h"
#include "tool-file.h"
#include "tool-stats.h"

#include <errno.h>
#include <glib/gstdio.h>
#include <math.h>

#define NO_TIME G_MAXUINT64
#define TOP_SLOWEST 5

LiveRecord *
live_record_new (void)
{
  LiveRecord *r = g_new0 (LiveRecord, 1);
  r->frames = g_array_new (FALSE, FALSE, sizeof (LiveFrame));
  r->arrivals = g_array_new (FALSE, FALSE, sizeof (LiveArrival));
  r->memory = g_array_new (FALSE, FALSE, sizeof (LiveMemory));
  r->cpu_pressure_pct = r->cpu_steal_pct = -1;
  g_mutex_init (&r->lock);
  return r;
}

void
live_record_free (LiveRecord *r)
{
  if (!r)
    return;
  g_array_unref (r->frames);
  g_array_unref (r->arrivals);
  g_array_unref (r->memory);
  g_mutex_clear (&r->lock);
  g_free (r->model_dir);
  g_free (r->backend_asked);
  g_free (r->quant_asked);
  g_free (r->source);
  g_free (r->gpu_name);
  g_free (r->stats_backend);
  g_free (r->stats_quantization);
  g_free (r->error);
  g_free (r);
}

void
live_record_finish (LiveRecord *r, guint64 sink_latency_ns)
{
  r->sink_latency_ns = sink_latency_ns;
  r->late_buffers = 0;
  guint64 later = sink_latency_ns; /* the first latency configured after the arrival, going backwards */
  for (guint i = r->arrivals->len; i-- > 0;) {
    LiveArrival *a = &g_array_index (r->arrivals, LiveArrival, i);
    if (a->latency_ns > 0)
      later = a->latency_ns;
    gint64 due = (gint64) (a->running_ns + (a->latency_ns > 0 ? a->latency_ns : later));
    a->lateness_ms = (a->arrival_ns - due) / 1e6;
    if (a->arrival_ns > due)
      r->late_buffers++;
  }
}

/* Step-time figures of the frames whose index is in [from, to). */
typedef struct {
  guint n;
  gdouble p50, p90, p99, max, mean;
} StepFigures;

/* Frames whose step took longer than one frame, from the per-frame messages (the element's own rule). */
static guint64
frame_overruns (const LiveRecord *r)
{
  guint64 n = 0;
  for (guint i = 0; i < r->frames->len; i++)
    if (g_array_index (r->frames, LiveFrame, i).step_ms > LIVE_FRAME_MS)
      n++;
  return n;
}

static StepFigures
step_figures (const LiveRecord *r, guint64 from, guint64 to)
{
  StepFigures f = {0};
  g_autofree gdouble *v = g_new (gdouble, MAX (r->frames->len, 1));
  gdouble sum = 0;
  for (guint i = 0; i < r->frames->len; i++) {
    const LiveFrame *fr = &g_array_index (r->frames, LiveFrame, i);
    if (fr->frame >= from && fr->frame < to) {
      v[f.n++] = fr->step_ms;
      sum += fr->step_ms;
    }
  }
  if (f.n == 0)
    return f;
  tool_sort_doubles (v, f.n);
  f.p50 = tool_percentile (v, f.n, 0.50);
  f.p90 = tool_percentile (v, f.n, 0.90);
  f.p99 = tool_percentile (v, f.n, 0.99);
  f.max = v[f.n - 1];
  f.mean = sum / f.n;
  return f;
}

/* Headroom at the sink (presentation time - arrival, ms): the least and the median. */
static void
headroom (const LiveRecord *r, gdouble *least, gdouble *median, gdouble *queue_max)
{
  guint n = r->arrivals->len;
  *least = *median = *queue_max = 0;
  if (n == 0)
    return;
  g_autofree gdouble *v = g_new (gdouble, n);
  for (guint i = 0; i < n; i++) {
    const LiveArrival *a = &g_array_index (r->arrivals, LiveArrival, i);
    v[i] = -a->lateness_ms;
    *queue_max = MAX (*queue_max, a->queue_ms);
  }
  tool_sort_doubles (v, n);
  *least = v[0];
  *median = tool_percentile (v, n, 0.5);
}

/* The memory series checked for flatness: GPU when sampled, else the process's RSS. Start and end are the
 * first and last samples taken while PLAYING; lo/hi their range over the run. */
typedef struct {
  gboolean gpu, have;
  gdouble before, start, end, after, lo, hi;
} MemoryFigures;

static MemoryFigures
memory_figures (const LiveRecord *r, gboolean gpu)
{
  MemoryFigures m = {.gpu = gpu, .before = -1, .after = -1, .lo = G_MAXDOUBLE, .hi = -G_MAXDOUBLE};
  for (guint i = 0; i < r->memory->len; i++) {
    const LiveMemory *s = &g_array_index (r->memory, LiveMemory, i);
    gdouble v = gpu ? s->gpu_mib : s->rss_mib;
    if (v < 0)
      continue;
    if (g_str_equal (s->when, "before"))
      m.before = v;
    else if (g_str_equal (s->when, "after"))
      m.after = v;
    else {
      if (!m.have)
        m.start = v;
      m.have = TRUE;
      m.end = v;
      m.lo = MIN (m.lo, v);
      m.hi = MAX (m.hi, v);
    }
  }
  return m;
}

static gboolean
have_gpu_samples (const LiveRecord *r)
{
  for (guint i = 0; i < r->memory->len; i++)
    if (g_array_index (r->memory, LiveMemory, i).gpu_mib >= 0)
      return TRUE;
  return FALSE;
}

gboolean
live_record_verdict (const LiveRecord *r, gdouble tolerance_mib, GString *why)
{
  gboolean ok = TRUE;
#define FAIL(...) G_STMT_START { ok = FALSE; g_string_append_printf (why, __VA_ARGS__); g_string_append (why, "; "); } G_STMT_END
  if (r->error)
    FAIL ("error: %s", r->error);
  if (!r->got_eos)
    FAIL ("the pipeline did not reach EOS");
  if (r->frames->len == 0)
    FAIL ("no frame was stepped");
  if (!r->have_stats)
    FAIL ("no statistics from the element");
  guint64 overruns = MAX (r->stats_overruns, frame_overruns (r));
  if (overruns > 0)
    FAIL ("%" G_GUINT64_FORMAT " steps longer than a frame", overruns);
  if (r->late_buffers > 0)
    FAIL ("%" G_GUINT64_FORMAT " buffers reached the sink after their presentation time", r->late_buffers);
  if (r->sink_dropped > 0)
    FAIL ("the sink dropped %" G_GUINT64_FORMAT " late buffers", r->sink_dropped);
  if (r->qos_messages > 0)
    FAIL ("%" G_GUINT64_FORMAT " QoS messages", r->qos_messages);
  if (r->queue_overruns > 0)
    FAIL ("the input queue filled up %" G_GUINT64_FORMAT " times", r->queue_overruns);
  if (!r->element.answered)
    FAIL ("no answer to the latency query");
  if (r->frames->len <= r->context_frames)
    FAIL ("%u frames stepped: not past the %u-frame context", r->frames->len, r->context_frames);
  MemoryFigures m = memory_figures (r, have_gpu_samples (r));
  if (!m.have)
    FAIL ("no memory sample");
  else if (m.hi - m.lo > tolerance_mib)
    FAIL ("%s memory moved by %.1f MiB during the run (%.1f .. %.1f; tolerance %.1f)", m.gpu ? "GPU" : "process",
          m.hi - m.lo, m.lo, m.hi, tolerance_mib);
#undef FAIL
  if (why->len >= 2)
    g_string_truncate (why, why->len - 2);
  return ok;
}

static void
append_ms (GString *s, guint64 ns)
{
  if (ns == NO_TIME)
    g_string_append (s, "none");
  else
    g_string_append_printf (s, "%.1f ms", ns / 1e6);
}

static void
append_latency (GString *s, const char *label, const LiveLatency *l)
{
  g_string_append_printf (s, "%s: ", label);
  if (!l->answered) {
    g_string_append (s, "no answer");
    return;
  }
  g_string_append_printf (s, "%s, min ", l->live ? "live" : "not live");
  append_ms (s, l->min_ns);
  g_string_append (s, ", max ");
  append_ms (s, l->max_ns);
}

static void
append_steps (GString *s, const char *label, const StepFigures *f)
{
  if (f->n == 0)
    g_string_append_printf (s, "  %-16s %6u\n", label, 0);
  else
    g_string_append_printf (s, "  %-16s %6u %8.2f %8.2f %8.2f %8.2f %8.2f\n", label, f->n, f->p50, f->p90, f->p99,
                            f->max, f->mean);
}

static int
cmp_frame_step_desc (gconstpointer a, gconstpointer b)
{
  gdouble x = ((const LiveFrame *) a)->step_ms, y = ((const LiveFrame *) b)->step_ms;
  return x > y ? -1 : x < y;
}

static void
append_memory (GString *s, const char *label, const MemoryFigures *m)
{
  g_string_append_printf (s, "  %-14s", label);
  if (!m->have) {
    g_string_append (s, "not sampled\n");
    return;
  }
  if (m->before >= 0)
    g_string_append_printf (s, "before %.0f, ", m->before);
  g_string_append_printf (s, "start %.0f, end %.0f (change %+.0f; range %.0f .. %.0f)", m->start, m->end,
                          m->end - m->start, m->lo, m->hi);
  if (m->after >= 0)
    g_string_append_printf (s, ", after stop %.0f", m->after);
  g_string_append (s, "\n");
}

char *
live_record_summary (const LiveRecord *r, gdouble tolerance_mib)
{
  GString *s = g_string_new ("== personaplex-live-bench: personaplexduplex in a live pipeline\n");
  guint64 ctx = r->context_frames;
  StepFigures all = step_figures (r, 0, G_MAXUINT64), before = step_figures (r, 0, ctx),
              past = step_figures (r, ctx, G_MAXUINT64);
  gdouble least, median, queue_max;
  headroom (r, &least, &median, &queue_max);
  gboolean gpu = have_gpu_samples (r);
  MemoryFigures gm = memory_figures (r, TRUE), rm = memory_figures (r, FALSE);
  g_autoptr (GString) why = g_string_new (NULL);
  gboolean pass = live_record_verdict (r, tolerance_mib, why);

  g_string_append_printf (s, "model          %s (context %u frames)\n", r->model_dir, r->context_frames);
  g_string_append_printf (s, "source         %s\n", r->source);
  g_string_append_printf (s, "backend        %s%s%s (asked %s), quantization %s (asked %s), weights %.1f MiB\n",
                          r->stats_backend ? r->stats_backend : "?", r->gpu_name ? " on " : "",
                          r->gpu_name ? r->gpu_name : "", r->backend_asked,
                          r->stats_quantization ? r->stats_quantization : "?", r->quant_asked,
                          r->stats_memory_bytes / 1048576.0);
  g_string_append_printf (s, "start          %.2f s from NULL to PLAYING (model load, system prompts, the first frame at the sink)\n", r->start_s);
  g_string_append_printf (s, "ran            %.1f s live (asked %.1f), %u frames stepped (expected about %.0f at "
                          "real time; the element's stats: %" G_GUINT64_FORMAT ")\n",
                          r->seconds_run, r->seconds_asked, r->frames->len, r->seconds_run / 0.08, r->stats_frames);
  g_string_append_printf (s, "step ms        %-16s %6s %8s %8s %8s %8s %8s\n", "frames", "n", "p50", "p90", "p99",
                          "max", "mean");
  append_steps (s, "all", &all);
  g_autofree char *l1 = g_strdup_printf ("< %u", r->context_frames);
  g_autofree char *l2 = g_strdup_printf (">= %u", r->context_frames);
  append_steps (s, l1, &before);
  append_steps (s, l2, &past);
  if (r->frames->len > 0) {
    g_autoptr (GArray) sorted = g_array_copy (r->frames);
    g_array_sort (sorted, cmp_frame_step_desc);
    g_string_append (s, "slowest        ");
    for (guint i = 0; i < MIN (sorted->len, TOP_SLOWEST); i++) {
      const LiveFrame *f = &g_array_index (sorted, LiveFrame, i);
      g_string_append_printf (s, "%sframe %" G_GUINT64_FORMAT " %.2f ms", i ? ", " : "", f->frame, f->step_ms);
    }
    g_string_append (s, "\n");
  }
  g_string_append (s, "latency        ");
  append_latency (s, "element (src pad query)", &r->element);
  g_string_append (s, "\n               ");
  append_latency (s, "upstream of it", &r->upstream);
  if (r->element.answered && r->upstream.answered)
    g_string_append_printf (s, "; the element's own: %.1f ms",
                            ((gint64) r->element.min_ns - (gint64) r->upstream.min_ns) / 1e6);
  g_string_append (s, "\n               ");
  append_latency (s, "pipeline", &r->pipeline);
  g_string_append (s, "; the sink syncs with ");
  append_ms (s, r->sink_latency_ns);
  g_string_append_printf (s, " at the end\n               the element's own at the end %.1f ms, %u latency "
                          "message(s) from it; its engine's tick p99 %.2f ms (%u call(s) on the engine)\n",
                          r->stats_latency_ns / 1e6, r->latency_messages, r->stats_tick_p99_ms, r->calls);
  g_string_append (s, "real time      element overruns (steps longer than 80 ms): ");
  if (r->have_stats)
    g_string_append_printf (s, "%" G_GUINT64_FORMAT " (its stats), ", r->stats_overruns);
  else
    g_string_append (s, "no statistics from the element, ");
  g_string_append_printf (s, "%" G_GUINT64_FORMAT " in its frame messages\n", frame_overruns (r));
  g_string_append_printf (s, "               late buffers at the sink (arrived after base time + running time + "
                          "latency): %" G_GUINT64_FORMAT " of %u; headroom least %.1f ms, median %.1f ms\n",
                          r->late_buffers, r->arrivals->len, least, median);
  g_string_append_printf (s, "               sink: %" G_GUINT64_FORMAT " rendered, %" G_GUINT64_FORMAT
                          " dropped; QoS messages %" G_GUINT64_FORMAT "\n",
                          r->sink_rendered, r->sink_dropped, r->qos_messages);
  g_string_append_printf (s, "               input queue: %" G_GUINT64_FORMAT " overruns, highest level %.1f ms\n",
                          r->queue_overruns, queue_max);
  g_string_append_printf (s, "               text_src: %" G_GUINT64_FORMAT " text buffers, %" G_GUINT64_FORMAT
                          " gaps\n", r->text_buffers, r->text_gaps);
  g_string_append (s, "machine        CPU pressure ");
  if (r->cpu_pressure_pct >= 0)
    g_string_append_printf (s, "%.1f %%", r->cpu_pressure_pct);
  else
    g_string_append (s, "n/a");
  g_string_append (s, " (time some task waited for a CPU: other work delays the streaming thread), steal ");
  if (r->cpu_steal_pct >= 0)
    g_string_append_printf (s, "%.1f %%\n", r->cpu_steal_pct);
  else
    g_string_append (s, "n/a\n");
  g_string_append (s, "memory MiB\n");
  append_memory (s, "GPU used", &gm);
  append_memory (s, "process RSS", &rm);
  g_string_append_printf (s, "verdict        %s%s%s\n", pass ? "PASS" : "FAIL", pass ? "" : ": ", pass ? "" : why->str);
  if (pass)
    g_string_append_printf (s, "               (no step over 80 ms, no late or dropped buffer, past the context, %s "
                            "memory within %.0f MiB)\n", gpu ? "GPU" : "process", tolerance_mib);

  /* key=value lines for scripts */
  g_string_append (s, "-- values\n");
  g_string_append_printf (s, "frames=%u\nframes_expected=%.0f\nseconds=%.1f\nstart_seconds=%.2f\n", r->frames->len,
                          r->seconds_run / 0.08, r->seconds_run, r->start_s);
  g_string_append_printf (s, "step_p50_ms=%.3f\nstep_p90_ms=%.3f\nstep_p99_ms=%.3f\nstep_max_ms=%.3f\n"
                          "step_mean_ms=%.3f\n", all.p50, all.p90, all.p99, all.max, all.mean);
  g_string_append_printf (s, "step_past_context_p50_ms=%.3f\nstep_past_context_p99_ms=%.3f\n"
                          "step_past_context_max_ms=%.3f\nframes_past_context=%u\n",
                          past.p50, past.p99, past.max, past.n);
  g_string_append_printf (s, "element_overruns=%" G_GUINT64_FORMAT "\nlate_buffers=%" G_GUINT64_FORMAT
                          "\nsink_dropped=%" G_GUINT64_FORMAT "\nqos_messages=%" G_GUINT64_FORMAT
                          "\nqueue_overruns=%" G_GUINT64_FORMAT "\nheadroom_least_ms=%.3f\n",
                          MAX (r->stats_overruns, frame_overruns (r)), r->late_buffers, r->sink_dropped,
                          r->qos_messages, r->queue_overruns,
                          least);
  if (r->element.answered) {
    g_string_append_printf (s, "latency_live=%d\nlatency_min_ms=%.3f\n", r->element.live, r->element.min_ns / 1e6);
    if (r->upstream.answered)
      g_string_append_printf (s, "latency_own_ms=%.3f\n",
                              ((gint64) r->element.min_ns - (gint64) r->upstream.min_ns) / 1e6);
  }
  if (r->pipeline.answered)
    g_string_append_printf (s, "latency_pipeline_ms=%.3f\n", r->pipeline.min_ns / 1e6);
  g_string_append_printf (s, "latency_own_end_ms=%.3f\nlatency_messages=%u\nsink_latency_end_ms=%.3f\n"
                          "tick_p99_ms=%.3f\ncalls=%u\n", r->stats_latency_ns / 1e6, r->latency_messages,
                          r->sink_latency_ns / 1e6, r->stats_tick_p99_ms, r->calls);
  if (gm.have)
    g_string_append_printf (s, "gpu_mib_start=%.0f\ngpu_mib_end=%.0f\ngpu_mib_range=%.0f\n", gm.start, gm.end,
                            gm.hi - gm.lo);
  if (rm.have)
    g_string_append_printf (s, "rss_mib_start=%.1f\nrss_mib_end=%.1f\n", rm.start, rm.end);
  g_string_append_printf (s, "cpu_pressure_pct=%.1f\ncpu_steal_pct=%.1f\n", r->cpu_pressure_pct, r->cpu_steal_pct);
  g_string_append_printf (s, "backend=%s\nquantization=%s\nverdict=%s\n", r->stats_backend ? r->stats_backend : "",
                          r->stats_quantization ? r->stats_quantization : "", pass ? "PASS" : "FAIL");
  return g_string_free (s, FALSE);
}

static char *
frames_csv (const LiveRecord *r)
{
  GString *s = g_string_new ("frame,pts_ms,running_time_ms,step_ms,sink_lateness_ms,input_queue_ms\n");
  guint j = 0;
  for (guint i = 0; i < r->frames->len; i++) {
    const LiveFrame *f = &g_array_index (r->frames, LiveFrame, i);
    g_string_append_printf (s, "%" G_GUINT64_FORMAT ",%.3f,%.3f,%.3f,", f->frame, f->pts_ns / 1e6,
                            f->running_ns / 1e6, f->step_ms);
    /* arrivals and frames are both in PTS order: pair them by PTS */
    while (j < r->arrivals->len && g_array_index (r->arrivals, LiveArrival, j).pts_ns < f->pts_ns)
      j++;
    if (j < r->arrivals->len && g_array_index (r->arrivals, LiveArrival, j).pts_ns == f->pts_ns) {
      const LiveArrival *a = &g_array_index (r->arrivals, LiveArrival, j);
      g_string_append_printf (s, "%.3f,%.3f\n", a->lateness_ms, a->queue_ms);
    } else {
      g_string_append (s, ",\n");
    }
  }
  return g_string_free (s, FALSE);
}

static char *
memory_csv (const LiveRecord *r)
{
  GString *s = g_string_new ("when,elapsed_s,frames,rss_mib,gpu_mib\n");
  for (guint i = 0; i < r->memory->len; i++) {
    const LiveMemory *m = &g_array_index (r->memory, LiveMemory, i);
    g_string_append_printf (s, "%s,%.2f,%" G_GUINT64_FORMAT ",%.1f,", m->when, m->elapsed_s, m->frames, m->rss_mib);
    if (m->gpu_mib >= 0)
      g_string_append_printf (s, "%.0f", m->gpu_mib);
    g_string_append (s, "\n");
  }
  return g_string_free (s, FALSE);
}

gboolean
live_record_write (const LiveRecord *r, const char *dir, gdouble tolerance_mib, GError **error)
{
  if (g_mkdir_with_parents (dir, 0755) != 0) {
    g_set_error (error, G_FILE_ERROR, g_file_error_from_errno (errno), "%s: cannot create the directory: %s", dir,
                 g_strerror (errno));
    return FALSE;
  }
  g_autofree char *summary = live_record_summary (r, tolerance_mib), *frames = frames_csv (r),
                  *memory = memory_csv (r);
  g_autofree char *p1 = g_build_filename (dir, "summary.txt", NULL), *p2 = g_build_filename (dir, "frames.csv", NULL),
                  *p3 = g_build_filename (dir, "memory.csv", NULL);
  return tool_write_file (p1, summary, strlen (summary), error) &&
         tool_write_file (p2, frames, strlen (frames), error) && tool_write_file (p3, memory, strlen (memory), error);
}
