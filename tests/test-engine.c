/* The batched engine on the CPU with the golden tiny model: N = 1..8 sessions with different inputs
 * (slices of the golden user audio and ../shared/data WAVs at odd offsets), text prompts, voices (none,
 * the reference's voice_prompt.pt, two audio voices), seeds, greedy and sampled, joining and leaving at
 * different ticks, some missing ticks, one resetting mid-run: every session's tokens and PCM equal its own
 * one-session run (ppx_session_new) bit for bit (the CPU's per-row arithmetic does not depend on the batch).
 * Every session runs long enough for the LM (context 20) and Mimi (context 30, 2 positions a frame) ring
 * caches to wrap. Also: the session limit (PPX_ERROR_LIMIT, the running sessions unaffected), a session
 * created on another thread while ticks run (interleaved prompt frames), memory figures, bad calls.
 * PPX_TEST_ENGINE_SHORT=1 (the valgrind run) tests fewer batch sizes and frames.
 * `test-engine cuda`: the same on the GPU (exits 77 without one), with the same exactness: the GPU kernels
 * compute a row with the same operations at any batch size. */
#include <math.h>

#include "audio-io.h"
#include "golden-model.h"
#include "model-internal.h"
#include "personaplex-internal.h"

static GoldenModel G;
static PpxModel *model;
static gboolean short_run, on_gpu;
static int fs;

/* The PCM sources: the golden user audio, the two data clips (if present), the golden voice audio. */
typedef struct {
  float *pcm;
  gsize n;
} Source;
static Source sources[4];
static int n_sources;
static char *voice2_wav; /* a second audio voice: 1.2 s of a data clip (or of the golden user audio) */

typedef enum { VOICE_NONE, VOICE_PT, VOICE_AUDIO, VOICE_AUDIO2 } Voice;

typedef struct {
  int source;
  gsize offset;    /* first sample of the session's audio in its source */
  Voice voice;
  int n_text;      /* the first n_text golden text prompt tokens (0: none) */
  gboolean greedy;
  guint64 seed;
  float temp_text, temp_audio;
  int topk_text, topk_audio;
  int join;        /* the tick before which the session is created */
  int frames;      /* frames it steps, then it leaves */
  int skip_mod;    /* > 0: it misses the ticks t with t % skip_mod == 1 (a paused pipeline) */
  int reset_at;    /* > 0: ppx_session_reset before its frame reset_at */
} Spec;

typedef struct {
  int *tokens; /* [frames, 17] */
  float *pcm;  /* [frames, fs] */
} Run;

static void
run_clear (Run *r)
{
  g_free (r->tokens);
  g_free (r->pcm);
}

/* Frame k of a spec's input: its source from offset + k * fs, zero past the end. */
static void
input_frame (const Spec *sp, int k, float *out)
{
  const Source *src = &sources[sp->source];
  for (int i = 0; i < fs; i++) {
    gsize at = sp->offset + (gsize) k * fs + i;
    out[i] = at < src->n ? src->pcm[at] : 0.0f;
  }
}

static void
spec_params (const Spec *sp, PpxSessionParams *p)
{
  ppx_session_params_init (p);
  p->voice_prompt = sp->voice == VOICE_PT ? G.voice_pt : sp->voice == VOICE_AUDIO ? G.voice_wav
                    : sp->voice == VOICE_AUDIO2 ? voice2_wav : NULL;
  p->voice_normalize = FALSE;
  p->text_prompt_tokens = G.text_tokens;
  p->n_text_prompt_tokens = sp->n_text;
  p->greedy = sp->greedy;
  p->seed = sp->seed;
  p->temp_text = sp->temp_text;
  p->temp_audio = sp->temp_audio;
  p->topk_text = sp->topk_text;
  p->topk_audio = sp->topk_audio;
}

static Spec
make_spec (int i)
{
  Spec sp = {0};
  sp.source = i % n_sources;
  sp.offset = (gsize) i * 7919 + 13;
  sp.voice = (Voice) (i % 4);
  sp.n_text = i % 3 == 2 ? 0 : (i % 3 == 1 ? G.n_text_tokens : MIN (3 + i, G.n_text_tokens));
  sp.greedy = i % 2 == 0;
  sp.seed = 1000 + 17 * (guint64) i;
  sp.temp_text = 0.6f + 0.1f * (i % 3);
  sp.temp_audio = 0.7f + 0.05f * i;
  sp.topk_text = 5 + 3 * i;
  sp.topk_audio = i % 4 == 3 ? 0 : 40 * (1 + i % 4);
  sp.join = (i * 3) % 7;
  sp.frames = (short_run ? 24 : 34) + 2 * i; /* > 15 Mimi frames and > 20 - 12 LM positions: both rings wrap */
  sp.skip_mod = i % 4 == 3 ? 5 : 0;
  sp.reset_at = i == 5 ? 11 : 0;
  return sp;
}

static void
record (Run *r, int k, const PpxFrameResult *res, const float *out)
{
  memcpy (r->tokens + (gsize) k * 17, res->tokens, sizeof res->tokens);
  memcpy (r->pcm + (gsize) k * fs, out, fs * sizeof (float));
}

/* The spec on a session of its own (ppx_session_new: a private engine of one slot). */
static Run
run_alone (const Spec *sp)
{
  g_autoptr (GError) err = NULL;
  PpxSessionParams p;
  spec_params (sp, &p);
  PpxSession *s = ppx_session_new (model, &p, &err);
  g_assert_no_error (err);
  g_assert_cmpint (ppx_engine_max_sessions (ppx_session_engine (s)), ==, 1);
  Run r = {g_new (int, (gsize) sp->frames * 17), g_new (float, (gsize) sp->frames * fs)};
  g_autofree float *in = g_new (float, fs), *out = g_new (float, fs);
  for (int k = 0; k < sp->frames; k++) {
    if (sp->reset_at > 0 && k == sp->reset_at)
      g_assert_true (ppx_session_reset (s, &err));
    input_frame (sp, k, in);
    PpxFrameResult res;
    g_assert_true (ppx_session_step (s, in, out, &res, &err));
    g_assert_no_error (err);
    record (&r, k, &res, out);
  }
  ppx_session_free (s);
  return r;
}

/* Compares a batched run with the one-session run: tokens exact and PCM bit for bit, on the CPU and on the
 * GPU alike (every kernel computes a row with the same operations at any batch size: docs/cuda.md). */
static void
compare (const Spec *sp, int i, const Run *batched, const Run *alone)
{
  int token_diff = 0;
  double pcm_err = 0;
  for (gsize j = 0; j < (gsize) sp->frames * 17; j++)
    token_diff += batched->tokens[j] != alone->tokens[j];
  for (gsize j = 0; j < (gsize) sp->frames * fs; j++)
    pcm_err = MAX (pcm_err, fabs ((double) batched->pcm[j] - alone->pcm[j]));
  if (token_diff || pcm_err > 0)
    g_printerr ("session %d (%s, voice %d, %d text tokens): %d token differences, PCM max abs err %.3g\n", i,
                sp->greedy ? "greedy" : "sampled", sp->voice, sp->n_text, token_diff, pcm_err);
  g_assert_cmpint (token_diff, ==, 0);
  g_assert_cmpfloat (pcm_err, ==, 0.0);
}

/* n specs on one engine of n slots; sessions join, miss ticks, reset and leave as their specs say. In each
 * tick the sessions are handed over in an order that changes from tick to tick. */
static void
run_batched (const Spec *specs, int n, Run *runs)
{
  g_autoptr (GError) err = NULL;
  PpxEngineParams ep;
  ppx_engine_params_init (&ep);
  ep.max_sessions = n;
  PpxEngine *e = ppx_engine_new (model, &ep, &err);
  g_assert_no_error (err);
  g_assert_cmpint (ppx_engine_max_sessions (e), ==, n);
  g_assert_cmpint (ppx_engine_kv_format (e), ==, PPX_KV_BF16); /* AUTO is bf16 */
  PpxSession **s = g_new0 (PpxSession *, n);
  int *done = g_new0 (int, n);
  float *in = g_new (float, (gsize) n * fs), *out = g_new (float, (gsize) n * fs);
  PpxSession **tick = g_new (PpxSession *, n);
  const float **ins = g_new (const float *, n);
  float **outs = g_new (float *, n);
  int *who = g_new (int, n);
  PpxFrameResult *res = g_new (PpxFrameResult, n);
  for (int i = 0; i < n; i++)
    runs[i] = (Run){g_new (int, (gsize) specs[i].frames * 17), g_new (float, (gsize) specs[i].frames * fs)};
  int finished = 0, max_batch = 0;
  for (int t = 0; finished < n; t++) {
    int m = 0;
    for (int i = 0; i < n; i++) {
      const Spec *sp = &specs[i];
      if (t == sp->join) {
        PpxSessionParams p;
        spec_params (sp, &p);
        s[i] = ppx_engine_session_new (e, &p, &err);
        g_assert_no_error (err);
        g_assert_true (ppx_session_engine (s[i]) == e);
      }
      if (!s[i])
        continue;
      if (done[i] == sp->frames) { /* leaves at a tick boundary */
        ppx_session_free (s[i]);
        s[i] = NULL;
        finished++;
        continue;
      }
      if (sp->skip_mod > 0 && t % sp->skip_mod == 1)
        continue;
      if (sp->reset_at > 0 && done[i] == sp->reset_at)
        g_assert_true (ppx_session_reset (s[i], &err));
      who[m++] = i;
    }
    g_assert_cmpint (ppx_engine_active_sessions (e), <=, n);
    if (m == 0)
      continue;
    for (int j = 0; j < m; j++) { /* a different order every tick */
      const int i = who[(t % 2 ? m - 1 - j : j + t) % m];
      tick[j] = s[i];
      input_frame (&specs[i], done[i], in + (gsize) j * fs);
      ins[j] = in + (gsize) j * fs;
      outs[j] = out + (gsize) j * fs;
    }
    g_assert_true (ppx_engine_step (e, tick, m, ins, outs, res, &err));
    g_assert_no_error (err);
    g_assert_cmpint (ppx_engine_last_batch_size (e), ==, m);
    max_batch = MAX (max_batch, m);
    for (int j = 0; j < m; j++) {
      const int i = who[(t % 2 ? m - 1 - j : j + t) % m];
      record (&runs[i], done[i]++, &res[j], outs[j]);
    }
  }
  g_assert_cmpint (ppx_engine_active_sessions (e), ==, 0);
  if (n > 2)
    g_assert_cmpint (max_batch, >, 2); /* the test really batched */
  ppx_engine_unref (e);
  g_free (s);
  g_free (done);
  g_free (in);
  g_free (out);
  g_free (tick);
  g_free (ins);
  g_free (outs);
  g_free (who);
  g_free (res);
}

static void
test_batch_equals_alone (gconstpointer data)
{
  const int n = GPOINTER_TO_INT (data);
  Spec *specs = g_new (Spec, n);
  for (int i = 0; i < n; i++)
    specs[i] = make_spec (i);
  Run *batched = g_new0 (Run, n);
  run_batched (specs, n, batched);
  for (int i = 0; i < n; i++) {
    Run alone = run_alone (&specs[i]);
    compare (&specs[i], i, &batched[i], &alone);
    run_clear (&alone);
    run_clear (&batched[i]);
  }
  g_free (batched);
  g_free (specs);
}

/* ---- the session limit ---- */

static void
step_all (PpxEngine *e, PpxSession **s, const Spec *specs, int n, int k, Run *runs)
{
  g_autoptr (GError) err = NULL;
  float *in = g_new (float, (gsize) n * fs), *out = g_new (float, (gsize) n * fs);
  const float **ins = g_new (const float *, n);
  float **outs = g_new (float *, n);
  PpxFrameResult *res = g_new (PpxFrameResult, n);
  for (int i = 0; i < n; i++) {
    input_frame (&specs[i], k, in + (gsize) i * fs);
    ins[i] = in + (gsize) i * fs;
    outs[i] = out + (gsize) i * fs;
  }
  g_assert_true (ppx_engine_step (e, s, n, ins, outs, res, &err));
  for (int i = 0; i < n; i++)
    record (&runs[i], k, &res[i], outs[i]);
  g_free (in);
  g_free (out);
  g_free (ins);
  g_free (outs);
  g_free (res);
}

static void
test_limit (void)
{
  g_autoptr (GError) err = NULL;
  PpxEngineParams ep;
  ppx_engine_params_init (&ep);
  ep.max_sessions = 2;
  PpxEngine *e = ppx_engine_new (model, &ep, &err);
  g_assert_no_error (err);
  Spec specs[2] = {make_spec (1), make_spec (2)};
  specs[0].frames = specs[1].frames = 26;
  PpxSession *s[2];
  Run runs[2];
  for (int i = 0; i < 2; i++) {
    PpxSessionParams p;
    spec_params (&specs[i], &p);
    s[i] = ppx_engine_session_new (e, &p, &err);
    g_assert_no_error (err);
    runs[i] = (Run){g_new (int, 26 * 17), g_new (float, (gsize) 26 * fs)};
  }
  g_assert_cmpint (ppx_engine_active_sessions (e), ==, 2);
  for (int k = 0; k < 26; k++) {
    if (k == 5 || k == 17) { /* a third session is refused, whatever its prompts */
      PpxSessionParams p;
      Spec extra = make_spec (3);
      spec_params (&extra, &p);
      g_assert_null (ppx_engine_session_new (e, &p, &err));
      g_assert_error (err, PPX_ERROR, PPX_ERROR_LIMIT);
      g_assert_nonnull (strstr (err->message, "2 sessions"));
      g_clear_error (&err);
      g_assert_cmpint (ppx_engine_active_sessions (e), ==, 2);
    }
    step_all (e, s, specs, 2, k, runs);
  }
  for (int i = 0; i < 2; i++) {
    Run alone = run_alone (&specs[i]);
    compare (&specs[i], i, &runs[i], &alone);
    run_clear (&alone);
    run_clear (&runs[i]);
  }
  /* a slot freed is a slot taken again */
  ppx_session_free (s[0]);
  g_assert_cmpint (ppx_engine_active_sessions (e), ==, 1);
  PpxSessionParams p;
  ppx_session_params_init (&p);
  PpxSession *again = ppx_engine_session_new (e, &p, &err);
  g_assert_no_error (err);
  ppx_session_free (again);
  ppx_session_free (s[1]);
  ppx_engine_unref (e);
}

/* ---- a session created on another thread while ticks run ---- */

typedef struct {
  PpxEngine *engine;
  PpxSessionParams params;
  PpxSession *session;
  gint creating; /* 1 while ppx_engine_session_new runs */
  gint ticks_during;
} Joiner;

static gpointer
join_thread (gpointer data)
{
  Joiner *j = data;
  g_autoptr (GError) err = NULL;
  g_atomic_int_set (&j->creating, 1);
  j->session = ppx_engine_session_new (j->engine, &j->params, &err);
  g_atomic_int_set (&j->creating, 0);
  g_assert_no_error (err);
  return NULL;
}

static void
test_join_from_thread (void)
{
  g_autoptr (GError) err = NULL;
  PpxEngineParams ep;
  ppx_engine_params_init (&ep);
  ep.max_sessions = 3;
  PpxEngine *e = ppx_engine_new (model, &ep, &err);
  g_assert_no_error (err);
  Spec specs[3] = {make_spec (0), make_spec (1), make_spec (7)};
  const int frames = 60;
  specs[0].frames = specs[1].frames = specs[2].frames = frames;
  PpxSession *s[3] = {NULL};
  Run runs[3];
  for (int i = 0; i < 3; i++)
    runs[i] = (Run){g_new (int, (gsize) frames * 17), g_new (float, (gsize) frames * fs)};
  for (int i = 0; i < 2; i++) {
    PpxSessionParams p;
    spec_params (&specs[i], &p);
    s[i] = ppx_engine_session_new (e, &p, &err);
    g_assert_no_error (err);
  }
  /* the joiner's prompts: an audio voice (encoded outside the lock) and a long text prompt, many frames */
  Joiner j = {.engine = e};
  spec_params (&specs[2], &j.params);
  int long_text[240];
  for (int i = 0; i < 240; i++)
    long_text[i] = G.text_tokens[i % G.n_text_tokens];
  j.params.text_prompt_tokens = long_text;
  j.params.n_text_prompt_tokens = 240;
  GThread *th = NULL;
  int done[3] = {0};
  int k0 = 0; /* the joiner's first tick */
  for (int t = 0; done[0] < frames || (s[2] && done[2] < frames) || th; t++) {
    if (t == 3)
      th = g_thread_new ("joiner", join_thread, &j);
    if (th && !g_atomic_int_get (&j.creating) && j.session) {
      g_thread_join (th);
      th = NULL;
      s[2] = j.session;
      k0 = t;
    }
    PpxSession *tick[3];
    int idx[3], m = 0;
    for (int i = 0; i < 3; i++)
      if (s[i] && done[i] < frames) {
        tick[m] = s[i];
        idx[m++] = i;
      }
    if (m == 0) {
      g_usleep (1000);
      continue;
    }
    const gboolean during = g_atomic_int_get (&j.creating);
    float in[3][1920], out[3][1920];
    const float *ins[3];
    float *outs[3];
    PpxFrameResult res[3];
    g_assert_cmpint (fs, <=, 1920);
    for (int q = 0; q < m; q++) {
      input_frame (&specs[idx[q]], done[idx[q]], in[q]);
      ins[q] = in[q];
      outs[q] = out[q];
    }
    g_assert_true (ppx_engine_step (e, tick, m, ins, outs, res, &err));
    if (during && g_atomic_int_get (&j.creating))
      j.ticks_during++; /* a whole tick ran while the other thread was inside ppx_engine_session_new */
    for (int q = 0; q < m; q++)
      record (&runs[idx[q]], done[idx[q]]++, &res[q], outs[q]);
    g_usleep (500); /* a tick every frame period leaves the lock free in between */
  }
  g_printerr ("ticks completed during the other thread's session creation: %d (joined at tick %d)\n",
              j.ticks_during, k0);
  /* with the lock held for all 270 prompt frames at most the tick already running could complete */
  g_assert_cmpint (j.ticks_during, >=, 3);
  for (int i = 0; i < 3; i++) {
    Spec alone_spec = specs[i];
    Run alone;
    if (i == 2) {
      PpxSessionParams p = j.params;
      PpxSession *a = ppx_session_new (model, &p, &err);
      g_assert_no_error (err);
      alone = (Run){g_new (int, (gsize) frames * 17), g_new (float, (gsize) frames * fs)};
      float in[1920], out[1920];
      for (int k = 0; k < frames; k++) {
        PpxFrameResult res;
        input_frame (&alone_spec, k, in);
        g_assert_true (ppx_session_step (a, in, out, &res, &err));
        record (&alone, k, &res, out);
      }
      ppx_session_free (a);
    } else {
      alone = run_alone (&alone_spec);
    }
    compare (&alone_spec, i, &runs[i], &alone);
    run_clear (&alone);
    run_clear (&runs[i]);
    ppx_session_free (s[i]);
  }
  ppx_engine_unref (e);
}

/* ---- memory figures and bad calls ---- */

static void
test_memory (void)
{
  g_autoptr (GError) err = NULL;
  PpxEngineParams ep;
  ppx_engine_params_init (&ep);
  const guint64 per = ppx_model_session_bytes (model, PPX_KV_AUTO);
  g_assert_cmpuint (per, ==, ppx_model_session_bytes (model, PPX_KV_BF16)); /* AUTO is bf16 */
  g_assert_cmpuint (per, <, ppx_model_session_bytes (model, PPX_KV_F32));
  g_assert_cmpuint (ppx_model_session_bytes (model, PPX_KV_FP8), <, per);
  g_assert_cmpuint (per, >, 0);
  guint64 sizes[2];
  const int ns[2] = {3, 7};
  for (int i = 0; i < 2; i++) {
    ep.max_sessions = ns[i];
    PpxEngine *e = ppx_engine_new (model, &ep, &err);
    g_assert_no_error (err);
    g_assert_cmpuint (ppx_engine_session_bytes (e), ==, per);
    sizes[i] = ppx_engine_device_bytes (e);
    ppx_engine_unref (e);
  }
  /* weights + N x per-session state: the engine grows by exactly the session bytes a slot */
  g_assert_cmpuint (sizes[1] - sizes[0], ==, 4 * per);
  const guint64 fixed = sizes[0] - 3 * per;
  /* the figure is what the backend allocates (the CPU backend counts every allocation); sessions add no
   * device memory of their own */
  const guint64 before = ppx_backend_allocated_bytes (model->be);
  ep.max_sessions = 0; /* as many as fit: on the CPU at most 64, on a GPU 1024 */
  PpxEngine *e = ppx_engine_new (model, &ep, &err);
  g_assert_no_error (err);
  const int n = ppx_engine_max_sessions (e);
  g_assert_cmpint (n, >=, 1);
  g_assert_cmpint (n, <=, on_gpu ? 1024 : 64);
  g_assert_cmpuint (ppx_engine_device_bytes (e), ==, fixed + (guint64) n * per);
  g_assert_cmpuint (ppx_backend_allocated_bytes (model->be) - before, ==, ppx_engine_device_bytes (e));
  PpxSessionParams p;
  ppx_session_params_init (&p);
  PpxSession *s = ppx_engine_session_new (e, &p, &err);
  g_assert_no_error (err);
  g_assert_cmpuint (ppx_backend_allocated_bytes (model->be) - before, ==, ppx_engine_device_bytes (e));
  ppx_session_free (s);
  ppx_engine_unref (e);
  g_assert_cmpuint (ppx_backend_allocated_bytes (model->be), ==, before);
}

static void
test_bad_calls (void)
{
  g_autoptr (GError) err = NULL;
  PpxEngineParams ep;
  ppx_engine_params_init (&ep);
  ep.kv_format = (PpxKvFormat) 99;
  g_assert_null (ppx_engine_new (model, &ep, &err));
  g_assert_error (err, PPX_ERROR, PPX_ERROR_INVALID);
  g_clear_error (&err);
  ep.kv_format = PPX_KV_AUTO;
  ep.max_sessions = 1 << 20;
  g_assert_null (ppx_engine_new (model, &ep, &err));
  g_assert_error (err, PPX_ERROR, PPX_ERROR_INVALID);
  g_clear_error (&err);
  ep.max_sessions = 2;
  PpxEngine *e = ppx_engine_new (model, &ep, &err), *other = ppx_engine_new (model, &ep, &err);
  g_assert_no_error (err);
  PpxSessionParams p;
  ppx_session_params_init (&p);
  PpxSession *a = ppx_engine_session_new (e, &p, &err), *b = ppx_engine_session_new (other, &p, &err);
  g_assert_no_error (err);
  float in[1920] = {0}, out[1920];
  const float *ins[2] = {in, in};
  float *outs[2] = {out, out};
  PpxSession *dup[2] = {a, a}, *mixed[2] = {a, b};
  g_assert_false (ppx_engine_step (e, dup, 2, ins, outs, NULL, &err));
  g_assert_error (err, PPX_ERROR, PPX_ERROR_INVALID);
  g_clear_error (&err);
  g_assert_false (ppx_engine_step (e, mixed, 2, ins, outs, NULL, &err));
  g_assert_error (err, PPX_ERROR, PPX_ERROR_INVALID);
  g_clear_error (&err);
  g_assert_false (ppx_engine_step (e, dup, 3, ins, outs, NULL, &err)); /* more than max_sessions */
  g_assert_error (err, PPX_ERROR, PPX_ERROR_INVALID);
  g_clear_error (&err);
  g_assert_true (ppx_engine_step (e, dup, 0, NULL, NULL, NULL, &err)); /* an empty tick does nothing */
  g_assert_cmpuint (ppx_session_frames (a), ==, 0);
  g_assert_true (ppx_engine_step (e, dup, 1, ins, outs, NULL, &err));
  g_assert_cmpuint (ppx_session_frames (a), ==, 1);
  g_assert_cmpuint (ppx_session_frames (b), ==, 0); /* the other engine's session was not stepped */
  /* a session inside the model's output lag (its prompt phase too short): the tick is refused before anything
   * runs, naming the caller's index of that session (c is index 0 of the call but row 1 of the tick) */
  PpxSession *c = ppx_engine_session_new (e, &p, &err);
  g_assert_no_error (err);
  PpxLmGen *gen = ppx_session_lmgen (c);
  const int offset = gen->offset;
  gen->offset = 0;
  PpxSession *late[2] = {c, a};
  g_assert_false (ppx_engine_step (e, late, 2, ins, outs, NULL, &err));
  g_assert_error (err, PPX_ERROR, PPX_ERROR_INVALID);
  g_assert_nonnull (strstr (err->message, "session 0 is still inside the model's output lag"));
  g_clear_error (&err);
  g_assert_cmpuint (ppx_session_frames (a), ==, 1);
  g_assert_cmpuint (ppx_session_frames (c), ==, 0);
  gen->offset = offset;
  g_assert_true (ppx_engine_step (e, late, 2, ins, outs, NULL, &err));
  g_assert_no_error (err);
  g_assert_cmpuint (ppx_session_frames (a), ==, 2);
  g_assert_cmpuint (ppx_session_frames (c), ==, 1);
  ppx_session_free (c);
  ppx_session_free (a);
  ppx_session_free (b);
  ppx_engine_unref (e);
  ppx_engine_unref (other);
}

/* Every tick that steps a session is measured, from the call to its return, and PPX_DEBUG_TICK_DELAY makes
 * the ticks it names longer by that much (inside the measured time); an empty or refused tick is not
 * measured; ppx_engine_tick_stats carries the same figures. */
static void
test_tick_times (void)
{
  g_autoptr (GError) err = NULL;
  PpxEngineParams ep;
  ppx_engine_params_init (&ep);
  ep.max_sessions = 1;
  g_setenv ("PPX_DEBUG_TICK_DELAY", "3:40", TRUE); /* read when the engine is made */
  PpxEngine *e = ppx_engine_new (model, &ep, &err);
  g_unsetenv ("PPX_DEBUG_TICK_DELAY");
  g_assert_no_error (err);
  PpxSessionParams p;
  ppx_session_params_init (&p);
  PpxSession *a = ppx_engine_session_new (e, &p, &err);
  g_assert_no_error (err);
  float in[1920] = {0}, out[1920];
  const float *ins[1] = {in};
  float *outs[1] = {out};
  PpxEngineTickTimes t;
  PpxEngineTickStats st;
  g_assert_true (ppx_engine_step (e, &a, 0, NULL, NULL, NULL, &err));
  ppx_engine_tick_times (e, &t);
  g_assert_cmpuint (t.ticks, ==, 0);
  /* the engine keeps its figures as floats: a tick as long as the wall time the test measured (both in whole
   * microseconds) may read up to a float's rounding (well under 1 us) above it */
  const double float_slack = 1e-3;
  double wall[5];
  for (int i = 0; i < 5; i++) {
    const gint64 t0 = g_get_monotonic_time ();
    g_assert_true (ppx_engine_step (e, &a, 1, ins, outs, NULL, &err));
    wall[i] = (g_get_monotonic_time () - t0) / 1000.0;
    ppx_engine_tick_times (e, &t);
    g_assert_cmpfloat (t.last_ms, <=, wall[i] + float_slack);
    g_assert_cmpfloat (t.last_ms, >=, i >= 3 ? 40 : 0);
  }
  g_assert_cmpuint (t.n, ==, 5);
  g_assert_cmpuint (t.ticks, ==, 5);
  g_assert_cmpfloat (t.max_ms, >=, 40);
  g_assert_cmpfloat (t.p99_ms, >=, 40); /* two slow ticks: the second largest is one */
  g_assert_cmpfloat (t.p50_ms, <=, MAX (MAX (wall[0], wall[1]), wall[2]) + float_slack);
  ppx_engine_tick_stats (e, &st);
  g_assert_cmpuint (st.ticks, ==, 5);
  g_assert_cmpuint (st.times.ticks, ==, 5);
  g_assert_cmpfloat (st.times.p99_ms, ==, t.p99_ms);
  PpxSession *dup[2] = {a, a};
  g_assert_false (ppx_engine_step (e, dup, 2, ins, outs, NULL, &err));
  g_clear_error (&err);
  ppx_engine_tick_times (e, &t);
  g_assert_cmpuint (t.ticks, ==, 5);
  ppx_session_free (a);
  ppx_engine_unref (e);
}

/* ppx_engine_measure_tick (the server's admission, docs/engine.md "Measuring the tick"): a tick of n sessions at
 * full context, measured on free slots beside a session that stays; its ticks are not the engine's tick times; too
 * few free slots is PPX_ERROR_LIMIT, nothing measured. */
static void
test_measure_tick (void)
{
  g_autoptr (GError) err = NULL;
  PpxEngineParams ep;
  ppx_engine_params_init (&ep);
  ep.max_sessions = 3;
  PpxEngine *e = ppx_engine_new (model, &ep, &err);
  g_assert_no_error (err);
  PpxSessionParams p;
  ppx_session_params_init (&p);
  PpxSession *kept = ppx_engine_session_new (e, &p, &err); /* as the server's keeper's */
  g_assert_no_error (err);
  double ms[3] = {-1, -1, -1};
  int padded = 0;
  g_assert_true (ppx_engine_measure_tick (e, 2, 3, ms, &padded, &err));
  g_assert_no_error (err);
  for (int i = 0; i < 3; i++)
    g_assert_cmpfloat (ms[i], >, 0);
  g_assert_cmpint (padded, >=, 2);
  g_assert_cmpint (ppx_engine_active_sessions (e), ==, 1);
  PpxEngineTickTimes t;
  ppx_engine_tick_times (e, &t);
  g_assert_cmpuint (t.ticks, ==, 0);
  /* 3 rows need 3 free slots: 2 are */
  g_assert_false (ppx_engine_measure_tick (e, 3, 1, ms, NULL, &err));
  g_assert_error (err, PPX_ERROR, PPX_ERROR_LIMIT);
  g_clear_error (&err);
  g_assert_false (ppx_engine_measure_tick (e, 0, 1, ms, NULL, &err));
  g_assert_error (err, PPX_ERROR, PPX_ERROR_INVALID);
  g_clear_error (&err);
  g_assert_cmpint (ppx_engine_tick_rows (e, 3), ==, 3); /* unpadded, or a bucket of at most 3 slots */
  /* the session that stayed still steps, and its tick is counted */
  float in[1920] = {0}, out[1920];
  const float *ins[1] = {in};
  float *outs[1] = {out};
  g_assert_true (ppx_engine_step (e, &kept, 1, ins, outs, NULL, &err));
  g_assert_no_error (err);
  ppx_engine_tick_times (e, &t);
  g_assert_cmpuint (t.ticks, ==, 1);
  ppx_session_free (kept);
  ppx_engine_unref (e);
}

static void
load_sources (void)
{
  g_autoptr (GError) err = NULL;
  const PpxStTensor *u = ppx_st_find (G.golden, "user_pcm"), *v = ppx_st_find (G.golden, "voice_pcm");
  g_assert_true (u && v);
  sources[n_sources++] = (Source){g_memdup2 (u->data, u->nbytes), (gsize) u->shape[0]};
  const char *data = ppx_test_data_dir ();
  const char *clips[2] = {"input_assistant.wav", "input_service.wav"};
  for (int i = 0; data && i < 2; i++) {
    g_autofree char *path = g_build_filename (data, clips[i], NULL);
    gsize n = 0;
    float *pcm = g_file_test (path, G_FILE_TEST_EXISTS) ? ppx_audio_read (path, 24000, &n, &err) : NULL;
    g_assert_no_error (err);
    if (pcm)
      sources[n_sources++] = (Source){pcm, n};
  }
  sources[n_sources++] = (Source){g_memdup2 (v->data, v->nbytes), (gsize) v->shape[0]};
  /* the second audio voice: 1.2 s from the middle of the last data clip (or of the user audio) */
  const Source *src = &sources[n_sources > 2 ? n_sources - 2 : 0];
  const gsize len = MIN (src->n / 2, (gsize) 28800);
  voice2_wav = g_build_filename (G.dir, "voice2.wav", NULL);
  g_assert_true (ppx_audio_write_f32 (voice2_wav, src->pcm + src->n / 2 - len / 2, len, 24000, &err));
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  on_gpu = argc > 1 && strcmp (argv[1], "cuda") == 0;
  if (on_gpu && !ppx_backend_cuda_available (NULL)) {
    g_printerr ("no usable GPU; skipping\n");
    return PPX_TEST_SKIP;
  }
  golden_model_setup (&G);
  short_run = g_strcmp0 (g_getenv ("PPX_TEST_ENGINE_SHORT"), "1") == 0;
  g_autoptr (GError) err = NULL;
  PpxModelParams mp;
  ppx_model_params_init (&mp);
  mp.model_dir = G.dir;
  mp.backend = on_gpu ? PPX_BACKEND_CUDA : PPX_BACKEND_CPU;
  model = ppx_model_load (&mp, &err);
  g_assert_no_error (err);
  fs = ppx_model_frame_size (model);
  load_sources ();
  const int all[] = {1, 2, 3, 4, 5, 6, 7, 8}, few[] = {1, 4};
  const int *ns = short_run ? few : all;
  const int n_ns = short_run ? (int) G_N_ELEMENTS (few) : (int) G_N_ELEMENTS (all);
  for (int i = 0; i < n_ns; i++) {
    g_autofree char *name = g_strdup_printf ("/engine/batch-equals-alone/%d", ns[i]);
    g_test_add_data_func (name, GINT_TO_POINTER (ns[i]), test_batch_equals_alone);
  }
  g_test_add_func ("/engine/limit", test_limit);
  g_test_add_func ("/engine/join-from-thread", test_join_from_thread);
  g_test_add_func ("/engine/memory", test_memory);
  g_test_add_func ("/engine/bad-calls", test_bad_calls);
  g_test_add_func ("/engine/tick-times", test_tick_times);
  g_test_add_func ("/engine/measure-tick", test_measure_tick);
  int rc = g_test_run ();
  ppx_model_unref (model);
  g_unlink (voice2_wav);
  g_free (voice2_wav);
  for (int i = 0; i < n_sources; i++)
    g_free (sources[i].pcm);
  golden_model_teardown (&G);
  return rc;
}
