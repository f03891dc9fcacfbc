/* personaplex-loadgen's figures, report and command line, on calls whose records are made up here with
 * known timings (the run itself against servers is tests/test-fleet.sh). */
#include <glib/gstdio.h>
#include <json-glib/json-glib.h>
#include <libsoup/soup.h>
#include <math.h>
#include <string.h>

#include "../tools/loadgen/loadgen-health.h"
#include "../tools/loadgen/loadgen-html.h"
#include "../tools/loadgen/loadgen-options.h"
#include "../tools/loadgen/loadgen-playout.h"
#include "../tools/loadgen/loadgen-report.h"
#include "../tools/common/tool-stats.h"

#define CLOSE(a, b) (fabs ((a) - (b)) < 1e-6)
#define CLOSE_MS(a, b) (fabs ((a) - (b)) < 1e-3)

static void
test_percentiles (void)
{
  double v[101];
  /* 1..100 in a scrambled order, and a NAN that must be left out */
  for (int i = 0; i < 100; i++)
    v[i] = (i * 37) % 100 + 1;
  v[100] = NAN;
  LoadgenSummary s;
  loadgen_summarize (v, 101, &s);
  g_assert_cmpuint (s.n, ==, 100);
  g_assert_true (CLOSE (s.p50, 50) && CLOSE (s.p95, 95) && CLOSE (s.p99, 99) && CLOSE (s.max, 100));
  g_assert_true (CLOSE (s.mean, 50.5));

  double one = 7.5;
  loadgen_summarize (&one, 1, &s);
  g_assert_true (s.n == 1 && CLOSE (s.p50, 7.5) && CLOSE (s.p99, 7.5) && CLOSE (s.max, 7.5));
  loadgen_summarize (v + 100, 1, &s);
  g_assert_true (s.n == 0 && isnan (s.p50) && isnan (s.max));
  loadgen_summarize (NULL, 0, &s);
  g_assert_true (s.n == 0 && isnan (s.p99));

  /* nearest rank: of 10 values, p50 is the 5th, p95 and p99 the 10th */
  double ten[10] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  g_assert_true (CLOSE (tool_percentile (ten, 10, 0.5), 5));
  g_assert_true (CLOSE (tool_percentile (ten, 10, 0.95), 10));
  g_assert_true (CLOSE (tool_percentile (ten, 10, 0.9), 9));
  /* p * n within rounding of a whole rank is that rank: 0.07 * 100 is 7.000000000000001 in doubles */
  double hundred[100];
  for (int i = 0; i < 100; i++)
    hundred[i] = i + 1;
  g_assert_true (CLOSE (tool_percentile (hundred, 100, 0.07), 7));
  g_assert_true (isnan (tool_percentile (NULL, 0, 0.5)));
}

/* ---- made-up records (the fields the chat client fills) ---- */

static gint64
us (double seconds)
{
  return (gint64) llround (seconds * 1e6);
}

static PpxChatRecord *
record_new (guint http_status)
{
  PpxChatRecord *r = g_new0 (PpxChatRecord, 1);
  ppx_chat_record_init (r);
  r->start_us = us (1.0);
  r->http_status = http_status;
  return r;
}

static void
record_free (PpxChatRecord *r)
{
  ppx_chat_record_clear (r);
  g_free (r);
}

static void
add_event (PpxChatRecord *r, double t, guint8 kind, gint64 samples, const char *text)
{
  PpxChatEvent e = {.time_us = us (t), .kind = kind, .samples = samples, .text = g_strdup (text)};
  g_array_append_val (r->events, e);
  if (kind == PPX_CHAT_AUDIO) {
    r->n_audio++;
    r->answer_samples = samples;
  } else if (kind == PPX_CHAT_TEXT) {
    r->n_text++;
    g_string_append (r->text, text);
  }
}

/* A call that connects at 1.0 s and joins in 500 ms, then sends 10 frames as 20 pages of 960 samples, one every
 * 40 ms; the answer's Ogg headers come at 1.68 s, each answer page 150 ms after the input page of the same
 * samples, from answer page 10 on 350 ms (one gap of 240 ms). `answer_pages` of the 20 arrive, with a text piece
 * after every 7th; closed with 1000. */
static PpxChatRecord *
made_up_record (guint answer_pages)
{
  PpxChatRecord *r = record_new (101);
  r->handshake_us = us (1.5);
  add_event (r, 1.5, PPX_CHAT_HANDSHAKE, 0, NULL);
  for (int j = 0; j < 20; j++) {
    PpxChatSent sent = {us (1.54 + 0.04 * j), 960 * (j + 1), 100};
    g_array_append_val (r->sent, sent);
  }
  r->sent_samples = 19200;
  add_event (r, 1.68, PPX_CHAT_AUDIO, 0, NULL);
  for (guint j = 0; j < answer_pages; j++) {
    add_event (r, 1.54 + 0.04 * j + (j < 10 ? 0.15 : 0.35), PPX_CHAT_AUDIO, 960 * (j + 1), NULL);
    if (j % 7 == 0)
      add_event (r, 1.7 + 0.04 * j, PPX_CHAT_TEXT, r->answer_samples, " hi");
  }
  r->close_code = 1000;
  r->end_us = us (2.5);
  return r;
}

static LoadgenCall *
call_of (guint index, PpxChatRecord *r)
{
  LoadgenCall *c = loadgen_call_new (index, 0.25 * index);
  c->record = r;
  return c;
}

static void
test_call_stats (void)
{
  PpxChatRecord *r = made_up_record (20);
  g_autoptr (LoadgenCall) c = call_of (0, r);
  LoadgenCallStats s;
  loadgen_call_stats (c, 100, &s);
  g_assert_true (CLOSE (s.join_ms, 500));
  g_assert_true (CLOSE (s.first_audio_ms, 180));
  g_assert_true (CLOSE (s.sent_s, 0.8) && CLOSE (s.answered_s, 0.8));
  g_assert_cmpuint (s.frames_sent, ==, 10);
  g_assert_cmpuint (s.frames_answered, ==, 10);
  g_assert_cmpuint (s.latency_ms->len, ==, 10);
  for (guint i = 0; i < 10; i++)
    g_assert_true (CLOSE (g_array_index (s.latency_ms, double, i), i < 5 ? 150 : 350));
  g_assert_true (CLOSE (s.latency_p50_ms, 150) && CLOSE (s.latency_p95_ms, 350) && CLOSE (s.latency_max_ms, 350));
  /* the answers fell behind: frames 0-1 (the first quarter) 150 ms, frames 8-9 (the last) 350 ms */
  g_assert_true (CLOSE (s.latency_first_ms, 150) && CLOSE (s.latency_last_ms, 350));
  g_assert_cmpuint (s.underruns, ==, 1);
  g_assert_true (CLOSE (s.max_gap_ms, 240));
  loadgen_call_stats_clear (&s);

  /* a threshold above the gap: no underrun; the longest gap is the same */
  loadgen_call_stats (c, 250, &s);
  g_assert_cmpuint (s.underruns, ==, 0);
  g_assert_true (CLOSE (s.max_gap_ms, 240));
  loadgen_call_stats_clear (&s);
  record_free (r);

  /* the answer stops after 17 pages: 8 whole frames answered of 10 */
  r = made_up_record (17);
  g_autoptr (LoadgenCall) short_call = call_of (1, r);
  loadgen_call_stats (short_call, 100, &s);
  g_assert_cmpuint (s.frames_sent, ==, 10);
  g_assert_cmpuint (s.frames_answered, ==, 8);
  g_assert_cmpuint (s.latency_ms->len, ==, 8);
  loadgen_call_stats_clear (&s);
  record_free (r);

  /* refused, or never started: nothing to measure */
  r = record_new (503);
  g_autoptr (LoadgenCall) refused = call_of (2, r);
  loadgen_call_stats (refused, 100, &s);
  g_assert_true (isnan (s.join_ms) && isnan (s.first_audio_ms) && isnan (s.latency_p50_ms));
  g_assert_cmpuint (s.frames_sent, ==, 0);
  g_assert_cmpuint (s.underruns, ==, 0);
  loadgen_call_stats_clear (&s);
  record_free (r);
  g_autoptr (LoadgenCall) never = loadgen_call_new (3, 0);
  loadgen_call_stats (never, 100, &s);
  g_assert_true (isnan (s.join_ms) && isnan (s.latency_max_ms) && s.latency_ms->len == 0);
  loadgen_call_stats_clear (&s);
}

static void
test_reason_classes (void)
{
  g_assert_cmpint (loadgen_reason_class ("ok"), ==, LOADGEN_END_OK);
  g_assert_cmpint (loadgen_reason_class ("http-503"), ==, LOADGEN_END_REFUSED);
  const char *failed[] = {"http-401", "http-400", "server-error", "closed-1011", "connection-lost", "connect-failed",
                          "handshake-timeout", "no-answer", "protocol-error", "unfinished", NULL};
  for (int i = 0; failed[i]; i++)
    g_assert_cmpint (loadgen_reason_class (failed[i]), ==, LOADGEN_END_FAILED);
  g_assert_cmpint (loadgen_reason_class (NULL), ==, LOADGEN_END_FAILED);
}

/* The reason read from a finished record, with the detail it keeps. */
static void
expect_reason (PpxChatRecord *r, const char *reason, const char *detail)
{
  g_autoptr (LoadgenCall) c = call_of (0, r);
  loadgen_call_classify (c, 19200);
  g_assert_cmpstr (c->reason, ==, reason);
  g_assert_cmpstr (c->detail, ==, detail);
  record_free (r);
}

static void
test_classify (void)
{
  PpxChatRecord *r = made_up_record (20);
  r->response_header = g_strdup ("s2");
  g_autoptr (LoadgenCall) ok = call_of (0, r);
  loadgen_call_classify (ok, 19200);
  g_assert_cmpstr (ok->reason, ==, "ok");
  g_assert_cmpstr (ok->server, ==, "s2");
  loadgen_call_set_end (ok, "connection-lost", NULL); /* the first end counts */
  g_assert_cmpstr (ok->reason, ==, "ok");
  record_free (r);

  r = record_new (503);
  r->failure = g_strdup ("Unexpected response status 503");
  expect_reason (r, "http-503", "Unexpected response status 503");
  expect_reason (record_new (401), "http-401", NULL);
  r = record_new (0);
  r->failure = g_strdup ("Could not connect: Connection refused");
  expect_reason (r, "connect-failed", "Could not connect: Connection refused");
  r = made_up_record (5);
  g_ptr_array_add (r->errors, g_strdup ("the server is shutting down"));
  expect_reason (r, "server-error", "the server is shutting down");
  r = made_up_record (5);
  r->close_code = 1006;
  expect_reason (r, "connection-lost", NULL);
  r = made_up_record (5);
  r->failure = g_strdup ("the answer: not an Ogg page");
  expect_reason (r, "protocol-error", "the answer: not an Ogg page");
  r = made_up_record (5);
  r->sent_samples = 9600; /* closed before all the audio was sent */
  r->close_code = 1011;
  r->close_reason = g_strdup ("internal error");
  expect_reason (r, "closed-1011", "internal error");
  r = made_up_record (20);
  r->failure = g_strdup ("Error sending data: Broken pipe"); /* after the server's close */
  expect_reason (r, "ok", "Error sending data: Broken pipe");
  r = made_up_record (20);
  r->close_code = 1001;
  expect_reason (r, "closed-1001", NULL);
  r = made_up_record (0);
  expect_reason (r, "no-answer", NULL);
  r = record_new (101); /* closed before the handshake */
  r->close_code = 1000;
  expect_reason (r, "closed-1000", NULL);

  g_autoptr (LoadgenCall) never = loadgen_call_new (1, 0);
  loadgen_call_classify (never, 19200);
  g_assert_cmpstr (never->reason, ==, "unfinished");
}

/* Three calls: one ok on s1, one refused with 503, one on s2 whose connection broke after 12 answer pages.
 * The records go to records[3] (freed by the caller after the report). */
static LoadgenReport *
made_up_report (PpxChatRecord **records)
{
  LoadgenReport *r = loadgen_report_new ();
  r->url = g_strdup ("ws://127.0.0.1:8080/api/chat");
  r->calls = 3;
  r->seconds = 0.8;
  r->wall_s = 4;
  r->start_us = us (0.5);
  r->cpu.user_s = 0.5;
  r->cpu.system_s = 0.1;
  r->started_utc = g_strdup ("2026-01-01T00:00:00Z");
  records[0] = made_up_record (20);
  records[0]->response_header = g_strdup ("s1");
  records[1] = record_new (503);
  records[1]->response_header = g_strdup ("s1"); /* refused by s1: not one of s1's calls */
  records[2] = made_up_record (12);
  records[2]->response_header = g_strdup ("s2");
  records[2]->close_code = 1006;
  for (guint i = 0; i < 3; i++) {
    LoadgenCall *c = call_of (i, records[i]);
    loadgen_call_classify (c, 19200);
    g_ptr_array_add (r->records, c);
  }
  LoadgenProcess p = {.pid = 1234, .name = "s1", .first = {1, 0.5}, .last = {3, 1.0}, .first_t = 0, .last_t = 4,
                      .seen = TRUE};
  g_array_append_val (r->processes, p);
  return r;
}

static JsonObject *
member_object (JsonObject *o, const char *name)
{
  g_assert_true (json_object_has_member (o, name));
  return json_object_get_object_member (o, name);
}

static void
test_report (void)
{
  PpxChatRecord *records[3];
  g_autoptr (LoadgenReport) r = made_up_report (records);
  guint ok, refused, failed;
  loadgen_report_counts (r, &ok, &refused, &failed);
  g_assert_true (ok == 1 && refused == 1 && failed == 1);
  g_assert_false (loadgen_report_passed (r)); /* nothing expected */
  r->expect_refused = 1;
  g_assert_false (loadgen_report_passed (r));
  r->expect_failed = 1;
  g_assert_true (loadgen_report_passed (r));

  g_autofree char *json = loadgen_report_to_json (r);
  g_autoptr (JsonParser) parser = json_parser_new ();
  g_assert_true (json_parser_load_from_data (parser, json, -1, NULL));
  JsonObject *root = json_node_get_object (json_parser_get_root (parser));
  JsonObject *result = member_object (root, "result");
  g_assert_true (json_object_get_boolean_member (result, "passed"));
  g_assert_cmpint (json_object_get_int_member (result, "refused"), ==, 1);
  JsonObject *reasons = member_object (root, "reasons");
  g_assert_cmpint (json_object_get_int_member (reasons, "ok"), ==, 1);
  g_assert_cmpint (json_object_get_int_member (reasons, "http-503"), ==, 1);
  g_assert_cmpint (json_object_get_int_member (reasons, "connection-lost"), ==, 1);
  JsonObject *servers = member_object (root, "servers");
  g_assert_cmpint (json_object_get_int_member (servers, "s1"), ==, 1);
  g_assert_cmpint (json_object_get_int_member (servers, "s2"), ==, 1);
  JsonObject *summary = member_object (root, "summary");
  JsonObject *join = member_object (summary, "join_ms");
  g_assert_cmpint (json_object_get_int_member (join, "n"), ==, 2); /* the refused call never joined */
  g_assert_true (CLOSE (json_object_get_double_member (join, "p50"), 500));
  /* all frames pooled: 10 of the ok call (5 x 150, 5 x 350) and 6 of the lost one (5 x 150, 1 x 350) */
  JsonObject *lat = member_object (summary, "frame_latency_ms");
  g_assert_cmpint (json_object_get_int_member (lat, "n"), ==, 16);
  g_assert_true (CLOSE (json_object_get_double_member (lat, "p50"), 150));
  g_assert_true (CLOSE (json_object_get_double_member (lat, "max"), 350));
  g_assert_cmpint (json_object_get_int_member (summary, "underruns_total"), ==, 2);
  JsonObject *cpu = member_object (root, "loadgen_cpu");
  g_assert_true (CLOSE (json_object_get_double_member (cpu, "cores"), 0.15));
  JsonArray *procs = json_object_get_array_member (root, "server_processes");
  JsonObject *proc_cpu = member_object (json_array_get_object_element (procs, 0), "cpu");
  g_assert_true (CLOSE (json_object_get_double_member (proc_cpu, "user_s"), 2));
  g_assert_true (CLOSE (json_object_get_double_member (proc_cpu, "cores"), 0.625));
  JsonArray *calls = json_object_get_array_member (root, "per_call");
  g_assert_cmpuint (json_array_get_length (calls), ==, 3);
  JsonObject *c0 = json_array_get_object_element (calls, 0);
  g_assert_cmpstr (json_object_get_string_member (c0, "reason"), ==, "ok");
  g_assert_true (CLOSE (json_object_get_double_member (c0, "latency_p50_ms"), 150));
  g_assert_true (CLOSE (json_object_get_double_member (c0, "latency_first_quarter_p50_ms"), 150));
  g_assert_true (CLOSE (json_object_get_double_member (c0, "latency_last_quarter_p50_ms"), 350));
  g_assert_cmpint (json_object_get_int_member (c0, "underruns"), ==, 1);
  JsonObject *c1 = json_array_get_object_element (calls, 1);
  g_assert_cmpint (json_object_get_int_member (c1, "http_status"), ==, 503);
  g_assert_true (json_object_get_null_member (c1, "join_ms"));
  JsonObject *c2 = json_array_get_object_element (calls, 2);
  g_assert_cmpstr (json_object_get_string_member (c2, "reason"), ==, "connection-lost");
  g_assert_true (CLOSE (json_object_get_double_member (c2, "connect_s"), 0.5));
  g_assert_true (CLOSE (json_object_get_double_member (c2, "end_s"), 2.0));
  g_assert_cmpint (json_object_get_int_member (c2, "text_pieces"), ==, 2);

  /* the table */
  char *text = NULL;
  size_t len = 0;
  FILE *out = open_memstream (&text, &len);
  loadgen_report_print (r, out);
  fclose (out);
  g_assert_nonnull (strstr (text, "outcomes: ok 1, http-503 1, connection-lost 1 (ok 1, refused 1, failed 1)"));
  g_assert_nonnull (strstr (text, "calls per server: s1 1, s2 1"));
  g_assert_true (g_regex_match_simple ("^join time, connect to handshake \\(ms\\) +2 +500\\.0 +500\\.0 +500\\.0 "
                                       "+500\\.0$", text, G_REGEX_MULTILINE, 0));
  g_assert_true (g_regex_match_simple ("^underruns per call \\(gaps > threshold\\) +2 +1 +1 +1 +1$", text,
                                       G_REGEX_MULTILINE, 0));
  /* the lost call's 6 frames make quarters of one frame: no growth figure */
  g_assert_true (g_regex_match_simple ("^latency growth: last quarter - first \\(ms\\) +1 +200\\.0 +200\\.0 +200\\.0 "
                                       "+200\\.0$", text, G_REGEX_MULTILINE, 0));
  g_assert_nonnull (strstr (text, "s1 pid 1234 CPU: 2.00 s user + 0.50 s system in 4.0 s"));
  g_assert_nonnull (strstr (text, "result: PASS"));
  free (text);

  g_autofree char *dir = g_dir_make_tmp ("loadgen-XXXXXX", NULL);
  g_autofree char *path = g_build_filename (dir, "r.json", NULL);
  g_autoptr (GError) error = NULL;
  g_assert_true (loadgen_report_write_json (r, path, &error));
  g_autofree char *bad = g_build_filename (dir, "no", "such", "r.json", NULL);
  g_assert_false (loadgen_report_write_json (r, bad, &error));
  g_assert_nonnull (strstr (error->message, bad));
  g_remove (path);
  g_rmdir (dir);
  g_clear_pointer (&r, loadgen_report_free);
  for (guint i = 0; i < 3; i++)
    record_free (records[i]);
}

/* Parses a command line given as one string (split at spaces; '~' stands for a space inside a value). */
static gboolean
parse (LoadgenOptions *o, const char *line, GError **error)
{
  g_auto (GStrv) words = g_strsplit (line, " ", -1);
  int argc = (int) g_strv_length (words) + 1;
  char **argv = g_new0 (char *, argc + 1);
  argv[0] = g_strdup ("personaplex-loadgen");
  for (int i = 1; i < argc; i++)
    argv[i] = g_strdelimit (g_strdup (words[i - 1]), "~", ' ');
  char **keep = g_memdup2 (argv, sizeof (char *) * (argc + 1));
  gboolean ok = loadgen_options_parse (o, &argc, &argv, error);
  g_strfreev (keep);
  g_free (argv);
  return ok;
}

static void
expect_error (const char *line, const char *needle)
{
  LoadgenOptions o;
  g_autoptr (GError) error = NULL;
  gboolean ok = parse (&o, line, &error);
  if (ok || !strstr (error->message, needle))
    g_error ("'%s': expected an error naming '%s', got %s", line, needle, ok ? "success" : error->message);
  loadgen_options_clear (&o);
}

static void
test_options (void)
{
  LoadgenOptions o;
  g_autoptr (GError) error = NULL;
  g_unsetenv (LOADGEN_TOKEN_ENV);
  g_assert_true (parse (&o, "--url ws://127.0.0.1:8080", &error));
  g_assert_cmpstr (o.url, ==, "ws://127.0.0.1:8080/api/chat");
  g_assert_true (o.calls == 1 && CLOSE (o.seconds, 10) && CLOSE (o.ramp_s, 0) && CLOSE (o.gap_ms, 100));
  g_assert_false (o.tls);
  g_assert_null (o.auth_token);
  g_assert_cmpstr (o.server_header, ==, "X-Served-By");
  g_autofree char *url0 = loadgen_options_call_url (&o, 0);
  g_assert_cmpstr (url0, ==, "ws://127.0.0.1:8080/api/chat");
  loadgen_options_clear (&o);

  g_setenv (LOADGEN_TOKEN_ENV, "from-env", TRUE);
  g_assert_true (parse (&o, "--url wss://example.test:9/x?a=1 --calls 64 --seconds 300 --ramp 30 --insecure "
                        "--text-prompt You~are~\"nice\"~&~café --voice-prompt NATF2.pt --seed 7 "
                        "--param text_temperature=0.7 --param audio_topk=250 --expect-refused 1 "
                        "--expect-failed 2 --server-pid 42 --server-pid s2=43 --gap-ms 120 "
                        "--origin https://voice.example.com", &error));
  g_assert_cmpstr (o.origin, ==, "https://voice.example.com");
  g_assert_true (o.tls && o.insecure && o.calls == 64 && CLOSE (o.seconds, 300) && CLOSE (o.ramp_s, 30));
  g_assert_cmpstr (o.url, ==, "wss://example.test:9/x?a=1");
  g_assert_cmpstr (o.auth_token, ==, "from-env");
  g_assert_cmpuint (o.server_pids->len, ==, 2);
  g_assert_cmpint (g_array_index (o.server_pids, int, 1), ==, 43);
  g_assert_cmpstr (g_ptr_array_index (o.server_names, 0), ==, "");
  g_assert_cmpstr (g_ptr_array_index (o.server_names, 1), ==, "s2");
  g_assert_true (o.expect_refused == 1 && o.expect_failed == 2 && CLOSE (o.gap_ms, 120));
  g_autofree char *url5 = loadgen_options_call_url (&o, 5);
  g_assert_cmpstr (url5, ==, "wss://example.test:9/x?a=1&text_prompt=You%20are%20%22nice%22%20%26%20caf%C3%A9"
                   "&voice_prompt=NATF2.pt&seed=12&text_temperature=0.7&audio_topk=250");
  loadgen_options_clear (&o);
  g_assert_true (parse (&o, "--url ws://h:1 --auth-token given", &error));
  g_assert_cmpstr (o.auth_token, ==, "given"); /* the option wins over the environment */
  loadgen_options_clear (&o);
  g_unsetenv (LOADGEN_TOKEN_ENV);

  expect_error ("--calls 2", "--url is required");
  expect_error ("--url http://127.0.0.1:8080", "--url");
  expect_error ("--url ws://", "--url");
  expect_error ("--url ws://user@h:1", "--url");
  expect_error ("--url ws://h:1 --calls 0", "--calls 0");
  expect_error ("--url ws://h:1 --calls 10001", "--calls");
  expect_error ("--url ws://h:1 --seconds 0", "--seconds");
  expect_error ("--url ws://h:1 --seconds nan", "--seconds");
  expect_error ("--url ws://h:1 --ramp -1", "--ramp");
  expect_error ("--url ws://h:1 --calls 2 --expect-refused 3", "--expect-refused 3");
  expect_error ("--url ws://h:1 --calls 2 --expect-refused 1 --expect-failed 2", "--expect-failed 2");
  expect_error ("--url ws://h:1 --input /no/such.wav", "/no/such.wav");
  expect_error ("--url ws://h:1 --insecure", "--insecure");
  expect_error ("--url ws://h:1 --param novalue", "--param 'novalue'");
  expect_error ("--url ws://h:1 --server-pid x", "--server-pid");
  expect_error ("--url ws://h:1 --clock-ppm 5,x", "--clock-ppm '5,x'");
  expect_error ("--url ws://h:1 --clock-ppm 200000", "--clock-ppm");
  expect_error ("--url ws://h:1 --clock-ppm 1,,2", "--clock-ppm");
  g_assert_true (parse (&o, "--url ws://h:1 --calls 4 --clock-ppm 0,2000,-2000", &error));
  g_assert_true (loadgen_options_call_ppm (&o, 0) == 0 && loadgen_options_call_ppm (&o, 1) == 2000 &&
                 loadgen_options_call_ppm (&o, 2) == -2000 && loadgen_options_call_ppm (&o, 3) == 0);
  loadgen_options_clear (&o);
  g_assert_true (parse (&o, "--url ws://h:1", &error));
  g_assert_true (loadgen_options_call_ppm (&o, 7) == 0);
  loadgen_options_clear (&o);
  expect_error ("--url ws://h:1 --server-pid =5", "--server-pid");
  expect_error ("--url ws://h:1 --server-pid s1=0", "--server-pid");
  expect_error ("--url ws://h:1 --auth-token a~b", "--auth-token");
  expect_error ("--url ws://h:1 --gap-ms 0", "--gap-ms");
  expect_error ("--url ws://h:1 --origin ftp://x", "--origin");
  expect_error ("--url ws://h:1 --origin nonsense", "--origin");
  expect_error ("--url ws://h:1 stray", "stray");
  expect_error ("--url ws://h:1 --no-such-option", "no-such-option");
  expect_error ("--url ws://h:1 --max-missed-ms nan", "--max-missed-ms");
  expect_error ("--url ws://h:1 --health http://h:2/health", "--health");
  expect_error ("--url ws://h:1 --health s1=ws://h:2/health", "--health");
  expect_error ("--url ws://h:1 --health =http://h:2/health", "--health");

  /* the verdict's --max-missed-ms (default: no limit), --report, and --playout-trace (no --url needed) */
  g_assert_true (parse (&o, "--url ws://h:1", &error));
  g_assert_true (o.max_missed_ms < 0 && !o.report_path && !o.playout_trace);
  loadgen_options_clear (&o);
  g_assert_true (parse (&o, "--url ws://h:1 --max-missed-ms 40 --report r.html "
                        "--health s1=http://127.0.0.1:8090/health --health s2=https://h:2/health", &error));
  g_assert_true (CLOSE (o.max_missed_ms, 40));
  g_assert_cmpuint (g_strv_length (o.health), ==, 2);
  g_assert_cmpstr (o.report_path, ==, "r.html");
  loadgen_options_clear (&o);
  g_assert_true (parse (&o, "--playout-trace t.txt", &error));
  g_assert_cmpstr (o.playout_trace, ==, "t.txt");
  loadgen_options_clear (&o);
}

/* The reference player's rules, step by step (the agreement with the worklet itself is test playout-reference). */
static void
test_player (void)
{
  LoadgenPlayer p;
  loadgen_player_init (&p);
  /* 40 ms queued: not started; silence before any sound is not missed audio */
  g_assert_cmpint (loadgen_player_push (&p, 1920), ==, 0);
  g_assert_false (p.started);
  g_assert_cmpint (loadgen_player_render (&p), ==, 0);
  g_assert_cmpint (p.total_played, ==, 0);
  /* 80 ms: it starts, waits 10 ms (4 quanta: 480 samples counted down by 128), then plays */
  loadgen_player_push (&p, 1920);
  g_assert_true (p.started);
  for (int q = 0; q < 4; q++)
    g_assert_cmpint (loadgen_player_render (&p), ==, 0);
  for (int q = 0; q < 30; q++)
    g_assert_cmpint (loadgen_player_render (&p), ==, 128);
  /* dry at a quantum's end: silence counted as missed, but no re-buffer (the worklet's quirk) */
  g_assert_cmpint (loadgen_player_render (&p), ==, 0);
  g_assert_cmpint (p.total_played - p.actual_played, ==, 128);
  g_assert_cmpuint (p.rebuffers, ==, 0);
  g_assert_true (p.started);
  /* still started: the next chunk plays at once */
  loadgen_player_push (&p, 1920);
  g_assert_cmpint (loadgen_player_render (&p), ==, 128);
  /* three more chunks at once: the second brings 5632 samples (100 ms or more), the oldest go down to 90 ms and the
   * cap grows by 5 ms; the third goes over the new cap (105 ms) and drops a whole chunk's worth */
  g_assert_cmpint (loadgen_player_push (&p, 1920), ==, 0);
  g_assert_cmpint (loadgen_player_push (&p, 1920), ==, 1792 + 3840 - 4320);
  g_assert_cmpint (p.max_buffer, ==, 720);
  g_assert_cmpint (loadgen_player_push (&p, 1920), ==, 1920);
  g_assert_cmpint (p.queued, ==, 4320);
  g_assert_cmpint (p.max_buffer, ==, 960);
  g_assert_cmpint (p.dropped, ==, 1312 + 1920);
  /* run out part way: a re-buffer, a longer partial wait, and it waits for 80 ms again */
  for (int q = 0; q < 33; q++)
    g_assert_cmpint (loadgen_player_render (&p), ==, 128);
  g_assert_cmpint (loadgen_player_render (&p), ==, 4320 - 33 * 128);
  g_assert_cmpuint (p.rebuffers, ==, 1);
  g_assert_false (p.started);
  g_assert_cmpint (p.partial, ==, 720);
  loadgen_player_push (&p, 1920);
  g_assert_false (p.started);
  g_assert_cmpint (loadgen_player_render (&p), ==, 0);
  loadgen_player_clear (&p);
}

static char *
write_temp (const char *dir, const char *name, const char *contents)
{
  char *path = g_build_filename (dir, name, NULL);
  g_assert_true (g_file_set_contents (path, contents, -1, NULL));
  return path;
}

static void
expect_trace_error (const char *dir, const char *contents, const char *needle)
{
  g_autofree char *path = write_temp (dir, "bad.trace", contents);
  g_autoptr (GError) error = NULL;
  g_autoptr (GArray) chunks = loadgen_playout_read_trace (path, &error);
  g_assert_null (chunks);
  if (!strstr (error->message, needle))
    g_error ("'%s': expected an error naming '%s', got '%s'", contents, needle, error->message);
  g_remove (path);
}

/* --playout-trace's file, the replay's rules and its JSON */
static void
test_playout_trace (void)
{
  g_autofree char *dir = g_dir_make_tmp ("loadgen-XXXXXX", NULL);
  /* 20 pages of 40 ms, one every 40 ms, a late one (the 15th, 30 ms late), comments, tabs, blank lines */
  GString *t = g_string_new ("# arrival samples\n\n");
  for (int j = 0; j < 20; j++)
    g_string_append_printf (t, "%d\t1920\n", (j < 10 ? 690 : 890) + 40 * j + (j == 14 ? 30 : 0));
  g_autofree char *path = write_temp (dir, "ok.trace", t->str);
  g_string_free (t, TRUE);
  g_autoptr (GError) error = NULL;
  g_autoptr (GArray) chunks = loadgen_playout_read_trace (path, &error);
  g_assert_no_error (error);
  g_assert_cmpuint (chunks->len, ==, 20);
  LoadgenPlayout p;
  g_autoptr (GArray) seconds = g_array_new (FALSE, TRUE, sizeof (LoadgenPlayoutSecond));
  loadgen_playout_replay ((const LoadgenChunk *) (void *) chunks->data, chunks->len, 0, seconds, &p);
  /* the figures of the reference worklet under node on the same trace */
  g_assert_true (CLOSE_MS (p.played_ms, 730.667) && CLOSE_MS (p.missed_ms, 178.667));
  g_assert_true (p.dropped_ms == 0 && p.rebuffers == 0);
  g_assert_cmpuint (p.quanta, ==, 1650 * 48 / 128 + 1); /* the last quantum starts at or before 1650 ms */
  /* by second: the silence after 1050 ms, all in the second second */
  g_assert_cmpuint (seconds->len, ==, 2);
  g_assert_true (CLOSE_MS (g_array_index (seconds, LoadgenPlayoutSecond, 1).missed_ms, p.missed_ms));
  g_autofree char *json = loadgen_playout_to_json (&p);
  g_assert_cmpstr (json, ==,
                   "{\"played_ms\": 730.667, \"missed_ms\": 178.667, \"dropped_ms\": 0.000, \"rebuffers\": 0}");
  g_remove (path);
  /* nothing to play: all 0 */
  loadgen_playout_replay (NULL, 0, 0, NULL, &p);
  g_assert_true (p.played_ms == 0 && p.missed_ms == 0 && p.quanta == 0);

  expect_trace_error (dir, "10 1920\n5 1920\n", "line 2: arrival 5 ms is before");
  expect_trace_error (dir, "10\n", "line 1: '10'");
  expect_trace_error (dir, "10 1920 3\n", "line 1");
  expect_trace_error (dir, "x 1920\n", "line 1");
  expect_trace_error (dir, "10 -5\n", "line 1");
  expect_trace_error (dir, "10 1.5\n", "line 1");
  expect_trace_error (dir, "nan 5\n", "line 1");
  g_autoptr (GArray) none = loadgen_playout_read_trace ("/no/such.trace", &error);
  g_assert_null (none);
  g_assert_nonnull (strstr (error->message, "/no/such.trace"));
  g_rmdir (dir);
}

/* A call's decoded chunks from its record, and its playout: made_up_record's pages of 40 ms come one a 40 ms,
 * then 240 ms apart once (the worklet's figures on this trace, under node: 760 ms played, 149.333 missed). */
static void
test_call_playout (void)
{
  PpxChatRecord *r = made_up_record (20);
  g_autoptr (LoadgenCall) c = call_of (0, r);
  g_autoptr (GArray) chunks = loadgen_call_chunks (r, r->start_us);
  g_assert_cmpuint (chunks->len, ==, 20);
  g_assert_true (CLOSE_MS (g_array_index (chunks, LoadgenChunk, 0).arrival_ms, 690));
  g_assert_true (CLOSE_MS (g_array_index (chunks, LoadgenChunk, 10).arrival_ms, 1290));
  g_assert_cmpint (g_array_index (chunks, LoadgenChunk, 19).samples, ==, LOADGEN_PLAYOUT_CHUNK);
  LoadgenCallStats s;
  loadgen_call_stats (c, 100, &s);
  g_assert_true (s.has_playout);
  g_assert_true (CLOSE_MS (s.playout.played_ms, 760) && CLOSE_MS (s.playout.missed_ms, 149.333));
  g_assert_true (s.playout.dropped_ms == 0 && s.playout.rebuffers == 0);
  loadgen_call_stats_clear (&s);
  /* with a pre-skip of 312 (48 kHz), a granule position of 1920 * k completes k chunks: the chat client keeps
   * (granule - pre-skip) / 2 answer samples */
  r->answer_pre_skip = 312;
  for (guint e = 0; e < r->events->len; e++) {
    PpxChatEvent *ev = &g_array_index (r->events, PpxChatEvent, e);
    if (ev->kind == PPX_CHAT_AUDIO && ev->samples > 0)
      ev->samples = (2 * ev->samples - 312) / 2;
  }
  g_autoptr (GArray) again = loadgen_call_chunks (r, r->start_us);
  g_assert_cmpuint (again->len, ==, 20);
  g_assert_true (CLOSE_MS (g_array_index (again, LoadgenChunk, 19).arrival_ms, 1650));
  record_free (r);

  /* no answer: no playout */
  r = record_new (503);
  g_autoptr (LoadgenCall) refused = call_of (1, r);
  loadgen_call_stats (refused, 100, &s);
  g_assert_false (s.has_playout);
  loadgen_call_stats_clear (&s);
  record_free (r);
}

/* --clock-ppm: a client whose clock runs 2 % slow sends 2 % less audio a second, so the server's answer pages come
 * every 40 ms / 0.98 of the loadgen's clock; its player, on the same clock, takes them as they come (nothing missed
 * after its start), where a player on the loadgen's clock runs dry 2 % of the time */
static void
test_clock_playout (void)
{
  PpxChatRecord *r = record_new (101);
  r->handshake_us = us (1.0);
  add_event (r, 1.0, PPX_CHAT_HANDSHAKE, 0, NULL);
  for (guint j = 0; j < 250; j++)
    add_event (r, 1.2 + 0.04 * j / 0.98, PPX_CHAT_AUDIO, 960 * (j + 1), NULL);
  r->close_code = 1000;
  r->end_us = us (12);
  g_autoptr (LoadgenCall) c = call_of (0, r);
  LoadgenPlayout same, own;
  g_assert_true (loadgen_call_playout (c, r->start_us, NULL, &same));
  c->clock_ppm = -20000;
  g_assert_true (loadgen_call_playout (c, r->start_us, NULL, &own));
  g_test_message ("missed %.1f ms on the loadgen's clock, %.1f ms on the client's", same.missed_ms, own.missed_ms);
  g_assert_cmpfloat (same.missed_ms, >, 100);
  g_assert_cmpfloat (own.missed_ms, <, 20);
  g_assert_cmpuint (own.rebuffers, ==, 0);
  record_free (r);
}

static char *
print_report (const LoadgenReport *r)
{
  char *text = NULL;
  size_t len = 0;
  FILE *out = open_memstream (&text, &len);
  loadgen_report_print (r, out);
  fclose (out);
  return text;
}

/* --max-missed-ms: the ok call and the lost one (12 pages: the gap after the 10th is in it) both missed 149.3 ms
 * at the reference player */
static void
test_missed_rule (void)
{
  PpxChatRecord *records[3];
  g_autoptr (LoadgenReport) r = made_up_report (records);
  r->expect_refused = r->expect_failed = 1;
  g_assert_true (loadgen_report_passed (r));
  g_assert_null (loadgen_report_missed_rule (r)); /* no limit */
  r->max_missed_ms = 150;
  g_assert_true (loadgen_report_passed (r));
  g_autofree char *pass = print_report (r);
  g_assert_nonnull (strstr (pass, "result: PASS (expected 1 refused and 1 failed; got 1 and 1)\n"));
  g_assert_true (g_regex_match_simple ("^missed audio at the reference player \\(ms\\) +2 +149\\.3 +149\\.3 +149\\.3 "
                                       "+149\\.3$", pass, G_REGEX_MULTILINE, 0));
  g_assert_true (g_regex_match_simple ("^  s1: 1 calls, .* ms; underruns 1 in all \\(at most 1 a call\\); reference "
                                       "player: missed p50 149\\.3 p99 149\\.3 max 149\\.3 ms a call, dropped 0\\.0 "
                                       "ms and 0 re-buffers in all$", pass, G_REGEX_MULTILINE, 0));
  r->max_missed_ms = 100;
  g_assert_false (loadgen_report_passed (r));
  g_autofree char *why = loadgen_report_missed_rule (r);
  g_assert_cmpstr (why, ==, "2 call(s) missed more than 100.0 ms of audio at the reference player (the most: call 0, "
                   "149.3 ms)");
  g_autofree char *fail = print_report (r);
  g_assert_nonnull (strstr (fail, "result: FAIL (expected 1 refused and 1 failed; got 1 and 1); rules broken: "
                                  "max-missed-ms: 2 call(s) missed"));
  r->expect_failed = 0;
  g_autofree char *both = print_report (r);
  g_assert_nonnull (strstr (both, "result: FAIL (expected 1 refused and 0 failed; got 1 and 1); rules broken: "
                                  "max-missed-ms: "));

  g_autofree char *json = loadgen_report_to_json (r);
  g_autoptr (JsonParser) parser = json_parser_new ();
  g_assert_true (json_parser_load_from_data (parser, json, -1, NULL));
  JsonObject *root = json_node_get_object (json_parser_get_root (parser));
  JsonObject *result = member_object (root, "result");
  g_assert_false (json_object_get_boolean_member (result, "passed"));
  g_assert_true (CLOSE (json_object_get_double_member (result, "max_missed_ms"), 100));
  g_assert_true (g_str_has_prefix (json_object_get_string_member (result, "rules_broken"), "max-missed-ms: 2 call(s)"));
  JsonArray *calls = json_object_get_array_member (root, "per_call");
  JsonObject *p0 = member_object (json_array_get_object_element (calls, 0), "playout");
  g_assert_true (CLOSE_MS (json_object_get_double_member (p0, "missed_ms"), 149.333));
  g_assert_true (CLOSE_MS (json_object_get_double_member (p0, "played_ms"), 760));
  g_assert_cmpint (json_object_get_int_member (p0, "rebuffers"), ==, 0);
  g_assert_true (CLOSE (json_object_get_double_member (p0, "dropped_ms"), 0));
  g_assert_true (json_object_get_null_member (json_array_get_object_element (calls, 1), "playout"));
  JsonObject *summary = member_object (root, "summary");
  g_assert_cmpint (json_object_get_int_member (member_object (summary, "playout_missed_ms"), "n"), ==, 2);
  g_assert_true (CLOSE_MS (json_object_get_double_member (summary, "playout_missed_ms_total"), 298.667));
  JsonObject *s1 = member_object (member_object (root, "per_server"), "s1");
  g_assert_true (CLOSE_MS (json_object_get_double_member (member_object (s1, "playout_missed_ms"), "max"), 149.333));
  g_clear_pointer (&r, loadgen_report_free);
  for (guint i = 0; i < 3; i++)
    record_free (records[i]);
}

/* --report: one page, its charts well-formed XML (python3's parser where there is one), nothing fetched */
static void
test_html (void)
{
  PpxChatRecord *records[3];
  g_autoptr (LoadgenReport) r = made_up_report (records);
  LoadgenHealth *h = loadgen_health_new ("s1", "http://127.0.0.1:8090/health");
  double t = 1, v = 12.5;
  g_array_append_val (h->t_s, t);
  g_array_append_val (h->tick_p99_ms, v);
  t = 2;
  v = 14;
  g_array_append_val (h->t_s, t);
  g_array_append_val (h->tick_p99_ms, v);
  g_ptr_array_add (r->health, h);
  g_free (r->url);
  r->url = g_strdup ("ws://127.0.0.1:8080/api/chat?x=<&>");
  g_autofree char *dir = g_dir_make_tmp ("loadgen-XXXXXX", NULL);
  g_autofree char *path = g_build_filename (dir, "r.html", NULL);
  g_autoptr (GError) error = NULL;
  g_assert_true (loadgen_report_write_html (r, path, &error));
  g_autofree char *html = NULL;
  g_assert_true (g_file_get_contents (path, &html, NULL, NULL));
  g_assert_true (g_str_has_prefix (html, "<!DOCTYPE html>"));
  g_assert_true (g_str_has_suffix (html, "</html>\n"));
  guint svgs = 0;
  for (const char *p = html; (p = strstr (p, "<svg ")); p++)
    svgs++;
  g_assert_cmpuint (svgs, ==, 4);
  g_assert_nonnull (strstr (html, "frame latency p99"));
  g_assert_nonnull (strstr (html, "298.7 ms missed"));
  g_assert_nonnull (strstr (html, "x=&lt;&amp;&gt;"));
  /* no fetches: no URL of the web (the health URL is not shown), no script, style sheet, image or font */
  const char *never[] = {"http:", "https:", "<script", "<link", "<img", "src=", "href=", "url(", "@import", NULL};
  for (int i = 0; never[i]; i++)
    if (strstr (html, never[i]))
      g_error ("the report has '%s'", never[i]);
  g_autofree char *python = g_find_program_in_path ("python3");
  if (python) {
    const char *check = "import re, sys, xml.etree.ElementTree as ET\n"
                        "html = open(sys.argv[1]).read()\n"
                        "svgs = re.findall(r'<svg .*?</svg>', html, re.S)\n"
                        "assert len(svgs) == 4, len(svgs)\n"
                        "for s in svgs:\n"
                        "  root = ET.fromstring(s)\n"
                        "  assert root.tag == 'svg' and root.findall('.//text'), s[:80]\n"
                        "print(sum(len(ET.fromstring(s).findall('.//polyline')) for s in svgs))\n";
    const char *argv[] = {python, "-c", check, path, NULL};
    g_autofree char *out = NULL, *err = NULL;
    int status;
    g_assert_true (g_spawn_sync (NULL, (char **) argv, NULL, G_SPAWN_DEFAULT, NULL, NULL, &out, &err, &status, NULL));
    if (!g_spawn_check_wait_status (status, NULL))
      g_error ("python3's XML parser on the report's SVG: %s", err);
    g_assert_cmpint (atoi (out), >=, 7); /* 2 latency, 2 playout, 2 calls, 1 tick line */
  }
  g_autofree char *bad = g_build_filename (dir, "no", "such", "r.html", NULL);
  g_assert_false (loadgen_report_write_html (r, bad, &error));
  g_remove (path);
  g_rmdir (dir);
  g_clear_pointer (&r, loadgen_report_free);
  for (guint i = 0; i < 3; i++)
    record_free (records[i]);
}

static void
on_health (SoupServer *server, SoupServerMessage *msg, const char *path, GHashTable *query, gpointer user_data)
{
  guint *served = user_data;
  (*served)++;
  const char *body = "{\"sessions\": 2, \"tick_ms_p99\": 61.5, \"overruns\": 0}";
  soup_server_message_set_status (msg, SOUP_STATUS_OK, NULL);
  soup_server_message_set_response (msg, "application/json", SOUP_MEMORY_STATIC, body, strlen (body));
}

/* --health: a /health body's tick p99, and the poller against a server on 127.0.0.1 and a port with none */
static void
test_health (void)
{
  const char *good = "{\"tick_ms_p99\": 83.25, \"sessions\": 1}";
  g_assert_true (CLOSE (loadgen_health_tick_p99 (good, strlen (good)), 83.25));
  const char *bad[] = {"{}", "[1]", "not json", "{\"tick_ms_p99\": \"x\"}", "{\"tick_ms_p99\": -1}", NULL};
  for (int i = 0; bad[i]; i++)
    g_assert_true (isnan (loadgen_health_tick_p99 (bad[i], strlen (bad[i]))));
  g_assert_true (isnan (loadgen_health_tick_p99 (NULL, 0)));

  guint served = 0;
  g_autoptr (SoupServer) server = soup_server_new (NULL, NULL);
  soup_server_add_handler (server, "/health", on_health, &served, NULL);
  g_autoptr (GError) error = NULL;
  g_assert_true (soup_server_listen_local (server, 0, SOUP_SERVER_LISTEN_IPV4_ONLY, &error));
  GSList *uris = soup_server_get_uris (server);
  g_autofree char *base = g_uri_to_string (uris->data);
  g_slist_free_full (uris, (GDestroyNotify) g_uri_unref);
  /* a port nobody listens on: a listener made and closed */
  g_autoptr (GSocketListener) gone = g_socket_listener_new ();
  guint16 port = g_socket_listener_add_any_inet_port (gone, NULL, &error);
  g_socket_listener_close (gone);
  g_autofree char *t0 = g_strdup_printf ("s1=%shealth", base);
  g_autofree char *t1 = g_strdup_printf ("s2=http://127.0.0.1:%u/health", port);
  char *targets[] = {t0, t1, NULL};
  g_autoptr (LoadgenReport) r = loadgen_report_new ();
  r->start_us = g_get_monotonic_time ();
  g_assert_null (loadgen_poller_start (r, NULL, 100));
  LoadgenPoller *p = loadgen_poller_start (r, targets, 100);
  g_assert_cmpuint (r->health->len, ==, 2);
  const LoadgenHealth *s1 = g_ptr_array_index (r->health, 0), *s2 = g_ptr_array_index (r->health, 1);
  g_assert_cmpstr (s1->name, ==, "s1");
  gint64 deadline = g_get_monotonic_time () + 20 * G_USEC_PER_SEC;
  while ((s1->tick_p99_ms->len < 3 || s2->failures < 1) && g_get_monotonic_time () < deadline)
    g_main_context_iteration (NULL, TRUE);
  loadgen_poller_stop (p);
  g_assert_cmpuint (s1->tick_p99_ms->len, >=, 3);
  g_assert_true (CLOSE (g_array_index (s1->tick_p99_ms, double, 0), 61.5));
  g_assert_cmpfloat (g_array_index (s1->t_s, double, 0), >=, 0);
  g_assert_cmpuint (s1->failures, ==, 0);
  g_assert_cmpuint (s2->failures, >=, 1);
  g_assert_cmpuint (s2->tick_p99_ms->len, ==, 0);
  g_assert_cmpuint (served, >=, 3);
  soup_server_disconnect (server);
  while (g_main_context_iteration (NULL, FALSE))
    ;
}


/* The verdict's quality rules (issue 27): a run with the expected outcomes still FAILs when a call that ended ok
 * lost audio at the server (frames sent, never answered), or when the frame latency p99 exceeds --max-latency-ms;
 * the summary names the rule. */
static void
test_verdict_rules (void)
{
  PpxChatRecord *records[3];
  g_autoptr (LoadgenReport) r = made_up_report (records);
  r->expect_refused = r->expect_failed = 1;
  g_assert_true (loadgen_report_passed (r));
  g_assert_null (loadgen_report_broken_rules (r));

  /* latency: the pooled frames' p99 is 350 ms */
  r->max_latency_ms = 300;
  g_assert_false (loadgen_report_passed (r));
  g_autofree char *lat = loadgen_report_broken_rules (r);
  g_assert_nonnull (lat);
  g_assert_nonnull (strstr (lat, "latency: frame latency p99 350 ms > --max-latency-ms 300"));
  g_assert_null (strstr (lat, "dropped"));
  r->max_latency_ms = 1000;
  g_assert_true (loadgen_report_passed (r));

  /* dropped: the ok call answered 16 of its 20 pages (its last 2 frames never answered) */
  LoadgenCall *ok = g_ptr_array_index (r->records, 0);
  PpxChatRecord *whole = records[0];
  records[0] = made_up_record (16);
  records[0]->response_header = g_strdup ("s1");
  ok->record = records[0];
  loadgen_call_classify (ok, 19200);
  g_assert_cmpstr (ok->reason, ==, "ok");
  g_assert_false (loadgen_report_passed (r));
  g_autofree char *dropped = loadgen_report_broken_rules (r);
  g_assert_nonnull (strstr (dropped, "dropped: 1 call(s) lost audio at the server (2 input frame(s), 0.2 s"));
  /* the summary says which */
  char *text = NULL;
  size_t len = 0;
  FILE *out = open_memstream (&text, &len);
  loadgen_report_print (r, out);
  fclose (out);
  g_assert_nonnull (strstr (text, "result: FAIL (expected 1 refused and 1 failed; got 1 and 1); rules broken: "
                                  "dropped: 1 call(s)"));
  free (text);
  /* the lost call (connection-lost, expected) is not held against the rule: only calls that ended ok are */
  loadgen_report_free (g_steal_pointer (&r));
  record_free (whole);
  for (guint i = 0; i < 3; i++)
    record_free (records[i]);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/loadgen/percentiles", test_percentiles);
  g_test_add_func ("/loadgen/call-stats", test_call_stats);
  g_test_add_func ("/loadgen/reason-classes", test_reason_classes);
  g_test_add_func ("/loadgen/classify", test_classify);
  g_test_add_func ("/loadgen/report", test_report);
  g_test_add_func ("/loadgen/verdict-rules", test_verdict_rules);
  g_test_add_func ("/loadgen/options", test_options);
  g_test_add_func ("/loadgen/player", test_player);
  g_test_add_func ("/loadgen/playout-trace", test_playout_trace);
  g_test_add_func ("/loadgen/call-playout", test_call_playout);
  g_test_add_func ("/loadgen/clock-playout", test_clock_playout);
  g_test_add_func ("/loadgen/missed-rule", test_missed_rule);
  g_test_add_func ("/loadgen/html", test_html);
  g_test_add_func ("/loadgen/health", test_health);
  return g_test_run ();
}
