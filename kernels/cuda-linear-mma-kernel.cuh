/* CUDA backend, the tensor-core path of the linear layers: the kernel (tc_linear_kernel) and its launch (ring
 * depth, shared-memory limits), shared by cuda-linear-mma.cu (mma.sync, every architecture) and
 * cuda-linear-wgmma.cu (the wgmma configuration, WG = true, built only for sm_90a). */
#ifndef PPX_CUDA_LINEAR_MMA_KERNEL_CUH
#define PPX_CUDA_LINEAR_MMA_KERNEL_CUH

#include "cuda-linear-mma-block.cuh"

#include <stdlib.h>

/* A stage's multiplications in the wgmma configuration (defined in cuda-linear-wgmma.cu, sm_90a only); with
 * a.wg_pipe, in the configurations TcwPipe takes, the stage calls issue () (the copies of the stage D - 1 ahead)
 * itself, once its first wgmma are in flight (or first), else the caller has called it before. */
template <int FMT, int CK, int NT, class F>
__device__ __forceinline__ void tcw_compute (const TcBlock<FMT, CK, NT, true> &b, float (&acc)[1][NT][4], const uint4 *slot, int st,
                             F &issue);

/* y (+)= x W^T for one slice of x rows (blockIdx.x), one row block (C::ROWS weight rows, blockIdx.y) and one
 * leaf of K (blockIdx.z), M <= NT * 8 rows of x in the slice.
 * The prologue puts the first D - 1 stages in flight: the weights and scales (constant while graphs run)
 * are asked for before ppx_pdl_wait, so they stream in while the kernel before this one finishes
 * (programmatic dependent launch), x only after it; the first commit group holds the weights of all D - 1
 * stages, which the wait for stage 0 then covers. Each step of the main loop waits for its stage's copies,
 * converts x, passes one barrier (everyone's copies visible, the slot of the previous stage free), issues
 * the stage D - 1 ahead into that slot and multiplies. The kernels after this one are let in
 * (ppx_pdl_trigger) only once the main loop is done: launched earlier, a following linear layer's blocks
 * would take SM slots this one's plan counts on (measured: 4.2 -> 4.8 us a call for back-to-back 1024 x
 * 1024 int8 layers on an H100).
 * The wgmma configurations of 8 and 16 n-tiles (TcwPipe) issue the copies from inside the stage, behind its first
 * wgmma, and with PPX_CUDA_LINEAR_WGPIPE=2 run the ring without the block barrier (mbarriers wbar, xbar, ebar;
 * docs/cuda.md "The stage software-pipelined"). */
template <int FMT, int CK, int NT, bool WG>
__global__ void __launch_bounds__ (TC_THREADS, (TcCfg<FMT, CK, NT, WG>::MINB))
tc_linear_kernel (TcArgs a)
{
  ppx_pdl_enter ();
  using C = TcCfg<FMT, CK, NT, WG>;
  extern __shared__ uint4 smem[];
  __shared__ unsigned ticket;
  __shared__ float row_inv[8];
  __shared__ float red2[2][TC_WARPS];
  __shared__ uint64_t xbar[8]; /* NT > 1 on sm_90: slot d's x records have landed (bulk copy) */
  /* WG, wg_pipe 2 (the ring without the block barrier): slot d's weights and scales have landed (every thread's
   * cp.async), and every thread is done reading slot d */
  constexpr bool PCFG = WG && TcwPipe<FMT, CK, NT>::ON; /* a configuration with the pipelined stage and the ring */
  __shared__ uint64_t wbar[PCFG ? 8 : 1], ebar[PCFG ? 8 : 1];
  const TcBlock<FMT, CK, NT, WG> b (a);
  const int D = a.depth;
  const int st0 = blockIdx.z * a.leaf_stages, nstg = min (a.leaf_stages, a.n_stages - st0);
  const bool ring = PCFG && a.wg_pipe == 2;
  if (NT > 1 && threadIdx.x < D)
    mbar_init (&xbar[threadIdx.x]);
  if (PCFG && ring && threadIdx.x < D) {
    mbar_init_n (&wbar[threadIdx.x], TC_THREADS);
    mbar_init_n (&ebar[threadIdx.x], TC_THREADS);
  }

  for (int d = 0; d < D - 1; d++)
    if (d < nstg)
      b.issue_weights (smem + d * C::SLOT, st0 + d);
  ppx_pdl_wait ();
  if (NT > 1)
    __syncthreads (); /* the mbarriers are initialized */
  for (int d = 0; d < D - 1; d++) {
    if (d < nstg)
      b.issue_x (smem + d * C::SLOT, st0 + d, &xbar[d]);
    cp_async_commit ();
    if (PCFG && ring)
      cp_async_mbar_arrive (&wbar[PCFG ? d : 0]); /* (all D - 1 stages' weights: they were issued together) */
  }
  if (NT == 1 && a.alpha)
    b.row_rms (row_inv, red2);

  float acc[C::RTW][C::NTW][4];
#pragma unroll
  for (int rt = 0; rt < C::RTW; rt++)
#pragma unroll
    for (int nt = 0; nt < C::NTW; nt++)
#pragma unroll
      for (int i = 0; i < 4; i++)
        acc[rt][nt][i] = 0.0f;
  int rd = 0, wr_slot = D - 1; /* the slots read and written this step */
  if constexpr (PCFG) {
    if (ring) {
      /* No block barrier: a stage starts once its copies have landed (wbar: every thread's cp.async of the
       * weights and scales; xbar: the bulk copy of x); a thread issues its copies into a slot once every thread
       * has left the stage that slot held (ebar, arrived on at the end of each stage), from tcw_compute, behind
       * the stage's first wgmma. The two warpgroups drift apart by up to a stage, so one's dequantization, adds
       * and waits overlap the other's wgmma. */
      for (int jj = 0; jj < nstg; jj++) {
        const uint4 *slot = smem + rd * C::SLOT;
        const unsigned par = (unsigned) (jj / D) & 1u;
        mbar_wait (&wbar[rd], par);
        mbar_wait (&xbar[rd], par);
        auto issue = [&] () {
          if (jj + D - 1 < nstg) {
            if (jj >= 1)
              mbar_wait (&ebar[wr_slot], (unsigned) ((jj - 1) / D) & 1u);
            b.issue_x (smem + wr_slot * C::SLOT, st0 + jj + D - 1, &xbar[wr_slot]);
            b.issue_weights (smem + wr_slot * C::SLOT, st0 + jj + D - 1);
            cp_async_mbar_arrive (&wbar[wr_slot]);
          }
        };
        tcw_compute (b, acc, slot, st0 + jj, issue);
        mbar_arrive (&ebar[rd]);
        rd = rd + 1 == D ? 0 : rd + 1;
        wr_slot = wr_slot + 1 == D ? 0 : wr_slot + 1;
      }
      cp_async_wait<0> ();
      ppx_pdl_trigger ();
      b.store_leaf (acc);
      if (a.S > 1 && b.last_leaf (&ticket))
        b.combine_leaves ();
      return;
    }
  }
  const bool aux = NT == 1 && (a.alpha || a.gate);
  float4 al_next = aux && nstg > 0 ? b.aux_at (st0) : make_float4 (0.0f, 0.0f, 0.0f, 0.0f);
  for (int jj = 0; jj < nstg; jj++) {
    uint4 *slot = smem + rd * C::SLOT;
    const float4 al = al_next;
    if (aux && jj + 1 < nstg)
      al_next = b.aux_at (st0 + jj + 1); /* a stage ahead: its latency hides behind this stage */
    cp_async_wait_n (D - 2); /* this thread's copies of stage jj are done */
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if (NT > 1)
      mbar_wait (&xbar[rd], (unsigned) (jj / D) & 1u); /* and the block's x records */
#endif
    b.convert_x (slot, al, row_inv);
    __syncthreads (); /* everyone's copies of stage jj are visible; slot wr_slot (stage jj - 1) is read */
    auto issue = [&] () {
      if (jj + D - 1 < nstg) {
        b.issue_x (smem + wr_slot * C::SLOT, st0 + jj + D - 1, &xbar[wr_slot]);
        b.issue_weights (smem + wr_slot * C::SLOT, st0 + jj + D - 1);
      }
      cp_async_commit ();
    };
    if constexpr (PCFG) {
      if (!a.wg_pipe)
        issue ();
      tcw_compute (b, acc, slot, st0 + jj, issue); /* cuda-linear-wgmma.cu (sm_90a) */
    } else if constexpr (WG) {
      issue ();
      tcw_compute (b, acc, slot, st0 + jj, issue); /* (does not call it) */
    } else {
      issue ();
      b.compute (acc, slot, st0 + jj);
    }
    rd = rd + 1 == D ? 0 : rd + 1;
    wr_slot = wr_slot + 1 == D ? 0 : wr_slot + 1;
  }
  cp_async_wait<0> ();
  ppx_pdl_trigger ();

  b.store_leaf (acc);
  if (a.S > 1 && b.last_leaf (&ticket))
    b.combine_leaves ();
}

/* An integer from the environment (read once by each caller's static), dflt when unset or outside lo..hi:
 * the measuring knobs below, none of which changes any result. */
static int
env_int (const char *name, int lo, int hi, int dflt)
{
  const char *e = getenv (name);
  const int v = e ? atoi (e) : dflt;
  return v >= lo && v <= hi ? v : dflt;
}

/* The device's shared memory: the most a block may opt in to, and an SM's total (read once per device). */
static void
tc_smem_limits (int *per_block, int *per_sm)
{
  static int cached[64][2];
  int dev = 0;
  if (cudaGetDevice (&dev) != cudaSuccess || dev < 0 || dev >= 64) {
    cudaGetLastError ();
    *per_block = *per_sm = 99 * 1024;
    return;
  }
  if (!cached[dev][0]) {
    int b = 0, m = 0;
    if (cudaDeviceGetAttribute (&b, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess ||
        cudaDeviceGetAttribute (&m, cudaDevAttrMaxSharedMemoryPerMultiprocessor, dev) != cudaSuccess) {
      cudaGetLastError ();
      b = m = 99 * 1024;
    }
    cached[dev][1] = m;
    __atomic_store_n (&cached[dev][0], b, __ATOMIC_RELEASE);
  }
  *per_block = cached[dev][0];
  *per_sm = cached[dev][1];
}

/* The ring depth D of a configuration on this device for a grid of `blocks` blocks: as many slots as fit
 * one block's opt-in limit and the blocks an SM will hold at once (MINB, or fewer when the grid has fewer
 * than MINB blocks per SM; 1 KB reserved per block, and the kernel's static shared memory); at most 4 where
 * several blocks share an SM, at most TC_DEPTH_MAX for a block alone on its SM (PPX_CUDA_LINEAR_DEPTH=2..8
 * caps it, to measure; blocks 0: MINB an SM). Measured on an H100 (docs/cuda.md): a block alone streams
 * faster with 8 slots than 4 (int4 4096 x 11264 at M = 1: 43.4 -> 36.7 us), while 5-6 slots for 2-3 blocks an
 * SM were slower than 4 (22528 x 4096: M = 1 38.8 -> 43.5 us, M = 16 62.7 -> 68.1). Below 2 the
 * configuration cannot run here. */
template <int FMT, int CK, int NT, bool WG = false>
static int
tc_depth (int64_t blocks)
{
  using C = TcCfg<FMT, CK, NT, WG>;
  static const int dmax = env_int ("PPX_CUDA_LINEAR_DEPTH", 2, TC_DEPTH_MAX, TC_DEPTH_MAX);
  const int slot = C::SLOT * (int) sizeof (uint4), static_bytes = 256;
  int per_block, per_sm;
  tc_smem_limits (&per_block, &per_sm);
  const int64_t sms = ppx_sm_count ();
  const int64_t per = blocks > 0 ? (blocks + sms - 1) / sms : C::MINB;
  const int resident = per < C::MINB ? (int) per : C::MINB;
  const int d0 = (per_block - static_bytes) / slot, d1 = (per_sm / resident - 1024 - static_bytes) / slot;
  const int d = d0 < d1 ? d0 : d1, cap = resident > 1 && dmax > 4 ? 4 : dmax;
  return d < cap ? d : cap;
}

template <int FMT, int CK, int NT, bool WG = false>
static int
tc_launch (TcArgs a, cudaStream_t s)
{
  using C = TcCfg<FMT, CK, NT, WG>;
  const size_t row_blocks = ppx_cdiv ((size_t) a.rows, C::ROWS);
  if (row_blocks * (size_t) a.n_slices > TC_MAX_COUNTERS || row_blocks > 65535)
    return (int) cudaErrorInvalidValue;
  a.depth = tc_depth<FMT, CK, NT, WG> ((int64_t) (row_blocks * (size_t) a.n_slices) * a.S);
  if (a.depth < 2)
    return (int) cudaErrorInvalidConfiguration;
  const size_t smem = (size_t) a.depth * C::SLOT * sizeof (uint4);
  /* set once per instantiation and device, to the most a block may use (the depth varies with the grid):
   * static shared memory counts too, so dynamic sizes just under 48 KB also need it. Setting it twice is
   * harmless. */
  static unsigned long long attr_set; /* bit d: done on device d */
  int dev = 0;
  cudaGetDevice (&dev);
  if (dev < 0 || dev >= 64 || !(attr_set >> dev & 1)) {
    int per_block, per_sm;
    tc_smem_limits (&per_block, &per_sm);
    const int most = TC_DEPTH_MAX * C::SLOT * (int) sizeof (uint4) < per_block - 256
                         ? TC_DEPTH_MAX * C::SLOT * (int) sizeof (uint4)
                         : per_block - 256;
    cudaError_t e = cudaFuncSetAttribute (tc_linear_kernel<FMT, CK, NT, WG>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          most > (int) smem ? most : (int) smem);
    if (e != cudaSuccess)
      return (int) e;
    if (dev >= 0 && dev < 64)
      __atomic_or_fetch (&attr_set, 1ull << dev, __ATOMIC_RELAXED);
  }
  /* slices fastest, so that the slices of a row block and leaf run side by side (their weights from the L2) */
  dim3 grid ((unsigned) a.n_slices, (unsigned) row_blocks, (unsigned) a.S);
  ppx_launch<true> (tc_linear_kernel<FMT, CK, NT, WG>, grid, TC_THREADS, smem, s, a);
  return ppx_cuda_launched ();
}

#endif
