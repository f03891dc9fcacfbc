/* What the personaplex-server tests share: a tiny model directory with a tokenizer and voices, a server started
 * as a user starts it (127.0.0.1, --port 0) with its log captured, plain HTTP requests, a raw WebSocket client
 * (for what no well-behaved client sends), and the server's resident memory. Environment (tests/meson.build):
 * PPX_SERVER, PPX_MAKE_MODEL, PPX_MAKE_TOKENIZER, GST_PLUGIN_PATH_1_0; speech from ../shared/data when present. */
#ifndef PPX_SERVER_FIXTURE_H
#define PPX_SERVER_FIXTURE_H

#include <gio/gio.h>

#include "chat-client.h"

G_BEGIN_DECLS

/* gst_init, g_test_init and the model directory: the start of every server test program's main. */
void fixture_test_init (int *argc, char ***argv);
/* The model directory (made once per test program): the tiny model, a SentencePiece tokenizer (text pieces),
 * voices/VOICE1.wav and VOICE2.wav (1-1.5 s of speech), voices/NATF0.pt (embeddings) and voices/LONG.wav
 * (60 s: a long prompt phase). Removed at exit. */
const char *fixture_model_dir (void);
/* Speech (or a synthetic voice-like signal without ../shared/data), 24 kHz mono, `seconds` long, starting
 * `offset` seconds in. */
PpxChatAudio *fixture_speech (double offset, double seconds);

typedef struct {
  GSubprocess *proc;
  char *url;       /* "http://127.0.0.1:PORT/" */
  char *ws_url;    /* "ws://127.0.0.1:PORT/api/chat" */
  guint port;
  GString *log;    /* stderr so far (fixture_server_log reads more) */
  GInputStream *err;
} FixtureServer;

/* Starts the server with --model-dir, --port 0 and `args` (NULL-terminated); fails the test if it does not
 * serve within 60 s. */
FixtureServer *fixture_server_start (const char *const *args);
/* The log so far (reads what the server wrote since the last call). */
const char *fixture_server_log (FixtureServer *s);
/* Lines of the log containing `needle`. */
guint fixture_server_log_count (FixtureServer *s, const char *needle);
/* Waits (iterating the default context) until the log contains `needle`; FALSE after timeout_ms. */
gboolean fixture_server_wait_log (FixtureServer *s, const char *needle, guint timeout_ms);
/* The same until `n` lines of the log contain `needle`. */
gboolean fixture_server_wait_log_count (FixtureServer *s, const char *needle, guint n, guint timeout_ms);
/* SIGTERM and waits; returns the exit status (-1: it had to be killed after timeout_ms). */
int fixture_server_stop (FixtureServer *s, guint timeout_ms);
/* The end of a test: SIGTERM, the server must exit 0 within 20 s; then freed. */
void fixture_server_finish (FixtureServer *s);
void fixture_server_signal (FixtureServer *s, int signum);
/* Waits for an exit; the status, or -1 after timeout_ms. */
int fixture_server_wait_exit (FixtureServer *s, guint timeout_ms);
void fixture_server_free (FixtureServer *s);
/* The same with `env` ("NAME=value" strings, NULL-terminated or NULL) added to the environment and, when `nofile` is
 * not 0, that limit on its open files (ulimit -n). */
FixtureServer *fixture_server_start_with (const char *const *args, const char *const *env, guint nofile);
/* The server's open file descriptors and threads, from /proc. */
guint fixture_server_fds (FixtureServer *s);
guint fixture_server_threads (FixtureServer *s);
/* Sends `request` as it is on a new TCP connection and reads until the server closes it or timeout_ms: the bytes
 * read (g_free; "" when none), *closed TRUE when the server closed the connection (end of stream or reset). */
char *fixture_raw_http (FixtureServer *s, const char *request, guint timeout_ms, gboolean *closed);
/* The server's resident memory (kB), from /proc. */
guint64 fixture_server_rss_kb (FixtureServer *s);
/* The same once one connection to `path` came and went (what the first call allocates once, threads and
 * plugins, is not what a later call or an attack costs). */
guint64 fixture_server_warm_rss_kb (FixtureServer *s, const char *path);

/* A call on the default context with `params` (key, value, ...; NULL-terminated or NULL) saying `audio`. */
PpxChatCall *fixture_call_new (FixtureServer *s, const char *const *params, PpxChatAudio *audio, PpxChatPacing pacing,
                               gboolean end_of_stream);
/* The same, keeping the bytes of every 0x01 message (kind byte removed) in `answer`. */
PpxChatCall *fixture_call_new_recording (FixtureServer *s, const char *const *params, PpxChatAudio *audio,
                                         PpxChatPacing pacing, gboolean end_of_stream, GByteArray *answer);

/* Runs the default context until the call's handshake came (or the call ended, or timeout_ms); TRUE with a
 * handshake. */
gboolean fixture_call_until_handshake (PpxChatCall *call, guint timeout_ms);
/* Closes the call from the client side and waits until it is finished. */
void fixture_call_close (PpxChatCall *call);
/* The calls /health counts (G_MAXUINT without an answer). */
guint fixture_server_sessions (FixtureServer *s);
/* Waits until /health counts no call (every call torn down); FALSE after timeout_ms. */
gboolean fixture_server_wait_idle (FixtureServer *s, guint timeout_ms);

/* An HTTP request (GET unless `method`) with extra headers ("Name: value" strings, NULL-terminated or NULL):
 * the status, and the body when `body` is not NULL; *ms the time it took. */
guint fixture_http (FixtureServer *s, const char *method, const char *path, const char *const *headers, char **body,
                    double *ms);

/* The machine's CPU pressure so far (/proc/pressure/cpu, "some" total, microseconds); 0 where it is not kept. */
double fixture_cpu_pressure_us (void);
/* A counter or bucket of a /metrics text (the first line starting with `series`); `missing` when absent. */
double fixture_metric (const char *text, const char *series, double missing);

/* ---- a raw WebSocket client (RFC 6455 by hand, on a blocking socket) ---- */
typedef struct {
  GSocketConnection *conn;
  GSocket *socket;
  guint status;        /* the HTTP status of the upgrade */
  GByteArray *pending; /* bytes read past the handshake */
} RawWs;

/* Connects to `path` (with `extra` request headers, e.g. "Origin: ..."); NULL only when the TCP connection fails. */
RawWs *raw_ws_connect (FixtureServer *s, const char *path, const char *const *extra);
/* Sends one frame (masked, as a client must); FALSE when the socket refused (the server closed it). */
gboolean raw_ws_send_frame (RawWs *ws, guint8 opcode, gboolean fin, const void *payload, gsize len);
/* Reads the next frame (up to timeout_ms): its opcode (-1 on timeout or end), payload in *out (g_free). */
int raw_ws_read_frame (RawWs *ws, guint8 **out, gsize *len, guint timeout_ms);
/* Reads until the server's close frame or the end of the connection: the close code, 1006 without one,
 * -1 on timeout. */
int raw_ws_wait_close (RawWs *ws, guint timeout_ms);
void raw_ws_free (RawWs *ws);
/* Sends `len` bytes of an Ogg stream as one 0x01 message; FALSE when the socket refused. */
gboolean raw_ws_send_audio (RawWs *ws, const void *ogg, gsize len);
/* Sends page `i` of `audio` as one 0x01 message; FALSE when the socket refused. */
gboolean raw_ws_send_page (RawWs *ws, PpxChatAudio *audio, guint i);
/* A raw /api/chat call (`path`, NULL: "/api/chat") through its handshake (the test fails without one within 30 s),
 * then the header pages of `audio`'s Ogg stream sent; *serial (when not NULL) is the stream's serial number. */
RawWs *raw_ws_call (FixtureServer *s, const char *path, PpxChatAudio *audio, guint32 *serial);

G_END_DECLS
#endif
