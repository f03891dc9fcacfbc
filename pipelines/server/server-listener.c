/* personaplex-server: the listening socket and the connections before they are calls (server-listener.h). */
#include "server-listener.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>

#include "server-ws.h"

/* Accepts per wake-up of the listening socket (the rest on the next iteration of the main loop). */
#define ACCEPT_BURST 32
/* At most one log line about closed connections this often (an attack must not flood the log). */
#define REPORT_INTERVAL_S 10

typedef enum {
  CONN_HANDSHAKE, /* TLS handshake running */
  CONN_REQUEST,   /* libsoup reads the request's headers */
  CONN_ANSWER,    /* headers read: the answer is being made or written */
  CONN_CALL,      /* upgraded to a WebSocket: the call's bounds apply (server-ws.h) */
  CONN_CLOSING,   /* closed by the listener, not yet gone */
} ConnState;

typedef struct _Conn Conn;

struct _PpxListener {
  SoupServer *soup;
  GSocket *socket;
  GSource *accept_source;
  guint retry;        /* accepting again after a failure */
  guint tick;         /* the request timeout's check */
  GTlsCertificate *certificate;
  GQueue pending;     /* Conn: handshake, request, answer; the oldest first */
  GHashTable *conns;  /* GSocketAddress (the remote address handed to libsoup) -> Conn; every connection */
  gulong started_id;
  gint64 out_of_fds_us; /* since when accepting fails (0: it does not) */
  guint timed_out, evicted; /* connections closed since the last report */
  gint64 reported_us;
};

struct _Conn {
  PpxListener *l;     /* NULL once the listener is gone */
  GSocketConnection *base; /* not a reference: libsoup's (or the call's) until it is finalized */
  GSocket *socket;    /* the base's */
  GIOStream *stream;  /* what libsoup reads: the base, or the TLS connection */
  GTlsConnection *tls; /* a reference while the handshake runs */
  GCancellable *cancel;
  GSource *peek;      /* plain HTTP: waiting for the request line (the base is the listener's until then) */
  guint peek_retry;
  GSocketAddress *local, *remote;
  gint64 accepted_us;
  ConnState state;
  GList link;         /* in l->pending */
};

static gboolean
is_pending (Conn *c)
{
  return c->state == CONN_HANDSHAKE || c->state == CONN_REQUEST || c->state == CONN_ANSWER;
}

static void
set_state (Conn *c, ConnState state)
{
  if (c->l && is_pending (c) && !(state == CONN_HANDSHAKE || state == CONN_REQUEST || state == CONN_ANSWER))
    g_queue_unlink (&c->l->pending, &c->link);
  c->state = state;
}

/* The base connection was finalized: libsoup (or the call) let it go, its fd is closed. */
static void
conn_gone (gpointer data, GObject *where_it_was)
{
  Conn *c = data;
  if (c->l) {
    set_state (c, CONN_CLOSING);
    g_hash_table_remove (c->l->conns, c->remote);
  }
  g_clear_object (&c->cancel);
  g_object_unref (c->local);
  g_object_unref (c->remote);
  g_free (c);
}

static void
report (PpxListener *l, gboolean now)
{
  gint64 t = g_get_monotonic_time ();
  if (!l->timed_out && !l->evicted)
    return;
  if (!now && l->reported_us && t - l->reported_us < REPORT_INTERVAL_S * G_USEC_PER_SEC)
    return;
  g_printerr ("personaplex-server: closed %u connection(s) that sent no complete request within %d s and %u beyond "
              "%d waiting (the oldest)\n", l->timed_out, PPX_LISTENER_REQUEST_TIMEOUT_S, l->evicted,
              PPX_LISTENER_MAX_PENDING);
  l->timed_out = l->evicted = 0;
  l->reported_us = t;
}

/* Closes a connection that is not a call: libsoup sees its end and lets it go (the fd with it). */
static void
conn_close (Conn *c)
{
  if (c->cancel)
    g_cancellable_cancel (c->cancel);
  set_state (c, CONN_CLOSING);
  if (!g_socket_is_closed (c->socket))
    g_socket_shutdown (c->socket, TRUE, TRUE, NULL);
}

/* ---- libsoup's side: what each request does ---- */

static Conn *
conn_of (PpxListener *l, SoupServerMessage *msg)
{
  GSocketAddress *remote = soup_server_message_get_remote_address (msg);
  return remote ? g_hash_table_lookup (l->conns, remote) : NULL;
}

/* A request that announces a body: answered here, at its headers, and its connection closed; the body is never
 * read (libsoup would read it whole into memory before any handler runs). */
static void
refuse_body (Conn *c, SoupServerMessage *msg)
{
  const char *method = soup_server_message_get_method (msg);
  gboolean get = method == SOUP_METHOD_GET || method == SOUP_METHOD_HEAD;
  guint status = get ? SOUP_STATUS_REQUEST_ENTITY_TOO_LARGE : SOUP_STATUS_METHOD_NOT_ALLOWED;
  const char *body = get ? "no endpoint of this server takes a request body\n"
                         : "only GET and HEAD, without a request body\n";
  GUri *uri = soup_server_message_get_uri (msg);
  g_printerr ("personaplex-server: refused %s %s from %s: %u (a request body, not read)\n", method,
              uri ? g_uri_get_path (uri) : "?", soup_server_message_get_remote_host (msg), status);
  g_autofree char *answer = g_strdup_printf ("HTTP/1.1 %u %s\r\nConnection: close\r\n%s"
                                             "Content-Type: text/plain; charset=utf-8\r\nContent-Length: %zu\r\n\r\n%s",
                                             status, soup_status_get_phrase (status), get ? "" : "Allow: GET, HEAD\r\n",
                                             strlen (body), body);
  /* a few hundred bytes on a fresh connection: the socket's buffer takes them at once */
  g_output_stream_write_all (g_io_stream_get_output_stream (c->stream), answer, strlen (answer), NULL, NULL, NULL);
  conn_close (c);
}

static void
on_got_headers (SoupServerMessage *msg, gpointer user_data)
{
  Conn *c = conn_of (user_data, msg);
  if (!c || c->state != CONN_REQUEST)
    return;
  set_state (c, CONN_ANSWER);
  SoupMessageHeaders *headers = soup_server_message_get_request_headers (msg);
  SoupEncoding encoding = soup_message_headers_get_encoding (headers);
  if (encoding == SOUP_ENCODING_CHUNKED || encoding == SOUP_ENCODING_EOF ||
      (encoding == SOUP_ENCODING_CONTENT_LENGTH && soup_message_headers_get_content_length (headers) > 0))
    refuse_body (c, msg);
}

static void
on_wrote_informational (SoupServerMessage *msg, gpointer user_data)
{
  Conn *c = conn_of (user_data, msg);
  if (!c || soup_server_message_get_status (msg) != SOUP_STATUS_SWITCHING_PROTOCOLS || c->state == CONN_CLOSING)
    return;
  set_state (c, CONN_CALL);
  /* what a client that stopped reading leaves in the kernel: fixed, so that it is noticed in seconds */
  g_socket_set_option (c->socket, SOL_SOCKET, SO_SNDBUF, PPX_WS_SOCKET_SEND_BUFFER, NULL);
}

static void
on_request_started (SoupServer *soup, SoupServerMessage *msg, gpointer user_data)
{
  PpxListener *l = user_data;
  if (!conn_of (l, msg))
    return;
  g_signal_connect (msg, "got-headers", G_CALLBACK (on_got_headers), l);
  g_signal_connect (msg, "wrote-informational", G_CALLBACK (on_wrote_informational), l);
}

/* ---- accepting ---- */

static void hand_over (Conn *c, GIOStream *stream);

/* A request target whose %-escapes are all two hex digits (libsoup answers any other with an empty 400, before any
 * handler or signal of the server runs). */
static gboolean
escapes_ok (const char *line, gsize len)
{
  const char *target = memchr (line, ' ', len);
  const char *end = target ? memchr (target + 1, ' ', len - (gsize) (target + 1 - line)) : NULL;
  for (const char *p = target; p && end && p < end; p++)
    if (*p == '%' && (p + 2 >= end || !g_ascii_isxdigit (p[1]) || !g_ascii_isxdigit (p[2])))
      return FALSE;
  return TRUE;
}

static gboolean on_peek (GSocket *socket, GIOCondition condition, gpointer data);

static gboolean
on_peek_retry (gpointer data)
{
  Conn *c = data;
  c->peek_retry = 0;
  c->peek = g_socket_create_source (c->socket, G_IO_IN, NULL);
  g_source_set_callback (c->peek, G_SOURCE_FUNC (on_peek), c, NULL);
  g_source_attach (c->peek, NULL);
  return G_SOURCE_REMOVE;
}

/* A plain connection's first bytes, looked at (not read) until its request line is complete: one with a bad
 * %-escape gets a 400 that says so, here; any other goes to libsoup. */
static gboolean
on_peek (GSocket *socket, GIOCondition condition, gpointer data)
{
  Conn *c = data;
  char buf[4096];
  gssize n = recv (g_socket_get_fd (socket), buf, sizeof buf, MSG_PEEK | MSG_DONTWAIT);
  const char *eol = n > 0 ? memchr (buf, '\n', (gsize) n) : NULL;
  g_clear_pointer (&c->peek, g_source_unref);
  if (n > 0 && !eol && n < (gssize) sizeof buf && c->l && c->state == CONN_REQUEST) {
    c->peek_retry = g_timeout_add (20, on_peek_retry, c); /* the rest of the line is on its way */
    return G_SOURCE_REMOVE;
  }
  GSocketConnection *base = c->base;
  if (eol && c->l && c->state == CONN_REQUEST && !escapes_ok (buf, (gsize) (eol - buf))) {
    static const char body[] = "a malformed address: a '%' that is not followed by two hex digits\n";
    g_autofree char *answer = g_strdup_printf ("HTTP/1.1 400 Bad Request\r\nConnection: close\r\nContent-Type: "
                                               "text/plain; charset=utf-8\r\nContent-Length: %zu\r\n\r\n%s",
                                               strlen (body), body);
    g_autofree char *peer = g_inet_address_to_string (g_inet_socket_address_get_address (
        G_INET_SOCKET_ADDRESS (c->remote)));
    g_printerr ("personaplex-server: refused a request from %s: 400 (a bad %%-escape in its address)\n", peer);
    g_socket_send_with_blocking (socket, answer, strlen (answer), FALSE, NULL, NULL);
    conn_close (c);
  } else if (c->l && c->state == CONN_REQUEST) {
    hand_over (c, G_IO_STREAM (base));
  }
  g_object_unref (base); /* libsoup's now, or gone (and `c` with it) */
  return G_SOURCE_REMOVE;
}

static void
hand_over (Conn *c, GIOStream *stream)
{
  c->stream = stream;
  set_state (c, CONN_REQUEST);
  g_autoptr (GError) e = NULL;
  if (!soup_server_accept_iostream (c->l->soup, stream, c->local, c->remote, &e))
    conn_close (c);
}

static void
on_handshake (GObject *source, GAsyncResult *result, gpointer data)
{
  Conn *c = data;
  GTlsConnection *tls = g_steal_pointer (&c->tls);
  gboolean ok = g_tls_connection_handshake_finish (tls, result, NULL);
  g_clear_object (&c->cancel);
  if (ok && c->l && c->state == CONN_HANDSHAKE)
    hand_over (c, G_IO_STREAM (tls));
  else
    set_state (c, CONN_CLOSING);
  g_object_unref (tls); /* without libsoup's reference: the base goes with it, and `c` (conn_gone) */
}

static void
take (PpxListener *l, GSocket *socket)
{
  GSocketAddress *remote = g_socket_get_remote_address (socket, NULL);
  GSocketAddress *local = g_socket_get_local_address (socket, NULL);
  if (!remote || !local) {
    g_clear_object (&remote);
    g_clear_object (&local);
    return; /* already gone */
  }
  g_socket_set_option (socket, IPPROTO_TCP, TCP_NODELAY, TRUE, NULL);
  Conn *c = g_new0 (Conn, 1);
  c->l = l;
  c->socket = socket;
  c->base = G_SOCKET_CONNECTION (g_socket_connection_factory_create_connection (socket));
  c->local = local;
  c->remote = remote;
  c->accepted_us = g_get_monotonic_time ();
  c->link.data = c;
  c->state = CONN_HANDSHAKE;
  g_queue_push_tail_link (&l->pending, &c->link);
  g_hash_table_insert (l->conns, c->remote, c);
  g_object_weak_ref (G_OBJECT (c->base), conn_gone, c);
  /* too many waiting: the oldest goes (a flood of idle sockets must not keep /health or a call out) */
  while (l->pending.length > PPX_LISTENER_MAX_PENDING) {
    conn_close (g_queue_peek_head (&l->pending));
    l->evicted++;
    report (l, FALSE);
  }
  if (!l->certificate) {
    c->state = CONN_REQUEST;
    on_peek_retry (c); /* libsoup gets it once its request line is in (on_peek) */
    return;
  }
  g_autoptr (GError) e = NULL;
  GIOStream *tls = g_tls_server_connection_new (G_IO_STREAM (c->base), l->certificate, &e);
  g_object_unref (c->base); /* the TLS connection's */
  if (!tls) {
    g_printerr ("personaplex-server: TLS: %s\n", e->message);
    set_state (c, CONN_CLOSING);
    return;
  }
  static const char *const protocols[] = {"http/1.1", "http/1.0", NULL};
  g_object_set (tls, "require-close-notify", FALSE, "advertised-protocols", protocols, NULL);
  c->tls = G_TLS_CONNECTION (tls);
  c->cancel = g_cancellable_new ();
  g_tls_connection_handshake_async (c->tls, G_PRIORITY_DEFAULT, c->cancel, on_handshake, c);
}

static guint
open_fds (void)
{
  g_autoptr (GDir) dir = g_dir_open ("/proc/self/fd", 0, NULL);
  guint n = 0;
  while (dir && g_dir_read_name (dir))
    n++;
  return n;
}

static gboolean on_accept (GSocket *socket, GIOCondition condition, gpointer user_data);

static void
watch (PpxListener *l)
{
  l->accept_source = g_socket_create_source (l->socket, G_IO_IN, NULL);
  g_source_set_callback (l->accept_source, G_SOURCE_FUNC (on_accept), l, NULL);
  g_source_attach (l->accept_source, NULL);
}

static gboolean
on_retry (gpointer user_data)
{
  PpxListener *l = user_data;
  l->retry = 0;
  watch (l);
  return G_SOURCE_REMOVE;
}

/* accept failed (out of file descriptors, most likely): the connections wait in the kernel's queue; the oldest
 * connection that is not a call is closed to make room, and accepting is tried again shortly. */
static void
accept_failed (PpxListener *l, const GError *error)
{
  if (!l->out_of_fds_us) {
    struct rlimit limit = {0};
    getrlimit (RLIMIT_NOFILE, &limit);
    g_printerr ("personaplex-server: cannot accept connections: %s (%u files open, limit %lu): out of file "
                "descriptors; %u waiting connection(s) that are not calls; trying again every %d ms\n",
                error->message, open_fds (), (unsigned long) limit.rlim_cur, l->pending.length,
                PPX_LISTENER_RETRY_MS);
    l->out_of_fds_us = g_get_monotonic_time ();
  }
  for (GList *i = l->pending.head; i; i = i->next) {
    Conn *c = i->data;
    if (c->state != CONN_CLOSING) {
      conn_close (c);
      l->evicted++;
      break;
    }
  }
  g_source_destroy (l->accept_source);
  g_clear_pointer (&l->accept_source, g_source_unref);
  l->retry = g_timeout_add (PPX_LISTENER_RETRY_MS, on_retry, l);
}

static gboolean
on_accept (GSocket *socket, GIOCondition condition, gpointer user_data)
{
  PpxListener *l = user_data;
  for (int i = 0; i < ACCEPT_BURST; i++) {
    g_autoptr (GError) e = NULL;
    GSocket *client = g_socket_accept (l->socket, NULL, &e);
    if (!client) {
      if (g_error_matches (e, G_IO_ERROR, G_IO_ERROR_WOULD_BLOCK))
        return G_SOURCE_CONTINUE;
      if (g_error_matches (e, G_IO_ERROR, G_IO_ERROR_CONNECTION_CLOSED))
        continue; /* that client left before it was accepted */
      accept_failed (l, e);
      return G_SOURCE_REMOVE;
    }
    if (l->out_of_fds_us) {
      g_printerr ("personaplex-server: accepting connections again (after %.1f s out of file descriptors)\n",
                  (g_get_monotonic_time () - l->out_of_fds_us) / 1e6);
      l->out_of_fds_us = 0;
    }
    take (l, client);
    g_object_unref (client);
  }
  return G_SOURCE_CONTINUE;
}

/* Once a second: the handshakes and requests that took too long. */
static gboolean
on_tick (gpointer user_data)
{
  PpxListener *l = user_data;
  gint64 limit = g_get_monotonic_time () - (gint64) PPX_LISTENER_REQUEST_TIMEOUT_S * G_USEC_PER_SEC;
  for (GList *i = l->pending.head, *next; i; i = next) {
    next = i->next;
    Conn *c = i->data;
    if (c->accepted_us > limit)
      break; /* the rest came later */
    if (c->state == CONN_HANDSHAKE || c->state == CONN_REQUEST) {
      conn_close (c);
      l->timed_out++;
    }
  }
  report (l, FALSE);
  return G_SOURCE_CONTINUE;
}

/* ---- the listener ---- */

PpxListener *
ppx_listener_new (SoupServer *soup, GInetAddress *address, guint16 port, GTlsCertificate *certificate,
                  GError **error)
{
  g_autoptr (GSocket) socket = g_socket_new (g_inet_address_get_family (address), G_SOCKET_TYPE_STREAM,
                                             G_SOCKET_PROTOCOL_TCP, error);
  if (!socket)
    return NULL;
  g_socket_set_blocking (socket, FALSE);
  g_socket_set_listen_backlog (socket, 128);
  g_autoptr (GSocketAddress) sa = g_inet_socket_address_new (address, port);
  if (!g_socket_bind (socket, sa, TRUE, error) || !g_socket_listen (socket, error))
    return NULL;
  PpxListener *l = g_new0 (PpxListener, 1);
  l->soup = g_object_ref (soup);
  l->socket = g_steal_pointer (&socket);
  l->certificate = certificate ? g_object_ref (certificate) : NULL;
  g_queue_init (&l->pending);
  l->conns = g_hash_table_new (NULL, NULL);
  l->started_id = g_signal_connect (soup, "request-started", G_CALLBACK (on_request_started), l);
  l->tick = g_timeout_add_seconds (1, on_tick, l);
  watch (l);
  return l;
}

GSList *
ppx_listener_get_sockets (PpxListener *l)
{
  return g_slist_prepend (NULL, l->socket);
}

guint
ppx_listener_pending (PpxListener *l)
{
  return l->pending.length;
}

void
ppx_listener_free (PpxListener *l)
{
  if (!l)
    return;
  if (l->accept_source) {
    g_source_destroy (l->accept_source);
    g_source_unref (l->accept_source);
  }
  if (l->retry)
    g_source_remove (l->retry);
  g_source_remove (l->tick);
  g_signal_handler_disconnect (l->soup, l->started_id);
  GHashTableIter iter;
  gpointer value;
  g_hash_table_iter_init (&iter, l->conns);
  while (g_hash_table_iter_next (&iter, NULL, &value)) {
    Conn *c = value;
    if (is_pending (c))
      conn_close (c);
    c->l = NULL; /* conn_gone frees it, whenever its connection goes */
    if (c->peek_retry) { /* not libsoup's yet: it goes now */
      g_source_remove (c->peek_retry);
      c->peek_retry = 0;
      g_object_unref (c->base);
    } else if (c->peek) {
      g_source_destroy (c->peek);
      g_clear_pointer (&c->peek, g_source_unref);
      g_object_unref (c->base);
    }
  }
  g_hash_table_unref (l->conns);
  g_socket_close (l->socket, NULL);
  g_object_unref (l->socket);
  g_clear_object (&l->certificate);
  g_object_unref (l->soup);
  g_free (l);
}
