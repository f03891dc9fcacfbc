/* personaplex-server: admission by memory and by the measured tick (server-admission.h). */
#include "server-admission.h"

#include <string.h>

#include "server-tick-model.h"

/* Start-up measurement: ticks per row count (after 2 warm-up ticks) on a GPU and on the CPU. */
#define MEASURE_TICKS_GPU 10
#define MEASURE_TICKS_CPU 4
/* How often the live ticks are read. */
#define LEARN_INTERVAL_MS 500
/* The live ticks kept for the p99 of the last PPX_ADMISSION_RECENT_MS: the most the element's history holds. */
#define RECENT_TICKS 256

struct _PpxAdmission {
  PpxServerModelKeeper *keeper;
  gboolean memory_mode;
  gboolean gpu;          /* the start-up measurement ran on a GPU (not the CPU backend) */
  double budget_ms;
  guint memory;
  PpxTickModel *model;
  guint64 seen;          /* live ticks learnt */
  /* the last RECENT_TICKS of them, a ring: when each ended (monotonic µs) and its ms */
  gint64 recent_end[RECENT_TICKS];
  double recent_ms[RECENT_TICKS];
  gboolean over_budget;
  double recent_p99_ms;
  guint timer;
  /* what the log said last: it speaks again when the capacity or the bound changes */
  guint logged_capacity;
  const char *logged_bound;
  gboolean logged_over;
};

/* The row counts measured: 1, a quarter, half, three quarters and all of the calls memory holds. */
static guint
measure_rows (guint memory, guint *rows)
{
  const guint want[] = {1, memory / 4, memory / 2, 3 * memory / 4, memory};
  guint n = 0;
  for (guint i = 0; i < G_N_ELEMENTS (want); i++)
    if (want[i] >= 1 && (n == 0 || want[i] > rows[n - 1]))
      rows[n++] = want[i];
  return n;
}

static void
measure (PpxAdmission *a)
{
  g_autoptr (GstStructure) stats = ppx_server_model_keeper_stats (a->keeper);
  const char *backend = stats ? gst_structure_get_string (stats, "backend") : NULL;
  const gboolean cpu = !backend || g_str_equal (backend, "cpu");
  a->gpu = !cpu;
  const guint ticks = cpu ? MEASURE_TICKS_CPU : MEASURE_TICKS_GPU;
  guint rows[5];
  const guint n = measure_rows (a->memory, rows);
  const gint64 t0 = g_get_monotonic_time ();
  GString *line = g_string_new (NULL);
  for (guint i = 0; i < n; i++) {
    g_autoptr (GstStructure) s = ppx_server_model_keeper_measure_tick (a->keeper, rows[i], ticks);
    const char *err = s ? gst_structure_get_string (s, "error") : "no answer";
    double p99 = 0;
    guint padded = rows[i];
    /* on the CPU the least of the ticks: the machine's other work (tests, builds) varies the rest, and the live
     * ticks take over once calls run; on a GPU their p99 */
    if (err || !gst_structure_get_double (s, cpu ? "min-ms" : "p99-ms", &p99)) {
      g_printerr ("personaplex-server: the tick of %u call(s) could not be measured: %s\n", rows[i],
                  err ? err : "no p99");
      break;
    }
    gst_structure_get_uint (s, "padded-rows", &padded);
    if (padded > rows[i])
      ppx_tick_model_set_bucketed (a->model, TRUE);
    ppx_tick_model_add_measured (a->model, padded, p99);
    g_string_append_printf (line, "%s%u: %.1f", line->len ? ", " : "", rows[i], p99);
    if (p99 > 2 * a->budget_ms) /* far over the budget: larger counts tell nothing more */
      break;
  }
  g_printerr ("personaplex-server: tick %s at full context (ms, by calls), %u tick(s) each, measured in %.1f s: "
              "%s\n", cpu ? "(the least, on the CPU)" : "p99", ticks, (g_get_monotonic_time () - t0) / 1e6,
              line->len ? line->str : "none");
  g_string_free (line, TRUE);
}

/* The live ticks since the last read (only those: the element gives the ticks after `seen`), and the p99 of those
 * of the last PPX_ADMISSION_RECENT_MS. */
static void
learn (PpxAdmission *a)
{
  g_autoptr (GstStructure) h = ppx_server_model_keeper_tick_history (a->keeper, a->seen);
  guint64 total = 0;
  const GValue *rows = h ? gst_structure_get_value (h, "rows") : NULL;
  const GValue *ms = h ? gst_structure_get_value (h, "ms") : NULL;
  const GValue *age = h ? gst_structure_get_value (h, "age-ms") : NULL;
  if (!rows || !ms || !age || !gst_structure_get_uint64 (h, "total", &total))
    return;
  const guint n = gst_value_array_get_size (rows);
  if (gst_value_array_get_size (ms) != n || gst_value_array_get_size (age) != n)
    return;
  const gint64 now = g_get_monotonic_time ();
  ppx_tick_model_set_now (a->model, now);
  for (guint i = 0; i < n; i++) {
    const guint r = g_value_get_uint (gst_value_array_get_value (rows, i));
    const double t = g_value_get_double (gst_value_array_get_value (ms, i));
    const gint64 end = now - (gint64) (g_value_get_double (gst_value_array_get_value (age, i)) * 1000);
    ppx_tick_model_add_live (a->model, ppx_tick_model_rows (a->model, r), t, end);
    const guint at = (guint) ((total - n + i) % RECENT_TICKS);
    a->recent_end[at] = end;
    a->recent_ms[at] = t;
  }
  a->seen = total;
  double recent[RECENT_TICKS];
  guint n_recent = 0;
  for (guint i = 0; i < MIN (total, (guint64) RECENT_TICKS); i++)
    if (now - a->recent_end[i] <= PPX_ADMISSION_RECENT_MS * (gint64) 1000)
      recent[n_recent++] = a->recent_ms[i];
  a->recent_p99_ms = n_recent >= PPX_ADMISSION_RECENT_MIN ? ppx_tick_p99 (recent, n_recent) : 0;
  a->over_budget = a->recent_p99_ms > a->budget_ms;
}

static void
compute_state (PpxAdmission *a, guint open, PpxAdmissionState *st)
{
  memset (st, 0, sizeof *st);
  st->memory = a->memory;
  /* at least one call: a prediction alone never closes the server (a start-up measurement taken while something
   * else ran could say none fits, and with no call there would be no live tick to learn otherwise); the live
   * ticks' over-budget rule still stops it */
  st->compute = MAX (ppx_tick_model_calls_within (a->model, a->budget_ms, a->memory), MIN (a->memory, 1));
  st->mode = a->memory_mode ? "memory" : "tick";
  st->budget_ms = a->budget_ms;
  st->bound = !a->memory_mode && st->compute < st->memory ? "compute" : "memory";
  st->capacity = a->memory_mode ? st->memory : MIN (st->memory, st->compute);
  st->over_budget = a->over_budget;
  st->recent_p99_ms = a->recent_p99_ms;
  st->predicted_ms = ppx_tick_model_predict (a->model, open + 1);
}

/* Says which bound holds when that, or the capacity, changed. */
static void
log_state (PpxAdmission *a, const PpxAdmissionState *st)
{
  const gboolean over = st->over_budget && !a->memory_mode; /* only then does it stop admissions */
  if (st->capacity == a->logged_capacity && st->bound == a->logged_bound && over == a->logged_over)
    return;
  a->logged_capacity = st->capacity;
  a->logged_bound = st->bound;
  a->logged_over = over;
  g_printerr ("personaplex-server: capacity %u call(s), the %s bound holds (memory %u, compute %u: tick p99 "
              "predicted %.1f ms for %u, budget %.0f ms)%s%s\n", st->capacity, st->bound, st->memory, st->compute,
              ppx_tick_model_predict (a->model, MAX (st->compute, 1)), MAX (st->compute, 1), st->budget_ms,
              a->memory_mode ? "; --admission memory: admitting by memory alone" : "",
              over ? "; live ticks over the budget: admitting nothing until they are back under it" : "");
}

static gboolean
on_learn (gpointer data)
{
  PpxAdmission *a = data;
  PpxAdmissionState st;
  learn (a);
  compute_state (a, 0, &st);
  log_state (a, &st);
  return G_SOURCE_CONTINUE;
}

PpxAdmission *
ppx_admission_new (const PpxServerOptions *o, PpxServerModelKeeper *keeper, guint memory_calls, guint engine_slots)
{
  PpxAdmission *a = g_new0 (PpxAdmission, 1);
  a->keeper = keeper;
  a->memory_mode = o->admission_memory;
  a->budget_ms = o->tick_budget_ms;
  a->memory = memory_calls;
  a->model = ppx_tick_model_new (MAX (engine_slots, memory_calls), FALSE);
  measure (a);
  on_learn (a);
  a->timer = g_timeout_add (LEARN_INTERVAL_MS, on_learn, a);
  return a;
}

void
ppx_admission_free (PpxAdmission *a)
{
  if (!a)
    return;
  if (a->timer)
    g_source_remove (a->timer);
  ppx_tick_model_free (a->model);
  g_free (a);
}

void
ppx_admission_state (PpxAdmission *a, guint open, PpxAdmissionState *st)
{
  learn (a);
  compute_state (a, open, st);
}

gboolean
ppx_admission_predicts_rise (PpxAdmission *a)
{
  return a->gpu && !a->memory_mode;
}

double
ppx_admission_tick_rise_ms (PpxAdmission *a, const PpxAdmissionState *st, guint open)
{
  return ppx_tick_model_rise (a->model, open, st->capacity, st->recent_p99_ms);
}

const char *
ppx_admission_refuse (PpxAdmission *a, guint open)
{
  PpxAdmissionState st;
  ppx_admission_state (a, open, &st);
  log_state (a, &st);
  if (open >= st.capacity)
    return "full";
  if (!a->memory_mode && st.over_budget)
    return "over_budget";
  return NULL;
}
