/* personaplex-server: HTTP routing, the checks before a call, the calls held, drain (server-http.h). */
#include "server-http.h"

#include <json-glib/json-glib.h>
#include <string.h>

#include "server-admission.h"
#include "server-auth.h"
#include "server-listener.h"
#include "server-static.h"
#include "server-tls.h"

/* After the drain timeout the calls are told to end; this long later the server stops whatever is left. */
#define END_GRACE_S 10

struct _PpxServer {
  const PpxServerOptions *options;
  PpxServerModelKeeper *keeper;
  char *model;
  int max_calls;
  gboolean tls;
  SoupServer *soup;
  PpxListener *listener; /* accepts for soup (server-listener.h) */
  PpxOrigins *origins;
  GStrv voices;
  GList *calls; /* PpxServerCall* */
  guint next_id;
  gboolean draining;
  GMainLoop *drain_loop;
  guint drain_timer;
  PpxAdmission *admission; /* NULL: max_calls alone */
  struct {
    const char *path;
    PpxServerCallStart start;
  } protocols[PPX_PROTO_N]; /* ppx_server_set_protocol */
};

struct _PpxServerCall {
  PpxServer *server;
  PpxProto proto;
  guint id;
  const PpxServerCallClass *klass;
  gpointer call;
  gint64 start_us;
};

static GQuark
server_error_quark (void)
{
  return g_quark_from_static_string ("ppx-server-http");
}

/* ---- the calls ---- */

const PpxServerOptions *
ppx_server_get_options (PpxServer *server)
{
  return server->options;
}

const char *
ppx_server_get_model (PpxServer *server)
{
  return server->model;
}

guint
ppx_server_next_call_id (PpxServer *server)
{
  return ++server->next_id;
}

PpxServerCall *
ppx_server_call_add (PpxServer *server, PpxProto proto, guint id, const PpxServerCallClass *klass, gpointer call)
{
  PpxServerCall *c = g_new0 (PpxServerCall, 1);
  c->server = server;
  c->proto = proto;
  c->id = id;
  c->klass = klass;
  c->call = call;
  c->start_us = g_get_monotonic_time ();
  server->calls = g_list_append (server->calls, c);
  ppx_metrics_accepted (proto);
  return c;
}

void
ppx_server_call_joined (PpxServerCall *c)
{
  ppx_metrics_join (c->proto, (g_get_monotonic_time () - c->start_us) / 1e6);
}

static void
quit_when_drained (PpxServer *server)
{
  if (server->draining && !server->calls && server->drain_loop) {
    g_printerr ("personaplex-server: drained: no call left\n");
    g_main_loop_quit (server->drain_loop);
  }
}

void
ppx_server_call_remove (PpxServerCall *c, const char *reason)
{
  PpxServer *server = c->server;
  server->calls = g_list_remove (server->calls, c);
  ppx_metrics_ended (c->proto, reason);
  g_printerr ("personaplex-server: %s %u: torn down (%s), %u call(s) open\n",
              c->proto == PPX_PROTO_CHAT ? "call" : "session", c->id, reason, g_list_length (server->calls));
  g_free (c);
  quit_when_drained (server);
}

/* ---- drain ---- */

static gboolean
on_end_grace_over (gpointer user_data)
{
  PpxServer *server = user_data;
  server->drain_timer = 0;
  g_printerr ("personaplex-server: %u call(s) did not end within %d s; stopping them\n",
              g_list_length (server->calls), END_GRACE_S);
  if (server->drain_loop)
    g_main_loop_quit (server->drain_loop);
  return G_SOURCE_REMOVE;
}

static gboolean
on_drain_timeout (gpointer user_data)
{
  PpxServer *server = user_data;
  g_printerr ("personaplex-server: drain timeout (%d s): ending %u call(s)\n", server->options->drain_timeout,
              g_list_length (server->calls));
  /* `end` may remove calls from the list (a call that has no WebSocket yet) */
  g_autoptr (GList) calls = g_list_copy (server->calls);
  for (GList *l = calls; l; l = l->next) {
    PpxServerCall *c = l->data;
    if (g_list_find (server->calls, c))
      c->klass->end (c->call, "the server is shutting down");
  }
  server->drain_timer = server->calls ? g_timeout_add_seconds (END_GRACE_S, on_end_grace_over, server) : 0;
  quit_when_drained (server);
  return G_SOURCE_REMOVE;
}

void
ppx_server_drain (PpxServer *server, GMainLoop *loop)
{
  if (server->draining)
    return;
  server->draining = TRUE;
  server->drain_loop = loop;
  g_printerr ("personaplex-server: draining: no new calls; %u open call(s) may run on for %d s\n",
              g_list_length (server->calls), server->options->drain_timeout);
  if (server->calls)
    server->drain_timer = g_timeout_add_seconds (server->options->drain_timeout, on_drain_timeout, server);
  quit_when_drained (server);
}

/* ---- operator endpoints ---- */

static void
set_json (SoupServerMessage *msg, guint status, const char *json)
{
  soup_message_headers_replace (soup_server_message_get_response_headers (msg), "Cache-Control", "no-store");
  soup_server_message_set_response (msg, "application/json", SOUP_MEMORY_COPY, json, strlen (json));
  soup_server_message_set_status (msg, status, NULL);
}

static void
fill_gauges (PpxServer *server, PpxServerGauges *g, GstStructure *stats)
{
  memset (g, 0, sizeof *g);
  g->sessions = g_list_length (server->calls);
  g->capacity = g->capacity_memory = g->capacity_compute = (guint) server->max_calls;
  g->draining = server->draining;
  g->pacing_rise = ppx_server_pacing_rise (server);
  if (server->admission) {
    PpxAdmissionState st;
    ppx_admission_state (server->admission, g->sessions, &st);
    g->capacity = st.capacity;
    g->capacity_memory = st.memory;
    g->capacity_compute = st.compute;
    g->bound = st.bound;
    g->admission = st.mode;
    g->tick_budget_ms = st.budget_ms;
    g->over_budget = st.over_budget && !g_str_equal (st.mode, "memory");
    g->predicted_tick_ms = st.predicted_ms;
    if (g->pacing_rise) /* from the state just read, not a second read of the live ticks */
      g->pacing_rise_ms = ppx_admission_tick_rise_ms (server->admission, &st, g->sessions);
  }
  if (!stats)
    return;
  g->backend = gst_structure_get_string (stats, "backend");
  g->quantization = gst_structure_get_string (stats, "quantization");
  g->kv_cache_format = gst_structure_get_string (stats, "kv-cache-format");
  gst_structure_get_uint64 (stats, "memory-bytes", &g->weight_bytes);
  gst_structure_get_uint64 (stats, "engine-bytes", &g->engine_bytes);
  ppx_server_engine_ticks (stats, &g->ticks);
}

static void
serve_health (PpxServer *server, SoupServerMessage *msg, gboolean metrics)
{
  g_autoptr (GstStructure) stats = ppx_server_model_keeper_stats (server->keeper);
  PpxServerGauges g;
  fill_gauges (server, &g, stats);
  PpxBackendKind kind = PPX_BACKEND_AUTO;
  g_autofree char *device = g.backend && ppx_backend_kind_from_name (g.backend, &kind) && kind == PPX_BACKEND_CUDA
                                ? g_strdup_printf ("cuda:%d", ppx_server_model_keeper_device (server->keeper))
                                : g_strdup (g.backend ? g.backend : "unknown");
  g.device = device;
  if (metrics) {
    g_autofree char *text = ppx_metrics_prometheus (&g);
    soup_server_message_set_response (msg, "text/plain; version=0.0.4; charset=utf-8", SOUP_MEMORY_COPY, text,
                                      strlen (text));
    soup_server_message_set_status (msg, SOUP_STATUS_OK, NULL);
    return;
  }
  g_autofree char *json = ppx_metrics_health_json (&g);
  gboolean free_slot = !g.draining && !g.over_budget && g.sessions < g.capacity;
  set_json (msg, free_slot ? SOUP_STATUS_OK : SOUP_STATUS_SERVICE_UNAVAILABLE, json);
}

static void
serve_voices (PpxServer *server, SoupServerMessage *msg)
{
  g_autoptr (JsonBuilder) b = json_builder_new ();
  json_builder_begin_object (b);
  json_builder_set_member_name (b, "voices");
  json_builder_begin_array (b);
  for (guint i = 0; server->voices[i]; i++)
    json_builder_add_string_value (b, server->voices[i]);
  json_builder_end_array (b);
  json_builder_set_member_name (b, "default");
  g_autofree char *def = server->options->voice_prompt ? g_path_get_basename (server->options->voice_prompt) : NULL;
  if (def)
    json_builder_add_string_value (b, def);
  else
    json_builder_add_null_value (b);
  json_builder_end_object (b);
  g_autoptr (JsonNode) root = json_builder_get_root (b);
  g_autofree char *json = json_to_string (root, FALSE);
  set_json (msg, SOUP_STATUS_OK, json);
}

/* ---- the checks before a call ---- */

static void
refuse (SoupServerMessage *msg, PpxProto proto, guint status, const char *reason, const char *why)
{
  g_printerr ("personaplex-server: refused %s from %s: %u (%s)\n", soup_server_message_get_uri (msg)
              ? g_uri_get_path (soup_server_message_get_uri (msg)) : "?",
              soup_server_message_get_remote_host (msg), status, why);
  if (proto < PPX_PROTO_N)
    ppx_metrics_refused (proto, reason);
  g_autofree char *body = g_strdup_printf ("%s\n", why);
  soup_server_message_set_response (msg, "text/plain; charset=utf-8", SOUP_MEMORY_COPY, body, strlen (body));
  soup_server_message_set_status (msg, status, NULL);
  if (status == SOUP_STATUS_UNAUTHORIZED)
    soup_message_headers_replace (soup_server_message_get_response_headers (msg), "WWW-Authenticate", "Bearer");
  if (status == SOUP_STATUS_SERVICE_UNAVAILABLE)
    soup_message_headers_replace (soup_server_message_get_response_headers (msg), "Retry-After", "5");
}

/* proto PPX_PROTO_N: not a call (no refusal counted) */
static gboolean
authorized (PpxServer *server, SoupServerMessage *msg, GHashTable *query, PpxProto proto)
{
  if (ppx_auth_token_ok (msg, query, server->options->auth_token))
    return TRUE;
  refuse (msg, proto, SOUP_STATUS_UNAUTHORIZED, "unauthorized", "a missing or wrong token");
  return FALSE;
}

/* A page opened with ?token= (a browser that cannot send the token otherwise, e.g. the reference web client): the
 * right token gets the cookie and a redirect to the page without it, a wrong one 401. */
static void
sign_in (PpxServer *server, SoupServerMessage *msg, GHashTable *query)
{
  if (!ppx_auth_query_token_ok (query, server->options->auth_token)) {
    refuse (msg, PPX_PROTO_N, SOUP_STATUS_UNAUTHORIZED, "unauthorized", "a wrong token");
    return;
  }
  g_printerr ("personaplex-server: a browser at %s signed in (token cookie set)\n",
              soup_server_message_get_remote_host (msg));
  ppx_auth_sign_in (msg, server->options->auth_token, server->tls);
}

/* The common part of /api/chat and /ws: a GET from an allowed origin with the token and valid parameters. */
static gboolean
check_call (PpxServer *server, SoupServerMessage *msg, GHashTable *query, PpxProto proto, PpxCallParams *params)
{
  if (soup_server_message_get_method (msg) != SOUP_METHOD_GET) {
    soup_server_message_set_status (msg, SOUP_STATUS_METHOD_NOT_ALLOWED, NULL);
    return FALSE;
  }
  const char *origin = soup_message_headers_get_one (soup_server_message_get_request_headers (msg), "Origin");
  if (!ppx_origins_allow (server->origins, origin)) {
    g_autofree char *shown = g_strescape (origin, NULL);
    g_autofree char *why = g_strdup_printf ("Origin '%.100s' is not this server (--allowed-origin adds one)", shown);
    refuse (msg, proto, SOUP_STATUS_FORBIDDEN, "forbidden_origin", why);
    return FALSE;
  }
  if (!authorized (server, msg, query, proto))
    return FALSE;
  g_autoptr (GError) error = NULL;
  if (!ppx_call_params_parse (query, server->options->model_dir, (const char *const *) server->voices, params,
                              &error)) {
    refuse (msg, proto, SOUP_STATUS_BAD_REQUEST, "bad_request", error->message);
    return FALSE;
  }
  return TRUE;
}

/* NULL when a call can be taken, else why not: "draining", "full" or "over_budget" (server-admission.h). */
static const char *
no_room (PpxServer *server)
{
  const guint open = g_list_length (server->calls);
  if (server->draining)
    return "draining";
  if (open >= (guint) server->max_calls)
    return "full";
  return server->admission ? ppx_admission_refuse (server->admission, open) : NULL;
}

gboolean
ppx_server_pacing_rise (PpxServer *server)
{
  const PpxServerOptions *o = server->options;
  if (o->no_pacing || o->no_pacing_rise)
    return FALSE;
  return o->pacing_rise || (server->admission && ppx_admission_predicts_rise (server->admission));
}

gint64
ppx_server_tick_rise_us (PpxServer *server)
{
  if (!server->admission)
    return 0;
  const guint open = g_list_length (server->calls);
  PpxAdmissionState st;
  ppx_admission_state (server->admission, open, &st);
  return (gint64) (ppx_admission_tick_rise_ms (server->admission, &st, open) * 1000);
}

void
ppx_server_set_admission (PpxServer *server, PpxAdmission *admission)
{
  server->admission = admission;
}

void
ppx_server_set_protocol (PpxServer *server, PpxProto proto, const char *path, PpxServerCallStart start)
{
  g_return_if_fail (proto < PPX_PROTO_N);
  server->protocols[proto].path = path;
  server->protocols[proto].start = start;
}

/* A call's request: the checks, the room, then the protocol's start. */
static void
start_call (PpxServer *server, SoupServerMessage *msg, GHashTable *query, PpxProto proto)
{
  PpxCallParams params;
  if (!check_call (server, msg, query, proto, &params))
    return;
  /* full: 503 before the upgrade, both protocols (a balancer retries it on another server) */
  const char *busy = no_room (server);
  if (busy) {
    refuse (msg, proto, SOUP_STATUS_SERVICE_UNAVAILABLE, busy,
            server->draining ? "the server is draining"
            : g_str_equal (busy, "over_budget") ? "the server is full: its tick runs over its budget"
                                                : "the server is full");
    ppx_call_params_clear (&params);
    return;
  }
  server->protocols[proto].start (server, msg, &params);
}

/* The protocol whose path this is, or PPX_PROTO_N. */
static PpxProto
call_protocol (PpxServer *server, const char *path)
{
  for (int p = 0; p < PPX_PROTO_N; p++)
    if (server->protocols[p].start && g_str_equal (path, server->protocols[p].path))
      return (PpxProto) p;
  return PPX_PROTO_N;
}

static void
handle (SoupServer *soup, SoupServerMessage *msg, const char *path, GHashTable *query, gpointer user_data)
{
  PpxServer *server = user_data;
  const PpxProto proto = call_protocol (server, path);
  if (proto < PPX_PROTO_N) {
    start_call (server, msg, query, proto);
  } else if (g_str_equal (path, "/health")) {
    serve_health (server, msg, FALSE);
  } else if (g_str_equal (path, "/metrics")) {
    if (authorized (server, msg, query, PPX_PROTO_N))
      serve_health (server, msg, TRUE);
  } else if (g_str_equal (path, "/api/voices")) {
    if (authorized (server, msg, query, PPX_PROTO_N))
      serve_voices (server, msg);
  } else if (query && g_hash_table_contains (query, "token") && server->options->auth_token &&
             (soup_server_message_get_method (msg) == SOUP_METHOD_GET ||
              soup_server_message_get_method (msg) == SOUP_METHOD_HEAD)) {
    sign_in (server, msg, query);
  } else {
    ppx_server_static_serve (msg, path, server->options->static_dir);
  }
}

/* ---- the server ---- */

static gboolean
set_up_tls (PpxServer *server, GError **error)
{
  const PpxServerOptions *o = server->options;
  g_autoptr (GTlsCertificate) cert = NULL;
  if (o->tls_cert) {
    cert = ppx_server_tls_load (o->tls_cert, o->tls_key, error);
  } else if (o->ssl_dir) {
    gboolean made;
    if ((cert = ppx_server_tls_from_dir (o->ssl_dir, o->address, &made, error)) && made)
      g_printerr ("personaplex-server: made a self-signed certificate in %s (cert.pem, key.pem)\n", o->ssl_dir);
  } else {
    return TRUE;
  }
  if (!cert)
    return FALSE;
  g_object_set (server->soup, "tls-certificate", cert, NULL);
  server->tls = TRUE;
  return TRUE;
}

PpxServer *
ppx_server_new (const PpxServerOptions *options, PpxServerModelKeeper *keeper, int max_calls, GError **error)
{
  PpxServer *server = g_new0 (PpxServer, 1);
  server->options = options;
  server->keeper = keeper;
  server->max_calls = max_calls;
  server->model = ppx_server_model_keeper_describe (keeper);
  server->voices = ppx_server_list_voices (options->model_dir);
  server->soup = soup_server_new ("server-header", "personaplex-server", NULL);
  /* Opus and short messages: no compression (and no decompression of what a client sends) */
  soup_server_remove_websocket_extension (server->soup, SOUP_TYPE_WEBSOCKET_EXTENSION_DEFLATE);
  if (!set_up_tls (server, error)) {
    ppx_server_free (server);
    return NULL;
  }
  soup_server_add_handler (server->soup, NULL, handle, server, NULL);
  g_autoptr (GInetAddress) inet = g_inet_address_new_from_string (options->address);
  g_autoptr (GError) e = NULL;
  g_autoptr (GTlsCertificate) cert = NULL;
  g_object_get (server->soup, "tls-certificate", &cert, NULL);
  if (!(server->listener = ppx_listener_new (server->soup, inet, (guint16) options->port, cert, &e))) {
    g_set_error (error, server_error_quark (), 0, "listening on %s port %d: %s", options->address, options->port,
                 e->message);
    ppx_server_free (server);
    return NULL;
  }
  GSList *listeners = ppx_listener_get_sockets (server->listener);
  server->origins = ppx_origins_new (listeners, server->tls ? "https" : "http",
                                     (const char *const *) options->allowed_origins);
  g_slist_free (listeners);
  g_autofree char *origins = ppx_origins_describe (server->origins);
  g_printerr ("personaplex-server: %u voice(s) in %s/voices; origins allowed to open calls: %s%s\n",
              g_strv_length (server->voices), options->model_dir, origins,
              options->auth_token ? "; a token is required" : "");
  return server;
}

char *
ppx_server_get_url (PpxServer *server)
{
  /* From the listening socket (soup_server_get_uris leaks its socket addresses in libsoup 3.2). */
  GSList *listeners = server->listener ? ppx_listener_get_sockets (server->listener) : NULL;
  g_autoptr (GSocketAddress) address = listeners ? g_socket_get_local_address (listeners->data, NULL) : NULL;
  g_slist_free (listeners);
  if (!address || !G_IS_INET_SOCKET_ADDRESS (address))
    return g_strdup ("?");
  GInetSocketAddress *inet = G_INET_SOCKET_ADDRESS (address);
  g_autofree char *host = g_inet_address_to_string (g_inet_socket_address_get_address (inet));
  gboolean v6 = g_inet_address_get_family (g_inet_socket_address_get_address (inet)) == G_SOCKET_FAMILY_IPV6;
  return g_strdup_printf (v6 ? "%s://[%s]:%u/" : "%s://%s:%u/", server->tls ? "https" : "http", host,
                          g_inet_socket_address_get_port (inet));
}

void
ppx_server_free (PpxServer *server)
{
  if (!server)
    return;
  if (server->drain_timer)
    g_source_remove (server->drain_timer);
  while (server->calls) {
    PpxServerCall *c = server->calls->data;
    server->calls = g_list_delete_link (server->calls, server->calls);
    c->klass->destroy (c->call);
    g_free (c);
  }
  soup_server_disconnect (server->soup);
  g_object_unref (server->soup);
  ppx_listener_free (server->listener);
  ppx_origins_free (server->origins);
  g_strfreev (server->voices);
  g_free (server->model);
  g_free (server);
}
