/* personaplex-server: one process, one model, one engine serving PersonaPlex calls.
 *
 *   personaplex-server --model-dir DIR [--voice-prompt FILE|NAME] [--text-prompt TEXT | --text-prompt-tokens 1,2,3]
 *                      [--address 127.0.0.1] [--port 8080] [--max-sessions N] [--static DIR] [--auth-token T]
 *                      [--tls-cert F --tls-key F | --ssl-dir DIR] ... (--help lists them all)
 *
 * Serves the PersonaPlex WebSocket protocol at /api/chat (the reference server's, which its web client and
 * third-party clients speak), WebRTC calls from its own page at /, and /health and /metrics for operators.
 * Every call of either protocol runs on one loaded model and one engine that steps them together; each picks
 * its own persona, voice and sampling. SIGTERM drains. See docs/server.md. */
#include <glib-unix.h>
#include <gst/gst.h>
#include <locale.h>
#include <stdio.h>

#include "server-admission.h"
#include "server-chat.h"
#include "server-http.h"
#include "server-model.h"
#include "server-options.h"
#include "server-webrtc.h"
#include "server-worker.h"

typedef struct {
  GMainLoop *loop;
  PpxServer *server;
  guint signals;
} Stop;

/* The first SIGTERM (or SIGINT) drains, a second one stops at once. */
static gboolean
on_stop_signal (gpointer data)
{
  Stop *stop = data;
  if (stop->signals++ == 0) {
    ppx_server_drain (stop->server, stop->loop);
  } else {
    g_printerr ("personaplex-server: stopping now\n");
    g_main_loop_quit (stop->loop);
  }
  return G_SOURCE_CONTINUE;
}

static int
serve (const PpxServerOptions *options)
{
  g_autoptr (GError) error = NULL;
  if (options->device == PPX_SERVER_DEVICE_UNSET)
    g_printerr ("personaplex-server: loading the model from %s\n", options->model_dir);
  else
    g_printerr ("personaplex-server: loading the model from %s onto GPU %d\n", options->model_dir, options->device);
  PpxServerModelKeeper *keeper = ppx_server_model_keeper_new (options, &error);
  if (!keeper) {
    g_printerr ("personaplex-server: %s\n", error->message);
    return 1;
  }
  g_autofree char *model = ppx_server_model_keeper_describe (keeper);
  /* The engine's slots, less the keeper's, unless --max-sessions set them (then there is one more). */
  PpxServerEngineInfo engine;
  ppx_server_model_keeper_engine (keeper, &engine);
  g_autofree char *kv = engine.kv_cache_format;
  const int max_calls = options->max_sessions > 0 ? options->max_sessions : (int) engine.max_sessions - 1;
  if (max_calls < 1) {
    g_printerr ("personaplex-server: only %u session fits in memory (%.1f MB each with a %s KV cache), and the "
                "keeper holds it: no call would fit; free memory, or use --kv-cache-format fp8 or a smaller "
                "--quantization\n", engine.max_sessions, engine.session_bytes / 1e6, kv ? kv : "?");
    ppx_server_model_keeper_free (keeper);
    return 1;
  }
  g_printerr ("personaplex-server: %d call(s) at once on one engine (%s; %u sessions with the keeper's, %s KV "
              "cache, %.1f MB a session, %.1f MB in all)\n", max_calls,
              options->max_sessions > 0 ? "--max-sessions" : "as many as fit in memory", engine.max_sessions,
              kv ? kv : "?", engine.session_bytes / 1e6, engine.engine_bytes / 1e6);
  /* the compute bound: the tick measured before the first call (docs/server.md, "Admission") */
  PpxAdmission *admission = ppx_admission_new (options, keeper, (guint) max_calls, engine.max_sessions);
  PpxServer *server = ppx_server_new (options, keeper, max_calls, &error);
  if (!server) {
    g_printerr ("personaplex-server: %s\n", error->message);
    ppx_admission_free (admission);
    ppx_server_model_keeper_free (keeper);
    return 1;
  }
  ppx_server_set_admission (server, admission);
  ppx_server_set_protocol (server, PPX_PROTO_CHAT, "/api/chat", ppx_server_chat_start);
  ppx_server_set_protocol (server, PPX_PROTO_WEBRTC, "/ws", ppx_server_webrtc_start);
  g_autofree char *url = ppx_server_get_url (server);
  /* The one line on stdout: scripts read the URL (and the port, with --port 0) from it. */
  printf ("personaplex-server: serving %s (model %s)\n", url, model);
  fflush (stdout);

  Stop stop = {g_main_loop_new (NULL, FALSE), server, 0};
  guint sigint = g_unix_signal_add (SIGINT, on_stop_signal, &stop);
  guint sigterm = g_unix_signal_add (SIGTERM, on_stop_signal, &stop);
  g_main_loop_run (stop.loop);
  g_source_remove (sigint);
  g_source_remove (sigterm);
  ppx_server_free (server);
  ppx_admission_free (admission);
  ppx_server_work_finish ();
  ppx_server_model_keeper_free (keeper);
  g_main_loop_unref (stop.loop);
  g_printerr ("personaplex-server: stopped\n");
  return 0;
}

int
main (int argc, char **argv)
{
  setlocale (LC_ALL, "");
  /* --device N is the GPU nvidia-smi calls N (CUDA's own default order puts the fastest first), unless the
   * environment says otherwise; set before any thread exists and before CUDA reads it */
  g_setenv ("CUDA_DEVICE_ORDER", "PCI_BUS_ID", FALSE);
  gst_init (&argc, &argv);
  PpxServerOptions options;
  g_autoptr (GError) error = NULL;
  int rc;
  if (ppx_server_options_parse (&options, &argc, &argv, &error)) {
    rc = serve (&options);
  } else {
    g_printerr ("personaplex-server: %s\n", error->message);
    rc = 2;
  }
  ppx_server_options_clear (&options);
  gst_deinit ();
  return rc;
}
