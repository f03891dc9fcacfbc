/* CUDA backend: interleaved RoPE and causal attention over per-session ring KV caches.
 *
 * Attention is split-K ("flash-decoding"): the ring of each (session, head) is cut into chunks of
 * physical ring indices, one block of four warps per (head, chunk, session). A block first stores the new
 * k/v rows of this call whose ring index falls in its chunk (converted to the cache's format, rows of a
 * session in order so a later row wins a shared slot, as on the CPU), so no other block ever touches those
 * indices and no separate write launch is needed. Then for each of the session's T query rows the warps
 * stream the chunk's in-window positions (keys are stored after RoPE, so the order inside the window does
 * not matter) in tiles, each warp its own tiles with an online softmax (running max, sum of exp and
 * exp-weighted values, rescaled when the max grows): a tile's K and V rows are loaded together, 16 bytes a
 * lane, and the dot products of a tile's positions are reduced over their lanes with one shuffle per
 * position. The block's four warps are combined in order into a partial (max, sum, Dh sums); a second
 * launch combines the partials of each (row, head) with log-sum-exp rescaling; with a single chunk the
 * block writes the output itself.
 *
 * Head sizes 16..256 that are powers of two take the 16-byte path; other sizes (up to 256) a scalar one.
 * Scratch: the partials, M*T*H*chunks*(Dh+2) floats. See docs/cuda.md ("Attention"). */
#include "cuda-common.cuh"
#include "kv-format.h"

#include <cuda_fp16.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <type_traits>

/* One thread per (row, i < Dh/2): the angle is computed once and applied to q and k of every head.
 * freqs[i] comes from the host (the CPU backend's expf), so the angles are the CPU's bit for bit. */
__global__ void
rope_kernel (float *qkv, const int32_t *pos, size_t rows, int H, int Dh, const float *freqs)
{
  ppx_pdl_enter ();
  const int half = Dh / 2;
  const size_t n = rows * half, width = (size_t) 3 * H * Dh;
  for (size_t idx = blockIdx.x * (size_t) blockDim.x + threadIdx.x; idx < n; idx += (size_t) gridDim.x * blockDim.x) {
    const size_t r = idx / half;
    const int i = (int) (idx % half);
    const float t = (float) pos[r];
    const float ang = freqs[i] * t;
    const float cs = cosf (ang), sn = sinf (ang);
    for (int part = 0; part < 2; part++) {
      float *base = qkv + r * width + (size_t) part * H * Dh;
      for (int h = 0; h < H; h++) {
        float *v = base + (size_t) h * Dh + 2 * i;
        const float re = v[0], im = v[1];
        v[0] = re * cs - im * sn;
        v[1] = re * sn + im * cs;
      }
    }
  }
}

extern "C" int
ppx_cuda_rope (float *qkv, const int32_t *pos, size_t rows, int H, int Dh, const float *freqs, void *stream)
{
  const size_t n = rows * (size_t) (Dh / 2);
  if (n == 0)
    return 0;
  ppx_launch (rope_kernel, ppx_grid_for (n, 256), 256, 0, PPX_CUDA_STREAM (stream), qkv, pos, rows, H, Dh, freqs);
  return ppx_cuda_launched ();
}

#define ATT_THREADS 128
#define ATT_WARPS (ATT_THREADS / 32)
#define ATT_MAX_DH 256
#define ATT_FULL 0xffffffffu

/* ---- storage formats ---- */

template <int KV> struct Kv;
template <> struct Kv<PPX_TENSOR_F32> {
  typedef float T;
  static const int ES = 4;
};
template <> struct Kv<PPX_TENSOR_BF16> {
  typedef uint16_t T;
  static const int ES = 2;
};
template <> struct Kv<PPX_TENSOR_FP8> {
  typedef uint8_t T;
  static const int ES = 1;
};

/* The lane layout for head size DH (0: any size up to ATT_MAX_DH, scalar loads). A group of LPP lanes holds
 * one position's head row (NV loads of VEC values each per lane); a warp is G groups; each group takes U
 * positions per tile (their K and V loads all in flight together), so a warp tile is SPL = G * U positions.
 * After the dot products are reduced, each lane holds the scores of NS positions (REP lanes hold each). */
template <int KV, int DH> struct Shape {
  static const int ES = Kv<KV>::ES;
  static const bool GENERIC = DH == 0;
  static const int VEC = GENERIC ? 1 : 16 / ES;                            /* values per load */
  static const int LPP = GENERIC ? 32 : (DH / VEC < 32 ? DH / VEC : 32);    /* lanes per position */
  static const int NV = GENERIC ? ATT_MAX_DH / 32 : DH / (VEC * LPP);       /* loads per lane per position */
  static const int G = 32 / LPP;                                            /* groups (positions) per warp */
  static const int DPL = NV * VEC;                                          /* dims per lane */
  static const int WORDS = NV * (GENERIC ? 1 : 4);                          /* registers of one position's loads */
  static const int U = 32 / WORDS < 8 ? 32 / WORDS : 8;                     /* positions per group per tile */
  static const int NS = U >= LPP ? U / LPP : 1;                             /* scores per lane after the reduction */
  static const int REP = LPP > U ? LPP / U : 1;                             /* lanes holding each score */
  static const int SPL = G * U;                                             /* positions per warp tile */
  typedef typename Kv<KV>::T T;
  /* what one lane loads for one position */
  typedef typename std::conditional<GENERIC, T, uint4>::type Raw;
};

__device__ __forceinline__ void
unpack (const uint4 &r, float *v, std::integral_constant<int, PPX_TENSOR_F32>)
{
  v[0] = __uint_as_float (r.x);
  v[1] = __uint_as_float (r.y);
  v[2] = __uint_as_float (r.z);
  v[3] = __uint_as_float (r.w);
}

__device__ __forceinline__ void
unpack (const uint4 &r, float *v, std::integral_constant<int, PPX_TENSOR_BF16>)
{
  const uint32_t w[4] = {r.x, r.y, r.z, r.w};
#pragma unroll
  for (int i = 0; i < 4; i++) {
    v[2 * i] = __uint_as_float (w[i] << 16);
    v[2 * i + 1] = __uint_as_float (w[i] & 0xffff0000u);
  }
}

/* e4m3 -> f32 (exact) through f16x2. sm_89 and later: the hardware conversion (one instruction for two
 * values), which gives the value itself. Older architectures (and the compute_80 PTX): an e4m3 byte b becomes
 * the f16 with sign b7 and exponent/mantissa b6..b0 shifted down by one bit, i.e. the value / 256 (the
 * exponent biases differ by 8; subnormals included); the caller multiplies the scale by fp8_unit(). */
__device__ __forceinline__ float
fp8_unit (void)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  return 1.0f;
#else
  return 256.0f;
#endif
}

__device__ __forceinline__ void
unpack (const uint4 &r, float *v, std::integral_constant<int, PPX_TENSOR_FP8>)
{
  const uint32_t w[4] = {r.x, r.y, r.z, r.w};
#pragma unroll
  for (int i = 0; i < 4; i++) {
    uint32_t h[2];
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
    asm ("{\n\t.reg .b16 lo, hi;\n\tmov.b32 {lo, hi}, %2;\n\tcvt.rn.f16x2.e4m3x2 %0, lo;\n\tcvt.rn.f16x2.e4m3x2 %1, hi;\n\t}"
         : "=r"(h[0]), "=r"(h[1])
         : "r"(w[i]));
#else
#pragma unroll
    for (int j = 0; j < 2; j++) {
      const uint32_t p = __byte_perm (w[i], 0u, j ? 0x3424u : 0x1404u); /* two bytes into the high byte of each half */
      h[j] = (p & 0x80008000u) | ((p >> 1) & 0x3f803f80u);
    }
#endif
#pragma unroll
    for (int j = 0; j < 2; j++) {
      __half2 hv;
      memcpy (&hv, &h[j], 4);
      const float2 f = __half22float2 (hv);
      v[4 * i + 2 * j] = f.x;
      v[4 * i + 2 * j + 1] = f.y;
    }
  }
}

__device__ __forceinline__ float
scalar (float x)
{
  return x;
}
__device__ __forceinline__ float
scalar (uint16_t x)
{
  return ppx_kv_from_bf16 (x);
}
__device__ __forceinline__ float
scalar (uint8_t x)
{
  return ppx_kv_from_e4m3 (x);
}

/* The scale an fp8 code times the cache's scale is multiplied by (see unpack); 1 elsewhere. */
template <int KV, int DH>
__device__ __forceinline__ float
code_unit (void)
{
  return KV == PPX_TENSOR_FP8 && DH != 0 ? fp8_unit () : 1.0f;
}

/* Lane li's loads of one head row; p points at the lane's first value of the row (row + li * VEC, or row + li
 * on the generic path). Fast path: load n covers dims [(n*LPP + li)*VEC, +VEC); generic path: dim n*32 + li
 * below Dh. */
template <int KV, int DH>
__device__ __forceinline__ void
load_row (const typename Kv<KV>::T *p, int li, int Dh, typename Shape<KV, DH>::Raw (&raw)[Shape<KV, DH>::NV])
{
  typedef Shape<KV, DH> S;
#pragma unroll
  for (int n = 0; n < S::NV; n++) {
    if constexpr (S::GENERIC)
      raw[n] = n * 32 + li < Dh ? p[n * 32] : (typename S::T) 0;
    else
      raw[n] = *reinterpret_cast<const uint4 *> (p + n * S::LPP * S::VEC);
  }
}

template <int KV, int DH>
__device__ __forceinline__ void
zero_row (typename Shape<KV, DH>::Raw (&raw)[Shape<KV, DH>::NV])
{
  typedef Shape<KV, DH> S;
#pragma unroll
  for (int n = 0; n < S::NV; n++) {
    if constexpr (S::GENERIC)
      raw[n] = (typename S::T) 0;
    else
      raw[n] = make_uint4 (0u, 0u, 0u, 0u);
  }
}

template <int KV, int DH>
__device__ __forceinline__ void
decode_row (const typename Shape<KV, DH>::Raw (&raw)[Shape<KV, DH>::NV], float (&v)[Shape<KV, DH>::DPL])
{
  typedef Shape<KV, DH> S;
#pragma unroll
  for (int n = 0; n < S::NV; n++) {
    if constexpr (S::GENERIC)
      v[n] = scalar (raw[n]);
    else
      unpack (raw[n], v + n * S::VEC, std::integral_constant<int, KV> ());
  }
}

/* The dimension of the lane's value i (the order of qv and acc). */
template <int KV, int DH>
__device__ __forceinline__ int
lane_dim (int li, int i)
{
  typedef Shape<KV, DH> S;
  return S::GENERIC ? i * 32 + li : ((i / S::VEC) * S::LPP + li) * S::VEC + i % S::VEC;
}

/* Sums each of the U partial dot products p[u] of a group over its LPP lanes. Each level (lane distance D)
 * halves the values a lane holds: the lane keeps one half (by bit D of its index) and adds its partner's copy
 * of that half, one shuffle per value kept; once a lane holds one value the levels are plain sums. At the end
 * lane li holds the sums of positions (li * U) / LPP + j in p[j], j < NS. */
template <int N, int D, int U>
__device__ __forceinline__ void
group_reduce (float (&p)[U], int li)
{
  if constexpr (D >= 1) {
    if constexpr (N > 1) {
      const bool hi = (li & D) != 0;
#pragma unroll
      for (int i = 0; i < N / 2; i++) {
        const float keep = hi ? p[i + N / 2] : p[i];
        const float send = hi ? p[i] : p[i + N / 2];
        p[i] = keep + __shfl_xor_sync (ATT_FULL, send, D);
      }
      group_reduce<N / 2, D / 2, U> (p, li);
    } else {
      p[0] += __shfl_xor_sync (ATT_FULL, p[0], D);
      group_reduce<1, D / 2, U> (p, li);
    }
  }
}

/* Converts and stores head h of one new row (Dh f32 values at src) at element offset `at` of the cache;
 * one warp. FP8 also stores the head's scale. */
template <int KV>
__device__ __forceinline__ void
store_row (typename Kv<KV>::T *dst, float *scale, const float *src, int Dh, int lane)
{
  if constexpr (KV == PPX_TENSOR_F32) {
    for (int d = lane; d < Dh; d += 32)
      dst[d] = src[d];
  } else if constexpr (KV == PPX_TENSOR_BF16) {
    for (int d = lane; d < Dh; d += 32)
      dst[d] = ppx_kv_to_bf16 (src[d]);
  } else {
    float amax = 0.0f;
    for (int d = lane; d < Dh; d += 32)
      amax = fmaxf (amax, fabsf (src[d]));
    amax = ppx_warp_max (amax);
    const float inv = ppx_kv_e4m3_inv_scale (amax);
    for (int d = lane; d < Dh; d += 32)
      dst[d] = ppx_kv_to_e4m3 (src[d] * inv);
    if (lane == 0)
      *scale = ppx_kv_e4m3_scale (amax);
  }
}

struct AttnArgs {
  const float *qkv;
  const int32_t *pos, *kv_slot;
  void *kc, *vc;     /* [n_slots, cap, H*Dh] */
  float *ks, *vs;    /* FP8: [n_slots, H, cap] */
  float *out;        /* [M*T, H*Dh] */
  float *part;       /* [M*T*H, n_chunks, Dh + 2] when n_chunks > 1 */
  int T, H, Dh, cap, context, chunk, n_chunks;
};

/* The chunk indices (0..n_pos-1) a query row reads: [a1, b1] and [a2, b2] (empty when a > b). */
struct Window {
  int a1, b1, a2, b2;
};

__device__ __forceinline__ bool
window_has (const Window &w, int k)
{
  return (k >= w.a1 && k <= w.b1) || (k >= w.a2 && k <= w.b2);
}

/* |[a, b] ∩ [lo, hi]| */
__device__ __forceinline__ int
overlap (int a, int b, int lo, int hi)
{
  return max (0, min (b, hi) - max (a, lo) + 1);
}

/* One warp tile: the SPL positions from chunk index k0, U per group, folded into the warp's running softmax
 * (max mrun, sum lsum, exp-weighted values acc). CHECK: some positions are outside the window (or past the
 * chunk); they are neither loaded nor counted. kl/vl: the lane's pointers into the chunk's first position
 * (group gg's row, lane li's values); ks/vs: FP8 scales from the chunk's first position. */
template <int KV, int DH, bool CHECK>
__device__ __forceinline__ void
attend_tile (const typename Kv<KV>::T *kl, const typename Kv<KV>::T *vl, const float *ks, const float *vs, size_t HD,
             int Dh, int k0, int gg, int li, const Window &win, const float (&qv)[Shape<KV, DH>::DPL], float qscale,
             float &mrun, float &lsum, float (&acc)[Shape<KV, DH>::DPL])
{
  typedef Shape<KV, DH> S;
  const float unit = code_unit<KV, DH> ();
  /* every load of the tile first: U positions' K and V rows, the held positions' scales */
  typename S::Raw kr[S::U][S::NV], vr[S::U][S::NV];
#pragma unroll
  for (int u = 0; u < S::U; u++) {
    const size_t off = (size_t) (k0 + u * S::G) * HD;
    if (!CHECK || window_has (win, k0 + u * S::G + gg)) {
      load_row<KV, DH> (kl + off, li, Dh, kr[u]);
      load_row<KV, DH> (vl + off, li, Dh, vr[u]);
    } else {
      zero_row<KV, DH> (kr[u]);
      zero_row<KV, DH> (vr[u]);
    }
  }
  bool ok[S::NS];
  float ksc[S::NS], vsc[S::NS];
#pragma unroll
  for (int j = 0; j < S::NS; j++) {
    const int k = k0 + ((li * S::U) / S::LPP + j) * S::G + gg;
    ok[j] = !CHECK || window_has (win, k);
    ksc[j] = vsc[j] = 1.0f;
    if constexpr (KV == PPX_TENSOR_FP8) {
      ksc[j] = ok[j] ? ks[k] : 0.0f;
      vsc[j] = ok[j] ? vs[k] : 0.0f;
    }
  }
  /* scores: each lane's partial dot products, reduced over the group */
  float p[S::U];
#pragma unroll
  for (int u = 0; u < S::U; u++) {
    float kv[S::DPL];
    decode_row<KV, DH> (kr[u], kv);
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < S::DPL; i++)
      s += qv[i] * kv[i];
    p[u] = s;
  }
  group_reduce<S::U, S::LPP / 2, S::U> (p, li);
  float sc[S::NS], tmax = -INFINITY;
#pragma unroll
  for (int j = 0; j < S::NS; j++) {
    float s = p[j];
    if constexpr (KV == PPX_TENSOR_FP8)
      s = s * (ksc[j] * unit);
    sc[j] = ok[j] ? s * qscale : -INFINITY;
    tmax = fmaxf (tmax, sc[j]);
  }
  /* the running max (the tile has a position in the window, so mnew is finite for finite inputs) */
  const float mnew = fmaxf (mrun, ppx_warp_max (tmax));
  const float corr = expf (mrun - mnew); /* 0 for the first tile */
  mrun = mnew;
  lsum *= corr;
#pragma unroll
  for (int i = 0; i < S::DPL; i++)
    acc[i] *= corr;
  float w[S::NS];
#pragma unroll
  for (int j = 0; j < S::NS; j++) {
    const float e = expf (sc[j] - mnew);
    if (li % S::REP == 0)
      lsum += e;
    w[j] = KV == PPX_TENSOR_FP8 ? e * (vsc[j] * unit) : e;
  }
  /* values: position u's weight from the lane that holds it */
#pragma unroll
  for (int u = 0; u < S::U; u++) {
    const float wu = __shfl_sync (ATT_FULL, w[u % S::NS], gg * S::LPP + (u / S::NS) * S::REP);
    float vv[S::DPL];
    decode_row<KV, DH> (vr[u], vv);
#pragma unroll
    for (int i = 0; i < S::DPL; i++)
      acc[i] += wu * vv[i];
  }
}

/* ---- fp8 on the tensor cores (sm_89 and later, Dh = 128) ----
 *
 * q.K and w.V as mma.sync.m16n8k16 (f16 in, f32 accumulate): e4m3 decodes to f16 exactly (two values an
 * instruction), and f32 operands are carried as two f16 parts, hi + lo, scaled by a power of two first so that
 * the largest is in [2^14, 2^15) and lo rarely goes subnormal (the scale is folded back afterwards). A warp tile
 * is 16 positions (MMA_SUB of them a step). In an mma the lane of group g (lane / 4) and thread t (lane % 4)
 * holds rows g and g + 8 of A, columns (k) 2t, 2t + 1, 2t + 8, 2t + 9 of A and B, column g of B and columns 2t,
 * 2t + 1 of C. The k order inside a k-step is free as long as A and B use the same one, and so is the row order
 * of V's A (the output dims), which lets every lane keep 16-byte loads.
 *  - Scores: A = K (rows: the tile's positions g, g + 8; the lane loads dims [64L + 16t, +16) of both, L = 0, 1),
 *    B = q (8 k-steps; k-step 4L + u, column 2t + e holds dim 64L + 16t + 4u + e, column 2t + 8 + e dim
 *    64L + 16t + 4u + 2 + e), B's even columns q hi and odd ones q lo, so every lane's C holds (hi, lo) sums of
 *    positions g and g + 8: each lane has the whole scores of its two positions.
 *  - Values: A = V transposed (rows: dims, k: the tile's positions); the group g lanes load dims [16g, +16) of
 *    positions 2t, 2t + 1, 2t + 8, 2t + 9 and a byte permute pairs two positions' bytes for each f16x2; mma j
 *    has dim 16g + 2j in row g and 16g + 2j + 1 in row g + 8. B = the weights e^(s - m) * vscale * 2^sw (hi in
 *    even columns, lo in odd: two shuffles of packed halves), sw chosen per tile from the tile's largest V
 *    scale (the accumulators are rescaled by the power of two with the running max's correction). */
#define MMA_SUB 1

__device__ __forceinline__ void
mma_f16 (float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0, uint32_t b1)
{
  asm ("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
       : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
       : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

/* bytes 0, 1 of w -> lo, bytes 2, 3 -> hi, each an f16x2 (the lower byte in the lower half) */
__device__ __forceinline__ void
e4m3x4_f16 (uint32_t w, uint32_t &lo, uint32_t &hi)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  asm ("{\n\t.reg .b16 l, h;\n\tmov.b32 {l, h}, %2;\n\tcvt.rn.f16x2.e4m3x2 %0, l;\n\tcvt.rn.f16x2.e4m3x2 %1, h;\n\t}"
       : "=r"(lo), "=r"(hi)
       : "r"(w));
#else
  lo = hi = 0u; /* not used before sm_89 (the kernel takes the CUDA-core path) */
  (void) w;
#endif
}

/* 2^e as a float, e in [-126, 127] */
__device__ __forceinline__ float
pow2f (int e)
{
  return __int_as_float ((127 + e) << 23);
}

/* The power of two that takes a largest magnitude x (>= 0) into [2^14, 2^15), clamped to [-62, 62]. */
__device__ __forceinline__ int
mma_shift (float x)
{
  const int E = (__float_as_int (x) >> 23) & 0xff; /* x in [2^(E-127), 2^(E-126)) */
  return min (62, max (-62, 141 - E));
}

__device__ __forceinline__ uint32_t
pack_half2 (__half lo, __half hi)
{
  return (uint32_t) __half_as_ushort (lo) | ((uint32_t) __half_as_ushort (hi) << 16);
}

/* x = hi + lo (f16 parts); returns the part of index `which` (0: hi, 1: lo) */
__device__ __forceinline__ __half
split_part (float x, int which)
{
  const __half hi = __float2half_rn (x);
  return which ? __float2half_rn (x - __half2float (hi)) : hi;
}

template <bool CHECK>
__device__ __forceinline__ void
attend_tile_mma (const uint8_t *kc, const uint8_t *vc, const float *ks, const float *vs, int HD, int k0, int g,
                 int t, const Window &win, uint32_t qf, float qmul, float &mrun, float &lsum, int &sw,
                 float (&acc)[8][4])
{
  uint4 kr[MMA_SUB][2][2], vr[MMA_SUB][4];
  float ksc[MMA_SUB][2], vsc[MMA_SUB][2];
  bool ok[MMA_SUB][2];
#pragma unroll
  for (int s = 0; s < MMA_SUB; s++) {
    const int kb = k0 + 16 * s;
#pragma unroll
    for (int r = 0; r < 2; r++) {
      const int k = kb + g + 8 * r;
      ok[s][r] = !CHECK || window_has (win, k);
#pragma unroll
      for (int L = 0; L < 2; L++)
        kr[s][r][L] = ok[s][r] ? *reinterpret_cast<const uint4 *> (kc + k * HD + 64 * L + 16 * t)
                               : make_uint4 (0u, 0u, 0u, 0u);
    }
#pragma unroll
    for (int p = 0; p < 4; p++) {
      const int k = kb + 2 * t + (p & 1) + 8 * (p >> 1);
      vr[s][p] = !CHECK || window_has (win, k) ? *reinterpret_cast<const uint4 *> (vc + k * HD + 16 * g)
                                               : make_uint4 (0u, 0u, 0u, 0u);
    }
#pragma unroll
    for (int r = 0; r < 2; r++) {
      const int k = kb + g + 8 * r;
      ksc[s][r] = ok[s][r] ? ks[k] : 0.0f;
      vsc[s][r] = ok[s][r] ? vs[k] : 0.0f;
    }
  }
  /* scores of positions g and g + 8 of each sub-tile */
  float sc[MMA_SUB][2], tmax = -INFINITY, vmax = 0.0f;
#pragma unroll
  for (int s = 0; s < MMA_SUB; s++) {
    float c[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
#pragma unroll
    for (int L = 0; L < 2; L++) {
      const uint32_t w0[4] = {kr[s][0][L].x, kr[s][0][L].y, kr[s][0][L].z, kr[s][0][L].w};
      const uint32_t w1[4] = {kr[s][1][L].x, kr[s][1][L].y, kr[s][1][L].z, kr[s][1][L].w};
#pragma unroll
      for (int h = 0; h < 2; h++) {
        /* q's B fragments of k-steps 4L + 2h, 4L + 2h + 1 (volatile: not hoisted out of the tile loop) */
        uint32_t b[4];
        asm volatile ("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];"
                      : "=r"(b[0]), "=r"(b[1]), "=r"(b[2]), "=r"(b[3])
                      : "r"(qf + (uint32_t) (2 * L + h) * 32u * 16u));
#pragma unroll
        for (int v = 0; v < 2; v++) {
          const int u = 2 * h + v;
          uint32_t a0, a1, a2, a3;
          e4m3x4_f16 (w0[u], a0, a2);
          e4m3x4_f16 (w1[u], a1, a3);
          mma_f16 (c[L], a0, a1, a2, a3, b[2 * v], b[2 * v + 1]);
        }
      }
    }
#pragma unroll
    for (int r = 0; r < 2; r++) {
      const float d = (c[0][2 * r] + c[1][2 * r]) + (c[0][2 * r + 1] + c[1][2 * r + 1]);
      sc[s][r] = ok[s][r] ? d * (ksc[s][r] * qmul) : -INFINITY;
      tmax = fmaxf (tmax, sc[s][r]);
      vmax = fmaxf (vmax, vsc[s][r]);
    }
  }
  /* over the groups (the four lanes of a group hold the same positions) */
#pragma unroll
  for (int o = 4; o < 32; o <<= 1) {
    tmax = fmaxf (tmax, __shfl_xor_sync (ATT_FULL, tmax, o));
    vmax = fmaxf (vmax, __shfl_xor_sync (ATT_FULL, vmax, o));
  }
  const float mnew = fmaxf (mrun, tmax);
  const int swn = mma_shift (vmax);
  /* corr * 2^(swn - sw), the power of two in two steps (|swn - sw| <= 124) */
  const int ds = swn - sw;
  const float c0 = expf (mrun - mnew); /* 0 for the first tile */
  const float corr = c0 * pow2f (ds / 2) * pow2f (ds - ds / 2);
  mrun = mnew;
  sw = swn;
  lsum *= c0; /* lsum is kept unscaled */
#pragma unroll
  for (int j = 0; j < 8; j++)
#pragma unroll
    for (int i = 0; i < 4; i++)
      acc[j][i] *= corr;
  const float wunit = pow2f (swn);
  const int part = g & 1; /* this lane's B column: hi (even) or lo (odd) */
#pragma unroll
  for (int s = 0; s < MMA_SUB; s++) {
    float e[2];
    __half hp[2];
#pragma unroll
    for (int r = 0; r < 2; r++) {
      e[r] = expf (sc[s][r] - mnew);
      hp[r] = split_part (e[r] * vsc[s][r] * wunit, t & 1);
    }
    lsum += e[0] + e[1];
    /* lanes of thread 0 publish hi, of thread 1 lo: {w(g), w(g + 8)} */
    const uint32_t pub = pack_half2 (hp[0], hp[1]);
    const uint32_t X = __shfl_sync (ATT_FULL, pub, 8 * t + part);     /* positions 2t, 2t + 8 */
    const uint32_t Y = __shfl_sync (ATT_FULL, pub, 8 * t + 4 + part); /* positions 2t + 1, 2t + 9 */
    const uint32_t b0 = __byte_perm (X, Y, 0x5410), b1 = __byte_perm (X, Y, 0x7632);
    const uint32_t P[4] = {vr[s][0].x, vr[s][0].y, vr[s][0].z, vr[s][0].w};
    const uint32_t Q[4] = {vr[s][1].x, vr[s][1].y, vr[s][1].z, vr[s][1].w};
    const uint32_t R[4] = {vr[s][2].x, vr[s][2].y, vr[s][2].z, vr[s][2].w};
    const uint32_t S[4] = {vr[s][3].x, vr[s][3].y, vr[s][3].z, vr[s][3].w};
#pragma unroll
    for (int j = 0; j < 8; j++) {
      const uint32_t sel = (j & 1) ? 0x7362u : 0x5140u;
      uint32_t a0, a1, a2, a3;
      e4m3x4_f16 (__byte_perm (P[j / 2], Q[j / 2], sel), a0, a1);
      e4m3x4_f16 (__byte_perm (R[j / 2], S[j / 2], sel), a2, a3);
      mma_f16 (acc[j], a0, a1, a2, a3, b0, b1);
    }
  }
}

/* Block (head h, chunk c, session m): the heads of a chunk are neighbours in the launch order, so the blocks
 * that run together read the same cache rows (all heads of a position are one contiguous row). */
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
#define ATT_E4M3_CVT 1
#else
#define ATT_E4M3_CVT 0
#endif

template <int KV, int DH, bool MMA>
__global__ void __launch_bounds__ (ATT_THREADS, 4)
attention_split_kernel (AttnArgs a)
{
  ppx_pdl_enter ();
  typedef Shape<KV, DH> S;
  constexpr bool TC = MMA && KV == PPX_TENSOR_FP8 && DH == 128 && ATT_E4M3_CVT;
  typedef typename Kv<KV>::T T;
  __shared__ float wacc[ATT_WARPS][ATT_MAX_DH]; /* each warp's exp-weighted sums, */
  __shared__ float wml[ATT_WARPS][2];           /* its max and sum of exp */
  const int h = blockIdx.x, c = blockIdx.y, m = blockIdx.z;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int gg = lane / S::LPP, li = lane % S::LPP;
  const int T_ = a.T, H = a.H, Dh = DH ? DH : a.Dh, cap = a.cap;
  const size_t HD = (size_t) H * Dh;
  const int r0 = c * a.chunk, n_pos = min (a.chunk, cap - r0);
  const int slot = a.kv_slot[m];
  T *kc = (T *) a.kc + (size_t) slot * cap * HD + (size_t) h * Dh;
  T *vc = (T *) a.vc + (size_t) slot * cap * HD + (size_t) h * Dh;
  float *ks = KV == PPX_TENSOR_FP8 ? a.ks + ((size_t) slot * H + h) * cap : NULL;
  float *vs = KV == PPX_TENSOR_FP8 ? a.vs + ((size_t) slot * H + h) * cap : NULL;
  const int32_t *pos = a.pos + (size_t) m * T_;

  /* this call's rows whose ring index is in the chunk, in order */
  if (warp == 0) {
    for (int t = 0; t < T_; t++) {
      const int r = pos[t] % cap;
      if (r < r0 || r >= r0 + n_pos)
        continue;
      const float *x = a.qkv + ((size_t) m * T_ + t) * 3 * HD + (size_t) h * Dh;
      store_row<KV> (kc + (size_t) r * HD, ks ? ks + r : NULL, x + HD, Dh, lane);
      store_row<KV> (vc + (size_t) r * HD, vs ? vs + r : NULL, x + 2 * HD, Dh, lane);
    }
  }
  __syncthreads ();

  /* The position held at ring index r0 + k, relative to the session's last position E - 1: rel0 + k for
   * k <= back0, rel0 + k - cap after (rel0 = -back0, in [-(cap - 1), 0]). */
  const int64_t E = (int64_t) pos[T_ - 1] + 1;
  const int back0 = (int) (((E - 1 - r0) % cap + cap) % cap);
  const int rel0 = -back0;
  const float att_scale = 1.0f / sqrtf ((float) Dh);
  const size_t lane_off = (size_t) gg * HD + (size_t) li * (S::GENERIC ? 1 : S::VEC);
  const T *kl = kc + (size_t) r0 * HD + lane_off, *vl = vc + (size_t) r0 * HD + lane_off;
  const float *ksr = ks ? ks + r0 : NULL, *vsr = vs ? vs + r0 : NULL;
  const int n_tiles = (n_pos + S::SPL - 1) / S::SPL;

  for (int t = 0; t < T_; t++) {
    const size_t row = (size_t) m * T_ + t;
    const int64_t q = pos[t];
    const int64_t lo = max (max ((int64_t) 0, E - cap + 1), q - a.context + 1);
    /* window [lo, q] relative to E - 1 (clamped: an empty window has rlo > rhi), then as chunk indices */
    const int rhi = (int) min ((int64_t) 0, max ((int64_t) -cap, q - (E - 1)));
    const int rlo = (int) min ((int64_t) 1, max ((int64_t) -cap, lo - (E - 1)));
    const Window win = {max (0, rlo - rel0), min (min (back0, rhi - rel0), n_pos - 1), max (back0 + 1, rlo - rel0 + cap),
                        min (n_pos - 1, rhi - rel0 + cap)};
    float *part = a.n_chunks > 1 ? a.part + ((row * H + h) * a.n_chunks + c) * (Dh + 2) : NULL;
    float *out = a.out + row * HD + (size_t) h * Dh;

    if (overlap (win.a1, win.b1, 0, n_pos - 1) + overlap (win.a2, win.b2, 0, n_pos - 1) == 0) {
      /* nothing of this row's window in the chunk */
      for (int d = threadIdx.x; d < Dh; d += ATT_THREADS) {
        if (a.n_chunks == 1)
          out[d] = 0.0f;
        else
          part[2 + d] = 0.0f;
      }
      if (a.n_chunks > 1 && threadIdx.x == 0) {
        part[0] = -INFINITY;
        part[1] = 0.0f;
      }
      continue;
    }

    float mrun = -INFINITY, lsum = 0.0f;
    if constexpr (TC) {
      /* q of the lane's dims (64L + 16t + i), split into hi (even groups) or lo (odd groups) parts */
      const int g = lane >> 2, t = lane & 3;
      const float *qr = a.qkv + row * 3 * HD + (size_t) h * Dh;
      float qx[32], qa = 0.0f;
#pragma unroll
      for (int L = 0; L < 2; L++)
#pragma unroll
        for (int i = 0; i < 4; i++) {
          const float4 v = *reinterpret_cast<const float4 *> (qr + 64 * L + 16 * t + 4 * i);
          qx[16 * L + 4 * i] = v.x;
          qx[16 * L + 4 * i + 1] = v.y;
          qx[16 * L + 4 * i + 2] = v.z;
          qx[16 * L + 4 * i + 3] = v.w;
        }
#pragma unroll
      for (int i = 0; i < 32; i++)
        qa = fmaxf (qa, fabsf (qx[i]));
      qa = fmaxf (qa, __shfl_xor_sync (ATT_FULL, qa, 1));
      qa = fmaxf (qa, __shfl_xor_sync (ATT_FULL, qa, 2));
      const int sq = mma_shift (qa);
      const float qu = pow2f (sq);
      /* kept in shared memory (each lane reads back only its own words, per k-step group): 16 registers fewer
       * in the tile loop, which otherwise spills under the 128-register bound */
      __shared__ uint4 qsm[ATT_WARPS][4][32];
#pragma unroll
      for (int i = 0; i < 4; i++) {
        uint32_t f[4];
#pragma unroll
        for (int j = 0; j < 4; j++)
          f[j] = pack_half2 (split_part (qx[8 * i + 2 * j] * qu, g & 1), split_part (qx[8 * i + 2 * j + 1] * qu, g & 1));
        qsm[warp][i][lane] = make_uint4 (f[0], f[1], f[2], f[3]);
      }
      const uint32_t qf = (uint32_t) __cvta_generic_to_shared (&qsm[warp][0][lane]);
      const float qmul = att_scale * pow2f (-sq);
      float acc[8][4];
#pragma unroll
      for (int j = 0; j < 8; j++)
        acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
      int sw = 0;
      const uint8_t *kb = (const uint8_t *) kc + (size_t) r0 * HD, *vb = (const uint8_t *) vc + (size_t) r0 * HD;
      const int spl = 16 * MMA_SUB, nt = (n_pos + spl - 1) / spl;
      for (int tile = warp; tile < nt; tile += ATT_WARPS) {
        const int k0 = tile * spl, k1 = k0 + spl - 1;
        const int n = overlap (win.a1, win.b1, k0, k1) + overlap (win.a2, win.b2, k0, k1);
        if (n == spl)
          attend_tile_mma<false> (kb, vb, ksr, vsr, (int) HD, k0, g, t, win, qf, qmul, mrun, lsum, sw, acc);
        else if (n > 0)
          attend_tile_mma<true> (kb, vb, ksr, vsr, (int) HD, k0, g, t, win, qf, qmul, mrun, lsum, sw, acc);
      }
      /* the groups hold different positions (the four lanes of a group the same ones) */
#pragma unroll
      for (int o = 4; o < 32; o <<= 1)
        lsum += __shfl_xor_sync (ATT_FULL, lsum, o);
      if (t == 0) {
        const float f = pow2f (-sw);
#pragma unroll
        for (int j = 0; j < 8; j++) {
          wacc[warp][16 * g + 2 * j] = (acc[j][0] + acc[j][1]) * f;
          wacc[warp][16 * g + 2 * j + 1] = (acc[j][2] + acc[j][3]) * f;
        }
      }
    } else {
      float qv[S::DPL], acc[S::DPL];
      {
        const float *qr = a.qkv + row * 3 * HD + (size_t) h * Dh;
#pragma unroll
        for (int i = 0; i < S::DPL; i++) {
          const int d = lane_dim<KV, DH> (li, i);
          qv[i] = d < Dh ? qr[d] : 0.0f;
          acc[i] = 0.0f;
        }
      }
      /* the warp's tiles (warp w takes tiles w, w + ATT_WARPS, ...), an online softmax over them */
      for (int tile = warp; tile < n_tiles; tile += ATT_WARPS) {
        const int k0 = tile * S::SPL, k1 = k0 + S::SPL - 1;
        const int n = overlap (win.a1, win.b1, k0, k1) + overlap (win.a2, win.b2, k0, k1);
        if (n == S::SPL)
          attend_tile<KV, DH, false> (kl, vl, ksr, vsr, HD, Dh, k0, gg, li, win, qv, att_scale, mrun, lsum, acc);
        else if (n > 0)
          attend_tile<KV, DH, true> (kl, vl, ksr, vsr, HD, Dh, k0, gg, li, win, qv, att_scale, mrun, lsum, acc);
      }
      /* the warp's groups hold the same dims of different positions: sum them, then the lanes' sums of exp */
#pragma unroll
      for (int o = S::LPP; o < 32; o <<= 1) {
#pragma unroll
        for (int i = 0; i < S::DPL; i++)
          acc[i] += __shfl_xor_sync (ATT_FULL, acc[i], o);
      }
      lsum = ppx_warp_sum (lsum);
      if (gg == 0) {
#pragma unroll
        for (int i = 0; i < S::DPL; i++) {
          const int d = lane_dim<KV, DH> (li, i);
          if (d < Dh)
            wacc[warp][d] = acc[i];
        }
      }
    }
    if (lane == 0) {
      wml[warp][0] = mrun;
      wml[warp][1] = lsum;
    }
    __syncthreads ();
    /* the block's warps, in order, rescaled to their common max */
    float mx = -INFINITY;
#pragma unroll
    for (int w = 0; w < ATT_WARPS; w++)
      if (wml[w][1] > 0.0f)
        mx = fmaxf (mx, wml[w][0]);
    float coef[ATT_WARPS], sum = 0.0f;
#pragma unroll
    for (int w = 0; w < ATT_WARPS; w++) {
      coef[w] = wml[w][1] > 0.0f ? expf (wml[w][0] - mx) : 0.0f;
      sum += coef[w] * wml[w][1];
    }
    for (int d = threadIdx.x; d < Dh; d += ATT_THREADS) {
      float o = 0.0f;
#pragma unroll
      for (int w = 0; w < ATT_WARPS; w++)
        o += coef[w] * wacc[w][d];
      if (a.n_chunks == 1)
        out[d] = sum > 0.0f ? o / sum : 0.0f;
      else
        part[2 + d] = o;
    }
    if (a.n_chunks > 1 && threadIdx.x == 0) {
      part[0] = sum > 0.0f ? mx : -INFINITY;
      part[1] = sum;
    }
    __syncthreads (); /* wacc and wml are reused by the next row */
  }
}

/* One block per (row, head): out = sum_c e^(m_c - M) acc_c / sum_c e^(m_c - M) l_c. */
__global__ void
attention_combine_kernel (const float *part, float *out, int H, int Dh, int n_chunks)
{
  ppx_pdl_enter ();
  const size_t rh = blockIdx.x;
  const size_t row = rh / H, h = rh % H;
  const float *p = part + rh * n_chunks * (Dh + 2);
  float gm = -INFINITY;
  for (int c = 0; c < n_chunks; c++)
    if (p[(size_t) c * (Dh + 2) + 1] > 0.0f)
      gm = fmaxf (gm, p[(size_t) c * (Dh + 2)]);
  float L = 0.0f;
  for (int c = 0; c < n_chunks; c++) {
    const float l = p[(size_t) c * (Dh + 2) + 1];
    if (l > 0.0f)
      L += expf (p[(size_t) c * (Dh + 2)] - gm) * l;
  }
  for (int d = threadIdx.x; d < Dh; d += blockDim.x) {
    float o = 0.0f;
    for (int c = 0; c < n_chunks; c++) {
      const float *pc = p + (size_t) c * (Dh + 2);
      if (pc[1] > 0.0f)
        o += expf (pc[0] - gm) * pc[2 + d];
    }
    out[row * H * Dh + h * Dh + d] = L > 0.0f ? o / L : 0.0f;
  }
}

/* ---- plan and launch ---- */

typedef struct {
  int chunk, n_chunks;
} Plan;

/* The chunk plan depends on the cache's capacity only, never on M (or the GPU): every row's partial sums and
 * their combination are then the same operations at any batch size, so a batched step gives each session the
 * bits of its one-session step (the engine's requirement, docs/engine.md). 256 positions a chunk for the
 * temporal transformer's long rings (12 chunks at cap 3000: 384 blocks of 32 heads at M = 1, all resident at
 * once on an H100; 24576 at M = 64), 128 for rings under 1024 (Mimi's 250: two chunks), one chunk for rings of
 * at most 128 (the depformer's). PPX_CUDA_ATTENTION_CHUNK=N (a benchmarking knob, read once) sets the chunk of
 * rings of 1024 or more instead; it stays a function of the capacity within a process. */
static int
chunk_override (void)
{
  static int cached = -1;
  int v = __atomic_load_n (&cached, __ATOMIC_RELAXED);
  if (v < 0) {
    const char *env = getenv ("PPX_CUDA_ATTENTION_CHUNK");
    v = env && *env ? atoi (env) : 0;
    if (v < 0)
      v = 0;
    __atomic_store_n (&cached, v, __ATOMIC_RELAXED);
  }
  return v;
}

static Plan
plan (int cap)
{
  int chunk = cap >= 1024 ? (chunk_override () ? chunk_override () : 256) : 128;
  if (chunk > cap)
    chunk = cap;
  Plan p = {chunk, (cap + chunk - 1) / chunk};
  return p;
}

extern "C" size_t
ppx_cuda_attention_scratch_floats (int M, int T, int H, int Dh, int cap)
{
  if (M <= 0 || T <= 0 || H <= 0 || Dh <= 0 || cap <= 0)
    return 0;
  const Plan p = plan (cap);
  return p.n_chunks > 1 ? (size_t) M * T * H * p.n_chunks * (Dh + 2) : 0;
}

/* PPX_CUDA_ATTENTION_FP8_MMA=0 (a benchmarking knob, read once) keeps fp8 caches on the CUDA cores. */
static bool
fp8_mma (void)
{
  static int cached = -1;
  int v = __atomic_load_n (&cached, __ATOMIC_RELAXED);
  if (v < 0) {
    const char *env = getenv ("PPX_CUDA_ATTENTION_FP8_MMA");
    v = env && *env ? atoi (env) != 0 : 1;
    __atomic_store_n (&cached, v, __ATOMIC_RELAXED);
  }
  return v != 0;
}

template <int KV>
static void
launch_fmt (const AttnArgs &a, int M, cudaStream_t s)
{
  typedef void (*Kern) (AttnArgs);
  Kern k;
  switch (a.Dh) {
    case 16:
      k = attention_split_kernel<KV, 16, false>;
      break;
    case 32:
      k = attention_split_kernel<KV, 32, false>;
      break;
    case 64:
      k = attention_split_kernel<KV, 64, false>;
      break;
    case 128:
      k = KV == PPX_TENSOR_FP8 && fp8_mma () ? attention_split_kernel<KV, 128, true> : attention_split_kernel<KV, 128, false>;
      break;
    case 256:
      k = attention_split_kernel<KV, 256, false>;
      break;
    default:
      k = attention_split_kernel<KV, 0, false>;
      break;
  }
  dim3 grid ((unsigned) a.H, (unsigned) a.n_chunks, (unsigned) M);
  ppx_launch (k, grid, ATT_THREADS, 0, s, a);
}

extern "C" int
ppx_cuda_attention (PpxTensorType kv_type, const float *qkv, const int32_t *pos, const int32_t *kv_slot, void *kcache,
                    void *vcache, float *kscales, float *vscales, float *out, int M, int T, int H, int Dh, int cap,
                    int context, float *scratch, void *stream)
{
  if (M <= 0 || T <= 0 || H <= 0 || Dh <= 0)
    return 0;
  if (Dh > ATT_MAX_DH || cap <= 0 || M > 65535)
    return (int) cudaErrorInvalidValue;
  cudaStream_t s = PPX_CUDA_STREAM (stream);
  const Plan p = plan (cap);
  if (p.n_chunks > 65535)
    return (int) cudaErrorInvalidValue;
  AttnArgs a = {qkv, pos, kv_slot, kcache, vcache, kscales, vscales, out, scratch, T, H, Dh, cap, context,
                p.chunk, p.n_chunks};
  switch (kv_type) {
    case PPX_TENSOR_F32:
      launch_fmt<PPX_TENSOR_F32> (a, M, s);
      break;
    case PPX_TENSOR_BF16:
      launch_fmt<PPX_TENSOR_BF16> (a, M, s);
      break;
    case PPX_TENSOR_FP8:
      launch_fmt<PPX_TENSOR_FP8> (a, M, s);
      break;
    default:
      return (int) cudaErrorInvalidValue;
  }
  int e = ppx_cuda_launched ();
  if (e || p.n_chunks == 1)
    return e;
  const unsigned threads = Dh >= 128 ? 128 : (unsigned) ((Dh + 31) / 32 * 32);
  ppx_launch (attention_combine_kernel, (unsigned) ((size_t) M * T * H), threads, 0, s, scratch, out, H, Dh, p.n_chunks);
  return ppx_cuda_launched ();
}
