/* personaplex-loadgen: the run: N chat-client calls on one main loop, started over the ramp, each streaming its
 * audio in real time from its own handshake, ended by the server's close after the end-of-stream page (or by
 * ours after --tail), with the CPU of the loadgen and of the given server processes. */
#ifndef LOADGEN_RUN_H
#define LOADGEN_RUN_H

#include "loadgen-options.h"
#include "loadgen-report.h"

G_BEGIN_DECLS

typedef struct _LoadgenRun LoadgenRun;

/* Prepares the audio (--input looped, or the test signal, to --seconds) as Ogg Opus once for all calls. NULL
 * with an error naming the file or the encoder when that fails. */
LoadgenRun *loadgen_run_new (const LoadgenOptions *options, GError **error);
/* Runs every call to its end (bounded: the ramp, the join timeout, the seconds and the tail, plus 30 s) on
 * the thread-default main context, and fills `report`. SIGINT/SIGTERM end the run early (the calls still
 * running are "unfinished"). The report's records point into the run: free it after the report. */
void loadgen_run_calls (LoadgenRun *run, LoadgenReport *report);
void loadgen_run_free (LoadgenRun *run);

/* The test signal: a voice-like tone (a gliding pitch with harmonics) in syllables of about 200 ms with short
 * pauses, at -20 dBFS or so, 24 kHz mono. */
void loadgen_test_signal (float *pcm, gsize n);
/* CPU time of a process from /proc/PID/stat; FALSE when it cannot be read (gone, not Linux). */
gboolean loadgen_process_cpu (int pid, LoadgenCpu *out);

G_END_DECLS
#endif
