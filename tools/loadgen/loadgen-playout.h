/* personaplex-loadgen: the reference web client's player, modelled.
 *
 * The reference client (client/src/audio-processor.ts in NVIDIA/personaplex, the same worklet as kyutai's moshi
 * client) plays the answer through an AudioWorkletProcessor. Its decoder worker (opus-recorder, set up with
 * bufferLength 960 * rate / 24000, decoderSampleRate 24000, outputBufferSampleRate the AudioContext's rate) hands
 * it the decoded answer in chunks of 1920 samples at 48 kHz (40 ms); the worklet renders quanta of 128 samples.
 * This is that worklet's logic, counters and quirks included (docs/tools.md, "The reference player"):
 *   - it starts once 80 ms are queued, then waits 10 ms more (the partial buffer), counted in quanta;
 *   - a chunk that brings the queue to 100 ms or more (80 + the partial wait + the max buffer, 10 ms at first)
 *     drops the oldest audio down to 80 ms + the partial wait, and the max buffer grows by 5 ms (to 80 ms);
 *   - a quantum that runs out part way re-buffers: the partial wait grows by 5 ms (to 80 ms) and it starts again
 *     only when a chunk brings the queue to 80 ms;
 *   - "missed audio" (its stats panel) is totalAudioPlayed - actualAudioPlayed: every quantum after the first
 *     sound adds 128 samples to the first, only the samples it played to the second.
 * No network, no clock: chunks go in and quanta come out when the caller says. Sample counts are kept as
 * integers (the worklet sums seconds as doubles: the same figures to far below a sample). */
#ifndef LOADGEN_PLAYOUT_H
#define LOADGEN_PLAYOUT_H

#include <glib.h>

G_BEGIN_DECLS

#define LOADGEN_PLAYOUT_RATE 48000   /* the AudioContext's rate assumed (new AudioContext() on a 48 kHz device) */
#define LOADGEN_PLAYOUT_QUANTUM 128  /* samples a process() call renders */
#define LOADGEN_PLAYOUT_CHUNK 1920   /* samples of a decoded chunk: opus-recorder's bufferLength 960 * 48000 / 24000 */

typedef struct {
  /* the worklet's buffer lengths, in samples */
  gint64 initial, partial, max_buffer;
  /* its state: the queued chunks (their lengths, a ring), the offset into the first, the samples queued */
  gint64 *frames;
  guint head, len, cap;
  gint64 offset, queued;
  gboolean started, first_out;
  gint64 remaining_partial;
  /* its counters, in samples; and what this model adds: dropped samples, re-buffers */
  gint64 total_played, actual_played, dropped;
  guint rebuffers;
} LoadgenPlayer;

/* The worklet's constructor (initState). */
void loadgen_player_init (LoadgenPlayer *p);
void loadgen_player_clear (LoadgenPlayer *p);
/* A decoded chunk of `samples` reaches the worklet (port.onmessage): start, then the overflow rule. Returns the
 * samples the overflow rule dropped. */
gint64 loadgen_player_push (LoadgenPlayer *p, gint64 samples);
/* One quantum (process()). Returns the samples it played (0 to LOADGEN_PLAYOUT_QUANTUM). */
gint64 loadgen_player_render (LoadgenPlayer *p);
/* Whether the quantum just rendered counted in totalAudioPlayed (the worklet played something before). */
gboolean loadgen_player_counting (const LoadgenPlayer *p);

/* A chunk as it reaches the player: its arrival (ms, any origin) and its length (samples at 48 kHz). */
typedef struct {
  double arrival_ms;
  gint64 samples;
} LoadgenChunk;

/* What the player did over a replay. */
typedef struct {
  double played_ms;  /* actualAudioPlayed */
  double missed_ms;  /* totalAudioPlayed - actualAudioPlayed */
  double dropped_ms; /* discarded by the overflow rule */
  guint rebuffers;   /* quanta that ran out part way ("Missed some audio") */
  guint64 quanta;    /* quanta rendered */
} LoadgenPlayout;

/* Audio missed and dropped in one second of a replay, in ms. */
typedef struct {
  double missed_ms, dropped_ms;
} LoadgenPlayoutSecond;

/* The replay (the rules): quanta of 128 samples at 48 kHz, the first starting at time 0; before the
 * quantum that starts at t, every chunk that arrived at or before t is handed to the player; it ends with the
 * last quantum that starts at or before the last arrival (no chunk: none). `chunks` in arrival order.
 * `per_second` (LoadgenPlayoutSecond, or NULL): filled by second floor((t + offset_ms) / 1000) of the quantum
 * (missed) or of the arrival (dropped); grown as needed; seconds before 0 are left out. */
void loadgen_playout_replay (const LoadgenChunk *chunks, guint n, double offset_ms, GArray *per_second,
                             LoadgenPlayout *out);

/* A trace: one line per chunk, "ARRIVAL_MS SAMPLES" (arrival non-decreasing, any origin; samples 0 or more);
 * blank lines and lines starting with '#' are skipped. An array of LoadgenChunk, or NULL with an error naming
 * the file and the line. */
GArray *loadgen_playout_read_trace (const char *path, GError **error);
/* {"played_ms": ..., "missed_ms": ..., "dropped_ms": ..., "rebuffers": ...}, one line, no newline. */
char *loadgen_playout_to_json (const LoadgenPlayout *p);

G_END_DECLS
#endif
