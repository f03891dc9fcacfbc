/* CUDA backend: linear layers with f32 weights on the tensor cores (docs/cuda.md, "f32 on the tensor
 * cores"): y[M, rows] (+)= x[M, K] W^T, W and x split into hi + lo (cuda-mma-f32.cuh: tf32x3 by default,
 * or bf16x3), for every M. The entry point that chooses this path is ppx_cuda_linear (cuda-linear.cu).
 *
 * A block owns 16 weight rows (one mma A tile) and 8 NT rows of x (NT n-tiles of 8, NT = 1, 2 or 4 by M);
 * its 8 warps each take a contiguous slice of K's chunks of 16 columns, the same slices for every M (they
 * depend on K only). Every lane streams exactly the operands it multiplies (its 16-byte pieces of two weight
 * rows and of NT rows of x) through its own ring of D chunks in shared memory with cp.async (D - 1 chunks in
 * flight: 7, 5 or 3 by NT, 12 KB a warp), so the main loop has no barrier. A chunk is one mma chain from zero
 * (three mma per k-step) that is then added to the lane's f32 running sums. At the end the 8 warps' sums are
 * added in warp order through shared memory and written to y.
 * So y[m, r] is the same sequence of operations whatever M is and wherever row m sits in the batch: NT and
 * the grid only decide which block computes it (tests/cuda-test-linear.c checks this bit for bit). */
#include "cuda-linear.cuh"
#include "cuda-mma-f32.cuh"

#define F32TC_WARPS 8
#define F32TC_THREADS (F32TC_WARPS * 32)
#define F32TC_CHUNK 16 /* columns per chunk: one group of 16 (tf32: two k-steps, bf16: one) */

struct F32tcArgs {
  const float *w;
  int64_t rows;
  int K;
  const float *x;
  size_t ldx;
  float *y;
  size_t ldy;
  int M, accumulate, vec_x;
  int nchunks, cps, active; /* K's chunks, chunks per warp, warps that have some */
};

/* Shared memory of one configuration: per warp a ring of D slots, a slot holding one chunk's operands as
 * float4 records in the order the lanes read them: the weights [row half 2][lane 32] (lane (g, t) of row
 * half h: row 8h + g, columns 4t..4t+3 of the chunk), then x [n-tile NT][lane 32] (x row 8 nt + g, the same
 * columns). The end-of-kernel sums [warp][NT][4][32] reuse the rings. */
template <int NT> struct F32tcCfg {
  static constexpr int D = NT == 1 ? 8 : NT == 2 ? 6 : 4;
  static constexpr int SW = 2 * 32;
  static constexpr int SLOT = SW + NT * 32;
  static constexpr size_t SMEM = (size_t) F32TC_WARPS * D * SLOT * sizeof (float4);
  static_assert ((size_t) F32TC_WARPS * NT * 4 * 32 * sizeof (float) <= SMEM, "the sums fit in the rings");
};

/* A thread's operands of 16 consecutive columns: a[0..3] = W(row g, columns 4t..4t+3), a[4..7] = W(row g+8,
 * same columns), b[0..3] = x(row g of the n-tile, same columns). The column order inside the group is the
 * mma's business as long as A and B agree: tf32 takes columns 4t, 4t+1 as the slots t, t+4 of a first
 * k-step and 4t+2, 4t+3 as those of a second; bf16 takes 4t..4t+3 as the slots 2t, 2t+1, 2t+8, 2t+9 of one
 * k-step. */
template <int MODE> struct F32tcA {
  uint32_t hi[MODE == PPX_F32_TF32X3 ? 2 : 1][4], lo[MODE == PPX_F32_TF32X3 ? 2 : 1][4];
};

template <int MODE>
__device__ __forceinline__ void
f32tc_split_a (const float (&a)[8], F32tcA<MODE> &s)
{
  if constexpr (MODE == PPX_F32_TF32X3) {
#pragma unroll
    for (int h = 0; h < 2; h++) {
      tf32_split (a[2 * h], s.hi[h][0], s.lo[h][0]);         /* (g, slot t) */
      tf32_split (a[4 + 2 * h], s.hi[h][1], s.lo[h][1]);     /* (g + 8, slot t) */
      tf32_split (a[2 * h + 1], s.hi[h][2], s.lo[h][2]);     /* (g, slot t + 4) */
      tf32_split (a[4 + 2 * h + 1], s.hi[h][3], s.lo[h][3]); /* (g + 8, slot t + 4) */
    }
  } else {
    bf16_split2 (a[0], a[1], s.hi[0][0], s.lo[0][0]); /* (g, slots 2t, 2t+1) */
    bf16_split2 (a[4], a[5], s.hi[0][1], s.lo[0][1]); /* (g + 8, 2t, 2t+1) */
    bf16_split2 (a[2], a[3], s.hi[0][2], s.lo[0][2]); /* (g, 2t+8, 2t+9) */
    bf16_split2 (a[6], a[7], s.hi[0][3], s.lo[0][3]); /* (g + 8, 2t+8, 2t+9) */
  }
}

/* d += A B over the group's 16 columns */
template <int MODE>
__device__ __forceinline__ void
f32tc_group (float (&d)[4], const F32tcA<MODE> &a, float4 xv)
{
  if constexpr (MODE == PPX_F32_TF32X3) {
    uint32_t bh[2], bl[2];
    tf32_split (xv.x, bh[0], bl[0]);
    tf32_split (xv.y, bh[1], bl[1]);
    mma_tf32x3 (d, a.hi[0], a.lo[0], bh, bl);
    tf32_split (xv.z, bh[0], bl[0]);
    tf32_split (xv.w, bh[1], bl[1]);
    mma_tf32x3 (d, a.hi[1], a.lo[1], bh, bl);
  } else {
    uint32_t bh[2], bl[2];
    bf16_split2 (xv.x, xv.y, bh[0], bl[0]);
    bf16_split2 (xv.z, xv.w, bh[1], bl[1]);
    mma_bf16x3 (d, a.hi[0], a.lo[0], bh, bl);
  }
}

/* This lane's copies of chunk c into a slot: its weight pieces of rows r0 + g and r0 + g + 8 and its x
 * pieces of rows m0 + 8 nt + g (zeros past rows, M and K; K % 4 == 0, so a piece is all in or all out). */
template <int NT>
__device__ __forceinline__ void
f32tc_issue (const F32tcArgs &a, float4 *slot, int64_t r0, int m0, int c, int lane)
{
  using C = F32tcCfg<NT>;
  const int g = lane >> 2, t = lane & 3;
  const int col = c * F32TC_CHUNK + 4 * t;
  const bool in_k = col < a.K;
#pragma unroll
  for (int half = 0; half < 2; half++) {
    const int64_t r = r0 + g + 8 * half;
    const bool ok = in_k && r < a.rows;
    mf_cp16 (&slot[half * 32 + lane], ok ? a.w + r * a.K + col : a.w, ok ? 16 : 0);
  }
#pragma unroll
  for (int nt = 0; nt < NT; nt++) {
    const int m = m0 + 8 * nt + g;
    const bool ok = in_k && m < a.M;
    const float *src = ok ? a.x + (size_t) m * a.ldx + col : a.x;
    float4 *dst = &slot[C::SW + nt * 32 + lane];
    if (a.vec_x) {
      mf_cp16 (dst, src, ok ? 16 : 0);
    } else {
#pragma unroll
      for (int e = 0; e < 4; e++)
        mf_cp4 (reinterpret_cast<float *> (dst) + e, ok ? src + e : a.x, ok ? 4 : 0);
    }
  }
}

/* acc += one chunk: a chain of mma from zero over its 16 columns, then added to the running sums */
template <int MODE, int NT>
__device__ __forceinline__ void
f32tc_chunk (const float4 *slot, int lane, float (&acc)[NT][4])
{
  using C = F32tcCfg<NT>;
  const float4 w0 = slot[lane], w1 = slot[32 + lane];
  const float av[8] = {w0.x, w0.y, w0.z, w0.w, w1.x, w1.y, w1.z, w1.w};
  F32tcA<MODE> as;
  f32tc_split_a<MODE> (av, as);
#pragma unroll
  for (int nt = 0; nt < NT; nt++) {
    float p[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    f32tc_group<MODE> (p, as, slot[C::SW + nt * 32 + lane]);
#pragma unroll
    for (int i = 0; i < 4; i++)
      acc[nt][i] += p[i];
  }
}

template <int MODE, int NT>
__global__ void __launch_bounds__ (F32TC_THREADS, 2)
f32tc_kernel (F32tcArgs a)
{
  using C = F32tcCfg<NT>;
  extern __shared__ float4 f32tc_smem[];
  ppx_pdl_enter ();
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t r0 = (int64_t) blockIdx.x * 16;
  const int m0 = blockIdx.y * 8 * NT;
  float4 *ring = f32tc_smem + (size_t) warp * C::D * C::SLOT;
  const int c0 = warp * a.cps, n = max (0, min (a.cps, a.nchunks - c0));
  float acc[NT][4];
#pragma unroll
  for (int nt = 0; nt < NT; nt++)
#pragma unroll
    for (int i = 0; i < 4; i++)
      acc[nt][i] = 0.0f;
#pragma unroll
  for (int d = 0; d < C::D - 1; d++) {
    if (d < n)
      f32tc_issue<NT> (a, ring + d * C::SLOT, r0, m0, c0 + d, lane);
    mf_commit ();
  }
  /* chunk j + D - 1 goes into the slot of chunk j - 1 (read in the previous iteration), then chunk j is
   * waited for (D - 1 groups may stay pending) and computed */
  for (int j = 0; j < n; j++) {
    if (j + C::D - 1 < n)
      f32tc_issue<NT> (a, ring + ((j + C::D - 1) % C::D) * C::SLOT, r0, m0, c0 + j + C::D - 1, lane);
    mf_commit ();
    mf_wait<C::D - 1> ();
    f32tc_chunk<MODE, NT> (ring + (j % C::D) * C::SLOT, lane, acc);
  }
  mf_wait<0> ();
  __syncthreads (); /* every warp is done with its ring */
  float *red = reinterpret_cast<float *> (f32tc_smem);
#pragma unroll
  for (int nt = 0; nt < NT; nt++)
#pragma unroll
    for (int i = 0; i < 4; i++)
      red[((warp * NT + nt) * 4 + i) * 32 + lane] = acc[nt][i];
  __syncthreads ();
  /* output (rho, c): weight row r0 + rho, x row m0 + c; it sits in n-tile c / 8 at lane 4 (rho % 8) +
   * (c % 8) / 2, accumulator 2 (rho / 8) + c % 2 */
  for (int o = threadIdx.x; o < 16 * 8 * NT; o += F32TC_THREADS) {
    const int rho = o % 16, c = o / 16;
    const int64_t r = r0 + rho;
    const int m = m0 + c;
    if (r >= a.rows || m >= a.M)
      continue;
    const int nt = c / 8, cc = c % 8;
    const int at = (2 * (rho / 8) + (cc & 1)) * 32 + 4 * (rho % 8) + cc / 2;
    float s = red[(0 * NT + nt) * 128 + at];
    for (int w = 1; w < a.active; w++)
      s += red[(w * NT + nt) * 128 + at];
    float *yp = a.y + (size_t) m * a.ldy + r;
    *yp = a.accumulate ? *yp + s : s;
  }
}

template <int MODE, int NT>
static int
f32tc_launch (const F32tcArgs &a, cudaStream_t s)
{
  using C = F32tcCfg<NT>;
  static unsigned long long attr_set; /* bit d: done on device d */
  int dev = 0;
  cudaGetDevice (&dev);
  if (dev < 0 || dev >= 64 || !(attr_set >> dev & 1)) {
    cudaError_t e = cudaFuncSetAttribute (f32tc_kernel<MODE, NT>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          (int) C::SMEM);
    if (e != cudaSuccess)
      return (int) e;
    if (dev >= 0 && dev < 64)
      __atomic_or_fetch (&attr_set, 1ull << dev, __ATOMIC_RELAXED);
  }
  const dim3 grid (ppx_cdiv ((size_t) a.rows, 16), ppx_cdiv ((size_t) a.M, 8 * NT));
  ppx_launch (f32tc_kernel<MODE, NT>, grid, F32TC_THREADS, C::SMEM, s, a);
  return ppx_cuda_launched ();
}

int
ppx_linear_f32tc_eligible (const PpxCudaWeight *w)
{
  return ppx_f32_mma_mode () >= 0 && w->format == PPX_CUDA_W_F32 && w->rows > 0 && w->cols > 0 &&
         w->cols % 4 == 0 && w->cols < ((int64_t) 1 << 30) && ((uintptr_t) w->data & 15) == 0;
}

template <int MODE>
static int
f32tc_run (const F32tcArgs &a, cudaStream_t s)
{
  if (a.M <= 8)
    return f32tc_launch<MODE, 1> (a, s);
  if (a.M <= 16)
    return f32tc_launch<MODE, 2> (a, s);
  return f32tc_launch<MODE, 4> (a, s);
}

int
ppx_linear_f32tc (const PpxCudaWeight *w, const float *x, size_t ldx, float *y, size_t ldy, int M, int accumulate,
                  cudaStream_t s)
{
  F32tcArgs a = {};
  a.w = (const float *) w->data;
  a.rows = w->rows;
  a.K = (int) w->cols;
  a.x = x;
  a.ldx = ldx;
  a.y = y;
  a.ldy = ldy;
  a.accumulate = accumulate;
  a.vec_x = (ldx % 4) == 0 && ((uintptr_t) x & 15) == 0;
  a.nchunks = (a.K + F32TC_CHUNK - 1) / F32TC_CHUNK;
  a.cps = (a.nchunks + F32TC_WARPS - 1) / F32TC_WARPS;
  a.active = (a.nchunks + a.cps - 1) / a.cps;
  /* launches of at most 65535 y-blocks of 32 rows */
  const int mmax = 65535 * 32;
  for (int m0 = 0; m0 < M; m0 += mmax) {
    a.M = M - m0 < mmax ? M - m0 : mmax;
    a.x = x + (size_t) m0 * ldx;
    a.y = y + (size_t) m0 * ldy;
    const int e = ppx_f32_mma_mode () == PPX_F32_BF16X3 ? f32tc_run<PPX_F32_BF16X3> (a, s)
                                                         : f32tc_run<PPX_F32_TF32X3> (a, s);
    if (e)
      return e;
  }
  return 0;
}
