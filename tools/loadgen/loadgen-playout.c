/* personaplex-loadgen: the reference web client's player (loadgen-playout.h). */
#include "loadgen-playout.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* asSamples(ms) at 48 kHz: Math.round (ms * sampleRate / 1000) */
#define MS(ms) ((gint64) (ms) * LOADGEN_PLAYOUT_RATE / 1000)
#define INITIAL MS (80)          /* initialBufferSamples: one 80 ms frame */
#define PARTIAL_START MS (10)    /* partialBufferSamples after initState */
#define MAX_BUFFER_START MS (10) /* maxBufferSamples after initState */
#define PARTIAL_INCREMENT MS (5)
#define PARTIAL_MAX MS (80)
#define MAX_BUFFER_INCREMENT MS (5)
#define MAX_BUFFER_MAX MS (80)
#define TRACE_MAX_SAMPLES ((gint64) LOADGEN_PLAYOUT_RATE * 3600)

void
loadgen_player_init (LoadgenPlayer *p)
{
  memset (p, 0, sizeof *p);
  p->initial = INITIAL;
  p->partial = PARTIAL_START;
  p->max_buffer = MAX_BUFFER_START;
  p->cap = 16;
  p->frames = g_new (gint64, p->cap);
}

void
loadgen_player_clear (LoadgenPlayer *p)
{
  g_free (p->frames);
  memset (p, 0, sizeof *p);
}

static gint64
first_frame (const LoadgenPlayer *p)
{
  return p->frames[p->head];
}

static void
shift_frame (LoadgenPlayer *p)
{
  p->head = (p->head + 1) % p->cap;
  p->len--;
  p->offset = 0;
}

static void
append_frame (LoadgenPlayer *p, gint64 samples)
{
  if (p->len == p->cap) {
    gint64 *grown = g_new (gint64, p->cap * 2);
    for (guint i = 0; i < p->len; i++)
      grown[i] = p->frames[(p->head + i) % p->cap];
    g_free (p->frames);
    p->frames = grown;
    p->head = 0;
    p->cap *= 2;
  }
  p->frames[(p->head + p->len) % p->cap] = samples;
  p->len++;
  p->queued += samples;
}

gint64
loadgen_player_push (LoadgenPlayer *p, gint64 samples)
{
  append_frame (p, samples);
  if (p->queued >= p->initial && !p->started) {
    /* start(): the partial wait begins */
    p->started = TRUE;
    p->remaining_partial = p->partial;
    p->first_out = TRUE;
  }
  gint64 dropped = 0;
  if (p->queued >= p->max_buffer + p->partial + p->initial) {
    /* drop the oldest down to initial + partial, even part of a chunk; then a larger cap */
    gint64 target = p->initial + p->partial;
    while (p->queued > target) {
      gint64 to_remove = MIN (first_frame (p) - p->offset, p->queued - target);
      p->offset += to_remove;
      p->queued -= to_remove;
      dropped += to_remove;
      if (p->offset == first_frame (p))
        shift_frame (p);
    }
    p->max_buffer = MIN (p->max_buffer + MAX_BUFFER_INCREMENT, MAX_BUFFER_MAX);
  }
  p->dropped += dropped;
  return dropped;
}

gboolean
loadgen_player_counting (const LoadgenPlayer *p)
{
  return p->actual_played > 0;
}

gint64
loadgen_player_render (LoadgenPlayer *p)
{
  const gint64 quantum = LOADGEN_PLAYOUT_QUANTUM;
  if (!(p->started && p->len > 0 && p->remaining_partial <= 0)) {
    /* canPlay() is false: silence, counted as played once anything was (the worklet's "missed audio") */
    if (p->actual_played > 0)
      p->total_played += quantum;
    p->remaining_partial -= quantum;
    return 0;
  }
  gint64 out = 0;
  while (out < quantum && p->len > 0) {
    gint64 to_copy = MIN (first_frame (p) - p->offset, quantum - out);
    p->offset += to_copy;
    p->queued -= to_copy;
    out += to_copy;
    if (p->offset == first_frame (p))
      shift_frame (p);
  }
  p->first_out = FALSE; /* (the fade-in of the first quantum after a start) */
  if (out < quantum) {
    /* "Missed some audio": a longer partial wait, and back to waiting for initial samples (a fade-out) */
    p->partial = MIN (p->partial + PARTIAL_INCREMENT, PARTIAL_MAX);
    p->started = FALSE;
    p->rebuffers++;
  }
  p->total_played += quantum;
  p->actual_played += out;
  return out;
}

static double
samples_ms (gint64 samples)
{
  return samples * 1000.0 / LOADGEN_PLAYOUT_RATE;
}

static void
add_second (GArray *per_second, double t_ms, double offset_ms, double missed_ms, double dropped_ms)
{
  if (!per_second || (missed_ms == 0 && dropped_ms == 0))
    return;
  double s = floor ((t_ms + offset_ms) / 1000);
  if (!(s >= 0) || s > 1e7)
    return;
  guint k = (guint) s;
  if (k >= per_second->len)
    g_array_set_size (per_second, k + 1);
  LoadgenPlayoutSecond *b = &g_array_index (per_second, LoadgenPlayoutSecond, k);
  b->missed_ms += missed_ms;
  b->dropped_ms += dropped_ms;
}

void
loadgen_playout_replay (const LoadgenChunk *chunks, guint n, double offset_ms, GArray *per_second,
                        LoadgenPlayout *out)
{
  memset (out, 0, sizeof *out);
  if (n == 0)
    return;
  if (per_second)
    g_assert (g_array_get_element_size (per_second) == sizeof (LoadgenPlayoutSecond));
  LoadgenPlayer p;
  loadgen_player_init (&p);
  double last = chunks[n - 1].arrival_ms;
  guint i = 0;
  for (guint64 k = 0;; k++) {
    /* the quantum's start, computed as the node test computes it (k * 128 * 1000 / 48000 in doubles) */
    double t = (double) k * LOADGEN_PLAYOUT_QUANTUM * 1000 / LOADGEN_PLAYOUT_RATE;
    if (!(t <= last))
      break;
    for (; i < n && chunks[i].arrival_ms <= t; i++) {
      gint64 dropped = loadgen_player_push (&p, chunks[i].samples);
      add_second (per_second, chunks[i].arrival_ms, offset_ms, 0, samples_ms (dropped));
    }
    gint64 total = p.total_played;
    gint64 played = loadgen_player_render (&p);
    add_second (per_second, t, offset_ms, samples_ms (p.total_played - total - played), 0);
    out->quanta++;
  }
  out->played_ms = samples_ms (p.actual_played);
  out->missed_ms = samples_ms (p.total_played - p.actual_played);
  out->dropped_ms = samples_ms (p.dropped);
  out->rebuffers = p.rebuffers;
  loadgen_player_clear (&p);
}

static GQuark
playout_error_quark (void)
{
  return g_quark_from_static_string ("loadgen-playout");
}

GArray *
loadgen_playout_read_trace (const char *path, GError **error)
{
  g_autofree char *text = NULL;
  g_autoptr (GError) e = NULL;
  if (!g_file_get_contents (path, &text, NULL, &e)) {
    g_set_error (error, playout_error_quark (), 0, "--playout-trace: %s", e->message);
    return NULL;
  }
  g_autoptr (GArray) chunks = g_array_new (FALSE, FALSE, sizeof (LoadgenChunk));
  g_auto (GStrv) lines = g_strsplit (text, "\n", -1);
  for (guint l = 0; lines[l]; l++) {
    g_strstrip (lines[l]);
    if (!*lines[l] || lines[l][0] == '#')
      continue;
    g_auto (GStrv) f = g_strsplit_set (lines[l], " \t", -1);
    const char *words[3] = {NULL, NULL, NULL};
    guint nw = 0;
    for (guint k = 0; f[k]; k++)
      if (*f[k]) {
        words[MIN (nw, 2)] = f[k];
        nw++;
      }
    char *end = NULL;
    double arrival = nw == 2 ? g_ascii_strtod (words[0], &end) : NAN;
    gboolean arrival_ok = nw == 2 && end && !*end && isfinite (arrival) && fabs (arrival) < 1e12;
    guint64 samples = 0;
    if (!arrival_ok || !g_ascii_string_to_unsigned (words[1], 10, 0, TRACE_MAX_SAMPLES, &samples, NULL)) {
      g_set_error (error, playout_error_quark (), 0,
                   "%s line %u: '%s': use ARRIVAL_MS SAMPLES (a time in ms, a whole number of samples up to %"
                   G_GINT64_FORMAT ")", path, l + 1, lines[l], TRACE_MAX_SAMPLES);
      return NULL;
    }
    if (chunks->len && arrival < g_array_index (chunks, LoadgenChunk, chunks->len - 1).arrival_ms) {
      g_set_error (error, playout_error_quark (), 0, "%s line %u: arrival %s ms is before the line before's",
                   path, l + 1, words[0]);
      return NULL;
    }
    LoadgenChunk c = {arrival, (gint64) samples};
    g_array_append_val (chunks, c);
  }
  return g_steal_pointer (&chunks);
}

char *
loadgen_playout_to_json (const LoadgenPlayout *p)
{
  char played[G_ASCII_DTOSTR_BUF_SIZE], missed[G_ASCII_DTOSTR_BUF_SIZE], dropped[G_ASCII_DTOSTR_BUF_SIZE];
  return g_strdup_printf ("{\"played_ms\": %s, \"missed_ms\": %s, \"dropped_ms\": %s, \"rebuffers\": %u}",
                          g_ascii_formatd (played, sizeof played, "%.3f", p->played_ms),
                          g_ascii_formatd (missed, sizeof missed, "%.3f", p->missed_ms),
                          g_ascii_formatd (dropped, sizeof dropped, "%.3f", p->dropped_ms), p->rebuffers);
}
