/* personaplex-server: who may use it. The token (--auth-token) that every call and /metrics must present (or the
 * cookie a browser gets for it), and
 * the web origins allowed to open calls from a browser (issue 17, defect 4): the server's own addresses with
 * their ports, and the --allowed-origin values. A request without Origin is not from a browser page and passes
 * the origin check (the token, if any, still applies). */
#ifndef PPX_SERVER_AUTH_H
#define PPX_SERVER_AUTH_H

#include <libsoup/soup.h>

G_BEGIN_DECLS

/* The cookie a browser gets by opening a page with ?token=TOKEN once (ppx_auth_sign_in). */
#define PPX_AUTH_COOKIE "personaplex_auth"

/* TRUE when no token is set, or the request carries it: "Authorization: Bearer TOKEN", token=TOKEN in the query
 * (browsers cannot set headers on a WebSocket), or the PPX_AUTH_COOKIE of a browser that signed in. Compared in
 * constant time. */
gboolean ppx_auth_token_ok (SoupServerMessage *msg, GHashTable *query, const char *token);
/* TRUE when a token is set and the query's token= is it (constant time). */
gboolean ppx_auth_query_token_ok (GHashTable *query, const char *token);
/* Answers a page request that carried the right token= (a browser that cannot send a header): sets the cookie
 * (HttpOnly, SameSite=Strict, Path=/, Secure under TLS; its value a digest of the token, not the token) and
 * redirects (303) to the same path and query without token=, so that the token leaves the address bar and the
 * history. */
void ppx_auth_sign_in (SoupServerMessage *msg, const char *token, gboolean tls);

typedef struct _PpxOrigins PpxOrigins;

/* The origins of the addresses the `listeners` (GSocket) listen on (every local interface address for a wildcard
 * address; "localhost" beside loopback), with `scheme` ("http" or "https"), plus `allowed`. */
PpxOrigins *ppx_origins_new (GSList *listeners, const char *scheme, const char *const *allowed);
gboolean ppx_origins_allow (const PpxOrigins *o, const char *origin);
/* The list, for the log ("http://127.0.0.1:8080, http://localhost:8080"; g_free). */
char *ppx_origins_describe (const PpxOrigins *o);
void ppx_origins_free (PpxOrigins *o);

G_END_DECLS
#endif
