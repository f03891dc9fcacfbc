/* Stand-alone microbenchmark of the tensor-core linear kernels' weight streams, with no arithmetic: which
 * access patterns the HBM serves at what rate (docs/cuda.md, "Linear layers", "What bounds it now"). Not
 * part of the library: meson builds it as build/tools/linear-stream-bench (or by hand:
 *   nvcc -O3 -std=c++17 -gencode arch=compute_90,code=sm_90 tools/linear-stream-bench.cu -o linear-stream-bench)
 * Each kernel reads a rows x row_bytes matrix (copies cycled beyond the L2) the way a kernel of 256 threads
 * and 128 rows per block would: "row" = a warp reads 8 rows x 64 bytes per instruction, stage after stage
 * (the linear kernels' pattern), "tiled" = a warp's 16 rows x stage bytes contiguous; k_reg keeps PD stages
 * in registers (staggered or in batches), k_cpa a per-thread cp.async ring of D stages. */
#include <cuda_runtime.h>
#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { printf("CUDA error %s at %d\n", cudaGetErrorString(e_), __LINE__); exit(1);} } while (0)

template <int HINT>
__device__ __forceinline__ uint4 ldw (const void *p)
{
  uint4 v;
  if (HINT == 2)
    asm volatile ("ld.global.nc.L2::256B.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  else if (HINT == 1)
    asm volatile ("ld.global.nc.L2::128B.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  else if (HINT == 3)
    asm volatile ("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  else
    asm volatile ("ld.global.nc.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
}

struct P { const uint8_t *w; int rows, row_bytes, nst, leaf; unsigned *sink; };

// address of (row-half h, vector v) of stage s for this thread; TILED: a warp's 16 rows x stage bytes contiguous
template <int V, bool TILED>
__device__ __forceinline__ const uint8_t *addr (const P &a, int64_t tile_row, int lane, int s, int h, int v)
{
  const int g = lane >> 2, t = lane & 3;
  if (TILED)
    return a.w + tile_row * a.row_bytes + (int64_t) s * 16 * 64 * V + (v * 2 + h) * 512 + lane * 16;
  return a.w + (tile_row + g + 8 * h) * a.row_bytes + (int64_t) s * 64 * V + 64 * v + 16 * t;
}

__device__ __forceinline__ unsigned mix (uint4 q) { return q.x ^ (q.y * 3u) ^ (q.z * 5u) ^ (q.w * 7u); }

// register pipeline, PD stages ahead; BATCH: PD stages loaded together (double buffer), else one stage per step
template <int V, int PD, bool BATCH, int HINT, bool TILED>
__global__ void __launch_bounds__ (256, 2) k_reg (P a)
{
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t tile_row = (int64_t) blockIdx.x * 128 + warp * 16;
  const int st0 = blockIdx.y * a.leaf, n = min (a.leaf, a.nst - st0);
  unsigned acc = 0;
  if (!BATCH) {
    uint4 r[PD][2][V];
#pragma unroll
    for (int p = 0; p < PD; p++)
      if (p < n)
#pragma unroll
        for (int h = 0; h < 2; h++)
#pragma unroll
          for (int v = 0; v < V; v++) r[p][h][v] = ldw<HINT> (addr<V, TILED> (a, tile_row, lane, st0 + p, h, v));
    for (int j = 0; j < n; j += PD) {
#pragma unroll
      for (int p = 0; p < PD; p++) {
        if (j + p < n) {
#pragma unroll
          for (int h = 0; h < 2; h++)
#pragma unroll
            for (int v = 0; v < V; v++) acc = acc * 31u + mix (r[p][h][v]);
          if (j + p + PD < n)
#pragma unroll
            for (int h = 0; h < 2; h++)
#pragma unroll
              for (int v = 0; v < V; v++) r[p][h][v] = ldw<HINT> (addr<V, TILED> (a, tile_row, lane, st0 + j + p + PD, h, v));
        }
      }
    }
  } else {
    uint4 A[PD][2][V], B[PD][2][V];
    auto ld = [&] (uint4 (&r)[PD][2][V], int s0) {
#pragma unroll
      for (int h = 0; h < 2; h++)
#pragma unroll
        for (int p = 0; p < PD; p++)
#pragma unroll
          for (int v = 0; v < V; v++)
            if (s0 + p < st0 + n) r[p][h][v] = ldw<HINT> (addr<V, TILED> (a, tile_row, lane, s0 + p, h, v));
    };
    auto use = [&] (const uint4 (&r)[PD][2][V], int s0) {
#pragma unroll
      for (int p = 0; p < PD; p++)
        if (s0 + p < st0 + n)
#pragma unroll
          for (int h = 0; h < 2; h++)
#pragma unroll
            for (int v = 0; v < V; v++) acc = acc * 31u + mix (r[p][h][v]);
    };
    ld (A, st0);
    for (int j = 0; j < n; j += 2 * PD) {
      if (j + PD < n) ld (B, st0 + j + PD);
      use (A, st0 + j);
      if (j + 2 * PD < n) ld (A, st0 + j + 2 * PD);
      if (j + PD < n) use (B, st0 + j + PD);
    }
  }
  if (acc == 0x9e3779b9u) a.sink[0] = acc;
}

// per-thread cp.async ring of D stages in shared memory (each thread reads back what it copied)
template <int V, int D, bool TILED>
__global__ void __launch_bounds__ (256, 2) k_cpa (P a)
{
  extern __shared__ uint4 sm[];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t tile_row = (int64_t) blockIdx.x * 128 + warp * 16;
  const int st0 = blockIdx.y * a.leaf, n = min (a.leaf, a.nst - st0);
  uint4 *mine = sm + threadIdx.x; // slot k, h, v at mine[((k*2+h)*V+v)*256]
  unsigned acc = 0;
  auto issue = [&] (int k, int s) {
#pragma unroll
    for (int h = 0; h < 2; h++)
#pragma unroll
      for (int v = 0; v < V; v++) {
        unsigned d = (unsigned) __cvta_generic_to_shared (mine + ((k * 2 + h) * V + v) * 256);
        asm volatile ("cp.async.cg.shared.global.L2::256B [%0], [%1], 16;" ::"r"(d), "l"(addr<V, TILED> (a, tile_row, lane, s, h, v)));
      }
  };
#pragma unroll
  for (int k = 0; k < D - 1; k++) {
    if (k < n) issue (k, st0 + k);
    asm volatile ("cp.async.commit_group;");
  }
  for (int j = 0; j < n; j++) {
    asm volatile ("cp.async.wait_group %0;" ::"n"(D - 2));
    const int k = j % D;
#pragma unroll
    for (int h = 0; h < 2; h++)
#pragma unroll
      for (int v = 0; v < V; v++) acc = acc * 31u + mix (mine[((k * 2 + h) * V + v) * 256]);
    if (j + D - 1 < n) issue ((j + D - 1) % D, st0 + j + D - 1);
    asm volatile ("cp.async.commit_group;");
  }
  asm volatile ("cp.async.wait_group 0;");
  if (acc == 0x9e3779b9u) a.sink[0] = acc;
}

// one warp per row, 512 contiguous bytes per instruction, 4 in flight
__global__ void __launch_bounds__ (256) k_contig (P a)
{
  const int lane = threadIdx.x & 31;
  const int64_t r = (int64_t) blockIdx.x * 8 + (threadIdx.x >> 5);
  if (r >= a.rows) return;
  const uint8_t *row = a.w + r * a.row_bytes;
  unsigned acc = 0;
  for (int o = lane * 16; o < a.row_bytes; o += 2048) {
    uint4 q[4];
#pragma unroll
    for (int u = 0; u < 4; u++) q[u] = o + 512 * u < a.row_bytes ? ldw<0> (row + o + 512 * u) : make_uint4 (0, 0, 0, 0);
#pragma unroll
    for (int u = 0; u < 4; u++) acc = acc * 31u + mix (q[u]);
  }
  if (acc == 0x9e3779b9u) a.sink[0] = acc;
}

// plain grid-stride read of the whole matrix
__global__ void __launch_bounds__ (256) k_stream (P a)
{
  const size_t n = (size_t) a.rows * a.row_bytes / 16;
  const uint4 *p = (const uint4 *) a.w;
  unsigned acc = 0;
  for (size_t i = blockIdx.x * 256 + threadIdx.x; i < n; i += (size_t) gridDim.x * 256 * 4) {
    uint4 q[4];
#pragma unroll
    for (int u = 0; u < 4; u++) q[u] = i + (size_t) u * gridDim.x * 256 < n ? ldw<0> (p + i + (size_t) u * gridDim.x * 256) : make_uint4 (0, 0, 0, 0);
#pragma unroll
    for (int u = 0; u < 4; u++) acc = acc * 31u + mix (q[u]);
  }
  if (acc == 0x9e3779b9u) a.sink[0] = acc;
}

static uint8_t *buf;
static size_t buf_bytes;
static unsigned *sink;

typedef void (*Launch) (const P &, dim3, size_t);

static void run (const char *name, int rows, int row_bytes, int stage_bytes, int S, Launch L, int kind, size_t smem, int copies_max)
{
  const size_t bytes = (size_t) rows * row_bytes;
  int copies = (int) (buf_bytes / bytes);
  if (copies > copies_max) copies = copies_max;
  P a;
  a.rows = rows; a.row_bytes = row_bytes; a.nst = row_bytes / stage_bytes; a.sink = sink;
  a.leaf = (a.nst + S - 1) / S;
  dim3 grid = kind == 0 ? dim3 (rows / 128, S) : kind == 1 ? dim3 (rows / 8) : dim3 (132 * 8);
  cudaEvent_t e0, e1;
  CK (cudaEventCreate (&e0)); CK (cudaEventCreate (&e1));
  const int calls = 60;
  float best = 1e30f;
  for (int rep = 0; rep < 4; rep++) {
    CK (cudaEventRecord (e0));
    for (int c = 0; c < calls; c++) {
      a.w = buf + (size_t) (c % copies) * bytes;
      L (a, grid, smem);
    }
    CK (cudaEventRecord (e1));
    CK (cudaEventSynchronize (e1));
    float ms; CK (cudaEventElapsedTime (&ms, e0, e1));
    if (rep > 0 && ms < best) best = ms;
  }
  CK (cudaGetLastError ());
  const double us = 1000.0 * best / calls;
  printf ("%-44s %6d x %5dB S=%d copies=%2d  %8.2f us  %6.0f GB/s\n", name, rows, row_bytes, S, copies, us, bytes / us / 1e3);
  fflush (stdout);
}

#define REG(V, PD, B, H, T) [] (const P &a, dim3 g, size_t) { k_reg<V, PD, B, H, T><<<g, 256>>> (a); }
#define CPA(V, D, T) [] (const P &a, dim3 g, size_t s) { k_cpa<V, D, T><<<g, 256, s>>> (a); }

template <int V, int D, bool T> static size_t cpa_setup () {
  size_t s = (size_t) D * 2 * V * 256 * 16;
  CK (cudaFuncSetAttribute (k_cpa<V, D, T>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int) s));
  return s;
}

int main (int argc, char **argv)
{
  buf_bytes = (size_t) 1 << 30;
  CK (cudaMalloc (&buf, buf_bytes));
  CK (cudaMemset (buf, 0x5a, buf_bytes));
  CK (cudaMalloc (&sink, 64));
  cudaDeviceProp prop; CK (cudaGetDeviceProperties (&prop, 0));
  printf ("%s, %d SMs, L2 %d MB\n", prop.name, prop.multiProcessorCount, prop.l2CacheSize >> 20);
  const int R = 22528, RB = 2048; // int4 22528 x 4096
  run ("stream (grid-stride, 4 x 16B in flight)", R, RB, 64, 1, [] (const P &a, dim3 g, size_t) { k_stream<<<g, 256>>> (a); }, 2, 0, 99);
  run ("contig (warp per row, 512B x 4)", R, RB, 64, 1, [] (const P &a, dim3 g, size_t) { k_contig<<<g, 256>>> (a); }, 1, 0, 99);
  run ("row V1 PD4 stagger L2::256B (default)", R, RB, 64, 1, REG (1, 4, false, 2, false), 0, 0, 99);
  run ("row V1 PD4 stagger L2 resident", 12288, RB, 64, 2, REG (1, 4, false, 2, false), 0, 0, 1);
  run ("row V1 PD4 stagger no hint", R, RB, 64, 1, REG (1, 4, false, 0, false), 0, 0, 99);
  run ("row V1 PD4 stagger L1::no_alloc L2::256B", R, RB, 64, 1, REG (1, 4, false, 3, false), 0, 0, 99);
  run ("row V1 PD4 stagger S=2", R, RB, 64, 2, REG (1, 4, false, 2, false), 0, 0, 99);
  run ("row V1 PD4 stagger S=4", R, RB, 64, 4, REG (1, 4, false, 2, false), 0, 0, 99);
  run ("row V1 PD8 stagger", R, RB, 64, 1, REG (1, 8, false, 2, false), 0, 0, 99);
  run ("row V1 PD4 batch", R, RB, 64, 1, REG (1, 4, true, 2, false), 0, 0, 99);
  run ("row V1 PD2 batch", R, RB, 64, 1, REG (1, 2, true, 2, false), 0, 0, 99);
  run ("row V1 PD4 batch S=2", R, RB, 64, 2, REG (1, 4, true, 2, false), 0, 0, 99);
  run ("tiled V1 PD2 stagger", R, RB, 64, 1, REG (1, 2, false, 0, true), 0, 0, 99);
  run ("tiled V1 PD4 stagger", R, RB, 64, 1, REG (1, 4, false, 0, true), 0, 0, 99);
  run ("tiled V1 PD4 stagger S=2", R, RB, 64, 2, REG (1, 4, false, 0, true), 0, 0, 99);
  run ("tiled V1 PD4 batch", R, RB, 64, 1, REG (1, 4, true, 0, true), 0, 0, 99);
  run ("tiled V1 PD4 stagger 12288 S=2", 12288, RB, 64, 2, REG (1, 4, false, 0, true), 0, 0, 99);
  run ("tiled V1 PD4 stagger 4096 S=8", 4096, RB, 64, 8, REG (1, 4, false, 0, true), 0, 0, 99);
  run ("row V1 PD4 stagger 4096 S=8", 4096, RB, 64, 8, REG (1, 4, false, 2, false), 0, 0, 99);
  run ("row V1 PD4 stagger 12288 S=2", 12288, RB, 64, 2, REG (1, 4, false, 2, false), 0, 0, 99);
  { size_t s = cpa_setup<1, 4, false> (); run ("cpa row V1 D4", R, RB, 64, 1, CPA (1, 4, false), 0, s, 99); }
  { size_t s = cpa_setup<1, 8, false> (); run ("cpa row V1 D8", R, RB, 64, 1, CPA (1, 8, false), 0, s, 99); }
  { size_t s = cpa_setup<1, 4, true> (); run ("cpa tiled V1 D4", R, RB, 64, 1, CPA (1, 4, true), 0, s, 99); }
  { size_t s = cpa_setup<1, 8, true> (); run ("cpa tiled V1 D8", R, RB, 64, 1, CPA (1, 8, true), 0, s, 99); }
  { size_t s = cpa_setup<1, 8, true> (); run ("cpa tiled V1 D8 S=2", R, RB, 64, 2, CPA (1, 8, true), 0, s, 99); }
  { size_t s = cpa_setup<1, 8, true> (); run ("cpa tiled V1 D8 12288 S=2", 12288, RB, 64, 2, CPA (1, 8, true), 0, s, 99); }
  { size_t s = cpa_setup<1, 8, true> (); run ("cpa tiled V1 D8 4096 S=8", 4096, RB, 64, 8, CPA (1, 8, true), 0, s, 99); }
  // int8-like (128 B per row per stage) and bf16-like (256 B)
  run ("row V2 PD2 stagger (int8 default)", R, 4096, 128, 1, REG (2, 2, false, 2, false), 0, 0, 99);
  run ("row V2 PD2 batch", R, 4096, 128, 1, REG (2, 2, true, 2, false), 0, 0, 99);
  run ("tiled V2 PD2 stagger", R, 4096, 128, 1, REG (2, 2, false, 0, true), 0, 0, 99);
  { size_t s = cpa_setup<2, 4, true> (); run ("cpa tiled V2 D4", R, 4096, 128, 1, CPA (2, 4, true), 0, s, 99); }
  run ("row V4 PD1 stagger (bf16 default)", R, 8192, 256, 1, REG (4, 1, false, 2, false), 0, 0, 99);
  run ("tiled V4 PD1 stagger", R, 8192, 256, 1, REG (4, 1, false, 0, true), 0, 0, 99);
  run ("contig int8-size", R, 4096, 64, 1, [] (const P &a, dim3 g, size_t) { k_contig<<<g, 256>>> (a); }, 1, 0, 99);
  return 0;
}
