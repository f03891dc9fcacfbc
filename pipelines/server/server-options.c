/* personaplex-server: the command line and its checks. */
#include "server-options.h"

#include <gio/gio.h>
#include <string.h>
#include <unistd.h>

#include "ppx-types.h"

#define DEFAULT_ADDRESS "127.0.0.1"
#define DEFAULT_PORT 8080
#define DEFAULT_MAX_SESSIONS 0 /* as many as fit */
#define DEFAULT_DRAIN_TIMEOUT 30
#define DEFAULT_JOIN_TIMEOUT 30
#define DEFAULT_MEDIA_TIMEOUT 30
#define DEFAULT_MAX_INPUT_BACKLOG_MS 1000
#define DEFAULT_PING_INTERVAL 10
#define DEFAULT_PING_TIMEOUT 30
#define DEFAULT_MAX_ICE_CANDIDATES 50
#define DEFAULT_TICK_BUDGET_MS 70
#define MAX_TIMEOUT 86400
/* The engine's largest max-sessions is 4096; one slot is the keeper's. */
#define MAX_MAX_SESSIONS 4095
/* personaplexduplex's "device" property takes 0 to this. */
#define MAX_DEVICE 1024

static GQuark
options_error_quark (void)
{
  return g_quark_from_static_string ("ppx-server-options");
}

/* "1,2,3": non-negative ids that fit an int; the model checks them against its vocabulary. */
static gboolean
check_token_list (const char *text, GError **error)
{
  g_auto (GStrv) parts = g_strsplit (text, ",", -1);
  for (guint i = 0; parts[i]; i++) {
    g_autoptr (GError) e = NULL;
    guint64 id;
    if (!g_ascii_string_to_unsigned (g_strstrip (parts[i]), 10, 0, G_MAXINT, &id, &e)) {
      g_set_error (error, options_error_quark (), 0, "--text-prompt-tokens: item %u ('%s'): %s", i + 1, parts[i],
                   e->message);
      return FALSE;
    }
  }
  return TRUE;
}

gboolean
ppx_server_address_is_loopback (const char *address)
{
  if (g_ascii_strcasecmp (address, "localhost") == 0)
    return TRUE;
  g_autoptr (GInetAddress) inet = g_inet_address_new_from_string (address);
  return inet && g_inet_address_get_is_loopback (inet);
}

static gboolean
check_seconds (const char *name, int value, int min, GError **error)
{
  if (value >= min && value <= MAX_TIMEOUT)
    return TRUE;
  g_set_error (error, options_error_quark (), 0, "--%s %d: use %d to %d (seconds)", name, value, min, MAX_TIMEOUT);
  return FALSE;
}

static gboolean
check_readable (const char *option, const char *path, GError **error)
{
  if (g_file_test (path, G_FILE_TEST_IS_REGULAR))
    return TRUE;
  g_set_error (error, options_error_quark (), 0, "--%s %s: not a readable file", option, path);
  return FALSE;
}

/* An origin as browsers send it: scheme://host[:port], no path. */
static gboolean
check_origin (const char *origin, GError **error)
{
  g_autoptr (GUri) uri = g_uri_parse (origin, G_URI_FLAGS_NONE, NULL);
  const char *scheme = uri ? g_uri_get_scheme (uri) : NULL;
  if (uri && scheme && (g_str_equal (scheme, "http") || g_str_equal (scheme, "https")) && g_uri_get_host (uri) &&
      (!*g_uri_get_path (uri) || g_str_equal (g_uri_get_path (uri), "/")) && !g_uri_get_query (uri))
    return TRUE;
  g_set_error (error, options_error_quark (), 0, "--allowed-origin '%s': use scheme://host[:port], e.g. "
               "https://talk.example.com", origin);
  return FALSE;
}

/* Listening, TLS, authentication and the limits. */
static gboolean
check_serving (PpxServerOptions *o, GError **error)
{
  if (o->static_dir) {
    g_autofree char *index = g_build_filename (o->static_dir, "index.html", NULL);
    if (!g_file_test (index, G_FILE_TEST_IS_REGULAR)) {
      g_set_error (error, options_error_quark (), 0, "--static %s: no index.html in it (give a built web client, "
                   "e.g. the reference client's dist/)", o->static_dir);
      return FALSE;
    }
  }
  if (!o->tls_cert != !o->tls_key) {
    g_set_error (error, options_error_quark (), 0, "give both --tls-cert and --tls-key, or neither");
    return FALSE;
  }
  if (o->tls_cert && o->ssl_dir) {
    g_set_error (error, options_error_quark (), 0, "give either --tls-cert/--tls-key or --ssl-dir, not both");
    return FALSE;
  }
  if (o->tls_cert && (!check_readable ("tls-cert", o->tls_cert, error) ||
                      !check_readable ("tls-key", o->tls_key, error)))
    return FALSE;
  /* a blank token would match a blank one presented: never a token (issue 25, defect 5) */
  if (o->auth_token && !*g_strstrip (o->auth_token)) {
    g_set_error (error, options_error_quark (), 0, "--auth-token is empty or blank: give a token, or leave the "
                 "option out");
    return FALSE;
  }
  if (!o->auth_token && g_getenv (PPX_SERVER_TOKEN_ENV)) {
    o->auth_token = g_strstrip (g_strdup (g_getenv (PPX_SERVER_TOKEN_ENV)));
    if (!*o->auth_token) {
      g_set_error (error, options_error_quark (), 0, "$%s is set but empty or blank: set a token, or unset it",
                   PPX_SERVER_TOKEN_ENV);
      return FALSE;
    }
  }
  if (!o->auth_token && !o->allow_anonymous && !ppx_server_address_is_loopback (o->address)) {
    g_set_error (error, options_error_quark (), 0, "--address %s serves the network: give --auth-token TOKEN (or "
                 "set %s), or --allow-anonymous to let anyone who reaches the port use the model", o->address,
                 PPX_SERVER_TOKEN_ENV);
    return FALSE;
  }
  for (guint i = 0; o->allowed_origins && o->allowed_origins[i]; i++)
    if (!check_origin (o->allowed_origins[i], error))
      return FALSE;
  if (!check_seconds ("drain-timeout", o->drain_timeout, 0, error) ||
      !check_seconds ("join-timeout", o->join_timeout, 1, error) ||
      !check_seconds ("media-timeout", o->media_timeout, 1, error) ||
      !check_seconds ("ping-interval", o->ping_interval, 0, error) ||
      !check_seconds ("ping-timeout", o->ping_timeout, 0, error))
    return FALSE;
  if (o->ping_timeout && o->ping_interval && o->ping_timeout <= o->ping_interval) {
    g_set_error (error, options_error_quark (), 0, "--ping-timeout %d must be longer than --ping-interval %d",
                 o->ping_timeout, o->ping_interval);
    return FALSE;
  }
  if (o->max_ice_candidates < 1 || o->max_ice_candidates > 1000) {
    g_set_error (error, options_error_quark (), 0, "--max-ice-candidates %d: use 1 to 1000", o->max_ice_candidates);
    return FALSE;
  }
  return TRUE;
}

/* The options given as names, before check_names turns them into the library's enums. */
typedef struct {
  char *backend, *quantization, *kv_cache_format, *admission;
} PpxServerNames;

/* --backend, --quantization and --kv-cache-format: the library's names (ppx-types.h); absent is auto. */
static gboolean
check_names (PpxServerOptions *o, const PpxServerNames *n, GError **error)
{
  const struct {
    const char *option, *value;
    gboolean ok;
    const char *const *names;
  } choices[] = {
    {"--backend", n->backend, !n->backend || ppx_backend_kind_from_name (n->backend, &o->backend),
     ppx_backend_kind_names ()},
    {"--quantization", n->quantization, !n->quantization || ppx_quantization_from_name (n->quantization,
                                                                                          &o->quantization),
     ppx_quantization_names ()},
    {"--kv-cache-format", n->kv_cache_format, !n->kv_cache_format || ppx_kv_format_from_name (n->kv_cache_format,
                                                                                               &o->kv_cache_format),
     ppx_kv_format_names ()},
  };
  for (guint i = 0; i < G_N_ELEMENTS (choices); i++)
    if (!choices[i].ok) {
      g_autofree char *names = ppx_names_choice (choices[i].names);
      g_set_error (error, options_error_quark (), 0, "%s '%s': use %s", choices[i].option, choices[i].value, names);
      return FALSE;
    }
  return TRUE;
}

/* --device N names a GPU: the CUDA backend (auto becomes cuda, so that a missing GPU is an error rather than a
 * server on the CPU); with --backend cpu it is refused. */
static gboolean
check_device (PpxServerOptions *o, GError **error)
{
  if (o->device == PPX_SERVER_DEVICE_UNSET)
    return TRUE;
  if (o->device < 0 || o->device > MAX_DEVICE) {
    g_set_error (error, options_error_quark (), 0, "--device %d: a GPU index, 0 to %d (nvidia-smi's numbering)",
                 o->device, MAX_DEVICE);
    return FALSE;
  }
  if (o->backend == PPX_BACKEND_CPU) {
    g_set_error (error, options_error_quark (), 0, "--device %d names a GPU, but --backend %s runs on the CPU: "
                 "leave --device out, or use --backend %s", o->device, ppx_backend_kind_name (PPX_BACKEND_CPU),
                 ppx_backend_kind_name (PPX_BACKEND_CUDA));
    return FALSE;
  }
  o->backend = PPX_BACKEND_CUDA;
  return TRUE;
}

static gboolean
check_options (PpxServerOptions *o, const PpxServerNames *names, GError **error)
{
  if (!o->model_dir) {
    g_set_error (error, options_error_quark (), 0, "--model-dir is required (see --help)");
    return FALSE;
  }
  if (!g_file_test (o->model_dir, G_FILE_TEST_IS_DIR)) {
    g_set_error (error, options_error_quark (), 0, "--model-dir %s: not a directory", o->model_dir);
    return FALSE;
  }
  if (o->voice_prompt && !*o->voice_prompt)
    g_clear_pointer (&o->voice_prompt, g_free);
  if (o->text_prompt && !*g_strstrip (o->text_prompt))
    g_clear_pointer (&o->text_prompt, g_free);
  if (o->text_prompt_tokens && !*g_strstrip (o->text_prompt_tokens))
    g_clear_pointer (&o->text_prompt_tokens, g_free);
  if (o->text_prompt && o->text_prompt_tokens) {
    g_set_error (error, options_error_quark (), 0, "give either --text-prompt or --text-prompt-tokens, not both");
    return FALSE;
  }
  if (o->text_prompt_tokens && !check_token_list (o->text_prompt_tokens, error))
    return FALSE;
  if (!check_names (o, names, error) || !check_device (o, error))
    return FALSE;
  if (g_ascii_strcasecmp (o->address, "localhost") == 0) {
    g_free (o->address);
    o->address = g_strdup (DEFAULT_ADDRESS);
  }
  g_autoptr (GInetAddress) inet = g_inet_address_new_from_string (o->address);
  if (!inet) {
    g_set_error (error, options_error_quark (), 0, "--address '%s': not an IPv4 or IPv6 address", o->address);
    return FALSE;
  }
  if (o->port < 0 || o->port > 65535) {
    g_set_error (error, options_error_quark (), 0, "--port %d: use 0 (any free port) to 65535", o->port);
    return FALSE;
  }
  if (o->max_sessions < 0 || o->max_sessions > MAX_MAX_SESSIONS) {
    g_set_error (error, options_error_quark (), 0, "--max-sessions %d: use 1 to %d, or 0 for as many as fit in "
                 "memory", o->max_sessions, MAX_MAX_SESSIONS);
    return FALSE;
  }
  if (o->batch_deadline_ms < -1 || o->batch_deadline_ms > 10000) {
    g_set_error (error, options_error_quark (), 0, "--batch-deadline %d: use 0 to 10000 (milliseconds)",
                 o->batch_deadline_ms);
    return FALSE;
  }
  if (o->tick_budget_ms < 1 || o->tick_budget_ms > 10000) {
    g_set_error (error, options_error_quark (), 0, "--tick-budget-ms %d: use 1 to 10000", o->tick_budget_ms);
    return FALSE;
  }
  if (names->admission && !(o->admission_memory = g_str_equal (names->admission, "memory")) &&
      !g_str_equal (names->admission, "tick")) {
    g_set_error (error, options_error_quark (), 0, "--admission '%s': tick or memory", names->admission);
    return FALSE;
  }
  if (o->max_input_backlog_ms < 100 || o->max_input_backlog_ms > 60000) {
    g_set_error (error, options_error_quark (), 0, "--max-input-backlog %d: use 100 to 60000 (milliseconds)",
                 o->max_input_backlog_ms);
    return FALSE;
  }
  if (o->pacing_max_delay_ms < 0 || o->pacing_max_delay_ms > 1000) {
    g_set_error (error, options_error_quark (), 0, "--pacing-max-delay %d: use 0 to 1000 (milliseconds)",
                 o->pacing_max_delay_ms);
    return FALSE;
  }
  return check_serving (o, error);
}

gboolean
ppx_server_options_parse (PpxServerOptions *o, int *argc, char ***argv, GError **error)
{
  memset (o, 0, sizeof *o);
  o->device = PPX_SERVER_DEVICE_UNSET;
  o->port = DEFAULT_PORT;
  o->max_sessions = DEFAULT_MAX_SESSIONS;
  o->seed = -1;
  o->batch_deadline_ms = -1;
  o->drain_timeout = DEFAULT_DRAIN_TIMEOUT;
  o->join_timeout = DEFAULT_JOIN_TIMEOUT;
  o->media_timeout = DEFAULT_MEDIA_TIMEOUT;
  o->ping_interval = DEFAULT_PING_INTERVAL;
  o->ping_timeout = DEFAULT_PING_TIMEOUT;
  o->max_ice_candidates = DEFAULT_MAX_ICE_CANDIDATES;
  o->max_input_backlog_ms = DEFAULT_MAX_INPUT_BACKLOG_MS;
  o->tick_budget_ms = DEFAULT_TICK_BUDGET_MS;
  o->pacing_max_delay_ms = 80;
  PpxServerNames names = {NULL};
  /* the help lists the library's names */
  g_autofree char *backends = ppx_names_choice (ppx_backend_kind_names ());
  g_autofree char *quantizations = ppx_names_choice (ppx_quantization_names ());
  g_autofree char *kv_formats = ppx_names_choice (ppx_kv_format_names ());
  g_autofree char *backend_help = g_strdup_printf ("Compute backend: %s (default auto: a GPU when one is usable, "
                                                   "else the CPU)", backends);
  g_autofree char *quantization_help = g_strdup_printf ("LM weights: %s (default auto)", quantizations);
  g_autofree char *kv_help = g_strdup_printf ("KV cache of every call: %s (default auto)", kv_formats);
  GOptionEntry entries[] = {
    {"model-dir", 'm', 0, G_OPTION_ARG_FILENAME, &o->model_dir, "Model directory (published layout)", "DIR"},
    {"voice-prompt", 0, 0, G_OPTION_ARG_FILENAME, &o->voice_prompt,
     "Voice of the agent: audio file, .pt file, or NAME (DIR/voices/NAME.pt)", "FILE|NAME"},
    {"text-prompt", 0, 0, G_OPTION_ARG_STRING, &o->text_prompt, "System text prompt (needs the model's tokenizer)",
     "TEXT"},
    {"text-prompt-tokens", 0, 0, G_OPTION_ARG_STRING, &o->text_prompt_tokens,
     "System text prompt as comma-separated token ids", "1,2,3"},
    {"backend", 0, 0, G_OPTION_ARG_STRING, &names.backend, backend_help, "B"},
    {"device", 0, 0, G_OPTION_ARG_INT, &o->device,
     "The GPU to run on (its index, as nvidia-smi numbers them; implies --backend cuda; default: GPU 0 when the "
     "backend is a GPU's)", "N"},
    {"quantization", 0, 0, G_OPTION_ARG_STRING, &names.quantization, quantization_help, "Q"},
    {"greedy", 0, 0, G_OPTION_ARG_NONE, &o->greedy, "Greedy decoding instead of sampling", NULL},
    {"seed", 0, 0, G_OPTION_ARG_INT64, &o->seed,
     "Sampling seed of the first session; the n-th session gets SEED + n (default: a random seed each)", "SEED"},
    {"address", 'a', 0, G_OPTION_ARG_STRING, &o->address,
     "Address to listen on (default " DEFAULT_ADDRESS "; a non-loopback address serves the network)", "ADDR"},
    {"port", 'p', 0, G_OPTION_ARG_INT, &o->port, "TCP port (default 8080; 0 = any free port)", "PORT"},
    {"max-sessions", 0, 0, G_OPTION_ARG_INT, &o->max_sessions,
     "Calls served at once (both protocols), all on one engine (default 0: as many as fit in memory, said at "
     "start-up)", "N"},
    {"kv-cache-format", 0, 0, G_OPTION_ARG_STRING, &names.kv_cache_format, kv_help, "F"},
    {"batch-deadline", 0, 0, G_OPTION_ARG_INT, &o->batch_deadline_ms,
     "Longest wait (ms) of a call's frame for the other calls' frames before the tick (default: the element's)",
     "MS"},
    {"max-input-backlog", 0, 0, G_OPTION_ARG_INT, &o->max_input_backlog_ms,
     "Longest a call's audio may wait for the model (ms, default 1000): the oldest beyond it is dropped, and "
     "counted in /metrics (/api/chat)", "MS"},
    {"tick-budget-ms", 0, 0, G_OPTION_ARG_INT, &o->tick_budget_ms,
     "Admit a call only while the engine's tick p99 predicted with it stays within this (ms, default 70; the "
     "frame is 80)", "MS"},
    {"admission", 0, 0, G_OPTION_ARG_STRING, &names.admission,
     "tick (default): calls while the tick keeps real time and they fit in memory; memory: as many as fit in "
     "memory", "tick|memory"},
    {"pacing-max-delay", 0, 0, G_OPTION_ARG_INT, &o->pacing_max_delay_ms,
     "Most delay (ms, default 80) the answer's pacing may add to cover the tick's jitter (docs/server.md, "
     "\"Pacing\")", "MS"},
    {"no-pacing", 0, 0, G_OPTION_ARG_NONE, &o->no_pacing,
     "Send each answer page as soon as it is encoded (two at once per 80 ms frame) instead of one every 40 ms",
     NULL},
    {"pacing-rise", 0, 0, G_OPTION_ARG_NONE, &o->pacing_rise,
     "/api/chat: a new call's first pages also wait for the tick's growth the admission predicts from the calls "
     "open to the capacity, at most --pacing-max-delay (server.md, Joins and leaves; the default where the "
     "admission measured its tick on a GPU)",
     NULL},
    {"no-pacing-rise", 0, 0, G_OPTION_ARG_NONE, &o->no_pacing_rise,
     "/api/chat: no --pacing-rise, not even on a GPU", NULL},
    {"no-align-frames", 0, 0, G_OPTION_ARG_NONE, &o->no_align_frames,
     "Do not line a joining call's frames up with the running calls' (answers then do not depend on when a call "
     "joins)", NULL},
    {"static", 0, 0, G_OPTION_ARG_FILENAME, &o->static_dir,
     "Serve this built web client (index.html and its assets, e.g. the reference client's dist/) at / instead of "
     "the WebRTC page", "DIR"},
    {"tls-cert", 0, 0, G_OPTION_ARG_FILENAME, &o->tls_cert, "TLS certificate (PEM): serve HTTPS and WSS", "FILE"},
    {"tls-key", 0, 0, G_OPTION_ARG_FILENAME, &o->tls_key, "TLS private key (PEM)", "FILE"},
    {"ssl-dir", 0, 0, G_OPTION_ARG_FILENAME, &o->ssl_dir,
     "TLS from DIR/cert.pem and DIR/key.pem, a self-signed pair made there when missing", "DIR"},
    {"auth-token", 0, 0, G_OPTION_ARG_STRING, &o->auth_token,
     "Every call and /metrics must present this token (Authorization: Bearer, or token= in the query); also "
     "from $" PPX_SERVER_TOKEN_ENV, "TOKEN"},
    {"allow-anonymous", 0, 0, G_OPTION_ARG_NONE, &o->allow_anonymous,
     "Allow a non-loopback --address without a token", NULL},
    {"allowed-origin", 0, 0, G_OPTION_ARG_STRING_ARRAY, &o->allowed_origins,
     "A web origin allowed to open calls besides the server's own addresses (repeatable)", "ORIGIN"},
    {"drain-timeout", 0, 0, G_OPTION_ARG_INT, &o->drain_timeout,
     "After SIGTERM, seconds the open calls may run on before they are ended (default 30)", "S"},
    {"join-timeout", 0, 0, G_OPTION_ARG_INT, &o->join_timeout,
     "Seconds for a WebRTC call's signalling to bring the connection up (default 30)", "S"},
    {"media-timeout", 0, 0, G_OPTION_ARG_INT, &o->media_timeout,
     "A call from which no audio arrives for this many seconds is ended (default 30)", "S"},
    {"ping-interval", 0, 0, G_OPTION_ARG_INT, &o->ping_interval,
     "Seconds between WebSocket pings (default 10; 0: none)", "S"},
    {"ping-timeout", 0, 0, G_OPTION_ARG_INT, &o->ping_timeout,
     "A WebSocket from which nothing (data or pong) arrives for this many seconds is closed (default 30; 0: never)",
     "S"},
    {"max-ice-candidates", 0, 0, G_OPTION_ARG_INT, &o->max_ice_candidates,
     "Remote ICE candidates accepted per WebRTC call (default 50)", "N"},
    {NULL},
  };
  g_autoptr (GOptionContext) ctx = g_option_context_new ("- serve PersonaPlex: its WebSocket protocol (/api/chat) and WebRTC calls from browsers");
  g_option_context_add_main_entries (ctx, entries, NULL);
  gboolean ok = g_option_context_parse (ctx, argc, argv, error);
  if (ok && *argc > 1) {
    g_set_error (error, options_error_quark (), 0, "unexpected argument '%s' (see --help)", (*argv)[1]);
    ok = FALSE;
  }
  if (ok) {
    if (!o->address)
      o->address = g_strdup (DEFAULT_ADDRESS);
    o->model_instance_id = g_strdup_printf ("personaplex-server-%d", (int) getpid ());
    ok = check_options (o, &names, error);
  }
  g_free (names.backend);
  g_free (names.quantization);
  g_free (names.kv_cache_format);
  g_free (names.admission);
  return ok;
}

void
ppx_server_options_clear (PpxServerOptions *o)
{
  g_free (o->model_dir);
  g_free (o->voice_prompt);
  g_free (o->text_prompt);
  g_free (o->text_prompt_tokens);
  g_free (o->address);
  g_free (o->model_instance_id);
  g_free (o->static_dir);
  g_free (o->tls_cert);
  g_free (o->tls_key);
  g_free (o->ssl_dir);
  g_free (o->auth_token);
  g_strfreev (o->allowed_origins);
  memset (o, 0, sizeof *o);
}
