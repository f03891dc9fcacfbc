/* CUDA backend, the tensor-core path of the linear layers (cuda-linear-mma.cu): its tile configuration
 * (TcCfg), launch arguments (TcArgs) and the device helpers of its kernel (fragment conversions, mma.sync,
 * cp.async, the int4 word layout the weights are repacked into at load). */
#ifndef PPX_CUDA_LINEAR_MMA_CUH
#define PPX_CUDA_LINEAR_MMA_CUH

#include "cuda-linear.cuh"

#include <cuda_bf16.h>

#define TC_THREADS 256
#define TC_WARPS 8
#define TC_MMAX 128           /* x rows per launch at most (16 n-tiles of 8) */
#define TCW_MMAX 256          /* x rows per launch at most in the wgmma configuration (sm_90a) */
#define TCW_NT 25             /* n-tiles of the largest wgmma slice (200 rows: two ring slots of x fill the SM) */
#define TCW_NT8 24            /* the same for int8 weights (192 rows: their 16 KB a stage leave room for 24) */
#define TCW_NT16 20           /* the same for bf16 weights (160 rows: their 32 KB a stage leave room for 20) */
#define TC_SPLIT_ROWS 128     /* the row-block size the leaf count is planned with */
#define TC_PLAN_BLOCKS_PER_SM 3 /* resident blocks per SM the K split plans for (the M <= 8 kernel's occupancy) */
#define TC_DEPTH_MAX 8        /* shared-memory ring slots per block at most (mbarriers, cp_async_wait_n) */
#define TC_MAX_COUNTERS (PPX_CUDA_LINEAR_COUNTER_BYTES / 4)

/* 32-bit words of one weight row per thread per stage (16 bytes cover 2, 4 or 8 k-steps). */
template <int FMT> struct TcWords;
template <> struct TcWords<PPX_CUDA_W_BF16> { static constexpr int N = 16; };
template <> struct TcWords<PPX_CUDA_W_INT8> { static constexpr int N = 8; };
template <> struct TcWords<PPX_CUDA_W_INT4> { static constexpr int N = 4; };

/* Warp layout for a launch with room for NT n-tiles of x (NT * 8 >= M): WM warps along x rows (NTW n-tiles
 * each, interleaved: warp wm takes tiles wm, wm + WM, ...; tiles past M are skipped) times TC_WARPS / WM
 * warps along weight rows (RTW tiles of 16 each). Two warps sharing weight rows (WM = 2) halve the
 * shared-memory reads of x per mma.
 * Everything a stage needs goes through a ring of D shared-memory slots filled by cp.async (one commit
 * group per stage): x [NT][8 k-steps][32 lanes] records (raw f32, converted in place to hi/lo bf16), the
 * block's weights [row tile][row half][16-byte vector][32 lanes] (exactly the A fragments the warps read,
 * so every 16-byte read is conflict-free), then the int4 scales [ROWS][CPS]. D stages are in flight per
 * block, waited for with cp.async.wait_group: no register scoreboard decides how many loads are
 * outstanding (docs/cuda.md, "Linear layers"). D is chosen at launch (tc_depth): as deep as the device's
 * shared memory allows for MINB blocks per SM, at most TC_DEPTH_MAX; it does not change any result.
 * NCH independent partial sums let the chunks of one stage run as separate mma chains when a warp has
 * few (RTW x NTW) accumulator tiles; each chunk still starts from zero and is added to the running sum in
 * chunk order, so the arithmetic is the same for every NT.
 * WG (sm_90a, cuda-linear-wgmma.cu): the wgmma configuration: each warp owns 16 weight rows (RTW = 1), every
 * warp takes all the slice's n-tiles (WM = 1), so a warpgroup's 4 warps hold the A operand of one
 * m64nNk16 wgmma (N = 8 x the slice's n-tiles) and x is read from the slot by the tensor cores. */
template <int FMT, int CK, int NT, bool WG = false> struct TcCfg {
  static constexpr int WM = !WG && NT >= 4 ? 2 : 1;
  static constexpr int NTW = NT / WM;
  static constexpr int RTW = (!WG && NT >= 4 && FMT != PPX_CUDA_W_BF16) ? 2 : 1;
  static constexpr int WR = TC_WARPS / WM;
  static constexpr int ROWS = WR * RTW * 16;
  static constexpr int WORDS = TcWords<FMT>::N;
  static constexpr int WV = WORDS / 4;                          /* 16-byte vectors per row per thread */
  static constexpr int CPS = FMT == PPX_CUDA_W_INT4 ? 8 / CK : 0; /* int4 scales per row per stage */
  static constexpr int SX = NT * 256;                            /* slot parts, in uint4 */
  static constexpr int SW = ROWS * WV * 4;
  static constexpr int SS = (ROWS * CPS + 3) / 4;
  static constexpr int SLOT = SX + SW + SS;
  static constexpr int MINB = NT == 1 ? 3 : NT <= 4 ? 2 : 1; /* blocks per SM (registers, shared memory) */
  static constexpr bool XS = NT > 1 || WG;                     /* x split beforehand (tc_xsplit_kernel) */
  static constexpr int NCHUNK = 8 / CK;
  static constexpr int NCH0 = 2 / (RTW * NTW) > 0 ? 2 / (RTW * NTW) : 1;
  static constexpr int NCH = NCH0 < NCHUNK ? NCH0 : NCHUNK;
  static_assert (SW % TC_THREADS == 0, "weight copies are spread evenly over the threads");
};

/* The wgmma configurations (WG) that take the software-pipelined stage and, with PPX_CUDA_LINEAR_WGPIPE=2, the
 * ring without the block barrier (cuda-linear-wgmma.cu, docs/cuda.md "The stage software-pipelined"): 8 and 16
 * n-tiles. The others compile to main's order: the 25-n-tile one (253 registers) spilled ~5 KB with the
 * pipelined stage, int4 g32 (CK = 2) at 16 n-tiles 14 KB, and the 2- and 4-n-tile ones (128 registers: 2 blocks
 * an SM) have little to overlap. */
template <int FMT, int CK, int NT> struct TcwPipe {
  static constexpr bool ON = NT >= 8 && NT <= 16 && !(FMT == PPX_CUDA_W_INT4 && CK == 2 && NT == 16);
};

struct TcArgs {
  const uint8_t *w;
  const float *scales;
  int64_t rows;
  int K, row_bytes, n_groups, group_size;
  const float *x;
  size_t ldx;
  float *y;
  size_t ldy;
  int M, accumulate;   /* M: x rows of the launch (at most TC_MMAX; TCW_MMAX in the wgmma configuration) */
  int n_stages, leaf_stages, S;
  int n_slices;        /* blocks along x rows per row block and leaf (blockIdx.x = row block * n_slices + slice) */
  int slice_tiles;     /* n-tiles of x a slice holds (the last slice may hold fewer) */
  int vec_x;
  int vec_y;           /* y rows on 16 bytes (ldy % 4 == 0, y on 16 bytes): the leaf combine stores 16 bytes at once */
  float *partials;     /* [S][pm][rows] when S > 1 (x rows of the launch, whatever the slice) */
  int pm;              /* x rows per leaf in partials: the call's launch rows at most (tc_launch_rows) */
  const float *alpha;  /* non-NULL (NT = 1 only): x is RMS-normalized first, rmsnorm_kernel's arithmetic */
  float eps;
  int gate;            /* (NT = 1 only, no alpha): x rows hold [g | v] (v at x + K): the input is silu(g) * v */
  unsigned *counters;  /* one per (row block, slice), zero between launches */
  int depth;           /* D, the shared-memory ring's slots (tc_depth) */
  const uint4 *xs;     /* NT > 1: x already split into hi/lo records in slot order, [stage][tiles][8][32] */
  int xs_tiles;        /* the n-tiles of the launch (xs's stride between stages, in 256 records) */
  int wg_pipe;         /* wgmma configuration: the software-pipelined stage (PPX_CUDA_LINEAR_WGPIPE; same results) */
};

/* The fields of a launch's arguments that come from the weight: its pointers and shape, and the K split
 * (tc_plan: from the shape and the device only), for the kernels that run the tensor-core linear's blocks
 * themselves (cuda-layer-tail.cu). */
void ppx_linear_mma_weight_args (const PpxCudaWeight *w, TcArgs *a);

/* The wgmma configuration (cuda-linear-wgmma.cu, sm_90a): whether this device runs it (compute capability 9.0
 * and a build with 90a), and a launch of it for int4, int8 or bf16 weights (fmt; x split into xs in its layout,
 * then the kernel; up to TCW_MMAX rows). */
int ppx_linear_wgmma_available (void);
int ppx_linear_wgmma (TcArgs a, int fmt, int ck, uint4 *xs, cudaStream_t s);
/* The most n-tiles one block of the wgmma configuration takes on this device for weights of format fmt
 * (TCW_NT for int4, TCW_NT8 for int8, TCW_NT16 for bf16, or 16; 0: not built) */
int ppx_linear_wgmma_nt_max (int fmt);

__device__ __forceinline__ uint32_t
bf16x2_bits (__nv_bfloat162 v)
{
  return *reinterpret_cast<uint32_t *> (&v);
}

/* The int4 codes in bits 0-3 and 16-19 of v as bf16x2 (code - 8): 0x43000000|n is 128 + n exactly (one
 * lop3: (v & 0x000F000F) | 0x43004300), and one bf16x2 fma (x * 1 - 136) removes the offset, exactly. */
__device__ __forceinline__ uint32_t
int4_pair (uint32_t v)
{
  uint32_t h, r;
  asm ("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(h) : "r"(v), "r"(0x000F000Fu), "r"(0x43004300u));
  asm ("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(r) : "r"(h), "r"(0x3F803F80u), "r"(0xC308C308u));
  return r;
}

/* The four int8 codes of u as two bf16x2 (bytes 0,1 and bytes 2,3): a byte permute makes 2^23 + (q + 128)
 * in f32, a subtraction gives q exactly, and since |q| <= 128 the upper 16 bits are its exact bf16. */
__device__ __forceinline__ void
int8_pairs (uint32_t u, uint32_t &lo, uint32_t &hi)
{
  const uint32_t b = u ^ 0x80808080u;
  float f[4];
#pragma unroll
  for (int k = 0; k < 4; k++)
    f[k] = __uint_as_float (__byte_perm (b, 0x4B000000u, 0x7540u | k)) - 8388736.0f;
  lo = __byte_perm (__float_as_uint (f[0]), __float_as_uint (f[1]), 0x7632u);
  hi = __byte_perm (__float_as_uint (f[2]), __float_as_uint (f[3]), 0x7632u);
}

__device__ __forceinline__ void
mma_bf16 (float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1)
{
  asm ("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
       "{%0,%1,%2,%3};"
       : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
       : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* cp.async of `bytes` (4 or 16) from global to shared memory; only the first src_bytes are read, the rest
 * are zero-filled (src_bytes 0: zeros, nothing read). Scales (4 bytes) ask the L2 for 256-byte blocks: a
 * row's scales are read over several stages. */
template <int BYTES>
__device__ __forceinline__ void
cp_async (void *smem, const void *gmem, int src_bytes)
{
  const unsigned s = (unsigned) __cvta_generic_to_shared (smem);
  if (BYTES == 16)
    asm volatile ("cp.async.cg.shared.global.L2::128B [%0], [%1], 16, %2;" ::"r"(s), "l"(gmem), "r"(src_bytes));
  else
    asm volatile ("cp.async.ca.shared.global.L2::256B [%0], [%1], 4, %2;" ::"r"(s), "l"(gmem), "r"(src_bytes));
}

/* cp.async of 16 bytes of weights, asking the L2 for the whole 256-byte block: a row's next stages are in
 * it (measured on an H100 with the kernel's access pattern alone: 2.3 TB/s with the hint, 1.6 without) */
__device__ __forceinline__ void
cp_async_w (void *smem, const void *gmem)
{
  const unsigned s = (unsigned) __cvta_generic_to_shared (smem);
  asm volatile ("cp.async.cg.shared.global.L2::256B [%0], [%1], 16;" ::"r"(s), "l"(gmem));
}

__device__ __forceinline__ void
cp_async_commit (void)
{
  asm volatile ("cp.async.commit_group;");
}

template <int N>
__device__ __forceinline__ void
cp_async_wait (void)
{
  asm volatile ("cp.async.wait_group %0;" ::"n"(N));
}

/* cp.async.wait_group n for a run-time n (the ring depth D - 2, D <= TC_DEPTH_MAX): at most n of this
 * thread's groups pending. Predicated waits, one per n, not a switch: the switch compiled to a jump table
 * (a constant load, an indirect branch) that cost ~5 % of an M = 1 launch's stall samples on an H100. */
__device__ __forceinline__ void
cp_async_wait_n (int n)
{
  asm volatile ("{\n\t.reg .pred p;\n\t"
                "setp.le.s32 p, %0, 0;\n\t@p cp.async.wait_group 0;\n\t"
                "setp.eq.s32 p, %0, 1;\n\t@p cp.async.wait_group 1;\n\t"
                "setp.eq.s32 p, %0, 2;\n\t@p cp.async.wait_group 2;\n\t"
                "setp.eq.s32 p, %0, 3;\n\t@p cp.async.wait_group 3;\n\t"
                "setp.eq.s32 p, %0, 4;\n\t@p cp.async.wait_group 4;\n\t"
                "setp.eq.s32 p, %0, 5;\n\t@p cp.async.wait_group 5;\n\t"
                "setp.ge.s32 p, %0, 6;\n\t@p cp.async.wait_group 6;\n\t}" ::"r"(n)
                : "memory");
}

/* Bulk copies of the split x records (sm_90: one thread copies a stage's records of all n-tiles, a
 * contiguous block, with cp.async.bulk completing on an mbarrier, instead of 256 threads issuing up to 16
 * cp.async each). */
__device__ __forceinline__ void
mbar_init (uint64_t *bar)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  const unsigned b = (unsigned) __cvta_generic_to_shared (bar);
  asm volatile ("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(b) : "memory");
  asm volatile ("fence.mbarrier_init.release.cluster;" ::: "memory");
#endif
}

/* An mbarrier expecting `count` arrivals a phase (the wgmma configuration's barrier-free ring, wg_pipe 2). */
__device__ __forceinline__ void
mbar_init_n (uint64_t *bar, unsigned count)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  const unsigned b = (unsigned) __cvta_generic_to_shared (bar);
  asm volatile ("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(b), "r"(count) : "memory");
  asm volatile ("fence.mbarrier_init.release.cluster;" ::: "memory");
#endif
}

/* This thread's arrival on bar (release: its reads of the slot before it are done). */
__device__ __forceinline__ void
mbar_arrive (uint64_t *bar)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  const unsigned b = (unsigned) __cvta_generic_to_shared (bar);
  asm volatile ("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(b) : "memory");
#endif
}

/* An arrival on bar once all of this thread's cp.async issued so far have landed (not counted in advance:
 * the barrier's count includes it). */
__device__ __forceinline__ void
cp_async_mbar_arrive (uint64_t *bar)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  const unsigned b = (unsigned) __cvta_generic_to_shared (bar);
  asm volatile ("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(b) : "memory");
#endif
}

/* `bytes` (a multiple of 16, 16-byte aligned both sides) from global to shared memory, completing on bar */
__device__ __forceinline__ void
bulk_copy (void *dst, const void *src, unsigned bytes, uint64_t *bar)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  const unsigned b = (unsigned) __cvta_generic_to_shared (bar), d = (unsigned) __cvta_generic_to_shared (dst);
  asm volatile ("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(b), "r"(bytes) : "memory");
  asm volatile ("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(d),
                "l"(src), "r"(bytes), "r"(b)
                : "memory");
#endif
}

/* Wait until bar's phase of the given parity has completed (its bulk copy has landed and is visible). */
__device__ __forceinline__ void
mbar_wait (uint64_t *bar, unsigned parity)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  const unsigned b = (unsigned) __cvta_generic_to_shared (bar);
  unsigned done = 0;
  do {
    asm volatile ("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
                  : "=r"(done)
                  : "r"(b), "r"(parity)
                  : "memory");
  } while (!done);
#endif
}

/* The int4 word a thread holds for k-steps 2w, 2w+1 of a 128-column block, from the natural (quant.h)
 * nibbles: for k-step q the thread's columns are c = 16q + 4t .. c+3, and their nibbles go to bit
 * positions s, s+16, s+4, s+20 with s = 8 (q & 1), so that int4_pair(word >> s) gives the bf16x2 of
 * (c, c+1) and int4_pair(word >> (s + 4)) that of (c+2, c+3). `nib(col)` reads one natural nibble. */
template <typename Nib>
__device__ __forceinline__ uint32_t
int4_word (int64_t c0, int t, int w, Nib nib)
{
  uint32_t word = 0;
#pragma unroll
  for (int qq = 0; qq < 2; qq++) {
    const int64_t c = c0 + 16 * (2 * w + qq) + 4 * t;
    const int s = 8 * qq;
    word |= nib (c) << s | nib (c + 1) << (s + 16) | nib (c + 2) << (s + 4) | nib (c + 3) << (s + 20);
  }
  return word;
}

/* Column of the first of the 4 x values (and weights) a thread (t = lane & 3) uses in k-step q of the stage
 * starting at col0. Full stages: where the thread's 16-byte weight vectors put them; the tail stage (and
 * int4, repacked): 16 consecutive columns per k-step. */
template <int FMT>
__device__ __forceinline__ int
tc_col (int col0, bool full, int q, int t)
{
  if (!full || FMT == PPX_CUDA_W_INT4)
    return col0 + 16 * q + 4 * t;
  if (FMT == PPX_CUDA_W_BF16)
    return col0 + 32 * (q >> 1) + 8 * t + 4 * (q & 1);
  return col0 + 64 * (q >> 2) + 16 * t + 4 * (q & 3);
}

/* The hi/lo bf16 split of 4 x values as one B-fragment record: (hi01, hi23, lo01, lo23), hi = bf16(x),
 * lo = bf16(x - hi) (x - hi is exact in f32). The kernel (NT = 1) and the split launch (NT > 1) both use
 * this, so every x value is split the same way whatever M is. */
__device__ __forceinline__ uint4
tc_split_record (float4 v)
{
  const __nv_bfloat162 h01 = __floats2bfloat162_rn (v.x, v.y), h23 = __floats2bfloat162_rn (v.z, v.w);
  const float2 f01 = __bfloat1622float2 (h01), f23 = __bfloat1622float2 (h23);
  const __nv_bfloat162 l01 = __floats2bfloat162_rn (v.x - f01.x, v.y - f01.y);
  const __nv_bfloat162 l23 = __floats2bfloat162_rn (v.z - f23.x, v.w - f23.y);
  return make_uint4 (bf16x2_bits (h01), bf16x2_bits (h23), bf16x2_bits (l01), bf16x2_bits (l23));
}

/* Columns c .. c + 3 of x row m for the split launches (zeros past M and past K): one 16-byte load where x
 * allows (vec_x), else one load a column; the same values either way. */
__device__ __forceinline__ float4
tc_load_x4 (const float *x, size_t ldx, int M, int K, int m, int c, int vec_x)
{
  float4 v = make_float4 (0.0f, 0.0f, 0.0f, 0.0f);
  if (m < M) {
    const float *xp = x + (size_t) m * ldx + c;
    if (vec_x && c + 3 < K) {
      v = *reinterpret_cast<const float4 *> (xp);
    } else {
      v.x = c < K ? xp[0] : 0.0f;
      v.y = c + 1 < K ? xp[1] : 0.0f;
      v.z = c + 2 < K ? xp[2] : 0.0f;
      v.w = c + 3 < K ? xp[3] : 0.0f;
    }
  }
  return v;
}

/* y[m, r .. r + 3] (+)= v as tc_store_y does it, one 16-byte store (a.vec_y, r a multiple of 4). */
template <int FMT>
__device__ __forceinline__ void
tc_store_y4 (const TcArgs &a, int m, int64_t r, float4 v)
{
  if (FMT == PPX_CUDA_W_INT8) {
    v.x *= __ldg (a.scales + r);
    v.y *= __ldg (a.scales + r + 1);
    v.z *= __ldg (a.scales + r + 2);
    v.w *= __ldg (a.scales + r + 3);
  }
  float4 *yp = reinterpret_cast<float4 *> (a.y + (size_t) m * a.ldy + r);
  if (a.accumulate) {
    const float4 o = __ldcg (yp); /* through the L2: a persistent kernel may have written y in an earlier phase */
    v = make_float4 (o.x + v.x, o.y + v.y, o.z + v.z, o.w + v.w);
  }
  *yp = v;
}

/* y[m, r] (+)= v, int8's row scale applied (the sum's last step, as the CPU backend's). */
template <int FMT>
__device__ __forceinline__ void
tc_store_y (const TcArgs &a, int m, int64_t r, float v)
{
  if (FMT == PPX_CUDA_W_INT8)
    v *= __ldg (a.scales + r);
  float *yp = a.y + (size_t) m * a.ldy + r;
  *yp = a.accumulate ? __ldcg (yp) + v : v;
}

#endif
