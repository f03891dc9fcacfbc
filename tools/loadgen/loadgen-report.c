/* personaplex-loadgen: the summary table, the JSON file and the verdict. */
#include "loadgen-report.h"

#include "tool-file.h"
#include "tool-json.h"

#include <json-glib/json-glib.h>
#include <math.h>
#include <string.h>

LoadgenReport *
loadgen_report_new (void)
{
  LoadgenReport *r = g_new0 (LoadgenReport, 1);
  r->gap_ms = 100;
  r->max_missed_ms = -1;
  r->max_latency_ms = 1000;
  r->processes = g_array_new (FALSE, TRUE, sizeof (LoadgenProcess));
  r->records = g_ptr_array_new_with_free_func ((GDestroyNotify) loadgen_call_free);
  r->health = g_ptr_array_new_with_free_func ((GDestroyNotify) loadgen_health_free);
  return r;
}

LoadgenHealth *
loadgen_health_new (const char *name, const char *url)
{
  LoadgenHealth *h = g_new0 (LoadgenHealth, 1);
  h->name = g_strdup (name);
  h->url = g_strdup (url);
  h->t_s = g_array_new (FALSE, FALSE, sizeof (double));
  h->tick_p99_ms = g_array_new (FALSE, FALSE, sizeof (double));
  return h;
}

void
loadgen_health_free (LoadgenHealth *h)
{
  if (!h)
    return;
  g_free (h->name);
  g_free (h->url);
  g_array_unref (h->t_s);
  g_array_unref (h->tick_p99_ms);
  g_free (h);
}

void
loadgen_report_free (LoadgenReport *r)
{
  if (!r)
    return;
  g_free (r->url);
  g_free (r->input);
  g_free (r->started_utc);
  g_array_unref (r->processes);
  g_ptr_array_unref (r->records);
  g_ptr_array_unref (r->health);
  g_free (r);
}

static const LoadgenCall *
record (const LoadgenReport *r, guint i)
{
  return g_ptr_array_index (r->records, i);
}

void
loadgen_report_counts (const LoadgenReport *r, guint *ok, guint *refused, guint *failed)
{
  *ok = *refused = *failed = 0;
  for (guint i = 0; i < r->records->len; i++)
    switch (loadgen_reason_class (record (r, i)->reason)) {
    case LOADGEN_END_OK: (*ok)++; break;
    case LOADGEN_END_REFUSED: (*refused)++; break;
    case LOADGEN_END_FAILED: (*failed)++; break;
    }
}


char *
loadgen_report_missed_rule (const LoadgenReport *r)
{
  if (r->max_missed_ms < 0)
    return NULL;
  guint over = 0, worst = 0;
  double most = -1;
  for (guint i = 0; i < r->records->len; i++) {
    LoadgenPlayout p;
    if (!loadgen_call_playout (record (r, i), 0, NULL, &p) || !(p.missed_ms > r->max_missed_ms))
      continue;
    over++;
    if (p.missed_ms > most) {
      most = p.missed_ms;
      worst = record (r, i)->index;
    }
  }
  if (!over)
    return NULL;
  return g_strdup_printf ("%u call(s) missed more than %.1f ms of audio at the reference player (the most: "
                          "call %u, %.1f ms)", over, r->max_missed_ms, worst, most);
}

/* ---- the figures of every call, and the table's rows ---- */

typedef enum {
  ROW_JOIN, ROW_FIRST_AUDIO, ROW_LATENCY_ALL, ROW_LATENCY_P50, ROW_LATENCY_P99, ROW_LATENCY_GROWTH,
  ROW_PLAYOUT_MISSED, ROW_PLAYOUT_DROPPED, ROW_PLAYOUT_REBUFFERS, ROW_UNDERRUNS, ROW_MAX_GAP, ROW_UNANSWERED,
  ROW_TEXT, N_ROWS
} Row;

static const struct {
  const char *key;   /* JSON member */
  const char *label; /* table line */
  int decimals;
} rows[N_ROWS] = {
  [ROW_JOIN] = {"join_ms", "join time, connect to handshake (ms)", 1},
  [ROW_FIRST_AUDIO] = {"first_audio_ms", "first answer audio after handshake (ms)", 1},
  [ROW_LATENCY_ALL] = {"frame_latency_ms", "frame latency, all frames (ms)", 1},
  [ROW_LATENCY_P50] = {"call_latency_p50_ms", "frame latency p50 of a call (ms)", 1},
  [ROW_LATENCY_P99] = {"call_latency_p99_ms", "frame latency p99 of a call (ms)", 1},
  [ROW_LATENCY_GROWTH] = {"call_latency_growth_ms", "latency growth: last quarter - first (ms)", 1},
  [ROW_PLAYOUT_MISSED] = {"playout_missed_ms", "missed audio at the reference player (ms)", 1},
  [ROW_PLAYOUT_DROPPED] = {"playout_dropped_ms", "audio the reference player dropped (ms)", 1},
  [ROW_PLAYOUT_REBUFFERS] = {"playout_rebuffers", "re-buffers of the reference player per call", 0},
  [ROW_UNDERRUNS] = {"underruns", "underruns per call (gaps > threshold)", 0},
  [ROW_MAX_GAP] = {"max_gap_ms", "longest answer gap of a call (ms)", 1},
  [ROW_UNANSWERED] = {"unanswered_frames", "unanswered input frames per call", 0},
  [ROW_TEXT] = {"text_pieces", "text pieces per call", 0},
};

typedef struct {
  LoadgenCallStats *stats; /* one per call digested, in call order */
  guint n;
  LoadgenSummary rows[N_ROWS];
  guint64 underruns_total, frames_total;
  double missed_total_ms, dropped_total_ms;
  guint64 rebuffers_total;
  guint ok, refused, failed;
} Digest;

/* The server that took call @c (its WebSocket upgrade), or NULL: a refused call may name the server that
 * refused it. */
static const char *
taken_by (const LoadgenCall *c)
{
  return c->record && c->record->http_status == 101 ? c->server : NULL;
}

/* Whether call @c is one of @server's (NULL: every call). */
static gboolean
of_server (const LoadgenCall *c, const char *server)
{
  return !server || g_strcmp0 (taken_by (c), server) == 0;
}

/* The figures of every call, or of the calls @server took. */
static void
digest_make (const LoadgenReport *r, const char *server, Digest *d)
{
  memset (d, 0, sizeof *d);
  for (guint i = 0; i < r->records->len; i++)
    d->n += of_server (record (r, i), server);
  d->stats = g_new0 (LoadgenCallStats, MAX (d->n, 1));
  g_autoptr (GArray) all = g_array_new (FALSE, FALSE, sizeof (double));
  g_autofree double *series = g_new (double, (gsize) N_ROWS * MAX (d->n, 1));
  for (guint j = 0, i = 0; j < r->records->len; j++) {
    const LoadgenCall *c = record (r, j);
    if (!of_server (c, server))
      continue;
    switch (loadgen_reason_class (c->reason)) {
    case LOADGEN_END_OK: d->ok++; break;
    case LOADGEN_END_REFUSED: d->refused++; break;
    case LOADGEN_END_FAILED: d->failed++; break;
    }
    LoadgenCallStats *s = &d->stats[i];
    loadgen_call_stats (c, r->gap_ms, s);
    gboolean joined = c->record && c->record->handshake_us;
    double *v = series + i;
    v[ROW_JOIN * d->n] = s->join_ms;
    v[ROW_FIRST_AUDIO * d->n] = s->first_audio_ms;
    v[ROW_LATENCY_ALL * d->n] = NAN;
    v[ROW_LATENCY_P50 * d->n] = s->latency_p50_ms;
    v[ROW_LATENCY_P99 * d->n] = s->latency_p99_ms;
    v[ROW_LATENCY_GROWTH * d->n] = s->latency_last_ms - s->latency_first_ms;
    v[ROW_PLAYOUT_MISSED * d->n] = s->has_playout ? s->playout.missed_ms : NAN;
    v[ROW_PLAYOUT_DROPPED * d->n] = s->has_playout ? s->playout.dropped_ms : NAN;
    v[ROW_PLAYOUT_REBUFFERS * d->n] = s->has_playout ? s->playout.rebuffers : NAN;
    v[ROW_UNDERRUNS * d->n] = joined ? s->underruns : NAN;
    v[ROW_MAX_GAP * d->n] = joined && !isnan (s->first_audio_ms) ? s->max_gap_ms : NAN;
    v[ROW_UNANSWERED * d->n] = joined ? (double) (s->frames_sent - s->frames_answered) : NAN;
    v[ROW_TEXT * d->n] = joined ? c->record->n_text : NAN;
    g_array_append_vals (all, s->latency_ms->data, s->latency_ms->len);
    d->underruns_total += s->underruns;
    d->frames_total += s->latency_ms->len;
    d->missed_total_ms += s->playout.missed_ms;
    d->dropped_total_ms += s->playout.dropped_ms;
    d->rebuffers_total += s->playout.rebuffers;
    i++;
  }
  for (int k = 0; k < N_ROWS; k++)
    if (k == ROW_LATENCY_ALL)
      loadgen_summarize ((const double *) (void *) all->data, all->len, &d->rows[k]);
    else
      loadgen_summarize (series + (gsize) k * d->n, d->n, &d->rows[k]);
}

static void
digest_clear (Digest *d)
{
  for (guint i = 0; i < d->n; i++)
    loadgen_call_stats_clear (&d->stats[i]);
  g_free (d->stats);
}

/* ---- the verdict ---- */

/* The quality rules (loadgen-report.h): appends each one the run breaks to @why, "; "-separated; returns how
 * many. Every rule is here, one block each. */
static guint
quality_rules (const LoadgenReport *r, const Digest *d, GString *why)
{
  guint broken = 0;
  /* dropped: a call that ended ok with input frames never answered */
  guint lossy = 0;
  guint64 lost = 0;
  for (guint i = 0; i < d->n && i < r->records->len; i++) {
    const LoadgenCallStats *s = &d->stats[i];
    if (loadgen_reason_class (record (r, i)->reason) == LOADGEN_END_OK && s->frames_sent > s->frames_answered) {
      lossy++;
      lost += s->frames_sent - s->frames_answered;
    }
  }
  if (lossy > 0) {
    g_string_append_printf (why, "%sdropped: %u call(s) lost audio at the server (%" G_GUINT64_FORMAT " input "
                            "frame(s), %.1f s, never answered)", broken++ ? "; " : "", lossy, lost, lost * 0.08);
  }
  /* latency: the frame latency p99 over every answered frame */
  const LoadgenSummary *lat = &d->rows[ROW_LATENCY_ALL];
  if (lat->n > 0 && !isnan (lat->p99) && lat->p99 > r->max_latency_ms)
    g_string_append_printf (why, "%slatency: frame latency p99 %.0f ms > --max-latency-ms %.0f",
                            broken++ ? "; " : "", lat->p99, r->max_latency_ms);
  /* max-missed-ms: a call missed more audio at the reference web client's player than --max-missed-ms */
  g_autofree char *missed = loadgen_report_missed_rule (r);
  if (missed)
    g_string_append_printf (why, "%smax-missed-ms: %s", broken++ ? "; " : "", missed);
  return broken;
}

char *
loadgen_report_broken_rules (const LoadgenReport *r)
{
  Digest d;
  digest_make (r, NULL, &d);
  GString *why = g_string_new (NULL);
  const guint broken = quality_rules (r, &d, why);
  digest_clear (&d);
  return g_string_free (why, broken == 0);
}

gboolean
loadgen_report_passed (const LoadgenReport *r)
{
  guint ok, refused, failed;
  loadgen_report_counts (r, &ok, &refused, &failed);
  g_autofree char *broken = loadgen_report_broken_rules (r);
  return (int) refused == r->expect_refused && (int) failed == r->expect_failed && !broken;
}

/* Reasons (or servers) in order of first appearance, with their counts. */
static GPtrArray *
count_by (const LoadgenReport *r, gboolean by_server, GArray **counts)
{
  GPtrArray *names = g_ptr_array_new ();
  *counts = g_array_new (FALSE, TRUE, sizeof (guint));
  for (guint i = 0; i < r->records->len; i++) {
    const LoadgenCall *c = record (r, i);
    const char *name = by_server ? taken_by (c) : c->reason ? c->reason : "unfinished";
    if (!name)
      continue;
    guint k;
    for (k = 0; k < names->len && !g_str_equal (g_ptr_array_index (names, k), name); k++)
      ;
    if (k == names->len) {
      g_ptr_array_add (names, (gpointer) name);
      guint zero = 0;
      g_array_append_val (*counts, zero);
    }
    g_array_index (*counts, guint, k)++;
  }
  return names;
}

static char *
format_counts (const LoadgenReport *r, gboolean by_server)
{
  g_autoptr (GArray) counts = NULL;
  g_autoptr (GPtrArray) names = count_by (r, by_server, &counts);
  GString *s = g_string_new (NULL);
  for (guint k = 0; k < names->len; k++)
    g_string_append_printf (s, "%s%s %u", k ? ", " : "", (const char *) g_ptr_array_index (names, k),
                            g_array_index (counts, guint, k));
  return g_string_free (s, FALSE);
}

static void
print_value (FILE *out, double v, int decimals)
{
  if (isnan (v))
    fprintf (out, " %9s", "-");
  else
    fprintf (out, " %9.*f", decimals, v);
}

static double
cpu_total (const LoadgenCpu *c)
{
  return c->user_s + c->system_s;
}

/* A line a server: its calls' outcomes, join time, frame latency and underruns. */
static void
print_per_server (const LoadgenReport *r, FILE *out)
{
  g_autoptr (GArray) counts = NULL;
  g_autoptr (GPtrArray) names = count_by (r, TRUE, &counts);
  for (guint k = 0; k < names->len; k++) {
    Digest d;
    digest_make (r, g_ptr_array_index (names, k), &d);
    const LoadgenSummary *join = &d.rows[ROW_JOIN], *lat = &d.rows[ROW_LATENCY_ALL], *u = &d.rows[ROW_UNDERRUNS];
    const LoadgenSummary *missed = &d.rows[ROW_PLAYOUT_MISSED];
    fprintf (out, "  %s: %u calls, ok %u, failed %u; join p50 %.1f p99 %.1f ms; frame latency p50 %.1f p99 %.1f ms; "
             "underruns %" G_GUINT64_FORMAT " in all (at most %.0f a call); reference player: missed p50 %.1f p99 %.1f "
             "max %.1f ms a call, dropped %.1f ms and %" G_GUINT64_FORMAT " re-buffers in all\n",
             (const char *) g_ptr_array_index (names, k), d.n, d.ok, d.failed, join->p50, join->p99, lat->p50, lat->p99,
             d.underruns_total, isnan (u->max) ? 0 : u->max, missed->p50, missed->p99, missed->max, d.dropped_total_ms,
             d.rebuffers_total);
    digest_clear (&d);
  }
}

void
loadgen_report_print (const LoadgenReport *r, FILE *out)
{
  Digest d;
  digest_make (r, NULL, &d);
  guint ok, refused, failed;
  loadgen_report_counts (r, &ok, &refused, &failed);
  fprintf (out, "personaplex-loadgen: %u call(s) to %s, %.1f s each, joining over %.1f s, input %s\n", r->calls,
           r->url, r->seconds, r->ramp_s, r->input ? r->input : "the test signal");
  g_autofree char *reasons = format_counts (r, FALSE);
  fprintf (out, "outcomes: %s (ok %u, refused %u, failed %u)\n", *reasons ? reasons : "none", ok, refused, failed);
  g_autofree char *servers = format_counts (r, TRUE);
  if (*servers) {
    fprintf (out, "calls per server: %s\n", servers);
    print_per_server (r, out);
  }
  fprintf (out, "%-42s %7s %9s %9s %9s %9s\n", "", "n", "p50", "p95", "p99", "max");
  for (int k = 0; k < N_ROWS; k++) {
    const LoadgenSummary *s = &d.rows[k];
    fprintf (out, "%-42s %7u", rows[k].label, s->n);
    print_value (out, s->p50, rows[k].decimals);
    print_value (out, s->p95, rows[k].decimals);
    print_value (out, s->p99, rows[k].decimals);
    print_value (out, s->max, rows[k].decimals);
    fputc ('\n', out);
  }
  fprintf (out, "reference player in all: %.1f ms missed, %.1f ms dropped, %" G_GUINT64_FORMAT " re-buffers\n",
           d.missed_total_ms, d.dropped_total_ms, d.rebuffers_total);
  fprintf (out, "underruns in all: %" G_GUINT64_FORMAT " (threshold %.0f ms); frames timed: %" G_GUINT64_FORMAT "\n",
           d.underruns_total, r->gap_ms, d.frames_total);
  double audio_s = 0;
  for (guint i = 0; i < d.n; i++)
    audio_s += d.stats[i].sent_s;
  fprintf (out, "loadgen CPU: %.2f s user + %.2f s system in %.1f s (%.0f %% of one core", r->cpu.user_s,
           r->cpu.system_s, r->wall_s, r->wall_s > 0 ? 100 * cpu_total (&r->cpu) / r->wall_s : 0.0);
  if (audio_s > 0)
    fprintf (out, "; %.2f ms per second of call audio", 1000 * cpu_total (&r->cpu) / audio_s);
  fprintf (out, ")\n");
  for (guint i = 0; i < r->processes->len; i++) {
    const LoadgenProcess *p = &g_array_index (r->processes, LoadgenProcess, i);
    g_autofree char *who = g_strdup_printf ("%s%spid %d", p->name, *p->name ? " " : "process ", p->pid);
    if (!p->seen) {
      fprintf (out, "%s: not readable\n", who);
      continue;
    }
    double span = p->last_t - p->first_t;
    double used = cpu_total (&p->last) - cpu_total (&p->first);
    fprintf (out, "%s CPU: %.2f s user + %.2f s system in %.1f s (%.0f %% of one core)%s\n", who,
             p->last.user_s - p->first.user_s, p->last.system_s - p->first.system_s, span,
             span > 0 ? 100 * used / span : 0.0, p->ended ? ", until it ended" : "");
  }
  g_autofree char *broken = loadgen_report_broken_rules (r);
  fprintf (out, "result: %s (expected %d refused and %d failed; got %u and %u)%s%s\n",
           loadgen_report_passed (r) ? "PASS" : "FAIL", r->expect_refused, r->expect_failed, refused, failed,
           broken ? "; rules broken: " : "", broken ? broken : "");
  digest_clear (&d);
}

/* ---- JSON ---- */

static void
add_double (JsonBuilder *b, const char *key, double v)
{
  json_builder_set_member_name (b, key);
  if (isnan (v) || isinf (v))
    json_builder_add_null_value (b);
  else
    json_builder_add_double_value (b, round (v * 1000) / 1000);
}

static void
add_summary (JsonBuilder *b, const char *key, const LoadgenSummary *s)
{
  json_builder_set_member_name (b, key);
  json_builder_begin_object (b);
  tool_json_add_int (b, "n", s->n);
  add_double (b, "p50", s->p50);
  add_double (b, "p95", s->p95);
  add_double (b, "p99", s->p99);
  add_double (b, "max", s->max);
  add_double (b, "mean", s->mean);
  json_builder_end_object (b);
}

static void
add_cpu (JsonBuilder *b, const char *key, const LoadgenCpu *c, double wall_s)
{
  json_builder_set_member_name (b, key);
  json_builder_begin_object (b);
  add_double (b, "user_s", c->user_s);
  add_double (b, "system_s", c->system_s);
  add_double (b, "wall_s", wall_s);
  add_double (b, "cores", wall_s > 0 ? cpu_total (c) / wall_s : NAN);
  json_builder_end_object (b);
}

/* A record's time in seconds after the run's start; NAN for 0 (never). */
static double
run_time (const LoadgenReport *r, gint64 us)
{
  return us ? (us - r->start_us) / 1e6 : NAN;
}

static void
add_call (JsonBuilder *b, const LoadgenReport *r, const LoadgenCall *c, const LoadgenCallStats *s)
{
  const PpxChatRecord *rec = c->record;
  json_builder_begin_object (b);
  tool_json_add_int (b, "index", c->index);
  tool_json_add_string (b, "reason", c->reason ? c->reason : "unfinished");
  tool_json_add_string (b, "detail", c->detail);
  tool_json_add_string (b, "server", c->server);
  tool_json_add_int (b, "http_status", rec ? rec->http_status : 0);
  tool_json_add_int (b, "close_code", rec ? rec->close_code : -1);
  add_double (b, "scheduled_s", c->scheduled_s);
  add_double (b, "clock_ppm", c->clock_ppm);
  add_double (b, "connect_s", rec ? run_time (r, rec->start_us) : NAN);
  add_double (b, "end_s", rec ? run_time (r, rec->end_us) : NAN);
  add_double (b, "join_ms", s->join_ms);
  add_double (b, "first_audio_ms", s->first_audio_ms);
  add_double (b, "sent_s", s->sent_s);
  add_double (b, "answered_s", s->answered_s);
  tool_json_add_int (b, "frames_sent", s->frames_sent);
  tool_json_add_int (b, "frames_answered", s->frames_answered);
  add_double (b, "latency_p50_ms", s->latency_p50_ms);
  add_double (b, "latency_p95_ms", s->latency_p95_ms);
  add_double (b, "latency_p99_ms", s->latency_p99_ms);
  add_double (b, "latency_max_ms", s->latency_max_ms);
  add_double (b, "latency_first_quarter_p50_ms", s->latency_first_ms);
  add_double (b, "latency_last_quarter_p50_ms", s->latency_last_ms);
  json_builder_set_member_name (b, "playout");
  if (s->has_playout) {
    json_builder_begin_object (b);
    add_double (b, "played_ms", s->playout.played_ms);
    add_double (b, "missed_ms", s->playout.missed_ms);
    add_double (b, "dropped_ms", s->playout.dropped_ms);
    tool_json_add_int (b, "rebuffers", s->playout.rebuffers);
    json_builder_end_object (b);
  } else {
    json_builder_add_null_value (b);
  }
  tool_json_add_int (b, "underruns", s->underruns);
  add_double (b, "max_gap_ms", s->max_gap_ms);
  tool_json_add_int (b, "text_pieces", rec ? rec->n_text : 0);
  tool_json_add_int (b, "text_bytes", rec ? (gint64) rec->text->len : 0);
  json_builder_end_object (b);
}

static void
add_counts (JsonBuilder *b, const char *key, const LoadgenReport *r, gboolean by_server)
{
  g_autoptr (GArray) counts = NULL;
  g_autoptr (GPtrArray) names = count_by (r, by_server, &counts);
  json_builder_set_member_name (b, key);
  json_builder_begin_object (b);
  for (guint k = 0; k < names->len; k++)
    tool_json_add_int (b, g_ptr_array_index (names, k), g_array_index (counts, guint, k));
  json_builder_end_object (b);
}

static void
add_playout_totals (JsonBuilder *b, const Digest *d)
{
  add_double (b, "playout_missed_ms_total", d->missed_total_ms);
  add_double (b, "playout_dropped_ms_total", d->dropped_total_ms);
  tool_json_add_int (b, "playout_rebuffers_total", (gint64) d->rebuffers_total);
}

/* "per_server": for each server that took calls, their outcomes and the summary rows over them. */
static void
add_per_server (JsonBuilder *b, const LoadgenReport *r)
{
  g_autoptr (GArray) counts = NULL;
  g_autoptr (GPtrArray) names = count_by (r, TRUE, &counts);
  json_builder_set_member_name (b, "per_server");
  json_builder_begin_object (b);
  for (guint k = 0; k < names->len; k++) {
    Digest d;
    digest_make (r, g_ptr_array_index (names, k), &d);
    json_builder_set_member_name (b, g_ptr_array_index (names, k));
    json_builder_begin_object (b);
    tool_json_add_int (b, "calls", d.n);
    tool_json_add_int (b, "ok", d.ok);
    tool_json_add_int (b, "failed", d.failed);
    for (int row = 0; row < N_ROWS; row++)
      add_summary (b, rows[row].key, &d.rows[row]);
    add_playout_totals (b, &d);
    tool_json_add_int (b, "underruns_total", (gint64) d.underruns_total);
    json_builder_end_object (b);
    digest_clear (&d);
  }
  json_builder_end_object (b);
}

char *
loadgen_report_to_json (const LoadgenReport *r)
{
  Digest d;
  digest_make (r, NULL, &d);
  guint ok, refused, failed;
  loadgen_report_counts (r, &ok, &refused, &failed);
  g_autoptr (JsonBuilder) b = json_builder_new ();
  json_builder_begin_object (b);
  tool_json_add_string (b, "tool", "personaplex-loadgen");
  tool_json_add_string (b, "url", r->url);
  tool_json_add_int (b, "calls", r->calls);
  add_double (b, "seconds", r->seconds);
  add_double (b, "ramp_s", r->ramp_s);
  tool_json_add_string (b, "input", r->input ? r->input : "test-signal");
  add_double (b, "gap_threshold_ms", r->gap_ms);
  tool_json_add_string (b, "started_utc", r->started_utc);
  add_double (b, "wall_s", r->wall_s);
  json_builder_set_member_name (b, "result");
  json_builder_begin_object (b);
  json_builder_set_member_name (b, "passed");
  json_builder_add_boolean_value (b, loadgen_report_passed (r));
  tool_json_add_int (b, "ok", ok);
  tool_json_add_int (b, "refused", refused);
  tool_json_add_int (b, "failed", failed);
  tool_json_add_int (b, "expect_refused", r->expect_refused);
  tool_json_add_int (b, "expect_failed", r->expect_failed);
  add_double (b, "max_missed_ms", r->max_missed_ms < 0 ? NAN : r->max_missed_ms);
  add_double (b, "max_latency_ms", r->max_latency_ms);
  g_autofree char *broken = loadgen_report_broken_rules (r);
  tool_json_add_string (b, "rules_broken", broken ? broken : "");
  json_builder_end_object (b);
  add_counts (b, "reasons", r, FALSE);
  add_counts (b, "servers", r, TRUE);
  add_per_server (b, r);
  json_builder_set_member_name (b, "summary");
  json_builder_begin_object (b);
  for (int k = 0; k < N_ROWS; k++)
    add_summary (b, rows[k].key, &d.rows[k]);
  add_playout_totals (b, &d);
  tool_json_add_int (b, "underruns_total", (gint64) d.underruns_total);
  json_builder_end_object (b);
  add_cpu (b, "loadgen_cpu", &r->cpu, r->wall_s);
  json_builder_set_member_name (b, "server_processes");
  json_builder_begin_array (b);
  for (guint i = 0; i < r->processes->len; i++) {
    const LoadgenProcess *p = &g_array_index (r->processes, LoadgenProcess, i);
    LoadgenCpu used = {p->last.user_s - p->first.user_s, p->last.system_s - p->first.system_s};
    json_builder_begin_object (b);
    tool_json_add_int (b, "pid", p->pid);
    tool_json_add_string (b, "name", p->name);
    json_builder_set_member_name (b, "seen");
    json_builder_add_boolean_value (b, p->seen);
    json_builder_set_member_name (b, "ended");
    json_builder_add_boolean_value (b, p->ended);
    if (p->seen)
      add_cpu (b, "cpu", &used, p->last_t - p->first_t);
    json_builder_end_object (b);
  }
  json_builder_end_array (b);
  json_builder_set_member_name (b, "per_call");
  json_builder_begin_array (b);
  for (guint i = 0; i < d.n; i++)
    add_call (b, r, record (r, i), &d.stats[i]);
  json_builder_end_array (b);
  json_builder_end_object (b);
  digest_clear (&d);

  return tool_json_to_text (b);
}

gboolean
loadgen_report_write_json (const LoadgenReport *r, const char *path, GError **error)
{
  g_autofree char *text = loadgen_report_to_json (r);
  g_autofree char *with_newline = g_strconcat (text, "\n", NULL);
  return tool_write_file (path, with_newline, strlen (with_newline), error);
}
