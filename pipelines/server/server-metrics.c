/* personaplex-server: counters and histograms for /health and /metrics (server-metrics.h). */
#include "server-metrics.h"

#include <json-glib/json-glib.h>
#include <stdlib.h>
#include <string.h>

static const double join_bounds[] = {0.05, 0.1, 0.25, 0.5, 1, 2, 4, 8, 16, 32, 64};
#define N_JOIN (G_N_ELEMENTS (join_bounds) + 1)
/* answer pages: their spacing (40 ms when paced) and their stages */
static const double interval_bounds[] = {0.001, 0.005, 0.01, 0.02, 0.03, 0.035, 0.038, 0.04, 0.042, 0.045, 0.05,
                                         0.06, 0.08, 0.1, 0.12, 0.16, 0.25, 0.5, 1};
static const double stage_bounds[] = {0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.15, 0.25,
                                      0.5, 1};
static const char *const stage_names[PPX_PAGE_STAGES] = {"encode", "dispatch", "pace"};

static const char *const proto_names[PPX_PROTO_N] = {"chat", "webrtc"};

typedef struct {
  guint64 buckets[PPX_METRICS_MAX_TICK_BOUNDS + 1]; /* not cumulative; the last is +Inf */
  guint64 count;
  double sum;
} Histogram;

static struct {
  GMutex lock;
  GHashTable *counts; /* "series{labels}" -> guint64* */
  Histogram joins[PPX_PROTO_N];
  double dropped_s[PPX_PROTO_N];
  Histogram intervals[PPX_PROTO_N], stages[PPX_PROTO_N][PPX_PAGE_STAGES];
} M;

static void
observe (Histogram *h, const double *bounds, guint n_bounds, double v)
{
  guint i = 0;
  while (i < n_bounds && v > bounds[i])
    i++;
  h->buckets[i]++;
  h->count++;
  h->sum += v;
}

static void
count (const char *series, PpxProto proto, const char *reason)
{
  g_autofree char *key = reason ? g_strdup_printf ("%s{protocol=\"%s\",reason=\"%s\"}", series, proto_names[proto],
                                                   reason)
                                : g_strdup_printf ("%s{protocol=\"%s\"}", series, proto_names[proto]);
  g_mutex_lock (&M.lock);
  if (!M.counts)
    M.counts = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, g_free);
  guint64 *n = g_hash_table_lookup (M.counts, key);
  if (!n) {
    n = g_new0 (guint64, 1);
    g_hash_table_insert (M.counts, g_steal_pointer (&key), n);
  }
  (*n)++;
  g_mutex_unlock (&M.lock);
}

void
ppx_metrics_accepted (PpxProto proto)
{
  count ("personaplex_calls_accepted_total", proto, NULL);
}

void
ppx_metrics_refused (PpxProto proto, const char *reason)
{
  count ("personaplex_calls_refused_total", proto, reason);
}

void
ppx_metrics_ended (PpxProto proto, const char *reason)
{
  count ("personaplex_calls_ended_total", proto, reason);
}

void
ppx_metrics_join (PpxProto proto, double seconds)
{
  g_mutex_lock (&M.lock);
  observe (&M.joins[proto], join_bounds, G_N_ELEMENTS (join_bounds), seconds);
  g_mutex_unlock (&M.lock);
}

void
ppx_metrics_input_dropped (PpxProto proto, double seconds)
{
  g_mutex_lock (&M.lock);
  M.dropped_s[proto] += seconds;
  g_mutex_unlock (&M.lock);
}

void
ppx_metrics_answer_page (PpxProto proto, double interval_s, const double stage_s[PPX_PAGE_STAGES])
{
  g_mutex_lock (&M.lock);
  if (interval_s >= 0)
    observe (&M.intervals[proto], interval_bounds, G_N_ELEMENTS (interval_bounds), interval_s);
  for (int i = 0; i < PPX_PAGE_STAGES; i++)
    if (stage_s[i] >= 0)
      observe (&M.stages[proto][i], stage_bounds, G_N_ELEMENTS (stage_bounds), stage_s[i]);
  g_mutex_unlock (&M.lock);
}

/* ---- /health ---- */

/* json-glib writes a double with 17 digits (12.22700023651123): `field`'s number written with 3 decimals instead. */
static char *
three_decimals (char *json, const char *field, double value)
{
  char *at = strstr (json, field);
  if (!at)
    return json;
  at += strlen (field);
  char buf[G_ASCII_DTOSTR_BUF_SIZE];
  g_ascii_formatd (buf, sizeof buf, "%.3f", value);
  char *out = g_strdup_printf ("%.*s%s%s", (int) (at - json), json, buf, at + strcspn (at, ",}"));
  g_free (json);
  return out;
}

char *
ppx_metrics_health_json (const PpxServerGauges *g)
{
  JsonObject *o = json_object_new ();
  json_object_set_int_member (o, "sessions", g->sessions);
  json_object_set_int_member (o, "capacity", g->capacity);
  json_object_set_int_member (o, "free", g->capacity > g->sessions && !g->draining && !g->over_budget
                                             ? g->capacity - g->sessions : 0);
  /* admission: which bound holds (docs/server.md, "Admission") */
  json_object_set_string_member (o, "bound", g->bound ? g->bound : "memory");
  json_object_set_int_member (o, "capacity_memory", g->capacity_memory);
  json_object_set_int_member (o, "capacity_compute", g->capacity_compute);
  json_object_set_string_member (o, "admission", g->admission ? g->admission : "memory");
  json_object_set_double_member (o, "tick_budget_ms", g->tick_budget_ms);
  json_object_set_double_member (o, "tick_ms_p99_predicted", g->predicted_tick_ms);
  json_object_set_boolean_member (o, "over_budget", g->over_budget);
  json_object_set_boolean_member (o, "pacing_rise", g->pacing_rise);
  json_object_set_double_member (o, "pacing_rise_ms", g->pacing_rise_ms);
  json_object_set_boolean_member (o, "draining", g->draining);
  json_object_set_double_member (o, "tick_ms_p50", g->ticks.p50_ms);
  json_object_set_double_member (o, "tick_ms_p99", g->ticks.p99_ms);
  json_object_set_int_member (o, "overruns", (gint64) g->ticks.overruns);
  const char *names[] = {"backend", "device", "quantization", "kv_cache_format"};
  const char *values[] = {g->backend, g->device, g->quantization, g->kv_cache_format};
  for (guint i = 0; i < G_N_ELEMENTS (names); i++)
    json_object_set_string_member (o, names[i], values[i] ? values[i] : "unknown");
  g_autoptr (JsonNode) root = json_node_init_object (json_node_alloc (), o);
  json_object_unref (o);
  g_autofree char *json = json_to_string (root, FALSE);
  return three_decimals (three_decimals (g_steal_pointer (&json), "\"tick_ms_p50\":", g->ticks.p50_ms),
                         "\"tick_ms_p99\":", g->ticks.p99_ms);
}

/* ---- /metrics ---- */

/* Numbers in the C locale, whatever LC_NUMERIC says. */
static const char *
num (char *buf, const char *format, double v)
{
  return g_ascii_formatd (buf, G_ASCII_DTOSTR_BUF_SIZE, format, v);
}

static void
histogram_text (GString *out, const char *name, const char *labels, const Histogram *h, const double *bounds,
                guint n_bounds)
{
  guint64 cumulative = 0;
  const char *sep = *labels ? "," : "";
  char buf[G_ASCII_DTOSTR_BUF_SIZE];
  for (guint i = 0; i <= n_bounds; i++) {
    cumulative += h->buckets[i];
    if (i < n_bounds)
      g_string_append_printf (out, "%s_bucket{%s%sle=\"%s\"} %" G_GUINT64_FORMAT "\n", name, labels, sep,
                              num (buf, "%g", bounds[i]), cumulative);
    else
      g_string_append_printf (out, "%s_bucket{%s%sle=\"+Inf\"} %" G_GUINT64_FORMAT "\n", name, labels, sep,
                              cumulative);
  }
  g_autofree char *braces = *labels ? g_strdup_printf ("{%s}", labels) : g_strdup ("");
  g_string_append_printf (out, "%s_sum%s %s\n%s_count%s %" G_GUINT64_FORMAT "\n", name, braces,
                          num (buf, "%.6f", h->sum), name, braces, h->count);
}

/* The engine's ticks: its histogram in seconds, and the overruns. */
static void
ticks_text (GString *out, const PpxServerTicks *t)
{
  Histogram h = {.count = t->ticks, .sum = t->total_ms / 1000.0};
  double bounds[PPX_METRICS_MAX_TICK_BOUNDS];
  for (guint i = 0; i < t->n_bounds; i++)
    bounds[i] = t->bounds_ms[i] / 1000.0;
  memcpy (h.buckets, t->counts, (t->n_bounds + 1) * sizeof (guint64));
  g_string_append_printf (out, "# HELP personaplex_overruns_total Engine ticks that took longer than one frame "
                          "(80 ms).\n# TYPE personaplex_overruns_total counter\npersonaplex_overruns_total %"
                          G_GUINT64_FORMAT "\n", t->overruns);
  g_string_append (out, "# HELP personaplex_tick_duration_seconds Wall time of each engine tick (one observation "
                        "per tick, however many calls it stepped).\n"
                        "# TYPE personaplex_tick_duration_seconds histogram\n");
  histogram_text (out, "personaplex_tick_duration_seconds", "", &h, bounds, t->n_bounds);
}

static void
counters_text (GString *out, const char *series, const char *help)
{
  g_string_append_printf (out, "# HELP %s %s\n# TYPE %s counter\n", series, help, series);
  g_autoptr (GList) keys = g_hash_table_get_keys (M.counts);
  keys = g_list_sort (keys, (GCompareFunc) strcmp);
  gsize len = strlen (series);
  for (GList *l = keys; l; l = l->next)
    if (strncmp (l->data, series, len) == 0 && ((char *) l->data)[len] == '{')
      g_string_append_printf (out, "%s %" G_GUINT64_FORMAT "\n", (char *) l->data,
                              *(guint64 *) g_hash_table_lookup (M.counts, l->data));
}

/* One histogram of @name a protocol, h[p] labelled protocol="NAME". */
static void
proto_histograms_text (GString *out, const char *name, const Histogram h[PPX_PROTO_N], const double *bounds,
                       guint n_bounds)
{
  for (int p = 0; p < PPX_PROTO_N; p++) {
    g_autofree char *labels = g_strdup_printf ("protocol=\"%s\"", proto_names[p]);
    histogram_text (out, name, labels, &h[p], bounds, n_bounds);
  }
}

/* The answer pages' histograms (server-pacer.h). */
static void
pages_text (GString *out)
{
  g_string_append (out, "# HELP personaplex_answer_send_interval_seconds Time between a call's consecutive answer "
                        "pages handed to the socket (40 ms each when paced), by protocol.\n"
                        "# TYPE personaplex_answer_send_interval_seconds histogram\n");
  proto_histograms_text (out, "personaplex_answer_send_interval_seconds", M.intervals, interval_bounds,
                         G_N_ELEMENTS (interval_bounds));
  g_string_append (out, "# HELP personaplex_answer_page_stage_seconds Each answer page's time in a stage: encode "
                        "(the frame left the engine to the page complete), dispatch (to the main loop), pace (to the "
                        "socket: the pacer's wait), by protocol.\n"
                        "# TYPE personaplex_answer_page_stage_seconds histogram\n");
  for (int p = 0; p < PPX_PROTO_N; p++)
    for (int i = 0; i < PPX_PAGE_STAGES; i++) {
      g_autofree char *labels = g_strdup_printf ("protocol=\"%s\",stage=\"%s\"", proto_names[p], stage_names[i]);
      histogram_text (out, "personaplex_answer_page_stage_seconds", labels, &M.stages[p][i], stage_bounds,
                      G_N_ELEMENTS (stage_bounds));
    }
}

char *
ppx_metrics_prometheus (const PpxServerGauges *g)
{
  GString *out = g_string_new (NULL);
  char budget[G_ASCII_DTOSTR_BUF_SIZE];
  g_string_append_printf (out,
                          "# HELP personaplex_sessions_active Calls holding (or about to hold) an engine slot.\n"
                          "# TYPE personaplex_sessions_active gauge\npersonaplex_sessions_active %u\n"
                          "# HELP personaplex_sessions_capacity Calls the engine holds at once.\n"
                          "# TYPE personaplex_sessions_capacity gauge\npersonaplex_sessions_capacity %u\n"
                          "# HELP personaplex_draining 1 after SIGTERM while open calls finish.\n"
                          "# TYPE personaplex_draining gauge\npersonaplex_draining %d\n",
                          g->sessions, g->capacity, g->draining ? 1 : 0);
  g_string_append_printf (out,
                          "# HELP personaplex_capacity_calls Calls each bound allows: memory (the engine's slots) and "
                          "compute (the tick p99 predicted within --tick-budget-ms).\n"
                          "# TYPE personaplex_capacity_calls gauge\n"
                          "personaplex_capacity_calls{bound=\"memory\"} %u\n"
                          "personaplex_capacity_calls{bound=\"compute\"} %u\n"
                          "# HELP personaplex_tick_over_budget 1 while the live ticks of the last 2 s run over "
                          "--tick-budget-ms (no call is admitted).\n"
                          "# TYPE personaplex_tick_over_budget gauge\npersonaplex_tick_over_budget %d\n"
                          "# HELP personaplex_tick_budget_seconds --tick-budget-ms: the tick p99 a call is admitted "
                          "within.\n# TYPE personaplex_tick_budget_seconds gauge\npersonaplex_tick_budget_seconds %s\n",
                          g->capacity_memory, g->capacity_compute, g->over_budget ? 1 : 0,
                          num (budget, "%.3f", g->tick_budget_ms / 1000.0));
  g_string_append_printf (out,
                          "# HELP personaplex_device_memory_bytes Device memory held (host memory on the CPU): the "
                          "model's weights and the engine (every call's state and the batch scratch).\n"
                          "# TYPE personaplex_device_memory_bytes gauge\n"
                          "personaplex_device_memory_bytes{backend=\"%s\",part=\"weights\"} %" G_GUINT64_FORMAT "\n"
                          "personaplex_device_memory_bytes{backend=\"%s\",part=\"engine\"} %" G_GUINT64_FORMAT "\n",
                          g->backend ? g->backend : "unknown", g->weight_bytes, g->backend ? g->backend : "unknown",
                          g->engine_bytes);
  g_mutex_lock (&M.lock);
  if (!M.counts)
    M.counts = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, g_free);
  counters_text (out, "personaplex_calls_accepted_total", "Calls accepted, by protocol.");
  counters_text (out, "personaplex_calls_refused_total", "Calls refused before they started, by protocol and "
                 "reason.");
  counters_text (out, "personaplex_calls_ended_total", "Calls ended, by protocol and reason.");
  ticks_text (out, &g->ticks);
  g_string_append (out, "# HELP personaplex_input_dropped_seconds_total Call audio dropped unheard because the "
                        "model was behind that call by more than --max-input-backlog, by protocol.\n"
                        "# TYPE personaplex_input_dropped_seconds_total counter\n");
  for (int p = 0; p < PPX_PROTO_N; p++) {
    char buf[G_ASCII_DTOSTR_BUF_SIZE];
    g_string_append_printf (out, "personaplex_input_dropped_seconds_total{protocol=\"%s\"} %s\n", proto_names[p],
                            num (buf, "%.3f", M.dropped_s[p]));
  }
  g_string_append (out, "# HELP personaplex_join_duration_seconds From the connection to the handshake (the "
                        "call's prompts done), by protocol.\n"
                        "# TYPE personaplex_join_duration_seconds histogram\n");
  proto_histograms_text (out, "personaplex_join_duration_seconds", M.joins, join_bounds, G_N_ELEMENTS (join_bounds));
  pages_text (out);
  g_mutex_unlock (&M.lock);
  return g_string_free (out, FALSE);
}
