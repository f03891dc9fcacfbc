/* test-backend-cuda's benchmarks (--bench, --bench-attention, --bench-conv, --bench-conv-sweep): GPU time
 * of the linear layers, attention and Mimi's convolutions at the model's shapes. */
#include "cuda-test.h"

/* ---- linear layer speed ---- */

/* xorshift floats in [-1, 1): the bench's matrices are too large for GRand to fill quickly */
static void
fast_random (float *v, gsize n, guint64 seed)
{
  guint64 s = seed * 0x9E3779B97F4A7C15ull + 1;
  for (gsize i = 0; i < n; i++) {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    v[i] = (float) ((double) (s >> 11) * (2.0 / 9007199254740992.0) - 1.0);
  }
}

/* One format and shape: copies of the matrix (enough that they do not fit in L2) cycled through in a CUDA
 * graph; the GPU time per call and, from it, the weight bytes per second and the multiply-adds per second
 * at each M. */
static void
bench_linear (Fmt f, int64_t rows, int64_t cols, const int *Ms, int n_ms, const int *slices, int n_slices)
{
  const gsize n = (gsize) rows * cols;
  g_autofree float *w = g_new (float, n);
  fast_random (w, n, (guint64) rows * 31 + cols);
  g_autofree void *data = NULL;
  g_autofree float *scales = NULL;
  PpxWeightDesc d = {.format = f.format, .rows = rows, .cols = cols, .group_size = f.group_size};
  if (f.format == PPX_WFMT_F32) {
    d.data = w;
  } else if (f.format == PPX_WFMT_BF16) {
    uint16_t *b = g_new (uint16_t, n);
    for (gsize i = 0; i < n; i++)
      b[i] = ppx_f32_to_bf16 (w[i]);
    d.data = data = b;
  } else if (f.format == PPX_WFMT_INT8) {
    data = g_new (int8_t, n);
    scales = g_new (float, rows);
    ppx_q8_quantize (w, rows, cols, data, scales);
    d.data = data;
    d.scales = scales;
  } else {
    data = g_malloc (ppx_q4_packed_bytes (rows, cols));
    scales = g_new (float, rows * ppx_q4_n_groups (cols, f.group_size));
    ppx_q4_quantize (w, rows, cols, f.group_size, data, scales);
    d.data = data;
    d.scales = scales;
  }
  g_autoptr (GError) err = NULL;
  PpxWeight *first = ppx_weight_new (gpu, &d, &err);
  g_assert_no_error (err);
  const guint64 bytes = ppx_weight_bytes (first);
  /* PPX_BENCH_COPIES=1 keeps one copy (L2-resident when it fits: the kernel's speed without HBM) */
  const char *copies_env = g_getenv ("PPX_BENCH_COPIES");
  const int copies = copies_env ? (int) CLAMP (g_ascii_strtoll (copies_env, NULL, 10), 1, 16) : (int) MIN (16, 1 + (512ull << 20) / bytes);
  PpxWeight **ws = g_new (PpxWeight *, copies);
  ws[0] = first;
  for (int i = 1; i < copies; i++) {
    ws[i] = ppx_weight_new (gpu, &d, &err);
    g_assert_no_error (err);
  }
  const int Mmax = Ms[n_ms - 1];
  PpxTensor *x = ppx_tensor_new (gpu, PPX_TENSOR_F32, (gsize) Mmax * cols, &err);
  PpxTensor *y = ppx_tensor_new (gpu, PPX_TENSOR_F32, (gsize) Mmax * rows, &err);
  g_assert_no_error (err);
  g_autofree float *xv = g_new (float, (gsize) Mmax * cols);
  fast_random (xv, (gsize) Mmax * cols, 7);
  ppx_tensor_upload (x, 0, xv, (gsize) Mmax * cols);
  double us1 = 0;
  for (int i = 0; i < n_ms; i++)
    for (int j = 0; j < n_slices; j++) {
      if (j > 0 && Ms[i] <= 8)
        break; /* one slice at M <= 8 */
      double us = 0;
      const int calls = copies * MAX (1, 120 / copies);
      ppx_backend_cuda_linear_force_slice (slices[j]);
      const gboolean ok = ppx_backend_cuda_time_linear (gpu, ws, copies, x, y, Ms[i], calls, 9, &us, &err);
      ppx_backend_cuda_linear_force_slice (0);
      if (!ok) {
        printf ("%-8s %6" G_GINT64_FORMAT " x %-6" G_GINT64_FORMAT " M=%d: %s\n", fmt_name (f), rows, cols, Ms[i],
                err->message);
        g_clear_error (&err);
        continue;
      }
      if (i == 0 && j == 0)
        us1 = us;
      char sl[24] = "";
      if (n_slices > 1 || slices[0] != 0)
        g_snprintf (sl, sizeof sl, "  slice=%d", slices[j]);
      printf ("%-8s %6" G_GINT64_FORMAT " x %-6" G_GINT64_FORMAT " %7.1f MB  M=%-2d %8.2f us %6.0f GB/s %7.1f TFLOP/s  "
              "%5.2fx M=%d%s\n",
              fmt_name (f), rows, cols, bytes / 1e6, Ms[i], us, bytes / us / 1e3, 2.0 * Ms[i] * n / us / 1e6, us / us1,
              Ms[0], sl);
      fflush (stdout);
    }
  for (int i = 0; i < copies; i++)
    ppx_weight_free (ws[i]);
  g_free (ws);
  ppx_tensor_free (x);
  ppx_tensor_free (y);
}

/* ---- attention bandwidth ---- */

/* Best of 5 timings of `iters` attention calls rotating over the cache copies, in microseconds a call:
 * launched one by one and timed on the host (*host), and recorded once as a CUDA graph and replayed
 * (*graph: no launch gaps, as the engine's tick runs it; NAN when the backend records no graphs). */
static void
time_attention (PpxTensor *qkv, PpxTensor *p, PpxTensor *sl, PpxTensor **k, PpxTensor **v, int copies, PpxTensor *out,
                int M, int T, int H, int Dh, int cap, double *host, double *graph)
{
  const int iters = copies * MAX (1, 64 / copies);
  for (int i = 0; i < copies * 2; i++)
    ppx_op_attention (gpu, qkv, p, sl, k[i % copies], v[i % copies], out, M, T, H, Dh, cap, cap);
  ppx_backend_sync (gpu);
  *host = *graph = INFINITY;
  for (int rep = 0; rep < 5; rep++) {
    gint64 t0 = g_get_monotonic_time ();
    for (int i = 0; i < iters; i++)
      ppx_op_attention (gpu, qkv, p, sl, k[i % copies], v[i % copies], out, M, T, H, Dh, cap, cap);
    ppx_backend_sync (gpu);
    *host = MIN (*host, (double) (g_get_monotonic_time () - t0) / iters);
  }
  g_autoptr (GError) err = NULL;
  PpxGraph *g = NULL;
  for (int attempt = 0; attempt < 2 && !g && ppx_backend_supports_graphs (gpu); attempt++) {
    g_clear_error (&err);
    if (!ppx_backend_graph_begin (gpu, &err))
      break;
    for (int i = 0; i < iters; i++)
      ppx_op_attention (gpu, qkv, p, sl, k[i % copies], v[i % copies], out, M, T, H, Dh, cap, cap);
    g = ppx_backend_graph_end (gpu, &err);
  }
  if (!g) {
    *graph = NAN;
    return;
  }
  for (int rep = 0; rep < 6; rep++) {
    gint64 t0 = g_get_monotonic_time ();
    if (!ppx_backend_graph_launch (gpu, g))
      break;
    ppx_backend_sync (gpu);
    if (rep > 0) /* the first replay uploads the graph */
      *graph = MIN (*graph, (double) (g_get_monotonic_time () - t0) / iters);
  }
  ppx_graph_free (g);
}

/* Attention at full context (cap 3000, 32 heads of 128, positions past 3000) for M sessions of T rows: time
 * per call and the KV bytes it reads (M x 2 x 3000 x 4096 values, plus fp8 scales) per second. Enough copies
 * of the caches (one per layer, as in a frame) that the set is well over the L2. T > 1 is a prompt prefill:
 * rows at consecutive positions, each reading the whole ring once. */
static void
bench_attention (PpxKvFormat fmt, int M, int T)
{
  const int H = 32, Dh = 128, cap = 3000;
  const gsize HD = (gsize) H * Dh;
  const guint64 pair_bytes = 2 * ppx_kv_cache_bytes (ppx_kv_storage (fmt), M, cap, H, Dh);
  const int copies = (int) MIN (8, 1 + (768ull << 20) / pair_bytes);
  g_autoptr (GError) err = NULL;
  PpxTensor **k = g_new0 (PpxTensor *, copies), **v = g_new0 (PpxTensor *, copies);
  /* caches hold repeated random stored rows (values in [-1, 1]; fp8 codes with scale 1/448) */
  const gsize chunk = 8u << 20;
  g_autofree guint8 *pattern = g_malloc (chunk);
  for (gsize i = 0; i < chunk; i++) {
    if (fmt == PPX_KV_FP8) {
      const guint8 c = (guint8) g_rand_int_range (rng, 0, 256);
      pattern[i] = (c & 0x7f) == 0x7f ? 0x7e : c;
    } else if (fmt == PPX_KV_BF16 && i % 2 == 0) {
      const uint16_t b = ppx_f32_to_bf16 ((float) g_rand_double_range (rng, -1, 1));
      memcpy (pattern + i, &b, 2);
    } else if (fmt == PPX_KV_F32 && i % 4 == 0) {
      const float f = (float) g_rand_double_range (rng, -1, 1);
      memcpy (pattern + i, &f, 4);
    }
  }
  for (int i = 0; i < copies; i++) {
    k[i] = ppx_kv_cache_new (gpu, ppx_kv_storage (fmt), M, cap, H, Dh, &err);
    if (k[i])
      v[i] = ppx_kv_cache_new (gpu, ppx_kv_storage (fmt), M, cap, H, Dh, &err);
    if (!k[i] || !v[i]) {
      printf ("%-5s M=%-3d does not fit: %s\n", ppx_kv_format_name (fmt), M, err->message);
      for (int j = 0; j <= i; j++) {
        ppx_tensor_free (k[j]);
        ppx_tensor_free (v[j]);
      }
      g_free (k);
      g_free (v);
      return;
    }
    PpxTensor *both[2] = {k[i], v[i]};
    for (int b = 0; b < 2; b++) {
      const gsize n = ppx_tensor_numel (both[b]), es = fmt == PPX_KV_F32 ? 4 : fmt == PPX_KV_FP8 ? 1 : 2;
      for (gsize off = 0; off < n; off += chunk / es)
        ppx_tensor_upload (both[b], off, pattern, MIN (chunk / es, n - off));
    }
  }
  if (fmt == PPX_KV_FP8) { /* scales: upload_raw of a whole cache would need its size in host memory */
    const gsize n = (gsize) M * cap * HD, ns = (gsize) M * H * cap;
    g_autofree guint8 *raw = g_malloc (ppx_kv_cache_bytes (ppx_kv_storage (fmt), M, cap, H, Dh));
    memset (raw, 0x38, n); /* 1.0 */
    float *sc = (float *) (raw + ((n + 15) & ~(gsize) 15));
    for (gsize i = 0; i < ns; i++)
      sc[i] = 1.0f / 448.0f;
    for (int i = 0; i < copies; i++) {
      ppx_tensor_upload_raw (k[i], raw);
      ppx_tensor_upload_raw (v[i], raw);
      for (gsize off = 0; off < n; off += chunk) { /* random codes again */
        ppx_tensor_upload (k[i], off, pattern, MIN (chunk, n - off));
        ppx_tensor_upload (v[i], off, pattern, MIN (chunk, n - off));
      }
    }
  }
  g_autofree int32_t *pos = g_new (int32_t, M * T), *slots = g_new (int32_t, M);
  for (int m = 0; m < M; m++) {
    for (int t = 0; t < T; t++)
      pos[m * T + t] = 6000 + 37 * m + t;
    slots[m] = m;
  }
  PpxTensor *p = ppx_tensor_new (gpu, PPX_TENSOR_I32, (gsize) M * T, &err);
  PpxTensor *sl = ppx_tensor_new (gpu, PPX_TENSOR_I32, M, &err);
  ppx_tensor_upload (p, 0, pos, (gsize) M * T);
  ppx_tensor_upload (sl, 0, slots, M);
  PpxTensor *qkv = ppx_tensor_new (gpu, PPX_TENSOR_F32, (gsize) M * T * 3 * HD, &err);
  PpxTensor *out = ppx_tensor_new (gpu, PPX_TENSOR_F32, (gsize) M * T * HD, &err);
  g_autofree float *q = random_floats ((gsize) M * T * 3 * HD, -1, 1);
  ppx_tensor_upload (qkv, 0, q, (gsize) M * T * 3 * HD);
  double host, graph;
  time_attention (qkv, p, sl, k, v, copies, out, M, T, H, Dh, cap, &host, &graph);
  const double read = (double) pair_bytes; /* the whole ring of every session is in the window */
  printf ("%-5s M=%-3d T=%-2d %8.1f us/call %7.0f GB/s  graph %8.1f us/call %7.0f GB/s  %9.1f MB  (%d cache copies)\n",
          ppx_kv_format_name (fmt), M, T, host, read / host / 1e3, graph, read / graph / 1e3, read / 1e6, copies);
  fflush (stdout);
  for (int i = 0; i < copies; i++) {
    ppx_tensor_free (k[i]);
    ppx_tensor_free (v[i]);
  }
  g_free (k);
  g_free (v);
  ppx_tensor_free (p);
  ppx_tensor_free (sl);
  ppx_tensor_free (qkv);
  ppx_tensor_free (out);
}

/* A comma-separated list of integers >= lo from the environment (at most max), or the default. */
static int
env_ints (const char *name, int lo, const int *dflt, int n_dflt, int *out, int max)
{
  const char *env = g_getenv (name);
  if (!env || !*env) {
    memcpy (out, dflt, n_dflt * sizeof (int));
    return n_dflt;
  }
  g_auto (GStrv) parts = g_strsplit (env, ",", -1);
  int n = 0;
  for (int i = 0; parts[i] && n < max; i++)
    if (atoi (parts[i]) >= lo)
      out[n++] = atoi (parts[i]);
  return n;
}

/* test-backend-cuda --bench-attention: T = 1 at M = 1..96 sessions per KV format, then prompt prefills (M = 1,
 * T = 16 and 64). PPX_BENCH_ATTENTION_M, PPX_BENCH_ATTENTION_T (comma lists) and PPX_BENCH_ATTENTION_KV
 * (f32,bf16,fp8) narrow it. */
int
run_bench_attention (void)
{
  printf ("attention, cap = context = 3000 (full rings), 32 heads x 128, on %s:\n"
          "best of 5 runs of >= 64 calls (launched one by one, host-timed; and replayed as one CUDA graph);\n"
          "GB/s = KV bytes in the window (scales included) / time\n",
          ppx_backend_device_name (gpu));
  static const int dflt_m[] = {1, 2, 4, 8, 16, 32, 64, 80, 96}, dflt_t[] = {16, 64};
  int Ms[16], Ts[8];
  const int n_m = env_ints ("PPX_BENCH_ATTENTION_M", 1, dflt_m, G_N_ELEMENTS (dflt_m), Ms, 16);
  const int n_t = env_ints ("PPX_BENCH_ATTENTION_T", 1, dflt_t, G_N_ELEMENTS (dflt_t), Ts, 8);
  const char *kv = g_getenv ("PPX_BENCH_ATTENTION_KV");
  for (guint f = 0; f < G_N_ELEMENTS (kv_formats); f++) {
    if (kv && *kv && !strstr (kv, ppx_kv_format_name (kv_formats[f])))
      continue;
    for (int i = 0; i < n_m; i++)
      bench_attention (kv_formats[f], Ms[i], 1);
    for (int i = 0; i < n_t; i++)
      bench_attention (kv_formats[f], 1, Ts[i]);
  }
  return 0;
}

/* ---- Mimi's SEANet convolutions: speed ---- */

static gboolean
time_conv (const MimiConv *c, int M, int n, const int *cfgs, const int *splits, int calls, int reps, double *us)
{
  g_autoptr (GError) err = NULL;
  if (!ppx_backend_cuda_time_conv (gpu, c->tr, c->act, c->res, M, c->Cin, c->Cout, c->K, c->L, c->stride, c->dil,
                                   c->groups, c->streaming, n, cfgs, splits, calls, reps, us, &err)) {
    printf ("%s M=%d: %s\n", c->name, M, err->message);
    return FALSE;
  }
  return TRUE;
}

/* One plan at one M: a probe sizes the graph to about 20 ms of GPU time (2..20 calls), then 5 replays. */
static double
time_conv_one (const MimiConv *c, int M, int cfg, int split)
{
  double us = 0;
  if (!time_conv (c, M, 1, &cfg, &split, 1, 1, &us))
    return NAN;
  const int calls = (int) CLAMP (20000.0 / MAX (us, 1.0), 2, 20);
  if (!time_conv (c, M, 1, &cfg, &split, calls, 5, &us))
    return NAN;
  return us;
}

/* The rows of x (sessions) a benchmark runs: PPX_BENCH_MS="1,16,64,80,128" (increasing, at most 8), else
 * the n_dflt of dflt. */
static int
bench_ms (int *Ms, const int *dflt, int n_dflt)
{
  int n = 0;
  const char *ms_env = g_getenv ("PPX_BENCH_MS");
  if (ms_env) {
    g_auto (GStrv) parts = g_strsplit (ms_env, ",", 8);
    for (int k = 0; parts[k] && n < 8; k++) {
      const int v = (int) g_ascii_strtoll (parts[k], NULL, 10);
      if (v >= 1 && v <= 4096)
        Ms[n++] = v;
    }
  }
  if (n == 0)
    for (n = 0; n < n_dflt; n++)
      Ms[n] = dflt[n];
  return n;
}

/* test-backend-cuda --bench-conv: every conv call of a Mimi frame (encoder, decoder) at M = 1, 8, 32, 64 (or
 * PPX_BENCH_MS): the direct kernels (old; PPX_BENCH_CONV_DIRECT=0 skips them) against the planned path (new),
 * GPU time per call; then the sums. */
int
run_bench_conv (void)
{
  printf ("Mimi SEANet convs on %s: GPU time per call in us (median of 5 replays of a CUDA graph of 2..20 calls\n"
          "over weight copies that exceed the L2); old = direct kernels, new = planned path "
          "[tile rows x cols / leaves]\n",
          ppx_backend_device_name (gpu));
  static const int dflt[] = {1, 8, 32, 64};
  int Ms_v[8];
  const int n_ms = bench_ms (Ms_v, dflt, G_N_ELEMENTS (dflt));
  const char *direct_env = g_getenv ("PPX_BENCH_CONV_DIRECT");
  const gboolean direct = !(direct_env && direct_env[0] == '0');
  const int *Ms = Ms_v;
  /* PPX_BENCH_CONV_ONLY=NAME: only the convs whose name starts so; PPX_BENCH_CONV_CFG / _SPLIT: that tile and
   * leaf count instead of the planned ones (for profiling one kernel) */
  const char *only = g_getenv ("PPX_BENCH_CONV_ONLY");
  const int force_cfg = g_getenv ("PPX_BENCH_CONV_CFG") ? atoi (g_getenv ("PPX_BENCH_CONV_CFG")) : -1;
  const int force_split = g_getenv ("PPX_BENCH_CONV_SPLIT") ? atoi (g_getenv ("PPX_BENCH_CONV_SPLIT")) : 0;
  /* PPX_BENCH_CONV_PIECES=0 / 1: one-stage pieces never / wherever they apply (default: as planned) */
  if (g_getenv ("PPX_BENCH_CONV_PIECES"))
    ppx_backend_cuda_conv_force_pieces (atoi (g_getenv ("PPX_BENCH_CONV_PIECES")));
  MimiConv convs[64];
  for (int dec = 0; dec < 2; dec++) {
    const int n = mimi_convs (dec, convs, G_N_ELEMENTS (convs));
    double sum_old[8] = {0}, sum_new[8] = {0};
    printf ("\n%-64s", dec ? "decoder" : "encoder");
    for (int j = 0; j < n_ms; j++) {
      char h[32];
      g_snprintf (h, sizeof h, "M=%d old/new [plan]", Ms[j]);
      printf ("  %-28s", h);
    }
    printf ("\n");
    for (int i = 0; i < n; i++) {
      if (only && !g_str_has_prefix (convs[i].name, only))
        continue;
      char desc[160];
      mc_describe (&convs[i], 0, desc, sizeof desc);
      printf ("%-64s", desc);
      for (int j = 0; j < n_ms; j++) {
        const MimiConv *c = &convs[i];
        int pc, ps, tr, tc;
        ppx_backend_cuda_conv_plan (gpu, c->tr, Ms[j], c->Cin, c->Cout, c->K, c->L, c->stride, c->dil, c->groups,
                                    c->streaming, force_cfg, force_split, &pc, &ps, &tr, &tc);
        const double o = direct ? time_conv_one (c, Ms[j], -2, 0) : NAN;
        const double nw = time_conv_one (c, Ms[j], force_cfg, force_split);
        sum_old[j] += o;
        sum_new[j] += nw;
        const int launch = ppx_backend_cuda_conv_launch_leaves (gpu, c->tr, Ms[j], c->Cin, c->Cout, c->K, c->L,
                                                                c->stride, c->dil, c->groups, c->streaming);
        g_autofree char *plan = pc < 0          ? g_strdup ("direct")
                                : launch != ps ? g_strdup_printf ("%dx%d/%dp%d", tr, tc, ps, launch)
                                               : g_strdup_printf ("%dx%d/%d", tr, tc, ps);
        printf ("  %8.1f %7.1f %-11s", o, nw, plan);
      }
      printf ("\n");
      fflush (stdout);
    }
    printf ("%-64s", dec ? "decoder sum (SEANet + upsample)" : "encoder sum (SEANet + downsample)");
    for (int j = 0; j < n_ms; j++) {
      char r[32];
      g_snprintf (r, sizeof r, "%.1fx", sum_old[j] / sum_new[j]);
      printf ("  %8.1f %7.1f %-11s", sum_old[j], sum_new[j], r);
    }
    printf ("\n");
  }
  return 0;
}

/* test-backend-cuda --bench-conv-sweep [M ...]: every tile configuration and leaf count on every GEMM-path Mimi
 * conv (for tuning the planner): lines "sweep NAME M cfg TILE split US" plus the planned choice. */
int
run_bench_conv_sweep (int argc, char **argv)
{
  int Ms[8] = {1, 8, 64}, nm = 3;
  if (argc > 0) {
    nm = 0;
    for (int i = 0; i < argc && nm < 8; i++)
      Ms[nm++] = atoi (argv[i]);
  }
  printf ("conv sweep on %s (GPU us per call, median of 3 replays of 8 calls)\n", ppx_backend_device_name (gpu));
  MimiConv convs[64];
  const int ncfg = ppx_backend_cuda_conv_n_configs ();
  for (int dec = 0; dec < 2; dec++) {
    const int n = mimi_convs (dec, convs, G_N_ELEMENTS (convs));
    for (int i = 0; i < n; i++) {
      const MimiConv *c = &convs[i];
      if (c->groups != 1)
        continue;
      for (int j = 0; j < nm; j++) {
        int cfgs[128], splits[128], tile_r[128], tile_c[128], np = 0;
        int pc, ps, tr, tc;
        ppx_backend_cuda_conv_plan (gpu, c->tr, Ms[j], c->Cin, c->Cout, c->K, c->L, c->stride, c->dil, c->groups,
                                    c->streaming, -1, 0, &pc, &ps, &tr, &tc);
        cfgs[np] = -1, splits[np] = 0, tile_r[np] = tr, tile_c[np] = tc, np++;
        const int planned_split = ps;
        for (int cfg = 0; cfg < ncfg; cfg++)
          for (int s = 1; s <= 64 && np < 128; s *= 2) {
            ppx_backend_cuda_conv_plan (gpu, c->tr, Ms[j], c->Cin, c->Cout, c->K, c->L, c->stride, c->dil, c->groups,
                                        c->streaming, cfg, s, &pc, &ps, &tr, &tc);
            if (pc != cfg || ps != s)
              continue;
            cfgs[np] = cfg, splits[np] = s, tile_r[np] = tr, tile_c[np] = tc, np++;
          }
        double us[128];
        if (!time_conv (c, Ms[j], np, cfgs, splits, 8, 3, us))
          continue;
        for (int p = 0; p < np; p++)
          printf ("sweep %-22s M=%-2d cfg=%-2d %3dx%-3d split=%-2d %9.2f us%s\n", c->name, Ms[j], cfgs[p], tile_r[p],
                  tile_c[p], p == 0 ? planned_split : splits[p], us[p], p == 0 ? "  (planned)" : "");
        fflush (stdout);
      }
    }
  }
  return 0;
}

/* test-backend-cuda --bench [FORMAT [ROWSxCOLS[,ROWSxCOLS...]]]: the temporal transformer's shapes (rows x
 * cols: QKV, O, gate+up, down, text head) and, for int8, the depformer's (QKV, O, gate+up, down, its input
 * projection, a 2048-row one) at M = 1, 8, 32, 64; FORMAT (bf16, int8, int4, f32) limits it to one format,
 * the shape list to those shapes. PPX_BENCH_MS: other M (a comma list, at most 8); PPX_BENCH_SLICES: a comma
 * list of forced slices (n-tiles of x a block takes, 0 = planned; ppx_backend_cuda_linear_force_slice) timed
 * at each M > 8. */
int
run_bench (const char *only, const char *shape)
{
  int64_t only_shapes[16][2];
  int n_only = 0;
  if (shape) {
    g_auto (GStrv) parts = g_strsplit (shape, ",", 16);
    for (int k = 0; parts[k] && n_only < 16; k++, n_only++)
      if (sscanf (parts[k], "%" G_GINT64_FORMAT "x%" G_GINT64_FORMAT, &only_shapes[n_only][0], &only_shapes[n_only][1]) != 2 ||
          only_shapes[n_only][0] < 1 || only_shapes[n_only][1] < 1) {
        g_printerr ("--bench: shape '%s' is not ROWSxCOLS\n", parts[k]);
        return 2;
      }
  }
  printf ("linear layers on %s: GPU time per call (median of 9 replays of a CUDA graph of >= 120 calls cycling over\n"
          "copies of the matrix that do not fit in L2); GB/s = weight bytes (data + scales) / time\n",
          ppx_backend_device_name (gpu));
  const Fmt f[] = {{PPX_WFMT_INT4, 64}, {PPX_WFMT_INT8, 0}, {PPX_WFMT_BF16, 0}, {PPX_WFMT_F32, 0}};
  const char *names[] = {"int4", "int8", "bf16", "f32"};
  static const int64_t shapes[][2] = {{12288, 4096}, {4096, 4096}, {22528, 4096}, {4096, 11264}, {32000, 4096}};
  static const int dflt[] = {1, 8, 32, 64};
  int Ms[8];
  const int n_ms = bench_ms (Ms, dflt, G_N_ELEMENTS (dflt));
  static const int64_t dep_shapes[][2] = {{3072, 1024}, {1024, 1024}, {5632, 1024}, {1024, 2816}, {1024, 4096}, {2048, 1024}};
  static const int dflt_slices[] = {0};
  int slices[8];
  const int n_slices = env_ints ("PPX_BENCH_SLICES", 0, dflt_slices, 1, slices, 8);
  for (guint i = 0; i < G_N_ELEMENTS (f); i++) {
    if (only ? strcmp (only, names[i]) != 0 : f[i].format == PPX_WFMT_F32)
      continue;
    if (shape) {
      for (int j = 0; j < n_only; j++)
        bench_linear (f[i], only_shapes[j][0], only_shapes[j][1], Ms, n_ms, slices, n_slices);
      continue;
    }
    for (guint j = 0; j < G_N_ELEMENTS (shapes); j++)
      if (f[i].format != PPX_WFMT_F32 || j == 1)
        bench_linear (f[i], shapes[j][0], shapes[j][1], Ms, n_ms, slices, n_slices);
    if (f[i].format == PPX_WFMT_INT8)
      for (guint j = 0; j < G_N_ELEMENTS (dep_shapes); j++)
        bench_linear (f[i], dep_shapes[j][0], dep_shapes[j][1], Ms, n_ms, slices, n_slices);
  }
  return only ? 0 : run_bench_attention ();
}
