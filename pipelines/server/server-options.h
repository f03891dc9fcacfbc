/* personaplex-server: the command line (docs/server.md, "Options"). */
#ifndef PPX_SERVER_OPTIONS_H
#define PPX_SERVER_OPTIONS_H

#include <glib.h>

#include "ppx-types.h"

G_BEGIN_DECLS

/* The environment variable that may hold the token instead of --auth-token (which `ps` would show). */
#define PPX_SERVER_TOKEN_ENV "PERSONAPLEX_AUTH_TOKEN"
/* PpxServerOptions.device without --device. */
#define PPX_SERVER_DEVICE_UNSET G_MININT

typedef struct {
  /* the model and every call's defaults (a call may pick its own persona, voice and sampling) */
  char *model_dir;
  char *voice_prompt;       /* NULL: no voice prompt */
  char *text_prompt;        /* NULL: none */
  char *text_prompt_tokens; /* "1,2,3", checked; NULL: none */
  PpxBackendKind backend;   /* personaplexduplex "backend" (its values are the library's) */
  int device;               /* --device: the GPU (personaplexduplex "device"); PPX_SERVER_DEVICE_UNSET: not given */
  PpxQuantization quantization; /* personaplexduplex "quantization" */
  gboolean greedy;
  gint64 seed;              /* sampling seed of the first call (the n-th gets seed + n); -1: random */
  PpxKvFormat kv_cache_format; /* personaplexduplex "kv-cache-format" */
  int batch_deadline_ms;    /* personaplexduplex "batch-deadline"; -1: the element's default */
  gboolean no_align_frames; /* personaplexduplex align-frames=false (answers independent of join time) */
  int max_sessions;         /* calls at once, both protocols; 0: as many as fit in memory (the engine decides) */
  char *model_instance_id;  /* shared by every call's personaplexduplex */
  /* where and how it listens */
  char *address;            /* where HTTP/WebSocket listens, and the only ICE address when it is a specific one */
  int port;                 /* 0: any free port (printed) */
  char *static_dir;         /* serve this built web client at / instead of the WebRTC page */
  char *tls_cert, *tls_key; /* PEM files: HTTPS and WSS */
  char *ssl_dir;            /* DIR/cert.pem and DIR/key.pem, made (self-signed) when missing */
  char *auth_token;         /* --auth-token or $PERSONAPLEX_AUTH_TOKEN; NULL: none */
  gboolean allow_anonymous; /* listen on a non-loopback address without a token */
  char **allowed_origins;   /* --allowed-origin, beside the server's own addresses */
  /* limits and timeouts (seconds) */
  int drain_timeout;        /* after SIGTERM, how long open calls may run on */
  int join_timeout;         /* /ws: signalling must bring the WebRTC connection up within this */
  int media_timeout;        /* a call from which no audio arrives for this long is ended */
  int ping_interval, ping_timeout; /* WebSocket pings, and silence (no byte from the client) that ends a call */
  int max_ice_candidates;   /* remote ICE candidates accepted per WebRTC call */
  int max_input_backlog_ms; /* /api/chat: a call's decoded audio waiting for the model beyond this is dropped */
  /* admission (docs/server.md, "Admission") */
  int tick_budget_ms;       /* a call is admitted while the predicted tick p99 with it stays within this */
  gboolean admission_memory; /* --admission memory: as many calls as fit in memory (the tick is not asked) */
  gboolean no_pacing;       /* answer pages as they come, not one per page duration (server-pacer.h) */
  gboolean pacing_rise;     /* a new call's first pages also wait for the tick's predicted growth (server-pacer.h) */
  gboolean no_pacing_rise;  /* ... never (default: when the admission measured its tick on a GPU) */
  int pacing_max_delay_ms;  /* the most delay the pacing adds for the tick's jitter */
} PpxServerOptions;

/* Parses and checks argv (GOption; --help prints and exits). Returns FALSE with a message naming the
 * option on bad input. Clear `o` with ppx_server_options_clear either way. */
gboolean ppx_server_options_parse (PpxServerOptions *o, int *argc, char ***argv, GError **error);
void ppx_server_options_clear (PpxServerOptions *o);

/* TRUE when `address` is a loopback IP literal or "localhost". */
gboolean ppx_server_address_is_loopback (const char *address);

G_END_DECLS
#endif
