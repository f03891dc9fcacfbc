/* CUDA backend: interleaved RoPE and causal attention over per-session ring KV caches.
 *
 * Attention is split-K ("flash-decoding"): the ring of each (session, head) is cut into chunks of
 * physical ring indices, one block per (chunk, head, session). A block first stores the new k/v rows of
 * this call whose ring index falls in its chunk (converted to the cache's format, rows of a session in
 * order so a later row wins a shared slot, as on the CPU), so no other block ever touches those indices
 * and no separate write launch is needed. Then for each of the session's T query rows it scores the
 * ring indices of its chunk whose position lies in the row's window (keys are stored after RoPE, so
 * the order inside the window does not matter), takes the chunk's max and sum of exp, accumulates the
 * exp-weighted values, and writes a partial (max, sum, Dh sums). A second launch combines the partials
 * of each (row, head) with log-sum-exp rescaling; with a single chunk the block writes the output itself.
 *
 * Reads are 16-byte loads: a group of Dh*size/16 lanes (at most 32) holds one position's head row, each
 * lane a 16-byte piece (4 f32, 8 bf16 or 16 e4m3 values) and the matching q values in registers; a
 * group reduces its dot product with shuffles. Head sizes 16..256 that are powers of two take that path;
 * other sizes (up to 256) a scalar one. Scratch: the partials, M*T*H*chunks*(Dh+2) floats (no score
 * buffer over the whole cache). See docs/cuda.md. */
#include "cuda-common.cuh"
#include "kv-format.h"

#include <cuda_fp16.h>
#include <math.h>
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
#define ATT_MAX_CHUNK 1024 /* positions per block: its scores live in shared memory */
#define ATT_UNROLL 4       /* positions per group in flight */
#define ATT_MAX_DH 256

/* ---- storage formats ---- */

template <int KV> struct Kv;
template <> struct Kv<PPX_CUDA_KV_F32> {
  typedef float T;
  static const int ES = 4;
};
template <> struct Kv<PPX_CUDA_KV_BF16> {
  typedef uint16_t T;
  static const int ES = 2;
};
template <> struct Kv<PPX_CUDA_KV_FP8> {
  typedef uint8_t T;
  static const int ES = 1;
};

/* The lane layout for head size DH (0: any size up to ATT_MAX_DH, scalar loads). */
template <int KV, int DH> struct Shape {
  static const int ES = Kv<KV>::ES;
  static const bool GENERIC = DH == 0;
  static const int VEC = GENERIC ? 1 : 16 / ES;                            /* values per load */
  static const int LPP = GENERIC ? 32 : (DH / VEC < 32 ? DH / VEC : 32);    /* lanes per position */
  static const int NV = GENERIC ? ATT_MAX_DH / 32 : DH / (VEC * LPP);       /* loads per lane per position */
  static const int PPW = 32 / LPP;                                          /* positions per warp */
  static const int GROUPS = PPW * ATT_WARPS;                                /* positions per block step */
  static const int DPL = NV * VEC;                                          /* dims per lane */
  static constexpr float FP8_UNIT = GENERIC ? 1.0f : 256.0f;                /* see unpack */
  typedef typename Kv<KV>::T T;
  /* what one lane loads for one position */
  typedef typename std::conditional<GENERIC, T, uint4>::type Raw;
};

__device__ __forceinline__ void
unpack (const uint4 &r, float *v, std::integral_constant<int, PPX_CUDA_KV_F32>)
{
  v[0] = __uint_as_float (r.x);
  v[1] = __uint_as_float (r.y);
  v[2] = __uint_as_float (r.z);
  v[3] = __uint_as_float (r.w);
}

__device__ __forceinline__ void
unpack (const uint4 &r, float *v, std::integral_constant<int, PPX_CUDA_KV_BF16>)
{
  const uint32_t w[4] = {r.x, r.y, r.z, r.w};
#pragma unroll
  for (int i = 0; i < 4; i++) {
    v[2 * i] = __uint_as_float (w[i] << 16);
    v[2 * i + 1] = __uint_as_float (w[i] & 0xffff0000u);
  }
}

/* e4m3 -> f32 through f16 bits (exact, any architecture): an e4m3 byte b becomes the f16 with sign b7 and
 * exponent/mantissa b6..b0 shifted down by one bit, i.e. the value / 256 (the exponent biases differ by
 * 8; subnormals included). The caller multiplies the scale by 256 (FP8_UNIT). */
__device__ __forceinline__ void
unpack (const uint4 &r, float *v, std::integral_constant<int, PPX_CUDA_KV_FP8>)
{
  const uint32_t w[4] = {r.x, r.y, r.z, r.w};
#pragma unroll
  for (int i = 0; i < 4; i++) {
#pragma unroll
    for (int j = 0; j < 2; j++) {
      const uint32_t p = __byte_perm (w[i], 0u, j ? 0x3424u : 0x1404u); /* two bytes into the high byte of each half */
      const uint32_t hbits = (p & 0x80008000u) | ((p >> 1) & 0x3f803f80u);
      __half2 hv;
      memcpy (&hv, &hbits, 4);
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

/* Lane li's loads of one head row (DH values at `row`). Fast path: load n covers dims
 * [(n*LPP + li)*VEC, +VEC); generic path: dims n*32 + li below Dh. */
template <int KV, int DH>
__device__ __forceinline__ void
load_row (const typename Kv<KV>::T *row, int li, int Dh, typename Shape<KV, DH>::Raw (&raw)[Shape<KV, DH>::NV])
{
  typedef Shape<KV, DH> S;
#pragma unroll
  for (int n = 0; n < S::NV; n++) {
    if constexpr (S::GENERIC) {
      const int d = n * 32 + li;
      raw[n] = d < Dh ? row[d] : (typename S::T) 0;
    } else {
      raw[n] = *reinterpret_cast<const uint4 *> (row + (n * S::LPP + li) * S::VEC);
    }
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

/* Converts and stores head h of one new row (Dh f32 values at src) at element offset `at` of the cache;
 * one warp. FP8 also stores the head's scale. */
template <int KV>
__device__ __forceinline__ void
store_row (typename Kv<KV>::T *dst, float *scale, const float *src, int Dh, int lane)
{
  if constexpr (KV == PPX_CUDA_KV_F32) {
    for (int d = lane; d < Dh; d += 32)
      dst[d] = src[d];
  } else if constexpr (KV == PPX_CUDA_KV_BF16) {
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

/* Block (chunk c, head h, session m). */
template <int KV, int DH>
__global__ void __launch_bounds__ (ATT_THREADS)
attention_split_kernel (AttnArgs a)
{
  ppx_pdl_enter ();
  typedef Shape<KV, DH> S;
  typedef typename Kv<KV>::T T;
  extern __shared__ float smem[]; /* scores[chunk], then the group sums [GROUPS][Dh] */
  __shared__ float red[32];
  const int c = blockIdx.x, h = blockIdx.y, m = blockIdx.z;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = warp * S::PPW + lane / S::LPP, li = lane % S::LPP;
  const int T_ = a.T, H = a.H, Dh = DH ? DH : a.Dh, cap = a.cap;
  const size_t HD = (size_t) H * Dh;
  const int r0 = c * a.chunk, n_pos = min (a.chunk, cap - r0);
  float *sc = smem, *gsum = smem + a.chunk;
  const int slot = a.kv_slot[m];
  T *kc = (T *) a.kc + (size_t) slot * cap * HD + (size_t) h * Dh;
  T *vc = (T *) a.vc + (size_t) slot * cap * HD + (size_t) h * Dh;
  float *ks = KV == PPX_CUDA_KV_FP8 ? a.ks + ((size_t) slot * H + h) * cap : NULL;
  float *vs = KV == PPX_CUDA_KV_FP8 ? a.vs + ((size_t) slot * H + h) * cap : NULL;
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

  /* The position held at ring index r0 + k, relative to the session's last position E - 1: in
   * [-(cap - 1), 0]; stepping k by one adds one, wrapping from 0 down by cap. */
  const int64_t E = (int64_t) pos[T_ - 1] + 1;
  const int64_t back0 = ((E - 1 - r0) % cap + cap) % cap;
  const int rel0 = (int) -back0;
  const float att_scale = 1.0f / sqrtf ((float) Dh);

  for (int t = 0; t < T_; t++) {
    const size_t row = (size_t) m * T_ + t;
    const int64_t q = pos[t];
    const int64_t lo = max (max ((int64_t) 0, E - cap + 1), q - a.context + 1);
    /* window [lo, q] relative to E - 1 (clamped: an empty window has rlo > rhi) */
    const int rhi = (int) min ((int64_t) 0, max ((int64_t) -cap, q - (E - 1)));
    const int rlo = (int) min ((int64_t) 1, max ((int64_t) -cap, lo - (E - 1)));

    float qv[S::DPL];
    {
      const float *qr = a.qkv + row * 3 * HD + (size_t) h * Dh;
#pragma unroll
      for (int n = 0; n < S::NV; n++) {
#pragma unroll
        for (int i = 0; i < S::VEC; i++) {
          const int d = S::GENERIC ? n * 32 + li : (n * S::LPP + li) * S::VEC + i;
          qv[n * S::VEC + i] = d < Dh ? qr[d] : 0.0f;
        }
      }
    }

    /* scores of the chunk's in-window positions (others -inf) and their max */
    float mx = -INFINITY;
    for (int base = 0; base < n_pos; base += S::GROUPS * ATT_UNROLL) {
      typename S::Raw raw[ATT_UNROLL][S::NV];
      bool ok[ATT_UNROLL];
      float ksc[ATT_UNROLL];
#pragma unroll
      for (int u = 0; u < ATT_UNROLL; u++) {
        const int k = base + u * S::GROUPS + g;
        int rel = rel0 + k;
        rel = rel > 0 ? rel - cap : rel;
        ok[u] = k < n_pos && rel >= rlo && rel <= rhi;
        ksc[u] = 1.0f;
        if (ok[u]) {
          load_row<KV, DH> (kc + (size_t) (r0 + k) * HD, li, Dh, raw[u]);
          if constexpr (KV == PPX_CUDA_KV_FP8)
            ksc[u] = ks[r0 + k] * S::FP8_UNIT;
        }
      }
#pragma unroll
      for (int u = 0; u < ATT_UNROLL; u++) {
        const int k = base + u * S::GROUPS + g;
        float s = 0.0f;
        if (ok[u]) {
          float kv[S::DPL];
          decode_row<KV, DH> (raw[u], kv);
#pragma unroll
          for (int i = 0; i < S::DPL; i++)
            s += qv[i] * kv[i];
        }
#pragma unroll
        for (int o = S::LPP / 2; o > 0; o >>= 1)
          s += __shfl_xor_sync (0xffffffffu, s, o);
        if (ok[u]) {
          s = s * ksc[u] * att_scale;
          mx = fmaxf (mx, s);
        }
        if (li == 0 && k < n_pos)
          sc[k] = ok[u] ? s : -INFINITY;
      }
    }
    mx = ppx_block_max (mx, red); /* its barriers also publish the scores */

    if (mx == -INFINITY) { /* nothing of this row's window in the chunk */
      for (int d = threadIdx.x; d < Dh; d += ATT_THREADS) {
        if (a.n_chunks == 1)
          a.out[row * HD + (size_t) h * Dh + d] = 0.0f;
        else
          a.part[((row * H + h) * a.n_chunks + c) * (Dh + 2) + 2 + d] = 0.0f;
      }
      if (a.n_chunks > 1 && threadIdx.x == 0) {
        float *p = a.part + ((row * H + h) * a.n_chunks + c) * (Dh + 2);
        p[0] = -INFINITY;
        p[1] = 0.0f;
      }
      __syncthreads ();
      continue;
    }

    float sum = 0.0f;
    for (int k = threadIdx.x; k < n_pos; k += ATT_THREADS) {
      const float e = sc[k] == -INFINITY ? 0.0f : expf (sc[k] - mx);
      sc[k] = e;
      sum += e;
    }
    sum = ppx_block_sum (sum, red); /* publishes the weights */

    /* exp-weighted values */
    float acc[S::DPL];
#pragma unroll
    for (int i = 0; i < S::DPL; i++)
      acc[i] = 0.0f;
    for (int base = 0; base < n_pos; base += S::GROUPS * ATT_UNROLL) {
      typename S::Raw raw[ATT_UNROLL][S::NV];
      float w[ATT_UNROLL];
#pragma unroll
      for (int u = 0; u < ATT_UNROLL; u++) {
        const int k = base + u * S::GROUPS + g;
        w[u] = k < n_pos ? sc[k] : 0.0f;
        if (w[u] != 0.0f) {
          load_row<KV, DH> (vc + (size_t) (r0 + k) * HD, li, Dh, raw[u]);
          if constexpr (KV == PPX_CUDA_KV_FP8)
            w[u] *= vs[r0 + k] * S::FP8_UNIT;
        }
      }
#pragma unroll
      for (int u = 0; u < ATT_UNROLL; u++) {
        if (w[u] != 0.0f) {
          float vv[S::DPL];
          decode_row<KV, DH> (raw[u], vv);
#pragma unroll
          for (int i = 0; i < S::DPL; i++)
            acc[i] += w[u] * vv[i];
        }
      }
    }
    /* sum the groups' accumulators (fixed order) */
    if (li < S::LPP) {
#pragma unroll
      for (int n = 0; n < S::NV; n++) {
#pragma unroll
        for (int i = 0; i < S::VEC; i++) {
          const int d = S::GENERIC ? n * 32 + li : (n * S::LPP + li) * S::VEC + i;
          if (d < Dh)
            gsum[g * Dh + d] = acc[n * S::VEC + i];
        }
      }
    }
    __syncthreads ();
    for (int d = threadIdx.x; d < Dh; d += ATT_THREADS) {
      float o = 0.0f;
      for (int j = 0; j < S::GROUPS; j++)
        o += gsum[j * Dh + d];
      if (a.n_chunks == 1)
        a.out[row * HD + (size_t) h * Dh + d] = o / sum;
      else
        a.part[((row * H + h) * a.n_chunks + c) * (Dh + 2) + 2 + d] = o;
    }
    if (a.n_chunks > 1 && threadIdx.x == 0) {
      float *p = a.part + ((row * H + h) * a.n_chunks + c) * (Dh + 2);
      p[0] = mx;
      p[1] = sum;
    }
    __syncthreads (); /* sc and gsum are reused by the next row */
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
 * temporal transformer's long rings (12 chunks at cap 3000: 384 blocks of 32 heads at M = 1, a few per SM;
 * 24576 at M = 64), 128 for rings under 1024 (Mimi's 250: two chunks), one chunk for rings of at most 128
 * (the depformer's). */
static Plan
plan (int cap)
{
  int chunk = cap >= 1024 ? 256 : 128;
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

template <int KV>
static void
launch_fmt (const AttnArgs &a, int M, cudaStream_t s)
{
  typedef void (*Kern) (AttnArgs);
  Kern k;
  int groups;
  switch (a.Dh) {
#define CASE(D)                                                                                                     \
  case D:                                                                                                           \
    k = attention_split_kernel<KV, D>;                                                                              \
    groups = Shape<KV, D>::GROUPS;                                                                                  \
    break;
    CASE (16)
    CASE (32)
    CASE (64)
    CASE (128)
    CASE (256)
#undef CASE
    default:
      k = attention_split_kernel<KV, 0>;
      groups = Shape<KV, 0>::GROUPS;
      break;
  }
  const size_t smem = ((size_t) a.chunk + (size_t) groups * a.Dh) * sizeof (float);
  if (smem > 48 * 1024)
    cudaFuncSetAttribute (k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int) smem);
  dim3 grid ((unsigned) a.n_chunks, (unsigned) a.H, (unsigned) M);
  ppx_launch (k, grid, ATT_THREADS, smem, s, a);
}

extern "C" int
ppx_cuda_attention (int kv_type, const float *qkv, const int32_t *pos, const int32_t *kv_slot, void *kcache,
                    void *vcache, float *kscales, float *vscales, float *out, int M, int T, int H, int Dh, int cap,
                    int context, float *scratch, void *stream)
{
  if (M <= 0 || T <= 0 || H <= 0 || Dh <= 0)
    return 0;
  if (Dh > ATT_MAX_DH || cap <= 0 || M > 65535 || H > 65535)
    return (int) cudaErrorInvalidValue;
  cudaStream_t s = PPX_CUDA_STREAM (stream);
  const Plan p = plan (cap);
  AttnArgs a = {qkv, pos, kv_slot, kcache, vcache, kscales, vscales, out, scratch, T, H, Dh, cap, context,
                p.chunk, p.n_chunks};
  switch (kv_type) {
    case PPX_CUDA_KV_F32:
      launch_fmt<PPX_CUDA_KV_F32> (a, M, s);
      break;
    case PPX_CUDA_KV_BF16:
      launch_fmt<PPX_CUDA_KV_BF16> (a, M, s);
      break;
    case PPX_CUDA_KV_FP8:
      launch_fmt<PPX_CUDA_KV_FP8> (a, M, s);
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
