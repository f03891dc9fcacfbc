/* CUDA backend: Mimi's convolutions of groups = 1 as implicit GEMMs on the CUDA cores (f32 fmaf chains), and the
 * combine launches of both GEMM kernels; the same GEMM on the tensor cores (the default) is cuda-conv-mma.cu,
 * the staging code both use cuda-conv-gemm.cuh; the planner that picks the kernel, the tiles and the leaves,
 * the direct kernels for the other shapes and the entry points are in cuda-conv.cu.
 *
 * Both convolutions of groups = 1 are out[row, col] = sum over r of A[row, r] * B[r, col]:
 * - conv1d: row = co, col = (m, t) with t < Lout, r = (ci, k); A = w[co, ci, k] (rows contiguous); B = the
 *   virtual input concat(prev, x)[m, ci, t*stride + k*dilation], gathered when it is staged (no im2col buffer);
 * - conv_transpose1d: row = (co, p) with p < S (the output phase), col = (m, q), r = (ci, i) with i < NT =
 *   ceil(K/S); A = w[ci, co, p + i*S] (0 past K); B = x[m, ci, q - i] (0 outside [0, T)); the output is
 *   z[m, co, q*S + p] for q*S + p < Lz. Every output position is one (row, col), no overlap-add.
 *
 * A block owns BM rows x BN cols (threads RG x CG, each TM rows x TN cols) and one leaf of the input
 * channels; it walks its leaf in stages of CK channels (CK * KR <= 32 reduction steps, KR = K or NT): A and
 * B tiles are staged in shared memory (coalesced global loads, A transposed to [r][row]), double-buffered
 * with the next stage's loads held in registers while the current stage is computed.
 *
 * Numerics and batch independence. Each output's leaf sum is one chain of fmaf over r = (ci, tap) in
 * increasing order from 0.0f (zero terms where a stage runs past the leaf or a tap past K: adding +0 to
 * a partial sum changes nothing but the sign of a zero). The leaves (split) and the channels per leaf
 * depend on the layer's shape and the GPU's SM count only, never on M, and the tile configuration does not
 * change the chain, so y[m, co, t] is the same float operations whatever M is and wherever row m sits.
 * One leaf: y = bias + sum (conv1d), z = sum (+ partial) (+ bias) (transposed, the CPU's steps). Several:
 * each leaf's sums go to scratch, and a combine launch adds them in leaf order: bias + l0 + l1 + ... (conv1d),
 * (l0 + l1 + ...) (+ partial) (+ bias) (transposed). No atomics. */
#include "cuda-conv-gemm.cuh"

#include <stdlib.h>

/* A (weight) stages in shared memory: 2 (double buffer, loads through registers) or, with PIPE, a ring of
 * 3-4 filled by cp.async, so 2-3 stages of weights are in flight while one is computed. */
static __host__ __device__ constexpr int
conv_a_stages (bool pipe, int BM)
{
  return !pipe ? 2 : BM >= 256 ? 3 : 4;
}

static __host__ __device__ constexpr size_t
conv_smem_bytes (bool pipe, int BM, int BN)
{
  return (size_t) CONV_BK * (conv_a_stages (pipe, BM) * (BM + 4) + 2 * (BN + 4)) * sizeof (float);
}

/* The tile shape of one conv_gemm_kernel instance and the sizes that follow from it. */
template <bool TR_, int TM_, int TN_, int RG_, int CG_, bool PIPE_>
struct ConvShape {
  static constexpr bool TR = TR_, PIPE = PIPE_;
  static constexpr int TM = TM_, TN = TN_, RG = RG_, CG = CG_;
  static constexpr int NT = RG * CG, BM = RG * TM, BN = CG * TN;
  static constexpr int BMP = BM + 4, BNP = BN + 4;
  static constexpr int NSA = conv_a_stages (PIPE, BM);
  static constexpr int AJ = (CONV_BK * BM + NT - 1) / NT; /* A elements a thread loads per stage */
  static constexpr int BJ = (CONV_BK * BN + NT - 1) / NT; /* B elements */
  static constexpr int ASLOT = CONV_BK * BMP;              /* A is [r][row] */
  static __device__ __forceinline__ int a_at (int r, int row) { return r * BMP + row; }
  static_assert (NT % 32 == 0 && NT % BM == 0 && NT % BN == 0, "tile shape");
};

/* One stage: acc += A^T B over its BK reduction steps, in order (one fmaf chain per output). */
template <class S>
__device__ __forceinline__ void
conv_compute_stage (const ConvThread &g, const float *Ab, const float *Bb, float (&acc)[S::TM][S::TN])
{
  constexpr int TM = S::TM, TN = S::TN, BMP = S::BMP, BNP = S::BNP;
  const float *A = Ab + g.rg * TM, *B = Bb + g.cg * TN;
#pragma unroll 2
  for (int r = 0; r < g.BK; r++) {
    float av[TM], bv[TN];
    if constexpr (TM == 4) {
      const float4 t = *reinterpret_cast<const float4 *> (A + r * BMP);
      av[0] = t.x;
      av[1] = t.y;
      av[2] = t.z;
      av[3] = t.w;
    } else {
#pragma unroll
      for (int i = 0; i < TM; i++)
        av[i] = A[r * BMP + i];
    }
    if constexpr (TN % 4 == 0) {
#pragma unroll
      for (int j = 0; j < TN; j += 4) {
        const float4 t = *reinterpret_cast<const float4 *> (B + r * BNP + j);
        bv[j] = t.x;
        bv[j + 1] = t.y;
        bv[j + 2] = t.z;
        bv[j + 3] = t.w;
      }
    } else if constexpr (TN == 2) {
      const float2 t = *reinterpret_cast<const float2 *> (B + r * BNP);
      bv[0] = t.x;
      bv[1] = t.y;
    } else {
#pragma unroll
      for (int j = 0; j < TN; j++)
        bv[j] = B[r * BNP + j];
    }
#pragma unroll
    for (int i = 0; i < TM; i++)
#pragma unroll
      for (int j = 0; j < TN; j++)
        acc[i][j] = fmaf (av[i], bv[j], acc[i][j]);
  }
}

/* The stages without PIPE: A and B double-buffered in shared memory, the next stage's loads held in registers
 * while the current stage is computed; one barrier per stage. */
template <class S>
__device__ __forceinline__ void
conv_stages_registers (const ConvArgs &a, const ConvThread &g, float *As, float *Bs, float (&acc)[S::TM][S::TN])
{
  constexpr int BMP = S::BMP, BNP = S::BNP;
  float ra[S::AJ], rb[S::BJ];
  conv_fetch_a<S> (a, g, 0, NULL, ra);
  unsigned from_x = conv_load_b<S> (a, g, 0, rb);
  conv_store_a<S> (g, ra, As);
  conv_store_b<S> (a, g, rb, from_x, Bs);
  __syncthreads ();
  for (int st = 0; st < g.nst; st++) {
    const int buf = st & 1;
    if (st + 1 < g.nst) {
      conv_fetch_a<S> (a, g, st + 1, NULL, ra);
      from_x = conv_load_b<S> (a, g, st + 1, rb);
    }
    conv_compute_stage<S> (g, As + buf * CONV_BK * BMP, Bs + buf * CONV_BK * BNP, acc);
    if (st + 1 < g.nst) {
      conv_store_a<S> (g, ra, As + (buf ^ 1) * CONV_BK * BMP);
      conv_store_b<S> (a, g, rb, from_x, Bs + (buf ^ 1) * CONV_BK * BNP);
    }
    __syncthreads ();
  }
}

/* Writes this thread's TM x TN sums (conv_store_out). */
template <class S>
__device__ __forceinline__ void
conv_store_tile (const ConvArgs &a, const ConvThread &g, const float (&acc)[S::TM][S::TN])
{
#pragma unroll
  for (int i = 0; i < S::TM; i++)
#pragma unroll
    for (int j = 0; j < S::TN; j++)
      conv_store_out (a, g.leaf, S::TR, g.row0 + g.rg * S::TM + i, g.n0 + g.cg * S::TN + j, acc[i][j]);
}

/* The implicit GEMM: one block's BM x BN outputs over one leaf of the input channels (the file's comment). */
template <bool TR, int TM, int TN, int RG, int CG, bool PIPE>
__global__ void __launch_bounds__ (RG * CG, RG * CG >= 256 ? 2 : 4)
conv_gemm_kernel (const ConvArgs a)
{
  using S = ConvShape<TR, TM, TN, RG, CG, PIPE>;
  ppx_pdl_enter ();
  extern __shared__ float smem[];
  float *const As = smem;                             /* [NSA][CONV_BK][BMP] */
  float *const Bs = smem + S::NSA * CONV_BK * S::BMP; /* [2][CONV_BK][BNP] */
  const ConvThread g = conv_thread<S> (a, threadIdx.x);
  float acc[TM][TN];
#pragma unroll
  for (int i = 0; i < TM; i++)
#pragma unroll
    for (int j = 0; j < TN; j++)
      acc[i][j] = 0.0f;
  if constexpr (PIPE)
    conv_stages_async<S> (a, g, As, Bs, [&] (const float *Ab, const float *Bb) { conv_compute_stage<S> (g, Ab, Bb, acc); });
  else
    conv_stages_registers<S> (a, g, As, Bs, acc);
  conv_store_tile<S> (a, g, acc);
}

/* The sum of planned leaf l's launch leaves (lst of them; 1 but with one-stage pieces) at offset o of each, in
 * order: the chain the leaf itself would have made. */
__device__ __forceinline__ float
conv_leaf_sum (const float *__restrict__ ws, size_t stride, size_t o, int l0, int split, int lst)
{
  float v = ws[(size_t) l0 * stride + o];
  for (int l = l0 + 1; l < l0 + lst && l < split; l++)
    v += ws[(size_t) l * stride + o];
  return v;
}

/* conv1d with several leaves: y = (res +) (bias + leaf 0 + leaf 1 + ...) (one thread per output, leaves in
 * order; one-stage pieces: the one-leaf kernel's bias + leaf, the leaf summed first); the same launch moves the
 * history (threads < M*Cin, one channel each, as conv1d_history_kernel): the main kernel that read it has
 * finished. */
__global__ void
conv1d_combine_kernel (const float *__restrict__ ws, const float *__restrict__ bias, const float *res, float *y,
                       const float *__restrict__ x, float *__restrict__ prev, int Cout, int Lout, size_t nout,
                       int split, int lst, size_t nch, int Lin, int P, int act)
{
  ppx_pdl_enter ();
  const size_t n = nout > nch ? nout : nch;
  for (size_t idx = blockIdx.x * (size_t) blockDim.x + threadIdx.x; idx < n; idx += (size_t) gridDim.x * blockDim.x) {
    if (idx < nout) {
      const int co = (int) ((idx / Lout) % Cout);
      float s = bias ? bias[co] : 0.0f;
      if (lst == 1) /* the leaves themselves: this loop as it was (the nested one measured slower, 32 leaves) */
        for (int l = 0; l < split; l++)
          s += ws[(size_t) l * nout + idx];
      else
        for (int l = 0; l < split; l += lst)
          s += conv_leaf_sum (ws, nout, idx, l, split, lst);
      y[idx] = res ? res[idx] + s : s;
    }
    if (idx < nch) {
      float *pr = prev + idx * P;
      const float *xr = x + idx * Lin;
      for (int i = 0; i < P; i++) {
        const int src = Lin + i;
        pr[i] = src < P ? pr[src] : ppx_act_apply (act, xr[src - P]);
      }
    }
  }
}

/* leaf 0 + leaf 1 + ... at offset j (transposed: no bias first), the leaves' sums made by conv_leaf_sum */
__device__ __forceinline__ float
convtr_leaves_sum (const float *__restrict__ w0, size_t nz, int j, int split, int lst)
{
  if (lst == 1) { /* the leaves themselves: the loop as it was (the nested one measured slower, 32 leaves) */
    float z = w0[0 + j];
    for (int l = 1; l < split; l++)
      z += w0[(size_t) l * nz + j];
    return z;
  }
  float z = conv_leaf_sum (w0, nz, j, 0, split, lst);
  for (int l = lst; l < split; l += lst)
    z += conv_leaf_sum (w0, nz, j, l, split, lst);
  return z;
}

/* Transposed conv with several leaves: z = leaf 0 + leaf 1 + ... (in order), then the single-leaf epilogue.
 * One thread per (m, co, j < max(Ly, tail)); with a partial, the thread of j < tail also makes the new
 * partial's j (position S*T + j). in_place (S*T >= tail: position S*T + j never reads the old partial) writes
 * it over the partial element this same thread has just read; otherwise it goes to `next` and is copied
 * later (then tail > S*T = Ly, and the threads of j in [Ly, tail) make only that). */
__global__ void
convtr_combine_kernel (const float *__restrict__ ws, const float *__restrict__ bias, float *partial, float *next,
                       float *__restrict__ y, int Cout, int S, int T, int Lz, int Ly, int tail, size_t nmc, int split,
                       int lst, int in_place)
{
  ppx_pdl_enter ();
  const int J = partial && tail > Ly ? tail : Ly;
  const size_t n = nmc * J, nz = nmc * Lz;
  for (size_t idx = blockIdx.x * (size_t) blockDim.x + threadIdx.x; idx < n; idx += (size_t) gridDim.x * blockDim.x) {
    const size_t mc = idx / J;
    const int j = (int) (idx % J), co = (int) (mc % Cout);
    const float *w0 = ws + mc * Lz;
    if (j < Ly) {
      float z = convtr_leaves_sum (w0, nz, j, split, lst);
      if (partial && j < tail)
        z += partial[mc * tail + j];
      y[mc * Ly + j] = z + (bias ? bias[co] : 0.0f);
    }
    if (partial && j < tail) {
      const int j2 = S * T + j;
      float z2 = convtr_leaves_sum (w0, nz, j2, split, lst);
      if (j2 < tail)
        z2 += partial[mc * tail + j2];
      (in_place ? partial : next)[mc * tail + j] = z2;
    }
  }
}

/* PPX_CUDA_CONV_PIPE=0 selects the register double buffer for the weights instead of the cp.async ring. */
static bool
conv_pipe (void)
{
  static int v = -1;
  if (v < 0) {
    const char *e = getenv ("PPX_CUDA_CONV_PIPE");
    v = !(e && e[0] == '0');
  }
  return v != 0;
}

template <bool TR, int TM, int TN, int RG, int CG, bool PIPE>
static int
conv_launch_variant (const ConvArgs &a, cudaStream_t s)
{
  constexpr int BM = RG * TM, BN = CG * TN;
  constexpr size_t smem = conv_smem_bytes (PIPE, BM, BN);
  if (smem > 48 * 1024) {
    static unsigned long long attr_set; /* bit d: done on device d */
    int dev = 0;
    cudaGetDevice (&dev);
    if (dev < 0 || dev >= 64 || !(attr_set >> dev & 1)) {
      cudaError_t e = cudaFuncSetAttribute (conv_gemm_kernel<TR, TM, TN, RG, CG, PIPE>,
                                            cudaFuncAttributeMaxDynamicSharedMemorySize, (int) smem);
      if (e != cudaSuccess)
        return (int) e;
      if (dev >= 0 && dev < 64)
        __atomic_or_fetch (&attr_set, 1ull << dev, __ATOMIC_RELAXED);
    }
  }
  dim3 grid ((unsigned) conv_cdiv (a.N, BN), (unsigned) conv_cdiv (a.rows, BM), (unsigned) a.split);
  ppx_launch (conv_gemm_kernel<TR, TM, TN, RG, CG, PIPE>, grid, RG * CG, smem, s, a);
  return ppx_cuda_launched ();
}

template <bool TR, int TM, int TN, int RG, int CG>
static int
conv_launch_cfg (const ConvArgs &a, cudaStream_t s)
{
  return conv_pipe () ? conv_launch_variant<TR, TM, TN, RG, CG, true> (a, s)
                      : conv_launch_variant<TR, TM, TN, RG, CG, false> (a, s);
}

template <bool TR>
static int
conv_launch (int cfg, const ConvArgs &a, cudaStream_t s)
{
  if (cfg >= CONV_SIMT_CFGS)
    return ppx_conv_mma_launch (TR, cfg - CONV_SIMT_CFGS, a, s);
  switch (cfg) {
    case 0: return conv_launch_cfg<TR, 4, 4, 16, 16> (a, s);
    case 1: return conv_launch_cfg<TR, 4, 4, 32, 8> (a, s);
    case 2: return conv_launch_cfg<TR, 4, 2, 32, 8> (a, s);
    case 3: return conv_launch_cfg<TR, 4, 1, 32, 8> (a, s);
    case 4: return conv_launch_cfg<TR, 4, 4, 8, 32> (a, s);
    case 5: return conv_launch_cfg<TR, 4, 2, 16, 16> (a, s);
    case 6:
      if constexpr (TR)
        return (int) cudaErrorInvalidValue;
      else
        return conv_launch_cfg<TR, 4, 1, 64, 4> (a, s);
    case 7: return conv_launch_cfg<TR, 1, 1, 4, 32> (a, s);
    default: return (int) cudaErrorInvalidValue;
  }
}

int
ppx_conv1d_gemm (int cfg, const ConvArgs &a, float *prev, size_t nch, cudaStream_t s)
{
  int e = conv_launch<false> (cfg, a, s);
  if (e || a.split <= 1)
    return e;
  const size_t n = (size_t) a.M * a.Cout * a.Lcols;
  ppx_launch (conv1d_combine_kernel, ppx_grid_for (n > nch ? n : nch, CONV_THREADS), CONV_THREADS, 0, s, a.ws, a.bias, a.res, a.y, a.x, prev, a.Cout, a.Lcols, n, a.split, a.lst > 0 ? a.lst : 1, nch, a.Lin, a.P, a.act);
  return ppx_cuda_launched ();
}

int
ppx_convtr_gemm (int cfg, const ConvArgs &a, float *partial, size_t nmc, int in_place, cudaStream_t s)
{
  int e = conv_launch<true> (cfg, a, s);
  if (e || a.split <= 1)
    return e;
  const size_t items = nmc * (a.tail > a.Ly ? a.tail : a.Ly);
  ppx_launch (convtr_combine_kernel, ppx_grid_for (items, CONV_THREADS), CONV_THREADS, 0, s, a.ws, a.bias, partial, a.next, a.y, a.Cout, a.stride, a.Lin, a.Lz, a.Ly, a.tail, nmc, a.split, a.lst > 0 ? a.lst : 1, in_place);
  return ppx_cuda_launched ();
}
