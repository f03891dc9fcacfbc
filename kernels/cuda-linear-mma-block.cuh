/* CUDA backend, the tensor-core path of the linear layers: the steps of tc_linear_kernel (cuda-linear-mma.cu)
 * as named device functions of one block's thread (docs/cuda.md, "Linear layers"). TcBlock holds what a
 * thread copies each stage (set up once per block) and its place in the warp layout of TcCfg; its functions
 * are the stage's steps: copy (issue_x, issue_weights), convert x (convert_x), load the weights into
 * registers (load_weights, gather_tail), dequantize (dequant), multiply (mma_stage), and the epilogue
 * (store_leaf, combine_leaves). Every output is computed by the same operations whatever NT (how many x
 * n-tiles the launch has room for) and M are: chunks from zero, hi then lo, added to the running sum in
 * chunk order; the n-tile a warp takes and which tiles exist change only where the work runs. */
#ifndef PPX_CUDA_LINEAR_MMA_BLOCK_CUH
#define PPX_CUDA_LINEAR_MMA_BLOCK_CUH

#include "cuda-linear-mma.cuh"

/* Where a block's work is: the hardware block index (tc_linear_kernel's launch: (slice, row block, leaf) and
 * the slices a row block has), or the task a persistent kernel's block runs (TcTaskIdx, cuda-layer-tail.cu). */
struct TcHwIdx {
  __device__ __forceinline__ int bx () const { return (int) blockIdx.x; }
  __device__ __forceinline__ int by () const { return (int) blockIdx.y; }
  __device__ __forceinline__ int bz () const { return (int) blockIdx.z; }
  __device__ __forceinline__ int gx () const { return (int) gridDim.x; }
};
struct TcTaskIdx {
  int x, y, z, nx;
  __device__ __forceinline__ int bx () const { return x; }
  __device__ __forceinline__ int by () const { return y; }
  __device__ __forceinline__ int bz () const { return z; }
  __device__ __forceinline__ int gx () const { return nx; }
};

template <int FMT, int CK, int NT, bool WG = false, class IX = TcHwIdx> struct TcBlock {
  using C = TcCfg<FMT, CK, NT, WG>;
  static_assert (NT < 8 || sizeof (IX) == sizeof (TcHwIdx), "NT >= 8 reads the block index again each stage");
  static constexpr bool XS = C::XS;
  static constexpr int WORDS = C::WORDS, WV = C::WV, CPS = C::CPS, CPS1 = CPS > 0 ? CPS : 1;
  static constexpr int RTW = C::RTW, NTW = C::NTW, NCH = C::NCH, NCHUNK = C::NCHUNK;
  static constexpr int WE = C::SW / TC_THREADS;                            /* weight copies per thread */
  static constexpr int SE = (C::ROWS * CPS + TC_THREADS - 1) / TC_THREADS; /* scale copies per thread */
  static_assert (WV == 1 || WV == 2 || WV == 4, "16-byte vectors per row and thread");

  const TcArgs &a;
  const IX ix;
  int tid, lane, warp, g, t, wm, wr, row_in_block, tiles, KS;
  int m0, mb; /* the block's slice of x rows: rows m0 .. m0 + mb - 1 of the launch */
  int64_t block_row, row_base;
  const uint4 *xs0;   /* NT > 1: the split x records of the block's first n-tile in stage 0 */
  const float *xrow0; /* x: this thread's row of n-tile 0, the stride between n-tiles, its column offset */
  size_t xstride;
  int x_tiles, xoff;
  struct TcSrc {
    const uint8_t *wp0; /* weights: the first copy's source, the step between copies, how many are rows */
    int64_t wstep;
    const float *sp0; /* int4 scales: likewise */
    int64_t sstep;
    int w_valid, s_valid;
  } src0; /* NT < 8: set up once; NT >= 8 recomputes it each stage (copy_tid) */

  /* The n-tile (8 x rows) a warp at x position wm takes as its nt-th: interleaved, so that when the last
   * tiles are past M every warp along x loses about as many. */
  __device__ __forceinline__ static int tile_of (int wm_, int nt) { return nt * C::WM + wm_; }

  /* Set up once per block: the thread's place in the warp layout, the block's weight rows and slice of x
   * rows (blockIdx.x the slice, blockIdx.y the row block: the slices of one row block and leaf run side by
   * side and read the same weights, mostly from the L2), and the source of each of its copies.
   * x (NT = 1): k-step `warp` of every n-tile (x row m0 + 8 nt + g; rows past M zero-filled). */
  __device__ __forceinline__ TcBlock (const TcArgs &args, IX idx = IX ()) : a (args), ix (idx)
  {
    tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, t = lane & 3;
    wm = warp % C::WM, wr = warp / C::WM;
    const int rb = ix.by ();
    m0 = NT == 1 ? 0 : ix.bx () * a.slice_tiles * 8; /* M <= 8: one slice */
    mb = NT == 1 ? a.M : min (a.M - m0, a.slice_tiles * 8);
    block_row = (int64_t) rb * C::ROWS;
    row_in_block = wr * RTW * 16;
    row_base = block_row + row_in_block;
    tiles = (mb + 7) >> 3;
    KS = (a.K + 15) >> 4;
    xrow0 = a.x + (size_t) (m0 + g) * a.ldx;
    xstride = (size_t) 8 * a.ldx;
    x_tiles = (mb - g + 7) / 8;
    xs0 = XS ? a.xs + (size_t) (m0 >> 3) * 256 : nullptr;
    xoff = tc_col<FMT> (0, true, warp, t);
    if (NT < 8)
      src0 = copy_src (tid);
  }

  /* Where thread `id` copies the block's weights and int4 scales from (weights: slot entries e = id + 256 k,
   * e = ((row tile * 2 + half) * WV + vector) * 32 + lane, so the vector and the half are the same for
   * every k and the row moves by 64 / WV per k; scales: entries e = id + 256 k of [ROWS][CPS], row id / CPS
   * + k 256 / CPS, chunk id % CPS), and how many of its copies are rows of the weight. */
  __device__ __forceinline__ TcSrc copy_src (int id) const
  {
    TcSrc cs;
    const int warp_ = id >> 5, g_ = (id & 31) >> 2, t_ = id & 3;
    const int64_t brow = (int64_t) ix.by () * C::ROWS; /* not block_row: NT >= 8 recomputes this each stage */
    const int64_t wrow0 = brow + warp_ / (2 * WV) * 16 + g_ + 8 * ((warp_ / WV) & 1);
    cs.wp0 = a.w + (wrow0 < a.rows ? wrow0 : 0) * a.row_bytes + 64 * (warp_ % WV) + 16 * t_;
    cs.wstep = (int64_t) (64 / WV) * a.row_bytes;
    cs.w_valid = wrow0 < a.rows ? (int) min ((int64_t) WE, (a.rows - wrow0 + 64 / WV - 1) / (64 / WV)) : 0;
    const int64_t srow0 = brow + id / CPS1;
    cs.sp0 = a.scales + (srow0 < a.rows ? srow0 : 0) * a.n_groups;
    cs.sstep = (int64_t) (TC_THREADS / CPS1) * a.n_groups;
    cs.s_valid = 0;
#pragma unroll
    for (int k = 0; k < SE; k++)
      if (id / CPS1 + k * (TC_THREADS / CPS1) < C::ROWS && srow0 + k * (TC_THREADS / CPS1) < a.rows)
        cs.s_valid = k + 1;
    return cs;
  }

  /* The thread index for the copies' addresses: with many n-tiles (NT >= 8) read again each stage (a
   * volatile read the compiler cannot hoist), so that the addresses are recomputed (a few dozen
   * instructions a stage) instead of being held in registers across the loop, which spilled them to local
   * memory and made every stage wait on reloads from the L2 (the shared memory leaves the L1 almost no
   * room). */
  __device__ __forceinline__ int copy_tid () const
  {
    if (NT < 8)
      return tid;
    unsigned v;
    asm volatile ("mov.u32 %0, %%tid.x;" : "=r"(v));
    return (int) v;
  }

  /* Copies x's columns of stage st into a slot by cp.async: the thread's 16-byte record of each n-tile that
   * holds x rows (rows past M and columns past K zero-filled; n-tiles past M are never read, so not copied).
   * NT = 1: full stages of 16-byte aligned x (every stage but a K tail) take a pointer step per n-tile;
   * the general path is kept apart so that its address arithmetic does not weigh on the common one. */
  __device__ __forceinline__ void issue_x (uint4 *slot, int st, uint64_t *bar) const
  {
    const int col0 = st * TC_STAGE;
    if (XS) {
      /* x split beforehand (tc_xsplit_kernel): the stage's records of all n-tiles are contiguous, in slot
       * order: on sm_90 thread 0 copies them all at once (bulk copy completing on the slot's mbarrier),
       * before that each thread copies record tid of each n-tile */
      const int n = tiles;
      /* NT >= 8: from the block index again each stage (held across the loop, the pointer was spilled) */
      const uint4 *src0 = (NT >= 8 ? a.xs + (size_t) blockIdx.x * a.slice_tiles * 256 : xs0) + (size_t) st * a.xs_tiles * 256;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
      if (copy_tid () == 0)
        bulk_copy (slot, src0, (unsigned) n * 256 * sizeof (uint4), bar);
#else
      const int id = copy_tid ();
      const uint4 *src = src0 + id;
#pragma unroll
      for (int nt = 0; nt < NT; nt++) {
        if (nt >= n)
          break;
        cp_async<16> (slot + nt * 256 + id, src + nt * 256, 16);
      }
#endif
      return;
    }
    if (col0 + TC_STAGE <= a.K && a.vec_x) {
      const float *xp = xrow0 + col0 + xoff;
      uint4 *dst = slot + warp * 32 + lane;
#pragma unroll
      for (int nt = 0; nt < NT; nt++) {
        if (NT > 1 && nt >= tiles)
          break;
        cp_async<16> (dst + nt * 256, nt < x_tiles ? xp : a.x, nt < x_tiles ? 16 : 0);
        xp += xstride;
      }
      return;
    }
    issue_x_general (slot, col0);
  }

  /* issue_x for a K tail stage or x rows not on 16 bytes: per-column copies where a record crosses K. */
  __device__ __forceinline__ void issue_x_general (uint4 *slot, int col0) const
  {
    const bool full = col0 + TC_STAGE <= a.K;
    for (int nt = 0; nt < NT; nt++) {
      if (NT > 1 && nt >= tiles)
        break;
      uint4 *dst = slot + (nt * 8 + warp) * 32 + lane;
      const float *xp = nt < x_tiles ? xrow0 + nt * xstride : nullptr;
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

  /* Copies the block's weights of stage st (full stages only; rows past the end zero-filled) and its int4
   * scales into a slot by cp.async. */
  __device__ __forceinline__ void issue_weights (uint4 *slot, int st) const
  {
    const int id = copy_tid ();
    const TcSrc cs = NT < 8 ? src0 : copy_src (id);
    const uint8_t *wp0 = cs.wp0;
    const int64_t wstep = cs.wstep;
    const int w_valid = cs.w_valid;
    const int col0 = st * TC_STAGE;
    if (col0 + TC_STAGE <= a.K) {
      const int64_t off = (int64_t) col0 * WORDS / 8;
      uint4 *wdst = slot + C::SX + id;
#pragma unroll
      for (int k = 0; k < WE; k++) {
        if (k < w_valid)
          cp_async_w (wdst + TC_THREADS * k, wp0 + k * wstep + off);
        else
          cp_async<16> (wdst + TC_THREADS * k, a.w, 0);
      }
    }
    if (FMT != PPX_CUDA_W_INT4)
      return;
    const float *sp0 = cs.sp0;
    const int64_t sstep = cs.sstep;
    const int s_valid = cs.s_valid;
    float *sdst = reinterpret_cast<float *> (slot + C::SX + C::SW);
#pragma unroll
    for (int k = 0; k < SE; k++) {
      const int e = id + TC_THREADS * k;
      if ((C::ROWS * CPS) % TC_THREADS == 0 || e < C::ROWS * CPS) {
        const int c = id % CPS1;
        const int col = col0 + c * 16 * CK;
        const bool ok = k < s_valid && col < a.K;
        /* group of column col: a stage holds CPS whole groups (g32, g64), or lies in one (g128k) */
        const int gi = CK < 8 ? st * CPS + c : col0 / a.group_size;
        cp_async<4> (sdst + e, ok ? sp0 + k * sstep + gi : a.scales, ok ? 4 : 0);
      }
    }
  }

  /* The 4 values that convert_x needs a stage ahead for the thread's x record in stage st: the RMSNorm
   * gains of its columns (alpha), or the gate's other half (row g, columns c .. c + 3 of x + K, written by
   * the kernel before this one, so read through the L2); zeros past M and K. Read from global memory one
   * stage ahead, so the load's latency hides behind a stage's work. */
  __device__ __forceinline__ float4 aux_at (int st) const
  {
    const int col0 = st * TC_STAGE;
    const int c = tc_col<FMT> (col0, col0 + TC_STAGE <= a.K, warp, t);
    float v[4];
    if (a.alpha) {
      if (c + 3 < a.K)
        return __ldg (reinterpret_cast<const float4 *> (a.alpha + c));
#pragma unroll
      for (int i = 0; i < 4; i++)
        v[i] = c + i < a.K ? __ldg (a.alpha + c + i) : 0.0f;
    } else {
      const float *vp = xrow0 + a.K + c;
      if (g < mb && c + 3 < a.K && a.vec_x)
        return __ldcg (reinterpret_cast<const float4 *> (vp));
#pragma unroll
      for (int i = 0; i < 4; i++)
        v[i] = g < mb && c + i < a.K ? __ldcg (vp + i) : 0.0f;
    }
    return make_float4 (v[0], v[1], v[2], v[3]);
  }

  /* NT = 1: converts the thread's x record of a slot in place from f32 to the hi/lo bf16 split
   * (tc_split_record), first x[c] * (alpha[c] * inv) with the row's inverse RMS, as
   * rmsnorm_kernel computes it, or silu(x[c]) * v[c] as silu_gate_kernel computes it. NT > 1: nothing (x
   * was split beforehand by tc_xsplit_kernel, with the same tc_split_record). */
  __device__ __forceinline__ void convert_x (uint4 *slot, float4 al, const float *row_inv) const
  {
#pragma unroll
    for (int nt = 0; nt < (XS ? 0 : NT); nt++) { /* XS: split beforehand, nothing to do */
      if (NT > 1 && nt >= tiles)
        break;
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
      *p = tc_split_record (v);
    }
  }

  /* The thread's weight words of a full stage (rows row_base + 16 rt + g + 8 h), from the slot, where they
   * lie as the warps' A fragments (conflict-free 16-byte reads). */
  __device__ __forceinline__ void load_weights (const uint4 *slot, uint32_t (&rw)[RTW][2][WORDS]) const
  {
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
  }

  /* The thread's weight words of the tail stage (past the last full 128 columns; the quant.h layout),
   * straight from global memory, zeros past K (int4: code 8). */
  __device__ __forceinline__ void gather_tail (uint32_t (&rw)[RTW][2][WORDS], int st) const
  {
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
  }

  /* The A fragments of k-step q from the thread's weight words: bf16 as they are, int8 and int4 codes
   * converted exactly to bf16 (int8_pairs, int4_pair). */
  __device__ __forceinline__ static void dequant (const uint32_t (&rw)[RTW][2][WORDS], int q, uint32_t (&af)[RTW][4])
  {
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
  }

  /* One stage's multiplications for the warp's first N n-tiles (those that hold x rows; N is a template
   * argument so that the stage is straight-line code), in at most two groups of n-tiles (at most 8 / RTW
   * tiles a group, so that the chunk sums of a group and the running sums fit in registers without
   * spilling; the weights are dequantized again for each group). Two groups are as even as N allows (5 =
   * 3 + 2, not 4 + 1: the 80-row launch's warps have 5 tiles, and a group of one tile left two 8-deep mma
   * chains to wait on each other); grouping only changes the order in which independent accumulators are
   * worked on, never an accumulator's own sequence. */
  template <int N>
  __device__ __forceinline__ void mma_stage (float (&acc)[RTW][NTW][4], uint32_t (&rw)[RTW][2][WORDS],
                                             const uint4 *slot, int kvalid, bool full) const
  {
    static_assert (N <= 2 * (8 / RTW), "at most two groups");
    constexpr int G = 8 / RTW < N ? (N + 1) / 2 : N;
    mma_group<0, G> (acc, rw, slot, kvalid);
    if (N > G) {
      /* the weights again from the slot, behind a compiler barrier: otherwise the compiler keeps the first
       * group's dequantized fragments of all 8 k-steps live instead of recomputing them, and spills */
      asm volatile ("" ::: "memory");
      if (full)
        load_weights (slot, rw);
      mma_group<(N > G ? G : 0), (N > G ? N - G : 1)> (acc, rw, slot, kvalid);
    }
  }

  /* The stage's multiplications for the warp's n-tiles N0 .. N0 + G - 1: 8 k-steps (those at or past kvalid
   * skipped: the tail stage). Chunk ch (CK k-steps) is summed by the tensor cores from zero, k-step by
   * k-step (hi, then lo), then added to acc (times its int4 scale), chunks in order. NCH chunks at a time
   * run as independent mma chains. */
  template <int N0, int G>
  __device__ __forceinline__ void mma_group (float (&acc)[RTW][NTW][4], const uint32_t (&rw)[RTW][2][WORDS],
                                             const uint4 *slot, int kvalid) const
  {
    const float *ssc = reinterpret_cast<const float *> (slot + C::SX + C::SW);
#pragma unroll
    for (int cg = 0; cg < NCHUNK / NCH; cg++) {
      float part[NCH][RTW][G][4];
#pragma unroll
      for (int c = 0; c < NCH; c++)
#pragma unroll
        for (int rt = 0; rt < RTW; rt++)
#pragma unroll
          for (int nt = 0; nt < G; nt++)
#pragma unroll
            for (int i = 0; i < 4; i++)
              part[c][rt][nt][i] = 0.0f;
#pragma unroll
      for (int i = 0; i < CK; i++)
#pragma unroll
        for (int c = 0; c < NCH; c++) {
          const int q = (cg * NCH + c) * CK + i;
          if (q >= kvalid)
            continue;
          uint32_t af[RTW][4];
          dequant (rw, q, af);
          mma_kstep<N0, G> (part[c], af, slot, q);
        }
#pragma unroll
      for (int c = 0; c < NCH; c++)
        if ((cg * NCH + c) * CK < kvalid)
          add_chunk<N0, G> (acc, part[c], ssc, cg * NCH + c);
    }
  }

  /* One k-step q of the warp's n-tiles N0 .. N0 + G - 1: the hi halves of their x records (8 bytes each)
   * and the hi products of every (row tile, n-tile), then the lo halves and the lo products, so that the
   * two mma on one accumulator are as far apart as the group allows (the same two mma, in the same order,
   * on each accumulator). */
  template <int N0, int G>
  __device__ __forceinline__ void mma_kstep (float (&part)[RTW][G][4], const uint32_t (&af)[RTW][4],
                                             const uint4 *slot, int q) const
  {
#pragma unroll
    for (int half = 0; half < 2; half++) {
      uint2 b[G];
#pragma unroll
      for (int nt = 0; nt < G; nt++)
        b[nt] = reinterpret_cast<const uint2 *> (slot + (tile_of (wm, N0 + nt) * 8 + q) * 32 + lane)[half];
#pragma unroll
      for (int nt = 0; nt < G; nt++)
#pragma unroll
        for (int rt = 0; rt < RTW; rt++)
          mma_bf16 (part[rt][nt], af[rt], b[nt].x, b[nt].y);
    }
  }

  /* acc += chunk ch's sums of n-tiles N0 .. N0 + G - 1, times the rows' int4 scales of that chunk (one
   * fmaf each). */
  template <int N0, int G>
  __device__ __forceinline__ void add_chunk (float (&acc)[RTW][NTW][4], const float (&part)[RTW][G][4],
                                             const float *ssc, int ch) const
  {
#pragma unroll
    for (int rt = 0; rt < RTW; rt++) {
      float s0 = 1.0f, s1 = 1.0f;
      if (FMT == PPX_CUDA_W_INT4) {
        const int lr = row_in_block + 16 * rt + g;
        s0 = ssc[lr * CPS1 + ch];
        s1 = ssc[(lr + 8) * CPS1 + ch];
      }
#pragma unroll
      for (int nt = 0; nt < G; nt++)
#pragma unroll
        for (int i = 0; i < 4; i++) {
          if (FMT == PPX_CUDA_W_INT4)
            acc[rt][N0 + nt][i] = fmaf (i < 2 ? s0 : s1, part[rt][nt][i], acc[rt][N0 + nt][i]);
          else
            acc[rt][N0 + nt][i] += part[rt][nt][i];
        }
    }
  }

  /* Stage st's multiplications for the warp's first N n-tiles, from its slot: the weights from the slot
   * (full stages) or from global memory (the tail stage). */
  template <int N>
  __device__ __forceinline__ void compute_n (float (&acc)[RTW][NTW][4], const uint4 *slot, int st) const
  {
    uint32_t rw[RTW][2][WORDS];
    if ((st + 1) * TC_STAGE <= a.K) {
      load_weights (slot, rw);
      mma_stage<N> (acc, rw, slot, 8, true);
    } else {
      gather_tail (rw, st);
      mma_stage<N> (acc, rw, slot, KS - st * 8, false);
    }
  }

  /* Stage st's multiplications: compute_n for the number of the warp's n-tiles that hold x rows (tiles wm,
   * wm + WM, ... below `tiles`), so the warp's tiles past M cost nothing. */
  __device__ __forceinline__ void compute (float (&acc)[RTW][NTW][4], const uint4 *slot, int st) const
  {
    constexpr int N8 = NTW >= 8 ? 1 : 0, N4 = NTW >= 4 ? 1 : 0;
    const int n = (tiles - wm + C::WM - 1) / C::WM;
    if (NTW == 1 || n >= NTW)
      compute_n<NTW> (acc, slot, st);
    else if (N8 && n == 7)
      compute_n<N8 ? 7 : 1> (acc, slot, st);
    else if (N8 && n == 6)
      compute_n<N8 ? 6 : 1> (acc, slot, st);
    else if (N8 && n == 5)
      compute_n<N8 ? 5 : 1> (acc, slot, st);
    else if (N8 && n == 4)
      compute_n<N8 ? 4 : 1> (acc, slot, st);
    else if (N4 && n == 3)
      compute_n<N4 ? 3 : 1> (acc, slot, st);
    else if (N4 && n == 2)
      compute_n<N4 ? 2 : 1> (acc, slot, st);
    else if (n >= 1)
      compute_n<1> (acc, slot, st);
  }

  /* The inverse RMS of each x row (M <= 8, NT = 1) over all K columns, whatever this block's leaf, in
   * rmsnorm_kernel's order: thread t sums columns 4t .. 4t + 3, then 4t + 1024 .. (one fma each), then
   * ppx_block_sum's tree. Rows two at a time, 16 columns of each loaded at once (x rows are on 16 bytes:
   * ldx = K, a multiple of 4). Rows past M (zero-filled x) get 0. */
  __device__ __forceinline__ void row_rms (float *row_inv, float (&red2)[2][TC_WARPS]) const
  {
    static_assert (TC_THREADS == 256, "rmsnorm_kernel's 256 threads a row");
    const float *x0 = a.x + (size_t) m0 * a.ldx;
    if (tid >= mb && tid < 8)
      row_inv[tid] = 0.0f;
    for (int mr = 0; mr < mb; mr += 2) {
      float ss[2] = {0.0f, 0.0f};
      for (int c4 = 4 * tid; c4 < a.K; c4 += 16 * TC_THREADS) {
        float4 v[2][4];
#pragma unroll
        for (int r = 0; r < 2; r++)
#pragma unroll
          for (int j = 0; j < 4; j++) {
            const int c = c4 + j * 4 * TC_THREADS;
            v[r][j] = mr + r < mb && c < a.K ? *reinterpret_cast<const float4 *> (x0 + (size_t) (mr + r) * a.ldx + c)
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
          if (lane == 0 && mr + r < mb)
            row_inv[mr + r] = 1.0f / sqrtf (a.eps + v / (float) a.K);
        }
      }
      __syncthreads ();
    }
  }

  /* The block's sums: y when K is one leaf, else the leaf's partial sums for the last leaf to add.
   * acc[rt][nt][i] is weight row row_base + 16 rt + g + 8 (i >> 1), x row m0 + 8 tile_of (wm, nt) + 2 t + (i & 1). */
  __device__ __forceinline__ void store_leaf (const float (&acc)[RTW][NTW][4]) const
  {
#pragma unroll
    for (int rt = 0; rt < RTW; rt++)
#pragma unroll
      for (int nt = 0; nt < NTW; nt++)
#pragma unroll
        for (int i = 0; i < 4; i++) {
          const int64_t r = row_base + 16 * rt + g + 8 * (i >> 1);
          const int m = 8 * tile_of (wm, nt) + 2 * t + (i & 1);
          if (r >= a.rows || m >= mb)
            continue;
          if (a.S == 1)
            tc_store_y<FMT> (a, m0 + m, r, acc[rt][nt][i]);
          else
            a.partials[((size_t) ix.bz () * a.pm + m0 + m) * a.rows + r] = acc[rt][nt][i];
        }
  }

  /* The counter of the block's row block and slice */
  __device__ __forceinline__ unsigned counter_index () const { return (unsigned) (ix.by () * ix.gx () + ix.bx ()); }

  /* Whether this block is the last of its row block's S leaves to finish (an atomic ticket after its
   * partial sums are visible); that one adds the leaves. */
  __device__ __forceinline__ bool last_leaf (unsigned *ticket) const
  {
    __threadfence ();
    __syncthreads ();
    if (tid == 0) {
      *ticket = atomicAdd (a.counters + counter_index (), 1u);
      __threadfence ();
    }
    __syncthreads ();
    return *ticket == (unsigned) a.S - 1;
  }

  /* Four of leaf s's partial sums at p (rows r .. r + nr - 1 of one x row; zeros past nr): one 16-byte load
   * when rows is a multiple of 4 (then p is on 16 bytes), else scalar loads. */
  __device__ __forceinline__ static float4 leaf4 (const float *p, int nr, bool vec)
  {
    if (vec && nr == 4)
      return __ldcg (reinterpret_cast<const float4 *> (p));
    return make_float4 (nr > 0 ? __ldcg (p) : 0.0f, nr > 1 ? __ldcg (p + 1) : 0.0f, nr > 2 ? __ldcg (p + 2) : 0.0f,
                        nr > 3 ? __ldcg (p + 3) : 0.0f);
  }

  /* y = leaf 0 + leaf 1 + ... in leaf order, int8 scales applied, for the block's rows and slice; the
   * counter back to zero for the next launch. A thread takes four consecutive weight rows of one x row at a
   * time and loads L leaves at once before adding them: the loop it replaces issued one leaf's load
   * after another's add, a chain of S L2 round trips per output (a few us of every split launch, M = 1
   * included). */
  __device__ __forceinline__ void combine_leaves () const
  {
    const size_t leaf_stride = (size_t) a.pm * a.rows;
    const bool vec = (a.rows & 3) == 0;
    constexpr int Q = C::ROWS / 4;              /* groups of 4 rows in the block */
    constexpr int L = C::MINB >= 2 ? 4 : 8;     /* leaves loaded at once (registers allowing) */
    const int n = mb * Q;
    for (int idx = tid; idx < n; idx += TC_THREADS) {
      const int m = m0 + idx / Q;
      const int64_t r = block_row + 4 * (idx % Q);
      if (r >= a.rows)
        continue;
      const int nr = (int) min ((int64_t) 4, a.rows - r);
      const float *pp = a.partials + (size_t) m * a.rows + r;
      float4 v = make_float4 (0.0f, 0.0f, 0.0f, 0.0f);
      for (int s0 = 0; s0 < a.S; s0 += L) {
        float4 p[L];
#pragma unroll
        for (int k = 0; k < L; k++)
          p[k] = s0 + k < a.S ? leaf4 (pp + (size_t) (s0 + k) * leaf_stride, nr, vec) : make_float4 (0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
        for (int k = 0; k < L; k++) {
          if (s0 + k == 0) {
            v = p[k];
          } else if (s0 + k < a.S) {
            v.x += p[k].x;
            v.y += p[k].y;
            v.z += p[k].z;
            v.w += p[k].w;
          }
        }
      }
      if (a.vec_y && nr == 4) {
        tc_store_y4<FMT> (a, m, r, v);
        continue;
      }
      tc_store_y<FMT> (a, m, r, v.x);
      if (nr > 1)
        tc_store_y<FMT> (a, m, r + 1, v.y);
      if (nr > 2)
        tc_store_y<FMT> (a, m, r + 2, v.z);
      if (nr > 3)
        tc_store_y<FMT> (a, m, r + 3, v.w);
    }
    if (tid == 0)
      a.counters[counter_index ()] = 0u;
  }
};

#endif
