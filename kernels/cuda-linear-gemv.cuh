/* CUDA backend, the tensor-core path of the linear layers at M <= 8 (the NT = 1 configuration) without a
 * block barrier in its main loop: tc_gemv_kernel (docs/cuda.md, "Linear layers", "M <= 8 without the stage
 * barrier"). Included by cuda-linear-mma.cu only.
 *
 * What it changes against tc_linear_kernel<FMT, CK, 1>, and what it keeps:
 * - weights private to each thread: a thread cp.asyncs exactly the 16-byte words of its warp's A fragments
 *   that it reads itself (rows g and g + 8 of the warp's 16-row tile, its 16-byte vectors t of each), into
 *   the same slot layout, and waits for them with its own cp.async.wait_group: no other thread's copy is
 *   waited for. The int4 scales of a warp's 16 rows are copied by its lanes and made visible with
 *   __syncwarp. A warp is thus never held by another warp's late weight copy (the block barrier of
 *   tc_linear_kernel made every stage wait for the slowest of the block's 512-2048 copies);
 * - x of the whole leaf staged once, before the main loop: the hi/lo records of the block's mb rows only
 *   ([stage][k-step][row][t], 512 bytes a row and stage), after the RMSNorm or the gate as convert_x
 *   computes them, then one __syncthreads; rows of an n-tile past M read as zeros (their outputs are never
 *   stored);
 * - unchanged: the plan (leaves, K split), the ring depth's role (D - 1 stages of weights in flight a
 *   thread), each output's operations (the chunk's k-steps hi then lo from zero, chunks added in order, the
 *   int4 scale by fmaf, the leaf combine in leaf order): the bits are tc_linear_kernel's, for every M. */
#ifndef PPX_CUDA_LINEAR_GEMV_CUH
#define PPX_CUDA_LINEAR_GEMV_CUH

#include "cuda-linear-mma-kernel.cuh"

template <int FMT, int CK> struct TcGemv {
  using C = TcCfg<FMT, CK, 1>;
  using B = TcBlock<FMT, CK, 1>;
  static constexpr int WORDS = C::WORDS, WV = C::WV, CPS = C::CPS, CPS1 = CPS > 0 ? CPS : 1;
  static constexpr int NCH = C::NCH, NCHUNK = C::NCHUNK;
  static constexpr int WSLOT = C::SW + C::SS;             /* a ring slot: weights, then the int4 scales (uint4) */
  static constexpr int SCOPY = (16 * CPS + 31) / 32;      /* scale copies per lane and stage */
  static constexpr int XREC_ROW = 8 * 4;                  /* x records a row and stage */

  /* Copies stage st's weights that this thread reads (rows r0 = row_base + g and r0 + 8, vectors t + 4 v;
   * rows past the weight zero-filled; none for the tail stage, gather_tail reads it) and the warp's int4
   * scales into a slot. */
  __device__ __forceinline__ static void issue (const B &b, uint4 *slot, int st)
  {
    const TcArgs &a = b.a;
    const int col0 = st * TC_STAGE;
    if (col0 + TC_STAGE <= a.K) {
      const int64_t off = (int64_t) col0 * WORDS / 8;
#pragma unroll
      for (int h = 0; h < 2; h++) {
        const int64_t r = b.row_base + b.g + 8 * h;
        const uint8_t *src = a.w + (r < a.rows ? r : 0) * a.row_bytes + off + 16 * b.t;
#pragma unroll
        for (int v = 0; v < WV; v++) {
          uint4 *dst = slot + ((b.wr * 2 + h) * WV + v) * 32 + b.lane;
          if (r < a.rows)
            cp_async_w (dst, src + 64 * v);
          else
            cp_async<16> (dst, a.w, 0);
        }
      }
    }
    if (FMT != PPX_CUDA_W_INT4)
      return;
    float *sdst = reinterpret_cast<float *> (slot + C::SW) + b.row_in_block * CPS1;
#pragma unroll
    for (int k = 0; k < SCOPY; k++) {
      const int e = b.lane + 32 * k;
      if (e < 16 * CPS) {
        const int rr = e / CPS1, c = e % CPS1;
        const int64_t r = b.row_base + rr;
        const int col = col0 + c * 16 * CK;
        const bool ok = r < a.rows && col < a.K;
        const int gi = CK < 8 ? st * CPS + c : col0 / a.group_size;
        cp_async<4> (sdst + e, ok ? a.scales + r * a.n_groups + gi : a.scales, ok ? 4 : 0);
      }
    }
  }

  /* Row m, columns c .. c + 3 of x as convert_x sees them: zeros past K, RMS-normalized (alpha) or gated. */
  __device__ __forceinline__ static float4 x_at (const TcArgs &a, int m, int c, const float *row_inv)
  {
    const float *xp = a.x + (size_t) m * a.ldx;
    float v[4], al[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    if (a.vec_x && c + 3 < a.K) {
      const float4 u = __ldcg (reinterpret_cast<const float4 *> (xp + c));
      v[0] = u.x, v[1] = u.y, v[2] = u.z, v[3] = u.w;
    } else {
#pragma unroll
      for (int j = 0; j < 4; j++)
        v[j] = c + j < a.K ? __ldcg (xp + c + j) : 0.0f;
    }
    if (a.alpha) {
#pragma unroll
      for (int j = 0; j < 4; j++)
        al[j] = c + j < a.K ? __ldg (a.alpha + c + j) : 0.0f;
      const float inv = row_inv[m];
#pragma unroll
      for (int j = 0; j < 4; j++)
        v[j] = v[j] * (al[j] * inv);
    } else if (a.gate) {
#pragma unroll
      for (int j = 0; j < 4; j++)
        al[j] = c + j < a.K ? __ldcg (xp + a.K + c + j) : 0.0f;
#pragma unroll
      for (int j = 0; j < 4; j++)
        v[j] = ppx_silu_gate (v[j], al[j]);
    }
    return make_float4 (v[0], v[1], v[2], v[3]);
  }

  /* The leaf's x as hi/lo records of rows 0 .. mb - 1: record i = ((s * 8 + q) * mb + m) * 4 + t holds row
   * m, columns tc_col (col0, full, q, t) .. + 3 of the leaf's stage s (x_at), split by tc_split_record.
   * Four records a thread at a time, their loads issued together. */
  __device__ __forceinline__ static void stage_x (const B &b, uint4 *xl, int st0, int nstg, const float *row_inv)
  {
    const TcArgs &a = b.a;
    const int mb = b.mb, n = nstg * 8 * mb * 4;
    for (int i0 = b.tid; i0 < n; i0 += 4 * TC_THREADS) {
      float4 v[4];
#pragma unroll
      for (int u = 0; u < 4; u++) {
        const int i = i0 + u * TC_THREADS;
        if (i >= n)
          continue;
        const int t = i & 3, m = (i >> 2) % mb, sq = (i >> 2) / mb, q = sq & 7, s = sq >> 3;
        const int col0 = (st0 + s) * TC_STAGE;
        v[u] = x_at (a, m, tc_col<FMT> (col0, col0 + TC_STAGE <= a.K, q, t), row_inv);
      }
#pragma unroll
      for (int u = 0; u < 4; u++)
        if (i0 + u * TC_THREADS < n)
          xl[i0 + u * TC_THREADS] = tc_split_record (v[u]);
    }
  }

  /* The thread's weight words of a full stage from its slot (the words it copied itself). */
  __device__ __forceinline__ static void load_w (const B &b, const uint4 *slot, uint32_t (&rw)[1][2][WORDS])
  {
#pragma unroll
    for (int h = 0; h < 2; h++)
#pragma unroll
      for (int v = 0; v < WV; v++) {
        const uint4 q = slot[((b.wr * 2 + h) * WV + v) * 32 + b.lane];
        rw[0][h][4 * v] = q.x;
        rw[0][h][4 * v + 1] = q.y;
        rw[0][h][4 * v + 2] = q.z;
        rw[0][h][4 * v + 3] = q.w;
      }
  }

  /* P consecutive stages st .. st + P - 1 (the leaf's s .. s + P - 1, slots rd, rd + 1, ... of a ring of D)
   * of the warp's 16 rows: mma_group's operations for NT = 1, x from the leaf's records (zeros for the rows
   * of the n-tile past mb). The P x NCH chunks run as independent mma chains (each chunk still from zero,
   * k-step by k-step, hi then lo), and are added to acc stage by stage, chunk by chunk, in order: at M <= 8
   * a chunk's 8- or 16-deep mma chain is what a warp waits on (docs/cuda.md), so P stages at once give P
   * times the chains in flight. Full stages only when P > 1 (the tail stage comes alone). */
  template <int P>
  __device__ __forceinline__ static void compute (const B &b, float (&acc)[1][1][4], const uint4 *ring, int rd, int D,
                                                  const uint4 *xl, int st, int s)
  {
    static_assert (P == 1 || NCHUNK == NCH, "P > 1 adds stage p's chunks after stage p - 1's only when a stage's "
                                            "chunks are one group (not int4 g32)");
    const TcArgs &a = b.a;
    uint32_t rw[P][1][2][WORDS];
    const float *ssc[P];
    bool full = true;
#pragma unroll
    for (int p = 0; p < P; p++) {
      const int k = rd + p < D ? rd + p : rd + p - D;
      const uint4 *slot = ring + k * WSLOT;
      ssc[p] = reinterpret_cast<const float *> (slot + C::SW);
      if (P > 1 || (st + 1) * TC_STAGE <= a.K) {
        load_w (b, slot, rw[p]);
      } else {
        full = false;
        b.gather_tail (rw[p], st);
      }
    }
    const int kvalid = full ? 8 : b.KS - st * 8;
    const bool xrow = b.g < b.mb;
    const int xq = b.mb * 4; /* records between k-steps */
    const uint4 *xr = xl + ((size_t) s * 8 * b.mb + (xrow ? b.g : 0)) * 4 + b.t;
#pragma unroll
    for (int cg = 0; cg < NCHUNK / NCH; cg++) {
      float part[P][NCH][4];
#pragma unroll
      for (int p = 0; p < P; p++)
#pragma unroll
        for (int c = 0; c < NCH; c++)
#pragma unroll
          for (int i = 0; i < 4; i++)
            part[p][c][i] = 0.0f;
#pragma unroll
      for (int i = 0; i < CK; i++)
#pragma unroll
        for (int p = 0; p < P; p++)
#pragma unroll
          for (int c = 0; c < NCH; c++) {
            const int q = (cg * NCH + c) * CK + i;
            if (q >= kvalid)
              continue;
            uint32_t af[1][4];
            B::dequant (rw[p], q, af);
            const uint4 xv = xrow ? xr[(p * 8 + q) * xq] : make_uint4 (0u, 0u, 0u, 0u);
            mma_bf16 (part[p][c], af[0], xv.x, xv.y); /* hi */
            mma_bf16 (part[p][c], af[0], xv.z, xv.w); /* lo */
          }
#pragma unroll
      for (int p = 0; p < P; p++)
#pragma unroll
        for (int c = 0; c < NCH; c++) {
          const int ch = cg * NCH + c;
          if (ch * CK >= kvalid)
            continue;
          float s0 = 1.0f, s1 = 1.0f;
          if (FMT == PPX_CUDA_W_INT4) {
            const int lr = b.row_in_block + b.g;
            s0 = ssc[p][lr * CPS1 + ch];
            s1 = ssc[p][(lr + 8) * CPS1 + ch];
          }
#pragma unroll
          for (int i = 0; i < 4; i++) {
            if (FMT == PPX_CUDA_W_INT4)
              acc[0][0][i] = fmaf (i < 2 ? s0 : s1, part[p][c][i], acc[0][0][i]);
            else
              acc[0][0][i] += part[p][c][i];
          }
        }
    }
  }
};

/* y (+)= x W^T for M <= 8 rows of x, one row block (blockIdx.y, 128 weight rows) and one leaf (blockIdx.z).
 * The ring holds weights and scales only, one commit group a stage; each step waits for and multiplies P
 * stages while D - P more are in flight (D >= 2P). The programmatic-dependent-launch calls are
 * tc_linear_kernel's (ppx_pdl_enter first, as main has it). */
template <int FMT, int CK, int P>
__global__ void __launch_bounds__ (TC_THREADS, (TcCfg<FMT, CK, 1>::MINB))
tc_gemv_kernel (TcArgs a)
{
  ppx_pdl_enter (); /* as tc_linear_kernel (main): trigger and wait first */
  using G = TcGemv<FMT, CK>;
  extern __shared__ uint4 smem[];
  __shared__ unsigned ticket;
  __shared__ float row_inv[8];
  __shared__ float red2[2][TC_WARPS];
  const typename G::B b (a);
  const int D = a.depth;
  const int st0 = blockIdx.z * a.leaf_stages, nstg = min (a.leaf_stages, a.n_stages - st0);
  uint4 *xl = smem + D * G::WSLOT;

  for (int d = 0; d < D - P; d++) {
    if (d < nstg)
      G::issue (b, smem + d * G::WSLOT, st0 + d);
    cp_async_commit ();
  }
  ppx_pdl_wait ();
  if (a.alpha)
    b.row_rms (row_inv, red2);
  G::stage_x (b, xl, st0, nstg, row_inv);
  __syncthreads (); /* the leaf's x records are visible; the only block barrier before the epilogue */

  float acc[1][1][4] = {{{0.0f, 0.0f, 0.0f, 0.0f}}};
  /* P stages a step while they are all full; stage jj sits in slot jj % D */
  const int nfull = min (nstg, a.K / TC_STAGE - st0); /* the leaf's full stages */
  int jj = 0, rd = 0;
  if (P > 1)
    for (; jj + P <= nfull; jj += P) {
      cp_async_wait_n (D - 2 * P); /* this thread's copies of stages jj .. jj + P - 1 are done */
      __syncwarp ();               /* and its warp's scale copies visible; the slots of jj - P .. jj - 1 read */
#pragma unroll
      for (int p = 0; p < P; p++) {
        const int sn = jj + D - P + p, k = rd + D - P + p;
        if (sn < nstg)
          G::issue (b, smem + (k >= D ? k - D : k) * G::WSLOT, st0 + sn);
        cp_async_commit ();
      }
      G::template compute<P> (b, acc, smem, rd, D, xl, st0 + jj, jj);
      rd = rd + P >= D ? rd + P - D : rd + P;
    }
  /* the rest one stage a step (the K tail among them); P = 1: all of the leaf */
  for (; jj < nstg; jj++) {
    cp_async_wait_n (P > 1 ? 0 : D - 2);
    __syncwarp ();
    const int sn = jj + D - P, k = rd + D - P;
    if (sn < nstg)
      G::issue (b, smem + (k >= D ? k - D : k) * G::WSLOT, st0 + sn);
    cp_async_commit ();
    G::template compute<1> (b, acc, smem, rd, D, xl, st0 + jj, jj);
    rd = rd + 1 == D ? 0 : rd + 1;
  }
  cp_async_wait<0> ();
  ppx_pdl_trigger ();

  b.store_leaf (acc);
  if (a.S > 1 && b.last_leaf (&ticket))
    b.combine_leaves ();
}

static int tc_gemv_forced = -1; /* ppx_cuda_linear_force_gemv: -1 = the default */

/* PPX_CUDA_LINEAR_GEMV: 1 tc_gemv_kernel at M <= 8, 0 tc_linear_kernel<.., 1> (read once; the results are
 * the same bits either way). */
static int
tc_gemv_on (void)
{
  static const int on = env_int ("PPX_CUDA_LINEAR_GEMV", 0, 1, 1);
  const int f = __atomic_load_n (&tc_gemv_forced, __ATOMIC_RELAXED);
  return f >= 0 ? f : on;
}

extern "C" void
ppx_cuda_linear_force_gemv (int mode)
{
  __atomic_store_n (&tc_gemv_forced, mode < 0 ? -1 : mode > 0 ? 1 : 0, __ATOMIC_RELAXED);
}

template <int FMT, int CK, int P>
static int
tc_gemv_launch_p (TcArgs a, dim3 grid, size_t smem, int per_block, cudaStream_t s)
{
  static unsigned long long attr_set; /* bit dev: the opt-in set to the device's most */
  int dev = 0;
  cudaGetDevice (&dev);
  if (dev < 0 || dev >= 64 || !(attr_set >> dev & 1)) {
    cudaError_t e = cudaFuncSetAttribute (tc_gemv_kernel<FMT, CK, P>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          per_block - 256 > (int) smem ? per_block - 256 : (int) smem);
    if (e != cudaSuccess)
      return (int) e;
    if (dev >= 0 && dev < 64)
      __atomic_or_fetch (&attr_set, 1ull << dev, __ATOMIC_RELAXED);
  }
  ppx_launch<true> (tc_gemv_kernel<FMT, CK, P>, grid, TC_THREADS, smem, s, a);
  return ppx_cuda_launched ();
}

/* Launches tc_gemv_kernel, or returns -1 when the leaf's x and two ring slots do not fit the shared memory a
 * block may have here (the caller takes tc_linear_kernel then). The stages a step (P): PPX_CUDA_GEMV_STAGES
 * (1, 2 or 4; default 2, measured best on an H200), fewer where the ring has fewer than 2P slots, 1 for int4 g32;
 * -1 too for leaves of one stage. The ring: as deep as the shared memory
 * allows, at most PPX_CUDA_GEMV_DEPTH (default 8) for a block alone on its SM, PPX_CUDA_GEMV_DEPTH_SHARED
 * (default 4) where blocks share one, and at least 2P. None of these changes a result. */
template <int FMT, int CK>
static int
tc_gemv_launch (TcArgs a, cudaStream_t s)
{
  using G = TcGemv<FMT, CK>;
  static const int dmax = env_int ("PPX_CUDA_GEMV_DEPTH", 2, TC_DEPTH_MAX, TC_DEPTH_MAX);
  static const int dshared = env_int ("PPX_CUDA_GEMV_DEPTH_SHARED", 2, TC_DEPTH_MAX, 4);
  static const int pwant = env_int ("PPX_CUDA_GEMV_STAGES", 1, 4, 2);
  const size_t row_blocks = ppx_cdiv ((size_t) a.rows, G::C::ROWS);
  if (row_blocks > TC_MAX_COUNTERS || row_blocks > 65535)
    return -1;
  /* leaves of one stage (the depformer's int8 1024 x 1024, 2048 x 1024, 5632 x 1024): no second stage to run
   * beside the first, and the x staging before the loop adds to the leaf's latency (measured 3-18 % slower on
   * an H200): the barrier kernel, the same bits */
  if (a.leaf_stages < 2)
    return -1;
  int per_block, per_sm;
  tc_smem_limits (&per_block, &per_sm);
  const int64_t blocks = (int64_t) row_blocks * a.S, sms = ppx_sm_count ();
  const int64_t per = (blocks + sms - 1) / sms;
  const int resident = per < G::C::MINB ? (int) per : G::C::MINB;
  const int slot = G::WSLOT * (int) sizeof (uint4), static_bytes = 256;
  const int xbytes = a.leaf_stages * a.M * G::XREC_ROW * (int) sizeof (uint4);
  const int b0 = per_block - static_bytes - xbytes, b1 = per_sm / resident - 1024 - static_bytes - xbytes;
  const int dfit = (b0 < b1 ? b0 : b1) / slot;
  const int cap = resident > 1 ? (dshared < dmax ? dshared : dmax) : dmax;
  if (dfit < 2)
    return -1;
  /* int4 g32 (4 chunks a stage in two groups of 2): one stage a step, so that the chunks are added in order
   * (P stages at once would add stage 1's first chunks before stage 0's last: measured, the bits differ) */
  constexpr bool ONE = G::NCHUNK != G::NCH;
  int P = ONE ? 1 : pwant >= 4 ? 4 : pwant >= 2 ? 2 : 1;
  while (P > 1 && dfit < 2 * P)
    P /= 2;
  int d = dfit < cap ? dfit : cap;
  if (d < 2 * P)
    d = 2 * P; /* dfit allows it */
  a.depth = d;
  const size_t smem = (size_t) d * slot + xbytes;
  const dim3 grid (1u, (unsigned) row_blocks, (unsigned) a.S);
  if constexpr (!ONE) {
    if (P == 4)
      return tc_gemv_launch_p<FMT, CK, 4> (a, grid, smem, per_block, s);
    if (P == 2)
      return tc_gemv_launch_p<FMT, CK, 2> (a, grid, smem, per_block, s);
  }
  return tc_gemv_launch_p<FMT, CK, 1> (a, grid, smem, per_block, s);
}

#endif
