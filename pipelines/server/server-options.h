/* personaplex-server: the command line. */
#ifndef PPX_SERVER_OPTIONS_H
#define PPX_SERVER_OPTIONS_H

#include <glib.h>

G_BEGIN_DECLS

typedef struct {
  char *model_dir;
  char *voice_prompt;       /* NULL: no voice prompt */
  char *text_prompt;        /* NULL: none */
  char *text_prompt_tokens; /* "1,2,3", checked; NULL: none */
  char *backend;            /* personaplexduplex "backend" nick: auto, cpu, cuda */
  char *quantization;       /* personaplexduplex "quantization" nick */
  gboolean greedy;
  gint64 seed;              /* sampling seed of the first session (the n-th gets seed + n); -1: random */
  char *address;            /* where HTTP/WebSocket listens, and the only ICE address when it is loopback */
  int port;                 /* 0: any free port (printed) */
  int max_sessions;         /* browsers served at once; 0: as many as fit in memory (the engine decides) */
  char *kv_cache_format;    /* personaplexduplex "kv-cache-format" nick: auto, f32, bf16, fp8 */
  int batch_deadline_ms;    /* personaplexduplex "batch-deadline"; -1: the element's default */
  char *model_instance_id;  /* shared by every session's personaplexduplex */
} PpxServerOptions;

/* Parses and checks argv (GOption; --help prints and exits). Returns FALSE with a message naming the
 * option on bad input. Clear `o` with ppx_server_options_clear either way. */
gboolean ppx_server_options_parse (PpxServerOptions *o, int *argc, char ***argv, GError **error);
void ppx_server_options_clear (PpxServerOptions *o);

/* TRUE when `address` is a loopback IP literal or "localhost". */
gboolean ppx_server_address_is_loopback (const char *address);

G_END_DECLS
#endif
