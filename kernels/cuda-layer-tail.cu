/* CUDA backend: the rest of a depformer layer after its attention, and the projection after it
 * (ppx_op_layer_tail; docs/cuda.md, "The depformer's layer tail"), as one persistent kernel:
 *
 *   split(att)            | out_proj   (x += ...)
 *   split(rmsnorm(x))     | linear_in  (ff = ...)
 *   split(silu_gate(ff))  | linear_out (x += ...)
 *   split(rmsnorm(x) / x) | next       (y = ...: the next layer's in_proj, or the step's logits)
 *
 * eight phases, a grid barrier between each two. A split phase writes the x operand of the linear after it as
 * hi/lo records in slot order (tc_xsplit_kernel's layout and tc_split_record), with the RMSNorm
 * (rmsnorm_kernel's order and tree) or the gate (ppx_silu_gate) applied first, one block a row; a linear phase
 * runs the tensor-core linear's blocks (TcBlock, the 16-row configuration with the split x, as the unfused
 * launches of the depformer's shapes) as tasks (slice, row block, leaf) of the same K split (tc_plan), the
 * last leaf of a row block adding the leaves in leaf order. So every output has the operations of the
 * unfused ops (rmsnorm, silu_gate, the x split, the linear's chunks and leaves) and the same bits, for every
 * M (tests/cuda-test-tail.c). Each block first asks the L2 for its share of the four weights
 * (cp.async.bulk.prefetch, sm_90), so they stream in from HBM while the first phases run.
 *
 * The blocks must all be resident at once (the grid barrier waits for every one): the grid is at most the
 * occupancy times the SMs, launched cooperatively (PPX_CUDA_FUSE_TAIL=2: a plain launch, for measuring). */
#include "cuda-linear-mma-kernel.cuh"

#define LT_PHASES 4
#define LT_NT 2 /* slices of 2 n-tiles (tc_slices' plan for leaves of 1-2 stages) */

enum { LT_PLAIN = 0, LT_RMSNORM = 1, LT_GATE = 2 };

struct LtSplit {
  const float *x; /* the rows (LT_GATE: [g | v], v at x + K) */
  size_t ldx;
  const float *alpha; /* LT_RMSNORM */
  int kind, K, n_stages, vec;
};

struct LtArgs {
  LtSplit sp[LT_PHASES];
  TcArgs lin[LT_PHASES];
  int M, tiles, row_blocks[LT_PHASES];
  int prefetch; /* ask the L2 for the weights first (PPX_CUDA_TAIL_PREFETCH, default 1) */
  float eps;
  uint4 *xs;     /* the split records of the phase's linear */
  unsigned *bar; /* [2]: barrier arrivals, blocks done (zero between launches) */
};

/* A grid barrier (the k-th of the launch): every block's writes before it are visible to every block after it,
 * the bulk copies (async proxy) included. Arrivals count up over the launch; the last block out zeroes them. */
__device__ __forceinline__ void
lt_grid_sync (unsigned *bar, unsigned target)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile ("fence.proxy.async.global;" ::: "memory");
#endif
  __syncthreads ();
  if (threadIdx.x == 0) {
    __threadfence ();
    atomicAdd (bar, 1u);
    unsigned seen;
    do {
      asm volatile ("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(seen) : "l"(bar) : "memory");
    } while (seen < target);
    __threadfence ();
  }
  __syncthreads ();
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile ("fence.proxy.async.global;" ::: "memory");
#endif
}

/* The L2 prefetch of this block's share of `bytes` at w (16-byte pieces; sm_90). */
__device__ __forceinline__ void
lt_prefetch (const uint8_t *w, size_t bytes)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  const size_t chunk = 4096;
  const size_t n = (bytes + chunk - 1) / chunk;
  for (size_t i = blockIdx.x * (size_t) blockDim.x + threadIdx.x; i < n; i += (size_t) gridDim.x * blockDim.x) {
    const size_t off = i * chunk, len = bytes - off < chunk ? bytes - off : chunk;
    asm volatile ("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(w + off), "r"((unsigned) len) : "memory");
  }
#endif
}

/* Row r's records of split phase s (all stages, k-steps and lanes of the row; zeros past M and K), the
 * normalization or the gate applied first. The whole block takes one row. */
template <int FMT>
__device__ __forceinline__ void
lt_split_row (const LtArgs &a, const LtSplit &s, int r, float *red)
{
  const bool live = r < a.M;
  const float *xr = s.x + (size_t) (live ? r : 0) * s.ldx;
  float inv = 0.0f;
  if (s.kind == LT_RMSNORM && live) {
    /* rmsnorm_kernel's sum: thread t columns 4t .. 4t + 3, then 4t + 4 * 256 .., then ppx_block_sum */
    float ss = 0.0f;
    for (int c4 = 4 * (int) threadIdx.x; c4 < s.K; c4 += 4 * TC_THREADS) {
      float v[4];
      if (s.vec) {
        const float4 q = __ldcg (reinterpret_cast<const float4 *> (xr + c4));
        v[0] = q.x, v[1] = q.y, v[2] = q.z, v[3] = q.w;
      } else {
#pragma unroll
        for (int j = 0; j < 4; j++)
          v[j] = c4 + j < s.K ? __ldcg (xr + c4 + j) : 0.0f;
      }
#pragma unroll
      for (int j = 0; j < 4; j++)
        ss += v[j] * v[j];
    }
    ss = ppx_block_sum (ss, red);
    inv = 1.0f / sqrtf (a.eps + ss / (float) s.K);
  }
  const int nrec = s.n_stages * 32, g = r & 7, tile = r >> 3;
  for (int i = threadIdx.x; i < nrec; i += TC_THREADS) {
    const int st = i >> 5, q = (i >> 2) & 7, t = i & 3, col0 = st * TC_STAGE;
    const int c = tc_col<FMT> (col0, col0 + TC_STAGE <= s.K, q, t);
    float v[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    if (live) {
#pragma unroll
      for (int j = 0; j < 4; j++) {
        if (c + j >= s.K)
          continue;
        const float xv = __ldcg (xr + c + j);
        if (s.kind == LT_RMSNORM)
          v[j] = xv * (__ldg (s.alpha + c + j) * inv); /* rmsnorm_kernel's y */
        else if (s.kind == LT_GATE)
          v[j] = ppx_silu_gate (xv, __ldcg (xr + s.K + c + j)); /* silu_gate_kernel's u */
        else
          v[j] = xv;
      }
    }
    a.xs[((size_t) st * a.tiles + tile) * 256 + q * 32 + g * 4 + t] = tc_split_record (make_float4 (v[0], v[1], v[2], v[3]));
  }
}

/* One task of a linear phase: tc_linear_kernel's block (slice x, row block y, leaf z) on the split x, its
 * ring's mbarriers carried over from the block's earlier tasks (*par: bit d = the parity slot d's next use
 * waits for). */
template <int FMT, int CK>
__device__ __forceinline__ void
lt_linear_task (const TcArgs &L, TcTaskIdx ix, uint4 *smem, uint64_t *xbar, unsigned *ticket, unsigned *par)
{
  using C = TcCfg<FMT, CK, LT_NT>;
  const TcBlock<FMT, CK, LT_NT, false, TcTaskIdx> b (L, ix);
  const int D = L.depth;
  const int st0 = ix.z * L.leaf_stages, nstg = min (L.leaf_stages, L.n_stages - st0);
  __syncthreads (); /* the previous task's slots and ticket are read */
  for (int d = 0; d < D - 1; d++)
    if (d < nstg)
      b.issue_weights (smem + d * C::SLOT, st0 + d);
  for (int d = 0; d < D - 1; d++) {
    if (d < nstg)
      b.issue_x (smem + d * C::SLOT, st0 + d, &xbar[d]);
    cp_async_commit ();
  }
  float acc[C::RTW][C::NTW][4];
#pragma unroll
  for (int rt = 0; rt < C::RTW; rt++)
#pragma unroll
    for (int nt = 0; nt < C::NTW; nt++)
#pragma unroll
      for (int i = 0; i < 4; i++)
        acc[rt][nt][i] = 0.0f;
  int rd = 0, wr_slot = D - 1;
  for (int jj = 0; jj < nstg; jj++) {
    uint4 *slot = smem + rd * C::SLOT;
    cp_async_wait_n (D - 2);
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    mbar_wait (&xbar[rd], ((*par >> rd) ^ (unsigned) (jj / D)) & 1u);
#endif
    __syncthreads ();
    if (jj + D - 1 < nstg) {
      b.issue_x (smem + wr_slot * C::SLOT, st0 + jj + D - 1, &xbar[wr_slot]);
      b.issue_weights (smem + wr_slot * C::SLOT, st0 + jj + D - 1);
    }
    cp_async_commit ();
    b.compute (acc, slot, st0 + jj);
    rd = rd + 1 == D ? 0 : rd + 1;
    wr_slot = wr_slot + 1 == D ? 0 : wr_slot + 1;
  }
  cp_async_wait<0> ();
  for (int d = 0; d < D; d++) /* slot d was used for stages d, d + D, ... */
    if (d < nstg && (((nstg - 1 - d) / D + 1) & 1))
      *par ^= 1u << d;
  b.store_leaf (acc);
  if (L.S > 1 && b.last_leaf (ticket))
    b.combine_leaves ();
}

template <int FMT, int CK>
__global__ void __launch_bounds__ (TC_THREADS, (TcCfg<FMT, CK, LT_NT>::MINB))
layer_tail_kernel (const __grid_constant__ LtArgs a)
{
  extern __shared__ uint4 smem[];
  __shared__ unsigned ticket;
  __shared__ float red[32];
  __shared__ uint64_t xbar[TC_DEPTH_MAX];
  for (int p = 0; a.prefetch && p < LT_PHASES; p++)
    lt_prefetch (a.lin[p].w, (size_t) a.lin[p].rows * a.lin[p].row_bytes);
  if ((int) threadIdx.x < a.lin[0].depth)
    mbar_init (&xbar[threadIdx.x]);
  unsigned par = 0, target = 0;
  const unsigned nb = gridDim.x;
  for (int p = 0; p < LT_PHASES; p++) {
    for (int r = blockIdx.x; r < a.tiles * 8; r += gridDim.x)
      lt_split_row<FMT> (a, a.sp[p], r, red);
    lt_grid_sync (a.bar, target += nb);
    const TcArgs &L = a.lin[p];
    const int rb = a.row_blocks[p], ntask = L.n_slices * rb * L.S;
    for (int task = blockIdx.x; task < ntask; task += gridDim.x) {
      const TcTaskIdx ix = {task % L.n_slices, (task / L.n_slices) % rb, task / (L.n_slices * rb), L.n_slices};
      lt_linear_task<FMT, CK> (L, ix, smem, xbar, &ticket, &par);
    }
    if (p + 1 < LT_PHASES)
      lt_grid_sync (a.bar, target += nb);
  }
  /* the last block out leaves the barrier's words zero for the next launch (every block has passed every
   * barrier by then) */
  __syncthreads ();
  if (threadIdx.x == 0) {
    __threadfence ();
    if (atomicAdd (a.bar + 1, 1u) == nb - 1) {
      a.bar[0] = 0u;
      a.bar[1] = 0u;
    }
  }
}

/* ---- host side ---- */

static int tail_mode = -1; /* ppx_cuda_tail_fusion_set: -1 the environment's PPX_CUDA_FUSE_TAIL */

extern "C" void
ppx_cuda_tail_fusion_set (int mode)
{
  __atomic_store_n (&tail_mode, mode < 0 ? -1 : mode, __ATOMIC_RELAXED);
}

/* 0 off, 1 on (cooperative launch), 2 on (plain launch) */
static int
tail_fusion (void)
{
  const int m = __atomic_load_n (&tail_mode, __ATOMIC_RELAXED);
  if (m >= 0)
    return m;
  static const int env = env_int ("PPX_CUDA_FUSE_TAIL", 0, 2, 0);
  return env;
}

static const PpxCudaWeight *
tail_weight (const PpxCudaLayerTail *t, int p)
{
  return p == 0 ? &t->out_proj : p == 1 ? &t->linear_in : p == 2 ? &t->linear_out : &t->next;
}

extern "C" int
ppx_cuda_layer_tail_fuses (const PpxCudaLayerTail *t, int M)
{
  if (!tail_fusion () || M < 1 || M > TC_MMAX)
    return 0;
  const int ck = ppx_linear_mma_eligible (&t->out_proj);
  const int64_t d = t->out_proj.rows, F = t->linear_out.cols;
  if (!ck || t->out_proj.cols != d || t->linear_in.cols != d || t->linear_in.rows != 2 * F || t->linear_out.rows != d ||
      t->next.cols != d)
    return 0;
  for (int p = 1; p < LT_PHASES; p++) {
    const PpxCudaWeight *w = tail_weight (t, p);
    if (w->format != t->out_proj.format || ppx_linear_mma_eligible (w) != ck)
      return 0;
  }
  for (int p = 0; p < LT_PHASES; p++) /* a counter per (row block, slice); the last two are the grid barrier's */
    if ((tail_weight (t, p)->rows + 127) / 128 * (((M + 7) / 8 + 1) / 2) > TC_MAX_COUNTERS - 2)
      return 0;
  return 1;
}

/* counters (the last two words: the grid barrier), the largest phase's partial sums, the largest split x */
extern "C" size_t
ppx_cuda_layer_tail_workspace_bytes (const PpxCudaLayerTail *t, int M)
{
  size_t partials = 0, xs = 0;
  for (int p = 0; p < LT_PHASES; p++) {
    TcArgs a = {};
    ppx_linear_mma_weight_args (tail_weight (t, p), &a);
    const size_t pb = a.S > 1 ? (size_t) a.S * TC_MMAX * (size_t) a.rows * sizeof (float) : 0;
    const size_t xb = (size_t) a.n_stages * (size_t) ((M + 7) / 8) * 256 * sizeof (uint4);
    partials = pb > partials ? pb : partials;
    xs = xb > xs ? xb : xs;
  }
  return TC_MAX_COUNTERS * sizeof (unsigned) + partials + xs;
}

template <int FMT, int CK>
static int
tail_launch (LtArgs &a, cudaStream_t s)
{
  using C = TcCfg<FMT, CK, LT_NT>;
  static_assert (C::ROWS == 128, "row blocks of 128 weight rows (the host side counts them so)");
  auto kernel = layer_tail_kernel<FMT, CK>;
  const int sms = ppx_sm_count ();
  const int depth = tc_depth<FMT, CK, LT_NT> ((int64_t) C::MINB * sms);
  if (depth < 2)
    return (int) cudaErrorInvalidConfiguration;
  const size_t smem = (size_t) depth * C::SLOT * sizeof (uint4);
  static unsigned long long attr_set; /* bit d: the shared-memory limit set on device d */
  int dev = 0;
  cudaGetDevice (&dev);
  if (dev < 0 || dev >= 64 || !(attr_set >> dev & 1)) {
    int per_block, per_sm;
    tc_smem_limits (&per_block, &per_sm);
    cudaError_t e = cudaFuncSetAttribute (kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, per_block - 1024);
    if (e != cudaSuccess)
      return (int) e;
    if (dev >= 0 && dev < 64)
      __atomic_or_fetch (&attr_set, 1ull << dev, __ATOMIC_RELAXED);
  }
  int per_sm = 0;
  cudaError_t e = cudaOccupancyMaxActiveBlocksPerMultiprocessor (&per_sm, kernel, TC_THREADS, smem);
  if (e != cudaSuccess)
    return (int) e;
  if (per_sm < 1)
    return (int) cudaErrorInvalidConfiguration;
  /* blocks an SM: PPX_CUDA_TAIL_BLOCKS (1 or 2, for measuring; a task's result does not depend on the block that
   * runs it) or as many as fit, at most MINB */
  static const int want = env_int ("PPX_CUDA_TAIL_BLOCKS", 1, 2, C::MINB);
  per_sm = per_sm < want ? per_sm : want;
  static const int prefetch = env_int ("PPX_CUDA_TAIL_PREFETCH", 0, 1, 1);
  a.prefetch = prefetch;
  for (int p = 0; p < LT_PHASES; p++)
    a.lin[p].depth = depth;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeCooperative;
  attr[0].val.cooperative = 1;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3 ((unsigned) (per_sm * sms));
  cfg.blockDim = dim3 (TC_THREADS);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = s;
  cfg.attrs = attr;
  cfg.numAttrs = tail_fusion () == 2 ? 0 : 1;
  cudaLaunchKernelEx (&cfg, kernel, a);
  return ppx_cuda_launched ();
}

extern "C" int
ppx_cuda_layer_tail (const PpxCudaLayerTail *t, int M, void *workspace, void *stream)
{
  const int ck = ppx_cuda_layer_tail_fuses (t, M) ? ppx_linear_mma_eligible (&t->out_proj) : 0;
  if (!ck || !workspace)
    return (int) cudaErrorInvalidValue;
  const int64_t d = t->out_proj.rows, F = t->linear_out.cols, n = t->next.rows;
  LtArgs a = {};
  a.M = M;
  a.tiles = (M + 7) / 8;
  a.eps = t->eps;
  a.bar = (unsigned *) workspace + TC_MAX_COUNTERS - 2;
  float *partials = (float *) ((char *) workspace + TC_MAX_COUNTERS * sizeof (unsigned));
  size_t pmax = 0;
  const float *in[LT_PHASES] = {t->att, t->x, t->ff, t->x};
  const size_t ldin[LT_PHASES] = {(size_t) d, (size_t) d, (size_t) (2 * F), (size_t) d};
  const int kind[LT_PHASES] = {LT_PLAIN, LT_RMSNORM, LT_GATE, t->next_norm ? LT_RMSNORM : LT_PLAIN};
  const float *alpha[LT_PHASES] = {NULL, t->norm2, NULL, t->next_norm};
  float *out[LT_PHASES] = {t->x, t->ff, t->x, t->y};
  const size_t ldout[LT_PHASES] = {(size_t) d, (size_t) (2 * F), (size_t) d, (size_t) n};
  for (int p = 0; p < LT_PHASES; p++) {
    TcArgs &L = a.lin[p];
    ppx_linear_mma_weight_args (tail_weight (t, p), &L);
    LtSplit &sp = a.sp[p];
    sp.x = in[p];
    sp.ldx = ldin[p];
    sp.alpha = alpha[p];
    sp.kind = kind[p];
    sp.K = L.K;
    sp.n_stages = L.n_stages;
    sp.vec = (ldin[p] % 4) == 0 && ((uintptr_t) in[p] & 15) == 0;
    L.x = in[p];
    L.ldx = ldin[p];
    L.y = out[p];
    L.ldy = ldout[p];
    L.M = M;
    L.accumulate = p == 0 || p == 2;
    L.slice_tiles = 2;
    L.n_slices = (a.tiles + 1) / 2;
    L.vec_x = sp.vec;
    L.vec_y = (ldout[p] % 4) == 0 && ((uintptr_t) out[p] & 15) == 0;
    L.counters = (unsigned *) workspace;
    L.partials = partials;
    L.pm = TC_MMAX; /* partials laid out [S][TC_MMAX][rows], as sized below */
    L.xs_tiles = a.tiles;
    a.row_blocks[p] = (int) ((L.rows + 127) / 128);
    const size_t pb = L.S > 1 ? (size_t) L.S * TC_MMAX * (size_t) L.rows * sizeof (float) : 0;
    pmax = pb > pmax ? pb : pmax;
  }
  a.xs = (uint4 *) ((char *) partials + pmax);
  for (int p = 0; p < LT_PHASES; p++)
    a.lin[p].xs = a.xs;
  cudaStream_t s = PPX_CUDA_STREAM (stream);
  switch (t->out_proj.format) {
    case PPX_CUDA_W_BF16:
      return tail_launch<PPX_CUDA_W_BF16, 8> (a, s);
    case PPX_CUDA_W_INT8:
      return tail_launch<PPX_CUDA_W_INT8, 8> (a, s);
    default:
      return ck == 2 ? tail_launch<PPX_CUDA_W_INT4, 2> (a, s)
             : ck == 4 ? tail_launch<PPX_CUDA_W_INT4, 4> (a, s)
                       : tail_launch<PPX_CUDA_W_INT4, 8> (a, s);
  }
}
