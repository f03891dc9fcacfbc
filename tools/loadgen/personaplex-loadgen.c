/* personaplex-loadgen: N concurrent calls to a PersonaPlex server (/api/chat), or to a fleet behind a balancer.
 *
 *   personaplex-loadgen --url ws://HOST:PORT --calls N --seconds S [--input FILE] [--ramp S] [--json FILE]
 *                       [--auth-token T] [--insecure] [--expect-refused N] [--expect-failed N] [--server-pid PID]
 *                       [--max-missed-ms MS] [--report FILE.html]
 *   personaplex-loadgen --playout-trace FILE
 *
 * Each call connects, waits for the handshake, streams its audio as Ogg Opus in real time from its own clock,
 * and is measured: join time, underruns, frame latency, text pieces, how it ended. Prints the summary table;
 * exits 0 when exactly the expected calls were refused and failed (and no call missed more audio at the
 * reference player than --max-missed-ms), 1 otherwise, 2 on a bad command line. --playout-trace replays a trace
 * of decoded chunks through the reference player (loadgen-playout.h) and prints its figures as JSON.
 * See docs/fleet.md. */
#include <gst/gst.h>
#include <locale.h>
#include <stdio.h>

#include "loadgen-html.h"
#include "loadgen-options.h"
#include "loadgen-playout.h"
#include "loadgen-report.h"
#include "loadgen-run.h"

/* --playout-trace: 0, or 1 with a message for a trace that cannot be read. */
static int
replay_trace (const char *path)
{
  g_autoptr (GError) error = NULL;
  g_autoptr (GArray) chunks = loadgen_playout_read_trace (path, &error);
  if (!chunks) {
    g_printerr ("personaplex-loadgen: %s\n", error->message);
    return 1;
  }
  LoadgenPlayout p;
  loadgen_playout_replay ((const LoadgenChunk *) (void *) chunks->data, chunks->len, 0, NULL, &p);
  g_autofree char *json = loadgen_playout_to_json (&p);
  printf ("%s\n", json);
  return 0;
}

int
main (int argc, char **argv)
{
  setlocale (LC_ALL, "");
  LoadgenOptions options;
  g_autoptr (GError) error = NULL;
  if (!loadgen_options_parse (&options, &argc, &argv, &error)) {
    g_printerr ("personaplex-loadgen: %s\n", error->message);
    loadgen_options_clear (&options);
    return 2;
  }
  if (options.playout_trace) {
    int status = replay_trace (options.playout_trace);
    loadgen_options_clear (&options);
    return status;
  }
  gst_init (NULL, NULL);
  LoadgenRun *run = loadgen_run_new (&options, &error);
  if (!run) {
    g_printerr ("personaplex-loadgen: %s\n", error->message);
    loadgen_options_clear (&options);
    return 1;
  }
  g_autoptr (LoadgenReport) report = loadgen_report_new ();
  loadgen_run_calls (run, report);
  loadgen_report_print (report, stdout);
  fflush (stdout);
  int status = loadgen_report_passed (report) ? 0 : 1;
  if (options.json_path && !loadgen_report_write_json (report, options.json_path, &error)) {
    g_printerr ("personaplex-loadgen: %s\n", error->message);
    status = 1;
  }
  if (options.report_path && !loadgen_report_write_html (report, options.report_path, &error)) {
    g_printerr ("personaplex-loadgen: %s\n", error->message);
    status = 1;
  }
  g_clear_pointer (&report, loadgen_report_free);
  loadgen_run_free (run);
  loadgen_options_clear (&options);
  return status;
}
