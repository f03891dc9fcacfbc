/* CUDA backend: linear layers on the tensor cores (docs/cuda.md, "Linear layers"); the entry points that
 * choose this path are in cuda-linear.cu, its tile configuration and fragment helpers in cuda-linear-mma.cuh.
 *
 * Tensor cores (bf16, int8, int4 with group 32, 64 or a multiple of 128): mma.sync m16n8k16 (sm_80 and
 * later, so one code path for sm_80..sm_90). The weight rows are the A operand (16 rows a tile), up to 64
 * rows of x the B operand (8 rows a tile). Weights are exact in bf16 (bf16 values; int8 and int4 codes),
 * converted in registers; x is split into two bf16 parts, x = hi + lo (hi = bf16(x), lo = bf16(x - hi)),
 * and each k-step does two mma, so x keeps 16 significant bits (relative error ~2e-6 against the CPU's
 * f32, where bf16 x alone gives ~1e-3). Sums run in f32: the tensor cores add up one chunk of k-steps
 * (an int4 group, or 128 columns) from zero, and the chunk is added to a running f32 sum (times the
 * group's scale for int4) on the CUDA cores; int8 row scales are applied at the end.
 *
 * A block owns 128 weight rows (64 for bf16 at M > 16) and one "leaf" of K: K is split into S leaves so
 * that every SM gets the same share of the weights (tc_plan); each block then writes its leaf's sums to a
 * workspace and the last block of a row block to finish adds the leaves up in leaf order. S depends on the
 * weight's shape and the device only, never on M, and every output element is computed by the same
 * sequence of operations whatever M is and wherever its x row sits in the batch: a batched call reproduces
 * one-row calls bit for bit (tests/test-backend-cuda.c checks this).
 *
 * Within a leaf the block streams stages of 128 columns through a ring of up to 4 shared-memory slots
 * filled by cp.async, one commit group per stage: x (as raw f32, converted in place into hi/lo bf16
 * records already in mma B-fragment order), the block's weights (laid out as the warps' A fragments) and
 * the int4 scales. The wait is explicit (cp.async.wait_group), so D - 1 stages are really in flight; the
 * earlier version kept the weights' next stages in registers, which the compiler tracked on one
 * dependency scoreboard, so every stage waited for all of them (docs/cuda.md, "Linear layers").
 * A thread's 16 bytes of a weight row hold its A-fragment values for 2 (bf16), 4 (int8) or 8 (int4)
 * k-steps; the k order inside a k-step is free as long as x is staged in the same order. For int4 that order
 * must keep each k-step inside one scale group, so int4 rows are repacked at load (ppx_cuda_int4_repack:
 * a permutation inside each full 128-column block of a row; rows stay whole, so row slices and the
 * weight's byte count are unchanged). A tail of K % 128 columns keeps the quant.h layout and is read with
 * scalar loads. */
#include "cuda-linear-gemv.cuh"

#include <stdlib.h>

/* x [M][K] (row stride ldx) split into hi/lo records in slot order for the launches with NT > 1, once per
 * launch instead of once per block and stage: out[(st * tiles + tile) * 256 + q * 32 + lane] holds row
 * 8 tile + g, columns tc_col (st * 128, full, q, t) .. + 3 (zeros past M and K: what the kernel's zero-filled
 * copies held), split by tc_split_record as the kernel splits them at NT = 1. */
template <int FMT>
__global__ void
tc_xsplit_kernel (const float *x, size_t ldx, int M, int K, int n_stages, int tiles, int vec_x, uint4 *out)
{
  ppx_pdl_enter ();
  const int64_t n = (int64_t) n_stages * tiles * 256;
  for (int64_t i = blockIdx.x * (int64_t) blockDim.x + threadIdx.x; i < n; i += (int64_t) gridDim.x * blockDim.x) {
    const int rec = (int) (i % 256), tile = (int) ((i / 256) % tiles), st = (int) (i / 256 / tiles);
    const int q = rec >> 5, g = (rec & 31) >> 2, t = rec & 3, m = 8 * tile + g, col0 = st * TC_STAGE;
    const int c = tc_col<FMT> (col0, col0 + TC_STAGE <= K, q, t);
    const float4 v = tc_load_x4 (x, ldx, M, K, m, c, vec_x);
    out[i] = tc_split_record (v);
  }
}

/* Chunk length in k-steps for the tensor-core path, or 0 when the weight takes the CUDA-core path. */
static int
tc_chunk (const PpxCudaWeight *w)
{
  switch (w->format) {
    case PPX_CUDA_W_BF16:
    case PPX_CUDA_W_INT8:
      return 8;
    case PPX_CUDA_W_INT4:
      return w->group_size == 32 ? 2 : w->group_size == 64 ? 4 : w->group_size % 128 == 0 ? 8 : 0;
    default:
      return 0;
  }
}

/* Chunk length when the tensor-core path takes this weight: a supported format and group size, rows that
 * start on 16 bytes (cp.async), K below 2^30; else 0 (the CUDA-core path). */
int
ppx_linear_mma_eligible (const PpxCudaWeight *w)
{
  const int ck = tc_chunk (w);
  if (!ck || w->cols <= 0 || w->cols >= ((int64_t) 1 << 30) || ((uintptr_t) w->data & 15) != 0)
    return 0;
  const int64_t row_bytes = w->format == PPX_CUDA_W_BF16 ? 2 * w->cols
                            : w->format == PPX_CUDA_W_INT8 ? w->cols
                                                           : (w->cols + 1) / 2;
  return row_bytes % 16 == 0 ? ck : 0;
}

extern "C" int
ppx_cuda_int4_repacked (int group_size)
{
  PpxCudaWeight w = {PPX_CUDA_W_INT4, 1, 1, group_size, NULL, NULL};
  return tc_chunk (&w) != 0;
}

/* Planned resident blocks per SM: TC_PLAN_BLOCKS_PER_SM, or PPX_CUDA_LINEAR_PLAN_BLOCKS (1..16, read once;
 * for measuring other plans: it changes the K split, hence the summation order, for every M alike). */
static int
plan_blocks_per_sm (void)
{
  static int v = -1;
  if (v < 0) {
    const char *e = getenv ("PPX_CUDA_LINEAR_PLAN_BLOCKS");
    const int n = e ? atoi (e) : 0;
    v = n >= 1 && n <= 16 ? n : TC_PLAN_BLOCKS_PER_SM;
  }
  return v;
}

/* K split into S leaves of leaf_stages stages each. Every SM should get the same amount of weights: with
 * B = row blocks x S blocks spread over the SMs, the busiest SM streams ceil(B / SMs) leaves of
 * leaf_stages stages; S minimizes that, among the S whose blocks are all resident at once (B <= planned
 * blocks per SM x SMs, or S = 1), the smaller S on a tie (fewer partial sums). It depends on the shape and
 * the device, never on M. */
static void
tc_plan (const PpxCudaWeight *w, int *n_stages, int *leaf_stages, int *S)
{
  const int nst = (int) ((w->cols + TC_STAGE - 1) / TC_STAGE);
  const int64_t row_blocks = (w->rows + TC_SPLIT_ROWS - 1) / TC_SPLIT_ROWS;
  const int64_t sms = ppx_sm_count (), slots = sms * plan_blocks_per_sm ();
  static int more_on_tie = -1; /* PPX_CUDA_LINEAR_PLAN_TIE=1: the larger S on a tie (measuring only) */
  if (more_on_tie < 0) {
    const char *e = getenv ("PPX_CUDA_LINEAR_PLAN_TIE");
    more_on_tie = e && atoi (e) == 1;
  }
  int best_leaf = nst;
  int64_t best_cost = -1;
  for (int s = 1; s <= nst && s <= 64; s++) {
    const int leaf = (nst + s - 1) / s;
    const int64_t blocks = row_blocks * ((nst + leaf - 1) / leaf);
    if (s > 1 && blocks > slots)
      break;
    const int64_t cost = (blocks + sms - 1) / sms * leaf;
    if (best_cost < 0 || cost < best_cost || (more_on_tie && cost == best_cost)) {
      best_cost = cost;
      best_leaf = leaf;
    }
  }
  *n_stages = nst;
  *leaf_stages = best_leaf;
  *S = (nst + best_leaf - 1) / best_leaf;
}

/* Whether a launch of m rows (m <= TCW_MMAX) on w takes the wgmma configuration (cuda-linear-wgmma.cu): a device
 * of compute capability 9.0 and a build with sm_90a, and
 * - int4 weights: m at least PPX_CUDA_LINEAR_WGMMA (read once; default 17: measured faster from 17 rows on every
 *   temporal shape, mixed at 9..16 and slower for the large shapes at M <= 8; 0: never);
 * - int8 weights: m at least PPX_CUDA_LINEAR_WGMMA_INT8 for every shape where that is set (else
 *   PPX_CUDA_LINEAR_WGMMA where that is set; 0: never); by default from 17 rows where a leaf of K is 3 stages or
 *   more (the temporal shapes, the text head, the depformer's FFN in: faster from 17 rows, 4096 x 4096 at 32
 *   aside), from TCW_INT8_DEP_MIN_M rows where it is 1 or 2 (the depformer's other linears, latency-bound: in the
 *   same slices wgmma is 0-4 % faster than mma.sync past 128 rows, up to 5 % slower at 17..256 in slices of 2; H100,
 *   H200, docs/cuda.md "int8 on wgmma");
 * - bf16 weights: m at least PPX_CUDA_LINEAR_WGMMA_BF16 for every shape where that is set (else
 *   PPX_CUDA_LINEAR_WGMMA where that is set; 0: never); by default from 17 rows where a leaf of K is 3 stages or
 *   more (the temporal shapes: docs/cuda.md "bf16 on wgmma"), never where it is 1 or 2 (the depformer's
 *   latency-bound shapes keep mma.sync: their bf16 slices stay 2 n-tiles, where int8 on wgmma was slower).
 * A row's bits are the same either way (docs/cuda.md, "wgmma (sm_90a)"), so the switch may depend on M and on
 * the shape. */
#define TCW_INT8_DEP_MIN_M 129
static bool
tc_wgmma (const PpxCudaWeight *w, int m)
{
  static const int min_m = env_int ("PPX_CUDA_LINEAR_WGMMA", 0, TCW_MMAX + 1, 17);
  static const int min_m8 =
    env_int ("PPX_CUDA_LINEAR_WGMMA_INT8", 0, TCW_MMAX + 1, getenv ("PPX_CUDA_LINEAR_WGMMA") ? min_m : -1);
  static const int min_m16 =
    env_int ("PPX_CUDA_LINEAR_WGMMA_BF16", 0, TCW_MMAX + 1, getenv ("PPX_CUDA_LINEAR_WGMMA") ? min_m : -1);
  int lo = 0;
  if (w->format == PPX_CUDA_W_INT4) {
    lo = min_m;
  } else if (w->format == PPX_CUDA_W_INT8 || w->format == PPX_CUDA_W_BF16) {
    lo = w->format == PPX_CUDA_W_INT8 ? min_m8 : min_m16;
    if (lo < 0) {
      int nst, leaf, S;
      tc_plan (w, &nst, &leaf, &S);
      lo = leaf >= 3 ? 17 : w->format == PPX_CUDA_W_INT8 ? TCW_INT8_DEP_MIN_M : 0;
    }
  }
  return lo > 0 && m >= lo && ppx_linear_wgmma_available ();
}

int
ppx_linear_mma_wgmma_at (const PpxCudaWeight *w, int M)
{
  return tc_wgmma (w, M < TCW_MMAX ? M : TCW_MMAX);
}

extern "C" int
ppx_cuda_linear_wgmma_at (const PpxCudaWeight *w, int M)
{
  return ppx_linear_mma_eligible (w) && ppx_linear_mma_wgmma_at (w, M);
}

/* The x rows of a call's launches at most: TCW_MMAX (256), as slices of one launch (up to TCW_NT n-tiles a
 * slice on wgmma, 16 on mma.sync) whose blocks of one row block and leaf run side by side, so the weights
 * stream from memory once for M <= 256 (a second slice reads them from the L2) and a latency-bound shape (the
 * depformer's) pays one launch, not two. `fused`: the fused RMSNorm / gate kernels (M <= 8 in the engine),
 * TC_MMAX. PPX_CUDA_LINEAR_LAUNCH_ROWS=128 (measuring only) gives mma.sync its two launches back (128 rows,
 * then the rest), as before 2026-11-28. A call's partial sums and split x records are sized for min (M, this). */
static int
tc_launch_rows (const PpxCudaWeight *w, int M, bool fused)
{
  static const int mma_rows = env_int ("PPX_CUDA_LINEAR_LAUNCH_ROWS", TC_MMAX, TCW_MMAX, TCW_MMAX);
  if (fused)
    return TC_MMAX;
  return tc_wgmma (w, M < TCW_MMAX ? M : TCW_MMAX) ? TCW_MMAX : mma_rows;
}

extern "C" int
ppx_cuda_linear_launch_rows (const PpxCudaWeight *w, int M)
{
  if (M <= 0 || !ppx_linear_mma_eligible (w))
    return 0;
  const int l = tc_launch_rows (w, M, false);
  return M < l ? M : l;
}

/* Bytes of the split x records of one launch of up to min (M, launch rows) rows (0 for M <= 8 on mma.sync:
 * NT = 1 splits x itself). */
static size_t
tc_xs_bytes (const PpxCudaWeight *w, int M)
{
  const int l = tc_launch_rows (w, M, false), m = M < l ? M : l;
  if (m <= 8 && !tc_wgmma (w, m))
    return 0;
  return (size_t) ((w->cols + TC_STAGE - 1) / TC_STAGE) * (size_t) ((m + 7) / 8) * 256 * sizeof (uint4);
}

/* The leaves' partial sums of a call: [S][pm][rows] floats, pm = min (M, launch rows) (0 when S = 1), rounded
 * up to 256 bytes: the split x records after them are read 16 bytes at a time (S pm rows floats alone need not
 * be a multiple of 16 bytes: 33 rows, M = 70 stopped a launch on a misaligned address). */
static size_t
tc_partials_bytes (const PpxCudaWeight *w, int S, int M)
{
  const int l = tc_launch_rows (w, M, false), pm = M < l ? M : l;
  const size_t b = S > 1 ? (size_t) S * (size_t) pm * (size_t) w->rows * sizeof (float) : 0;
  return (b + 255) / 256 * 256;
}

/* The workspace: the leaves' counters and partial sums when K is split (S > 1), then the split x records
 * when M > 8. */
extern "C" size_t
ppx_cuda_linear_workspace_bytes (const PpxCudaWeight *w, int M)
{
  if (M <= 0 || w->rows <= 0 || !ppx_linear_mma_eligible (w))
    return 0;
  int nst, leaf, S;
  tc_plan (w, &nst, &leaf, &S);
  const size_t partials = tc_partials_bytes (w, S, M);
  const size_t xs = tc_xs_bytes (w, M);
  return partials || xs ? TC_MAX_COUNTERS * sizeof (unsigned) + partials + xs : 0;
}

/* Whether the 16-tile configuration fits this device's shared memory (sm_80, sm_90: yes); else a slice holds
 * at most 8 n-tiles (PPX_CUDA_LINEAR_MMAX=64 forces that, to measure). */
template <int FMT, int CK>
static bool
tc_nt16_fits (void)
{
  static const int forced = env_int ("PPX_CUDA_LINEAR_MMAX", 64, TC_MMAX, TC_MMAX);
  return forced > 64 && tc_depth<FMT, CK, 16> (0) >= 2;
}

/* The configuration for a slice of a.slice_tiles n-tiles: the fewest n-tiles that hold them (1 for M <= 8,
 * then 2, 4, 8, 16). Only where the work runs depends on it. */
template <int FMT, int CK>
static int
tc_launch_nt (const TcArgs &a, cudaStream_t s)
{
  if (a.M <= 8) {
    /* the barrier-free kernel (cuda-linear-gemv.cuh) where the leaf's x fits beside its ring: the same bits */
    if (tc_gemv_on ()) {
      const int e = tc_gemv_launch<FMT, CK> (a, s);
      if (e >= 0)
        return e;
    }
    return tc_launch<FMT, CK, 1> (a, s);
  }
  if (a.slice_tiles <= 2)
    return tc_launch<FMT, CK, 2> (a, s);
  if (a.slice_tiles <= 4)
    return tc_launch<FMT, CK, 4> (a, s);
  if (a.slice_tiles <= 8)
    return tc_launch<FMT, CK, 8> (a, s);
  return tc_launch<FMT, CK, 16> (a, s);
}

static int forced_slice_tiles; /* ppx_cuda_linear_force_slice: 0 = planned */

extern "C" void
ppx_cuda_linear_force_slice (int tiles)
{
  __atomic_store_n (&forced_slice_tiles, tiles < 0 ? 0 : tiles, __ATOMIC_RELAXED);
}

/* How a launch of M x rows (M <= TC_MMAX, TCW_MMAX for wgmma) is spread over blocks along x: slices of
 * *slice_tiles n-tiles (8 rows each; the last slice may hold fewer), *n_slices of them per row block and
 * leaf. Each slice reads the block's weights again (from the L2 when the slices run side by side) and
 * dequantizes them again, so fewer, larger slices cost less; more of them give more blocks and more warps per SM. Nothing here
 * changes a result: a row's sums are the same in any slice (docs/cuda.md, "Linear layers").
 * Measured on an H100 (docs/cuda.md): slices of 2 n-tiles (the 16-row configuration, 2 blocks an SM) up
 * to 32 rows, and at any M for leaves of 1 or 2 stages (the depformer's 1024-column shapes: few blocks,
 * latency-bound); else one slice (the 64- or 128-row configuration, whose warps reuse each dequantized
 * weight fragment over more n-tiles).
 * max_tiles: 16, or 8 where the 16-tile configuration does not fit, TCW_NT (25) for wgmma (one slice up to
 * 200 rows, two from 201; int8 TCW_NT8, 24; bf16 TCW_NT16, 20); max_slices: as many as the counters allow for the row blocks (very
 * tall weights: fewer, larger slices). Forced (the bench's sweep) by ppx_cuda_linear_force_slice or
 * PPX_CUDA_LINEAR_SLICE (n-tiles a slice).
 * int8 weights, not forced (measured on an H100 and an H200, docs/cuda.md "int8 on wgmma"): from 16 n-tiles
 * (121 rows), slices of PPX_CUDA_LINEAR_SLICE_DEP n-tiles (default 4; 0: the rule above) on either path where
 * the leaves are 1-2 stages (the depformer's latency-bound shapes; at M = 128..256 up to 28 % faster than
 * slices of 2: ~4x the blocks the SMs hold, each paying a slice's fixed costs) and, up to 20 n-tiles, 3 stages
 * (5632 x 1024); past 20 n-tiles that shape takes slices of at most 16 on wgmma (two slices of 13 or 16 beat
 * slices of 4 there, and one slice of 17..24, the wide configuration, was 9 % slower at M = 160). */
static void
tc_slices (int M, int leaf_stages, int max_tiles, int max_slices, bool wg, bool int8, int *slice_tiles, int *n_slices)
{
  const int tiles = (M + 7) / 8;
  if (M <= 8) {
    *slice_tiles = 1;
    *n_slices = 1;
    return;
  }
  static const int env = env_int ("PPX_CUDA_LINEAR_SLICE", 2, TCW_NT, 0);
  static const int dep = env_int ("PPX_CUDA_LINEAR_SLICE_DEP", 0, TCW_NT, 4);
  if (int8 && wg && leaf_stages <= 3 && max_tiles > 16)
    max_tiles = 16;
  int want = __atomic_load_n (&forced_slice_tiles, __ATOMIC_RELAXED);
  if (want <= 0)
    want = env;
  if (want <= 0 && int8 && tiles >= 16 && (leaf_stages <= 2 || (leaf_stages == 3 && tiles <= 20)))
    want = dep;
  if (want <= 0)
    want = (M <= 32 && !wg) || leaf_stages <= 2 ? 2 : max_tiles; /* wgmma: one slice also at 17..32 rows (measured) */
  if (max_slices >= 1 && (tiles + want - 1) / want > max_slices)
    want = (tiles + max_slices - 1) / max_slices; /* one counter per row block and slice */
  want = want < 2 ? 2 : want > max_tiles ? max_tiles : want;
  const int n = (tiles + want - 1) / want;
  *n_slices = n;
  *slice_tiles = (tiles + n - 1) / n; /* the slices as even as the tiles allow */
  if (*slice_tiles < 2)
    *slice_tiles = 2, *n_slices = (tiles + 1) / 2;
}

void
ppx_linear_mma_weight_args (const PpxCudaWeight *w, TcArgs *a)
{
  a->w = (const uint8_t *) w->data;
  a->scales = w->scales;
  a->rows = w->rows;
  a->K = (int) w->cols;
  a->row_bytes = (int) (w->format == PPX_CUDA_W_BF16 ? 2 * w->cols
                        : w->format == PPX_CUDA_W_INT8 ? w->cols
                                                       : (w->cols + 1) / 2);
  a->group_size = w->group_size;
  a->n_groups = w->format == PPX_CUDA_W_INT4 ? (int) ((w->cols + w->group_size - 1) / w->group_size) : 0;
  tc_plan (w, &a->n_stages, &a->leaf_stages, &a->S);
}

int
ppx_linear_mma (const PpxCudaWeight *w, int ck, const float *x, size_t ldx, float *y, size_t ldy, int M, int accumulate,
                const float *alpha, float eps, int gate, void *workspace, cudaStream_t s)
{
  TcArgs a = {};
  ppx_linear_mma_weight_args (w, &a);
  a.alpha = alpha;
  a.eps = eps;
  a.gate = gate;
  a.accumulate = accumulate;
  a.ldx = ldx;
  a.ldy = ldy;
  a.vec_x = (ldx % 4) == 0 && ((uintptr_t) x & 15) == 0;
  a.vec_y = (ldy % 4) == 0 && ((uintptr_t) y & 15) == 0;
  a.counters = (unsigned *) workspace;
  a.partials = (float *) ((char *) workspace + TC_MAX_COUNTERS * sizeof (unsigned));
  if (a.S > 1 && (!workspace || (w->rows + 63) / 64 > TC_MAX_COUNTERS))
    return (int) cudaErrorInvalidValue;
  if ((M > 8 || tc_wgmma (w, M)) && !workspace)
    return (int) cudaErrorInvalidValue;
  const int lrows = tc_launch_rows (w, M, alpha || gate);
  a.pm = M < lrows ? M : lrows;
  uint4 *xs = (uint4 *) ((char *) a.partials + tc_partials_bytes (w, a.S, M));
  const bool nt16 = w->format == PPX_CUDA_W_BF16 ? tc_nt16_fits<PPX_CUDA_W_BF16, 8> ()
                   : w->format == PPX_CUDA_W_INT8 ? tc_nt16_fits<PPX_CUDA_W_INT8, 8> ()
                   : ck == 2                       ? tc_nt16_fits<PPX_CUDA_W_INT4, 2> ()
                   : ck == 4                       ? tc_nt16_fits<PPX_CUDA_W_INT4, 4> ()
                                                   : tc_nt16_fits<PPX_CUDA_W_INT4, 8> ();
  for (int m0 = 0; m0 < M; m0 += lrows) {
    a.M = M - m0 < lrows ? M - m0 : lrows;
    a.x = x + (size_t) m0 * ldx;
    a.y = y + (size_t) m0 * ldy;
    a.xs = NULL;
    /* the wgmma configuration splits x itself, in its layout (not for the fused RMSNorm / gate: M <= 8);
     * a launch of more than TC_MMAX rows takes it where its first launch did (tc_wgmma at min (M, 256)) */
    const bool wg = !alpha && !gate && tc_wgmma (w, a.M);
    const int wg_nt = wg ? ppx_linear_wgmma_nt_max (w->format) : 0;
    const int max_tiles = wg_nt > 16 ? wg_nt : nt16 ? 16 : 8;
    tc_slices (a.M, a.leaf_stages, max_tiles, (int) (TC_MAX_COUNTERS / ((w->rows + 63) / 64)), wg,
               w->format == PPX_CUDA_W_INT8, &a.slice_tiles, &a.n_slices);
    if (a.M > 8 && !wg) {
      const int tiles = (a.M + 7) / 8;
      a.xs_tiles = tiles;
      const size_t n = (size_t) a.n_stages * tiles * 256;
      const dim3 grid = ppx_grid_for (n, 256);
      if (w->format == PPX_CUDA_W_BF16)
        ppx_launch (tc_xsplit_kernel<PPX_CUDA_W_BF16>, grid, 256, 0, s, a.x, ldx, a.M, a.K, a.n_stages, tiles, a.vec_x, xs);
      else if (w->format == PPX_CUDA_W_INT8)
        ppx_launch (tc_xsplit_kernel<PPX_CUDA_W_INT8>, grid, 256, 0, s, a.x, ldx, a.M, a.K, a.n_stages, tiles, a.vec_x, xs);
      else
        ppx_launch (tc_xsplit_kernel<PPX_CUDA_W_INT4>, grid, 256, 0, s, a.x, ldx, a.M, a.K, a.n_stages, tiles, a.vec_x, xs);
      if (int e = ppx_cuda_launched ())
        return e;
      a.xs = xs;
    }
    int e;
    if (wg) {
      if ((e = ppx_linear_wgmma (a, w->format, ck, xs, s)))
        return e;
      continue;
    }
    switch (w->format) {
      case PPX_CUDA_W_BF16:
        e = tc_launch_nt<PPX_CUDA_W_BF16, 8> (a, s);
        break;
      case PPX_CUDA_W_INT8:
        e = tc_launch_nt<PPX_CUDA_W_INT8, 8> (a, s);
        break;
      default:
        e = ck == 2 ? tc_launch_nt<PPX_CUDA_W_INT4, 2> (a, s)
            : ck == 4 ? tc_launch_nt<PPX_CUDA_W_INT4, 4> (a, s)
                      : tc_launch_nt<PPX_CUDA_W_INT4, 8> (a, s);
        break;
    }
    if (e)
      return e;
  }
  return 0;
}

/* ---- int4 repacking at load ---- */

__global__ void
int4_repack_kernel (const uint8_t *src, uint8_t *dst, int64_t rows, int64_t cols)
{
  ppx_pdl_enter ();
  const int64_t row_bytes = (cols + 1) / 2, blocks = cols / TC_STAGE, per_row = blocks * 16;
  for (int64_t i = blockIdx.x * (int64_t) blockDim.x + threadIdx.x; i < rows * per_row;
       i += (int64_t) gridDim.x * blockDim.x) {
    const int64_t r = i / per_row, rem = i % per_row, b = rem / 16;
    const int t = (int) (rem / 4) % 4, w = (int) rem % 4;
    const uint8_t *row = src + r * row_bytes;
    auto nib = [row] (int64_t c) -> uint32_t { return (row[c >> 1] >> (4 * (c & 1))) & 15u; };
    const uint32_t word = int4_word (b * TC_STAGE, t, w, nib);
    uint8_t *d = dst + r * row_bytes + b * 64 + 16 * t + 4 * w;
#pragma unroll
    for (int k = 0; k < 4; k++)
      d[k] = (uint8_t) (word >> (8 * k));
  }
}

extern "C" int
ppx_cuda_int4_repack (void *data, int64_t rows, int64_t cols, void *stream)
{
  if (rows <= 0 || cols < TC_STAGE)
    return 0;
  cudaStream_t s = PPX_CUDA_STREAM (stream);
  const size_t bytes = (size_t) rows * (size_t) ((cols + 1) / 2);
  void *tmp = NULL;
  cudaError_t e = cudaMalloc (&tmp, bytes);
  if (e != cudaSuccess) {
    cudaGetLastError ();
    return (int) e;
  }
  if ((e = cudaMemcpyAsync (tmp, data, bytes, cudaMemcpyDeviceToDevice, s)) == cudaSuccess) {
    ppx_launch (int4_repack_kernel, ppx_grid_for ((size_t) rows * (cols / TC_STAGE) * 16, 256), 256, 0, s, (const uint8_t *) tmp, (uint8_t *) data, rows, cols);
    e = cudaGetLastError ();
  }
  cudaError_t e2 = cudaStreamSynchronize (s);
  cudaFree (tmp);
  return (int) (e != cudaSuccess ? e : e2);
}
