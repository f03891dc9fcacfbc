/* Tests of the batched engine: sessions that join, leave and miss ticks on a schedule, stepped through
 * ppx_engine_step() tick by tick, each one's tokens and PCM recorded (test-engine-buckets, test-gpu-tick). */
#ifndef PPX_TEST_ENGINE_SCHEDULE_H
#define PPX_TEST_ENGINE_SCHEDULE_H

#include <glib.h>
#include <string.h>

#include "personaplex.h"

#define PPX_SCHED_MAX 8 /* sessions a schedule holds */

typedef struct {
  int join, leave; /* ticks; leave < 0: stays */
  int skip_mod;    /* > 0: misses the ticks t with t % skip_mod == 2 */
  int start;       /* its first tick (from its join when earlier): before it the session is ready and idle, as a
                    * server's model keeper that never ticks (start past the last tick) */
} PpxSched;

typedef struct {
  int frames;
  int *tokens; /* [frames, 17] */
  float *pcm;  /* [frames, fs] */
} PpxSchedOut;

typedef struct {
  void (*session_params) (int i, PpxSessionParams *p); /* session i's parameters */
  void (*input) (int i, int k, float *pcm);            /* session i's frame k (fs samples) */
  void (*after_step) (PpxEngine *e, int t, void *data); /* after tick t's step, or NULL */
  void *data;
} PpxSchedHooks;

/* Runs `ticks` ticks of n sessions (n <= PPX_SCHED_MAX) on engine e as sched says, fs samples a frame; outs[i]
 * gets session i's frames (freed with ppx_sched_out_clear). The sessions are freed at the end. */
static inline void
ppx_sched_run (PpxEngine *e, int n, const PpxSched *sched, int ticks, int fs, const PpxSchedHooks *hooks,
               PpxSchedOut *outs)
{
  g_autoptr (GError) err = NULL;
  PpxSession *s[PPX_SCHED_MAX] = {NULL};
  g_assert_cmpint (n, <=, PPX_SCHED_MAX);
  for (int i = 0; i < n; i++)
    outs[i] = (PpxSchedOut){0, g_new (int, (gsize) ticks * 17), g_new (float, (gsize) ticks * fs)};
  float *in = g_new (float, (gsize) n * fs), *out = g_new (float, (gsize) n * fs);
  for (int t = 0; t < ticks; t++) {
    PpxSession *tick[PPX_SCHED_MAX];
    int who[PPX_SCHED_MAX], m = 0;
    for (int i = 0; i < n; i++) {
      if (t == sched[i].join) {
        PpxSessionParams p;
        hooks->session_params (i, &p);
        s[i] = ppx_engine_session_new (e, &p, &err);
        g_assert_no_error (err);
      }
      if (s[i] && t == sched[i].leave) {
        ppx_session_free (s[i]);
        s[i] = NULL;
      }
      if (!s[i] || t < sched[i].start || (sched[i].skip_mod > 0 && t % sched[i].skip_mod == 2))
        continue;
      tick[m] = s[i];
      who[m++] = i;
    }
    if (m == 0)
      continue;
    const float *ins[PPX_SCHED_MAX];
    float *outp[PPX_SCHED_MAX];
    PpxFrameResult res[PPX_SCHED_MAX];
    for (int j = 0; j < m; j++) {
      hooks->input (who[j], outs[who[j]].frames, in + (gsize) j * fs);
      ins[j] = in + (gsize) j * fs;
      outp[j] = out + (gsize) j * fs;
    }
    g_assert_true (ppx_engine_step (e, tick, m, ins, outp, res, &err));
    g_assert_no_error (err);
    if (hooks->after_step)
      hooks->after_step (e, t, hooks->data);
    for (int j = 0; j < m; j++) {
      PpxSchedOut *o = &outs[who[j]];
      memcpy (o->tokens + (gsize) o->frames * 17, res[j].tokens, sizeof res[j].tokens);
      memcpy (o->pcm + (gsize) o->frames * fs, outp[j], fs * sizeof (float));
      o->frames++;
    }
  }
  for (int i = 0; i < n; i++)
    ppx_session_free (s[i]);
  g_free (in);
  g_free (out);
}

static inline void
ppx_sched_out_clear (PpxSchedOut *o)
{
  g_free (o->tokens);
  g_free (o->pcm);
}

#endif
