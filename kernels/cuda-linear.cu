/* CUDA backend: linear layers (y = x W^T) and embedding gathers for f32, bf16, int8 and int4 weights.
 *
 * Two kernel families (docs/cuda.md, "Linear layers"):
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
 * scalar loads.
 *
 * CUDA cores (f32 weights, int4 with other group sizes): one warp per weight row for up to 8 rows of x,
 * f32 fused multiply-adds in a fixed order (also independent of M and of the row's position). */
#include "cuda-common.cuh"
#include "cuda-graph-timing.cuh"

#include <cuda_bf16.h>
#include <stdlib.h>

/* ======================================================================================================
 * Tensor-core path
 * ====================================================================================================== */

#define TC_THREADS 256
#define TC_WARPS 8
#define TC_STAGE 128          /* columns per stage: 8 k-steps of 16 */
#define TC_MMAX 64            /* x rows per launch (8 n-tiles of 8) */
#define TC_SPLIT_ROWS 128     /* the row-block size the leaf count is planned with */
#define TC_PLAN_BLOCKS_PER_SM 3 /* resident blocks per SM the K split plans for (the M <= 8 kernel's occupancy) */
#define TC_SMEM_MAX (96 * 1024) /* shared-memory ring per block: within the 99 KB that sm_86/sm_89 allow */
#define TC_SMEM_SM (224 * 1024) /* ... and MINB of them within an sm_90 SM's 227 KB */
#define TC_MAX_COUNTERS (PPX_CUDA_LINEAR_COUNTER_BYTES / 4)

/* 32-bit words of one weight row per thread per stage (16 bytes cover 2, 4 or 8 k-steps). */
template <int FMT> struct TcWords;
template <> struct TcWords<PPX_CUDA_W_BF16> { static constexpr int N = 16; };
template <> struct TcWords<PPX_CUDA_W_INT8> { static constexpr int N = 8; };
template <> struct TcWords<PPX_CUDA_W_INT4> { static constexpr int N = 4; };

/* Warp layout for NT n-tiles of x (NT * 8 >= M): WM warps along x rows (NTW n-tiles each) times
 * TC_WARPS / WM warps along weight rows (RTW tiles of 16 each). Two warps sharing weight rows (WM = 2)
 * halve the shared-memory reads of x per mma.
 * Everything a stage needs goes through a ring of D shared-memory slots filled by cp.async (one commit
 * group per stage): x [NT][8 k-steps][32 lanes] records (raw f32, converted in place to hi/lo bf16), the
 * block's weights [row tile][row half][16-byte vector][32 lanes] (exactly the A fragments the warps read,
 * so every 16-byte read is conflict-free), then the int4 scales [ROWS][CPS]. D stages are in flight per
 * block, waited for with cp.async.wait_group: no register scoreboard decides how many loads are
 * outstanding (docs/cuda.md, "Linear layers"). D is as deep as 96 KB allows, at most 4.
 * NCH independent partial sums let the chunks of one stage run as separate mma chains when a warp has
 * few (RTW x NTW) accumulator tiles; each chunk still starts from zero and is added to the running sum in
 * chunk order, so the arithmetic is the same for every NT. */
template <int FMT, int CK, int NT> struct TcCfg {
  static constexpr int WM = NT >= 4 ? 2 : 1;
  static constexpr int NTW = NT / WM;
  static constexpr int RTW = (NT >= 4 && FMT != PPX_CUDA_W_BF16) ? 2 : 1;
  static constexpr int WR = TC_WARPS / WM;
  static constexpr int ROWS = WR * RTW * 16;
  static constexpr int WORDS = TcWords<FMT>::N;
  static constexpr int WV = WORDS / 4;                          /* 16-byte vectors per row per thread */
  static constexpr int CPS = FMT == PPX_CUDA_W_INT4 ? 8 / CK : 0; /* int4 scales per row per stage */
  static constexpr int SX = NT * 256;                            /* slot parts, in uint4 */
  static constexpr int SW = ROWS * WV * 4;
  static constexpr int SS = (ROWS * CPS + 3) / 4;
  static constexpr int SLOT = SX + SW + SS;
  static constexpr int MINB = NT == 1 ? 3 : NT <= 4 ? 2 : 1; /* blocks per SM (registers, shared memory) */
  static constexpr int D0 = TC_SMEM_MAX / (SLOT * 16), D1 = TC_SMEM_SM / MINB / (SLOT * 16);
  static constexpr int D = D0 < D1 ? (D0 < 4 ? D0 : 4) : (D1 < 4 ? D1 : 4);
  static constexpr int NCHUNK = 8 / CK;
  static constexpr int NCH0 = 2 / (RTW * NTW) > 0 ? 2 / (RTW * NTW) : 1;
  static constexpr int NCH = NCH0 < NCHUNK ? NCH0 : NCHUNK;
  static_assert (D >= 2, "a stage slot must fit twice in TC_SMEM_MAX");
  static_assert (SW % TC_THREADS == 0, "weight copies are spread evenly over the threads");
};

struct TcArgs {
  const uint8_t *w;
  const float *scales;
  int64_t rows;
  int K, row_bytes, n_groups, group_size;
  const float *x;
  size_t ldx;
  float *y;
  size_t ldy;
  int M, accumulate;
  int n_stages, leaf_stages, S;
  int vec_x;
  float *partials;     /* [S][TC_MMAX][rows] when S > 1 */
  const float *alpha;  /* non-NULL (NT = 1 only): x is RMS-normalized first, rmsnorm_kernel's arithmetic */
  float eps;
  int gate;            /* (NT = 1 only, no alpha): x rows hold [g | v] (v at x + K): the input is silu(g) * v */
  unsigned *counters;  /* one per row block, zero between launches */
};

__device__ __forceinline__ uint32_t
bf16x2_bits (__nv_bfloat162 v)
{
  return *reinterpret_cast<uint32_t *> (&v);
}

/* The int4 codes in bits 0-3 and 16-19 of v as bf16x2 (code - 8): 0x43000000|n is 128 + n exactly (one
 * lop3: (v & 0x000F000F) | 0x43004300), and one bf16x2 fma (x * 1 - 136) removes the offset, exactly. */
__device__ __forceinline__ uint32_t
int4_pair (uint32_t v)
{
  uint32_t h, r;
  asm ("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(h) : "r"(v), "r"(0x000F000Fu), "r"(0x43004300u));
  asm ("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(r) : "r"(h), "r"(0x3F803F80u), "r"(0xC308C308u));
  return r;
}

/* The four int8 codes of u as two bf16x2 (bytes 0,1 and bytes 2,3): a byte permute makes 2^23 + (q + 128)
 * in f32, a subtraction gives q exactly, and since |q| <= 128 the upper 16 bits are its exact bf16. */
__device__ __forceinline__ void
int8_pairs (uint32_t u, uint32_t &lo, uint32_t &hi)
{
  const uint32_t b = u ^ 0x80808080u;
  float f[4];
#pragma unroll
  for (int k = 0; k < 4; k++)
    f[k] = __uint_as_float (__byte_perm (b, 0x4B000000u, 0x7540u | k)) - 8388736.0f;
  lo = __byte_perm (__float_as_uint (f[0]), __float_as_uint (f[1]), 0x7632u);
  hi = __byte_perm (__float_as_uint (f[2]), __float_as_uint (f[3]), 0x7632u);
}

__device__ __forceinline__ void
mma_bf16 (float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1)
{
  asm ("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
       "{%0,%1,%2,%3};"
       : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
       : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* cp.async of `bytes` (4 or 16) from global to shared memory; only the first src_bytes are read, the rest
 * are zero-filled (src_bytes 0: zeros, nothing read). Scales (4 bytes) ask the L2 for 256-byte blocks: a
 * row's scales are read over several stages. */
template <int BYTES>
__device__ __forceinline__ void
cp_async (void *smem, const void *gmem, int src_bytes)
{
  const unsigned s = (unsigned) __cvta_generic_to_shared (smem);
  if (BYTES == 16)
    asm volatile ("cp.async.cg.shared.global.L2::128B [%0], [%1], 16, %2;" ::"r"(s), "l"(gmem), "r"(src_bytes));
  else
    asm volatile ("cp.async.ca.shared.global.L2::256B [%0], [%1], 4, %2;" ::"r"(s), "l"(gmem), "r"(src_bytes));
}

/* cp.async of 16 bytes of weights, asking the L2 for the whole 256-byte block: a row's next stages are in
 * it (measured on an H100 with the kernel's access pattern alone: 2.3 TB/s with the hint, 1.6 without) */
__device__ __forceinline__ void
cp_async_w (void *smem, const void *gmem)
{
  const unsigned s = (unsigned) __cvta_generic_to_shared (smem);
  asm volatile ("cp.async.cg.shared.global.L2::256B [%0], [%1], 16;" ::"r"(s), "l"(gmem));
}

__device__ __forceinline__ void
cp_async_commit (void)
{
  asm volatile ("cp.async.commit_group;");
}

template <int N>
__device__ __forceinline__ void
cp_async_wait (void)
{
  asm volatile ("cp.async.wait_group %0;" ::"n"(N));
}

/* The int4 word a thread holds for k-steps 2w, 2w+1 of a 128-column block, from the natural (quant.h)
 * nibbles: for k-step q the thread's columns are c = 16q + 4t .. c+3, and their nibbles go to bit
 * positions s, s+16, s+4, s+20 with s = 8 (q & 1), so that int4_pair(word >> s) gives the bf16x2 of
 * (c, c+1) and int4_pair(word >> (s + 4)) that of (c+2, c+3). `nib(col)` reads one natural nibble. */
template <typename Nib>
__device__ __forceinline__ uint32_t
int4_word (int64_t c0, int t, int w, Nib nib)
{
  uint32_t word = 0;
#pragma unroll
  for (int qq = 0; qq < 2; qq++) {
    const int64_t c = c0 + 16 * (2 * w + qq) + 4 * t;
    const int s = 8 * qq;
    word |= nib (c) << s | nib (c + 1) << (s + 16) | nib (c + 2) << (s + 4) | nib (c + 3) << (s + 20);
  }
  return word;
}

/* Column of the first of the 4 x values (and weights) a thread (t = lane & 3) uses in k-step q of the stage
 * starting at col0. Full stages: where the thread's 16-byte weight vectors put them; the tail stage (and
 * int4, repacked): 16 consecutive columns per k-step. */
template <int FMT>
__device__ __forceinline__ int
tc_col (int col0, bool full, int q, int t)
{
  if (!full || FMT == PPX_CUDA_W_INT4)
    return col0 + 16 * q + 4 * t;
  if (FMT == PPX_CUDA_W_BF16)
    return col0 + 32 * (q >> 1) + 8 * t + 4 * (q & 1);
  return col0 + 64 * (q >> 2) + 16 * t + 4 * (q & 3);
}

/* y[m, r] (+)= v, int8's row scale applied (the sum's last step, as the CPU backend's). */
template <int FMT>
__device__ __forceinline__ void
tc_store_y (const TcArgs &a, int m, int64_t r, float v)
{
  if (FMT == PPX_CUDA_W_INT8)
    v *= __ldg (a.scales + r);
  float *yp = a.y + (size_t) m * a.ldy + r;
  *yp = a.accumulate ? *yp + v : v;
}

template <int FMT, int CK, int NT>
__global__ void __launch_bounds__ (TC_THREADS, (TcCfg<FMT, CK, NT>::MINB))
tc_linear_kernel (TcArgs a)
{
  ppx_pdl_enter ();
  using C = TcCfg<FMT, CK, NT>;
  constexpr int WORDS = C::WORDS, WV = C::WV, CPS = C::CPS, RTW = C::RTW, NTW = C::NTW, D = C::D;
  constexpr int NCH = C::NCH, NCHUNK = C::NCHUNK;
  constexpr int WE = C::SW / TC_THREADS;                              /* weight copies per thread */
  constexpr int SE = (C::ROWS * CPS + TC_THREADS - 1) / TC_THREADS;   /* scale copies per thread */
  extern __shared__ uint4 smem[];
  __shared__ unsigned ticket;

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, t = lane & 3;
  const int wm = warp % C::WM, wr = warp / C::WM;
  const int64_t block_row = (int64_t) blockIdx.x * C::ROWS;
  const int row_in_block = wr * RTW * 16;
  const int64_t row_base = block_row + row_in_block;
  const int leaf = blockIdx.y;
  const int st0 = leaf * a.leaf_stages, nstg = min (a.leaf_stages, a.n_stages - st0);
  const int KS = (a.K + 15) >> 4; /* k-steps in K */

  /* ---- what this thread copies each stage, set up once ---- */
  /* x: k-step `warp` of every n-tile (x row 8 nt + g; the first x_tiles n-tiles have one, rows past M are
   * zero-filled) */
  const float *xrow0 = a.x + (size_t) g * a.ldx;
  const size_t xstride = (size_t) 8 * a.ldx;
  const int x_tiles = (a.M - g + 7) / 8;
  const int xoff = tc_col<FMT> (0, true, warp, t); /* column offset in a full stage */
  /* weights: slot entries e = tid + 256 k, e = ((row tile * 2 + half) * WV + vector) * 32 + lane; for
   * WV <= 4 the vector and the half are the same for every k, and the row moves by 64 / WV per k */
  static_assert (WV == 1 || WV == 2 || WV == 4, "16-byte vectors per row and thread");
  const int64_t wrow0 = block_row + warp / (2 * WV) * 16 + g + 8 * ((warp / WV) & 1);
  const uint8_t *wp0 = a.w + (wrow0 < a.rows ? wrow0 : 0) * a.row_bytes + 64 * (warp % WV) + 16 * t;
  const int64_t wstep = (int64_t) (64 / WV) * a.row_bytes;
  const int w_valid = wrow0 < a.rows ? (int) min ((int64_t) WE, (a.rows - wrow0 + 64 / WV - 1) / (64 / WV)) : 0;
  /* int4 scales: entries e = tid + 256 k of [ROWS][CPS]: row tid / CPS + k 256 / CPS, chunk tid % CPS */
  constexpr int CPS1 = CPS > 0 ? CPS : 1;
  const int64_t srow0 = block_row + tid / CPS1;
  const float *sp0 = a.scales + (srow0 < a.rows ? srow0 : 0) * a.n_groups;
  const int64_t sstep = (int64_t) (TC_THREADS / CPS1) * a.n_groups;
  int s_valid = 0;
#pragma unroll
  for (int k = 0; k < SE; k++)
    if (tid / CPS1 + k * (TC_THREADS / CPS1) < C::ROWS && srow0 + k * (TC_THREADS / CPS1) < a.rows)
      s_valid = k + 1;

  /* The tail stage (past the last full 128 columns; the quant.h layout): this thread's words (rows
   * row_base + 16 rt + g + 8 h) straight from global memory, zeros past K (int4: code 8). */
  auto gather_tail = [&] (uint32_t (&rw)[RTW][2][WORDS], int st) {
    const int col0 = st * TC_STAGE;
#pragma unroll
    for (int rt = 0; rt < RTW; rt++)
#pragma unroll
      for (int h = 0; h < 2; h++) {
        const int64_t r = row_base + 16 * rt + g + 8 * h;
        const uint8_t *rp = r < a.rows ? a.w + r * a.row_bytes : nullptr;
        uint32_t *wd = rw[rt][h];
        if (!rp) {
#pragma unroll
          for (int i = 0; i < WORDS; i++)
            wd[i] = 0;
        } else if (FMT == PPX_CUDA_W_BF16) {
          const uint16_t *e = reinterpret_cast<const uint16_t *> (rp);
#pragma unroll
          for (int q = 0; q < 8; q++) {
            const int c = col0 + 16 * q + 4 * t;
            uint32_t v[4];
#pragma unroll
            for (int i = 0; i < 4; i++)
              v[i] = c + i < a.K ? __ldg (e + c + i) : 0u;
            wd[2 * q] = v[0] | v[1] << 16;
            wd[2 * q + 1] = v[2] | v[3] << 16;
          }
        } else if (FMT == PPX_CUDA_W_INT8) {
#pragma unroll
          for (int q = 0; q < 8; q++) {
            const int c = col0 + 16 * q + 4 * t;
            uint32_t v = 0;
#pragma unroll
            for (int i = 0; i < 4; i++)
              v |= (c + i < a.K ? (uint32_t) __ldg (rp + c + i) : 0u) << (8 * i);
            wd[q] = v;
          }
        } else {
          const int K = a.K;
          auto nib = [rp, K] (int64_t c) -> uint32_t {
            return c < K ? (__ldg (rp + (c >> 1)) >> (4 * (c & 1))) & 15u : 8u;
          };
#pragma unroll
          for (int w = 0; w < 4; w++)
            wd[w] = int4_word (col0, t, w, nib);
        }
      }
  };

  /* Stage st into a slot by cp.async: x (rows past M and columns past K zero-filled), then (issue_weights)
   * the block's weights (full stages; rows past the end zero-filled) and the int4 scales. */
  auto issue_x = [&] (uint4 *slot, int st) {
    const int col0 = st * TC_STAGE;
    const bool full = col0 + TC_STAGE <= a.K;
#pragma unroll
    for (int nt = 0; nt < NT; nt++) {
      uint4 *dst = slot + (nt * 8 + warp) * 32 + lane;
      const float *xp = nt < x_tiles ? xrow0 + nt * xstride : nullptr;
      if (full && a.vec_x) {
        cp_async<16> (dst, xp ? xp + col0 + xoff : a.x, xp ? 16 : 0);
      } else {
        const int c = tc_col<FMT> (col0, full, warp, t);
        if (!xp) {
          cp_async<16> (dst, a.x, 0);
        } else if (a.vec_x && c + 3 < a.K) {
          cp_async<16> (dst, xp + c, 16);
        } else {
#pragma unroll
          for (int i = 0; i < 4; i++)
            cp_async<4> (reinterpret_cast<float *> (dst) + i, c + i < a.K ? xp + c + i : a.x, c + i < a.K ? 4 : 0);
        }
      }
    }
  };
  auto issue_weights = [&] (uint4 *slot, int st) {
    const int col0 = st * TC_STAGE;
    const bool full = col0 + TC_STAGE <= a.K;
    if (full) {
      const int64_t off = (int64_t) col0 * WORDS / 8;
      uint4 *wdst = slot + C::SX + tid;
#pragma unroll
      for (int k = 0; k < WE; k++) {
        if (k < w_valid)
          cp_async_w (wdst + TC_THREADS * k, wp0 + k * wstep + off);
        else
          cp_async<16> (wdst + TC_THREADS * k, a.w, 0);
      }
    }
    if (FMT == PPX_CUDA_W_INT4) {
      float *sdst = reinterpret_cast<float *> (slot + C::SX + C::SW);
#pragma unroll
      for (int k = 0; k < SE; k++) {
        const int e = tid + TC_THREADS * k;
        if ((C::ROWS * CPS) % TC_THREADS == 0 || e < C::ROWS * CPS) {
          const int c = tid % CPS1;
          const int col = col0 + c * 16 * CK;
          const bool ok = k < s_valid && col < a.K;
          /* group of column col: a stage holds CPS whole groups (g32, g64), or lies in one (g128k) */
          const int gi = CK < 8 ? st * CPS + c : col0 / a.group_size;
          cp_async<4> (sdst + e, ok ? sp0 + k * sstep + gi : a.scales, ok ? 4 : 0);
        }
      }
    }
  };
  /* The RMSNorm gains of the 4 columns this thread's x record holds in stage st (zeros past K): read from
   * global memory (L2-resident) one stage ahead, so the load's latency hides behind a stage's work. (Copied
   * into the slot by a few threads, they would need a barrier between the copy and convert_x.) */
  auto alpha_at = [&] (int st) {
    const int col0 = st * TC_STAGE;
    const int c = tc_col<FMT> (col0, col0 + TC_STAGE <= a.K, warp, t);
    if (c + 3 < a.K)
      return __ldg (reinterpret_cast<const float4 *> (a.alpha + c));
    float v[4];
#pragma unroll
    for (int i = 0; i < 4; i++)
      v[i] = c + i < a.K ? __ldg (a.alpha + c + i) : 0.0f;
    return make_float4 (v[0], v[1], v[2], v[3]);
  };
  /* The gate's other half for this thread's x record in stage st (row g, columns c .. c + 3 of x + K; zeros
   * past M and K, where x is zero-filled and silu(0) * 0 = 0): written by the kernel before this one, so read
   * after ppx_pdl_wait, through the L2, one stage ahead like the gains. */
  auto gate_at = [&] (int st) {
    const int col0 = st * TC_STAGE;
    const int c = tc_col<FMT> (col0, col0 + TC_STAGE <= a.K, warp, t);
    const float *vp = a.x + (size_t) g * a.ldx + a.K + c;
    if (g < a.M && c + 3 < a.K && a.vec_x)
      return __ldcg (reinterpret_cast<const float4 *> (vp));
    float v[4];
#pragma unroll
    for (int i = 0; i < 4; i++)
      v[i] = g < a.M && c + i < a.K ? __ldcg (vp + i) : 0.0f;
    return make_float4 (v[0], v[1], v[2], v[3]);
  };
  /* what convert_x needs a stage ahead: the gains (rmsnorm) or the gate's other half */
  auto aux_at = [&] (int st) { return a.alpha ? alpha_at (st) : gate_at (st); };
  /* this thread's x records of a slot, from f32 to the hi/lo bf16 split, in place (first x[c] * (alpha[c] *
   * inv) with the row's inverse RMS, as rmsnorm_kernel computes it, when the call normalizes; silu(x[c]) *
   * v[c] as silu_gate_kernel computes it, when it gates) */
  __shared__ float row_inv[8];
  auto convert_x = [&] (uint4 *slot, float4 al) {
#pragma unroll
    for (int nt = 0; nt < NT; nt++) {
      uint4 *p = slot + (nt * 8 + warp) * 32 + lane;
      const uint4 u = *p;
      float4 v = make_float4 (__uint_as_float (u.x), __uint_as_float (u.y), __uint_as_float (u.z),
                              __uint_as_float (u.w));
      if (NT == 1 && a.alpha) {
        const float inv = row_inv[g];
        v = make_float4 (v.x * (al.x * inv), v.y * (al.y * inv), v.z * (al.z * inv), v.w * (al.w * inv));
      } else if (NT == 1 && a.gate) {
        v = make_float4 (ppx_silu_gate (v.x, al.x), ppx_silu_gate (v.y, al.y), ppx_silu_gate (v.z, al.z),
                         ppx_silu_gate (v.w, al.w));
      }
      const __nv_bfloat162 h01 = __floats2bfloat162_rn (v.x, v.y), h23 = __floats2bfloat162_rn (v.z, v.w);
      const float2 f01 = __bfloat1622float2 (h01), f23 = __bfloat1622float2 (h23);
      const __nv_bfloat162 l01 = __floats2bfloat162_rn (v.x - f01.x, v.y - f01.y);
      const __nv_bfloat162 l23 = __floats2bfloat162_rn (v.z - f23.x, v.w - f23.y);
      *p = make_uint4 (bf16x2_bits (h01), bf16x2_bits (h23), bf16x2_bits (l01), bf16x2_bits (l23));
    }
  };

  float acc[RTW][NTW][4];
#pragma unroll
  for (int rt = 0; rt < RTW; rt++)
#pragma unroll
    for (int nt = 0; nt < NTW; nt++)
#pragma unroll
      for (int i = 0; i < 4; i++)
        acc[rt][nt][i] = 0.0f;

  /* The A fragments of k-step q from this thread's words */
  auto dequant = [&] (const uint32_t (&rw)[RTW][2][WORDS], int q, uint32_t (&af)[RTW][4]) {
#pragma unroll
    for (int rt = 0; rt < RTW; rt++) {
      if (FMT == PPX_CUDA_W_BF16) {
        af[rt][0] = rw[rt][0][2 * q];
        af[rt][1] = rw[rt][1][2 * q];
        af[rt][2] = rw[rt][0][2 * q + 1];
        af[rt][3] = rw[rt][1][2 * q + 1];
      } else if (FMT == PPX_CUDA_W_INT8) {
        int8_pairs (rw[rt][0][q], af[rt][0], af[rt][2]);
        int8_pairs (rw[rt][1][q], af[rt][1], af[rt][3]);
      } else {
        const int s = 8 * (q & 1);
        const uint32_t v0 = rw[rt][0][q >> 1] >> s, v1 = rw[rt][1][q >> 1] >> s;
        af[rt][0] = int4_pair (v0);
        af[rt][1] = int4_pair (v1);
        af[rt][2] = int4_pair (v0 >> 4);
        af[rt][3] = int4_pair (v1 >> 4);
      }
    }
  };

  /* One stage: 8 k-steps (those at or past kvalid skipped: the tail stage). Chunk ch (CK k-steps) is summed
   * by the tensor cores from zero, k-step by k-step (hi, then lo), and then added to acc (times its int4
   * scale), chunks in order. NCH chunks at a time run as independent mma chains. */
  auto mma_stage = [&] (const uint32_t (&rw)[RTW][2][WORDS], const uint4 *slot, int kvalid) {
    const float *ssc = reinterpret_cast<const float *> (slot + C::SX + C::SW);
#pragma unroll
    for (int cg = 0; cg < NCHUNK / NCH; cg++) {
      float part[NCH][RTW][NTW][4];
#pragma unroll
      for (int c = 0; c < NCH; c++)
#pragma unroll
        for (int rt = 0; rt < RTW; rt++)
#pragma unroll
          for (int nt = 0; nt < NTW; nt++)
#pragma unroll
            for (int i = 0; i < 4; i++)
              part[c][rt][nt][i] = 0.0f;
#pragma unroll
      for (int i = 0; i < CK; i++)
#pragma unroll
        for (int c = 0; c < NCH; c++) {
          const int q = (cg * NCH + c) * CK + i;
          if (q < kvalid) {
            uint32_t af[RTW][4];
            dequant (rw, q, af);
#pragma unroll
            for (int nt = 0; nt < NTW; nt++) {
              const uint4 b = slot[((wm * NTW + nt) * 8 + q) * 32 + lane];
#pragma unroll
              for (int rt = 0; rt < RTW; rt++) {
                mma_bf16 (part[c][rt][nt], af[rt], b.x, b.y);
                mma_bf16 (part[c][rt][nt], af[rt], b.z, b.w);
              }
            }
          }
        }
#pragma unroll
      for (int c = 0; c < NCH; c++) {
        const int ch = cg * NCH + c;
        if (ch * CK < kvalid) {
#pragma unroll
          for (int rt = 0; rt < RTW; rt++) {
            float s0 = 1.0f, s1 = 1.0f;
            if (FMT == PPX_CUDA_W_INT4) {
              const int lr = row_in_block + 16 * rt + g;
              s0 = ssc[lr * (CPS > 0 ? CPS : 1) + ch];
              s1 = ssc[(lr + 8) * (CPS > 0 ? CPS : 1) + ch];
            }
#pragma unroll
            for (int nt = 0; nt < NTW; nt++)
#pragma unroll
              for (int i = 0; i < 4; i++) {
                if (FMT == PPX_CUDA_W_INT4)
                  acc[rt][nt][i] = fmaf (i < 2 ? s0 : s1, part[c][rt][nt][i], acc[rt][nt][i]);
                else
                  acc[rt][nt][i] += part[c][rt][nt][i];
              }
          }
        }
      }
    }
  };

  auto compute = [&] (const uint4 *slot, int st) {
    uint32_t rw[RTW][2][WORDS];
    if ((st + 1) * TC_STAGE <= a.K) {
      const uint4 *wsm = slot + C::SX;
#pragma unroll
      for (int rt = 0; rt < RTW; rt++)
#pragma unroll
        for (int h = 0; h < 2; h++)
#pragma unroll
          for (int v = 0; v < WV; v++) {
            const uint4 q = wsm[(((wr * RTW + rt) * 2 + h) * WV + v) * 32 + lane];
            rw[rt][h][4 * v] = q.x;
            rw[rt][h][4 * v + 1] = q.y;
            rw[rt][h][4 * v + 2] = q.z;
            rw[rt][h][4 * v + 3] = q.w;
          }
      mma_stage (rw, slot, 8);
    } else {
      gather_tail (rw, st);
      mma_stage (rw, slot, KS - st * 8);
    }
  };

  /* prologue: the first D - 1 stages in flight. The weights and scales (constant while graphs run) are
   * asked for before ppx_pdl_wait, so they stream in while the kernel before this one finishes (with
   * programmatic dependent launch); x, the workspace and y only after it. The first commit group holds the
   * weights of all D - 1 stages, which the wait for stage 0 then covers. The kernels after this one are
   * let in (ppx_pdl_trigger) only once its main loop is done: launched earlier, a following linear
   * layer's blocks would take SM slots this one's plan counts on (measured: 4.2 -> 4.8 us a call for
   * back-to-back 1024 x 1024 int8 layers on an H100). */
#pragma unroll
  for (int d = 0; d < D - 1; d++)
    if (d < nstg)
      issue_weights (smem + d * C::SLOT, st0 + d);
  ppx_pdl_wait ();
#pragma unroll
  for (int d = 0; d < D - 1; d++) {
    if (d < nstg)
      issue_x (smem + d * C::SLOT, st0 + d);
    cp_async_commit ();
  }
  if (NT == 1 && a.alpha) {
    /* the inverse RMS of each x row over all K columns (whatever this block's leaf), in rmsnorm_kernel's
     * order: thread t sums columns 4t .. 4t + 3, then 4t + 1024 .. (one fma each), then ppx_block_sum's tree.
     * Rows two at a time, 16 columns of each loaded at once (x rows are on 16 bytes: ldx = K, a multiple of
     * 4). Rows past M (zero-filled x) get 0. M <= PPX_CUDA_RMSNORM_LINEAR_MAX_M: the rows' loads wait one
     * after another pair by pair, which costs less than a separate rmsnorm kernel only for a few rows. */
    static_assert (TC_THREADS == 256, "rmsnorm_kernel's 256 threads a row");
    __shared__ float red2[2][TC_WARPS];
    if (tid >= a.M && tid < 8)
      row_inv[tid] = 0.0f;
    for (int m0 = 0; m0 < a.M; m0 += 2) {
      float ss[2] = {0.0f, 0.0f};
      for (int c4 = 4 * tid; c4 < a.K; c4 += 16 * TC_THREADS) {
          float4 v[2][4];
#pragma unroll
          for (int r = 0; r < 2; r++)
#pragma unroll
            for (int j = 0; j < 4; j++) {
              const int c = c4 + j * 4 * TC_THREADS;
              v[r][j] = m0 + r < a.M && c < a.K ? *reinterpret_cast<const float4 *> (a.x + (size_t) (m0 + r) * a.ldx + c)
                                                : make_float4 (0.0f, 0.0f, 0.0f, 0.0f);
            }
#pragma unroll
          for (int r = 0; r < 2; r++)
#pragma unroll
            for (int j = 0; j < 4; j++) {
              ss[r] += v[r][j].x * v[r][j].x;
              ss[r] += v[r][j].y * v[r][j].y;
              ss[r] += v[r][j].z * v[r][j].z;
              ss[r] += v[r][j].w * v[r][j].w;
            }
        }
#pragma unroll
      for (int r = 0; r < 2; r++) {
        ss[r] = ppx_warp_sum (ss[r]);
        if (lane == 0)
          red2[r][warp] = ss[r];
      }
      __syncthreads ();
      if (warp == 0) {
#pragma unroll
        for (int r = 0; r < 2; r++) {
          const float v = ppx_warp_sum (lane < TC_WARPS ? red2[r][lane] : 0.0f);
          if (lane == 0 && m0 + r < a.M)
            row_inv[m0 + r] = 1.0f / sqrtf (a.eps + v / (float) a.K);
        }
      }
      __syncthreads ();
    }
  }
  int rd = 0, wr_slot = D - 1; /* the slots read and written this step */
  const bool aux = NT == 1 && (a.alpha || a.gate);
  float4 al_next = aux && nstg > 0 ? aux_at (st0) : make_float4 (0.0f, 0.0f, 0.0f, 0.0f);
  for (int jj = 0; jj < nstg; jj++) {
    uint4 *slot = smem + rd * C::SLOT;
    const float4 al = al_next;
    if (aux && jj + 1 < nstg)
      al_next = aux_at (st0 + jj + 1); /* a stage ahead: its latency hides behind this stage */
    cp_async_wait<D - 2> (); /* this thread's copies of stage jj are done */
    convert_x (slot, al);
    __syncthreads (); /* everyone's copies of stage jj are visible; slot wr_slot (stage jj - 1) is read */
    if (jj + D - 1 < nstg) {
      issue_x (smem + wr_slot * C::SLOT, st0 + jj + D - 1);
      issue_weights (smem + wr_slot * C::SLOT, st0 + jj + D - 1);
    }
    cp_async_commit ();
    compute (slot, st0 + jj);
    rd = rd + 1 == D ? 0 : rd + 1;
    wr_slot = wr_slot + 1 == D ? 0 : wr_slot + 1;
  }
  cp_async_wait<0> ();
  ppx_pdl_trigger ();

  /* acc[rt][nt][i]: weight row row_base + 16 rt + g + 8 (i >> 1), x row 8 (wm NTW + nt) + 2 t + (i & 1); one leaf
   * (S = 1) writes y, several write their partial sums for the last of them to add */
#pragma unroll
  for (int rt = 0; rt < RTW; rt++)
#pragma unroll
    for (int nt = 0; nt < NTW; nt++)
#pragma unroll
      for (int i = 0; i < 4; i++) {
        const int64_t r = row_base + 16 * rt + g + 8 * (i >> 1);
        const int m = 8 * (wm * NTW + nt) + 2 * t + (i & 1);
        if (r >= a.rows || m >= a.M)
          continue;
        if (a.S == 1)
          tc_store_y<FMT> (a, m, r, acc[rt][nt][i]);
        else
          a.partials[((size_t) leaf * TC_MMAX + m) * a.rows + r] = acc[rt][nt][i];
      }
  if (a.S == 1)
    return;
  __threadfence ();
  __syncthreads ();
  if (tid == 0) {
    ticket = atomicAdd (a.counters + blockIdx.x, 1u);
    __threadfence ();
  }
  __syncthreads ();
  if (ticket != (unsigned) a.S - 1)
    return;
  /* the last leaf of this row block to finish: y = leaf 0 + leaf 1 + ... in leaf order */
  for (int idx = tid; idx < a.M * C::ROWS; idx += TC_THREADS) {
    const int m = idx / C::ROWS;
    const int64_t r = block_row + idx % C::ROWS;
    if (r >= a.rows)
      continue;
    const float *pp = a.partials + (size_t) m * a.rows + r;
    const size_t leaf_stride = (size_t) TC_MMAX * a.rows;
    float v = 0.0f;
    /* eight leaves' loads in flight at once, then added in leaf order (v starts as leaf 0 exactly) */
    for (int s0 = 0; s0 < a.S; s0 += 8) {
      float p[8];
#pragma unroll
      for (int k = 0; k < 8; k++)
        p[k] = s0 + k < a.S ? __ldcg (pp + (size_t) (s0 + k) * leaf_stride) : 0.0f;
#pragma unroll
      for (int k = 0; k < 8; k++)
        if (s0 + k < a.S)
          v = s0 + k == 0 ? p[k] : v + p[k];
    }
    tc_store_y<FMT> (a, m, r, v);
  }
  if (tid == 0)
    a.counters[blockIdx.x] = 0u;
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
static int
tc_eligible (const PpxCudaWeight *w)
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
  int best_leaf = nst;
  int64_t best_cost = -1;
  for (int s = 1; s <= nst && s <= 64; s++) {
    const int leaf = (nst + s - 1) / s;
    const int64_t blocks = row_blocks * ((nst + leaf - 1) / leaf);
    if (s > 1 && blocks > slots)
      break;
    const int64_t cost = (blocks + sms - 1) / sms * leaf;
    if (best_cost < 0 || cost < best_cost) {
      best_cost = cost;
      best_leaf = leaf;
    }
  }
  *n_stages = nst;
  *leaf_stages = best_leaf;
  *S = (nst + best_leaf - 1) / best_leaf;
}

template <int FMT, int CK, int NT>
static int
tc_launch (const TcArgs &a, cudaStream_t s)
{
  using C = TcCfg<FMT, CK, NT>;
  const size_t smem = (size_t) C::D * C::SLOT * sizeof (uint4);
  /* set once per instantiation and device: static shared memory counts too, so dynamic sizes just under
   * 48 KB also need it. Setting it twice is harmless. */
  static unsigned long long attr_set; /* bit d: done on device d */
  int dev = 0;
  cudaGetDevice (&dev);
  if (dev < 0 || dev >= 64 || !(attr_set >> dev & 1)) {
    cudaError_t e = cudaFuncSetAttribute (tc_linear_kernel<FMT, CK, NT>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          (int) smem);
    if (e != cudaSuccess)
      return (int) e;
    if (dev >= 0 && dev < 64)
      __atomic_or_fetch (&attr_set, 1ull << dev, __ATOMIC_RELAXED);
  }
  dim3 grid (ppx_cdiv ((size_t) a.rows, C::ROWS), (unsigned) a.S);
  ppx_launch<true> (tc_linear_kernel<FMT, CK, NT>, grid, TC_THREADS, smem, s, a);
  return ppx_cuda_launched ();
}

template <int FMT, int CK>
static int
tc_launch_nt (const TcArgs &a, cudaStream_t s)
{
  if (a.M <= 8)
    return tc_launch<FMT, CK, 1> (a, s);
  if (a.M <= 16)
    return tc_launch<FMT, CK, 2> (a, s);
  if (a.M <= 32)
    return tc_launch<FMT, CK, 4> (a, s);
  return tc_launch<FMT, CK, 8> (a, s);
}

static int
tc_linear (const PpxCudaWeight *w, int ck, const float *x, size_t ldx, float *y, size_t ldy, int M, int accumulate,
           const float *alpha, float eps, int gate, void *workspace, cudaStream_t s)
{
  TcArgs a = {};
  a.alpha = alpha;
  a.eps = eps;
  a.gate = gate;
  a.w = (const uint8_t *) w->data;
  a.scales = w->scales;
  a.rows = w->rows;
  a.K = (int) w->cols;
  a.row_bytes = (int) (w->format == PPX_CUDA_W_BF16 ? 2 * w->cols
                       : w->format == PPX_CUDA_W_INT8 ? w->cols
                                                      : (w->cols + 1) / 2);
  a.group_size = w->group_size;
  a.n_groups = w->format == PPX_CUDA_W_INT4 ? (int) ((w->cols + w->group_size - 1) / w->group_size) : 0;
  a.accumulate = accumulate;
  a.ldx = ldx;
  a.ldy = ldy;
  tc_plan (w, &a.n_stages, &a.leaf_stages, &a.S);
  a.vec_x = (ldx % 4) == 0 && ((uintptr_t) x & 15) == 0;
  a.counters = (unsigned *) workspace;
  a.partials = (float *) ((char *) workspace + TC_MAX_COUNTERS * sizeof (unsigned));
  if (a.S > 1 && (!workspace || (w->rows + 63) / 64 > TC_MAX_COUNTERS))
    return (int) cudaErrorInvalidValue;
  for (int m0 = 0; m0 < M; m0 += TC_MMAX) {
    a.M = M - m0 < TC_MMAX ? M - m0 : TC_MMAX;
    a.x = x + (size_t) m0 * ldx;
    a.y = y + (size_t) m0 * ldy;
    int e;
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

/* ======================================================================================================
 * CUDA-core path (f32 weights; int4 with group sizes the tensor-core path does not take)
 * ====================================================================================================== */

#define LIN_WARPS 8 /* rows per block */
#define LIN_MT 8    /* x rows per block at most (gridDim.y tiles M); fewer for M < 8 saves registers */

/* Weights per 16-byte vector, vectors in flight per lane, and scale groups per vector (int4 scales
 * change at most every 8 weights; f32 has none). */
template <int FMT> struct Vec;
template <> struct Vec<PPX_CUDA_W_F32> { static constexpr int N = 4, UNROLL = 4, GROUPS = 1; };
template <> struct Vec<PPX_CUDA_W_INT4> { static constexpr int N = 32, UNROLL = 4, GROUPS = 4; };

/* Byte k of `bytes` (0..255) plus 2^23, as a float: 0x4B0000bb is exactly 8388608 + bb. */
__device__ __forceinline__ float
byte_plus_2p23 (uint32_t bytes, int k)
{
  return __uint_as_float (__byte_perm (bytes, 0x4B000000u, 0x7540u | k));
}

/* The 16-byte vector v as floats, without scales: f32 exactly; int4 the code minus 8. */
template <int FMT>
__device__ __forceinline__ void
dequant_vec (uint4 v, float *w)
{
  const uint32_t u[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; i++) {
    if (FMT == PPX_CUDA_W_F32) {
      w[i] = __uint_as_float (u[i]);
    } else {
      /* byte k holds column 2k in its low nibble and 2k+1 in its high nibble */
      const uint32_t lo = u[i] & 0x0F0F0F0Fu, hi = (u[i] >> 4) & 0x0F0F0F0Fu;
#pragma unroll
      for (int k = 0; k < 4; k++) {
        w[8 * i + 2 * k] = byte_plus_2p23 (lo, k) - 8388616.0f; /* - (2^23 + 8) */
        w[8 * i + 2 * k + 1] = byte_plus_2p23 (hi, k) - 8388616.0f;
      }
    }
  }
}

/* The int4 scales of vector j's four 8-weight groups. vshift >= 0: a group is 2^vshift whole vectors. */
__device__ __forceinline__ void
int4_scales (const float *row_scales, int group_size, int vshift, uint32_t j, float *sc)
{
  if (vshift >= 0) {
    const float s = __ldg (row_scales + (j >> vshift));
#pragma unroll
    for (int g = 0; g < 4; g++)
      sc[g] = s;
  } else {
#pragma unroll
    for (int g = 0; g < 4; g++)
      sc[g] = __ldg (row_scales + (j * 32u + 8u * g) / (uint32_t) group_size);
  }
}

__device__ __forceinline__ float4
load_x4 (const float *p, bool vec)
{
  if (vec)
    return __ldg (reinterpret_cast<const float4 *> (p));
  return make_float4 (__ldg (p), __ldg (p + 1), __ldg (p + 2), __ldg (p + 3));
}

/* acc[m] += sum over the vector's weights of w * x[m] (int4: per 8-weight group, times its scale), as a
 * fixed chain of fused multiply-adds: the same operations for every m and every MT. */
template <int FMT, int MT>
__device__ __forceinline__ void
accumulate_vec (uint4 v, const float *sc, const float *__restrict__ xm, size_t ldx, bool xvec, uint32_t c0, int mt,
                float *acc)
{
  constexpr int N = Vec<FMT>::N, G = Vec<FMT>::GROUPS, PER = N / G;
  float wf[N];
  dequant_vec<FMT> (v, wf);
#pragma unroll
  for (int m = 0; m < MT; m++) {
    if (m < mt) {
      const float *xp = xm + (size_t) m * ldx + c0;
      float total = 0.0f;
#pragma unroll
      for (int g = 0; g < G; g++) {
        float part = 0.0f;
#pragma unroll
        for (int q = 0; q < PER / 4; q++) {
          const float4 a = load_x4 (xp + g * PER + 4 * q, xvec);
          const float *wq = wf + g * PER + 4 * q;
          part = fmaf (wq[3], a.w, fmaf (wq[2], a.z, fmaf (wq[1], a.y, fmaf (wq[0], a.x, part))));
        }
        total = FMT == PPX_CUDA_W_INT4 ? fmaf (sc[g], part, total) : total + part;
      }
      acc[m] += total;
    }
  }
}

template <int FMT, int MT>
__global__ void __launch_bounds__ (LIN_WARPS * 32)
linear_vec_kernel (PpxCudaWeight w, int vshift, const float *__restrict__ x, size_t ldx, int xvec,
                   float *__restrict__ y, size_t ldy, int M, int accumulate)
{
  ppx_pdl_enter ();
  constexpr int N = Vec<FMT>::N, U = Vec<FMT>::UNROLL;
  const int lane = threadIdx.x & 31;
  const int64_t r = (int64_t) blockIdx.x * LIN_WARPS + (threadIdx.x >> 5);
  const int m0 = blockIdx.y * MT;
  if (r >= w.rows)
    return;
  const int mt = min (MT, M - m0);
  const uint32_t nvec = (uint32_t) (w.cols / N);
  const uint4 *wr = (const uint4 *) w.data + (size_t) r * nvec; /* a row is nvec 16-byte vectors */
  const float *row_scales = FMT == PPX_CUDA_W_INT4 ? w.scales + r * ((w.cols + w.group_size - 1) / w.group_size) : NULL;
  const float *xm = x + (size_t) m0 * ldx;
  float acc[MT];
#pragma unroll
  for (int m = 0; m < MT; m++)
    acc[m] = 0.0f;
  float sc[4] = {1.0f, 1.0f, 1.0f, 1.0f};
  uint32_t j = lane;
  for (; j + 32 * (U - 1) < nvec; j += 32 * U) {
    uint4 v[U];
#pragma unroll
    for (int u = 0; u < U; u++)
      v[u] = __ldg (wr + j + 32 * u);
#pragma unroll
    for (int u = 0; u < U; u++) {
      if (FMT == PPX_CUDA_W_INT4)
        int4_scales (row_scales, w.group_size, vshift, j + 32 * u, sc);
      accumulate_vec<FMT, MT> (v[u], sc, xm, ldx, xvec, (j + 32 * u) * N, mt, acc);
    }
  }
  for (; j < nvec; j += 32) {
    if (FMT == PPX_CUDA_W_INT4)
      int4_scales (row_scales, w.group_size, vshift, j, sc);
    accumulate_vec<FMT, MT> (__ldg (wr + j), sc, xm, ldx, xvec, j * N, mt, acc);
  }
#pragma unroll
  for (int m = 0; m < MT; m++) {
    if (m < mt) {
      float s = ppx_warp_sum (acc[m]);
      if (lane == 0) {
        float *yp = y + (size_t) (m0 + m) * ldy + r;
        *yp = accumulate ? *yp + s : s;
      }
    }
  }
}

/* W[r, c] in f32, exactly as the CPU backend dequantizes it (int4 rows repacked at load included). */
__device__ __forceinline__ float
weight_elem (const PpxCudaWeight &w, int64_t r, int64_t c)
{
  switch (w.format) {
    case PPX_CUDA_W_F32:
      return ((const float *) w.data)[r * w.cols + c];
    case PPX_CUDA_W_BF16:
      return __uint_as_float ((uint32_t) ((const uint16_t *) w.data)[r * w.cols + c] << 16);
    case PPX_CUDA_W_INT8:
      return (float) ((const int8_t *) w.data)[r * w.cols + c] * w.scales[r];
    default: {
      const uint8_t *row = (const uint8_t *) w.data + r * ((w.cols + 1) / 2);
      int code;
      const bool repacked = w.group_size == 32 || w.group_size == 64 || w.group_size % 128 == 0;
      if (repacked && c < w.cols / TC_STAGE * TC_STAGE) {
        /* the inverse of int4_word: block, k-step q, thread t, column offset o */
        const int cb = (int) (c % TC_STAGE), q = cb / 16, t = (cb % 16) / 4, o = cb % 4;
        const int bit = 8 * (q & 1) + (o & 1) * 16 + (o >> 1) * 4;
        const uint8_t b = row[(c / TC_STAGE) * 64 + 16 * t + 4 * (q >> 1) + bit / 8];
        code = (b >> (bit & 4)) & 15;
      } else {
        const uint8_t b = row[c / 2];
        code = (c & 1) ? b >> 4 : b & 0x0f;
      }
      const int64_t ng = (w.cols + w.group_size - 1) / w.group_size;
      return (float) (code - 8) * w.scales[r * ng + c / w.group_size];
    }
  }
}

__global__ void __launch_bounds__ (LIN_WARPS * 32)
linear_generic_kernel (PpxCudaWeight w, const float *__restrict__ x, size_t ldx, float *__restrict__ y, size_t ldy,
                       int M, int accumulate)
{
  ppx_pdl_enter ();
  const int lane = threadIdx.x & 31;
  const int64_t r = (int64_t) blockIdx.x * LIN_WARPS + (threadIdx.x >> 5);
  const int m0 = blockIdx.y * LIN_MT;
  if (r >= w.rows)
    return;
  const int mt = min (LIN_MT, M - m0);
  float acc[LIN_MT];
#pragma unroll
  for (int m = 0; m < LIN_MT; m++)
    acc[m] = 0.0f;
  for (int64_t c = lane; c < w.cols; c += 32) {
    const float wc = weight_elem (w, r, c);
#pragma unroll
    for (int m = 0; m < LIN_MT; m++)
      if (m < mt)
        acc[m] = fmaf (wc, x[(size_t) (m0 + m) * ldx + c], acc[m]);
  }
#pragma unroll
  for (int m = 0; m < LIN_MT; m++) {
    if (m < mt) {
      float s = ppx_warp_sum (acc[m]);
      if (lane == 0) {
        float *yp = y + (size_t) (m0 + m) * ldy + r;
        *yp = accumulate ? *yp + s : s;
      }
    }
  }
}

/* log2 of the vectors per int4 group when a group is a power-of-two number of whole 32-weight vectors,
 * else -1 (then each 8-weight group's scale index is divided out). */
static int
int4_vector_shift (int group_size)
{
  if (group_size % 32)
    return -1;
  int v = group_size / 32, shift = 0;
  while ((1 << shift) < v)
    shift++;
  return (1 << shift) == v ? shift : -1;
}

template <int MT>
static void
launch_vec (const PpxCudaWeight *w, const float *x, size_t ldx, float *y, size_t ldy, int M, int accumulate,
            cudaStream_t s)
{
  dim3 grid (ppx_cdiv ((size_t) w->rows, LIN_WARPS), ppx_cdiv ((size_t) M, MT));
  const int xvec = (ldx % 4) == 0 && ((uintptr_t) x & 15) == 0;
  if (w->format == PPX_CUDA_W_F32)
    ppx_launch (linear_vec_kernel<PPX_CUDA_W_F32, MT>, grid, LIN_WARPS * 32, 0, s, *w, 0, x, ldx, xvec, y, ldy, M, accumulate);
  else
    ppx_launch (linear_vec_kernel<PPX_CUDA_W_INT4, MT>, grid, LIN_WARPS * 32, 0, s, *w, int4_vector_shift (w->group_size), x, ldx, xvec, y, ldy, M, accumulate);
}

/* The CUDA-core path. The choice between its two kernels depends on the weight only, so a row's
 * arithmetic never depends on M or on x's alignment. */
static int
simt_linear (const PpxCudaWeight *w, const float *x, size_t ldx, float *y, size_t ldy, int M, int accumulate,
             cudaStream_t s)
{
  const int N = w->format == PPX_CUDA_W_F32 ? 4 : 32;
  const bool vec = (w->format == PPX_CUDA_W_F32 || w->format == PPX_CUDA_W_INT4) && w->cols % N == 0 &&
                   w->cols < ((int64_t) 1 << 31) && ((uintptr_t) w->data & 15) == 0;
  if (!vec) {
    dim3 grid (ppx_cdiv ((size_t) w->rows, LIN_WARPS), ppx_cdiv ((size_t) M, LIN_MT));
    ppx_launch (linear_generic_kernel, grid, LIN_WARPS * 32, 0, s, *w, x, ldx, y, ldy, M, accumulate);
  } else if (M == 1) {
    launch_vec<1> (w, x, ldx, y, ldy, M, accumulate, s);
  } else if (M == 2) {
    launch_vec<2> (w, x, ldx, y, ldy, M, accumulate, s);
  } else if (M <= 4) {
    launch_vec<4> (w, x, ldx, y, ldy, M, accumulate, s);
  } else {
    launch_vec<LIN_MT> (w, x, ldx, y, ldy, M, accumulate, s);
  }
  return ppx_cuda_launched ();
}

/* ======================================================================================================
 * Entry points
 * ====================================================================================================== */

extern "C" size_t
ppx_cuda_linear_workspace_bytes (const PpxCudaWeight *w, int M)
{
  if (M <= 0 || w->rows <= 0 || !tc_eligible (w))
    return 0;
  int nst, leaf, S;
  tc_plan (w, &nst, &leaf, &S);
  if (S <= 1)
    return 0;
  return TC_MAX_COUNTERS * sizeof (unsigned) + (size_t) S * TC_MMAX * (size_t) w->rows * sizeof (float);
}

extern "C" int
ppx_cuda_linear (const PpxCudaWeight *w, const float *x, size_t ldx, float *y, size_t ldy, int M, int accumulate,
                 void *workspace, void *stream)
{
  if (M <= 0 || w->rows <= 0)
    return 0;
  cudaStream_t s = PPX_CUDA_STREAM (stream);
  const int ck = tc_eligible (w);
  if (ck)
    return tc_linear (w, ck, x, ldx, y, ldy, M, accumulate, NULL, 0.0f, 0, workspace, s);
  return simt_linear (w, x, ldx, y, ldy, M, accumulate, s);
}

extern "C" int
ppx_cuda_linear_rmsnorm_fuses (const PpxCudaWeight *w, const float *x, size_t ldx, const float *alpha, int M)
{
  return M >= 1 && M <= PPX_CUDA_RMSNORM_LINEAR_MAX_M && tc_eligible (w) && ldx == (size_t) w->cols && ((uintptr_t) alpha & 15) == 0 &&
         ((uintptr_t) x & 15) == 0;
}

extern "C" int
ppx_cuda_linear_rmsnorm (const PpxCudaWeight *w, const float *x, size_t ldx, const float *alpha, float eps, float *y,
                         size_t ldy, int M, int accumulate, void *workspace, void *stream)
{
  if (M <= 0 || w->rows <= 0)
    return 0;
  if (!ppx_cuda_linear_rmsnorm_fuses (w, x, ldx, alpha, M))
    return (int) cudaErrorInvalidValue;
  return tc_linear (w, tc_eligible (w), x, ldx, y, ldy, M, accumulate, alpha, eps, 0, workspace,
                    PPX_CUDA_STREAM (stream));
}

static int gate_fusion_mode = -1; /* -1: PPX_CUDA_FUSE_GATE decides (default 0) */

extern "C" void
ppx_cuda_gate_fusion_set (int mode)
{
  __atomic_store_n (&gate_fusion_mode, mode < 0 ? -1 : mode > 0, __ATOMIC_RELAXED);
}

static int
gate_fusion_on (void)
{
  static int from_env = -1; /* PPX_CUDA_FUSE_GATE, read once */
  const int mode = __atomic_load_n (&gate_fusion_mode, __ATOMIC_RELAXED);
  if (mode >= 0)
    return mode;
  int env = __atomic_load_n (&from_env, __ATOMIC_RELAXED);
  if (env < 0) {
    const char *v = getenv ("PPX_CUDA_FUSE_GATE");
    env = v && atoi (v) > 0;
    __atomic_store_n (&from_env, env, __ATOMIC_RELAXED);
  }
  return env;
}

extern "C" int
ppx_cuda_linear_gate_fuses (const PpxCudaWeight *w, const float *h, int M)
{
  return gate_fusion_on () && M >= 1 && M <= PPX_CUDA_GATE_LINEAR_MAX_M && tc_eligible (w) && w->cols % 4 == 0 &&
         ((uintptr_t) h & 15) == 0;
}

extern "C" int
ppx_cuda_linear_gate (const PpxCudaWeight *w, const float *h, float *y, size_t ldy, int M, int accumulate,
                      void *workspace, void *stream)
{
  if (M <= 0 || w->rows <= 0)
    return 0;
  if (!ppx_cuda_linear_gate_fuses (w, h, M))
    return (int) cudaErrorInvalidValue;
  return tc_linear (w, tc_eligible (w), h, 2 * (size_t) w->cols, y, ldy, M, accumulate, NULL, 0.0f, 1, workspace,
                    PPX_CUDA_STREAM (stream));
}

extern "C" int
ppx_cuda_linear_time (const PpxCudaWeight *w, int n, const float *x, float *y, int M, void *workspace, int calls,
                      int reps, double *us, const char **step)
{
  *step = "stream";
  cudaStream_t s = NULL;
  cudaGetLastError (); /* nothing earlier is blamed on this */
  int e = (int) cudaStreamCreateWithFlags (&s, cudaStreamNonBlocking);
  if (!e)
    e = ppx_time_graph (
        s, n, calls, reps,
        [&] (int i) {
          return ppx_cuda_linear (&w[i % n], x, (size_t) w[0].cols, y, (size_t) w[0].rows, M, 0, workspace, s);
        },
        us, step);
  if (s)
    cudaStreamDestroy (s);
  cudaGetLastError ();
  return e;
}

/* out[m, :] (+)= W[ids[m * id_stride + id_index], :]; an id outside [0, rows) gives zeros. */
__global__ void
embed_kernel (PpxCudaWeight w, const int32_t *ids, int id_index, int id_stride, float *out, int accumulate)
{
  ppx_pdl_enter ();
  const int m = blockIdx.y;
  const int32_t t = ids[(size_t) m * id_stride + id_index];
  float *dst = out + (size_t) m * w.cols;
  for (int64_t c = blockIdx.x * (int64_t) blockDim.x + threadIdx.x; c < w.cols; c += (int64_t) gridDim.x * blockDim.x) {
    if (t < 0 || t >= w.rows) {
      if (!accumulate)
        dst[c] = 0.0f;
    } else {
      const float v = weight_elem (w, t, c);
      dst[c] = accumulate ? dst[c] + v : v;
    }
  }
}

extern "C" int
ppx_cuda_embed (const PpxCudaWeight *w, const int32_t *ids, int id_index, int id_stride, float *out, int M,
                int accumulate, void *stream)
{
  if (M <= 0)
    return 0;
  dim3 grid (ppx_cdiv ((size_t) w->cols, 256) > 64 ? 64 : ppx_cdiv ((size_t) w->cols, 256), (unsigned) M);
  ppx_launch (embed_kernel, grid, 256, 0, PPX_CUDA_STREAM (stream), *w, ids, id_index, id_stride, out, accumulate);
  return ppx_cuda_launched ();
}
