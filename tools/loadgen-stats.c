/* personaplex-loadgen: per-call figures (join time, frame latency, underruns) and percentiles. */
#include "loadgen-stats.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

LoadgenCall *
loadgen_call_new (guint index, double scheduled_s)
{
  LoadgenCall *c = g_new0 (LoadgenCall, 1);
  c->index = index;
  c->scheduled_s = scheduled_s;
  c->connect_s = -1;
  c->handshake_s = -1;
  c->end_s = -1;
  c->sent = g_array_new (FALSE, FALSE, sizeof (LoadgenMark));
  c->received = g_array_new (FALSE, FALSE, sizeof (LoadgenMark));
  return c;
}

void
loadgen_call_free (LoadgenCall *c)
{
  if (!c)
    return;
  g_array_unref (c->sent);
  g_array_unref (c->received);
  g_free (c->reason);
  g_free (c->detail);
  g_free (c->server);
  g_free (c);
}

static void
mark (GArray *marks, double t, gint64 total)
{
  LoadgenMark m = {t, total};
  g_array_append_val (marks, m);
}

void
loadgen_call_mark_sent (LoadgenCall *c, double t, gint64 total_samples)
{
  mark (c->sent, t, total_samples);
}

void
loadgen_call_mark_received (LoadgenCall *c, double t, gint64 total_samples)
{
  mark (c->received, t, total_samples);
}

void
loadgen_call_end (LoadgenCall *c, double t, const char *reason, const char *detail)
{
  if (c->reason) /* the first end is the one that counts (a close after a 0x05, say) */
    return;
  c->end_s = t;
  c->reason = g_strdup (reason);
  c->detail = g_strdup (detail);
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

static int
compare_doubles (const void *a, const void *b)
{
  double x = *(const double *) a, y = *(const double *) b;
  return x < y ? -1 : x > y ? 1 : 0;
}

double
loadgen_percentile (const double *sorted, guint n, double p)
{
  g_return_val_if_fail (n > 0, NAN);
  double rank = ceil (p * n);
  guint k = rank < 1 ? 1 : rank > n ? n : (guint) rank;
  return sorted[k - 1];
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
  qsort (v, m, sizeof *v, compare_doubles);
  out->p50 = loadgen_percentile (v, m, 0.50);
  out->p95 = loadgen_percentile (v, m, 0.95);
  out->p99 = loadgen_percentile (v, m, 0.99);
  out->max = v[m - 1];
  out->mean = sum / m;
}

/* The time at which a cumulative count first reached `need`, scanning on from *k; < 0: never. */
static double
time_reaching (const GArray *marks, guint *k, gint64 need)
{
  while (*k < marks->len && g_array_index (marks, LoadgenMark, *k).samples < need)
    (*k)++;
  return *k < marks->len ? g_array_index (marks, LoadgenMark, *k).t : -1;
}

static gint64
last_count (const GArray *marks)
{
  return marks->len ? g_array_index (marks, LoadgenMark, marks->len - 1).samples : 0;
}

void
loadgen_call_stats (const LoadgenCall *c, double gap_ms, LoadgenCallStats *out)
{
  memset (out, 0, sizeof *out);
  out->latency_ms = g_array_new (FALSE, FALSE, sizeof (double));
  out->join_ms = c->connect_s >= 0 && c->handshake_s >= 0 ? (c->handshake_s - c->connect_s) * 1000 : NAN;
  out->first_audio_ms = NAN;
  gint64 sent = last_count (c->sent), answered = last_count (c->received);
  out->sent_s = (double) sent / LOADGEN_RATE;
  out->answered_s = (double) answered / LOADGEN_RATE;
  out->frames_sent = sent / LOADGEN_FRAME;
  out->frames_answered = MIN (out->frames_sent, answered / LOADGEN_FRAME);

  /* Gaps: between answer messages that brought audio, from the first one on. */
  double prev = -1;
  gint64 count = 0;
  for (guint i = 0; i < c->received->len; i++) {
    const LoadgenMark *m = &g_array_index (c->received, LoadgenMark, i);
    if (m->samples <= count)
      continue;
    count = m->samples;
    if (prev < 0) {
      if (c->handshake_s >= 0)
        out->first_audio_ms = (m->t - c->handshake_s) * 1000;
    } else {
      double gap = (m->t - prev) * 1000;
      out->max_gap_ms = MAX (out->max_gap_ms, gap);
      if (gap > gap_ms)
        out->underruns++;
    }
    prev = m->t;
  }

  /* Frame latency: input frame i's last sample sent, to answer frame i's last sample decoded. */
  guint ks = 0, kr = 0;
  for (guint i = 0; i < out->frames_answered; i++) {
    gint64 need = (gint64) (i + 1) * LOADGEN_FRAME;
    double ts = time_reaching (c->sent, &ks, need), tr = time_reaching (c->received, &kr, need);
    if (ts < 0 || tr < 0)
      break;
    double ms = (tr - ts) * 1000;
    g_array_append_val (out->latency_ms, ms);
  }
  LoadgenSummary s;
  loadgen_summarize ((const double *) (void *) out->latency_ms->data, out->latency_ms->len, &s);
  out->latency_p50_ms = s.p50;
  out->latency_p95_ms = s.p95;
  out->latency_p99_ms = s.p99;
  out->latency_max_ms = s.max;
}

void
loadgen_call_stats_clear (LoadgenCallStats *s)
{
  if (s->latency_ms)
    g_array_unref (s->latency_ms);
  memset (s, 0, sizeof *s);
}
