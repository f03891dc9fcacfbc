/* The GPU tick (docs/engine.md): LMGen on the device and CUDA graphs, on a GPU (exits 77 without one).
 *  - ops: ppx_op_lmgen_prepare/finish and ppx_op_positions on CUDA give exactly the CPU backend's ints;
 *  - graphs: a recorded sequence replays like the eager one; a recording that needs scratch memory fails
 *    once and succeeds when recorded again; a graph is stale after the scratch buffer moves; another
 *    thread's ops during a recording run at once and are not recorded;
 *  - the engine on the golden tiny model, N = 1..4 greedy sessions (different audio, voices, prompts):
 *    graphs on and off give identical tokens and bit-identical PCM, and the same tokens as the CPU engine
 *    (PCM within 1e-3); with sessions missing ticks, joining and leaving (eager fallback ticks between
 *    graphed ones) the same holds; with a ready session that never ticks (a server's model keeper) every
 *    tick of the others but the first is padded and graphed. The figures printed: graph nodes per bucket,
 *    ticks graphed.
 * Usage: test-gpu-tick [--bench]   (--bench: tiny-model tick time with graphs on/off, printed) */
#include <math.h>

#include "backend.h"
#include "engine-schedule.h"
#include "golden-model.h"
#include "lmgen.h"
#include "model-internal.h"

static PpxBackend *cpu, *gpu;

/* ---- the device LMGen ops: CUDA == CPU ---- */

static void
random_state (GRand *r, const PpxLmConfig *c, int32_t *st)
{
  PpxLmGen g;
  ppx_lmgen_init (&g, c);
  g.offset = g_rand_int_range (r, 1, 9);
  g.full_depformer = g_rand_int_range (r, 0, 4) == 0;
  for (int k = 0; k < PPX_MAX_STREAMS; k++) {
    for (int col = 0; col < PPX_LMGEN_COLS; col++) {
      g.cache[k][col] = g_rand_int_range (r, -2, c->card);
      g.provided[k][col] = g_rand_boolean (r);
    }
  }
  ppx_lmgen_pack (&g, st);
}

static void
test_lmgen_ops (void)
{
  g_autoptr (GError) err = NULL;
  PpxConfig cfg;
  ppx_config_default (&cfg);
  g_assert_true (ppx_config_finish (&cfg, "default", NULL));
  PpxLmgenDims d;
  ppx_lmgen_dims (&cfg.lm, &d);
  GRand *r = g_rand_new_with_seed (5);
  const int M = 37, n_slots = 50, W = PPX_MAX_STREAMS, OUTW = W + PPX_LMGEN_STATE, CS = 9;
  g_autofree int32_t *st = g_new (int32_t, (gsize) n_slots * PPX_LMGEN_STATE), *slot = g_new (int32_t, M);
  g_autofree int32_t *codes = g_new (int32_t, (gsize) M * CS), *sampled = g_new (int32_t, (gsize) M * W);
  for (int s = 0; s < n_slots; s++)
    random_state (r, &cfg.lm, st + (gsize) s * PPX_LMGEN_STATE);
  for (int m = 0; m < M; m++)
    slot[m] = (m * 7 + 3) % n_slots; /* distinct */
  PpxBackend *bes[2] = {cpu, gpu};
  PpxTensor *t[2][9];
  int32_t *res[2][7] = {{NULL}};
  for (int b = 0; b < 2; b++) {
    const gsize sizes[9] = {(gsize) n_slots * PPX_LMGEN_STATE, M, (gsize) M * CS, (gsize) M * W, (gsize) M * W, M,
                            (gsize) M * PPX_SAMPLE_PARAMS, (gsize) M * W, (gsize) M * OUTW};
    for (int i = 0; i < 9; i++) {
      t[b][i] = ppx_tensor_new (bes[b], PPX_TENSOR_I32, sizes[i], &err);
      g_assert_no_error (err);
    }
    ppx_tensor_upload (t[b][0], 0, st, sizes[0]);
    ppx_tensor_upload (t[b][1], 0, slot, M);
  }
  for (int call = 0; call < 6; call++) {
    for (gsize j = 0; j < (gsize) M * CS; j++)
      codes[j] = g_rand_int_range (r, 0, 2048);
    for (gsize j = 0; j < (gsize) M * W; j++)
      sampled[j] = g_rand_int_range (r, 0, 2048);
    for (int b = 0; b < 2; b++) {
      ppx_tensor_upload (t[b][2], 0, codes, (gsize) M * CS);
      ppx_tensor_upload (t[b][7], 0, sampled, (gsize) M * W);
      ppx_op_lmgen_prepare (bes[b], &d, t[b][0], t[b][1], t[b][2], 1, CS, t[b][3], t[b][4], t[b][5], t[b][6], M);
      ppx_op_lmgen_finish (bes[b], &d, t[b][0], t[b][1], t[b][7], t[b][8], OUTW, M);
      const int which[7] = {0, 3, 4, 5, 6, 8, 8};
      for (int i = 0; i < 6; i++) {
        PpxTensor *x = t[b][which[i]];
        g_free (res[b][i]);
        res[b][i] = g_new (int32_t, ppx_tensor_numel (x));
        ppx_tensor_download (x, 0, res[b][i], ppx_tensor_numel (x));
      }
    }
    const int which[6] = {0, 3, 4, 5, 6, 8};
    for (int i = 0; i < 6; i++) {
      const gsize n = ppx_tensor_numel (t[0][which[i]]);
      for (gsize j = 0; j < n; j++)
        if (res[0][i][j] != res[1][i][j])
          g_error ("call %d tensor %d word %" G_GSIZE_FORMAT ": CPU %d, CUDA %d", call, which[i], j, res[0][i][j],
                   res[1][i][j]);
    }
  }
  /* positions on a view of rows */
  for (int b = 0; b < 2; b++) {
    PpxTensor *off = ppx_tensor_new (bes[b], PPX_TENSOR_I32, 9, &err), *pos = ppx_tensor_new (bes[b], PPX_TENSOR_I32, 14, &err);
    const int32_t start[9] = {5, 0, 1, 2, 3, 4, 5, 6, 1000000};
    ppx_tensor_upload (off, 0, start, 9);
    PpxTensor *v = ppx_tensor_view (off, 1, 7);
    ppx_op_positions (bes[b], v, pos, 7, 2);
    ppx_op_positions (bes[b], v, pos, 7, 2);
    int32_t p[14], o[9];
    ppx_tensor_download (pos, 0, p, 14);
    ppx_tensor_download (off, 0, o, 9);
    for (int m = 0; m < 7; m++) {
      g_assert_cmpint (p[2 * m], ==, start[1 + m] + 2);
      g_assert_cmpint (p[2 * m + 1], ==, start[1 + m] + 3);
      g_assert_cmpint (o[1 + m], ==, start[1 + m] + 4);
    }
    g_assert_cmpint (o[0], ==, 5);
    g_assert_cmpint (o[8], ==, 1000000);
    ppx_tensor_free (v);
    ppx_tensor_free (off);
    ppx_tensor_free (pos);
  }
  for (int b = 0; b < 2; b++) {
    for (int i = 0; i < 9; i++)
      ppx_tensor_free (t[b][i]);
    for (int i = 0; i < 7; i++)
      g_free (res[b][i]);
  }
  g_rand_free (r);
}

/* ---- the graph API ---- */

typedef struct {
  PpxBackend *be;
  gint go, done;
  float got;
} Other;

/* Another thread's upload, op and download while the main thread records: they run now. */
static gpointer
other_thread (gpointer data)
{
  Other *o = data;
  while (!g_atomic_int_get (&o->go))
    g_usleep (100);
  g_autoptr (GError) err = NULL;
  PpxTensor *a = ppx_tensor_new (o->be, PPX_TENSOR_F32, 4, &err);
  const float v[4] = {1, 2, 3, 4};
  ppx_tensor_upload (a, 0, v, 4);
  ppx_op_add (o->be, a, a, a, 4);
  float back[4];
  ppx_tensor_download (a, 0, back, 4);
  o->got = back[3];
  ppx_tensor_free (a);
  g_atomic_int_set (&o->done, 1);
  return NULL;
}

static void
test_graph_api (void)
{
  g_autoptr (GError) err = NULL;
  g_assert_true (ppx_backend_supports_graphs (gpu));
  const int M = 3, V = 3000;
  PpxTensor *logits = ppx_tensor_new (gpu, PPX_TENSOR_F32, (gsize) M * V, &err);
  PpxTensor *tok = ppx_tensor_new (gpu, PPX_TENSOR_I32, M, &err), *params = ppx_tensor_new (gpu, PPX_TENSOR_I32, (gsize) M * PPX_SAMPLE_PARAMS, &err);
  PpxTensor *off = ppx_tensor_new (gpu, PPX_TENSOR_I32, M, &err), *pos = ppx_tensor_new (gpu, PPX_TENSOR_I32, M, &err);
  g_assert_no_error (err);
  g_autofree float *lv = g_new (float, (gsize) M * V);
  for (int i = 0; i < M * V; i++)
    lv[i] = (float) ((i * 7919) % 1000) / 100.0f;
  ppx_tensor_upload (logits, 0, lv, (gsize) M * V);
  /* a sampling op (scratch memory) and a position counter; record until it succeeds */
  PpxGraph *g = NULL;
  int attempts = 0;
  Other o = {.be = gpu};
  GThread *th = g_thread_new ("other", other_thread, &o);
  while (!g && attempts < 3) {
    attempts++;
    g_clear_error (&err);
    g_assert_true (ppx_backend_graph_begin (gpu, &err));
    g_assert_false (ppx_backend_graph_begin (gpu, &err)); /* one recording per thread */
    g_assert_error (err, PPX_ERROR, PPX_ERROR_INVALID);
    g_clear_error (&err);
    ppx_op_sample (gpu, logits, V, tok, 0, 1, params, 0, M);
    ppx_op_positions (gpu, off, pos, M, 1);
    if (attempts == 1) { /* the other thread works on the backend meanwhile */
      g_atomic_int_set (&o.go, 1);
      while (!g_atomic_int_get (&o.done))
        g_usleep (100);
    }
    g = ppx_backend_graph_end (gpu, &err);
  }
  g_clear_error (&err);
  g_thread_join (th);
  g_assert_cmpfloat (o.got, ==, 8.0f);
  g_assert_nonnull (g);
  g_printerr ("  graph recorded after %d attempt(s), %" G_GSIZE_FORMAT " nodes\n", attempts, ppx_graph_nodes (g));
  g_assert_cmpuint (ppx_graph_nodes (g), >=, 2);
  int32_t p[3], o3[3], t3[3];
  ppx_tensor_download (off, 0, o3, M);
  g_assert_cmpint (o3[0], ==, 0); /* recorded, not run */
  for (int rep = 0; rep < 5; rep++)
    g_assert_true (ppx_backend_graph_launch (gpu, g));
  ppx_tensor_download (pos, 0, p, M);
  ppx_tensor_download (off, 0, o3, M);
  ppx_tensor_download (tok, 0, t3, M);
  g_assert_cmpint (p[0], ==, 4);
  g_assert_cmpint (o3[2], ==, 5);
  for (int m = 0; m < M; m++) { /* greedy rows (zero parameters): the argmax */
    int best = 0;
    for (int i = 1; i < V; i++)
      if (lv[m * V + i] > lv[m * V + best])
        best = i;
    g_assert_cmpint (t3[m], ==, best);
  }
  /* the scratch buffer grows: the graph is stale */
  const int BIG = 4000;
  PpxTensor *bl = ppx_tensor_new (gpu, PPX_TENSOR_F32, (gsize) BIG * V, &err), *bt = ppx_tensor_new (gpu, PPX_TENSOR_I32, BIG, &err);
  PpxTensor *bp = ppx_tensor_new (gpu, PPX_TENSOR_I32, (gsize) BIG * PPX_SAMPLE_PARAMS, &err);
  g_assert_no_error (err);
  ppx_op_sample (gpu, bl, V, bt, 0, 1, bp, 0, BIG);
  g_assert_false (ppx_backend_graph_launch (gpu, g));
  ppx_graph_free (g);
  PpxTensor *ts[] = {logits, tok, params, off, pos, bl, bt, bp};
  for (guint i = 0; i < G_N_ELEMENTS (ts); i++)
    ppx_tensor_free (ts[i]);
}

/* ---- the engine ---- */

static GoldenModel G;
static PpxModel *m_cpu, *m_gpu;
static const float *user_pcm;
static gsize user_n;
static int fs;

static void
session_params (int i, PpxSessionParams *p)
{
  golden_session_params (&G, i, TRUE, p);
}

static void
input_frame (int i, int k, float *out)
{
  for (int j = 0; j < fs; j++)
    out[j] = user_pcm[((gsize) i * 7919 + (gsize) k * fs + j) % user_n];
}

/* The mean tick time from the fifth tick on (the first ones record graphs). */
typedef struct {
  double total;
  int counted;
} TickTimes;

static void
count_tick (PpxEngine *e, int t, void *data)
{
  TickTimes *tt = data;
  if (t >= 4) {
    tt->total += ppx_engine_last_tick_ms (e);
    tt->counted++;
  }
}

/* n sessions on one engine of `slots` slots for `ticks` ticks, as sched says. */
static void
run_engine (PpxModel *model, gboolean no_graphs, int slots, int n, const PpxSched *sched, int ticks,
            PpxSchedOut *outs, PpxEngineTickStats *st, double *tick_ms)
{
  g_autoptr (GError) err = NULL;
  PpxEngineParams ep;
  ppx_engine_params_init (&ep);
  ep.max_sessions = slots;
  ep.kv_format = PPX_KV_F32;
  ep.no_cuda_graphs = no_graphs;
  PpxEngine *e = ppx_engine_new (model, &ep, &err);
  g_assert_no_error (err);
  g_assert_cmpint (n, <=, slots);
  TickTimes tt = {0, 0};
  const PpxSchedHooks hooks = {session_params, input_frame, count_tick, &tt};
  ppx_sched_run (e, n, sched, ticks, fs, &hooks, outs);
  ppx_engine_tick_stats (e, st);
  if (tick_ms)
    *tick_ms = tt.counted ? tt.total / tt.counted : 0;
  ppx_engine_unref (e);
}

/* Tokens must be identical; PCM within tol (0: bit for bit). */
static void
compare (const char *what, int i, const PpxSchedOut *a, const PpxSchedOut *b, double tol)
{
  g_assert_cmpint (a->frames, ==, b->frames);
  int diff = 0;
  double err = 0;
  for (gsize j = 0; j < (gsize) a->frames * 17; j++)
    diff += a->tokens[j] != b->tokens[j];
  for (gsize j = 0; j < (gsize) a->frames * fs; j++)
    err = MAX (err, fabs ((double) a->pcm[j] - b->pcm[j]));
  if (diff || err > tol)
    g_printerr ("  %s, session %d: %d token differences in %d frames, PCM max abs diff %.3g\n", what, i, diff,
                a->frames, err);
  g_assert_cmpint (diff, ==, 0);
  g_assert_cmpfloat (err, <=, tol);
}

/* The scenario with graphs on, off and on the CPU (engines of `slots` slots); *on_stats (may be NULL) gets the
 * stats of the run with graphs on. */
static void
check_scenario (int slots, int n, const PpxSched *sched, int ticks, const char *name, gboolean expect_graphs,
                PpxEngineTickStats *on_stats)
{
  PpxSchedOut on[4], off[4], ref[4];
  PpxEngineTickStats s_on, s_off, s_cpu;
  g_assert_cmpint (n, <=, 4);
  run_engine (m_gpu, FALSE, slots, n, sched, ticks, on, &s_on, NULL);
  run_engine (m_gpu, TRUE, slots, n, sched, ticks, off, &s_off, NULL);
  run_engine (m_cpu, FALSE, slots, n, sched, ticks, ref, &s_cpu, NULL);
  g_printerr ("  %s, N = %d: %" G_GUINT64_FORMAT " ticks, %" G_GUINT64_FORMAT " graphed, %" G_GUINT64_FORMAT
              " padded, %d graph(s), last %" G_GUINT64_FORMAT " nodes\n",
              name, n, s_on.ticks, s_on.graph_ticks, s_on.padded_ticks, s_on.graphs, s_on.graph_nodes);
  double pcm_cpu = 0;
  for (int i = 0; i < n; i++) {
    compare ("graphs on vs off", i, &on[i], &off[i], 0.0);
    compare ("GPU vs CPU", i, &on[i], &ref[i], 1e-3);
    for (gsize j = 0; j < (gsize) on[i].frames * fs; j++)
      pcm_cpu = MAX (pcm_cpu, fabs ((double) on[i].pcm[j] - ref[i].pcm[j]));
    ppx_sched_out_clear (&on[i]);
    ppx_sched_out_clear (&off[i]);
    ppx_sched_out_clear (&ref[i]);
  }
  g_printerr ("  %s, N = %d: tokens identical (graphs on/off/CPU), PCM on == off bit for bit, |GPU - CPU| <= %.3g\n",
              name, n, pcm_cpu);
  g_assert_cmpuint (s_off.graph_ticks, ==, 0);
  g_assert_cmpuint (s_off.padded_ticks, ==, s_on.padded_ticks);
  g_assert_cmpuint (s_cpu.graph_ticks, ==, 0);
  g_assert_cmpuint (s_cpu.padded_ticks, ==, 0); /* the CPU never pads */
  if (expect_graphs) {
    g_assert_cmpuint (s_on.graph_ticks, >, 0);
    g_assert_cmpuint (s_on.graph_ticks, ==, s_on.padded_ticks); /* every padded tick replayed its graph */
  }
  if (on_stats)
    *on_stats = s_on;
}

static void
test_engine_steady (gconstpointer data)
{
  const int n = GPOINTER_TO_INT (data);
  PpxSched sched[4];
  for (int i = 0; i < 4; i++)
    sched[i] = (PpxSched){0, -1, 0, 0};
  check_scenario (4, n, sched, 34, "steady", TRUE, NULL); /* 34 frames: the LM (20) and Mimi (15 frames) rings wrap */
}

static void
test_engine_churn (gconstpointer data)
{
  const int n = GPOINTER_TO_INT (data);
  PpxSched sched[4];
  for (int i = 0; i < 4; i++)
    sched[i] = (PpxSched){0, -1, 0, 0};
  sched[0].skip_mod = 5;            /* misses ticks: those run unpadded, eagerly */
  if (n >= 2)
    sched[n - 1].join = 7;          /* joins: its first tick runs eagerly, then the bucket changes */
  if (n >= 3)
    sched[1].leave = 22;            /* leaves: rows move, a smaller bucket */
  check_scenario (4, n, sched, 36, "churn", TRUE, NULL);
}

/* A ready session that never ticks (a server's model keeper, session 0: the first slot) beside n = 1..3 ticking
 * ones on 8 slots: it holds no Mimi row, so every tick of the others but their first (a fresh codec) is padded to
 * its bucket and replayed from its graph. Then the same keeper ticking from tick 20 on (its first tick runs
 * unpadded, eagerly; the ticks after it are padded and graphed again). Results as in every scenario. */
static void
test_engine_keeper (gconstpointer data)
{
  const int n = GPOINTER_TO_INT (data), ticks = 34;
  PpxSched sched[4];
  for (int i = 0; i <= n; i++)
    sched[i] = (PpxSched){0, -1, 0, i == 0 ? 1000 : 0};
  PpxEngineTickStats st;
  check_scenario (8, n + 1, sched, ticks, "keeper", TRUE, &st);
  g_assert_cmpuint (st.ticks, ==, ticks);
  g_assert_cmpuint (st.padded_ticks, ==, ticks - 1);
  g_assert_cmpuint (st.graph_ticks, ==, ticks - 1);
  sched[0].start = 20;
  check_scenario (8, n + 1, sched, ticks, "keeper ticking from tick 20", TRUE, &st);
  g_assert_cmpuint (st.padded_ticks, ==, ticks - 2);
  g_assert_cmpuint (st.graph_ticks, ==, ticks - 2);
}

static void
bench (void)
{
  PpxSched sched[4] = {{0, -1, 0, 0}, {0, -1, 0, 0}, {0, -1, 0, 0}, {0, -1, 0, 0}};
  for (int n = 1; n <= 4; n++) {
    PpxSchedOut o[4];
    PpxEngineTickStats st;
    double on_ms, off_ms;
    run_engine (m_gpu, FALSE, 4, n, sched, 60, o, &st, &on_ms);
    for (int i = 0; i < n; i++)
      ppx_sched_out_clear (&o[i]);
    run_engine (m_gpu, TRUE, 4, n, sched, 60, o, &st, &off_ms);
    for (int i = 0; i < n; i++)
      ppx_sched_out_clear (&o[i]);
    g_printerr ("tiny model, N = %d: tick %.3f ms with graphs, %.3f ms without\n", n, on_ms, off_ms);
  }
}

int
main (int argc, char **argv)
{
  if (!ppx_backend_cuda_available (NULL)) {
    g_printerr ("no usable GPU; skipping\n");
    return PPX_TEST_SKIP;
  }
  const gboolean bench_only = argc > 1 && g_str_equal (argv[1], "--bench");
  g_autoptr (GError) err = NULL;
  cpu = ppx_backend_cpu_new (0, &err);
  gpu = ppx_backend_cuda_new (0, &err);
  g_assert_no_error (err);
  const gboolean golden = ppx_test_golden_dir () != NULL;
  if (golden) {
    golden_model_setup (&G);
    m_cpu = golden_model_load (&G, PPX_BACKEND_CPU);
    m_gpu = golden_model_load (&G, PPX_BACKEND_CUDA);
    fs = ppx_model_frame_size (m_gpu);
    const PpxStTensor *u = ppx_st_find (G.golden, "user_pcm");
    user_pcm = (const float *) u->data;
    user_n = (gsize) u->shape[0];
  }
  int rc = 0;
  if (bench_only) {
    if (golden)
      bench ();
  } else {
    g_test_init (&argc, &argv, NULL);
    g_test_add_func ("/gpu-tick/lmgen-ops", test_lmgen_ops);
    g_test_add_func ("/gpu-tick/graph-api", test_graph_api);
    for (int n = 1; golden && n <= 4; n++) {
      g_autofree char *a = g_strdup_printf ("/gpu-tick/engine-steady/%d", n);
      g_autofree char *b = g_strdup_printf ("/gpu-tick/engine-churn/%d", n);
      g_test_add_data_func (a, GINT_TO_POINTER (n), test_engine_steady);
      g_test_add_data_func (b, GINT_TO_POINTER (n), test_engine_churn);
    }
    for (int n = 1; golden && n <= 3; n++) {
      g_autofree char *k = g_strdup_printf ("/gpu-tick/engine-keeper/%d", n);
      g_test_add_data_func (k, GINT_TO_POINTER (n), test_engine_keeper);
    }
    rc = g_test_run ();
  }
  if (golden) {
    ppx_model_unref (m_cpu);
    ppx_model_unref (m_gpu);
    golden_model_teardown (&G);
  }
  ppx_backend_free (cpu);
  ppx_backend_free (gpu);
  return rc;
}
