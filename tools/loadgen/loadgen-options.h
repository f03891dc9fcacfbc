/* personaplex-loadgen: the command line. */
#ifndef LOADGEN_OPTIONS_H
#define LOADGEN_OPTIONS_H

#include <glib.h>

G_BEGIN_DECLS

#define LOADGEN_TOKEN_ENV "PERSONAPLEX_AUTH_TOKEN"

typedef struct {
  char *url;              /* ws:// or wss://HOST:PORT/PATH[?QUERY]; PATH /api/chat when none was given */
  gboolean tls;           /* wss:// */
  int calls;
  double seconds;         /* audio each call streams after its handshake */
  double ramp_s;          /* call k starts at k * ramp / calls */
  char *input;            /* audio file (looped), NULL: the test signal */
  char *json_path;        /* NULL: no JSON file */
  char *auth_token;       /* --auth-token, else $PERSONAPLEX_AUTH_TOKEN; NULL: none */
  gboolean insecure;      /* accept any TLS certificate (self-signed test servers) */
  char *text_prompt;      /* query text_prompt; NULL: not sent */
  char *voice_prompt;     /* query voice_prompt; NULL: not sent */
  gint64 seed;            /* query seed: call k sends seed + k; -1: not sent */
  char **params;          /* more query parameters, KEY=VALUE */
  int expect_refused;     /* exactly this many calls refused with HTTP 503 */
  int expect_failed;      /* exactly this many calls failing any other way */
  double max_latency_ms;  /* a passing run's frame latency p99, at most */
  double gap_ms;          /* underrun threshold */
  double join_timeout_s;  /* connect to handshake, at most */
  double tail_s;          /* after the last input page, wait at most this long for the rest of the answer */
  GArray *server_pids;    /* int: processes whose CPU the run records */
  GPtrArray *server_names; /* char *, one per pid ("" when it has no name) */
  char *server_header;    /* the upgrade response's header that names the server ("" : none) */
  char *origin;           /* an Origin header, as a browser page would send; NULL: none */
  gboolean quiet;         /* no line per call on stderr */
  double max_missed_ms;   /* the verdict fails when a call's missed audio at the reference player exceeds this;
                           * negative: no such rule (the default) */
  char *report_path;      /* --report FILE.html; NULL: none */
  char **health;          /* --health NAME=URL: servers whose /health the run polls each second (tick p99) */
  char *playout_trace;    /* --playout-trace FILE: replay it through the reference player, print, exit */
  char *clock_ppm_arg;    /* --clock-ppm PPM[,PPM...] as given */
  GArray *clock_ppm;      /* double: the clients' clock offsets, call k takes entry k mod len; empty: all 0 */
} LoadgenOptions;

/* Parses and checks argv (GOption; --help prints and exits). FALSE with a message naming the option on bad
 * input. Clear `o` with loadgen_options_clear either way. */
gboolean loadgen_options_parse (LoadgenOptions *o, int *argc, char ***argv, GError **error);
void loadgen_options_clear (LoadgenOptions *o);

/* How fast call k's client clock runs against the loadgen's, in parts per million (--clock-ppm; 0: none). */
double loadgen_options_call_ppm (const LoadgenOptions *o, guint k);

/* The URL of call k: o->url with the query parameters added (percent-encoded). */
char *loadgen_options_call_url (const LoadgenOptions *o, guint k);

G_END_DECLS
#endif
