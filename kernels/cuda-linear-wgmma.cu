/* CUDA backend: the int4, int8 and bf16 linear layers on Hopper's wgmma (sm_90a; docs/cuda.md, "wgmma (sm_90a)",
 * "int8 on wgmma", "bf16 on wgmma").
 *
 * The same kernel as cuda-linear-mma.cu (tc_linear_kernel: the ring of shared-memory slots, the copies, the
 * K split into leaves and their combine, the int4 / int8 weights dequantized in registers, bf16 taken as they are), in its wgmma
 * configuration (TcCfg WG): a warpgroup (4 warps) owns 64 weight rows, each warp's 16 rows dequantized into
 * the A-fragment registers exactly as for mma.m16n8k16 (wgmma's register A has that per-warp layout), and
 * x is the B operand, read by the tensor cores from the slot, where tcw_xsplit_kernel's records land in
 * wgmma's K-major layout without swizzle (one bulk copy a stage, as before). One wgmma m64nNk16 covers all
 * the slice's N = 8 x n-tiles rows of x. The arithmetic of every output element is the mma.sync kernel's:
 * per k-step the hi product then the lo product into a chunk sum that starts from zero, the chunk added to
 * the f32 running sum (times the int4 group scale; int8 row scales at the end), chunks in order, leaves in order.
 *
 * Built only for sm_90a (meson's -Dcuda-arch with 90a: this file alone gets -gencode
 * arch=compute_90a,code=sm_90a); without it (PPX_CUDA_NO_WGMMA) only the entry points, saying "not
 * available", are compiled. */
#include "cuda-linear-mma-kernel.cuh"
#include "cuda-wgmma-ops.cuh"

#ifndef PPX_CUDA_NO_WGMMA

__device__ __forceinline__ void
wgmma_fence (void)
{
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile ("wgmma.fence.sync.aligned;" ::: "memory");
#endif
}

__device__ __forceinline__ void
wgmma_commit (void)
{
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile ("wgmma.commit_group.sync.aligned;" ::: "memory");
#endif
}

template <int N>
__device__ __forceinline__ void
wgmma_wait (void)
{
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile ("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
#endif
}

/* Ties the registers of v to this point (the compiler may not move their reads or writes across it): around
 * the asynchronous wgmma, whose operands the compiler does not see being read or written later. */
template <int L>
__device__ __forceinline__ void
fence_regs (float (&v)[L])
{
#pragma unroll
  for (int i = 0; i < L; i++)
    asm volatile ("" : "+f"(v[i])::"memory");
}

/* The A fragments of k-step q dequantized at this point of the program (the software-pipelined stage): the
 * weight words it reads are tied here first, so the compiler does not hoist the dequantization above the wgmma
 * issued before it, and the fragments after, so it does not sink it below the wgmma.fence that orders these
 * register writes before the wgmma that read them. */
template <class B>
__device__ __forceinline__ void
tcw_dequant_here (uint32_t (&rw)[1][2][B::WORDS], int q, uint32_t (&af)[1][4])
{
#pragma unroll
  for (int h = 0; h < 2; h++)
#pragma unroll
    for (int i = 0; i < B::WORDS; i++)
      asm volatile ("" : "+r"(rw[0][h][i]));
  B::dequant (rw, q, af);
#pragma unroll
  for (int i = 0; i < 4; i++)
    asm volatile ("" : "+r"(af[0][i]));
}

/* The A fragments of a stage's 8 k-steps, dequantized beforehand (PIPE = false), tied to this point: int8 only
 * (docs/cuda.md, "int8 on wgmma"). Without it the compiler sank each k-step's int8 dequantization into the branch
 * of the K tail stage that guards that k-step's wgmma (q < kvalid), between wgmma of one commit group, and ptxas
 * serialized every wgmma of the kernel (C7512, "insufficient register resources") in the 4-, 8-, 16- and
 * 24-n-tile configurations. Tied here, the fragments are all computed before the first wgmma, as the design has
 * it; the wgmma and the adds are the same, so are the bits. (int4 and bf16 did not serialize: left as they were.) */
template <int FMT>
__device__ __forceinline__ void
tcw_pin_fragments (uint32_t (&af)[8][1][4])
{
  if constexpr (FMT == PPX_CUDA_W_INT8) {
#pragma unroll
    for (int q = 0; q < 8; q++)
#pragma unroll
      for (int i = 0; i < 4; i++)
        asm volatile ("" : "+r"(af[q][0][i]));
  }
}

/* The shared-memory descriptor of one k-step's B operand (hi or lo): K-major, no swizzle; core matrices of 8
 * x rows x 16 bytes (8 bf16 of k), the second half of k (8 .. 15) 128 bytes on (leading byte offset), the next
 * 8 x rows (n-tile) 4096 bytes on (stride byte offset). */
__device__ __forceinline__ uint64_t
tcw_desc (uint32_t saddr)
{
  return (uint64_t) ((saddr & 0x3FFFF) >> 4) | (uint64_t) (128 >> 4) << 16 | (uint64_t) (4096 >> 4) << 32;
}

/* acc (n-tiles N0 .. N0 + n - 1) += chunk ch's sums (p, n n-tiles), times the rows' int4 scales of that chunk:
 * TcBlock::add_chunk's operations (one fmaf each). */
template <int FMT, int CK, int NT, int n, int N0 = 0>
__device__ __forceinline__ void
tcw_add_chunk (const TcBlock<FMT, CK, NT, true> &b, float (&acc)[1][NT][4], const float (&p)[4 * n], const float *ssc,
               int ch)
{
  constexpr int CPS1 = TcBlock<FMT, CK, NT, true>::CPS1;
  float s0 = 1.0f, s1 = 1.0f;
  if (FMT == PPX_CUDA_W_INT4) {
    const int lr = b.row_in_block + b.g;
    s0 = ssc[lr * CPS1 + ch];
    s1 = ssc[(lr + 8) * CPS1 + ch];
  }
#pragma unroll
  for (int nt = 0; nt < n; nt++)
#pragma unroll
    for (int i = 0; i < 4; i++) {
      if (FMT == PPX_CUDA_W_INT4)
        acc[0][N0 + nt][i] = fmaf (i < 2 ? s0 : s1, p[4 * nt + i], acc[0][N0 + nt][i]);
      else
        acc[0][N0 + nt][i] += p[4 * nt + i];
    }
}

/* One stage's multiplications for N = 8 n x-rows: the chunks PB at a time: each chunk's 2 CK wgmma (k-step by
 * k-step, hi then lo) into its own chunk sum from zero, one commit and one wait for the PB chunks, then the
 * chunk sums added to acc in chunk order. PB chunk sums of 4 n registers each are live at once (as many as
 * fit beside acc: all the stage's chunks for few n-tiles, one at N = 128); no accumulator of a wgmma in flight
 * is read (a read between the wgmma and its wait made ptxas serialize them, C7514). Every wgmma is waited for
 * before the stage ends (the slot is then free for the copies of the stage D - 1 ahead).
 * PIPE = false (main's order; the tail stage; PPX_CUDA_LINEAR_WGPIPE=0): the A fragments of all 8 k-steps
 * dequantized first, the copies issued by the caller before. PIPE = true (a full stage, pipelined): each k-step
 * dequantized just before its wgmma (a wgmma.fence after it), so the tensor cores start on k-step 0 while the
 * other k-steps are dequantized, and the copies of the stage D - 1 ahead issued (issue ()) once k-step 0's
 * wgmma are in flight. The same wgmma on the same registers and the same adds in the same order: the same
 * bits. */
template <int FMT, int CK, int NT, int n, bool PIPE, class F>
__device__ __forceinline__ void
tcw_stage (const TcBlock<FMT, CK, NT, true> &b, float (&acc)[1][NT][4], const uint4 *slot, int st, F &issue)
{
  using B = TcBlock<FMT, CK, NT, true>;
  constexpr int NCHUNK = B::NCHUNK, L = 4 * n;
  /* registers for chunk sums: 48 (NT <= 4), 96 (NT <= 16: acc 64), 64 (NT = TCW_NT: acc 100) */
  constexpr int PB0 = (NT <= 4 ? 12 : NT <= 16 ? 24 : 16) / n, PB1 = PB0 < NCHUNK ? PB0 : NCHUNK; /* NCHUNK: 1, 2 or 4 */
  constexpr int PB = PB1 >= 4 ? 4 : PB1 >= 2 ? 2 : 1;
  static_assert (n <= 16, "one wgmma of at most 128 x rows a chunk: tcw_stage_wide past 16 n-tiles");
  static_assert (NCHUNK % PB == 0, "chunk groups");
  uint32_t rw[1][2][B::WORDS];
  if (PIPE)
    b.load_weights (slot, rw);
  else if ((st + 1) * TC_STAGE <= b.a.K)
    b.load_weights (slot, rw);
  else
    b.gather_tail (rw, st);
  const int kvalid = PIPE || (st + 1) * TC_STAGE <= b.a.K ? 8 : b.KS - st * 8;
  const float *ssc = reinterpret_cast<const float *> (slot + B::C::SX + B::C::SW);
  const uint32_t xaddr = (uint32_t) __cvta_generic_to_shared (slot);
  uint32_t af[8][1][4];
  if (!PIPE) {
#pragma unroll
    for (int q = 0; q < 8; q++)
      B::dequant (rw, q, af[q]);
    tcw_pin_fragments<FMT> (af);
  }
  float p[PB][L];
#pragma unroll
  for (int c0 = 0; c0 < NCHUNK; c0 += PB) {
    if (!PIPE && c0 * CK >= kvalid)
      break;
#pragma unroll
    for (int c = 0; c < PB; c++)
#pragma unroll
      for (int i = 0; i < L; i++)
        p[c][i] = 0.0f;
#pragma unroll
    for (int c = 0; c < PB; c++)
      fence_regs (p[c]);
    wgmma_fence ();
#pragma unroll
    for (int c = 0; c < PB; c++)
#pragma unroll
      for (int i = 0; i < CK; i++) {
        const int q = (c0 + c) * CK + i;
        if (PIPE) {
          tcw_dequant_here<B> (rw, q, af[q]);
          wgmma_fence ();
        }
        if (PIPE || q < kvalid) {
          wgmma_bf16_rs<8 * n> (p[c], af[q][0], tcw_desc (xaddr + q * 512));       /* hi */
          wgmma_bf16_rs<8 * n> (p[c], af[q][0], tcw_desc (xaddr + q * 512 + 256)); /* lo */
        }
        if (PIPE && q == 0)
          issue (); /* the next copies, behind k-step 0's wgmma */
      }
    wgmma_commit ();
    wgmma_wait<0> ();
#pragma unroll
    for (int c = 0; c < PB; c++) {
      fence_regs (p[c]);
      if (PIPE || (c0 + c) * CK < kvalid)
        tcw_add_chunk<FMT, CK, NT, n> (b, acc, p[c], ssc, c0 + c);
    }
  }
}

/* One stage's multiplications for N = 8 n x-rows, 16 < n <= TCW_NT (the 129..200-row configuration): each
 * chunk as two wgmma a k-step and half (hi, lo): n-tiles 0..15 (N = 128, the most one wgmma of ours takes:
 * its 64 chunk-sum registers) and n-tiles 16..n-1 (their B operand 16 x 4096 bytes on), into two chunk sums
 * from zero, then both added to acc in chunk order: per output element the operations of tcw_stage (a wgmma
 * output element does not depend on N). Up to 20 n-tiles both parts are in flight together (one commit and
 * wait a chunk: acc 80 + chunk sums 80 + A fragments 32 registers); past that one part after the other
 * (acc 100 + 64 + 32), the other warpgroup's wgmma filling the tensor cores meanwhile. The A fragments of
 * the stage's 8 k-steps are dequantized once and serve all n x rows: all first (PIPE = false), or each just
 * before its first wgmma (PIPE = true, with the copies issued behind k-step 0's wgmma, as in tcw_stage). */
template <int FMT, int CK, int NT, int n, bool PIPE, class F>
__device__ __forceinline__ void
tcw_stage_wide (const TcBlock<FMT, CK, NT, true> &b, float (&acc)[1][NT][4], const uint4 *slot, int st, F &issue)
{
  using B = TcBlock<FMT, CK, NT, true>;
  constexpr int NCHUNK = B::NCHUNK, n2 = n - 16, L1 = 64, L2 = 4 * n2;
  constexpr bool together = n <= 20;
  constexpr bool DQ = PIPE && together; /* past 20 n-tiles the pipelined dequantization spilled */
  static_assert (n > 16 && n <= NT, "the second part holds 1..NT - 16 n-tiles");
  uint32_t rw[1][2][B::WORDS];
  if (PIPE) {
    b.load_weights (slot, rw);
    issue (); /* here, not behind k-step 0's wgmma: with the chunk sums live its registers spilled */
  } else if ((st + 1) * TC_STAGE <= b.a.K) {
    b.load_weights (slot, rw);
  } else {
    b.gather_tail (rw, st);
  }
  const int kvalid = PIPE || (st + 1) * TC_STAGE <= b.a.K ? 8 : b.KS - st * 8;
  const float *ssc = reinterpret_cast<const float *> (slot + B::C::SX + B::C::SW);
  const uint32_t xaddr = (uint32_t) __cvta_generic_to_shared (slot), xaddr2 = xaddr + 16 * 4096;
  uint32_t af[8][1][4];
  if (!DQ) {
#pragma unroll
    for (int q = 0; q < 8; q++)
      B::dequant (rw, q, af[q]);
    tcw_pin_fragments<FMT> (af);
  }
#pragma unroll
  for (int c = 0; c < NCHUNK; c++) {
    if (!PIPE && c * CK >= kvalid)
      break;
    float p1[L1], p2[L2];
#pragma unroll
    for (int i = 0; i < L1; i++)
      p1[i] = 0.0f;
    fence_regs (p1);
    if (together) {
#pragma unroll
      for (int i = 0; i < L2; i++)
        p2[i] = 0.0f;
      fence_regs (p2);
    }
    wgmma_fence ();
#pragma unroll
    for (int i = 0; i < CK; i++) {
      const int q = c * CK + i;
      if (DQ) {
        tcw_dequant_here<B> (rw, q, af[q]);
        wgmma_fence ();
      }
      if (PIPE || q < kvalid) {
        wgmma_bf16_rs<128> (p1, af[q][0], tcw_desc (xaddr + q * 512)); /* hi */
        if (together)
          wgmma_bf16_rs<8 * n2> (p2, af[q][0], tcw_desc (xaddr2 + q * 512));
        wgmma_bf16_rs<128> (p1, af[q][0], tcw_desc (xaddr + q * 512 + 256)); /* lo */
        if (together)
          wgmma_bf16_rs<8 * n2> (p2, af[q][0], tcw_desc (xaddr2 + q * 512 + 256));
      }
    }
    wgmma_commit ();
    wgmma_wait<0> ();
    fence_regs (p1);
    tcw_add_chunk<FMT, CK, NT, 16, 0> (b, acc, p1, ssc, c);
    if (!together) {
#pragma unroll
      for (int i = 0; i < L2; i++)
        p2[i] = 0.0f;
      fence_regs (p2);
      wgmma_fence ();
#pragma unroll
      for (int i = 0; i < CK; i++) {
        const int q = c * CK + i;
        if (PIPE || q < kvalid) {
          wgmma_bf16_rs<8 * n2> (p2, af[q][0], tcw_desc (xaddr2 + q * 512));       /* hi */
          wgmma_bf16_rs<8 * n2> (p2, af[q][0], tcw_desc (xaddr2 + q * 512 + 256)); /* lo */
        }
      }
      wgmma_commit ();
      wgmma_wait<0> ();
    }
    fence_regs (p2);
    tcw_add_chunk<FMT, CK, NT, n2, 16> (b, acc, p2, ssc, c);
  }
}

/* Stage st's multiplications for the block's n-tiles that hold x rows (the same count in every warp: each
 * warp takes them all), as straight-line code for that count, in the pipelined order where b.a.wg_pipe is set.
 * The TCW_NT configuration runs slices of 17..25 n-tiles (tc_slices gives it no fewer; fewer would take the
 * 17-tile code: tiles past the slice's x rows hold stale records, whose sums are never stored). */
template <int FMT, int CK, int NT, bool PIPE, class F>
__device__ __forceinline__ void
tcw_compute_p (const TcBlock<FMT, CK, NT, true> &b, float (&acc)[1][NT][4], const uint4 *slot, int st, F &issue)
{
  const int n = b.tiles;
  if constexpr (NT > 16) {
#define TCW_WIDE(k)                                                                                                  \
  if (n <= k) {                                                                                                      \
    tcw_stage_wide<FMT, CK, NT, (NT >= k ? k : 17), PIPE> (b, acc, slot, st, issue);                                 \
    return;                                                                                                          \
  }
    TCW_WIDE (17) TCW_WIDE (18) TCW_WIDE (19) TCW_WIDE (20) TCW_WIDE (21) TCW_WIDE (22) TCW_WIDE (23) TCW_WIDE (24)
    TCW_WIDE (25)
#undef TCW_WIDE
    static_assert (NT <= 25, "tcw_compute's cases");
  } else {
#define TCW_CASE(k)                                                                                                  \
  if (NT >= k && n == k) {                                                                                           \
    tcw_stage<FMT, CK, NT, (NT >= k ? k : 1), PIPE> (b, acc, slot, st, issue);                                       \
    return;                                                                                                          \
  }
    TCW_CASE (1) TCW_CASE (2) TCW_CASE (3) TCW_CASE (4) TCW_CASE (5) TCW_CASE (6) TCW_CASE (7) TCW_CASE (8)
    TCW_CASE (9) TCW_CASE (10) TCW_CASE (11) TCW_CASE (12) TCW_CASE (13) TCW_CASE (14) TCW_CASE (15) TCW_CASE (16)
#undef TCW_CASE
  }
}

/* The pipelined stage where b.a.wg_pipe is set, the configuration takes it (TcwPipe: 8 and 16 n-tiles, not int4
 * g32 at 16) and the stage is a full one (the K tail, at most one stage a leaf, keeps main's order, the copies
 * issued here first); the other configurations are main's code (the caller issued the copies). */
template <int FMT, int CK, int NT, class F>
__device__ __forceinline__ void
tcw_compute (const TcBlock<FMT, CK, NT, true> &b, float (&acc)[1][NT][4], const uint4 *slot, int st, F &issue)
{
  if constexpr (TcwPipe<FMT, CK, NT>::ON) {
    if (b.a.wg_pipe && (st + 1) * TC_STAGE <= b.a.K) {
      tcw_compute_p<FMT, CK, NT, true> (b, acc, slot, st, issue);
      return;
    }
    if (b.a.wg_pipe)
      issue ();
  }
  if constexpr (FMT == PPX_CUDA_W_INT8 && NT == 4) {
    /* int8's 4-n-tile configuration (the depformer's slices of 4 n-tiles, on wgmma from 129 rows): with
     * PPX_CUDA_LINEAR_WGPIPE8=1 (the default; 0: main's order) each k-step dequantized just before its wgmma
     * (tcw_stage's PIPE order); the caller issued the copies already (not a TcwPipe configuration: its kernel keeps
     * main's loop), so the stage issues nothing */
    if (b.a.wg_pipe && (st + 1) * TC_STAGE <= b.a.K) {
      auto none = [] () {};
      tcw_compute_p<FMT, CK, NT, true> (b, acc, slot, st, none);
      return;
    }
  }
  tcw_compute_p<FMT, CK, NT, false> (b, acc, slot, st, issue);
}

/* x [M][K] split into hi/lo bf16 (tc_split_record, the mma.sync kernel's split) and laid out as the wgmma B
 * operand: per stage and n-tile 4096 bytes, [k-step q][hi, lo][k half][row g][8 bf16], where k-step q's k
 * index 2t + e (e = 0, 1) is column c + e and 2t + 8 + e is column c + 2 + e (t = 0..3), c = tc_col<FMT> (the
 * mma.sync kernel's column of the thread's x record: int4, and every tail stage, 16 q + 4 t, the repacked
 * layout; int8 full stages 64 (q >> 2) + 16 t + 4 (q & 3), bf16 full stages 32 (q >> 1) + 8 t + 4 (q & 1),
 * where their 16-byte weight vectors put them), so the B operand holds, k index by k index, the x values of the
 * mma.sync kernel's B fragments. Zeros past M and K. */
template <int FMT>
__global__ void
tcw_xsplit_kernel (const float *x, size_t ldx, int M, int K, int n_stages, int tiles, int vec_x, uint32_t *out)
{
  ppx_pdl_enter ();
  const int64_t n = (int64_t) n_stages * tiles * 256;
  for (int64_t i = blockIdx.x * (int64_t) blockDim.x + threadIdx.x; i < n; i += (int64_t) gridDim.x * blockDim.x) {
    const int rec = (int) (i % 256);
    const int64_t tile_rec = i / 256; /* st * tiles + tile */
    const int tile = (int) (tile_rec % tiles), st = (int) (tile_rec / tiles);
    const int q = rec >> 5, g = (rec & 31) >> 2, t = rec & 3, m = 8 * tile + g, col0 = st * TC_STAGE;
    const int c = tc_col<FMT> (col0, col0 + TC_STAGE <= K, q, t);
    const float4 v = tc_load_x4 (x, ldx, M, K, m, c, vec_x);
    const uint4 r = tc_split_record (v); /* hi01, hi23, lo01, lo23 */
    uint32_t *o = out + tile_rec * 1024 + q * 128 + g * 4 + t;
    o[0] = r.x;
    o[32] = r.y;
    o[64] = r.z;
    o[96] = r.w;
  }
}

/* The configuration for a slice of a.slice_tiles n-tiles (2, 4, 8, 16 or the wide one: TCW_NT for int4, TCW_NT8
 * for int8, whose weights take twice the slot, TCW_NT16 for bf16, four times; no 1-tile configuration, a slice of
 * one tile takes the 2-tile one). */
template <int FMT, int CK>
static int
tcw_launch_nt (const TcArgs &a, cudaStream_t s)
{
  constexpr int WIDE = FMT == PPX_CUDA_W_INT8 ? TCW_NT8 : FMT == PPX_CUDA_W_BF16 ? TCW_NT16 : TCW_NT;
  if (a.slice_tiles <= 2)
    return tc_launch<FMT, CK, 2, true> (a, s);
  if (a.slice_tiles <= 4)
    return tc_launch<FMT, CK, 4, true> (a, s);
  if (a.slice_tiles <= 8)
    return tc_launch<FMT, CK, 8, true> (a, s);
  if (a.slice_tiles <= 16)
    return tc_launch<FMT, CK, 16, true> (a, s);
  return tc_launch<FMT, CK, WIDE, true> (a, s);
}

/* Whether the current device runs the sm_90a code (compute capability 9.0 exactly), read once per device. */
static bool
tcw_device_ok (void)
{
  static int cached[64]; /* 0 unknown, 1 yes, 2 no */
  int dev = 0;
  if (cudaGetDevice (&dev) != cudaSuccess || dev < 0 || dev >= 64) {
    cudaGetLastError ();
    return false;
  }
  int v = __atomic_load_n (&cached[dev], __ATOMIC_ACQUIRE);
  if (!v) {
    cudaFuncAttributes fa;
    const bool ok = ppx_cuda_compute_capability () == 90 &&
                    cudaFuncGetAttributes (&fa, tc_linear_kernel<PPX_CUDA_W_INT4, 4, 16, true>) == cudaSuccess;
    cudaGetLastError ();
    v = ok ? 1 : 2;
    __atomic_store_n (&cached[dev], v, __ATOMIC_RELEASE);
  }
  return v == 1;
}

int
ppx_linear_wgmma_available (void)
{
  return tcw_device_ok ();
}

/* The most n-tiles a wgmma slice may take on this device: the wide configuration where two ring slots of it fit
 * one block's shared memory (H100, H200: int4 2 x 110 KB of the 227 KB at g32, the largest scales; int8 2 x 112
 * KB at 24 n-tiles, its 16 KB of weights a stage; bf16 2 x 112 KB at 20 n-tiles, its 32 KB of weights a stage),
 * else 16. */
int
ppx_linear_wgmma_nt_max (int fmt)
{
  if (fmt == PPX_CUDA_W_INT8)
    return tc_depth<PPX_CUDA_W_INT8, 8, TCW_NT8, true> (0) >= 2 ? TCW_NT8 : 16;
  if (fmt == PPX_CUDA_W_BF16)
    return tc_depth<PPX_CUDA_W_BF16, 8, TCW_NT16, true> (0) >= 2 ? TCW_NT16 : 16;
  return tc_depth<PPX_CUDA_W_INT4, 2, TCW_NT, true> (0) >= 2 ? TCW_NT : 16;
}

int
ppx_linear_wgmma (TcArgs a, int fmt, int ck, uint4 *xs, cudaStream_t s)
{
  const int tiles = (a.M + 7) / 8;
  a.xs_tiles = tiles;
  static const int pipe = env_int ("PPX_CUDA_LINEAR_WGPIPE", 0, 2, 1);
  static const int pipe8 = env_int ("PPX_CUDA_LINEAR_WGPIPE8", 0, 1, 1);
  /* int8 slices of up to 4 n-tiles: the 4-tile configuration, whose kernel reads wg_pipe only in tcw_compute */
  a.wg_pipe = fmt == PPX_CUDA_W_INT8 && a.slice_tiles > 2 && a.slice_tiles <= 4 ? pipe8 : pipe;
  const size_t n = (size_t) a.n_stages * tiles * 256;
  const dim3 grid = ppx_grid_for (n, 256);
  if (fmt == PPX_CUDA_W_INT8)
    ppx_launch (tcw_xsplit_kernel<PPX_CUDA_W_INT8>, grid, 256, 0, s, a.x, a.ldx, a.M, a.K, a.n_stages, tiles, a.vec_x,
                (uint32_t *) xs);
  else if (fmt == PPX_CUDA_W_BF16)
    ppx_launch (tcw_xsplit_kernel<PPX_CUDA_W_BF16>, grid, 256, 0, s, a.x, a.ldx, a.M, a.K, a.n_stages, tiles, a.vec_x,
                (uint32_t *) xs);
  else
    ppx_launch (tcw_xsplit_kernel<PPX_CUDA_W_INT4>, grid, 256, 0, s, a.x, a.ldx, a.M, a.K, a.n_stages, tiles, a.vec_x,
                (uint32_t *) xs);
  if (int e = ppx_cuda_launched ())
    return e;
  a.xs = xs;
  if (fmt == PPX_CUDA_W_INT8)
    return tcw_launch_nt<PPX_CUDA_W_INT8, 8> (a, s);
  if (fmt == PPX_CUDA_W_BF16)
    return tcw_launch_nt<PPX_CUDA_W_BF16, 8> (a, s);
  return ck == 2 ? tcw_launch_nt<PPX_CUDA_W_INT4, 2> (a, s) : ck == 4 ? tcw_launch_nt<PPX_CUDA_W_INT4, 4> (a, s)
                                                             : tcw_launch_nt<PPX_CUDA_W_INT4, 8> (a, s);
}

#else /* built without sm_90a */

int
ppx_linear_wgmma_available (void)
{
  return 0;
}

int
ppx_linear_wgmma_nt_max (int fmt)
{
  (void) fmt;
  return 0;
}

int
ppx_linear_wgmma (TcArgs a, int fmt, int ck, uint4 *xs, cudaStream_t s)
{
  (void) a, (void) fmt, (void) ck, (void) xs, (void) s;
  return (int) cudaErrorInvalidDeviceFunction;
}

#endif
