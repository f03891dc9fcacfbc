/* CUDA backend, Mimi's convolutions as implicit GEMMs: what the CUDA-core kernel (cuda-conv-gemm.cu) and the
 * tensor-core kernel (cuda-conv-mma.cu) share: which elements a thread stages, the loaders of the weight (A)
 * and gathered input (B) tiles, the cp.async pipeline over a leaf's stages and the epilogue of one output.
 * cuda-conv-gemm.cu's comment describes the GEMM (rows, cols, reduction steps r = (channel, tap)).
 *
 * A tile shape S provides: TR (transposed conv), PIPE (weights by cp.async), NT (threads), BM x BN (the
 * block's rows x cols), BNP (B's row pitch: B is [r][col]), NSA (A stages in the ring), ASLOT (floats of
 * one A stage), AJ / BJ (A / B elements a thread stages per stage), CG (the CUDA-core kernel's threads
 * along cols; 1 otherwise) and a_at (r, row), where element (row, r) of an A stage lives. */
#ifndef PPX_CUDA_CONV_GEMM_CUH
#define PPX_CUDA_CONV_GEMM_CUH

#include "cuda-conv.cuh"

/* 4-byte global -> shared copy that does not wait (sm_80+); ok = false fills a zero and reads nothing. */
__device__ __forceinline__ void
conv_cp_async4 (float *dst, const float *src, bool ok)
{
  const unsigned d = (unsigned) __cvta_generic_to_shared (dst);
  asm volatile ("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(d), "l"(src), "r"(ok ? 4 : 0) : "memory");
}

__device__ __forceinline__ void
conv_cp_commit (void)
{
  asm volatile ("cp.async.commit_group;\n" ::: "memory");
}

template <int N>
__device__ __forceinline__ void
conv_cp_wait (void)
{
  asm volatile ("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

/* What one thread stages each stage: the same (row, r) / (r, col) pairs every stage.
 * conv1d A: lanes along r (w's rows are contiguous in r): r = tid % 32, rows tid / 32 + j * NT / 32.
 * transposed A: lanes along the rows (co, p) (w[ci, co, :] is contiguous): row = tid % BM, r = tid / BM +
 * j * NT / BM. B: lanes along the cols: col = tid % BN, r = tid / BN + j * NT / BN. r = (channel within
 * the stage, tap) is stepped from j to j + 1 without divisions. Offsets into the weights and into a row's
 * input are 32-bit (the planner keeps them below 2^31): the loaders' address arithmetic was most of their
 * instructions in 64 bits. */
struct ConvThread {
  int row0;          /* the block's first row */
  long n0;           /* the block's first col */
  int leaf, ci_lo, ci_hi, BK, nst;
  int a_r0, a_rs, a_rowl, a_ch0, a_tap0, a_dch, a_dtap, a_p;
  int a_off;         /* conv1d: w offset of (row0 + a_rowl, r = a_r0); transposed: of (co, p) in w[0] */
  int a_rows_left;   /* rows from this thread's first one to the end (<= 0: none) */
  int b_r0, b_rs, b_ch0, b_tap0, b_dch, b_dtap, bcol;
  bool b_ok;
  const float *xm, *pm;
  int b_v0;          /* transposed: input frame bc - tap; conv1d: index bc*stride + tap*dil */
  int cg, rg;        /* the CUDA-core kernel: the thread's TN cols and TM rows of the tile */
};

/* Sets up this thread's block position, its leaf of the input channels and its staging pairs. */
template <class S>
__device__ __forceinline__ ConvThread
conv_thread (const ConvArgs &a, int tid)
{
  constexpr bool TR = S::TR;
  constexpr int BM = S::BM, BN = S::BN, NT = S::NT;
  ConvThread g;
  g.row0 = blockIdx.y * BM;
  g.n0 = (long) blockIdx.x * BN;
  g.leaf = blockIdx.z;
  g.ci_lo = g.leaf * a.cpl;
  g.ci_hi = min (a.Cin, g.ci_lo + a.cpl);
  g.BK = a.CK * a.KR;
  g.nst = (g.ci_hi - g.ci_lo + a.CK - 1) / a.CK;
  g.a_r0 = TR ? tid / BM : tid & 31;
  g.a_rs = TR ? NT / BM : 0;
  g.a_rowl = TR ? tid % BM : tid >> 5;
  g.a_ch0 = g.a_r0 / a.KR;
  g.a_tap0 = g.a_r0 % a.KR;
  g.a_dch = g.a_rs / a.KR;
  g.a_dtap = g.a_rs % a.KR;
  const int a_row = g.row0 + g.a_rowl;
  g.a_rows_left = a.rows - a_row;
  const int a_co = TR ? a_row / a.stride : a_row;
  g.a_p = TR ? a_row % a.stride : 0;
  g.a_off = TR ? a_co * a.K + g.a_p : a_row * a.Cin * a.K + g.a_r0;
  g.b_r0 = tid / BN;
  g.b_rs = NT / BN;
  g.b_ch0 = g.b_r0 / a.KR;
  g.b_tap0 = g.b_r0 % a.KR;
  g.b_dch = g.b_rs / a.KR;
  g.b_dtap = g.b_rs % a.KR;
  g.bcol = tid % BN;
  const long bn = g.n0 + g.bcol;
  g.b_ok = bn < a.N;
  const int bm = g.b_ok ? (int) (bn / a.Lcols) : 0, bc = g.b_ok ? (int) (bn % a.Lcols) : 0;
  g.xm = a.x + (size_t) bm * a.Cin * a.Lin;
  g.pm = a.prev ? a.prev + (size_t) bm * a.Cin * a.P : a.x;
  g.b_v0 = TR ? bc : bc * a.stride;
  g.cg = tid % S::CG;
  g.rg = tid / S::CG;
  return g;
}

/* Loads this thread's A (weight) elements of stage st: into registers ra (then conv_store_a) or, with PIPE,
 * by cp.async straight into the shared-memory slot; elements past the leaf, the rows or K read as 0. */
template <class S>
__device__ __forceinline__ void
conv_fetch_a (const ConvArgs &a, const ConvThread &g, int st, float *slot, float *ra)
{
  constexpr int NT = S::NT, BM = S::BM;
  const int ci0 = g.ci_lo + st * a.CK, cnt = min (a.CK, g.ci_hi - ci0);
  if constexpr (!S::TR) {
    /* one r per thread: its channel and tap are the same for all of its rows */
    const bool r_ok = g.a_r0 < g.BK && g.a_ch0 < cnt;
    const int off0 = g.a_off + ci0 * a.K, rstep = (NT / 32) * a.Cin * a.K;
#pragma unroll(S::PIPE ? 8 : S::AJ)
    for (int j = 0; j < S::AJ; j++) {
      const int rowl = g.a_rowl + j * (NT / 32);
      const bool ok = r_ok && rowl < BM && j * (NT / 32) < g.a_rows_left;
      const float *src = a.w + (off0 + j * rstep);
      if constexpr (S::PIPE) {
        if (rowl < BM)
          conv_cp_async4 (slot + S::a_at (g.a_r0, rowl), ok ? src : a.w, ok);
      } else {
        ra[j] = ok ? __ldg (src) : 0.0f;
      }
    }
  } else {
    const bool row_ok = g.a_rows_left > 0;
    const int CoK = a.Cout * a.K;
    int ch = g.a_ch0, tap = g.a_tap0;
#pragma unroll(S::PIPE ? 8 : S::AJ)
    for (int j = 0; j < S::AJ; j++) {
      const int r = g.a_r0 + j * g.a_rs, k = tap * a.stride;
      const bool ok = row_ok && r < g.BK && ch < cnt && g.a_p + k < a.K;
      const float *src = a.w + ((ci0 + ch) * CoK + g.a_off + k);
      if constexpr (S::PIPE) {
        if (r < CONV_BK)
          conv_cp_async4 (slot + S::a_at (r, g.a_rowl), ok ? src : a.w, ok);
      } else {
        ra[j] = ok ? __ldg (src) : 0.0f;
      }
      ch += g.a_dch;
      tap += g.a_dtap;
      if (tap >= a.KR) {
        tap -= a.KR;
        ch++;
      }
    }
  }
}

/* Stores the A elements held in registers (without PIPE) into the shared tile A. */
template <class S>
__device__ __forceinline__ void
conv_store_a (const ConvThread &g, const float *ra, float *A)
{
  if constexpr (!S::PIPE) {
#pragma unroll
    for (int j = 0; j < S::AJ; j++) {
      if constexpr (!S::TR) {
        const int rowl = g.a_rowl + j * (S::NT / 32);
        if (rowl < S::BM)
          A[S::a_at (g.a_r0, rowl)] = ra[j];
      } else {
        const int r = g.a_r0 + j * g.a_rs;
        if (r < CONV_BK)
          A[S::a_at (r, g.a_rowl)] = ra[j];
      }
    }
  }
}

/* Gathers this thread's B (input) elements of stage st into registers rb, raw: conv1d reads concat(prev, x)
 * at t*stride + tap*dil, transposed reads x at q - tap (0 outside [0, T), past the leaf or the stage). Bit j
 * of the result is set where rb[j] came from x, so conv_store_b applies the activation to it (the history
 * holds activated columns already). No load depends on another or is used here, so all BJ are in flight
 * at once, and the addresses are 32-bit offsets selected without branches. */
template <class S>
__device__ __forceinline__ unsigned
conv_load_b (const ConvArgs &a, const ConvThread &g, int st, float *rb)
{
  static_assert (S::BJ <= 32, "one mask bit per element");
  const int ci0 = g.ci_lo + st * a.CK, cnt = min (a.CK, g.ci_hi - ci0);
  int ch = g.b_ch0, tap = g.b_tap0;
  unsigned from_x = 0;
#pragma unroll
  for (int j = 0; j < S::BJ; j++) {
    const int r = g.b_r0 + j * g.b_rs, ci = ci0 + ch;
    bool ok = g.b_ok && r < g.BK && ch < cnt;
    const float *src;
    if constexpr (!S::TR) {
      const int vi = g.b_v0 + tap * a.dil;
      const bool hist = vi < a.P;
      src = hist ? g.pm + (ci * a.P + vi) : g.xm + (ci * a.Lin + (vi - a.P));
      from_x |= (ok && !hist ? 1u : 0u) << j;
    } else {
      const int t = g.b_v0 - tap;
      ok = ok && t >= 0 && t < a.Lin;
      src = g.xm + (ci * a.Lin + t);
      from_x |= (ok ? 1u : 0u) << j;
    }
    rb[j] = ok ? *src : 0.0f;
    ch += g.b_dch;
    tap += g.b_dtap;
    if (tap >= a.KR) {
      tap -= a.KR;
      ch++;
    }
  }
  return from_x;
}

/* Stores the B elements held in registers into the shared tile B ([r][col]), the activation applied to
 * those that came from x (ppx_act_apply's arithmetic, hence the same bits as before; the switch on the
 * activation is taken once, not per element). */
template <class S>
__device__ __forceinline__ void
conv_store_b (const ConvArgs &a, const ConvThread &g, const float *rb, unsigned from_x, float *B)
{
  float *const Bc = B + g.bcol;
  if (a.act == 0) {
#pragma unroll
    for (int j = 0; j < S::BJ; j++) {
      const int r = g.b_r0 + j * g.b_rs;
      const float v = rb[j];
      if (r < CONV_BK)
        Bc[r * S::BNP] = (from_x >> j & 1u) && !(v > 0.0f) ? expm1f (v) : v; /* ELU */
    }
  } else {
#pragma unroll
    for (int j = 0; j < S::BJ; j++) {
      const int r = g.b_r0 + j * g.b_rs;
      if (r < CONV_BK)
        Bc[r * S::BNP] = (from_x >> j & 1u) ? ppx_act_apply (a.act, rb[j]) : rb[j];
    }
  }
}

/* The stages with PIPE: A in a ring of NSA slots filled by cp.async, stages st+1 .. st+NSA-2 in flight while
 * st is computed; every iteration commits one cp.async group (empty past the last stage), so waiting until
 * NSA-2 groups are pending means stage st has landed. One barrier per stage: after it, stage st is visible
 * to all and everyone has finished stage st-1, whose A slot ((st-1) % NSA) and B buffer ((st+1) & 1) are then
 * refilled. compute (A stage, B stage) multiplies one stage into the thread's sums. */
template <class S, class Compute>
__device__ __forceinline__ void
conv_stages_async (const ConvArgs &a, const ConvThread &g, float *As, float *Bs, Compute compute)
{
  constexpr int NSA = S::NSA, AS = S::ASLOT, BS = CONV_BK * S::BNP;
  float rb[S::BJ];
#pragma unroll
  for (int s = 0; s < NSA - 1; s++) {
    if (s < g.nst)
      conv_fetch_a<S> (a, g, s, As + s * AS, NULL);
    conv_cp_commit ();
  }
  unsigned from_x = conv_load_b<S> (a, g, 0, rb);
  conv_store_b<S> (a, g, rb, from_x, Bs);
  for (int st = 0; st < g.nst; st++) {
    conv_cp_wait<NSA - 2> ();
    __syncthreads ();
    const int sn = st + NSA - 1;
    if (sn < g.nst)
      conv_fetch_a<S> (a, g, sn, As + (sn % NSA) * AS, NULL);
    conv_cp_commit ();
    if (st + 1 < g.nst)
      from_x = conv_load_b<S> (a, g, st + 1, rb);
    compute (As + (st % NSA) * AS, Bs + (st & 1) * BS);
    if (st + 1 < g.nst)
      conv_store_b<S> (a, g, rb, from_x, Bs + ((st + 1) & 1) * BS);
  }
}

/* Writes one output's leaf sum v (row; col = (m, c)): with several leaves to the leaf's scratch (the combine
 * launch adds them); with one, conv1d y = (res +) bias + sum, transposed z = sum (+ partial) (+ bias) and the
 * tail of the next call's partial. */
__device__ __forceinline__ void
conv_store_mc (const ConvArgs &a, int leaf, bool tr, int row, int m, int c, float v)
{
  if (!tr) {
    const size_t idx = ((size_t) m * a.Cout + row) * a.Lcols + c;
    if (a.split > 1) {
      a.ws[(size_t) leaf * a.N * a.Cout + idx] = v;
    } else {
      const float y = (a.bias ? a.bias[row] : 0.0f) + v;
      a.y[idx] = a.res ? a.res[idx] + y : y;
    }
  } else {
    const int co = row / a.stride, jz = c * a.stride + row % a.stride;
    if (jz >= a.Lz)
      return;
    const size_t mc = (size_t) m * a.Cout + co;
    if (a.split > 1) {
      a.ws[((size_t) leaf * a.M * a.Cout + mc) * a.Lz + jz] = v;
    } else {
      float z = v;
      if (a.partial && jz < a.tail)
        z += a.partial[mc * a.tail + jz];
      if (jz < a.Ly)
        a.y[mc * a.Ly + jz] = z + (a.bias ? a.bias[co] : 0.0f);
      if (a.partial && jz >= a.stride * a.Lin)
        a.next[mc * a.tail + (jz - a.stride * a.Lin)] = z;
    }
  }
}

/* The (m, c) of col n: 32-bit division where the columns allow (always for Mimi: M x Lcols < 2^31). */
__device__ __forceinline__ void
conv_col_mc (const ConvArgs &a, long n, int &m, int &c)
{
  if (a.N < 2147483648L) {
    m = (int) ((unsigned) n / (unsigned) a.Lcols);
    c = (int) ((unsigned) n - (unsigned) m * (unsigned) a.Lcols);
  } else {
    m = (int) (n / a.Lcols);
    c = (int) (n % a.Lcols);
  }
}

__device__ __forceinline__ void
conv_store_out (const ConvArgs &a, int leaf, bool tr, int row, long n, float v)
{
  if (row >= a.rows || n >= a.N)
    return;
  int m, c;
  conv_col_mc (a, n, m, c);
  conv_store_mc (a, leaf, tr, row, m, c, v);
}

#endif
