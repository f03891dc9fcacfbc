/* CUDA backend: Mimi's convolutions of groups = 1 as implicit GEMMs on the tensor cores (docs/cuda.md,
 * "Convolutions"): the GEMM of cuda-conv-gemm.cu (rows, cols, r = (channel, tap), leaves, stages of at most
 * 32 r, the same staging code: cuda-conv-gemm.cuh), with each stage multiplied by mma.sync on f32 operands
 * split into hi + lo (cuda-mma-f32.cuh: tf32x3 by default, or bf16x3).
 *
 * A block of 4, 8 or 16 warps owns BM rows x BN cols (WM x WN warps, each MT m-tiles of 16 rows x NTL n-tiles
 * of 8 cols: 32 x 16 mostly, so that a thread's sums, the stage's chunk sums, the fragments and the staging
 * registers fit in 128 registers). Weights go to shared memory by cp.async (a ring of 3 stages), the gathered input through
 * registers (activation applied) into a double buffer, one barrier per stage (conv_stages_async). Layouts:
 * the transposed conv's A is [r][row] (its loads run along the rows), conv1d's A [row][r] (its loads run
 * along r), B [r][col]; the pitches make every warp's fragment loads and the copies conflict-free.
 *
 * Numerics and batch independence. A stage's 32 r (zero-padded past the stage's channels and taps, the
 * same for every M: the stages depend on the shape only) are one mma chain from zero over 4 tf32 k-steps
 * (2 for bf16) of three mma each, in r order; the chain is then added to the output's f32 leaf sum, so
 * an output's leaf sum is sum over stages of (chunk) in stage order. Leaves and their combine are as on the
 * CUDA cores. The tile configuration changes only which warp computes an output, never its operations, so
 * y[m, co, t] does not depend on M or on where row m sits. */
#include "cuda-conv-gemm.cuh"
#include "cuda-mma-f32.cuh"

template <bool TR_, int WM_, int WN_, int MT_, int NTL_, int MODE_>
struct ConvMmaShape {
  static constexpr bool TR = TR_, PIPE = true;
  static constexpr int MODE = MODE_, WM = WM_, WN = WN_, MT = MT_, NTL = NTL_;
  static constexpr int NT = WM * WN * 32, BM = WM * MT * 16, BN = WN * NTL * 8, CG = 1;
  static constexpr bool TF = MODE == PPX_F32_TF32X3;
  /* fragment loads conflict-free: tf32 reads r = t (+ const) of rows / cols g, bf16 r = 2t (+ const), so
   * the [r][.] pitches are 8 or 24 (mod 32) for tf32 and 4 or 12 (mod 16) for bf16; conv1d's [row][r] A
   * pitch 36 (tf32: banks 4g + t) or 40 (bf16: 8-byte loads of r = 2t, 2t + 1) */
  static constexpr int BMP = BM + (TF ? 8 : 4);
  static constexpr int BNP = BN + (BN % 16 == 0 ? (TF ? 8 : 4) : (TF ? 16 : 4));
  static constexpr int ARS = TF ? 36 : 40;
  static constexpr int NSA = 3;
  static constexpr int ASLOT = TR ? CONV_BK * BMP : BM * ARS;
  static constexpr int AJ = (CONV_BK * BM + NT - 1) / NT;
  static constexpr int BJ = (CONV_BK * BN + NT - 1) / NT;
  static constexpr size_t SMEM = (size_t) (NSA * ASLOT + 2 * CONV_BK * BNP) * sizeof (float);
  static __device__ __forceinline__ int a_at (int r, int row) { return TR ? r * BMP + row : row * ARS + r; }
  static_assert (NT % BN == 0 && (!TR || NT % BM == 0), "the loaders' thread layout");
};

/* fn (mi, ni, i) for every float of a warp's MT x NTL tiles of m16n8 accumulators (4 a thread each), unrolled. */
template <int MT, int NTL, class F>
__device__ __forceinline__ void
frag_each (F fn)
{
#pragma unroll
  for (int mi = 0; mi < MT; mi++)
#pragma unroll
    for (int ni = 0; ni < NTL; ni++)
#pragma unroll
      for (int i = 0; i < 4; i++)
        fn (mi, ni, i);
}

/* One stage into the warp's sums: p = the stage's products by mma from zero, then acc += p. */
template <class S>
__device__ __forceinline__ void
conv_mma_stage (const float *A, const float *B, int wm, int wn, int lane, float (&acc)[S::MT][S::NTL][4])
{
  constexpr int MT = S::MT, NTL = S::NTL, BNP = S::BNP;
  const int g = lane >> 2, t = lane & 3;
  float p[MT][NTL][4];
  frag_each<MT, NTL> ([&] (int mi, int ni, int i) { p[mi][ni][i] = 0.0f; });
  if constexpr (S::TF) {
#pragma unroll
    for (int ks = 0; ks < CONV_BK / 8; ks++) {
      const int k0 = 8 * ks + t, k1 = k0 + 4;
      uint32_t ah[MT][4], al[MT][4];
#pragma unroll
      for (int mi = 0; mi < MT; mi++) {
        const int ra = (wm * MT + mi) * 16 + g;
        tf32_split (A[S::a_at (k0, ra)], ah[mi][0], al[mi][0]);
        tf32_split (A[S::a_at (k0, ra + 8)], ah[mi][1], al[mi][1]);
        tf32_split (A[S::a_at (k1, ra)], ah[mi][2], al[mi][2]);
        tf32_split (A[S::a_at (k1, ra + 8)], ah[mi][3], al[mi][3]);
      }
#pragma unroll
      for (int ni = 0; ni < NTL; ni++) {
        const int cb = (wn * NTL + ni) * 8 + g;
        uint32_t bh[2], bl[2];
        tf32_split (B[k0 * BNP + cb], bh[0], bl[0]);
        tf32_split (B[k1 * BNP + cb], bh[1], bl[1]);
#pragma unroll
        for (int mi = 0; mi < MT; mi++)
          mma_tf32x3 (p[mi][ni], ah[mi], al[mi], bh, bl);
      }
    }
  } else {
#pragma unroll
    for (int ks = 0; ks < CONV_BK / 16; ks++) {
      const int k = 16 * ks + 2 * t;
      uint32_t ah[MT][4], al[MT][4];
#pragma unroll
      for (int mi = 0; mi < MT; mi++) {
        const int ra = (wm * MT + mi) * 16 + g;
#pragma unroll
        for (int q = 0; q < 4; q++) { /* (ra, k), (ra + 8, k), (ra, k + 8), (ra + 8, k + 8), each with k + 1 */
          const int row = ra + 8 * (q & 1), kk = k + 8 * (q >> 1);
          float2 v;
          if constexpr (S::TR)
            v = make_float2 (A[S::a_at (kk, row)], A[S::a_at (kk + 1, row)]);
          else
            v = *reinterpret_cast<const float2 *> (A + S::a_at (kk, row));
          bf16_split2 (v.x, v.y, ah[mi][q], al[mi][q]);
        }
      }
#pragma unroll
      for (int ni = 0; ni < NTL; ni++) {
        const int cb = (wn * NTL + ni) * 8 + g;
        uint32_t bh[2], bl[2];
        bf16_split2 (B[k * BNP + cb], B[(k + 1) * BNP + cb], bh[0], bl[0]);
        bf16_split2 (B[(k + 8) * BNP + cb], B[(k + 9) * BNP + cb], bh[1], bl[1]);
#pragma unroll
        for (int mi = 0; mi < MT; mi++)
          mma_bf16x3 (p[mi][ni], ah[mi], al[mi], bh, bl);
      }
    }
  }
  frag_each<MT, NTL> ([&] (int mi, int ni, int i) { acc[mi][ni][i] += p[mi][ni][i]; });
}

template <bool TR, int WM, int WN, int MT, int NTL, int MODE>
__global__ void __launch_bounds__ (WM * WN * 32, 512 / (WM * WN * 32)) /* at most 128 registers */
conv_mma_kernel (const ConvArgs a)
{
  using S = ConvMmaShape<TR, WM, WN, MT, NTL, MODE>;
  ppx_pdl_enter ();
  extern __shared__ float conv_mma_smem[];
  float *const As = conv_mma_smem;                 /* [NSA][ASLOT] */
  float *const Bs = conv_mma_smem + S::NSA * S::ASLOT; /* [2][CONV_BK][BNP] */
  const ConvThread g = conv_thread<S> (a, threadIdx.x);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, wm = warp % WM, wn = warp / WM;
  float acc[MT][NTL][4];
  frag_each<MT, NTL> ([&] (int mi, int ni, int i) { acc[mi][ni][i] = 0.0f; });
  conv_stages_async<S> (a, g, As, Bs,
                        [&] (const float *Ab, const float *Bb) { conv_mma_stage<S> (Ab, Bb, wm, wn, lane, acc); });
  /* accumulator i of tile (mi, ni): row g + 8 (i / 2), col 2t + i % 2; each col's (m, c) found once */
  const int gq = lane >> 2, tq = lane & 3;
#pragma unroll
  for (int ni = 0; ni < NTL; ni++)
#pragma unroll
    for (int e = 0; e < 2; e++) {
      const long n = g.n0 + (wn * NTL + ni) * 8 + 2 * tq + e;
      if (n >= a.N)
        continue;
      int m, c;
      conv_col_mc (a, n, m, c);
#pragma unroll
      for (int mi = 0; mi < MT; mi++)
#pragma unroll
        for (int hh = 0; hh < 2; hh++) {
          const int row = g.row0 + (wm * MT + mi) * 16 + gq + 8 * hh;
          if (row < a.rows)
            conv_store_mc (a, g.leaf, TR, row, m, c, acc[mi][ni][2 * hh + e]);
        }
    }
}

template <bool TR, int WM, int WN, int MT, int NTL, int MODE>
static int
conv_mma_variant (const ConvArgs &a, cudaStream_t s)
{
  using S = ConvMmaShape<TR, WM, WN, MT, NTL, MODE>;
  if (S::SMEM > 48 * 1024) {
    static unsigned long long attr_set; /* bit d: done on device d */
    int dev = 0;
    cudaGetDevice (&dev);
    if (dev < 0 || dev >= 64 || !(attr_set >> dev & 1)) {
      cudaError_t e = cudaFuncSetAttribute (conv_mma_kernel<TR, WM, WN, MT, NTL, MODE>,
                                            cudaFuncAttributeMaxDynamicSharedMemorySize, (int) S::SMEM);
      if (e != cudaSuccess)
        return (int) e;
      if (dev >= 0 && dev < 64)
        __atomic_or_fetch (&attr_set, 1ull << dev, __ATOMIC_RELAXED);
    }
  }
  dim3 grid ((unsigned) conv_cdiv (a.N, S::BN), (unsigned) conv_cdiv (a.rows, S::BM), (unsigned) a.split);
  ppx_launch (conv_mma_kernel<TR, WM, WN, MT, NTL, MODE>, grid, S::NT, S::SMEM, s, a);
  return ppx_cuda_launched ();
}

/* The tensor-core tiles, in the order of conv_cfgs' CONV_MMA entries (cuda-conv.cu). */
template <bool TR, int MODE>
static int
conv_mma_cfg (int cfg, const ConvArgs &a, cudaStream_t s)
{
  switch (cfg) {
    case 0: return conv_mma_variant<TR, 2, 4, 2, 2, MODE> (a, s); /*  64 x 64, 8 warps of 32 x 16 */
    case 1: return conv_mma_variant<TR, 4, 4, 2, 2, MODE> (a, s); /* 128 x 64, 16 warps */
    case 2: return conv_mma_variant<TR, 2, 8, 2, 2, MODE> (a, s); /*  64 x 128, 16 warps */
    case 3: return conv_mma_variant<TR, 4, 2, 2, 2, MODE> (a, s); /* 128 x 32, 8 warps */
    case 4: return conv_mma_variant<TR, 1, 8, 2, 2, MODE> (a, s); /*  32 x 128, 8 warps */
    case 5: return conv_mma_variant<TR, 2, 2, 2, 2, MODE> (a, s); /*  64 x 32, 4 warps */
    case 6: return conv_mma_variant<TR, 4, 1, 2, 2, MODE> (a, s); /* 128 x 16, 4 warps */
    case 7: return conv_mma_variant<TR, 4, 1, 2, 1, MODE> (a, s); /* 128 x 8, 4 warps of 32 x 8 */
    case 8: return conv_mma_variant<TR, 1, 4, 1, 2, MODE> (a, s); /*  16 x 64, 4 warps of 16 x 16 (one channel) */
    default: return (int) cudaErrorInvalidValue;
  }
}

int
ppx_conv_mma_launch (bool tr, int cfg, const ConvArgs &a, cudaStream_t s)
{
  const bool bf = ppx_f32_mma_mode () == PPX_F32_BF16X3;
  if (tr)
    return bf ? conv_mma_cfg<true, PPX_F32_BF16X3> (cfg, a, s) : conv_mma_cfg<true, PPX_F32_TF32X3> (cfg, a, s);
  return bf ? conv_mma_cfg<false, PPX_F32_BF16X3> (cfg, a, s) : conv_mma_cfg<false, PPX_F32_TF32X3> (cfg, a, s);
}

size_t
ppx_conv_mma_smem (int bm, int bn, int tr)
{
  /* ConvMmaShape::SMEM of this tile in the current mode (for the planner's occupancy) */
  const bool tf = ppx_f32_mma_mode () != PPX_F32_BF16X3;
  const int bmp = bm + (tf ? 8 : 4), bnp = bn + (bn % 16 == 0 ? (tf ? 8 : 4) : (tf ? 16 : 4));
  const int aslot = tr ? CONV_BK * bmp : bm * (tf ? 36 : 40);
  return (size_t) (3 * aslot + 2 * CONV_BK * bnp) * sizeof (float);
}
