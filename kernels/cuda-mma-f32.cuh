/* CUDA backend: f32 products on the tensor cores with f32-class accuracy, shared by the f32 linear layers
 * (cuda-linear-f32tc.cu) and Mimi's convolutions (cuda-conv-mma.cu); docs/cuda.md, "f32 on the tensor cores".
 *
 * Each f32 operand v is split into hi + lo, hi = round(v) and lo = round(v - hi) (v - hi is exact in f32),
 * and a product a * b is taken as lo_a * hi_b + hi_a * lo_b + hi_a * hi_b (three mma into one f32
 * accumulator, in that order; lo_a * lo_b is dropped), either
 *  - tf32x3: mma.m16n8k8 tf32, hi and lo tf32 (11 significant bits each): hi + lo keeps 21-22 of v's 24 bits,
 *    the dropped term is ~2^-22 of the product, i.e. about f32's own rounding; or
 *  - bf16x3: mma.m16n8k16 bf16 (8 bits each): 16 of 24 bits, the dropped term ~2^-16: ~1e-5 worst case,
 *    a few 1e-6 relative on sums; twice the k per instruction.
 * Products are exact in either (22 or 16 bits); the tensor cores add them in f32 with truncation, so the
 * kernels add one short chunk of k from zero and then add the chunk to an f32 running sum on the CUDA cores.
 * The mode is global (PPX_CUDA_F32_SPLIT=tf32 (default) or bf16, read once; PPX_CUDA_F32_MMA=0 keeps the
 * CUDA-core kernels), never a function of M: every row's arithmetic is the same in any batch. */
#ifndef PPX_CUDA_MMA_F32_CUH
#define PPX_CUDA_MMA_F32_CUH

#include "cuda-common.cuh"

#include <cuda_bf16.h>
#include <stdlib.h>
#include <string.h>

enum { PPX_F32_TF32X3 = 0, PPX_F32_BF16X3 = 1 };

/* -1: the f32 tensor-core kernels are off (PPX_CUDA_F32_MMA=0), else PPX_F32_TF32X3 or PPX_F32_BF16X3. */
static inline int
ppx_f32_mma_mode (void)
{
  static int v = -2;
  if (v == -2) {
    const char *on = getenv ("PPX_CUDA_F32_MMA"), *split = getenv ("PPX_CUDA_F32_SPLIT");
    v = on && on[0] == '0' ? -1 : split && strcmp (split, "bf16") == 0 ? PPX_F32_BF16X3 : PPX_F32_TF32X3;
  }
  return v;
}

/* ---- tf32x3 ---- */

/* v = hi + lo to 22 bits: hi = v rounded to tf32 (to nearest, ties away from zero, as cvt.rna.tf32.f32, whose
 * sm_90 code is five instructions: an infinity test, the add, a select, the mask), here the add and the mask
 * alone; an infinity stays one (its mantissa is zero), a NaN may come out as an infinity, but then lo = v - hi is
 * a NaN, so NaNs still propagate. lo = v - hi (exact in f32) is given to the mma as it is: the tensor cores
 * read the upper 19 bits of a tf32 operand, so lo is truncated to 11 bits, 2^-21 of v at most. */
__device__ __forceinline__ void
tf32_split (float v, uint32_t &hi, uint32_t &lo)
{
  hi = (__float_as_uint (v) + 0x1000u) & 0xffffe000u;
  lo = __float_as_uint (v - __uint_as_float (hi));
}

/* d += a * b, m16n8k8 tf32: a (16 x 8, row) a0 = (g, t), a1 = (g+8, t), a2 = (g, t+4), a3 = (g+8, t+4);
 * b (8 x 8) b0 = (k t, col g), b1 = (k t+4, col g); d c0 = (g, 2t), c1 = (g, 2t+1), c2 = (g+8, 2t),
 * c3 = (g+8, 2t+1), with g = lane / 4, t = lane % 4. */
__device__ __forceinline__ void
mma_tf32 (float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1)
{
  asm ("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
       "{%0,%1,%2,%3};"
       : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
       : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* d += a * b in the split's order: lo_a hi_b, hi_a lo_b, hi_a hi_b */
__device__ __forceinline__ void
mma_tf32x3 (float (&d)[4], const uint32_t (&ah)[4], const uint32_t (&al)[4], const uint32_t (&bh)[2],
            const uint32_t (&bl)[2])
{
  mma_tf32 (d, al, bh[0], bh[1]);
  mma_tf32 (d, ah, bl[0], bl[1]);
  mma_tf32 (d, ah, bh[0], bh[1]);
}

/* ---- bf16x3 ---- */

/* (x, y) = hi + lo as two bf16x2 words (x in the low half) */
__device__ __forceinline__ void
bf16_split2 (float x, float y, uint32_t &hi, uint32_t &lo)
{
  const __nv_bfloat162 h = __floats2bfloat162_rn (x, y);
  const float2 hf = __bfloat1622float2 (h);
  const __nv_bfloat162 l = __floats2bfloat162_rn (x - hf.x, y - hf.y);
  hi = *reinterpret_cast<const uint32_t *> (&h);
  lo = *reinterpret_cast<const uint32_t *> (&l);
}

/* d += a * b, m16n8k16 bf16: a regs (g, 2t..2t+1), (g+8, 2t..), (g, 2t+8..), (g+8, 2t+8..); b regs
 * (k 2t..2t+1, col g), (k 2t+8.., col g); d as for tf32. */
__device__ __forceinline__ void
mma_bf16x1 (float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1)
{
  asm ("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
       "{%0,%1,%2,%3};"
       : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
       : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ void
mma_bf16x3 (float (&d)[4], const uint32_t (&ah)[4], const uint32_t (&al)[4], const uint32_t (&bh)[2],
            const uint32_t (&bl)[2])
{
  mma_bf16x1 (d, al, bh[0], bh[1]);
  mma_bf16x1 (d, ah, bl[0], bl[1]);
  mma_bf16x1 (d, ah, bh[0], bh[1]);
}

/* ---- asynchronous copies (sm_80+): global -> shared, only src_bytes read, the rest zero-filled ---- */

__device__ __forceinline__ void
mf_cp16 (void *smem, const void *gmem, int src_bytes)
{
  const unsigned s = (unsigned) __cvta_generic_to_shared (smem);
  asm volatile ("cp.async.cg.shared.global.L2::128B [%0], [%1], 16, %2;" ::"r"(s), "l"(gmem), "r"(src_bytes)
                : "memory");
}

__device__ __forceinline__ void
mf_cp4 (void *smem, const void *gmem, int src_bytes)
{
  const unsigned s = (unsigned) __cvta_generic_to_shared (smem);
  asm volatile ("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(s), "l"(gmem), "r"(src_bytes) : "memory");
}

__device__ __forceinline__ void
mf_commit (void)
{
  asm volatile ("cp.async.commit_group;" ::: "memory");
}

/* at most N of this thread's commit groups still pending */
template <int N>
__device__ __forceinline__ void
mf_wait (void)
{
  asm volatile ("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

#endif
