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
#include "cuda-linear-mma.cuh"

#include <stdlib.h>

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

extern "C" size_t
ppx_cuda_linear_workspace_bytes (const PpxCudaWeight *w, int M)
{
  if (M <= 0 || w->rows <= 0 || !ppx_linear_mma_eligible (w))
    return 0;
  int nst, leaf, S;
  tc_plan (w, &nst, &leaf, &S);
  if (S <= 1)
    return 0;
  return TC_MAX_COUNTERS * sizeof (unsigned) + (size_t) S * TC_MMAX * (size_t) w->rows * sizeof (float);
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

int
ppx_linear_mma (const PpxCudaWeight *w, int ck, const float *x, size_t ldx, float *y, size_t ldy, int M, int accumulate,
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
