/* personaplex-server: the HTTP server (libsoup 3) and the calls it holds.
 *
 *   /api/chat    the PersonaPlex WebSocket protocol (server-chat.h)
 *   /ws          WebRTC signalling for the built-in page (server-webrtc.h)
 *   /api/voices  the model's voices (JSON)
 *   /health      200 while a call can be taken, 503 when full or draining (server-metrics.h)
 *   /metrics     Prometheus text
 *   /            the WebRTC page, or the --static web client (server-static.h)
 *
 * Before a call's upgrade: the Origin (403), the token (401), the capacity and drain (503 with Retry-After, both
 * protocols; server-admission.h) and the call's parameters (400); nothing of this costs model time. Every
 * call, of either protocol, holds one of the engine's slots from its acceptance until its teardown finished. */
#ifndef PPX_SERVER_HTTP_H
#define PPX_SERVER_HTTP_H

#include <libsoup/soup.h>

#include "server-metrics.h"
#include "server-model.h"
#include "server-options.h"
#include "server-params.h"

G_BEGIN_DECLS

typedef struct _PpxServer PpxServer;
typedef struct _PpxServerCall PpxServerCall;

/* Listens on options->address:options->port (TLS when asked). `options` and `keeper` must outlive the server;
 * more than `max_calls` calls at once are refused. */
PpxServer *ppx_server_new (const PpxServerOptions *options, PpxServerModelKeeper *keeper, int max_calls,
                           GError **error);
/* How a call of a protocol starts once the router has checked its request (Origin, token, parameters, room:
 * 403/401/400/503 before any of this runs); `params` become the callee's. The router knows the protocols only
 * through this table, which personaplex-server.c fills (/api/chat: server-chat.h, /ws: server-webrtc.h), so the
 * arrows run from the calls to the router, never back. */
typedef void (*PpxServerCallStart) (PpxServer *server, SoupServerMessage *msg, PpxCallParams *params);
void ppx_server_set_protocol (PpxServer *server, PpxProto proto, const char *path, PpxServerCallStart start);
/* Admission by the measured tick as well (server-admission.h; it must outlive the server). */
typedef struct _PpxAdmission PpxAdmission;
void ppx_server_set_admission (PpxServer *server, PpxAdmission *admission);
/* The tick's predicted growth (us) from now to the capacity at full context (ppx_tick_model_rise; 0 without
 * admission by the tick). */
gint64 ppx_server_tick_rise_us (PpxServer *server);
/* Whether a new /api/chat call's first pages wait for that rise: --pacing-rise, or by default where the admission
 * measured its tick on a GPU (not with --no-pacing-rise or --no-pacing). */
gboolean ppx_server_pacing_rise (PpxServer *server);
/* "http://127.0.0.1:8080/" or "https://..." (g_free). */
char *ppx_server_get_url (PpxServer *server);
/* SIGTERM: takes no more calls; open calls run on for --drain-timeout, then each is ended; `loop` is quit once
 * none is left. */
void ppx_server_drain (PpxServer *server, GMainLoop *loop);
/* Ends every call at once and stops listening. */
void ppx_server_free (PpxServer *server);

/* ---- for the calls ---- */

typedef struct {
  /* The server ends the call (drain timeout): it tells the client why (0x05, or the page's error message), closes
   * its WebSocket and tears down as usual, then calls ppx_server_call_remove. */
  void (*end) (gpointer call, const char *why);
  /* At exit: stop and free now (synchronously; no ppx_server_call_remove). */
  void (*destroy) (gpointer call);
} PpxServerCallClass;

const PpxServerOptions *ppx_server_get_options (PpxServer *server);
const char *ppx_server_get_model (PpxServer *server); /* "cpu / bf16" */
guint ppx_server_next_call_id (PpxServer *server);
/* Takes a slot for call `id`; the server counts it until ppx_server_call_remove. */
PpxServerCall *ppx_server_call_add (PpxServer *server, PpxProto proto, guint id, const PpxServerCallClass *klass,
                                    gpointer call);
/* The call's prompts are done: its join time (from ppx_server_call_add) goes to the metrics. */
void ppx_server_call_joined (PpxServerCall *c);
/* The call's teardown finished (a log line says so); `reason` is its metrics label (server-metrics.h). Frees `c`. */
void ppx_server_call_remove (PpxServerCall *c, const char *reason);

G_END_DECLS
#endif
