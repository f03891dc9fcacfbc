/* personaplex-server: the token and the origins (server-auth.h). */
#include "server-auth.h"

#include <ifaddrs.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>

struct _PpxOrigins {
  GHashTable *set; /* lower-case origins */
};

/* Compares two strings in a time that depends on neither (their SHA-256 digests, byte by byte). */
static gboolean
equal_constant_time (const char *a, const char *b)
{
  guint8 da[32], db[32];
  gsize la = sizeof da, lb = sizeof db;
  g_autoptr (GChecksum) ca = g_checksum_new (G_CHECKSUM_SHA256);
  g_autoptr (GChecksum) cb = g_checksum_new (G_CHECKSUM_SHA256);
  g_checksum_update (ca, (const guchar *) a, -1);
  g_checksum_update (cb, (const guchar *) b, -1);
  g_checksum_get_digest (ca, da, &la);
  g_checksum_get_digest (cb, db, &lb);
  guint8 diff = 0;
  for (gsize i = 0; i < sizeof da; i++)
    diff |= da[i] ^ db[i];
  return diff == 0;
}

/* The cookie's value: a digest of the token, so that the browser keeps no copy of the token itself, the same on
 * every server that has the token (a page and its calls may reach different servers behind a balancer). */
static char *
cookie_value (const char *token)
{
  g_autofree char *salted = g_strconcat ("personaplex-server auth cookie v1\n", token, NULL);
  return g_compute_checksum_for_string (G_CHECKSUM_SHA256, salted, -1);
}

/* A PPX_AUTH_COOKIE in the request's Cookie header(s) with the token's value. */
static gboolean
cookie_ok (SoupServerMessage *msg, const char *token)
{
  const char *cookies = soup_message_headers_get_list (soup_server_message_get_request_headers (msg), "Cookie");
  if (!cookies)
    return FALSE;
  g_autofree char *want = cookie_value (token);
  gboolean ok = FALSE;
  g_auto (GStrv) parts = g_strsplit_set (cookies, ";,", -1);
  for (guint i = 0; parts[i]; i++) {
    const char *part = g_strstrip (parts[i]);
    const char *eq = strchr (part, '=');
    if (eq && (gsize) (eq - part) == strlen (PPX_AUTH_COOKIE) && strncmp (part, PPX_AUTH_COOKIE, eq - part) == 0)
      ok |= equal_constant_time (eq + 1, want);
  }
  return ok;
}

gboolean
ppx_auth_query_token_ok (GHashTable *query, const char *token)
{
  const char *given = query ? g_hash_table_lookup (query, "token") : NULL;
  return token && *token && given && *given && equal_constant_time (given, token);
}

gboolean
ppx_auth_token_ok (SoupServerMessage *msg, GHashTable *query, const char *token)
{
  if (!token)
    return TRUE;
  const char *header = soup_message_headers_get_one (soup_server_message_get_request_headers (msg), "Authorization");
  if (header && g_ascii_strncasecmp (header, "Bearer ", 7) == 0) {
    const char *given = header + 7;
    while (*given == ' ')
      given++;
    if (*given && *token && equal_constant_time (given, token))
      return TRUE;
  }
  return ppx_auth_query_token_ok (query, token) || cookie_ok (msg, token);
}

/* The request's path and query without its token= parameters: where the browser goes after signing in. */
static char *
without_token (GUri *uri)
{
  /* libsoup hands the path decoded: escaped again, so that no byte of it (a backslash, which browsers read as a
   * slash, a control character) changes what the browser resolves it to (issue 25, defect 7) */
  g_autofree char *path = g_uri_escape_string (g_uri_get_path (uri), G_URI_RESERVED_CHARS_ALLOWED_IN_PATH, FALSE);
  GString *location = g_string_new (path);
  /* "//host/..." would be another site's address */
  while (location->len > 1 && location->str[0] == '/' && location->str[1] == '/')
    g_string_erase (location, 0, 1);
  if (location->len == 0)
    g_string_append_c (location, '/');
  const char *query = g_uri_get_query (uri);
  g_auto (GStrv) params = g_strsplit (query ? query : "", "&", -1);
  guint kept = 0;
  for (guint i = 0; params[i]; i++) {
    if (!*params[i])
      continue;
    const char *eq = strchr (params[i], '=');
    g_autofree char *raw_key = eq ? g_strndup (params[i], eq - params[i]) : g_strdup (params[i]);
    g_autofree char *key = g_uri_unescape_string (raw_key, NULL);
    if (key && g_str_equal (key, "token"))
      continue;
    g_string_append (location, kept++ ? "&" : "?");
    g_string_append (location, params[i]);
  }
  return g_string_free (location, FALSE);
}

void
ppx_auth_sign_in (SoupServerMessage *msg, const char *token, gboolean tls)
{
  g_autofree char *value = cookie_value (token);
  g_autofree char *cookie = g_strdup_printf ("%s=%s; Path=/; HttpOnly; SameSite=Strict%s", PPX_AUTH_COOKIE, value,
                                             tls ? "; Secure" : "");
  g_autofree char *location = without_token (soup_server_message_get_uri (msg));
  SoupMessageHeaders *headers = soup_server_message_get_response_headers (msg);
  soup_message_headers_append (headers, "Set-Cookie", cookie);
  soup_message_headers_replace (headers, "Cache-Control", "no-store");
  soup_message_headers_replace (headers, "Referrer-Policy", "no-referrer");
  /* relative: behind a proxy that terminates TLS the request's own URI says http:// */
  soup_message_headers_replace (headers, "Location", location);
  soup_server_message_set_status (msg, SOUP_STATUS_SEE_OTHER, NULL);
}

static void
add_origin (GHashTable *set, const char *scheme, const char *host, guint port)
{
  g_autofree char *with_port = g_strdup_printf ("%s://%s:%u", scheme, host, port);
  g_hash_table_add (set, g_ascii_strdown (with_port, -1));
  /* browsers leave the scheme's default port out */
  if ((g_str_equal (scheme, "http") && port == 80) || (g_str_equal (scheme, "https") && port == 443)) {
    g_autofree char *bare = g_strdup_printf ("%s://%s", scheme, host);
    g_hash_table_add (set, g_ascii_strdown (bare, -1));
  }
}

static void
add_address (GHashTable *set, const char *scheme, GInetAddress *inet, guint port)
{
  g_autofree char *text = g_inet_address_to_string (inet);
  g_autofree char *host = g_inet_address_get_family (inet) == G_SOCKET_FAMILY_IPV6 ? g_strdup_printf ("[%s]", text)
                                                                                   : g_strdup (text);
  add_origin (set, scheme, host, port);
  if (g_inet_address_get_is_loopback (inet))
    add_origin (set, scheme, "localhost", port);
}

/* Every address of the machine's interfaces (for a server listening on 0.0.0.0 or ::). */
static void
add_interfaces (GHashTable *set, const char *scheme, guint port, GSocketFamily family)
{
  struct ifaddrs *list = NULL;
  if (getifaddrs (&list) != 0)
    return;
  for (struct ifaddrs *i = list; i; i = i->ifa_next) {
    if (!i->ifa_addr || (i->ifa_addr->sa_family != AF_INET && i->ifa_addr->sa_family != AF_INET6))
      continue;
    if (family == G_SOCKET_FAMILY_IPV4 && i->ifa_addr->sa_family != AF_INET)
      continue;
    gsize len = i->ifa_addr->sa_family == AF_INET ? sizeof (struct sockaddr_in) : sizeof (struct sockaddr_in6);
    g_autoptr (GSocketAddress) sa = g_socket_address_new_from_native (i->ifa_addr, len);
    if (sa && G_IS_INET_SOCKET_ADDRESS (sa))
      add_address (set, scheme, g_inet_socket_address_get_address (G_INET_SOCKET_ADDRESS (sa)), port);
  }
  freeifaddrs (list);
}

PpxOrigins *
ppx_origins_new (GSList *listeners, const char *scheme, const char *const *allowed)
{
  PpxOrigins *o = g_new0 (PpxOrigins, 1);
  o->set = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, NULL);
  for (GSList *l = listeners; l; l = l->next) {
    g_autoptr (GSocketAddress) sa = g_socket_get_local_address (l->data, NULL);
    if (!sa || !G_IS_INET_SOCKET_ADDRESS (sa))
      continue;
    GInetAddress *inet = g_inet_socket_address_get_address (G_INET_SOCKET_ADDRESS (sa));
    guint port = g_inet_socket_address_get_port (G_INET_SOCKET_ADDRESS (sa));
    if (g_inet_address_get_is_any (inet))
      add_interfaces (o->set, scheme, port, g_inet_address_get_family (inet));
    else
      add_address (o->set, scheme, inet, port);
  }
  for (guint i = 0; allowed && allowed[i]; i++) {
    g_autofree char *origin = g_ascii_strdown (allowed[i], -1);
    if (g_str_has_suffix (origin, "/"))
      origin[strlen (origin) - 1] = '\0';
    g_hash_table_add (o->set, g_steal_pointer (&origin));
  }
  return o;
}

gboolean
ppx_origins_allow (const PpxOrigins *o, const char *origin)
{
  if (!origin)
    return TRUE;
  g_autofree char *lower = g_ascii_strdown (origin, -1);
  return g_hash_table_contains (o->set, lower);
}

static int
compare_strings (gconstpointer a, gconstpointer b, gpointer unused)
{
  return strcmp (*(char *const *) a, *(char *const *) b);
}

char *
ppx_origins_describe (const PpxOrigins *o)
{
  guint n;
  g_autofree gpointer *keys = g_hash_table_get_keys_as_array (o->set, &n);
  g_qsort_with_data (keys, (gint) n, sizeof (gpointer), compare_strings, NULL);
  return g_strjoinv (", ", (char **) keys);
}

void
ppx_origins_free (PpxOrigins *o)
{
  if (!o)
    return;
  g_hash_table_unref (o->set);
  g_free (o);
}
