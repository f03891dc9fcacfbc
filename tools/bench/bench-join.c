#include "bench-join.h"

#include "audio-io.h"
#include "bench-measure.h"
#include "engine-internal.h"
#include "personaplex-internal.h"

#include <glib/gstdio.h>

#define SIGNAL_FRAMES 8  /* test-signal frames a running session cycles through */
#define SETTLE_TICKS 3   /* frame periods between joins */
#define WARMUP_TICKS 10  /* ticks before the first join (graphs recorded, caches warm) */

typedef struct {
  double due, start, end; /* ms: the frame's arrival (the tick's slot in the real-time grid), the call, its end */
} TickRec;

typedef struct {
  PpxEngine *engine;
  PpxSession **sessions;
  int B, fs;
  double period_ms;
  float *signal; /* [B, SIGNAL_FRAMES, fs] */
  gint stop;
  GMutex lock;
  GArray *ticks; /* TickRec */
  GError *error;
} Ticker;

/* One tick every frame period on the real-time grid; a late tick runs at once (and keeps its slot). */
static gpointer
tick_thread (gpointer data)
{
  Ticker *t = data;
  const float **ins = g_new (const float *, t->B);
  float *out = g_new (float, (gsize) t->B * t->fs);
  float **outs = g_new (float *, t->B);
  PpxFrameResult *res = g_new0 (PpxFrameResult, t->B);
  const double t0 = bench_now_ms ();
  for (gint64 k = 0; !g_atomic_int_get (&t->stop); k++) {
    const double due = t0 + k * t->period_ms, now = bench_now_ms ();
    if (now < due)
      g_usleep ((gulong) ((due - now) * 1000.0));
    for (int i = 0; i < t->B; i++) {
      ins[i] = t->signal + ((gsize) i * SIGNAL_FRAMES + k % SIGNAL_FRAMES) * t->fs;
      outs[i] = out + (gsize) i * t->fs;
    }
    TickRec r = {.due = due, .start = bench_now_ms ()};
    if (!ppx_engine_step (t->engine, t->sessions, t->B, ins, outs, res, &t->error))
      break;
    r.end = bench_now_ms ();
    g_mutex_lock (&t->lock);
    g_array_append_val (t->ticks, r);
    g_mutex_unlock (&t->lock);
  }
  g_free (ins);
  g_free (out);
  g_free (outs);
  g_free (res);
  return NULL;
}

typedef struct {
  const char *name;
  int chunk;            /* the engine's largest chunk in this mode (1: step by step) */
  int voices;           /* voice snapshots kept in this mode */
  int n;                /* joins measured */
  double *join_ms, *t0, *t1;
  guint64 chunks, frames, waits;
  int largest;          /* the largest chunk a measured join ran */
} Mode;

/* Waits about n frame periods (the running sessions tick meanwhile). */
static void
settle (const Ticker *t, int n)
{
  g_usleep ((gulong) (n * t->period_ms * 1000.0));
}

/* One join: the session made and freed; its time and the engine's prompt counters over it go to m's join i. */
static gboolean
join_once (Ticker *t, const PpxSessionParams *p, Mode *m, int i, GError **error)
{
  PpxPromptClock before, after;
  ppx_engine_prompt_clock (t->engine, &before);
  const double t0 = bench_now_ms ();
  PpxSession *s = ppx_engine_session_new (t->engine, p, error);
  const double t1 = bench_now_ms ();
  if (!s)
    return FALSE;
  ppx_engine_prompt_clock (t->engine, &after);
  ppx_session_free (s);
  {
    m->join_ms[i] = t1 - t0;
    m->t0[i] = t0;
    m->t1[i] = t1;
    m->chunks += after.chunks - before.chunks;
    m->frames += after.frames - before.frames;
    m->waits += after.waits - before.waits;
    m->largest = after.max_rows;
  }
  return TRUE;
}

/* The ticks' responses (end - due), those that overlapped one of m's joins or (m NULL) no join of any mode. */
static void
tick_stats (const Ticker *t, const Mode *modes, int n_modes, const Mode *m, BenchStats *st, int *missed)
{
  g_autofree double *ms = g_new (double, MAX (t->ticks->len, 1));
  guint n = 0;
  *missed = 0;
  for (guint k = 0; k < t->ticks->len; k++) {
    const TickRec *r = &g_array_index (t->ticks, TickRec, k);
    const Mode *in = NULL;
    for (int q = 0; q < n_modes && !in; q++)
      for (int i = 0; i < modes[q].n && !in; i++)
        if (r->due < modes[q].t1[i] && r->end > modes[q].t0[i])
          in = &modes[q];
    if (in != m || k < WARMUP_TICKS)
      continue;
    ms[n++] = r->end - r->due;
    *missed += r->end - r->due > t->period_ms;
  }
  bench_stats_compute (ms, n, st);
}

/* The voice prompt: test audio written as a WAV file in `dir`. */
static char *
write_voice (const char *dir, double seconds, int sr, GError **error)
{
  const gsize n = (gsize) (seconds * sr);
  g_autofree float *pcm = g_new (float, MAX (n, 1));
  bench_test_signal (99, 0, (int) n, sr, pcm);
  char *path = g_build_filename (dir, "voice.wav", NULL);
  if (!ppx_audio_write_f32 (path, pcm, n, sr, error)) {
    g_free (path);
    return NULL;
  }
  return path;
}

static void
print_mode (FILE *out, const Ticker *t, const Mode *modes, int n_modes, const Mode *m)
{
  BenchStats js, ts;
  int missed;
  bench_stats_compute (m->join_ms, m->n, &js);
  tick_stats (t, modes, n_modes, m, &ts, &missed);
  g_autofree char *how = m->chunk == 1 ? g_strdup ("one single-row step a lock hold")
                                         : g_strdup_printf ("%5.1f chunks a join (largest %d rows, %.1f frames each), "
                                                            "%.1f waits for a gap", (double) m->chunks / MAX (m->n, 1),
                                                            m->largest, (double) m->frames / MAX (m->chunks, 1),
                                                            (double) m->waits / MAX (m->n, 1));
  fprintf (out, "%-13s join ms p50 %8.1f max %8.1f | %s | ticks during joins: %u, response ms p50 %6.2f p99 %6.2f "
           "max %6.2f, over the period: %d\n",
           m->name, js.p50, js.max, how, ts.n, ts.p50, ts.p99, ts.max, missed);
}

gboolean
bench_run_join (const BenchSetup *s, const BenchJoin *j, FILE *out, GError **error)
{
  PpxModelParams mp;
  bench_model_params (s, &mp);
  const double l0 = bench_now_ms ();
  PpxModel *model = ppx_model_load (&mp, error);
  if (!model)
    return FALSE;
  const int B = s->batch, fs = ppx_model_frame_size (model), sr = ppx_model_sample_rate (model);
  PpxEngineParams ep;
  ppx_engine_params_init (&ep);
  ep.max_sessions = B + 1;
  ep.kv_format = s->kv_format;
  ep.prompt_chunk = j->prompt_chunk;
  ep.no_cuda_graphs = s->cuda_graphs == BENCH_GRAPHS_OFF;
  ep.voice_snapshots = -1; /* the modes below set it */
  Ticker t = {.B = B, .fs = fs, .period_ms = 1000.0 * fs / sr, .ticks = g_array_new (FALSE, FALSE, sizeof (TickRec))};
  g_mutex_init (&t.lock);
  g_autofree char *dir = g_dir_make_tmp ("ppx-bench-join-XXXXXX", error);
  g_autofree char *voice = dir ? write_voice (dir, j->voice_seconds, sr, error) : NULL;
  g_autofree char *cache = dir ? g_build_filename (dir, "cache", NULL) : NULL;
  gboolean ok = voice && (t.engine = ppx_engine_new (model, &ep, error));
  PpxPromptClock clock0;
  if (ok)
    ppx_engine_prompt_clock (t.engine, &clock0);
  t.sessions = g_new0 (PpxSession *, B);
  PpxSessionParams sp;
  ppx_session_params_init (&sp);
  for (int i = 0; ok && i < B; i++) {
    sp.seed = s->seed + (guint64) i;
    ok = (t.sessions[i] = ppx_engine_session_new (t.engine, &sp, error)) != NULL;
    if (ok)
      bench_fill_context (ppx_session_lmgen (t.sessions[i]), s->context);
  }
  t.signal = g_new (float, (gsize) B * SIGNAL_FRAMES * fs);
  for (int i = 0; i < B; i++)
    for (int k = 0; k < SIGNAL_FRAMES; k++)
      bench_test_signal (i, k, fs, sr, t.signal + ((gsize) i * SIGNAL_FRAMES + k) * fs);
  const int largest = ok ? clock0.sizes[clock0.n_sizes - 1] : 1;
  /* the three modes, then the unmeasured warm-up joins (their ticks are in no mode's figures) */
  enum { N_MODES = 3, WARM = N_MODES };
  Mode modes[N_MODES + 1] = {{.name = "step by step", .chunk = 1},
                             {.name = "prefill", .chunk = largest},
                             {.name = "+ voice copy", .chunk = largest, .voices = 1},
                             {.name = "warm-up"}};
  const int first = j->compare ? 0 : 1;
  for (int q = 0; q <= N_MODES; q++) {
    modes[q].join_ms = g_new0 (double, MAX (j->joins, N_MODES + 1));
    modes[q].t0 = g_new0 (double, MAX (j->joins, N_MODES + 1));
    modes[q].t1 = g_new0 (double, MAX (j->joins, N_MODES + 1));
  }
  Mode *warm = &modes[WARM];
  g_autofree int *text = g_new (int, MAX (j->text_tokens, 1));
  for (int i = 0; i < j->text_tokens; i++)
    text[i] = 4 + (int) ((i * 2654435761u) % (guint) (model->cfg.lm.text_card - 4));
  PpxSessionParams jp;
  ppx_session_params_init (&jp);
  jp.voice_prompt = voice;
  jp.voice_cache_dir = cache;
  jp.text_prompt_tokens = text;
  jp.n_text_prompt_tokens = j->text_tokens;
  jp.seed = 4242;
  GThread *th = NULL;
  double warm_ms = 0;
  if (ok) {
    fprintf (out, "join: %s weights on %s, loaded in %.1f s; %d running sessions at context %" G_GINT64_FORMAT
             " (%s KV) ticked every %.0f ms; the joining call: %.1f s voice prompt (replayed from its cached embeddings, as "
             "a .pt voice), %d text tokens; %d joins a mode\n",
             ppx_model_quantization_name (model), ppx_model_backend_name (model), (bench_now_ms () - l0) / 1000.0, B,
             s->context, ppx_kv_format_name (s->kv_format), t.period_ms, j->voice_seconds, j->text_tokens, j->joins);
    fflush (out);
    if (B > 0) /* no running call: nothing ticks, the joins are the prompts' compute alone */
      th = g_thread_new ("ticks", tick_thread, &t);
    settle (&t, WARMUP_TICKS);
    ok = join_once (&t, &jp, warm, warm->n++, error); /* encodes the voice and writes its embeddings cache */
    warm_ms = warm->join_ms[0];
  }
  for (int q = first; ok && q < N_MODES; q++) {
    ppx_engine_set_prompt_chunk (t.engine, modes[q].chunk);
    ppx_engine_set_voice_snapshots (t.engine, modes[q].voices);
    settle (&t, SETTLE_TICKS);
    ok = join_once (&t, &jp, warm, warm->n++, error); /* unmeasured: the chunk costs of this mode are learnt */
    for (int i = 0; ok && i < j->joins; i++) {
      settle (&t, SETTLE_TICKS);
      ok = join_once (&t, &jp, &modes[q], i, error);
      modes[q].n += ok;
    }
  }
  if (th) {
    settle (&t, SETTLE_TICKS);
    g_atomic_int_set (&t.stop, 1);
    g_thread_join (th);
  }
  if (t.error && ok) {
    g_propagate_error (error, t.error);
    t.error = NULL;
    ok = FALSE;
  }
  if (ok) {
    fprintf (out, "first join (the voice encoded, its embeddings cached): %.1f ms\n", warm_ms);
    BenchStats base;
    int missed;
    tick_stats (&t, modes, N_MODES + 1, NULL, &base, &missed);
    fprintf (out, "%-13s %u ticks, response ms p50 %6.2f p99 %6.2f max %6.2f, over the period: %d\n", "no join", base.n,
             base.p50, base.p99, base.max, missed);
    for (int q = first; q < N_MODES; q++)
      print_mode (out, &t, modes, N_MODES + 1, &modes[q]);
    PpxPromptClock c;
    ppx_engine_prompt_clock (t.engine, &c);
    fprintf (out, "prefill chunk cost (running mean, ms):");
    for (int i = 0; i < c.n_sizes; i++)
      if (c.cost_ms[i] > 0)
        fprintf (out, " %d: %.2f", c.sizes[i], c.cost_ms[i]);
    fprintf (out, "\n");
    int n_voices;
    const guint64 vb = ppx_engine_voice_snapshot_bytes (t.engine, &n_voices);
    fprintf (out, "voice snapshot: %.1f MB of device memory for the %.1f s voice (%d kept)\n", vb / 1e6 / MAX (n_voices, 1),
             j->voice_seconds, n_voices);
  }
  for (int i = 0; i < B; i++)
    ppx_session_free (t.sessions[i]);
  for (int q = 0; q <= N_MODES; q++) {
    g_free (modes[q].join_ms);
    g_free (modes[q].t0);
    g_free (modes[q].t1);
  }
  g_free (t.sessions);
  g_free (t.signal);
  g_clear_error (&t.error);
  g_array_free (t.ticks, TRUE);
  g_mutex_clear (&t.lock);
  ppx_engine_unref (t.engine);
  ppx_model_unref (model);
  if (dir) {
    g_autoptr (GDir) d = g_dir_open (cache, 0, NULL);
    for (const char *name; d && (name = g_dir_read_name (d));) {
      g_autofree char *p = g_build_filename (cache, name, NULL);
      g_unlink (p);
    }
    g_rmdir (cache);
    if (voice)
      g_unlink (voice);
    g_rmdir (dir);
  }
  return ok;
}
