/* personaplex-loadgen: the command line and its checks. */
#include "loadgen-options.h"

#include <math.h>
#include <string.h>

#define DEFAULT_PATH "/api/chat"
#define MAX_CALLS 10000
#define MAX_SECONDS (24 * 3600.0)
#define MAX_CLOCK_PPM 100000.0 /* 10 %: far beyond any sound card (10-100 ppm), room for compressed tests */

static GQuark
options_error_quark (void)
{
  return g_quark_from_static_string ("loadgen-options");
}

#define FAIL(...) \
  do { \
    g_set_error (error, options_error_quark (), 0, __VA_ARGS__); \
    return FALSE; \
  } while (0)

/* ws:// or wss:// with a host; no user info or fragment. Adds the default path. */
static gboolean
check_url (LoadgenOptions *o, GError **error)
{
  g_autoptr (GError) e = NULL;
  g_autoptr (GUri) uri = g_uri_parse (o->url, G_URI_FLAGS_ENCODED, &e);
  if (!uri)
    FAIL ("--url '%s': %s", o->url, e->message);
  const char *scheme = g_uri_get_scheme (uri);
  if (g_ascii_strcasecmp (scheme, "ws") != 0 && g_ascii_strcasecmp (scheme, "wss") != 0)
    FAIL ("--url '%s': use ws://HOST:PORT or wss://HOST:PORT (the scheme is '%s')", o->url, scheme);
  if (!g_uri_get_host (uri) || !*g_uri_get_host (uri))
    FAIL ("--url '%s': no host", o->url);
  if (g_uri_get_userinfo (uri) || g_uri_get_fragment (uri))
    FAIL ("--url '%s': no user name or #fragment, please (use --auth-token)", o->url);
  o->tls = g_ascii_strcasecmp (scheme, "wss") == 0;
  const char *path = g_uri_get_path (uri);
  if (!*path || g_str_equal (path, "/")) {
    g_autoptr (GUri) with_path = g_uri_build (G_URI_FLAGS_ENCODED, scheme, NULL, g_uri_get_host (uri),
                                              g_uri_get_port (uri), DEFAULT_PATH, g_uri_get_query (uri), NULL);
    g_free (o->url);
    o->url = g_uri_to_string (with_path);
  }
  return TRUE;
}

static gboolean
check_params (char **params, GError **error)
{
  for (guint i = 0; params && params[i]; i++) {
    const char *eq = strchr (params[i], '=');
    if (!eq || eq == params[i])
      FAIL ("--param '%s': use KEY=VALUE", params[i]);
  }
  return TRUE;
}

/* --health NAME=URL: a name, an http:// or https:// URL */
static gboolean
check_health (char **health, GError **error)
{
  for (guint i = 0; health && health[i]; i++) {
    const char *eq = strchr (health[i], '=');
    g_autoptr (GUri) uri = eq ? g_uri_parse (eq + 1, G_URI_FLAGS_NONE, NULL) : NULL;
    if (!eq || eq == health[i] || eq - health[i] > 40 || !uri || !g_uri_get_host (uri) ||
        (g_strcmp0 (g_uri_get_scheme (uri), "http") != 0 && g_strcmp0 (g_uri_get_scheme (uri), "https") != 0))
      FAIL ("--health '%s': use NAME=http://HOST:PORT/health", health[i]);
  }
  return TRUE;
}

/* --clock-ppm PPM[,PPM...]: numbers within +-MAX_CLOCK_PPM */
static gboolean
parse_clock_ppm (LoadgenOptions *o, GError **error)
{
  if (!o->clock_ppm_arg)
    return TRUE;
  g_auto (GStrv) parts = g_strsplit (o->clock_ppm_arg, ",", -1);
  for (guint i = 0; parts[i]; i++) {
    char *end = NULL;
    g_strstrip (parts[i]);
    double v = g_ascii_strtod (parts[i], &end);
    if (!*parts[i] || !end || *end || !isfinite (v) || fabs (v) > MAX_CLOCK_PPM)
      FAIL ("--clock-ppm '%s': use PPM[,PPM...], each from %.0f to %.0f", o->clock_ppm_arg, -MAX_CLOCK_PPM,
            MAX_CLOCK_PPM);
    g_array_append_val (o->clock_ppm, v);
  }
  return TRUE;
}

static gboolean
check_options (LoadgenOptions *o, GError **error)
{
  if (o->playout_trace)
    return TRUE; /* a replay: no calls */
  if (!o->url)
    FAIL ("--url is required (e.g. --url ws://127.0.0.1:8998; see --help)");
  if (!check_url (o, error))
    return FALSE;
  if (o->calls < 1 || o->calls > MAX_CALLS)
    FAIL ("--calls %d: use 1 to %d", o->calls, MAX_CALLS);
  if (!(o->seconds > 0 && o->seconds <= MAX_SECONDS))
    FAIL ("--seconds %g: use more than 0 and at most %.0f", o->seconds, MAX_SECONDS);
  if (!(o->ramp_s >= 0 && o->ramp_s <= MAX_SECONDS))
    FAIL ("--ramp %g: use 0 to %.0f seconds", o->ramp_s, MAX_SECONDS);
  if (!(o->gap_ms > 0 && o->gap_ms <= 60000))
    FAIL ("--gap-ms %g: use more than 0 and at most 60000", o->gap_ms);
  if (!(o->join_timeout_s > 0 && o->join_timeout_s <= 3600))
    FAIL ("--join-timeout %g: use more than 0 and at most 3600 seconds", o->join_timeout_s);
  if (!(o->max_missed_ms < 0 || o->max_missed_ms <= 24 * 3600 * 1000.0))
    FAIL ("--max-missed-ms %g: use 0 or more (ms), or a negative number for no limit", o->max_missed_ms);
  if (!(o->max_latency_ms > 0 && o->max_latency_ms <= 600000))
    FAIL ("--max-latency-ms %g: use more than 0, at most 600000", o->max_latency_ms);
  if (!(o->tail_s >= 0 && o->tail_s <= 600))
    FAIL ("--tail %g: use 0 to 600 seconds", o->tail_s);
  if (o->expect_refused < 0 || o->expect_refused > o->calls)
    FAIL ("--expect-refused %d: use 0 to --calls (%d)", o->expect_refused, o->calls);
  if (o->expect_failed < 0 || o->expect_refused + o->expect_failed > o->calls)
    FAIL ("--expect-failed %d: use 0 to --calls less --expect-refused (%d)", o->expect_failed,
          o->calls - o->expect_refused);
  if (o->input && !g_file_test (o->input, G_FILE_TEST_IS_REGULAR))
    FAIL ("--input %s: no such file", o->input);
  if (o->insecure && !o->tls)
    FAIL ("--insecure is for wss:// URLs");
  if (o->seed < -1)
    FAIL ("--seed %" G_GINT64_FORMAT ": use 0 or more", o->seed);
  if (o->text_prompt && !g_utf8_validate (o->text_prompt, -1, NULL)) {
    /* taken as given when it is UTF-8 (whatever the locale), else converted from the locale's charset */
    char *utf8 = g_locale_to_utf8 (o->text_prompt, -1, NULL, NULL, NULL);
    if (!utf8)
      FAIL ("--text-prompt: neither UTF-8 nor text in the locale's character set");
    g_free (o->text_prompt);
    o->text_prompt = utf8;
  }
  if (o->origin) {
    g_autoptr (GUri) origin = g_uri_parse (o->origin, G_URI_FLAGS_NONE, NULL);
    if (!origin || !g_uri_get_host (origin) || (g_strcmp0 (g_uri_get_scheme (origin), "http") != 0 &&
                                                 g_strcmp0 (g_uri_get_scheme (origin), "https") != 0))
      FAIL ("--origin '%s': an http:// or https:// origin, please", o->origin);
  }
  if (o->auth_token && !*o->auth_token)
    g_clear_pointer (&o->auth_token, g_free);
  if (o->auth_token)
    for (const char *p = o->auth_token; *p; p++)
      if ((guchar) *p <= ' ' || (guchar) *p >= 0x7f)
        FAIL ("--auth-token: printable ASCII without spaces, please");
  return check_params (o->params, error) && check_health (o->health, error) && parse_clock_ppm (o, error);
}

/* --server-pid [NAME=]PID */
static gboolean
add_server_pid (const char *option, const char *value, gpointer data, GError **error)
{
  LoadgenOptions *o = data;
  const char *eq = strchr (value, '=');
  const char *number = eq ? eq + 1 : value;
  guint64 pid;
  if (!g_ascii_string_to_unsigned (number, 10, 1, G_MAXINT, &pid, NULL) || (eq && (eq == value || eq - value > 40)))
    FAIL ("%s '%s': a process id, or NAME=PID, please", option, value);
  int p = (int) pid;
  g_array_append_val (o->server_pids, p);
  g_ptr_array_add (o->server_names, eq ? g_strndup (value, eq - value) : g_strdup (""));
  return TRUE;
}

gboolean
loadgen_options_parse (LoadgenOptions *o, int *argc, char ***argv, GError **error)
{
  memset (o, 0, sizeof *o);
  o->calls = 1;
  o->seconds = 10;
  o->seed = -1;
  o->gap_ms = 100;
  o->join_timeout_s = 120;
  o->tail_s = 5;
  o->max_missed_ms = -1;
  o->max_latency_ms = 1000;
  o->server_pids = g_array_new (FALSE, FALSE, sizeof (int));
  o->server_names = g_ptr_array_new_with_free_func (g_free);
  o->clock_ppm = g_array_new (FALSE, FALSE, sizeof (double));
  GOptionEntry entries[] = {
    {"url", 'u', 0, G_OPTION_ARG_STRING, &o->url,
     "Server or balancer: ws://HOST:PORT or wss://HOST:PORT (path /api/chat unless given)", "URL"},
    {"calls", 'n', 0, G_OPTION_ARG_INT, &o->calls, "Concurrent calls (default 1)", "N"},
    {"seconds", 's', 0, G_OPTION_ARG_DOUBLE, &o->seconds,
     "Audio each call streams in real time after its handshake (default 10)", "S"},
    {"input", 'i', 0, G_OPTION_ARG_FILENAME, &o->input,
     "Audio file each call streams, looped (default: a test signal)", "FILE"},
    {"ramp", 'r', 0, G_OPTION_ARG_DOUBLE, &o->ramp_s,
     "Spread the calls' starts evenly over S seconds (default 0: all at once)", "S"},
    {"json", 'j', 0, G_OPTION_ARG_FILENAME, &o->json_path, "Write every figure and call to FILE as JSON", "FILE"},
    {"auth-token", 0, 0, G_OPTION_ARG_STRING, &o->auth_token,
     "Bearer token for the server's --auth-token (default: $" LOADGEN_TOKEN_ENV ")", "T"},
    {"insecure", 'k', 0, G_OPTION_ARG_NONE, &o->insecure,
     "wss://: accept any certificate (a self-signed test server)", NULL},
    {"text-prompt", 0, 0, G_OPTION_ARG_FILENAME, &o->text_prompt, "Query parameter text_prompt of every call",
     "TEXT"},
    {"voice-prompt", 0, 0, G_OPTION_ARG_STRING, &o->voice_prompt,
     "Query parameter voice_prompt of every call (e.g. NATF2.pt)", "NAME"},
    {"seed", 0, 0, G_OPTION_ARG_INT64, &o->seed, "Query parameter seed: call k sends SEED + k (default: none)",
     "SEED"},
    {"param", 'p', 0, G_OPTION_ARG_STRING_ARRAY, &o->params,
     "One more query parameter of every call (repeatable), e.g. text_temperature=0.7", "KEY=VALUE"},
    {"expect-refused", 0, 0, G_OPTION_ARG_INT, &o->expect_refused,
     "Exactly N calls are expected to be refused with HTTP 503 (default 0)", "N"},
    {"expect-failed", 0, 0, G_OPTION_ARG_INT, &o->expect_failed,
     "Exactly N calls are expected to fail any other way (default 0)", "N"},
    {"max-latency-ms", 0, 0, G_OPTION_ARG_DOUBLE, &o->max_latency_ms,
     "The run fails when the frame latency p99 (all frames) exceeds this (default 1000)", "MS"},
    {"gap-ms", 0, 0, G_OPTION_ARG_DOUBLE, &o->gap_ms,
     "An answer gap longer than this is an underrun (default 100)", "MS"},
    {"join-timeout", 0, 0, G_OPTION_ARG_DOUBLE, &o->join_timeout_s,
     "Longest wait from connect to handshake (default 120)", "S"},
    {"tail", 0, 0, G_OPTION_ARG_DOUBLE, &o->tail_s,
     "After the last input, wait at most S seconds for the rest of the answer (default 5)", "S"},
    {"server-pid", 0, 0, G_OPTION_ARG_CALLBACK, add_server_pid,
     "Also record the CPU time of this local process, e.g. a server (repeatable; NAME=PID labels it)",
     "[NAME=]PID"},
    {"server-header", 0, 0, G_OPTION_ARG_STRING, &o->server_header,
     "Upgrade response header naming the server that took the call (default X-Served-By; '' for none)", "NAME"},
    {"origin", 0, 0, G_OPTION_ARG_STRING, &o->origin,
     "Send this Origin header, as a web page's calls do (e.g. https://voice.example.com)", "ORIGIN"},
    {"quiet", 'q', 0, G_OPTION_ARG_NONE, &o->quiet, "No line per call on stderr", NULL},
    {"max-missed-ms", 0, 0, G_OPTION_ARG_DOUBLE, &o->max_missed_ms,
     "FAIL the run when a call missed more than MS of audio at the reference web client's player "
     "(default: no limit)", "MS"},
    {"report", 0, 0, G_OPTION_ARG_FILENAME, &o->report_path,
     "Write a picture of the run to FILE.html (inline SVG, nothing fetched)", "FILE.html"},
    {"health", 0, 0, G_OPTION_ARG_STRING_ARRAY, &o->health,
     "Read this server's /health each second for its tick p99, drawn by --report (repeatable)",
     "NAME=URL"},
    {"clock-ppm", 0, 0, G_OPTION_ARG_STRING, &o->clock_ppm_arg,
     "Each call's client clock runs PPM parts per million fast (negative: slow) against the loadgen's: it sends "
     "its audio and plays the answer at 24 kHz x (1 + PPM/1e6); call k takes the k-th value, cycling (default 0)",
     "PPM[,PPM...]"},
    {"playout-trace", 0, 0, G_OPTION_ARG_FILENAME, &o->playout_trace,
     "Replay a trace (lines 'ARRIVAL_MS SAMPLES') through the reference player, print its figures as JSON, exit",
     "FILE"},
    {NULL},
  };
  g_autoptr (GOptionContext) ctx = g_option_context_new ("- calls at scale to a PersonaPlex server (/api/chat)");
  g_autoptr (GOptionGroup) group = g_option_group_new (NULL, NULL, NULL, o, NULL);
  g_option_group_add_entries (group, entries);
  g_option_context_set_main_group (ctx, g_steal_pointer (&group));
  g_option_context_set_description (ctx,
    "Each call connects, waits for the handshake, streams its audio as Ogg Opus in real time from its own clock\n"
    "for --seconds, waits for the rest of the answer and closes. It prints a summary table (p50/p95/p99/max over\n"
    "the calls) and exits 0 when exactly the expected calls were refused (--expect-refused) and failed\n"
    "(--expect-failed), no call that ended ok lost audio at the server (input frames never answered), the\n"
    "frame latency p99 is within --max-latency-ms and no call missed more audio at the reference web client's\n"
    "player than --max-missed-ms; 1 otherwise (the summary says which rule failed), 2 on a bad command line.\n"
    "See docs/fleet.md and docs/tools.md.");
  if (!g_option_context_parse (ctx, argc, argv, error))
    return FALSE;
  if (*argc > 1)
    FAIL ("unexpected argument '%s' (see --help)", (*argv)[1]);
  if (!o->auth_token && g_getenv (LOADGEN_TOKEN_ENV))
    o->auth_token = g_strdup (g_getenv (LOADGEN_TOKEN_ENV));
  if (!o->server_header)
    o->server_header = g_strdup ("X-Served-By");
  return check_options (o, error);
}

void
loadgen_options_clear (LoadgenOptions *o)
{
  g_free (o->url);
  g_free (o->input);
  g_free (o->json_path);
  g_free (o->auth_token);
  g_free (o->text_prompt);
  g_free (o->voice_prompt);
  g_strfreev (o->params);
  if (o->server_pids)
    g_array_unref (o->server_pids);
  if (o->server_names)
    g_ptr_array_unref (o->server_names);
  g_free (o->server_header);
  g_free (o->origin);
  g_free (o->report_path);
  g_strfreev (o->health);
  g_free (o->playout_trace);
  g_free (o->clock_ppm_arg);
  if (o->clock_ppm)
    g_array_unref (o->clock_ppm);
  memset (o, 0, sizeof *o);
}

double
loadgen_options_call_ppm (const LoadgenOptions *o, guint k)
{
  if (!o->clock_ppm || o->clock_ppm->len == 0)
    return 0;
  return g_array_index (o->clock_ppm, double, k % o->clock_ppm->len);
}

static void
append_param (GString *url, gboolean *first, const char *key, const char *value)
{
  g_string_append_c (url, *first ? '?' : '&');
  *first = FALSE;
  g_string_append_uri_escaped (url, key, NULL, FALSE);
  g_string_append_c (url, '=');
  g_string_append_uri_escaped (url, value, NULL, FALSE);
}

char *
loadgen_options_call_url (const LoadgenOptions *o, guint k)
{
  GString *url = g_string_new (o->url);
  gboolean first = strchr (o->url, '?') == NULL;
  if (o->text_prompt)
    append_param (url, &first, "text_prompt", o->text_prompt);
  if (o->voice_prompt)
    append_param (url, &first, "voice_prompt", o->voice_prompt);
  if (o->seed >= 0) {
    char seed[32];
    g_snprintf (seed, sizeof seed, "%" G_GUINT64_FORMAT, (guint64) o->seed + k);
    append_param (url, &first, "seed", seed);
  }
  for (guint i = 0; o->params && o->params[i]; i++) {
    g_autofree char *key = g_strndup (o->params[i], strchr (o->params[i], '=') - o->params[i]);
    append_param (url, &first, key, strchr (o->params[i], '=') + 1);
  }
  return g_string_free (url, FALSE);
}
