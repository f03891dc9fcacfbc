/* personaplex-loadgen: how calls ended, per-call figures (join time, frame latency, gaps) and percentiles. */
#include "loadgen-stats.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tool-stats.h"

LoadgenCall *
loadgen_call_new (guint index, double scheduled_s)
{
  LoadgenCall *c = g_new0 (LoadgenCall, 1);
  c->index = index;
  c->scheduled_s = scheduled_s;
  return c;
}

void
loadgen_call_free (LoadgenCall *c)
{
  if (!c)
    return;
  g_free (c->reason);
  g_free (c->detail);
  g_free (c->server);
  g_free (c);
}

void
loadgen_call_set_end (LoadgenCall *c, const char *reason, const char *detail)
{
  if (c->reason)
    return;
  c->reason = g_strdup (reason);
  c->detail = g_strdup (detail);
}

void
loadgen_call_classify (LoadgenCall *c, gint64 input_samples)
{
  const PpxChatRecord *r = c->record;
  if (!r) {
    loadgen_call_set_end (c, "unfinished", "never started");
    return;
  }
  if (!c->server && r->response_header && *r->response_header)
    c->server = g_strdup (r->response_header);
  if (r->http_status == 0) {
    loadgen_call_set_end (c, "connect-failed", r->failure);
  } else if (r->http_status != 101) {
    g_autofree char *reason = g_strdup_printf ("http-%u", r->http_status);
    loadgen_call_set_end (c, reason, r->failure);
  } else if (r->errors->len > 0) {
    loadgen_call_set_end (c, "server-error", g_ptr_array_index (r->errors, 0));
  } else if (r->failure && g_str_has_prefix (r->failure, "the answer")) {
    /* the chat client's word for an answer that is not an Ogg stream */
    loadgen_call_set_end (c, "protocol-error", r->failure);
  } else if (r->close_code == 1006 || r->close_code < 0) {
    loadgen_call_set_end (c, "connection-lost", r->failure);
  } else if (r->sent_samples < input_samples || !r->handshake_us) {
    g_autofree char *reason = g_strdup_printf ("closed-%d", r->close_code);
    loadgen_call_set_end (c, reason, r->close_reason && *r->close_reason ? r->close_reason : NULL);
  } else if (r->answer_samples == 0) {
    loadgen_call_set_end (c, "no-answer", NULL);
  } else if (r->close_code != 1000) {
    g_autofree char *reason = g_strdup_printf ("closed-%d", r->close_code);
    loadgen_call_set_end (c, reason, r->close_reason && *r->close_reason ? r->close_reason : NULL);
  } else {
    /* a socket error after the server's normal close (our close reply to a peer gone already) is no failure */
    loadgen_call_set_end (c, "ok", r->failure);
  }
}

LoadgenEndClass
loadgen_reason_class (const char *reason)
{
  if (!reason)
    return LOADGEN_END_FAILED;
  if (g_str_equal (reason, "ok"))
    return LOADGEN_END_OK;
  if (g_str_equal (reason, "http-503"))
    return LOADGEN_END_REFUSED;
  return LOADGEN_END_FAILED;
}

void
loadgen_summarize (const double *values, guint n, LoadgenSummary *out)
{
  memset (out, 0, sizeof *out);
  g_autofree double *v = g_new (double, MAX (n, 1));
  guint m = 0;
  double sum = 0;
  for (guint i = 0; i < n; i++)
    if (!isnan (values[i])) {
      v[m++] = values[i];
      sum += values[i];
    }
  out->n = m;
  if (m == 0) {
    out->p50 = out->p95 = out->p99 = out->max = out->mean = NAN;
    return;
  }
  tool_sort_doubles (v, m);
  out->p50 = tool_percentile (v, m, 0.50);
  out->p95 = tool_percentile (v, m, 0.95);
  out->p99 = tool_percentile (v, m, 0.99);
  out->max = v[m - 1];
  out->mean = sum / m;
}

GArray *
loadgen_call_chunks (const PpxChatRecord *r, gint64 origin_us)
{
  GArray *chunks = g_array_new (FALSE, FALSE, sizeof (LoadgenChunk));
  /* granule = 2 * samples + pre-skip: the chat client keeps (granule - pre-skip) / 2, and granule positions
   * are whole Opus frames (even) */
  gint64 pre_skip = r->answer_pre_skip + (r->answer_pre_skip & 1);
  gint64 chunks_done = 0;
  for (guint e = 0; e < r->events->len; e++) {
    const PpxChatEvent *ev = &g_array_index (r->events, PpxChatEvent, e);
    if (ev->kind != PPX_CHAT_AUDIO || ev->samples <= 0)
      continue;
    gint64 complete = (2 * ev->samples + pre_skip) / LOADGEN_PLAYOUT_CHUNK;
    for (; chunks_done < complete; chunks_done++) {
      LoadgenChunk c = {(ev->time_us - origin_us) / 1000.0, LOADGEN_PLAYOUT_CHUNK};
      g_array_append_val (chunks, c);
    }
  }
  return chunks;
}

gboolean
loadgen_call_playout (const LoadgenCall *c, gint64 origin_us, GArray *per_second, LoadgenPlayout *out)
{
  memset (out, 0, sizeof *out);
  if (!c->record || c->record->answer_samples <= 0)
    return FALSE;
  g_autoptr (GArray) chunks = loadgen_call_chunks (c->record, c->record->start_us);
  /* the player's quanta run on the client's clock: an arrival t ms after the connect is at t x (1 + ppm/1e6) ms
   * of that clock */
  for (guint i = 0; c->clock_ppm != 0 && i < chunks->len; i++)
    g_array_index (chunks, LoadgenChunk, i).arrival_ms *= 1 + c->clock_ppm / 1e6;
  loadgen_playout_replay ((const LoadgenChunk *) (void *) chunks->data, chunks->len,
                          (c->record->start_us - origin_us) / 1000.0, per_second, out);
  return TRUE;
}

void
loadgen_call_stats (const LoadgenCall *c, double gap_ms, LoadgenCallStats *out)
{
  memset (out, 0, sizeof *out);
  out->join_ms = out->first_audio_ms = NAN;
  const PpxChatRecord *r = c->record;
  if (!r) {
    out->latency_ms = g_array_new (FALSE, FALSE, sizeof (double));
    out->latency_p50_ms = out->latency_p95_ms = out->latency_p99_ms = out->latency_max_ms = NAN;
    out->latency_first_ms = out->latency_last_ms = NAN;
    return;
  }
  if (r->handshake_us)
    out->join_ms = ppx_chat_record_join_ms (r);
  out->sent_s = (double) r->sent_samples / PPX_CHAT_RATE;
  out->answered_s = (double) r->answer_samples / PPX_CHAT_RATE;
  out->frames_sent = r->sent_samples / PPX_CHAT_FRAME;
  out->frames_answered = MIN (out->frames_sent, r->answer_samples / PPX_CHAT_FRAME);

  /* the first answer message after the handshake, and the longest wait between two */
  gint64 prev = 0;
  for (guint e = 0; e < r->events->len; e++) {
    const PpxChatEvent *ev = &g_array_index (r->events, PpxChatEvent, e);
    if (ev->kind != PPX_CHAT_AUDIO)
      continue;
    if (!prev && r->handshake_us)
      out->first_audio_ms = (ev->time_us - r->handshake_us) / 1000.0;
    if (prev)
      out->max_gap_ms = MAX (out->max_gap_ms, (ev->time_us - prev) / 1000.0);
    prev = ev->time_us;
  }
  out->underruns = ppx_chat_record_gaps (r, (gint64) (gap_ms * 1000));
  out->has_playout = loadgen_call_playout (c, r->start_us, NULL, &out->playout);

  out->latency_ms = ppx_chat_record_frame_latencies (r, PPX_CHAT_FRAME);
  LoadgenSummary s;
  loadgen_summarize ((const double *) (void *) out->latency_ms->data, out->latency_ms->len, &s);
  out->latency_p50_ms = s.p50;
  out->latency_p95_ms = s.p95;
  out->latency_p99_ms = s.p99;
  out->latency_max_ms = s.max;
  guint quarter = out->latency_ms->len / 4;
  const double *lat = (const double *) (void *) out->latency_ms->data;
  out->latency_first_ms = out->latency_last_ms = NAN;
  if (quarter >= LOADGEN_QUARTER_MIN) {
    loadgen_summarize (lat, quarter, &s);
    out->latency_first_ms = s.p50;
    loadgen_summarize (lat + out->latency_ms->len - quarter, quarter, &s);
    out->latency_last_ms = s.p50;
  }
}

void
loadgen_call_stats_clear (LoadgenCallStats *s)
{
  if (s->latency_ms)
    g_array_unref (s->latency_ms);
  memset (s, 0, sizeof *s);
}
