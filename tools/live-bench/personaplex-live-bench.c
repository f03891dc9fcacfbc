/* personaplex-live-bench: runs personaplexduplex inside a live GStreamer pipeline for a given time and
 * reports whether it kept real time.
 *
 *   personaplex-live-bench --model-dir DIR [--seconds 330] [--backend auto|cpu|cuda] [--device N]
 *                          [--quantization auto|bf16|int8|int4] [--source LAUNCH] [--format F32LE|S16LE]
 *                          [--sample-interval 10] [--gpu-memory auto|on|off] [--memory-tolerance 16]
 *                          [--calls 1] [--join-after 3] [--output-dir DIR] [PROPERTY=VALUE ...]
 *
 * The pipeline (the plugin is loaded from the GStreamer registry, as an application would):
 *
 *   SOURCE ! audioconvert ! audioresample ! audio/x-raw,format=F32LE,rate=24000,channels=1 !
 *     queue name=inq max-size-time=5000000000 max-size-buffers=0 max-size-bytes=0 ! personaplexduplex name=pp frame-messages=true ... !
 *     fakesink name=sink sync=true qos=true max-lateness=20000000
 *   pp.text_src ! queue ! fakesink name=textsink sync=false async=false
 *
 * SOURCE defaults to `audiotestsrc is-live=true wave=pink-noise volume=0.3 samplesperbuffer=480` (20 ms
 * buffers, as a capture device delivers them); the sink renders every buffer at its running time plus the
 * pipeline latency, as an audio sink does. After --seconds in PLAYING it sends EOS and waits for it.
 * With --calls N (and a model-instance-id), N - 1 other live calls like it run on the same engine, started
 * --join-after seconds before it (live-calls.c): the measured call joins an engine under load.
 *
 * Recorded: every frame's step time (personaplex-frame messages), every output buffer's arrival at the sink
 * against its presentation time (a pad probe takes the running time of its arrival; late = after its
 * running time + the latency the sink syncs with), the latency answers (the element's source pad, upstream of it, the
 * whole pipeline), the element's stats (overruns = steps longer than one 80 ms frame), the sink's
 * rendered/dropped counts and QoS messages, the input queue's overruns and level, and memory (this
 * process's RSS and the GPU's memory.used through nvidia-smi) every --sample-interval seconds.
 * Prints a summary table and writes summary.txt, frames.csv and memory.csv to --output-dir.
 *
 * Exit status: 0 when the run completed and its verdict is PASS (no step over a frame, no late or dropped
 * buffer, frames past the model's context, memory flat within --memory-tolerance MiB), 3 when it completed
 * with verdict FAIL, 1 on an error (the message names it), 2 for bad options. */
#include "config.h"
#include "live-calls.h"
#include "live-machine.h"
#include "live-record.h"

#include <gst/base/gstbasesink.h>
#include <gst/gst.h>
#include <stdio.h>

#define PROG "personaplex-live-bench"
#define DEFAULT_SOURCE "audiotestsrc is-live=true wave=pink-noise volume=0.3 samplesperbuffer=480"
#define EOS_WAIT_S 60

typedef struct {
  char *model_dir, *backend, *quantization, *source, *format, *gpu_memory, *output_dir;
  gdouble seconds, sample_interval, tolerance, join_after;
  int device, calls;
  char **props;
} Options;

typedef struct {
  Options *opt;
  LiveRecord *rec;
  GMainLoop *loop;
  GstElement *pipeline, *pp, *sink, *inq;
  LiveCalls *others;    /* --calls: the other calls on the engine */
  gboolean sample_gpu, playing, stopping;
  gint64 t_set_playing, t_playing; /* g_get_monotonic_time */
  LiveCpuCounters cpu_start;
  guint stop_id, sample_id, guard_id;
} App;

/* ---- options ---- */

static gboolean
check_choice (const char *option, const char *value, const char *const *choices, GError **error)
{
  if (g_strv_contains (choices, value))
    return TRUE;
  g_autofree char *list = g_strjoinv (", ", (char **) choices);
  g_set_error (error, G_OPTION_ERROR, G_OPTION_ERROR_BAD_VALUE, "%s: '%s' is not one of %s", option, value, list);
  return FALSE;
}

static gboolean
parse_options (Options *o, int *argc, char ***argv, GError **error)
{
  GOptionEntry entries[] = {
    {"model-dir", 'm', 0, G_OPTION_ARG_FILENAME, &o->model_dir, "Model directory (required)", "DIR"},
    {"seconds", 's', 0, G_OPTION_ARG_DOUBLE, &o->seconds, "Time to run in PLAYING (default 330)", "S"},
    {"backend", 'b', 0, G_OPTION_ARG_STRING, &o->backend, "auto (default), cpu or cuda", "B"},
    {"device", 'd', 0, G_OPTION_ARG_INT, &o->device, "CUDA device index (default 0)", "N"},
    {"quantization", 'q', 0, G_OPTION_ARG_STRING, &o->quantization, "auto (default), bf16, int8 or int4", "Q"},
    {"source", 0, 0, G_OPTION_ARG_STRING, &o->source, "Launch-line fragment of the live source (default: "
     DEFAULT_SOURCE ")", "LAUNCH"},
    {"format", 0, 0, G_OPTION_ARG_STRING, &o->format, "Sample format into the element: F32LE (default) or S16LE",
     "F"},
    {"sample-interval", 0, 0, G_OPTION_ARG_DOUBLE, &o->sample_interval, "Seconds between memory samples (default 10)",
     "S"},
    {"gpu-memory", 0, 0, G_OPTION_ARG_STRING, &o->gpu_memory,
     "Sample GPU memory with nvidia-smi: auto (default: when the backend is not cpu and nvidia-smi is found), on, off",
     "WHEN"},
    {"memory-tolerance", 0, 0, G_OPTION_ARG_DOUBLE, &o->tolerance,
     "MiB the memory may move during the run for the verdict (default 16)", "MIB"},
    {"calls", 0, 0, G_OPTION_ARG_INT, &o->calls, "Live calls on the element's engine, the measured one included "
     "(default 1; more need model-instance-id=ID)", "N"},
    {"join-after", 0, 0, G_OPTION_ARG_DOUBLE, &o->join_after, "With --calls: seconds between the other calls' "
     "start and the measured call's (default 3)", "S"},
    {"output-dir", 'o', 0, G_OPTION_ARG_FILENAME, &o->output_dir, "Write summary.txt, frames.csv, memory.csv here",
     "DIR"},
    {G_OPTION_REMAINING, 0, 0, G_OPTION_ARG_STRING_ARRAY, &o->props, "personaplexduplex properties",
     "[PROPERTY=VALUE ...]"},
    {NULL},
  };
  g_autoptr (GOptionContext) ctx = g_option_context_new ("- personaplexduplex in a live pipeline, timed");
  g_option_context_add_main_entries (ctx, entries, NULL);
  g_option_context_add_group (ctx, gst_init_get_option_group ());
  if (!g_option_context_parse (ctx, argc, argv, error))
    return FALSE;
  /* string defaults, set here: GOption would not free a preset string it replaces */
  const struct {
    char **field;
    const char *value;
  } defaults[] = {{&o->backend, ppx_backend_kind_name (PPX_BACKEND_AUTO)},
                  {&o->quantization, ppx_quantization_name (PPX_QUANT_AUTO)}, {&o->format, "F32LE"},
                  {&o->gpu_memory, "auto"}, {&o->source, DEFAULT_SOURCE}};
  for (guint i = 0; i < G_N_ELEMENTS (defaults); i++)
    if (!*defaults[i].field)
      *defaults[i].field = g_strdup (defaults[i].value);
  if (!o->model_dir) {
    g_set_error (error, G_OPTION_ERROR, G_OPTION_ERROR_FAILED, "--model-dir is required");
    return FALSE;
  }
  if (!(o->seconds > 0) || !(o->sample_interval > 0) || !(o->tolerance >= 0) || o->device < 0) {
    g_set_error (error, G_OPTION_ERROR, G_OPTION_ERROR_BAD_VALUE,
                 "--seconds and --sample-interval must be > 0, --memory-tolerance and --device >= 0");
    return FALSE;
  }
  gboolean shared = FALSE;
  for (char **p = o->props; p && *p; p++) {
    if (!strchr (*p, '=') || **p == '=') {
      g_set_error (error, G_OPTION_ERROR, G_OPTION_ERROR_BAD_VALUE, "'%s' is not PROPERTY=VALUE", *p);
      return FALSE;
    }
    shared |= g_str_has_prefix (*p, "model-instance-id=") && (*p)[strlen ("model-instance-id=")];
  }
  if (o->calls < 1 || o->calls > 4096 || !(o->join_after >= 0)) {
    g_set_error (error, G_OPTION_ERROR, G_OPTION_ERROR_BAD_VALUE, "--calls must be 1 to 4096, --join-after >= 0");
    return FALSE;
  }
  if (o->calls > 1 && !shared) {
    g_set_error (error, G_OPTION_ERROR, G_OPTION_ERROR_BAD_VALUE,
                 "--calls %d needs model-instance-id=ID: the calls share one engine", o->calls);
    return FALSE;
  }
  return check_choice ("--backend", o->backend, ppx_backend_kind_names (), error) &&
         check_choice ("--quantization", o->quantization, ppx_quantization_names (), error) &&
         check_choice ("--format", o->format, (const char *const[]){"F32LE", "S16LE", NULL}, error) &&
         check_choice ("--gpu-memory", o->gpu_memory, (const char *const[]){"auto", "on", "off", NULL}, error);
}

/* ---- the pipeline ---- */

/* Sets a property from its string form, refusing unknown properties and values that do not parse. */
static gboolean
set_property (GstElement *e, const char *name, const char *value, GError **error)
{
  GParamSpec *spec = g_object_class_find_property (G_OBJECT_GET_CLASS (e), name);
  if (!spec || !(spec->flags & G_PARAM_WRITABLE)) {
    g_set_error (error, G_OPTION_ERROR, G_OPTION_ERROR_BAD_VALUE, "personaplexduplex has no writable property '%s'",
                 name);
    return FALSE;
  }
  GValue v = G_VALUE_INIT;
  g_value_init (&v, spec->value_type);
  gboolean ok = gst_value_deserialize (&v, value);
  if (ok)
    g_object_set_property (G_OBJECT (e), name, &v);
  else
    g_set_error (error, G_OPTION_ERROR, G_OPTION_ERROR_BAD_VALUE, "personaplexduplex: '%s' is not a valid %s",
                 value, name);
  g_value_unset (&v);
  return ok;
}

/* The element settings every call gets: the model options, then the PROPERTY=VALUE arguments. */
static gboolean
configure_element (GstElement *pp, gpointer data, GError **error)
{
  Options *o = data;
  g_autofree char *device = g_strdup_printf ("%d", o->device);
  const char *fixed[][2] = {{"model-dir", o->model_dir}, {"backend", o->backend}, {"quantization", o->quantization},
                            {"device", device}};
  for (guint i = 0; i < G_N_ELEMENTS (fixed); i++)
    if (!set_property (pp, fixed[i][0], fixed[i][1], error))
      return FALSE;
  for (char **p = o->props; p && *p; p++) {
    g_auto (GStrv) kv = g_strsplit (*p, "=", 2);
    if (!set_property (pp, kv[0], kv[1], error))
      return FALSE;
  }
  return TRUE;
}

static gboolean
build_pipeline (App *app, GError **error)
{
  Options *o = app->opt;
  g_autofree char *desc = g_strdup_printf (
    "%s ! audioconvert ! audioresample ! audio/x-raw,format=%s,rate=24000,channels=1 ! "
    "queue name=inq max-size-time=5000000000 max-size-buffers=0 max-size-bytes=0 ! "
    "personaplexduplex name=pp ! fakesink name=sink sync=true qos=true max-lateness=20000000 "
    "pp.text_src ! queue ! fakesink name=textsink sync=false async=false",
    o->source, o->format);
  app->pipeline = gst_parse_launch (desc, error);
  if (!app->pipeline) {
    g_prefix_error (error, "cannot build the pipeline (is the plugin on GST_PLUGIN_PATH?): ");
    return FALSE;
  }
  app->pp = gst_bin_get_by_name (GST_BIN (app->pipeline), "pp");
  app->sink = gst_bin_get_by_name (GST_BIN (app->pipeline), "sink");
  app->inq = gst_bin_get_by_name (GST_BIN (app->pipeline), "inq");
  return set_property (app->pp, "frame-messages", "true", error) &&
         set_property (app->pp, "stats-interval", "25", error) && configure_element (app->pp, o, error);
}

/* ---- probes (streaming threads) ---- */

static GstPadProbeReturn
on_sink_buffer (GstPad *pad, GstPadProbeInfo *info, gpointer data)
{
  App *app = data;
  GstBuffer *buf = GST_PAD_PROBE_INFO_BUFFER (info);
  GstClock *clock = gst_element_get_clock (app->sink);
  GstEvent *seg_event = gst_pad_get_sticky_event (pad, GST_EVENT_SEGMENT, 0);
  if (clock && seg_event && GST_BUFFER_PTS_IS_VALID (buf)) {
    const GstSegment *seg;
    gst_event_parse_segment (seg_event, &seg);
    GstClockTime now = gst_clock_get_time (clock), base = gst_element_get_base_time (app->sink);
    guint64 rt = gst_segment_to_running_time (seg, GST_FORMAT_TIME, GST_BUFFER_PTS (buf));
    guint64 level = 0;
    g_object_get (app->inq, "current-level-time", &level, NULL);
    if (GST_CLOCK_TIME_IS_VALID (rt)) {
      LiveArrival a = {
        .pts_ns = GST_BUFFER_PTS (buf),
        .running_ns = rt,
        .arrival_ns = (gint64) now - (gint64) base,
        .queue_ms = level / 1e6,
        .latency_ns = gst_base_sink_get_latency (GST_BASE_SINK (app->sink)),
      };
      g_mutex_lock (&app->rec->lock);
      g_array_append_val (app->rec->arrivals, a);
      g_mutex_unlock (&app->rec->lock);
    }
  }
  if (seg_event)
    gst_event_unref (seg_event);
  if (clock)
    gst_object_unref (clock);
  return GST_PAD_PROBE_OK;
}

static GstPadProbeReturn
on_text (GstPad *pad, GstPadProbeInfo *info, gpointer data)
{
  LiveRecord *rec = data;
  (void) pad;
  g_mutex_lock (&rec->lock);
  if (info->type & GST_PAD_PROBE_TYPE_BUFFER)
    rec->text_buffers++;
  else if (GST_EVENT_TYPE (GST_PAD_PROBE_INFO_EVENT (info)) == GST_EVENT_GAP)
    rec->text_gaps++;
  g_mutex_unlock (&rec->lock);
  return GST_PAD_PROBE_OK;
}

static void
on_queue_overrun (GstElement *queue, gpointer data)
{
  LiveRecord *rec = data;
  (void) queue;
  g_mutex_lock (&rec->lock);
  rec->queue_overruns++;
  g_mutex_unlock (&rec->lock);
}

/* ---- main-loop side ---- */

static void
sample_memory (App *app, const char *when)
{
  LiveMemory m = {
    .elapsed_s = app->t_playing ? (g_get_monotonic_time () - app->t_playing) / 1e6 : 0,
    .frames = app->rec->frames->len,
    .rss_mib = live_memory_rss_mib (),
    .gpu_mib = -1,
    .when = when,
  };
  if (app->sample_gpu) {
    g_autoptr (GError) err = NULL;
    m.gpu_mib = live_memory_gpu_mib (app->opt->device, &err);
    if (err)
      g_printerr ("%s: GPU memory not read: %s\n", PROG, err->message);
  }
  g_array_append_val (app->rec->memory, m);
  g_print ("%s: %-6s %7.1f s, %6" G_GUINT64_FORMAT " frames, RSS %.1f MiB", PROG, when, m.elapsed_s, m.frames,
           m.rss_mib);
  if (m.gpu_mib >= 0)
    g_print (", GPU %.0f MiB", m.gpu_mib);
  g_print ("\n");
}

static gboolean
on_sample (gpointer data)
{
  sample_memory (data, "run");
  return G_SOURCE_CONTINUE;
}

/* The end of the measured time: the last memory sample and the CPU contention since PLAYING. */
static void
end_of_run (App *app)
{
  LiveCpuCounters now;
  live_cpu_counters_read (&now);
  app->rec->seconds_run = (now.wall_us - app->t_playing) / 1e6;
  live_cpu_contention (&app->cpu_start, &now, &app->rec->cpu_pressure_pct, &app->rec->cpu_steal_pct);
  sample_memory (app, "end");
}

static gboolean
on_eos_guard (gpointer data)
{
  App *app = data;
  app->guard_id = 0;
  if (!app->rec->error)
    app->rec->error = g_strdup_printf ("no EOS within %d s after it was sent", EOS_WAIT_S);
  g_main_loop_quit (app->loop);
  return G_SOURCE_REMOVE;
}

static gboolean
on_stop (gpointer data)
{
  App *app = data;
  app->stop_id = 0;
  app->stopping = TRUE;
  if (app->sample_id) {
    g_source_remove (app->sample_id);
    app->sample_id = 0;
  }
  end_of_run (app);
  g_print ("%s: %.1f s done, sending EOS\n", PROG, app->rec->seconds_run);
  gst_element_send_event (app->pipeline, gst_event_new_eos ());
  app->guard_id = g_timeout_add_seconds (EOS_WAIT_S, on_eos_guard, app);
  return G_SOURCE_REMOVE;
}

static LiveLatency
query_latency (gboolean ok, GstQuery *q)
{
  LiveLatency l = {.answered = ok};
  if (ok) {
    GstClockTime min, max;
    gst_query_parse_latency (q, &l.live, &min, &max);
    l.min_ns = min;
    l.max_ns = GST_CLOCK_TIME_IS_VALID (max) ? max : G_MAXUINT64;
  }
  return l;
}

static void
ask_latency (App *app)
{
  GstPad *src = gst_element_get_static_pad (app->pp, "src"), *sink = gst_element_get_static_pad (app->pp, "sink");
  GstQuery *q = gst_query_new_latency ();
  app->rec->element = query_latency (gst_pad_query (src, q), q);
  gst_query_unref (q);
  q = gst_query_new_latency ();
  app->rec->upstream = query_latency (gst_pad_peer_query (sink, q), q);
  gst_query_unref (q);
  q = gst_query_new_latency ();
  app->rec->pipeline = query_latency (gst_element_query (app->pipeline, q), q);
  gst_query_unref (q);
  gst_object_unref (src);
  gst_object_unref (sink);
}

static void
on_playing (App *app)
{
  app->playing = TRUE;
  app->t_playing = g_get_monotonic_time ();
  app->rec->start_s = (app->t_playing - app->t_set_playing) / 1e6;
  ask_latency (app);
  g_print ("%s: PLAYING after %.2f s; element latency %s min %.1f ms; running %.0f s\n", PROG, app->rec->start_s,
           app->rec->element.answered ? (app->rec->element.live ? "live" : "not live") : "no answer",
           app->rec->element.min_ns / 1e6, app->opt->seconds);
  sample_memory (app, "start");
  live_cpu_counters_read (&app->cpu_start);
  app->sample_id = g_timeout_add ((guint) (app->opt->sample_interval * 1000), on_sample, app);
  app->stop_id = g_timeout_add ((guint) (app->opt->seconds * 1000), on_stop, app);
}

static void
take_stats (LiveRecord *r, const GstStructure *s)
{
  r->have_stats = TRUE;
  gst_structure_get_uint64 (s, "frames", &r->stats_frames);
  gst_structure_get_uint64 (s, "overruns", &r->stats_overruns);
  gst_structure_get_uint64 (s, "memory-bytes", &r->stats_memory_bytes);
  gst_structure_get_double (s, "mean-step-ms", &r->stats_mean_ms);
  gst_structure_get_double (s, "max-step-ms", &r->stats_max_ms);
  gst_structure_get_uint64 (s, "latency", &r->stats_latency_ns);
  gst_structure_get_double (s, "tick-p99-ms", &r->stats_tick_p99_ms);
  g_free (r->stats_backend);
  g_free (r->stats_quantization);
  r->stats_backend = g_strdup (gst_structure_get_string (s, "backend"));
  r->stats_quantization = g_strdup (gst_structure_get_string (s, "quantization"));
}

static void
on_element_message (App *app, const GstStructure *s)
{
  if (gst_structure_has_name (s, "personaplex-frame")) {
    LiveFrame f = {0};
    gst_structure_get_uint64 (s, "frame", &f.frame);
    gst_structure_get_uint64 (s, "pts", &f.pts_ns);
    gst_structure_get_uint64 (s, "running-time", &f.running_ns);
    gst_structure_get_double (s, "step-ms", &f.step_ms);
    g_array_append_val (app->rec->frames, f);
  } else if (gst_structure_has_name (s, "personaplex-stats")) {
    take_stats (app->rec, s);
  }
}

/* The element's statistics and the sink's counts as they stand (before the pipeline stops). */
static void
read_final_stats (App *app)
{
  GstStructure *st = NULL;
  g_object_get (app->pp, "stats", &st, NULL);
  if (st) {
    if (gst_structure_has_field (st, "frames"))
      take_stats (app->rec, st);
    gst_structure_free (st);
  }
  st = NULL;
  g_object_get (app->sink, "stats", &st, NULL);
  if (st) {
    gst_structure_get_uint64 (st, "rendered", &app->rec->sink_rendered);
    gst_structure_get_uint64 (st, "dropped", &app->rec->sink_dropped);
    gst_structure_free (st);
  }
}

static gboolean
on_bus (GstBus *bus, GstMessage *msg, gpointer data)
{
  App *app = data;
  (void) bus;
  switch (GST_MESSAGE_TYPE (msg)) {
  case GST_MESSAGE_ELEMENT:
    if (GST_MESSAGE_SRC (msg) == GST_OBJECT (app->pp))
      on_element_message (app, gst_message_get_structure (msg));
    break;
  case GST_MESSAGE_QOS:
    app->rec->qos_messages++;
    break;
  case GST_MESSAGE_LATENCY:
    /* its automatic deadline grew (a property set before the run posts one too: not counted) */
    app->rec->latency_messages += app->playing && GST_MESSAGE_SRC (msg) == GST_OBJECT (app->pp);
    gst_bin_recalculate_latency (GST_BIN (app->pipeline));
    break;
  case GST_MESSAGE_STATE_CHANGED:
    if (GST_MESSAGE_SRC (msg) == GST_OBJECT (app->pipeline) && !app->playing) {
      GstState state;
      gst_message_parse_state_changed (msg, NULL, &state, NULL);
      if (state == GST_STATE_PLAYING)
        on_playing (app);
    }
    break;
  case GST_MESSAGE_WARNING: {
    g_autoptr (GError) err = NULL;
    g_autofree char *dbg = NULL;
    gst_message_parse_warning (msg, &err, &dbg);
    g_printerr ("%s: warning from %s: %s\n", PROG, GST_OBJECT_NAME (GST_MESSAGE_SRC (msg)), err->message);
    break;
  }
  case GST_MESSAGE_ERROR: {
    g_autoptr (GError) err = NULL;
    g_autofree char *dbg = NULL;
    gst_message_parse_error (msg, &err, &dbg);
    if (!app->rec->error)
      app->rec->error = g_strdup_printf ("%s: %s", GST_OBJECT_NAME (GST_MESSAGE_SRC (msg)), err->message);
    g_printerr ("%s: error from %s: %s\n%s%s", PROG, GST_OBJECT_NAME (GST_MESSAGE_SRC (msg)), err->message,
                dbg ? dbg : "", dbg ? "\n" : "");
    g_main_loop_quit (app->loop);
    break;
  }
  case GST_MESSAGE_EOS:
    if (!app->stopping) {
      /* a finite source (e.g. a file) ended before --seconds */
      end_of_run (app);
    }
    app->rec->got_eos = TRUE;
    g_main_loop_quit (app->loop);
    break;
  default:
    break;
  }
  return G_SOURCE_CONTINUE;
}

/* ---- main ---- */

static guint
context_frames (const char *model_dir)
{
  PpxConfig cfg;
  g_autoptr (GError) err = NULL;
  if (!ppx_config_load_dir (&cfg, model_dir, &err)) {
    g_printerr ("%s: %s (taking the 7B's context)\n", PROG, err->message);
    ppx_config_default (&cfg);
  }
  return (guint) cfg.lm.context;
}

static void
add_probes (App *app)
{
  GstPad *pad = gst_element_get_static_pad (app->sink, "sink");
  gst_pad_add_probe (pad, GST_PAD_PROBE_TYPE_BUFFER, on_sink_buffer, app, NULL);
  gst_object_unref (pad);
  GstElement *textsink = gst_bin_get_by_name (GST_BIN (app->pipeline), "textsink");
  pad = gst_element_get_static_pad (textsink, "sink");
  gst_pad_add_probe (pad, GST_PAD_PROBE_TYPE_BUFFER | GST_PAD_PROBE_TYPE_EVENT_DOWNSTREAM, on_text, app->rec, NULL);
  gst_object_unref (pad);
  gst_object_unref (textsink);
  g_signal_connect (app->inq, "overrun", G_CALLBACK (on_queue_overrun), app->rec);
}

/* --calls: the other calls start, and run --join-after seconds before the measured one (their buses are
 * watched on this thread's main context, which turns meanwhile). */
static gboolean
start_other_calls (App *app, GError **error)
{
  Options *o = app->opt;
  g_print ("%s: starting %d other call(s) on the engine; the measured call joins %.1f s later\n", PROG,
           o->calls - 1, o->join_after);
  app->others = live_calls_start ((guint) o->calls - 1, o->source, o->format, configure_element, o, error);
  if (!app->others)
    return FALSE;
  const gint64 until = g_get_monotonic_time () + (gint64) (o->join_after * G_USEC_PER_SEC);
  while (g_get_monotonic_time () < until && !live_calls_error (app->others))
    if (!g_main_context_iteration (NULL, FALSE))
      g_usleep (10 * 1000);
  if (live_calls_error (app->others)) {
    g_set_error (error, GST_CORE_ERROR, GST_CORE_ERROR_FAILED, "%s", live_calls_error (app->others));
    return FALSE;
  }
  return TRUE;
}

static int
run (App *app)
{
  Options *o = app->opt;
  g_autoptr (GError) err = NULL;
  if (!build_pipeline (app, &err)) {
    g_printerr ("%s: %s\n", PROG, err->message);
    return 1;
  }
  add_probes (app);
  if (o->calls > 1 && !start_other_calls (app, &err)) {
    g_printerr ("%s: %s\n", PROG, err->message);
    return 1;
  }
  app->sample_gpu = g_str_equal (o->gpu_memory, "on") ||
                    (g_str_equal (o->gpu_memory, "auto") && !g_str_equal (o->backend, ppx_backend_kind_name (PPX_BACKEND_CPU)) &&
                     live_memory_have_nvidia_smi ());
  if (app->sample_gpu)
    app->rec->gpu_name = live_memory_gpu_name (o->device);
  sample_memory (app, "before");

  GstBus *bus = gst_element_get_bus (app->pipeline);
  gst_bus_add_watch (bus, on_bus, app);
  app->t_set_playing = g_get_monotonic_time ();
  g_print ("%s: starting (model %s, backend %s, quantization %s)\n", PROG, o->model_dir, o->backend, o->quantization);
  if (gst_element_set_state (app->pipeline, GST_STATE_PLAYING) == GST_STATE_CHANGE_FAILURE) {
    /* the element posted the reason; take it from the bus */
    GstMessage *m = gst_bus_pop_filtered (bus, GST_MESSAGE_ERROR);
    if (m) {
      on_bus (bus, m, app);
      gst_message_unref (m);
    }
    if (!app->rec->error)
      app->rec->error = g_strdup ("the pipeline could not start");
  } else {
    g_main_loop_run (app->loop);
  }
  gst_bus_remove_watch (bus);
  gst_object_unref (bus);
  guint *timers[] = {&app->stop_id, &app->sample_id, &app->guard_id};
  for (guint i = 0; i < G_N_ELEMENTS (timers); i++)
    if (*timers[i]) {
      g_source_remove (*timers[i]);
      *timers[i] = 0;
    }
  if (!app->stopping && app->rec->seconds_run == 0 && app->t_playing)
    app->rec->seconds_run = (g_get_monotonic_time () - app->t_playing) / 1e6;
  read_final_stats (app);
  live_record_finish (app->rec, gst_base_sink_get_latency (GST_BASE_SINK (app->sink)));
  gst_element_set_state (app->pipeline, GST_STATE_NULL);
  if (app->others && live_calls_error (app->others) && !app->rec->error)
    app->rec->error = g_strdup (live_calls_error (app->others));
  g_clear_pointer (&app->others, live_calls_free);
  sample_memory (app, "after");
  return app->rec->error ? 1 : 0;
}

int
main (int argc, char **argv)
{
  Options o = {.seconds = 330, .sample_interval = 10, .tolerance = 16, .calls = 1, .join_after = 3};
  g_autoptr (GError) err = NULL;
  if (!parse_options (&o, &argc, &argv, &err)) {
    g_printerr ("%s: %s\n", PROG, err->message);
    return 2;
  }
  if (!g_file_test (o.model_dir, G_FILE_TEST_IS_DIR)) {
    g_printerr ("%s: %s: no such model directory\n", PROG, o.model_dir);
    return 1;
  }
  gst_init (NULL, NULL);

  App app = {.opt = &o, .rec = live_record_new (), .loop = g_main_loop_new (NULL, FALSE)};
  LiveRecord *rec = app.rec;
  rec->model_dir = g_strdup (o.model_dir);
  rec->backend_asked = g_strdup (o.backend);
  rec->quant_asked = g_strdup (o.quantization);
  rec->source = g_strdup (o.source);
  rec->seconds_asked = o.seconds;
  rec->calls = (guint) o.calls;
  rec->context_frames = context_frames (o.model_dir);

  int status = run (&app);
  g_autofree char *summary = live_record_summary (rec, o.tolerance);
  g_print ("%s", summary);
  if (o.output_dir && !live_record_write (rec, o.output_dir, o.tolerance, &err)) {
    g_printerr ("%s: %s\n", PROG, err->message);
    status = 1;
  }
  if (status == 0) {
    g_autoptr (GString) why = g_string_new (NULL);
    status = live_record_verdict (rec, o.tolerance, why) ? 0 : 3;
  }
  g_clear_object (&app.pp);
  g_clear_object (&app.sink);
  g_clear_object (&app.inq);
  g_clear_object (&app.pipeline);
  g_main_loop_unref (app.loop);
  live_record_free (rec);
  g_free (o.model_dir);
  g_free (o.backend);
  g_free (o.quantization);
  g_free (o.source);
  g_free (o.format);
  g_free (o.gpu_memory);
  g_free (o.output_dir);
  g_strfreev (o.props);
  return status;
}
