/* CUDA backend: interleaved RoPE and causal attention over per-session ring KV caches.
 *
 * Attention runs in two launches on the stream: the new keys/values of every row are written into the
 * ring (rows of one session in order, so a later row wins a shared slot as on the CPU), then one block
 * per (row, head) scores its window of keys (a warp per key), takes the softmax with the CPU's steps
 * (max, exp, sum, divide) and sums the values (a thread per output element). Scores go to a global
 * scratch of M*T*H*cap floats, so any cache capacity works. */
#include "cuda-common.cuh"

#include <math.h>

#define ATT_THREADS 128

/* One thread per (row, i < Dh/2): the angle is computed once and applied to q and k of every head.
 * freqs[i] comes from the host (the CPU backend's expf), so the angles are the CPU's bit for bit. */
__global__ void
rope_kernel (float *qkv, const int32_t *pos, size_t rows, int H, int Dh, const float *freqs)
{
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
  rope_kernel<<<ppx_grid_for (n, 256), 256, 0, PPX_CUDA_STREAM (stream)>>> (qkv, pos, rows, H, Dh, freqs);
  return ppx_cuda_launched ();
}

/* One thread per (session, element of H*Dh): the session's T rows in order. */
__global__ void
kv_write_kernel (const float *qkv, const int32_t *pos, const int32_t *kv_slot, float *kcache, float *vcache, int M,
                 int T, size_t HD, int cap)
{
  const size_t n = (size_t) M * HD;
  for (size_t idx = blockIdx.x * (size_t) blockDim.x + threadIdx.x; idx < n; idx += (size_t) gridDim.x * blockDim.x) {
    const int m = (int) (idx / HD);
    const size_t e = idx % HD;
    const size_t base = (size_t) kv_slot[m] * cap * HD;
    for (int t = 0; t < T; t++) {
      const size_t row = (size_t) m * T + t;
      const size_t ring = (size_t) (pos[row] % cap);
      kcache[base + ring * HD + e] = qkv[row * 3 * HD + HD + e];
      vcache[base + ring * HD + e] = qkv[row * 3 * HD + 2 * HD + e];
    }
  }
}

__global__ void __launch_bounds__ (ATT_THREADS)
attention_kernel (const float *qkv, const int32_t *pos, const int32_t *kv_slot, const float *kcache,
                  const float *vcache, float *out, int T, int H, int Dh, int cap, int context, float *scratch)
{
  __shared__ float red[32];
  extern __shared__ float q[]; /* Dh floats */
  const int h = blockIdx.x, row = blockIdx.y;
  const int m = row / T;
  const size_t HD = (size_t) H * Dh;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  const float *ks = kcache + (size_t) kv_slot[m] * cap * HD + (size_t) h * Dh;
  const float *vs = vcache + (size_t) kv_slot[m] * cap * HD + (size_t) h * Dh;
  float *scores = scratch + ((size_t) row * H + h) * cap;

  const int64_t E = (int64_t) pos[(size_t) m * T + T - 1] + 1;
  const int64_t qp = pos[row];
  const int64_t lo = max (max ((int64_t) 0, E - cap + 1), qp - context + 1);
  const int n = (int) (qp - lo + 1);
  const float scale = 1.0f / sqrtf ((float) Dh);

  for (int d = threadIdx.x; d < Dh; d += blockDim.x)
    q[d] = qkv[(size_t) row * 3 * HD + (size_t) h * Dh + d];
  __syncthreads ();

  float mx = -INFINITY;
  for (int j = warp; j < n; j += nwarps) {
    const float *kv = ks + (size_t) ((lo + j) % cap) * HD;
    float s = 0.0f;
    for (int d = lane; d < Dh; d += 32)
      s += q[d] * kv[d];
    s = ppx_warp_sum (s) * scale;
    if (lane == 0)
      scores[j] = s;
    mx = fmaxf (mx, s);
  }
  mx = ppx_block_max (mx, red); /* its barrier also publishes the scores */
  float sum = 0.0f;
  for (int j = threadIdx.x; j < n; j += blockDim.x) {
    const float e = expf (scores[j] - mx);
    scores[j] = e;
    sum += e;
  }
  sum = ppx_block_sum (sum, red);
  for (int d = threadIdx.x; d < Dh; d += blockDim.x) {
    float acc = 0.0f;
    for (int j = 0; j < n; j++)
      acc += scores[j] / sum * vs[(size_t) ((lo + j) % cap) * HD + d];
    out[(size_t) row * HD + (size_t) h * Dh + d] = acc;
  }
}

extern "C" size_t
ppx_cuda_attention_scratch_floats (int M, int T, int H, int cap)
{
  return (size_t) M * T * H * cap;
}

extern "C" int
ppx_cuda_attention (const float *qkv, const int32_t *pos, const int32_t *kv_slot, float *kcache, float *vcache,
                    float *out, int M, int T, int H, int Dh, int cap, int context, float *scratch, void *stream)
{
  if (M <= 0 || T <= 0 || H <= 0 || Dh <= 0)
    return 0;
  cudaStream_t s = PPX_CUDA_STREAM (stream);
  const size_t HD = (size_t) H * Dh;
  kv_write_kernel<<<ppx_grid_for ((size_t) M * HD, 256), 256, 0, s>>> (qkv, pos, kv_slot, kcache, vcache, M, T, HD, cap);
  int e = ppx_cuda_launched ();
  if (e)
    return e;
  dim3 grid ((unsigned) H, (unsigned) (M * T));
  attention_kernel<<<grid, ATT_THREADS, Dh * sizeof (float), s>>> (qkv, pos, kv_slot, kcache, vcache, out, T, H, Dh,
                                                                    cap, context, scratch);
  return ppx_cuda_launched ();
}
