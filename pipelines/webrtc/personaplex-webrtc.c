/* personaplex-webrtc: talk to PersonaPlex from a browser.
 *
 *   personaplex-webrtc --model-dir DIR [--voice-prompt FILE|NAME] [--text-prompt TEXT | --text-prompt-tokens 1,2,3]
 *                      [--address 127.0.0.1] [--port 8080] [--max-sessions 4] [--backend B] [--quantization Q]
 *
 * Serves a page and a WebSocket signalling endpoint; every browser that opens the page gets its own
 * conversation over WebRTC, all on one loaded model. See docs/webrtc.md. */
#include <glib-unix.h>
#include <gst/gst.h>
#include <locale.h>
#include <stdio.h>

#include "webrtc-model.h"
#include "webrtc-options.h"
#include "webrtc-server.h"

static gboolean
on_stop_signal (gpointer loop)
{
  g_printerr ("personaplex-webrtc: stopping\n");
  g_main_loop_quit (loop);
  return G_SOURCE_CONTINUE;
}

static int
serve (const PpxWebrtcOptions *options)
{
  g_autoptr (GError) error = NULL;
  g_printerr ("personaplex-webrtc: loading the model from %s\n", options->model_dir);
  PpxWebrtcModelKeeper *keeper = ppx_webrtc_model_keeper_new (options, &error);
  if (!keeper) {
    g_printerr ("personaplex-webrtc: %s\n", error->message);
    return 1;
  }
  g_autofree char *model = ppx_webrtc_model_keeper_describe (keeper);
  PpxWebrtcServer *server = ppx_webrtc_server_new (options, model, &error);
  if (!server) {
    g_printerr ("personaplex-webrtc: %s\n", error->message);
    ppx_webrtc_model_keeper_free (keeper);
    return 1;
  }
  g_autofree char *url = ppx_webrtc_server_get_url (server);
  /* The one line on stdout: scripts read the URL (and the port, with --port 0) from it. */
  printf ("personaplex-webrtc: serving %s (model %s)\n", url, model);
  fflush (stdout);

  GMainLoop *loop = g_main_loop_new (NULL, FALSE);
  guint sigint = g_unix_signal_add (SIGINT, on_stop_signal, loop);
  guint sigterm = g_unix_signal_add (SIGTERM, on_stop_signal, loop);
  g_main_loop_run (loop);
  g_source_remove (sigint);
  g_source_remove (sigterm);
  ppx_webrtc_server_free (server);
  ppx_webrtc_model_keeper_free (keeper);
  g_main_loop_unref (loop);
  return 0;
}

int
main (int argc, char **argv)
{
  setlocale (LC_ALL, "");
  gst_init (&argc, &argv);
  PpxWebrtcOptions options;
  g_autoptr (GError) error = NULL;
  int rc;
  if (ppx_webrtc_options_parse (&options, &argc, &argv, &error)) {
    rc = serve (&options);
  } else {
    g_printerr ("personaplex-webrtc: %s\n", error->message);
    rc = 2;
  }
  ppx_webrtc_options_clear (&options);
  gst_deinit ();
  return rc;
}
