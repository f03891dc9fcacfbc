/* CUDA backend: Mimi's streaming convolutions (the quantizer is in cuda-vq.cu).
 *
 * Convolutions of groups = 1 run as implicit GEMMs (cuda-conv-gemm.cu; planned here); grouped and depthwise ones, and shapes the
 * GEMM path does not take, run the direct loops: one thread per output element, each summing in the CPU
 * backend's order (input channel, then tap). The streaming state is updated by a later launch than the one
 * that reads it, so no thread reads state that another thread of the same launch rewrites. */
#include "cuda-conv.cuh"
#include "cuda-mma-f32.cuh"
#include "cuda-graph-timing.cuh"

#include <math.h>
#include <stdlib.h>

/* y[m, co, t] over the virtual input concat(prev[m, :, :P], x[m, :, :Lin]) of length L = P + Lin. */
__global__ void
conv1d_kernel (const float *__restrict__ w, const float *__restrict__ bias, const float *__restrict__ x,
               const float *__restrict__ prev, const float *res, float *y, int M, int Cin, int Cout, int K, int Lin,
               int P, int Lout, int stride, int dilation, int groups, int act)
{
  ppx_pdl_enter ();
  const int cig = Cin / groups, cog = Cout / groups;
  const size_t n = (size_t) M * Cout * Lout;
  for (size_t idx = blockIdx.x * (size_t) blockDim.x + threadIdx.x; idx < n; idx += (size_t) gridDim.x * blockDim.x) {
    const int t = (int) (idx % Lout);
    const int co = (int) ((idx / Lout) % Cout);
    const int m = (int) (idx / ((size_t) Lout * Cout));
    const int g = co / cog;
    float acc = bias ? bias[co] : 0.0f;
    for (int ci = 0; ci < cig; ci++) {
      const int c = g * cig + ci;
      const float *xr = x + ((size_t) m * Cin + c) * Lin;
      const float *pr = prev ? prev + ((size_t) m * Cin + c) * P : NULL;
      const float *wr = w + ((size_t) co * cig + ci) * K;
      for (int k = 0; k < K; k++) {
        const int i = t * stride + k * dilation; /* index into the virtual input */
        const float xv = i < P ? pr[i] : ppx_act_apply (act, xr[i - P]);
        acc += wr[k] * xv;
      }
    }
    y[idx] = res ? res[idx] + acc : acc;
  }
}

/* prev[m, c, :] = the last P columns of concat(prev, act(x)): one thread per (m, c), in increasing order, so
 * a column is read before it is overwritten (it moves left by Lin). */
__global__ void
conv1d_history_kernel (const float *x, float *prev, int M, int Cin, int Lin, int P, int act)
{
  ppx_pdl_enter ();
  const size_t n = (size_t) M * Cin;
  for (size_t idx = blockIdx.x * (size_t) blockDim.x + threadIdx.x; idx < n; idx += (size_t) gridDim.x * blockDim.x) {
    float *pr = prev + idx * P;
    const float *xr = x + idx * Lin;
    for (int i = 0; i < P; i++) {
      const int src = Lin + i; /* index into the virtual input of length P + Lin */
      pr[i] = src < P ? pr[src] : ppx_act_apply (act, xr[src - P]);
    }
  }
}

/* z[m, co, j] = sum over (ci, t, k) with t*S + k = j of x[m, ci, t] * w[ci, co, k], in the CPU's order
 * (ci, then t); plus the old partial for j < tail; then y = z + bias for j < Ly and, with a partial,
 * the new partial (z[j] for j >= S*T) goes to `next` (copied over the partial by a later launch). */
__global__ void
conv_transpose1d_kernel (const float *__restrict__ w, const float *__restrict__ bias, const float *__restrict__ x,
                         const float *__restrict__ partial, float *__restrict__ next, float *__restrict__ y, int M,
                         int Cin, int Cout, int K, int T, int S, int groups, int Lz, int Ly, int tail, int act)
{
  ppx_pdl_enter ();
  const int cig = Cin / groups, cog = Cout / groups;
  const size_t n = (size_t) M * Cout * Lz;
  for (size_t idx = blockIdx.x * (size_t) blockDim.x + threadIdx.x; idx < n; idx += (size_t) gridDim.x * blockDim.x) {
    const int j = (int) (idx % Lz);
    const int co = (int) ((idx / Lz) % Cout);
    const int m = (int) (idx / ((size_t) Lz * Cout));
    const int g = co / cog, cl = co % cog;
    /* taps k = j - t*S in [0, K)  <=>  t in [ceil((j-K+1)/S), floor(j/S)] */
    const int t_hi = min (j / S, T - 1);
    const int t_lo = j - K + 1 > 0 ? (j - K + 1 + S - 1) / S : 0;
    float z = 0.0f;
    for (int ci = 0; ci < cig; ci++) {
      const int cin = g * cig + ci;
      const float *xr = x + ((size_t) m * Cin + cin) * T;
      const float *wr = w + ((size_t) cin * cog + cl) * K;
      for (int t = t_lo; t <= t_hi; t++)
        z += ppx_act_apply (act, xr[t]) * wr[j - t * S];
    }
    const size_t mc = (size_t) m * Cout + co;
    if (partial && j < tail)
      z += partial[mc * tail + j];
    if (j < Ly)
      y[mc * Ly + j] = z + (bias ? bias[co] : 0.0f);
    if (partial && j >= S * T)
      next[mc * tail + (j - S * T)] = z;
  }
}

/* ---- planning ---- */

struct ConvCfg {
  int mma;         /* 0: the CUDA-core kernel (cuda-conv-gemm.cu), 1: the tensor cores (cuda-conv-mma.cu) */
  int BM, BN, NT;  /* tile rows x cols, threads */
  int WM, WN;      /* tensor cores: warps along rows and cols */
};
/* Tile shapes (rows x cols): wide tiles for long rows, tall narrow ones for the late layers' few columns per
 * row, one row (CUDA cores) or one m-tile of 16 (tensor cores) for a single output channel. The CUDA-core
 * entries come first (CONV_SIMT_CFGS of them, in conv_launch's order), then the tensor-core ones (in
 * conv_mma_cfg's order). */
static const ConvCfg conv_cfgs[] = {
  {0, 64, 64, 256},  /* 0: TM 4, TN 4, 16 x 16 threads */
  {0, 128, 32, 256}, /* 1: 4 x 4, 32 x 8 */
  {0, 128, 16, 256}, /* 2: 4 x 2, 32 x 8 */
  {0, 128, 8, 256},  /* 3: 4 x 1, 32 x 8 */
  {0, 32, 128, 256}, /* 4: 4 x 4, 8 x 32 */
  {0, 64, 32, 256},  /* 5: 4 x 2, 16 x 16 */
  {0, 256, 4, 256},  /* 6: 4 x 1, 64 x 4 (conv1d only: the transposed loader would need too many registers) */
  {0, 4, 32, 128},   /* 7: 1 x 1, 4 x 32 (one output channel) */
  {1, 64, 64, 256, 2, 4},  /* 8: warps of 32 x 16 */
  {1, 128, 64, 512, 4, 4}, /* 9 */
  {1, 64, 128, 512, 2, 8}, /* 10 */
  {1, 128, 32, 256, 4, 2}, /* 11 */
  {1, 32, 128, 256, 1, 8}, /* 12 */
  {1, 64, 32, 128, 2, 2},  /* 13 */
  {1, 128, 16, 128, 4, 1}, /* 14 */
  {1, 128, 8, 128, 4, 1},  /* 15: warps of 32 x 8 */
  {1, 16, 64, 128, 1, 4},  /* 16: warps of 16 x 16 */
};
#define CONV_N_CFGS ((int) (sizeof conv_cfgs / sizeof conv_cfgs[0]))

/* Test and benchmark overrides (ppx_cuda_conv_set_plan): cfg -2 = the direct kernels, -1 = planned,
 * >= 0 = that tile configuration; split 0 = planned; pieces (ppx_cuda_conv_set_pieces) -1 = as the cost
 * model says, 0 = never, 1 = always where they apply. */
static int conv_force_cfg = -1, conv_force_split = 0, conv_force_pieces = -1;

struct ConvGeom {
  bool tr;
  int M, Cin, Cout, K, stride, dil;
  int Lin, P, Lout;  /* conv1d; transposed: Lin = T */
  int Lz, Ly, tail;  /* transposed */
  int KR, rows, Lcols;
};

struct ConvPlan {
  int cfg;             /* -1: the direct kernels */
  int split, cpl, CK;  /* the launch's leaves (blockIdx.z), channels a leaf, channels a stage */
  int lst;             /* 1, or (pieces) the launch's one-stage leaves that make one planned leaf */
};


static ConvGeom
conv1d_geom (int M, int Cin, int Cout, int K, int Lin, int stride, int dilation, int has_prev)
{
  ConvGeom g = {};
  g.tr = false;
  g.M = M, g.Cin = Cin, g.Cout = Cout, g.K = K, g.stride = stride, g.dil = dilation, g.Lin = Lin;
  const int keff = (K - 1) * dilation + 1;
  g.P = has_prev ? keff - stride : 0;
  const int L = g.P + Lin;
  g.Lout = L >= keff ? (L - keff) / stride + 1 : 0;
  g.KR = K, g.rows = Cout, g.Lcols = g.Lout;
  return g;
}

static ConvGeom
convtr_geom (int M, int Cin, int Cout, int K, int T, int stride, int has_partial)
{
  ConvGeom g = {};
  g.tr = true;
  g.M = M, g.Cin = Cin, g.Cout = Cout, g.K = K, g.stride = stride, g.dil = 1, g.Lin = T;
  g.Lz = stride * (T - 1) + K;
  g.tail = K - stride;
  g.Ly = has_partial ? stride * T : g.Lz;
  g.KR = (K + stride - 1) / stride;
  g.rows = Cout * stride;
  g.Lcols = T - 1 + g.KR; /* q with q*S + p < Lz for some p */
  return g;
}

/* The GEMM kernel family of every planned call: the tensor cores unless PPX_CUDA_F32_MMA=0 (a global switch,
 * never a function of M, so a row's arithmetic is the same in every batch). */
static int
conv_family (void)
{
  return ppx_f32_mma_mode () >= 0;
}

/* The batch the tensor cores' leaves are planned for (a constant: the plan never depends on a call's M). */
#define CONV_M_REF 80

/* Leaves: enough that a one-row call (M = 1) has about two blocks per SM, with at least 4 stages per leaf
 * (fewer make the combine's reads of the partial sums cost more than the split gains), on the tensor cores
 * capped by the output's size, and one where CONV_M_REF rows already make ~a wave of 128 x 64 tiles (at 80
 * to 160 sessions the split only adds waves and the combine's traffic; small M gets its parallelism back by
 * one-stage pieces, conv_pieces). A function of the shape and the device only: never of M (batch
 * independence). */
static void
conv_split (const ConvGeom &g, int forced, ConvPlan *pl)
{
  pl->lst = 1;
  pl->CK = g.KR >= CONV_BK ? 1 : CONV_BK / g.KR;
  const int nst = (int) conv_cdiv (g.Cin, pl->CK);
  long S;
  if (forced > 0) {
    S = forced;
  } else {
    const long tiles1 = g.Lcols >= 32 ? conv_cdiv (g.rows, 64) * conv_cdiv (g.Lcols, 64)
                                      : conv_cdiv (g.rows, 128) * conv_cdiv (g.Lcols, 16);
    S = conv_cdiv (2L * ppx_sm_count (), tiles1);
    S = S < nst / 4 ? S : nst / 4;
    /* tensor cores: at most 64 Ki floats of partial sums per row of x (each leaf writes a whole output and
     * the combine reads them all back: with many rows that traffic outweighs the split; measured on an H100,
     * the cap costs 0.10 ms at M = 1 and saves 0.55 ms at M = 80 over Mimi's frame) */
    if (conv_family ()) {
      const long out_row = (long) g.Cout * (g.tr ? g.Lz : g.Lout), cap = (1L << 16) / (out_row > 0 ? out_row : 1);
      S = S < cap ? S : cap;
      /* one leaf where CONV_M_REF rows fill 3/4 of the SMs with 128 x 64 tiles (H200 sweep at M = 80 and 160:
       * dec.2, dec.5, enc.6, the 96- and 480-column res conv1 are 5-20 % faster with one leaf; enc.9 (80
       * tiles, 128 stages) and the 2- and 16-column layers keep theirs) */
      const long tiles_ref = conv_cdiv (g.rows, 128) * conv_cdiv ((long) CONV_M_REF * g.Lcols, 64);
      if (4 * tiles_ref >= 3L * ppx_sm_count ())
        S = 1;
    }
  }
  S = S < 1 ? 1 : S > nst ? nst : S;
  const int leaf_st = (int) conv_cdiv (nst, S);
  pl->cpl = leaf_st * pl->CK;
  pl->split = (int) conv_cdiv (nst, leaf_st);
}

static bool
conv_cfg_ok (const ConvGeom &g, int c)
{
  if (c < 0 || c >= CONV_N_CFGS || conv_cfgs[c].mma != conv_family ())
    return false;
  if (!conv_cfgs[c].mma)
    return !(g.tr && c == 6);
  return conv_cdiv (g.rows, conv_cfgs[c].BM) <= 65535;
}

/* The tile configuration for this M: a rough cost model, waves of blocks times the stages of a leaf times
 * the longer of a stage's work on an SM (shared by the blocks resident on it) and a memory latency (~1000
 * cycles: one stage's loads are in flight while the last one is computed; 1500 on the tensor cores, whose
 * stage also waits for the barrier of 8-16 warps). CUDA cores: 128 multiply-adds a cycle plus the loads and
 * stores; tensor cores: the instructions issued (the mma are a small part of them: the fragment loads and
 * splits, the gather of B, the copies of A). Any choice gives the same results. */
static double
conv_cfg_cost (const ConvGeom &g, const ConvPlan &pl, int c)
{
  const ConvCfg &f = conv_cfgs[c];
  const long N = (long) g.M * g.Lcols;
  const int sms = ppx_sm_count ();
  const int BK = pl.CK * g.KR;
  const long leaf_st = conv_cdiv (pl.cpl, pl.CK);
  const long blocks = conv_cdiv (g.rows, f.BM) * conv_cdiv (N, f.BN) * pl.split;
  int occ = f.NT >= 256 ? 2 : 4;
  if (f.mma) {
    const int by_smem = (int) ((227u * 1024u) / (ppx_conv_mma_smem (f.BM, f.BN, g.tr) + 1024u));
    occ = 512 / f.NT; /* 128 registers a thread */
    occ = occ < by_smem ? occ : by_smem;
  }
  const long slots = (long) sms * occ;
  const long waves = conv_cdiv (blocks, slots);
  const long per_sm = conv_cdiv (blocks < slots ? blocks : slots, sms);
  double work;
  if (!f.mma) {
    const double fma = (double) f.BM * f.BN * BK * per_sm / 128.0 * 1.5;
    const double ld = (double) (f.BM + f.BN) * BK * per_sm / 32.0; /* load and store instructions, warp-wide */
    work = fma + ld;
  } else {
    /* warp instructions of a block and stage (measured with Nsight Compute on an H100, 128 x 64 tiles): per
     * warp 12 mma, 64 A and 32 B fragment instructions (loads and splits) per m-tile, n-tile pair; ~40 per
     * element of the B gather (the activation included), ~8 per A copy; issued at ~2 a cycle and SM */
    const bool tf = ppx_f32_mma_mode () != PPX_F32_BF16X3;
    const int warps = f.NT / 32, mt = f.BM / f.WM / 16, nt = f.BN / f.WN / 8;
    const double per_warp = (tf ? 16.0 : 10.0) * mt * nt + (tf ? 64.0 : 48.0) * mt + (tf ? 32.0 : 24.0) * nt;
    const double issue = warps * per_warp + 40.0 * f.BN + 8.0 * f.BM;
    /* with few blocks resident (small M) a stage takes its warps' instruction chains: ~6 cycles each */
    const double chain = 6.0 * (per_warp + (40.0 * f.BN + 8.0 * f.BM) / warps);
    work = per_sm * issue / 2.0 > chain ? per_sm * issue / 2.0 : chain;
  }
  const double floor = f.mma ? 1500.0 : 1000.0; /* a stage's memory latency and barrier */
  const double stage = work > floor ? work : floor;
  /* one block an SM (the 16-warp tiles): nothing to run while its warps wait at a stage's barrier, ~10 %
   * (H200 sweep at M = 80 and 160: 64 x 64 beats 64 x 128 on the long conv1d layers, 128 x 64 still wins
   * over 128 x 32 where the rows allow) */
  const double lone = f.mma && occ == 1 ? 1.1 : 1.0;
  return (double) waves * leaf_st * stage * lone;
}

/* A combine launch's cost in the same cycles: a launch, and each leaf's sums written and read back. */
static double
conv_combine_cost (const ConvGeom &g, long leaves)
{
  if (leaves <= 1)
    return 0.0;
  const double out = (double) g.M * g.Cout * (g.tr ? g.Lz : g.Lout);
  return 6000.0 + (double) leaves * out * 8.0 / 1500.0;
}

static int
conv_choose_cfg (const ConvGeom &g, const ConvPlan &pl)
{
  double best = 0;
  int bi = -1;
  for (int c = 0; c < CONV_N_CFGS; c++) {
    if (!conv_cfg_ok (g, c))
      continue;
    const double cost = conv_cfg_cost (g, pl, c);
    if (bi < 0 || cost < best) {
      best = cost;
      bi = c;
    }
  }
  return bi;
}

/* Pieces: on the tensor cores a leaf's sum is a chain of per-stage sums, acc = ((0 + p0) + p1) + ..., so a
 * launch of one-stage leaves (each 0 + p_i) whose combine adds a planned leaf's pieces in order and then the
 * leaves as before gives the same bits (0 + p is p but for -0, and the chain's sum is never -0, so adding
 * +0 or -0 to it is the same). That is a choice of execution, like the tile: it may follow M. Taken where
 * the cost model says the extra blocks save 8 % after the combine's traffic, for plans of one leaf only
 * (H200, test-backend-cuda --bench-conv: every one-leaf layer of many stages is faster as pieces at M = 1,
 * e.g. dec.2 113 -> 39 us, enc.3 28 -> 12; the many-leaf plans made for M = 1, e.g. enc.12 and dec.0 with
 * 32 leaves, were 5-130 % slower as pieces). Not
 * on the CUDA cores (their leaf is one fmaf chain over every r). */
static int
conv_pieces_mode (void)
{
  static int env = -2; /* PPX_CUDA_CONV_PIECES=0 / 1: never / always (measuring); unset: the cost model's */
  if (conv_force_pieces >= 0)
    return conv_force_pieces;
  if (env == -2) {
    const char *e = getenv ("PPX_CUDA_CONV_PIECES");
    env = e && e[0] ? (atoi (e) > 0 ? 1 : 0) : -1;
  }
  return env;
}

static void
conv_pieces (const ConvGeom &g, int force_cfg, ConvPlan *pl)
{
  const int nst = (int) conv_cdiv (g.Cin, pl->CK), leaf_st = pl->cpl / pl->CK, mode = conv_pieces_mode ();
  if (!conv_family () || mode == 0 || leaf_st <= 1 || nst > 4096 || (mode < 0 && pl->split > 1))
    return;
  ConvPlan pp = *pl;
  pp.split = nst, pp.cpl = pl->CK, pp.lst = leaf_st;
  pp.cfg = conv_cfg_ok (g, force_cfg) ? force_cfg : conv_choose_cfg (g, pp);
  const double out = (double) g.M * g.Cout * (g.tr ? g.Lz : g.Lout);
  if (mode < 0) {
    if (pp.cfg < 0 || (double) nst * out > (double) (16 << 20)) /* at most 64 MB of scratch */
      return;
    const double c_leaves = conv_cfg_cost (g, *pl, pl->cfg) + conv_combine_cost (g, pl->split);
    const double c_pieces = conv_cfg_cost (g, pp, pp.cfg) + conv_combine_cost (g, nst);
    if (!(c_pieces < 0.92 * c_leaves))
      return;
  }
  *pl = pp;
}

static ConvPlan
conv_plan (const ConvGeom &g, int groups, int force_cfg, int force_split)
{
  ConvPlan pl = {-1, 1, g.Cin, 1, 1};
  if (force_cfg == -2 || groups != 1 || g.KR > CONV_BK || g.M <= 0 || g.Cin <= 0 || g.Cout <= 0)
    return pl;
  if (!g.tr && (g.P < 0 || g.Lout <= 0 || (long) g.P + g.Lin >= (1L << 25)))
    return pl;
  if (g.tr && (g.K < g.stride || g.Lin <= 0 || (long) g.Cin * g.Cout * g.K >= (1L << 25)))
    return pl;
  /* the loaders' 32-bit offsets (cuda-conv-gemm.cuh): a row's input and the weights, with a tile's overrun */
  if ((long) (g.Cin + 32) * (g.P + g.Lin) >= (1L << 31) || (long) (g.Cout + 256) * g.Cin * g.K >= (1L << 31))
    return pl;
  if (conv_cdiv (g.rows, 256) > 65535 || (long) g.M * g.Lcols > (1L << 40))
    return pl;
  conv_split (g, force_split, &pl);
  pl.cfg = conv_cfg_ok (g, force_cfg) ? force_cfg : conv_choose_cfg (g, pl);
  if (pl.cfg >= 0)
    conv_pieces (g, force_cfg, &pl);
  return pl;
}

/* Scratch floats: the leaves' sums, then (transposed, a partial that cannot be rewritten in place) the
 * next partial. */
static size_t
conv_ws_floats (const ConvGeom &g, const ConvPlan &pl)
{
  if (pl.cfg < 0 || pl.split <= 1)
    return 0;
  return (size_t) pl.split * g.M * g.Cout * (g.tr ? g.Lz : g.Lout);
}

static size_t
convtr_next_floats (const ConvGeom &g, const ConvPlan &pl, int has_partial)
{
  if (!has_partial || g.tail <= 0)
    return 0;
  if (pl.cfg >= 0 && pl.split > 1 && g.stride * g.Lin >= g.tail)
    return 0; /* the combine rewrites the partial in place */
  return (size_t) g.M * g.Cout * g.tail;
}

static size_t
conv_align (size_t floats)
{
  return (floats + 63) & ~(size_t) 63;
}

static ConvArgs
conv_args (const ConvGeom &g, const ConvPlan &pl)
{
  ConvArgs a = {};
  a.M = g.M, a.Cin = g.Cin, a.Cout = g.Cout, a.K = g.K, a.stride = g.stride, a.dil = g.dil;
  a.Lin = g.Lin, a.P = g.P;
  a.Lcols = g.Lcols, a.rows = g.rows, a.KR = g.KR, a.CK = pl.CK, a.cpl = pl.cpl, a.split = pl.split, a.lst = pl.lst;
  a.Lz = g.Lz, a.Ly = g.Ly, a.tail = g.tail;
  a.N = (long) g.M * g.Lcols;
  return a;
}

/* ---- entry points ---- */

static int
conv1d_run (int act, const float *w, const float *bias, const float *x, float *prev, const float *res, float *y,
            const ConvGeom &g, int groups, const ConvPlan &pl, float *scratch, cudaStream_t s)
{
  const size_t n = (size_t) g.M * g.Cout * g.Lout;
  const size_t nch = g.P > 0 ? (size_t) g.M * g.Cin : 0;
  if (pl.cfg < 0) {
    if (n > 0) {
      ppx_launch (conv1d_kernel, ppx_grid_for (n, CONV_THREADS), CONV_THREADS, 0, s, w, bias, x, prev, res, y, g.M, g.Cin, g.Cout, g.K, g.Lin, g.P, g.Lout, g.stride, g.dil, groups, act);
      int e = ppx_cuda_launched ();
      if (e)
        return e;
    }
  } else {
    ConvArgs a = conv_args (g, pl);
    a.w = w, a.bias = bias, a.x = x, a.prev = prev, a.res = res, a.y = y, a.ws = scratch, a.act = act;
    int e = g.tr ? (int) cudaErrorInvalidValue : ppx_conv1d_gemm (pl.cfg, a, prev, nch, s);
    if (e || pl.split > 1) /* several leaves: their combine moved the history */
      return e;
  }
  if (nch > 0) {
    ppx_launch (conv1d_history_kernel, ppx_grid_for (nch, CONV_THREADS), CONV_THREADS, 0, s, x, prev, g.M, g.Cin, g.Lin, g.P, act);
    return ppx_cuda_launched ();
  }
  return 0;
}

extern "C" size_t
ppx_cuda_conv1d_scratch_bytes (int M, int Cin, int Cout, int K, int Lin, int stride, int dilation, int groups,
                               int has_prev)
{
  const ConvGeom g = conv1d_geom (M, Cin, Cout, K, Lin, stride, dilation, has_prev);
  const ConvPlan pl = conv_plan (g, groups, conv_force_cfg, conv_force_split);
  return conv_ws_floats (g, pl) * sizeof (float);
}

extern "C" int
ppx_cuda_conv1d (int act, const float *w, const float *bias, const float *x, float *prev, const float *res, float *y,
                 int M, int Cin, int Cout, int K, int Lin, int stride, int dilation, int groups, float *scratch,
                 void *stream)
{
  if (M <= 0)
    return 0;
  const ConvGeom g = conv1d_geom (M, Cin, Cout, K, Lin, stride, dilation, prev != NULL);
  const ConvPlan pl = conv_plan (g, groups, conv_force_cfg, conv_force_split);
  if (conv_ws_floats (g, pl) > 0 && !scratch)
    return (int) cudaErrorInvalidValue;
  return conv1d_run (act, w, bias, x, prev, res, y, g, groups, pl, scratch, PPX_CUDA_STREAM (stream));
}

static int
convtr_run (int act, const float *w, const float *bias, const float *x, float *partial, float *y, const ConvGeom &g,
            int groups, const ConvPlan &pl, float *scratch, cudaStream_t s)
{
  const size_t nmc = (size_t) g.M * g.Cout;
  if (nmc == 0 || g.Lz <= 0)
    return 0;
  float *ws = scratch;
  float *next = scratch ? scratch + conv_align (conv_ws_floats (g, pl)) : NULL;
  const bool needs_next = convtr_next_floats (g, pl, partial != NULL) > 0;
  int e;
  if (pl.cfg < 0) {
    const size_t n = nmc * g.Lz;
    ppx_launch (conv_transpose1d_kernel, ppx_grid_for (n, CONV_THREADS), CONV_THREADS, 0, s, w, bias, x, partial, next, y, g.M, g.Cin, g.Cout, g.K, g.Lin, g.stride, groups, g.Lz, g.Ly, g.tail, act);
    e = ppx_cuda_launched ();
  } else {
    ConvArgs a = conv_args (g, pl);
    a.w = w, a.bias = bias, a.x = x, a.partial = partial, a.y = y, a.ws = ws, a.next = next, a.act = act;
    e = ppx_convtr_gemm (pl.cfg, a, partial, nmc, !needs_next, s);
  }
  if (e || !needs_next)
    return e;
  return (int) cudaMemcpyAsync (partial, next, nmc * g.tail * sizeof (float), cudaMemcpyDeviceToDevice, s);
}

extern "C" size_t
ppx_cuda_conv_transpose1d_scratch_bytes (int M, int Cin, int Cout, int K, int T, int stride, int groups,
                                         int has_partial)
{
  const ConvGeom g = convtr_geom (M, Cin, Cout, K, T, stride, has_partial);
  const ConvPlan pl = conv_plan (g, groups, conv_force_cfg, conv_force_split);
  const size_t next = convtr_next_floats (g, pl, has_partial);
  return ((next ? conv_align (conv_ws_floats (g, pl)) : conv_ws_floats (g, pl)) + next) * sizeof (float);
}

extern "C" int
ppx_cuda_conv_transpose1d (int act, const float *w, const float *bias, const float *x, float *partial, float *y, int M,
                           int Cin, int Cout, int K, int T, int stride, int groups, float *scratch, void *stream)
{
  if (M <= 0 || T <= 0)
    return 0;
  const ConvGeom g = convtr_geom (M, Cin, Cout, K, T, stride, partial != NULL);
  const ConvPlan pl = conv_plan (g, groups, conv_force_cfg, conv_force_split);
  if ((conv_ws_floats (g, pl) > 0 || convtr_next_floats (g, pl, partial != NULL) > 0) && !scratch)
    return (int) cudaErrorInvalidValue;
  return convtr_run (act, w, bias, x, partial, y, g, groups, pl, scratch, PPX_CUDA_STREAM (stream));
}

extern "C" void
ppx_cuda_conv_set_plan (int cfg, int split)
{
  conv_force_cfg = cfg < -2 ? -1 : cfg;
  conv_force_split = split < 0 ? 0 : split;
}

extern "C" void
ppx_cuda_conv_set_pieces (int mode)
{
  conv_force_pieces = mode < 0 ? -1 : mode > 0 ? 1 : 0;
}

extern "C" int
ppx_cuda_conv_n_configs (void)
{
  return CONV_N_CFGS;
}

extern "C" void
ppx_cuda_conv_plan_info (int transposed, int M, int Cin, int Cout, int K, int L, int stride, int dilation, int groups,
                         int streaming, int force_cfg, int force_split, int *cfg, int *split, int *tile_rows,
                         int *tile_cols, int *launch_split)
{
  const ConvGeom g = transposed ? convtr_geom (M, Cin, Cout, K, L, stride, streaming)
                                : conv1d_geom (M, Cin, Cout, K, L, stride, dilation, streaming);
  const ConvPlan pl = conv_plan (g, groups, force_cfg, force_split);
  *cfg = pl.cfg;
  *split = pl.cfg < 0 ? 1 : (int) conv_cdiv (pl.split, pl.lst);
  if (launch_split)
    *launch_split = pl.cfg < 0 ? 1 : pl.split;
  *tile_rows = pl.cfg < 0 ? 0 : conv_cfgs[pl.cfg].BM;
  *tile_cols = pl.cfg < 0 ? 0 : conv_cfgs[pl.cfg].BN;
}

/* Fills n floats with a hash of the index in [-1, 1) (benchmark data). */
__global__ void
conv_fill_kernel (float *v, size_t n, unsigned seed)
{
  ppx_pdl_enter ();
  for (size_t i = blockIdx.x * (size_t) blockDim.x + threadIdx.x; i < n; i += (size_t) gridDim.x * blockDim.x) {
    unsigned h = (unsigned) i * 2654435761u ^ seed;
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    v[i] = (float) (h >> 8) * (2.0f / 16777216.0f) - 1.0f;
  }
}

extern "C" int
ppx_cuda_conv_time (int transposed, int act, int residual, int M, int Cin, int Cout, int K, int L, int stride,
                    int dilation, int groups, int streaming, int n_plans, const int *cfgs, const int *splits,
                    int calls, int reps, double *us, const char **step)
{
  *step = "allocate";
  const ConvGeom g = transposed ? convtr_geom (M, Cin, Cout, K, L, stride, streaming)
                                : conv1d_geom (M, Cin, Cout, K, L, stride, dilation, streaming);
  size_t scr = 64;
  for (int i = 0; i < n_plans; i++) {
    const ConvPlan pl = conv_plan (g, groups, cfgs[i], splits[i]);
    const size_t f = transposed ? conv_align (conv_ws_floats (g, pl)) + convtr_next_floats (g, pl, streaming)
                                : conv_ws_floats (g, pl);
    scr = f + 64 > scr ? f + 64 : scr;
  }
  const size_t wn = (size_t) Cout * (Cin / groups) * K;
  /* enough copies of the weights that they come from memory, not the L2, as in a whole frame */
  int copies = (int) ((96u << 20) / (wn * sizeof (float) + 1) + 1);
  copies = copies > 16 ? 16 : copies;
  const size_t xn = (size_t) M * Cin * L;
  const size_t yn = transposed ? (size_t) M * Cout * g.Ly : (size_t) M * Cout * (g.Lout > 0 ? g.Lout : 1);
  const size_t sn = transposed ? (size_t) M * Cout * (g.tail > 0 ? g.tail : 1) : (size_t) M * Cin * (g.P > 0 ? g.P : 1);
  float *wbuf = NULL, *bias = NULL, *x = NULL, *st = NULL, *y = NULL, *scratch = NULL;
  cudaStream_t s = NULL;
  cudaGetLastError ();
  int e = (int) cudaStreamCreateWithFlags (&s, cudaStreamNonBlocking);
  if (!e)
    e = (int) cudaMalloc (&wbuf, wn * copies * sizeof (float));
  if (!e)
    e = (int) cudaMalloc (&bias, Cout * sizeof (float));
  if (!e)
    e = (int) cudaMalloc (&x, (xn ? xn : 1) * sizeof (float));
  if (!e)
    e = (int) cudaMalloc (&st, sn * sizeof (float));
  if (!e)
    e = (int) cudaMalloc (&y, yn * sizeof (float));
  if (!e)
    e = (int) cudaMalloc (&scratch, scr * sizeof (float));
  struct {
    float *p;
    size_t n;
  } fills[] = {{wbuf, wn * copies}, {bias, (size_t) Cout}, {x, xn}, {st, sn}, {y, yn}};
  for (int i = 0; !e && i < 5; i++) {
    ppx_launch (conv_fill_kernel, ppx_grid_for (fills[i].n, 256), 256, 0, s, fills[i].p, fills[i].n, 17u + i);
    e = ppx_cuda_launched ();
  }
  for (int p = 0; !e && p < n_plans; p++) {
    const ConvPlan pl = conv_plan (g, groups, cfgs[p], splits[p]);
    auto call = [&] (int i) {
      const float *w = wbuf + (size_t) (i % copies) * wn;
      return transposed ? convtr_run (act, w, bias, x, streaming ? st : NULL, y, g, groups, pl, scratch, s)
                        : conv1d_run (act, w, bias, x, streaming ? st : NULL, residual ? y : NULL, y, g, groups, pl,
                                      scratch, s);
    };
    e = ppx_time_graph (s, copies < calls ? copies : calls, calls, reps, call, &us[p], step);
  }
  if (s)
    cudaStreamSynchronize (s);
  cudaFree (wbuf);
  cudaFree (bias);
  cudaFree (x);
  cudaFree (st);
  cudaFree (y);
  cudaFree (scratch);
  if (s)
    cudaStreamDestroy (s);
  if (e)
    cudaGetLastError ();
  return e;
}
