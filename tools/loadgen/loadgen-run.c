/* personaplex-loadgen: the run (loadgen-run.h). */
#include "loadgen-run.h"

#include <glib-unix.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "audio-io.h"
#include "loadgen-health.h"

#define CPU_SAMPLE_MS 1000
#define HEALTH_POLL_MS 1000
#define RUN_MARGIN_S 30

typedef struct {
  LoadgenRun *run;
  guint index;
  PpxChatCall *call;
  LoadgenCall *record;
  GSource *timer;   /* the join timeout, then the end of the tail */
  gboolean done;    /* finished, or given up on */
} Slot;

struct _LoadgenRun {
  const LoadgenOptions *o;
  PpxChatAudio *audio;
  gint64 input_samples;
  Slot *slots;
  guint n_done;
  GMainLoop *loop;
  LoadgenReport *report;
  guint deadline;       /* the run's time limit (0 once it struck) */
  gboolean interrupted;
};

static GQuark
run_error_quark (void)
{
  return g_quark_from_static_string ("loadgen-run");
}

void
loadgen_test_signal (float *pcm, gsize n)
{
  const double rate = PPX_CHAT_RATE, syllable = 0.2, pause = 0.07;
  double phase = 0;
  for (gsize i = 0; i < n; i++) {
    double t = i / rate;
    double in_cycle = fmod (t, syllable + pause);
    /* pitch glides between 110 and 190 Hz over a few seconds */
    double f0 = 150 + 40 * sin (2 * G_PI * 0.37 * t);
    phase += 2 * G_PI * f0 / rate;
    double env = in_cycle < syllable ? sin (G_PI * in_cycle / syllable) : 0;
    double v = 0;
    for (int h = 1; h <= 6; h++)
      v += sin (h * phase) / h;
    pcm[i] = (float) (0.08 * env * v);
  }
}

gboolean
loadgen_process_cpu (int pid, LoadgenCpu *out)
{
  g_autofree char *path = g_strdup_printf ("/proc/%d/stat", pid);
  g_autofree char *text = NULL;
  if (!g_file_get_contents (path, &text, NULL, NULL))
    return FALSE;
  /* the fields after "(comm)": state is the 3rd field; utime and stime the 14th and 15th */
  const char *p = strrchr (text, ')');
  if (!p)
    return FALSE;
  g_auto (GStrv) fields = g_strsplit (p + 2, " ", 14);
  if (g_strv_length (fields) < 14 || fields[0][0] == 'Z')
    return FALSE;
  double tick = (double) sysconf (_SC_CLK_TCK);
  out->user_s = g_ascii_strtod (fields[11], NULL) / tick;
  out->system_s = g_ascii_strtod (fields[12], NULL) / tick;
  return TRUE;
}

/* What each call says: --input looped (or the test signal) to exactly --seconds. */
static float *
make_input (const LoadgenOptions *o, gsize *n, GError **error)
{
  *n = (gsize) llround (o->seconds * PPX_CHAT_RATE);
  float *pcm = g_new (float, MAX (*n, 1));
  if (!o->input) {
    loadgen_test_signal (pcm, *n);
    return pcm;
  }
  gsize len;
  g_autofree float *file = ppx_audio_read (o->input, PPX_CHAT_RATE, &len, error);
  if (!file) {
    g_free (pcm);
    return NULL;
  }
  if (len == 0) {
    g_set_error (error, run_error_quark (), 0, "%s: no audio in it", o->input);
    g_free (pcm);
    return NULL;
  }
  for (gsize i = 0; i < *n; i++)
    pcm[i] = file[i % len];
  return pcm;
}

LoadgenRun *
loadgen_run_new (const LoadgenOptions *options, GError **error)
{
  gsize n;
  g_autofree float *pcm = make_input (options, &n, error);
  if (!pcm)
    return NULL;
  g_autoptr (GError) e = NULL;
  PpxChatAudio *audio = ppx_chat_audio_new_from_samples (pcm, n, &e);
  if (!audio) {
    g_set_error (error, run_error_quark (), 0, "encoding the calls' audio as Ogg Opus: %s", e->message);
    return NULL;
  }
  LoadgenRun *run = g_new0 (LoadgenRun, 1);
  run->o = options;
  run->audio = audio;
  run->input_samples = (gint64) n;
  run->slots = g_new0 (Slot, options->calls);
  return run;
}

static double
now_s (const LoadgenRun *run)
{
  return (g_get_monotonic_time () - run->report->start_us) / 1e6;
}

static void
drop_timer (Slot *s)
{
  if (s->timer) {
    g_source_destroy (s->timer);
    g_source_unref (s->timer);
    s->timer = NULL;
  }
}

static void
set_timer (Slot *s, double seconds, GSourceFunc fn)
{
  drop_timer (s);
  s->timer = g_timeout_source_new ((guint) MAX (0, llround (seconds * 1000)));
  g_source_set_callback (s->timer, fn, s, NULL);
  g_source_attach (s->timer, NULL);
}

static void
print_call (const LoadgenRun *run, const Slot *s)
{
  if (run->o->quiet)
    return;
  LoadgenCallStats st;
  loadgen_call_stats (s->record, run->o->gap_ms, &st);
  g_printerr ("call %u%s%s%s: %s%s%s", s->index, s->record->server ? " (" : "",
              s->record->server ? s->record->server : "", s->record->server ? ")" : "", s->record->reason,
              s->record->detail ? ": " : "", s->record->detail ? s->record->detail : "");
  if (!isnan (st.join_ms))
    g_printerr ("; join %.0f ms, %u frames, latency p50 %.0f p99 %.0f ms, reference player missed %.0f ms "
                "(%u re-buffers, %.0f ms dropped), %u underruns, %u text pieces", st.join_ms, st.frames_answered,
                st.latency_p50_ms, st.latency_p99_ms, st.playout.missed_ms, st.playout.rebuffers,
                st.playout.dropped_ms, st.underruns, s->record->record->n_text);
  if (s->record->clock_ppm != 0)
    g_printerr ("; client clock %+.0f ppm", s->record->clock_ppm);
  g_printerr (" (at %.1f s)\n", now_s (run));
  loadgen_call_stats_clear (&st);
}

static void
slot_done (Slot *s)
{
  if (s->done)
    return;
  s->done = TRUE;
  drop_timer (s);
  loadgen_call_classify (s->record, s->run->input_samples);
  print_call (s->run, s);
  if (++s->run->n_done == s->run->o->calls)
    g_main_loop_quit (s->run->loop);
}

static void
on_finished (PpxChatCall *call, gpointer user_data)
{
  slot_done (user_data);
}

/* The answer's rest did not come within --tail after the last page was due: close from our side (1000). */
static gboolean
on_tail_end (gpointer user_data)
{
  Slot *s = user_data;
  g_source_unref (s->timer);
  s->timer = NULL;
  ppx_chat_call_close (s->call);
  return G_SOURCE_REMOVE;
}

static void
on_event (PpxChatCall *call, const PpxChatEvent *event, gpointer user_data)
{
  Slot *s = user_data;
  if (event->kind == PPX_CHAT_HANDSHAKE && s->timer)
    set_timer (s, s->run->o->seconds + s->run->o->tail_s, on_tail_end);
}

static gboolean
on_join_timeout (gpointer user_data)
{
  Slot *s = user_data;
  g_source_unref (s->timer);
  s->timer = NULL;
  g_autofree char *why = g_strdup_printf ("no handshake within %.0f s", s->run->o->join_timeout_s);
  loadgen_call_set_end (s->record, "handshake-timeout", why);
  ppx_chat_call_close (s->call);
  slot_done (s);
  return G_SOURCE_REMOVE;
}

static gboolean
on_start_call (gpointer user_data)
{
  Slot *s = user_data;
  const LoadgenOptions *o = s->run->o;
  g_source_unref (s->timer);
  s->timer = NULL;
  g_autofree char *url = loadgen_options_call_url (o, s->index);
  PpxChatOptions co = {
    .url = url,
    .token = o->auth_token,
    .accept_invalid_certificates = o->insecure,
    .audio = s->run->audio,
    .pacing = PPX_CHAT_PACE_REALTIME,
    .end_of_stream = TRUE,
    .decode = FALSE,
    .response_header = o->server_header && *o->server_header ? o->server_header : NULL,
    .origin = o->origin,
    .clock_ppm = s->record->clock_ppm,
  };
  PpxChatCallbacks callbacks = {.event = on_event, .finished = on_finished};
  s->call = ppx_chat_call_new (&co, &callbacks, s);
  s->record->record = ppx_chat_call_get_record (s->call);
  set_timer (s, o->join_timeout_s, on_join_timeout);
  ppx_chat_call_start (s->call);
  return G_SOURCE_REMOVE;
}

static void
read_processes (LoadgenRun *run)
{
  for (guint i = 0; i < run->report->processes->len; i++) {
    LoadgenProcess *p = &g_array_index (run->report->processes, LoadgenProcess, i);
    LoadgenCpu cpu;
    if (p->ended)
      continue;
    if (!loadgen_process_cpu (p->pid, &cpu)) {
      p->ended = p->seen;
      continue;
    }
    if (!p->seen) {
      p->first = cpu;
      p->first_t = now_s (run);
      p->seen = TRUE;
    }
    p->last = cpu;
    p->last_t = now_s (run);
  }
}

static gboolean
on_cpu_sample (gpointer user_data)
{
  read_processes (user_data);
  return G_SOURCE_CONTINUE;
}

static gboolean
on_deadline (gpointer user_data)
{
  LoadgenRun *run = user_data;
  run->deadline = 0;
  g_printerr ("personaplex-loadgen: the run's time is up; %u call(s) still running\n",
              run->o->calls - run->n_done);
  g_main_loop_quit (run->loop);
  return G_SOURCE_REMOVE;
}

static gboolean
on_signal (gpointer user_data)
{
  LoadgenRun *run = user_data;
  g_printerr ("personaplex-loadgen: interrupted; %u call(s) still running\n", run->o->calls - run->n_done);
  run->interrupted = TRUE;
  g_main_loop_quit (run->loop);
  return G_SOURCE_CONTINUE;
}

static void
fill_report_header (const LoadgenOptions *o, LoadgenReport *r)
{
  r->url = g_strdup (o->url);
  r->calls = o->calls;
  r->seconds = o->seconds;
  r->ramp_s = o->ramp_s;
  r->gap_ms = o->gap_ms;
  r->input = g_strdup (o->input);
  r->expect_refused = o->expect_refused;
  r->expect_failed = o->expect_failed;
  r->max_missed_ms = o->max_missed_ms;
  r->max_latency_ms = o->max_latency_ms;
  g_autoptr (GDateTime) t = g_date_time_new_now_utc ();
  r->started_utc = g_date_time_format (t, "%Y-%m-%dT%H:%M:%SZ");
  r->start_us = g_get_monotonic_time ();
  for (guint i = 0; i < o->server_pids->len; i++) {
    LoadgenProcess p = {.pid = g_array_index (o->server_pids, int, i)};
    g_strlcpy (p.name, g_ptr_array_index (o->server_names, i), sizeof p.name);
    g_array_append_val (r->processes, p);
  }
}

void
loadgen_run_calls (LoadgenRun *run, LoadgenReport *report)
{
  const LoadgenOptions *o = run->o;
  run->report = report;
  run->loop = g_main_loop_new (NULL, FALSE);
  struct rusage before;
  getrusage (RUSAGE_SELF, &before);
  fill_report_header (o, report);
  read_processes (run);
  for (int k = 0; k < o->calls; k++) {
    Slot *s = &run->slots[k];
    s->run = run;
    s->index = (guint) k;
    double at = o->calls > 1 ? o->ramp_s * k / o->calls : 0;
    s->record = loadgen_call_new (s->index, at);
    s->record->clock_ppm = loadgen_options_call_ppm (o, s->index);
    g_ptr_array_add (report->records, s->record);
    set_timer (s, at, on_start_call);
  }
  guint cpu_timer = g_timeout_add (CPU_SAMPLE_MS, on_cpu_sample, run);
  LoadgenPoller *poller = loadgen_poller_start (report, o->health, HEALTH_POLL_MS);
  run->deadline = g_timeout_add_seconds ((guint) ceil (o->ramp_s + o->join_timeout_s + o->seconds + o->tail_s +
                                                        RUN_MARGIN_S), on_deadline, run);
  guint sigint = g_unix_signal_add (SIGINT, on_signal, run);
  guint sigterm = g_unix_signal_add (SIGTERM, on_signal, run);
  g_main_loop_run (run->loop);
  g_source_remove (sigint);
  g_source_remove (sigterm);
  g_source_remove (cpu_timer);
  loadgen_poller_stop (poller);
  if (run->deadline)
    g_source_remove (run->deadline);
  read_processes (run);
  for (int k = 0; k < o->calls; k++) {
    Slot *s = &run->slots[k];
    if (!s->done) {
      drop_timer (s);
      loadgen_call_set_end (s->record, "unfinished", run->interrupted ? "interrupted" : "the run's time was up");
      loadgen_call_classify (s->record, run->input_samples);
    }
  }
  struct rusage after;
  getrusage (RUSAGE_SELF, &after);
  report->cpu.user_s = (after.ru_utime.tv_sec - before.ru_utime.tv_sec) +
                       (after.ru_utime.tv_usec - before.ru_utime.tv_usec) / 1e6;
  report->cpu.system_s = (after.ru_stime.tv_sec - before.ru_stime.tv_sec) +
                         (after.ru_stime.tv_usec - before.ru_stime.tv_usec) / 1e6;
  report->wall_s = now_s (run);
}

void
loadgen_run_free (LoadgenRun *run)
{
  if (!run)
    return;
  for (int k = 0; k < run->o->calls; k++) {
    drop_timer (&run->slots[k]);
    ppx_chat_call_free (run->slots[k].call);
  }
  g_free (run->slots);
  ppx_chat_audio_unref (run->audio);
  if (run->loop)
    g_main_loop_unref (run->loop);
  g_free (run);
}
