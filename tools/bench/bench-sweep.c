#include "bench-sweep.h"

static gboolean
parse_list (const char *list, const char *what, GPtrArray *items, GError **error)
{
  g_auto (GStrv) parts = g_strsplit (list ? list : "", ",", -1);
  for (int i = 0; parts[i]; i++) {
    g_strstrip (parts[i]);
    if (!*parts[i]) {
      g_set_error (error, PPX_ERROR, PPX_ERROR_INVALID, "%s: empty item in '%s'", what, list);
      return FALSE;
    }
    g_ptr_array_add (items, g_strdup (parts[i]));
  }
  if (items->len == 0) {
    g_set_error (error, PPX_ERROR, PPX_ERROR_INVALID, "%s: empty list", what);
    return FALSE;
  }
  return TRUE;
}

gboolean
bench_parse_batches (const char *list, int *out, int max_n, int *n, GError **error)
{
  g_autoptr (GPtrArray) items = g_ptr_array_new_with_free_func (g_free);
  if (!parse_list (list, "--sweep", items, error))
    return FALSE;
  if ((int) items->len > max_n) {
    g_set_error (error, PPX_ERROR, PPX_ERROR_INVALID, "--sweep: at most %d batch sizes", max_n);
    return FALSE;
  }
  for (guint i = 0; i < items->len; i++) {
    const char *it = g_ptr_array_index (items, i);
    char *end = NULL;
    gint64 v = g_ascii_strtoll (it, &end, 10);
    if (!end || *end || v < 1 || v > 4096) {
      g_set_error (error, PPX_ERROR, PPX_ERROR_INVALID, "--sweep: '%s' is not a batch size in [1, 4096]", it);
      return FALSE;
    }
    out[i] = (int) v;
  }
  *n = (int) items->len;
  return TRUE;
}

/* One row: B sessions on an engine of B slots, prompts, --context, warm-up, measured ticks. FALSE with
 * *fits = FALSE when the engine or its sessions do not fit the device; FALSE with an error otherwise. */
static gboolean
sweep_one (const BenchSetup *s, PpxModel *model, PpxKvFormat kv, int B, BenchStats *st, guint64 *session_bytes,
           guint64 *engine_bytes, gboolean *fits, GError **error)
{
  *fits = TRUE;
  PpxEngineParams ep;
  ppx_engine_params_init (&ep);
  ep.max_sessions = B;
  ep.kv_format = kv;
  GError *err = NULL;
  PpxEngine *engine = ppx_engine_new (model, &ep, &err);
  if (!engine) {
    *fits = !g_error_matches (err, PPX_ERROR, PPX_ERROR_NOMEM);
    g_propagate_error (error, err);
    return FALSE;
  }
  *session_bytes = ppx_engine_session_bytes (engine);
  *engine_bytes = ppx_engine_device_bytes (engine);
  PpxSession **sessions = g_new0 (PpxSession *, B);
  PpxSessionParams sp;
  ppx_session_params_init (&sp);
  gboolean ok = TRUE;
  for (int i = 0; ok && i < B; i++) {
    sp.seed = s->seed + (guint64) i;
    ok = (sessions[i] = ppx_engine_session_new (engine, &sp, &err)) != NULL;
  }
  if (!ok) {
    *fits = !g_error_matches (err, PPX_ERROR, PPX_ERROR_NOMEM);
    g_propagate_error (error, err);
  }
  double *ms = g_new (double, s->frames);
  ok = ok && bench_tick_sessions (s, model, engine, sessions, B, ms, error);
  if (ok)
    bench_stats_compute (ms, s->frames, st);
  g_free (ms);
  bench_sessions_free (engine, sessions, B);
  return ok;
}

gboolean
bench_run_sweep (const BenchSetup *s, const int *batches, int n_batches, const PpxKvFormat *kvs, int n_kvs,
                 const char *device_name, FILE *out, GError **error)
{
  PpxModelParams mp;
  bench_model_params (s, &mp);
  const double t0 = bench_now_ms ();
  PpxModel *model = ppx_model_load (&mp, error);
  if (!model)
    return FALSE;
  const double frame_ms = 1000.0 * ppx_model_frame_size (model) / ppx_model_sample_rate (model);
  fprintf (out, "sweep: %s weights (%.2f GB) on %s%s%s, loaded in %.1f s; context %" G_GINT64_FORMAT
           ", %d warm-up + %d measured ticks per row\n",
           ppx_model_quantization_name (model), ppx_model_weight_bytes (model) / 1e9, ppx_model_backend_name (model),
           device_name ? " " : "", device_name ? device_name : "", (bench_now_ms () - t0) / 1000.0, s->context,
           s->warmup, s->frames);
  fprintf (out, "%-5s %5s %9s %9s %9s %12s %13s %13s %9s\n", "kv", "batch", "p50 ms", "p99 ms", "max ms",
           "ms/session", "MB/session", "engine GB", "realtime");
  gboolean ok = TRUE;
  for (int k = 0; ok && k < n_kvs; k++) {
    int best = 0;
    for (int b = 0; ok && b < n_batches; b++) {
      BenchStats st = {0};
      guint64 per = 0, eng = 0;
      gboolean fits = TRUE;
      g_autoptr (GError) err = NULL;
      if (!sweep_one (s, model, kvs[k], batches[b], &st, &per, &eng, &fits, &err)) {
        if (fits) {
          g_propagate_error (error, g_steal_pointer (&err));
          ok = FALSE;
          break;
        }
        fprintf (out, "%-5s %5d  does not fit: %s\n", ppx_kv_format_name (kvs[k]), batches[b], err->message);
        break;
      }
      const gboolean rt = st.p99 < frame_ms;
      if (rt && batches[b] > best)
        best = batches[b];
      fprintf (out, "%-5s %5d %9.2f %9.2f %9.2f %12.3f %13.1f %13.3f %9s\n", ppx_kv_format_name (kvs[k]), batches[b],
               st.p50, st.p99, st.max, st.p50 / batches[b], per / 1e6, eng / 1e9, rt ? "yes" : "NO");
      fflush (out);
    }
    if (ok)
      fprintf (out, "%-5s largest measured batch in real time (tick p99 < %.0f ms): %d\n", ppx_kv_format_name (kvs[k]),
               frame_ms, best);
  }
  ppx_model_unref (model);
  return ok;
}
