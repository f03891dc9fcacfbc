/* CUDA backend: token sampling, one block per row, each row with its own parameters (sample-params.h):
 * a greedy row and a temperature row can share one launch (the branch is per block).
 *
 * Greedy: argmax, first index on ties (a NaN at index 0 wins, later NaNs never do: the CPU's scan).
 * Temperature + top-k, the CPU backend's draw (docs/sampling.md): p = softmax(logits / temp), the k most
 * probable candidates ranked by (p descending, index ascending), then the candidate of rank j with the
 * largest p / q_j, q_j = -log(Philox uniform(seed, frame*64 + stream, j)), the first rank on ties.
 * Instead of sorting all V probabilities, a radix select over the f32 bits (p >= 0, so the bits order
 * like the values) finds the k-th largest; the k candidates are gathered and each one's rank is counted
 * directly. The normalizing sum is reduced in a different order than on the CPU, so draws agree with the
 * CPU except where two candidates' probabilities are within f32 rounding of each other. */
#include "cuda-common.cuh"
#include "philox.h"
#include "sample-params.h"

#include <math.h>

#define SAMPLE_THREADS 1024
#define SAMPLE_SMEM_CAND 1024 /* top-k candidates kept in shared memory (8 KB) */

typedef struct {
  float v;
  int i; /* -1: no candidate */
} ArgBest;

/* Greedy order: a NaN at index 0 is absorbing; otherwise larger wins, then smaller index. */
__device__ __forceinline__ ArgBest
argmax_combine (ArgBest a, ArgBest b)
{
  if (a.i < 0)
    return b;
  if (b.i < 0)
    return a;
  if (isnan (a.v))
    return a; /* only index 0 is ever a NaN candidate */
  if (isnan (b.v))
    return b.i == 0 ? b : a;
  if (b.v > a.v || (b.v == a.v && b.i < a.i))
    return b;
  return a;
}

__device__ ArgBest
block_argmax (ArgBest a, float *sv, int *si)
{
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  for (int o = 16; o > 0; o >>= 1) {
    ArgBest b = {__shfl_xor_sync (0xffffffffu, a.v, o), __shfl_xor_sync (0xffffffffu, a.i, o)};
    a = argmax_combine (a, b);
  }
  __syncthreads ();
  if (lane == 0) {
    sv[warp] = a.v;
    si[warp] = a.i;
  }
  __syncthreads ();
  ArgBest r = {0.0f, -1};
  if (lane < nw) {
    r.v = sv[lane];
    r.i = si[lane];
  }
  for (int o = 16; o > 0; o >>= 1) {
    ArgBest b = {__shfl_xor_sync (0xffffffffu, r.v, o), __shfl_xor_sync (0xffffffffu, r.i, o)};
    r = argmax_combine (r, b);
  }
  return r;
}

/* The rank of candidate (ic, pc) among the n candidates (p descending, index ascending): how many come before
 * it. index(o) and prob(o, index) read candidate o wherever the candidates are kept. */
template <typename Index, typename Prob>
__device__ __forceinline__ int
candidate_rank (int n, int ic, float pc, Index index, Prob prob)
{
  int rank = 0;
  for (int o = 0; o < n; o++) {
    const int io = index (o);
    const float po = prob (o, io);
    rank += po > pc || (po == pc && io < ic);
  }
  return rank;
}

/* The exponential race: larger p/q wins, then the smaller rank (the CPU keeps the first strictly larger). */
typedef struct {
  float v;
  int rank; /* -1: none */
  int tok;
} Race;

__device__ __forceinline__ Race
race_combine (Race a, Race b)
{
  if (b.rank < 0)
    return a;
  if (a.rank < 0 || b.v > a.v || (b.v == a.v && b.rank < a.rank))
    return b;
  return a;
}

__device__ __forceinline__ Race
race_shfl (Race a, int o)
{
  Race b = {__shfl_xor_sync (0xffffffffu, a.v, o), __shfl_xor_sync (0xffffffffu, a.rank, o),
            __shfl_xor_sync (0xffffffffu, a.tok, o)};
  return b;
}

__device__ Race
block_race (Race a, float *sv, int *srank, int *stok)
{
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  for (int o = 16; o > 0; o >>= 1)
    a = race_combine (a, race_shfl (a, o));
  __syncthreads ();
  if (lane == 0) {
    sv[warp] = a.v;
    srank[warp] = a.rank;
    stok[warp] = a.tok;
  }
  __syncthreads ();
  Race r = {0.0f, -1, 0};
  if (lane < nw) {
    r.v = sv[lane];
    r.rank = srank[lane];
    r.tok = stok[lane];
  }
  for (int o = 16; o > 0; o >>= 1)
    r = race_combine (r, race_shfl (r, o));
  return r;
}

/* Exclusive prefix count of `flag` over the block's threads in thread order; *total gets the count. */
__device__ int
block_scan01 (int flag, int *warp_counts, int *total)
{
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  const unsigned ballot = __ballot_sync (0xffffffffu, flag);
  const int in_warp = __popc (ballot & ((1u << lane) - 1u));
  __syncthreads ();
  if (lane == 0)
    warp_counts[warp] = __popc (ballot);
  __syncthreads ();
  int before = 0, all = 0;
  for (int w = 0; w < nw; w++) {
    const int c = warp_counts[w];
    before += w < warp ? c : 0;
    all += c;
  }
  *total = all;
  return before + in_warp;
}

/* The greedy winner of one row of logits (the whole block; every thread gets it): NaNs never win unless the
 * first logit is one; 0 when nothing won. */
__device__ __forceinline__ int
row_argmax (const float *l, int V)
{
  __shared__ float sv[32];
  __shared__ int si[32];
  ArgBest a = {0.0f, -1};
  for (int i = threadIdx.x; i < V; i += blockDim.x) {
    const float v = l[i];
    if (!isnan (v) || i == 0)
      a = argmax_combine (a, (ArgBest) {v, i});
  }
  a = block_argmax (a, sv, si);
  return a.i < 0 ? 0 : a.i;
}

/* Row m's greedy draw (the whole block). */
__device__ void
sample_greedy_row (const float *l, int V, int32_t *tok)
{
  const int best = row_argmax (l, V);
  if (threadIdx.x == 0)
    *tok = best;
}

/* P = softmax(logits / temp) of one row (the whole block); the max is the greedy winner's logit, as on the
 * CPU. */
__device__ __forceinline__ void
sample_softmax_row (const float *l, int V, float temp, float *P)
{
  __shared__ float red[32];
  const float mx = l[row_argmax (l, V)];
  float sum = 0.0f;
  for (int i = threadIdx.x; i < V; i += blockDim.x) {
    const float e = expf ((l[i] - mx) / temp);
    P[i] = e;
    sum += e;
  }
  sum = ppx_block_sum (sum, red);
  for (int i = threadIdx.x; i < V; i += blockDim.x)
    P[i] = P[i] / sum;
}

/* One radix-select step, by the first warp: the bin of hist (keys of the current prefix, by their 8 bits at
 * shift) that holds the *remaining-th largest key; extends *prefix by it and leaves in *remaining how many
 * keys of that bin are still needed. Lane l owns bins 255 - 8 l .. 248 - 8 l (high bins first); a suffix
 * count over the lanes gives each lane the keys above its bins. */
__device__ __forceinline__ void
radix_pick_bin (const unsigned *hist, unsigned prefix, int shift, unsigned *sel_prefix, unsigned *sel_remaining)
{
  const int lane = threadIdx.x;
  const unsigned need = *sel_remaining;
  unsigned own = 0;
#pragma unroll
  for (int j = 0; j < 8; j++)
    own += hist[255 - 8 * lane - j];
  unsigned incl = own; /* keys in the bins of lanes 0..lane */
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const unsigned v = __shfl_up_sync (0xffffffffu, incl, o);
    if (lane >= o)
      incl += v;
  }
  const unsigned above0 = incl - own;
  /* the first lane whose bins reach need (the last lane if none does: bin 0 takes the rest) */
  const unsigned reach = __ballot_sync (0xffffffffu, incl >= need);
  const int owner = reach ? __ffs (reach) - 1 : 31;
  if (lane == owner) {
    unsigned above = above0;
    int b = 255 - 8 * lane;
    for (int j = 0; j < 8 && b > 0; j++, b--) {
      if (above + hist[b] >= need)
        break;
      above += hist[b];
    }
    *sel_prefix = prefix | ((unsigned) b << shift);
    *sel_remaining = need - above;
  }
}

/* The key (f32 bits) of the k-th largest of the V probabilities P, by a radix select over 4 bytes (p >= 0,
 * so the bits order like the values); *take_equal gets how many keys equal to it are among the k. */
__device__ __forceinline__ unsigned
radix_select_kth (const float *P, int V, int k, int *take_equal)
{
  __shared__ unsigned hist[256];
  __shared__ unsigned sel_prefix, sel_remaining;
  if (threadIdx.x == 0) {
    sel_prefix = 0;
    sel_remaining = (unsigned) k;
  }
  unsigned mask = 0;
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int b = threadIdx.x; b < 256; b += blockDim.x)
      hist[b] = 0;
    __syncthreads ();
    const unsigned prefix = sel_prefix;
    for (int base = 0; base < V; base += blockDim.x) {
      /* lanes with the same bin add once (probabilities crowd into a few bins: one shared-memory atomic a
       * key serialized thousands of them on one address) */
      const int i = base + threadIdx.x;
      const unsigned key = i < V ? __float_as_uint (P[i]) : 0u;
      const bool in = i < V && (key & mask) == prefix;
      const unsigned bin = in ? (key >> shift) & 255u : 256u;
      const unsigned same = __match_any_sync (0xffffffffu, bin);
      if (in && (threadIdx.x & 31) == __ffs (same) - 1)
        atomicAdd (&hist[bin], (unsigned) __popc (same));
    }
    __syncthreads ();
    if (threadIdx.x < 32)
      radix_pick_bin (hist, prefix, shift, &sel_prefix, &sel_remaining);
    mask |= 255u << shift;
    __syncthreads ();
  }
  *take_equal = (int) sel_remaining; /* ties at the threshold, lowest indices first */
  return sel_prefix;
}

/* Gathers the k candidates, the keys above thr and the take_equal lowest indices of the keys equal to it:
 * into cand_s / cand_p (indices and probabilities, shared memory) when in_smem, else the indices into cand.
 * Their order does not matter (ranks are counted, the race compares values and ranks), so keys above the
 * threshold take places by one atomic a warp; only keys equal to it need the ordered scan (the lowest
 * indices are taken), in the one or few sweeps that hold such keys. Returns how many were gathered. */
__device__ __forceinline__ int
gather_candidates (const float *P, int V, unsigned thr, int take_equal, bool in_smem, int *cand_s, float *cand_p,
                   int *cand)
{
  __shared__ int warp_counts[32];
  __shared__ int n_sel;
  const int lane = threadIdx.x & 31;
  if (threadIdx.x == 0)
    n_sel = 0;
  __syncthreads ();
  int n_equal = 0;
  for (int base = 0; base < V; base += blockDim.x) {
    const int i = base + threadIdx.x;
    const unsigned key = i < V ? __float_as_uint (P[i]) : 0u;
    const int gt = i < V && key > thr, eq = i < V && key == thr;
    int sel = gt;
    if (__syncthreads_or (eq)) {
      int eq_total;
      const int eq_rank = n_equal + block_scan01 (eq, warp_counts, &eq_total);
      sel = gt || (eq && eq_rank < take_equal);
      n_equal += eq_total;
    }
    const unsigned bal = __ballot_sync (0xffffffffu, sel);
    int wbase = 0;
    if (lane == 0 && bal)
      wbase = atomicAdd (&n_sel, __popc (bal));
    wbase = __shfl_sync (0xffffffffu, wbase, 0);
    const int pos = wbase + __popc (bal & ((1u << lane) - 1u));
    if (sel && in_smem) {
      cand_s[pos] = i;
      cand_p[pos] = __uint_as_float (key);
    } else if (sel) {
      cand[pos] = i;
    }
  }
  __syncthreads ();
  return n_sel;
}

/* The exponential race over the n_cand candidates: each one's rank, its Exp(1) draw keyed by (seed, frame*64
 * + stream, rank), and the candidate with the largest p / q (the first rank on ties). Returns its token. */
__device__ __forceinline__ int
race_candidates (const uint32_t *s, int stream, int n_cand, bool in_smem, const int *cand_s,
                 const float *cand_p, const int *cand, const float *P)
{
  __shared__ float race_v[32];
  __shared__ int race_rank[32], race_tok[32];
  const uint64_t seed = (uint64_t) s[PPX_SAMPLE_SEED_LO] | ((uint64_t) s[PPX_SAMPLE_SEED_HI] << 32);
  const uint64_t frame = (uint64_t) s[PPX_SAMPLE_FRAME_LO] | ((uint64_t) s[PPX_SAMPLE_FRAME_HI] << 32);
  const uint64_t draw = frame * 64 + (uint64_t) stream;
  Race best = {0.0f, -1, 0};
  for (int c = threadIdx.x; c < n_cand; c += blockDim.x) {
    const int ic = in_smem ? cand_s[c] : cand[c];
    const float pc = in_smem ? cand_p[c] : P[ic];
    const int rank = in_smem ? candidate_rank (n_cand, ic, pc, [&] (int o) { return cand_s[o]; },
                                               [&] (int o, int) { return cand_p[o]; })
                             : candidate_rank (n_cand, ic, pc, [&] (int o) { return cand[o]; },
                                               [&] (int, int io) { return P[io]; });
    const float q = -logf (ppx_philox_uniform (seed, draw, (uint32_t) rank)); /* Exp(1) */
    best = race_combine (best, (Race) {pc / q, rank, ic});
  }
  best = block_race (best, race_v, race_rank, race_tok);
  return best.rank < 0 ? 0 : best.tok;
}

/* Row m's temperature + top-k draw (the whole block); P and cand: V floats and ints of scratch. The k
 * candidates' indices and probabilities stay in shared memory when k <= SAMPLE_SMEM_CAND (the rank count
 * reads every candidate once per candidate). */
__device__ void
sample_topk_row (const float *l, int V, int32_t *tok, const uint32_t *s, int stream, float temp, int k, float *P,
                 int *cand)
{
  __shared__ int cand_s[SAMPLE_SMEM_CAND];
  __shared__ float cand_p[SAMPLE_SMEM_CAND];
  const bool in_smem = k <= SAMPLE_SMEM_CAND;
  int take_equal;

  sample_softmax_row (l, V, temp, P);
  const unsigned thr = radix_select_kth (P, V, k, &take_equal);
  const int n_cand = gather_candidates (P, V, thr, take_equal, in_smem, cand_s, cand_p, cand);
  const int t = race_candidates (s, stream, n_cand, in_smem, cand_s, cand_p, cand, P);
  if (threadIdx.x == 0)
    *tok = t;
}

/* One block per row: the row's parameters choose the greedy or the top-k draw (uniform per block). */
__global__ void __launch_bounds__ (SAMPLE_THREADS)
sample_kernel (const float *logits, int V, int32_t *tokens, int tok_off, int tok_stride, const uint32_t *params,
               int stream, float *P_all, int *cand_all)
{
  ppx_pdl_enter ();
  const int m = blockIdx.x;
  const uint32_t *s = params + (size_t) m * PPX_SAMPLE_PARAMS;
  const float temp = __uint_as_float (s[stream == 0 ? PPX_SAMPLE_TEMP_TEXT : PPX_SAMPLE_TEMP_AUDIO]);
  const int topk = (int) s[stream == 0 ? PPX_SAMPLE_TOPK_TEXT : PPX_SAMPLE_TOPK_AUDIO];
  const float *l = logits + (size_t) m * V;
  int32_t *tok = tokens + (size_t) m * tok_stride + tok_off;
  if (temp <= 0.0f || topk == 1) {
    sample_greedy_row (l, V, tok);
  } else {
    const int k = (topk <= 0 || topk > V) ? V : topk;
    sample_topk_row (l, V, tok, s, stream, temp, k, P_all + (size_t) m * V, cand_all + (size_t) m * V);
  }
}

extern "C" size_t
ppx_cuda_sample_scratch_bytes (int M, int V)
{
  return (size_t) M * V * (sizeof (float) + sizeof (int));
}

extern "C" int
ppx_cuda_sample (const float *logits, int V, int32_t *tokens, int tok_off, int tok_stride, const uint32_t *params,
                 int stream_index, int M, void *scratch, void *stream)
{
  if (M <= 0 || V <= 0)
    return 0;
  cudaStream_t s = PPX_CUDA_STREAM (stream);
  float *P = (float *) scratch;
  int *cand = (int *) (P + (size_t) M * V);
  ppx_launch (sample_kernel, (unsigned) M, SAMPLE_THREADS, 0, s, logits, V, tokens, tok_off, tok_stride, params, stream_index, P, cand);
  return ppx_cuda_launched ();
}
