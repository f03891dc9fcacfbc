/* CUDA backend: Mimi's streaming convolutions (the quantizer is in cuda-vq.cu).
 *
 * Convolutions of groups = 1 run as implicit GEMMs (below); grouped and depthwise ones, and shapes the
 * GEMM path does not take, run the direct loops: one thread per output element, each summing in the CPU
 * backend's order (input channel, then tap). The streaming state is updated by a later launch than the one
 * that reads it, so no thread reads state that another thread of the same launch rewrites. */
#include "cuda-common.cuh"
#include "cuda-graph-timing.cuh"

#include <math.h>
#include <stdlib.h>

#define CONV_THREADS 256

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

/* ---- convolutions as implicit GEMMs ----
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

struct ConvArgs {
  const float *w, *bias, *x, *prev, *partial, *res; /* res: conv1d's residual (may be y) */
  float *y, *ws, *next;
  int act; /* applied to x as it is staged (PPX_ACT_NONE = -1: none) */
  int M, Cin, Cout, K, stride, dil; /* transposed: stride = S */
  int Lin, P;                       /* conv1d: input length and history; transposed: Lin = T */
  int Lcols, rows, KR, CK, cpl, split;
  int Lz, Ly, tail; /* transposed */
  long N;           /* M * Lcols */
};

#define CONV_BK 32 /* reduction steps per stage, at most */

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

/* 4-byte global -> shared copy that does not wait (sm_80+); ok = false fills a zero and reads nothing. */
__device__ __forceinline__ void
conv_cp_async4 (float *dst, const float *src, bool ok)
{
  const unsigned d = (unsigned) __cvta_generic_to_shared (dst);
  asm volatile ("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(d), "l"(src), "r"(ok ? 4 : 0));
}

__device__ __forceinline__ void
conv_cp_commit (void)
{
  asm volatile ("cp.async.commit_group;\n" ::);
}

template <int N>
__device__ __forceinline__ void
conv_cp_wait (void)
{
  asm volatile ("cp.async.wait_group %0;\n" ::"n"(N));
}

template <bool TR, int TM, int TN, int RG, int CG, bool PIPE>
__global__ void __launch_bounds__ (RG * CG, RG * CG >= 256 ? 2 : 4)
conv_gemm_kernel (const ConvArgs a)
{
  ppx_pdl_enter ();
  constexpr int NT = RG * CG, BM = RG * TM, BN = CG * TN;
  constexpr int BMP = BM + 4, BNP = BN + 4;
  constexpr int NSA = conv_a_stages (PIPE, BM);
  constexpr int AJ = (CONV_BK * BM + NT - 1) / NT; /* A elements a thread loads per stage */
  constexpr int BJ = (CONV_BK * BN + NT - 1) / NT; /* B elements */
  static_assert (NT % 32 == 0 && NT % BM == 0 && NT % BN == 0, "tile shape");
  extern __shared__ float smem[];
  float *const As = smem;                       /* [NSA][CONV_BK][BMP] */
  float *const Bs = smem + NSA * CONV_BK * BMP; /* [2][CONV_BK][BNP] */
  const int tid = threadIdx.x;
  const int row0 = blockIdx.y * BM;
  const long n0 = (long) blockIdx.x * BN;
  const int leaf = blockIdx.z;
  const int ci_lo = leaf * a.cpl, ci_hi = min (a.Cin, ci_lo + a.cpl);
  const int BK = a.CK * a.KR;
  const int nst = (ci_hi - ci_lo + a.CK - 1) / a.CK;

  /* ---- what this thread loads each stage (the same (row, r) / (r, col) pairs every stage) ----
   * conv1d A: lanes along r (w's rows are contiguous in r): r = tid % 32, rows tid / 32 + j * NT / 32.
   * transposed A: lanes along the rows (co, p) (w[ci, co, :] is contiguous): row = tid % BM, r = tid / BM +
   * j * NT / BM. B: lanes along the cols: col = tid % BN, r = tid / BN + j * NT / BN. r = (channel within
   * the stage, tap) is stepped from j to j + 1 without divisions. */
  const int a_r0 = TR ? tid / BM : tid & 31, a_rs = TR ? NT / BM : 0;
  const int a_rowl = TR ? tid % BM : tid >> 5;
  const int a_ch0 = a_r0 / a.KR, a_tap0 = a_r0 % a.KR, a_dch = a_rs / a.KR, a_dtap = a_rs % a.KR;
  const int a_row = row0 + a_rowl;
  const int a_co = TR ? a_row / a.stride : a_row, a_p = TR ? a_row % a.stride : 0;
  const float *a_base = TR ? a.w + (size_t) a_co * a.K + a_p : a.w + (size_t) a_row * a.Cin * a.K + a_r0;
  const int b_r0 = tid / BN, b_rs = NT / BN;
  const int b_ch0 = b_r0 / a.KR, b_tap0 = b_r0 % a.KR, b_dch = b_rs / a.KR, b_dtap = b_rs % a.KR;
  const int bcol = tid % BN;
  const long bn = n0 + bcol;
  const bool b_ok = bn < a.N;
  const int bm = b_ok ? (int) (bn / a.Lcols) : 0, bc = b_ok ? (int) (bn % a.Lcols) : 0;
  const float *xm = a.x + (size_t) bm * a.Cin * a.Lin;
  const float *pm = a.prev ? a.prev + (size_t) bm * a.Cin * a.P : NULL;
  const int b_v0 = TR ? bc : bc * a.stride; /* transposed: input frame bc - tap; conv1d: index bc*stride + tap*dil */

  /* A of stage st: through registers (ra, then store_a) or, with PIPE, by cp.async straight into a slot */
  float ra[PIPE ? 1 : AJ], rb[BJ];
  auto fetch_a = [&] (int st, float *slot) {
    const int ci0 = ci_lo + st * a.CK, cnt = min (a.CK, ci_hi - ci0);
    int ch = a_ch0, tap = a_tap0;
#pragma unroll
    for (int j = 0; j < AJ; j++) {
      if constexpr (!TR) {
        const int rowl = a_rowl + j * (NT / 32);
        const bool ok = a_r0 < BK && a_ch0 < cnt && rowl < BM && row0 + rowl < a.rows;
        const float *src = a_base + (size_t) j * (NT / 32) * a.Cin * a.K + (size_t) ci0 * a.K;
        if constexpr (PIPE) {
          if (rowl < BM)
            conv_cp_async4 (slot + a_r0 * BMP + rowl, ok ? src : a.w, ok);
        } else {
          ra[j] = ok ? __ldg (src) : 0.0f;
        }
      } else {
        const int r = a_r0 + j * a_rs, k = tap * a.stride;
        const bool ok = r < BK && ch < cnt && a_row < a.rows && a_p + k < a.K;
        const float *src = a_base + (size_t) (ci0 + ch) * a.Cout * a.K + k;
        if constexpr (PIPE) {
          if (r < CONV_BK)
            conv_cp_async4 (slot + r * BMP + a_rowl, ok ? src : a.w, ok);
        } else {
          ra[j] = ok ? __ldg (src) : 0.0f;
        }
        ch += a_dch;
        tap += a_dtap;
        if (tap >= a.KR) {
          tap -= a.KR;
          ch++;
        }
      }
    }
  };
  auto store_a = [&] (float *A) {
    if constexpr (!PIPE) {
#pragma unroll
      for (int j = 0; j < AJ; j++) {
        if constexpr (!TR) {
          const int rowl = a_rowl + j * (NT / 32);
          if (rowl < BM)
            A[a_r0 * BMP + rowl] = ra[j];
        } else {
          const int r = a_r0 + j * a_rs;
          if (r < CONV_BK)
            A[r * BMP + a_rowl] = ra[j];
        }
      }
    }
  };
  auto load_b = [&] (int st) {
    const int ci0 = ci_lo + st * a.CK, cnt = min (a.CK, ci_hi - ci0);
    int ch = b_ch0, tap = b_tap0;
#pragma unroll
    for (int j = 0; j < BJ; j++) {
      const int r = b_r0 + j * b_rs;
      float v = 0.0f;
      if (b_ok && r < BK && ch < cnt) {
        const int ci = ci0 + ch;
        if constexpr (!TR) {
          const int vi = b_v0 + tap * a.dil;
          v = vi < a.P ? pm[(size_t) ci * a.P + vi] : ppx_act_apply (a.act, xm[(size_t) ci * a.Lin + (vi - a.P)]);
        } else {
          const int t = b_v0 - tap;
          if (t >= 0 && t < a.Lin)
            v = ppx_act_apply (a.act, xm[(size_t) ci * a.Lin + t]);
        }
      }
      rb[j] = v;
      ch += b_dch;
      tap += b_dtap;
      if (tap >= a.KR) {
        tap -= a.KR;
        ch++;
      }
    }
  };
  auto store_b = [&] (float *B) {
#pragma unroll
    for (int j = 0; j < BJ; j++) {
      const int r = b_r0 + j * b_rs;
      if (r < CONV_BK)
        B[r * BNP + bcol] = rb[j];
    }
  };

  const int cg = tid % CG, rg = tid / CG;
  float acc[TM][TN];
#pragma unroll
  for (int i = 0; i < TM; i++)
#pragma unroll
    for (int j = 0; j < TN; j++)
      acc[i][j] = 0.0f;
  /* one stage: acc += A^T B over its BK reduction steps, in order */
  auto compute = [&] (const float *Ab, const float *Bb) {
    const float *A = Ab + rg * TM, *B = Bb + cg * TN;
#pragma unroll 2
    for (int r = 0; r < BK; r++) {
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
  };

  if constexpr (PIPE) {
    /* A ring of NSA slots: stages st+1 .. st+NSA-2 in flight while st is computed; every iteration commits one
     * cp.async group (empty past the last stage), so waiting until NSA-2 groups are pending means stage st
     * has landed. One barrier per stage: after it, stage st is visible to all and everyone has finished
     * stage st-1, whose A slot ((st-1) % NSA) and B buffer ((st+1) & 1) are then refilled. */
#pragma unroll
    for (int s = 0; s < NSA - 1; s++) {
      if (s < nst)
        fetch_a (s, As + s * CONV_BK * BMP);
      conv_cp_commit ();
    }
    load_b (0);
    store_b (Bs);
    for (int st = 0; st < nst; st++) {
      conv_cp_wait<NSA - 2> ();
      __syncthreads ();
      const int sn = st + NSA - 1;
      if (sn < nst)
        fetch_a (sn, As + (sn % NSA) * CONV_BK * BMP);
      conv_cp_commit ();
      if (st + 1 < nst)
        load_b (st + 1);
      compute (As + (st % NSA) * CONV_BK * BMP, Bs + (st & 1) * CONV_BK * BNP);
      if (st + 1 < nst)
        store_b (Bs + ((st + 1) & 1) * CONV_BK * BNP);
    }
  } else {
    fetch_a (0, NULL);
    load_b (0);
    store_a (As);
    store_b (Bs);
    __syncthreads ();
    for (int st = 0; st < nst; st++) {
      const int buf = st & 1;
      if (st + 1 < nst) {
        fetch_a (st + 1, NULL);
        load_b (st + 1);
      }
      compute (As + buf * CONV_BK * BMP, Bs + buf * CONV_BK * BNP);
      if (st + 1 < nst) {
        store_a (As + (buf ^ 1) * CONV_BK * BMP);
        store_b (Bs + (buf ^ 1) * CONV_BK * BNP);
      }
      __syncthreads ();
    }
  }

  /* ---- epilogue ---- */
#pragma unroll
  for (int i = 0; i < TM; i++) {
    const int row = row0 + rg * TM + i;
    if (row >= a.rows)
      continue;
#pragma unroll
    for (int j = 0; j < TN; j++) {
      const long n = n0 + cg * TN + j;
      if (n >= a.N)
        continue;
      const int m = (int) (n / a.Lcols), c = (int) (n % a.Lcols);
      if (!TR) {
        const size_t idx = ((size_t) m * a.Cout + row) * a.Lcols + c;
        if (a.split > 1)
          a.ws[(size_t) leaf * a.N * a.Cout + idx] = acc[i][j];
        else {
          const float v = (a.bias ? a.bias[row] : 0.0f) + acc[i][j];
          a.y[idx] = a.res ? a.res[idx] + v : v;
        }
      } else {
        const int co = row / a.stride, jz = c * a.stride + row % a.stride;
        if (jz >= a.Lz)
          continue;
        const size_t mc = (size_t) m * a.Cout + co;
        if (a.split > 1) {
          a.ws[((size_t) leaf * a.M * a.Cout + mc) * a.Lz + jz] = acc[i][j];
        } else {
          float z = acc[i][j];
          if (a.partial && jz < a.tail)
            z += a.partial[mc * a.tail + jz];
          if (jz < a.Ly)
            a.y[mc * a.Ly + jz] = z + (a.bias ? a.bias[co] : 0.0f);
          if (a.partial && jz >= a.stride * a.Lin)
            a.next[mc * a.tail + (jz - a.stride * a.Lin)] = z;
        }
      }
    }
  }
}

/* conv1d with several leaves: y = (res +) (bias + leaf 0 + leaf 1 + ...) (one thread per output, leaves in
 * order); the same launch moves the history (threads < M*Cin, one channel each, as conv1d_history_kernel): the
 * main kernel that read it has finished. */
__global__ void
conv1d_combine_kernel (const float *__restrict__ ws, const float *__restrict__ bias, const float *res, float *y,
                       const float *__restrict__ x, float *__restrict__ prev, int Cout, int Lout, size_t nout,
                       int split, size_t nch, int Lin, int P, int act)
{
  ppx_pdl_enter ();
  const size_t n = nout > nch ? nout : nch;
  for (size_t idx = blockIdx.x * (size_t) blockDim.x + threadIdx.x; idx < n; idx += (size_t) gridDim.x * blockDim.x) {
    if (idx < nout) {
      const int co = (int) ((idx / Lout) % Cout);
      float s = bias ? bias[co] : 0.0f;
      for (int l = 0; l < split; l++)
        s += ws[(size_t) l * nout + idx];
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

/* Transposed conv with several leaves: z = leaf 0 + leaf 1 + ... (in order), then the single-leaf epilogue.
 * One thread per (m, co, j < max(Ly, tail)); with a partial, the thread of j < tail also makes the new
 * partial's j (position S*T + j). in_place (S*T >= tail: position S*T + j never reads the old partial) writes
 * it over the partial element this same thread has just read; otherwise it goes to `next` and is copied
 * later (then tail > S*T = Ly, and the threads of j in [Ly, tail) make only that). */
__global__ void
convtr_combine_kernel (const float *__restrict__ ws, const float *__restrict__ bias, float *partial, float *next,
                       float *__restrict__ y, int Cout, int S, int T, int Lz, int Ly, int tail, size_t nmc, int split,
                       int in_place)
{
  ppx_pdl_enter ();
  const int J = partial && tail > Ly ? tail : Ly;
  const size_t n = nmc * J, nz = nmc * Lz;
  for (size_t idx = blockIdx.x * (size_t) blockDim.x + threadIdx.x; idx < n; idx += (size_t) gridDim.x * blockDim.x) {
    const size_t mc = idx / J;
    const int j = (int) (idx % J), co = (int) (mc % Cout);
    const float *w0 = ws + mc * Lz;
    if (j < Ly) {
      float z = w0[0 + j];
      for (int l = 1; l < split; l++)
        z += w0[(size_t) l * nz + j];
      if (partial && j < tail)
        z += partial[mc * tail + j];
      y[mc * Ly + j] = z + (bias ? bias[co] : 0.0f);
    }
    if (partial && j < tail) {
      const int j2 = S * T + j;
      float z2 = w0[j2];
      for (int l = 1; l < split; l++)
        z2 += w0[(size_t) l * nz + j2];
      if (j2 < tail)
        z2 += partial[mc * tail + j2];
      (in_place ? partial : next)[mc * tail + j] = z2;
    }
  }
}

/* ---- planning ---- */

struct ConvCfg {
  int TM, TN, RG, CG;
};
/* Tile shapes (rows x cols = RG*TM x CG*TN): wide tiles for long rows, tall narrow ones for the late layers'
 * few columns per row, one row for a single output channel. */
static const ConvCfg conv_cfgs[] = {
  {4, 4, 16, 16}, /* 0:  64 x 64 */
  {4, 4, 32, 8},  /* 1: 128 x 32 */
  {4, 2, 32, 8},  /* 2: 128 x 16 */
  {4, 1, 32, 8},  /* 3: 128 x 8 */
  {4, 4, 8, 32},  /* 4:  32 x 128 */
  {4, 2, 16, 16}, /* 5:  64 x 32 */
  {4, 1, 64, 4},  /* 6: 256 x 4 (conv1d only: the transposed loader would need too many registers) */
  {1, 1, 4, 32},  /* 7:   4 x 32, 128 threads (one output channel) */
};
#define CONV_N_CFGS ((int) (sizeof conv_cfgs / sizeof conv_cfgs[0]))

/* Test and benchmark overrides (ppx_cuda_conv_set_plan): cfg -2 = the direct kernels, -1 = planned,
 * >= 0 = that tile configuration; split 0 = planned. */
static int conv_force_cfg = -1, conv_force_split = 0;

struct ConvGeom {
  bool tr;
  int M, Cin, Cout, K, stride, dil;
  int Lin, P, Lout;  /* conv1d; transposed: Lin = T */
  int Lz, Ly, tail;  /* transposed */
  int KR, rows, Lcols;
};

struct ConvPlan {
  int cfg; /* -1: the direct kernels */
  int split, cpl, CK;
};

static long
conv_cdiv (long a, long b)
{
  return (a + b - 1) / b;
}

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

/* Leaves: enough that a one-row call (M = 1) has about two blocks per SM, with at least 4 stages per leaf
 * (fewer make the combine's reads of the partial sums cost more than the split gains). A function of the
 * shape and the device only: never of M (batch independence). */
static void
conv_split (const ConvGeom &g, int forced, ConvPlan *pl)
{
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
  }
  S = S < 1 ? 1 : S > nst ? nst : S;
  const int leaf_st = (int) conv_cdiv (nst, S);
  pl->cpl = leaf_st * pl->CK;
  pl->split = (int) conv_cdiv (nst, leaf_st);
}

static bool
conv_cfg_ok (const ConvGeom &g, int c)
{
  return c >= 0 && c < CONV_N_CFGS && !(g.tr && c == 6);
}

/* The tile configuration for this M: a rough cost model, waves of blocks times the stages of a leaf times
 * the longer of a stage's multiply-adds (an SM does 128 a cycle, shared by the blocks resident on it) and a
 * memory latency (~1000 cycles: one stage's loads are in flight while the last one is computed). Any choice
 * gives the same results. */
static int
conv_choose_cfg (const ConvGeom &g, const ConvPlan &pl)
{
  const long N = (long) g.M * g.Lcols;
  const int sms = ppx_sm_count ();
  const int BK = pl.CK * g.KR;
  const long leaf_st = conv_cdiv (pl.cpl, pl.CK);
  double best = 0;
  int bi = 0;
  for (int c = 0; c < CONV_N_CFGS; c++) {
    if (!conv_cfg_ok (g, c))
      continue;
    const ConvCfg &f = conv_cfgs[c];
    const int BM = f.RG * f.TM, BN = f.CG * f.TN, NT = f.RG * f.CG;
    const long blocks = conv_cdiv (g.rows, BM) * conv_cdiv (N, BN) * pl.split;
    const int occ = NT >= 256 ? 2 : 4;
    const long slots = (long) sms * occ;
    const long waves = conv_cdiv (blocks, slots);
    const long per_sm = conv_cdiv (blocks < slots ? blocks : slots, sms);
    const double fma = (double) NT * f.TM * f.TN * BK * per_sm / 128.0 * 1.5;
    const double ld = (double) (BM + BN) * BK * per_sm / 32.0; /* load and store instructions, warp-wide */
    const double stage = fma + ld > 1000.0 ? fma + ld : 1000.0;
    const double cost = (double) waves * leaf_st * stage;
    if (best == 0 || cost < best) {
      best = cost;
      bi = c;
    }
  }
  return bi;
}

static ConvPlan
conv_plan (const ConvGeom &g, int groups, int force_cfg, int force_split)
{
  ConvPlan pl = {-1, 1, g.Cin, 1};
  if (force_cfg == -2 || groups != 1 || g.KR > CONV_BK || g.M <= 0 || g.Cin <= 0 || g.Cout <= 0)
    return pl;
  if (!g.tr && (g.P < 0 || g.Lout <= 0 || (long) g.P + g.Lin >= (1L << 25)))
    return pl;
  if (g.tr && (g.K < g.stride || g.Lin <= 0 || (long) g.Cin * g.Cout * g.K >= (1L << 25)))
    return pl;
  if (conv_cdiv (g.rows, 256) > 65535 || (long) g.M * g.Lcols > (1L << 40))
    return pl;
  conv_split (g, force_split, &pl);
  pl.cfg = conv_cfg_ok (g, force_cfg) ? force_cfg : conv_choose_cfg (g, pl);
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

static ConvArgs
conv_args (const ConvGeom &g, const ConvPlan &pl)
{
  ConvArgs a = {};
  a.M = g.M, a.Cin = g.Cin, a.Cout = g.Cout, a.K = g.K, a.stride = g.stride, a.dil = g.dil;
  a.Lin = g.Lin, a.P = g.P;
  a.Lcols = g.Lcols, a.rows = g.rows, a.KR = g.KR, a.CK = pl.CK, a.cpl = pl.cpl, a.split = pl.split;
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
    int e = g.tr ? (int) cudaErrorInvalidValue : conv_launch<false> (pl.cfg, a, s);
    if (e)
      return e;
    if (pl.split > 1) {
      ppx_launch (conv1d_combine_kernel, ppx_grid_for (n > nch ? n : nch, CONV_THREADS), CONV_THREADS, 0, s, scratch, bias, res, y, x, prev, g.Cout, g.Lout, n, pl.split, nch, g.Lin, g.P, act);
      return ppx_cuda_launched ();
    }
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
    e = conv_launch<true> (pl.cfg, a, s);
    if (!e && pl.split > 1) {
      const size_t items = nmc * (g.tail > g.Ly ? g.tail : g.Ly);
      ppx_launch (convtr_combine_kernel, ppx_grid_for (items, CONV_THREADS), CONV_THREADS, 0, s, ws, bias, partial, next, y, g.Cout, g.stride, g.Lin, g.Lz, g.Ly, g.tail, nmc, pl.split, !needs_next);
      e = ppx_cuda_launched ();
    }
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

extern "C" int
ppx_cuda_conv_n_configs (void)
{
  return CONV_N_CFGS;
}

extern "C" void
ppx_cuda_conv_plan_info (int transposed, int M, int Cin, int Cout, int K, int L, int stride, int dilation, int groups,
                         int streaming, int force_cfg, int force_split, int *cfg, int *split, int *tile_rows,
                         int *tile_cols)
{
  const ConvGeom g = transposed ? convtr_geom (M, Cin, Cout, K, L, stride, streaming)
                                : conv1d_geom (M, Cin, Cout, K, L, stride, dilation, streaming);
  const ConvPlan pl = conv_plan (g, groups, force_cfg, force_split);
  *cfg = pl.cfg;
  *split = pl.cfg < 0 ? 1 : pl.split;
  *tile_rows = pl.cfg < 0 ? 0 : conv_cfgs[pl.cfg].RG * conv_cfgs[pl.cfg].TM;
  *tile_cols = pl.cfg < 0 ? 0 : conv_cfgs[pl.cfg].CG * conv_cfgs[pl.cfg].TN;
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
