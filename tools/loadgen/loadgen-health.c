/* personaplex-loadgen: each server's /health polled during the run (loadgen-health.h). */
#include "loadgen-health.h"

#include <json-glib/json-glib.h>
#include <libsoup/soup.h>
#include <math.h>
#include <string.h>

#define TIMEOUT_S 2

typedef struct {
  LoadgenPoller *poller;
  LoadgenHealth *series; /* owned by the report */
  gboolean busy;         /* a request is out */
} Target;

struct _LoadgenPoller {
  LoadgenReport *report;
  SoupSession *session;
  GCancellable *cancel;
  Target *targets;
  guint n;
  guint timer;
  guint pending;
};

double
loadgen_health_tick_p99 (const char *body, gsize len)
{
  g_autoptr (JsonParser) parser = json_parser_new ();
  if (!body || !json_parser_load_from_data (parser, body, (gssize) len, NULL))
    return NAN;
  JsonNode *root = json_parser_get_root (parser);
  if (!root || !JSON_NODE_HOLDS_OBJECT (root))
    return NAN;
  JsonNode *v = json_object_get_member (json_node_get_object (root), "tick_ms_p99");
  if (!v || !JSON_NODE_HOLDS_VALUE (v))
    return NAN;
  GType t = json_node_get_value_type (v);
  if (t != G_TYPE_DOUBLE && t != G_TYPE_INT64)
    return NAN;
  double p99 = json_node_get_double (v);
  return isfinite (p99) && p99 >= 0 ? p99 : NAN;
}

static void
on_answer (GObject *source, GAsyncResult *result, gpointer user_data)
{
  Target *t = user_data;
  g_autoptr (GError) error = NULL;
  g_autoptr (GBytes) body = soup_session_send_and_read_finish (SOUP_SESSION (source), result, &error);
  t->busy = FALSE;
  if (g_error_matches (error, G_IO_ERROR, G_IO_ERROR_CANCELLED))
    return; /* stopped: the poller is going */
  LoadgenPoller *p = t->poller;
  SoupMessage *msg = soup_session_get_async_result_message (SOUP_SESSION (source), result);
  gsize len = 0;
  const char *data = body ? g_bytes_get_data (body, &len) : NULL;
  double p99 = msg && soup_message_get_status (msg) == SOUP_STATUS_OK ? loadgen_health_tick_p99 (data, len) : NAN;
  if (isnan (p99)) {
    t->series->failures++;
    return;
  }
  double now = (g_get_monotonic_time () - p->report->start_us) / 1e6;
  g_array_append_val (t->series->t_s, now);
  g_array_append_val (t->series->tick_p99_ms, p99);
}

static gboolean
on_poll (gpointer user_data)
{
  LoadgenPoller *p = user_data;
  for (guint i = 0; i < p->n; i++) {
    Target *t = &p->targets[i];
    if (t->busy)
      continue;
    g_autoptr (SoupMessage) msg = soup_message_new (SOUP_METHOD_GET, t->series->url);
    if (!msg) {
      t->series->failures++;
      continue;
    }
    t->busy = TRUE;
    soup_session_send_and_read_async (p->session, msg, G_PRIORITY_DEFAULT, p->cancel, on_answer, t);
  }
  return G_SOURCE_CONTINUE;
}

LoadgenPoller *
loadgen_poller_start (LoadgenReport *report, char **targets, guint interval_ms)
{
  guint n = targets ? g_strv_length (targets) : 0;
  if (!n)
    return NULL;
  LoadgenPoller *p = g_new0 (LoadgenPoller, 1);
  p->report = report;
  p->session = soup_session_new_with_options ("timeout", TIMEOUT_S, "idle-timeout", TIMEOUT_S * 5, NULL);
  p->cancel = g_cancellable_new ();
  p->targets = g_new0 (Target, n);
  p->n = n;
  for (guint i = 0; i < n; i++) {
    const char *eq = strchr (targets[i], '=');
    g_autofree char *name = g_strndup (targets[i], eq - targets[i]);
    LoadgenHealth *h = loadgen_health_new (name, eq + 1);
    g_ptr_array_add (report->health, h);
    p->targets[i] = (Target) {.poller = p, .series = h};
  }
  on_poll (p);
  p->timer = g_timeout_add (interval_ms, on_poll, p);
  return p;
}

void
loadgen_poller_stop (LoadgenPoller *p)
{
  if (!p)
    return;
  g_source_remove (p->timer);
  g_cancellable_cancel (p->cancel);
  /* the cancelled requests finish on the context's next iterations: let them (a few seconds at most), so that
   * none calls back into a poller gone; one that would not is left with its poller (a leak, not a crash) */
  GMainContext *context = g_main_context_ref_thread_default ();
  gint64 deadline = g_get_monotonic_time () + (TIMEOUT_S + 1) * G_USEC_PER_SEC;
  gboolean out = TRUE;
  while (out && g_get_monotonic_time () < deadline) {
    out = FALSE;
    for (guint i = 0; i < p->n; i++)
      out |= p->targets[i].busy;
    if (out && !g_main_context_iteration (context, FALSE))
      g_usleep (1000);
  }
  g_main_context_unref (context);
  if (out)
    return;
  g_object_unref (p->cancel);
  g_object_unref (p->session);
  g_free (p->targets);
  g_free (p);
}
