/* Stand-alone benchmark of cuBLASLt on the temporal transformer's linear shapes, to compare with the
 * tensor-core linear kernels (docs/cuda.md, "Linear layers", "cuBLASLt"). Not part of the library: meson
 * builds it as build/tools/cublaslt-bench where cuBLASLt is found (or by hand:
 *   nvcc -O3 -std=c++17 -gencode arch=compute_90,code=sm_90 tools/cublaslt-bench.cu -lcublasLt -o cublaslt-bench)
 * y[M, rows] = x[M, cols] W^T with W as bf16 (the int4/int8 weights dequantized) and x in bf16, f32 sums and
 * output; then the same with W and x in fp8 e4m3 (unit scales). Timing as test-backend-cuda --bench: a CUDA
 * graph of >= 120 calls cycling over copies of W that together exceed the L2, the median of 9 replays; each
 * shape and M tries the first heuristic algorithms cuBLASLt offers and keeps the fastest.
 * Usage: cublaslt-bench [ROWSxCOLS,...] [M,M,...] */
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#define CK(x)                                                                                                       \
  do {                                                                                                              \
    cudaError_t e_ = (x);                                                                                           \
    if (e_ != cudaSuccess) {                                                                                        \
      printf ("CUDA error %s at line %d\n", cudaGetErrorString (e_), __LINE__);                                     \
      exit (1);                                                                                                     \
    }                                                                                                               \
  } while (0)
#define LT(x)                                                                                                       \
  do {                                                                                                              \
    cublasStatus_t s_ = (x);                                                                                        \
    if (s_ != CUBLAS_STATUS_SUCCESS) {                                                                              \
      printf ("cuBLASLt error %d at line %d\n", (int) s_, __LINE__);                                                \
      exit (1);                                                                                                     \
    }                                                                                                               \
  } while (0)

/* bytes a value: 2 (bf16) or 1 (fp8 e4m3); random values in [-1, 1) from a hash of the index */
__global__ void
fill_kernel (void *p, size_t n, int fp8, uint32_t seed)
{
  for (size_t i = blockIdx.x * (size_t) blockDim.x + threadIdx.x; i < n; i += (size_t) gridDim.x * blockDim.x) {
    uint32_t h = (uint32_t) i * 2654435761u ^ seed;
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    const float v = (float) (h & 0xFFFF) / 32768.0f - 1.0f;
    if (fp8)
      reinterpret_cast<__nv_fp8_e4m3 *> (p)[i] = __nv_fp8_e4m3 (v);
    else
      reinterpret_cast<__nv_bfloat16 *> (p)[i] = __float2bfloat16 (v);
  }
}

struct Case {
  cublasLtMatmulDesc_t op;
  cublasLtMatrixLayout_t a, b, d;
};

/* The column-major problem cuBLASLt solves: D[rows, M] = op(A) B with A = W stored [cols, rows] (W row-major)
 * transposed ("TN", which fp8 requires), B = x stored [cols, M], D = y stored [rows, M] (y row-major). */
static Case
make_case (int64_t rows, int64_t cols, int M, cudaDataType_t in, cudaDataType_t out)
{
  Case c;
  LT (cublasLtMatmulDescCreate (&c.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t t = CUBLAS_OP_T, n = CUBLAS_OP_N;
  LT (cublasLtMatmulDescSetAttribute (c.op, CUBLASLT_MATMUL_DESC_TRANSA, &t, sizeof t));
  LT (cublasLtMatmulDescSetAttribute (c.op, CUBLASLT_MATMUL_DESC_TRANSB, &n, sizeof n));
  LT (cublasLtMatrixLayoutCreate (&c.a, in, cols, rows, cols));
  LT (cublasLtMatrixLayoutCreate (&c.b, in, cols, M, cols));
  LT (cublasLtMatrixLayoutCreate (&c.d, out, rows, M, rows));
  return c;
}

static void
free_case (Case &c)
{
  cublasLtMatrixLayoutDestroy (c.a);
  cublasLtMatrixLayoutDestroy (c.b);
  cublasLtMatrixLayoutDestroy (c.d);
  cublasLtMatmulDescDestroy (c.op);
}

/* Median of 9 replays of a graph of `calls` matmuls cycling over the weight copies, in us a call; < 0 when
 * the algorithm fails. */
static double
time_algo (cublasLtHandle_t lt, Case &c, const cublasLtMatmulAlgo_t *algo, std::vector<void *> &w, void *x, void *y,
           void *ws, size_t ws_bytes, int calls, cudaStream_t s)
{
  const float one = 1.0f, zero = 0.0f;
  if (cublasLtMatmul (lt, c.op, &one, w[0], c.a, x, c.b, &zero, y, c.d, y, c.d, algo, ws, ws_bytes, s) !=
      CUBLAS_STATUS_SUCCESS)
    return -1;
  CK (cudaStreamSynchronize (s));
  cudaGraph_t g;
  cudaGraphExec_t ge;
  CK (cudaStreamBeginCapture (s, cudaStreamCaptureModeThreadLocal));
  bool ok = true;
  for (int i = 0; i < calls; i++)
    ok = ok && cublasLtMatmul (lt, c.op, &one, w[i % w.size ()], c.a, x, c.b, &zero, y, c.d, y, c.d, algo, ws,
                               ws_bytes, s) == CUBLAS_STATUS_SUCCESS;
  CK (cudaStreamEndCapture (s, &g));
  if (!ok) {
    cudaGraphDestroy (g);
    return -1;
  }
  CK (cudaGraphInstantiate (&ge, g, 0));
  cudaEvent_t e0, e1;
  CK (cudaEventCreate (&e0));
  CK (cudaEventCreate (&e1));
  CK (cudaGraphLaunch (ge, s)); /* upload and warm-up */
  std::vector<double> t;
  for (int r = 0; r < 9; r++) {
    CK (cudaEventRecord (e0, s));
    CK (cudaGraphLaunch (ge, s));
    CK (cudaEventRecord (e1, s));
    CK (cudaEventSynchronize (e1));
    float ms = 0;
    CK (cudaEventElapsedTime (&ms, e0, e1));
    t.push_back (ms * 1e3 / calls);
  }
  std::sort (t.begin (), t.end ());
  cudaEventDestroy (e0);
  cudaEventDestroy (e1);
  cudaGraphExecDestroy (ge);
  cudaGraphDestroy (g);
  return t[t.size () / 2];
}

/* One shape, one input type, at every M: the fastest of the heuristic's first algorithms. */
static void
bench_shape (cublasLtHandle_t lt, int64_t rows, int64_t cols, const std::vector<int> &Ms, bool fp8, cudaStream_t s)
{
  const size_t es = fp8 ? 1 : 2, wbytes = (size_t) rows * cols * es;
  const int copies = (int) std::min<size_t> (16, 1 + (512ull << 20) / wbytes);
  std::vector<void *> w (copies);
  for (auto &p : w) {
    CK (cudaMalloc (&p, wbytes));
    fill_kernel<<<1024, 256, 0, s>>> (p, (size_t) rows * cols, fp8, 12345u);
  }
  const int Mmax = *std::max_element (Ms.begin (), Ms.end ());
  void *x, *y, *ws;
  const size_t ws_bytes = 32u << 20;
  CK (cudaMalloc (&x, (size_t) Mmax * cols * es));
  CK (cudaMalloc (&y, (size_t) Mmax * rows * 4));
  CK (cudaMalloc (&ws, ws_bytes));
  fill_kernel<<<1024, 256, 0, s>>> (x, (size_t) Mmax * cols, fp8, 777u);
  CK (cudaStreamSynchronize (s));
  const cudaDataType_t in = fp8 ? CUDA_R_8F_E4M3 : CUDA_R_16BF;
  for (int M : Ms) {
    Case c = make_case (rows, cols, M, in, CUDA_R_32F);
    cublasLtMatmulPreference_t pref;
    LT (cublasLtMatmulPreferenceCreate (&pref));
    LT (cublasLtMatmulPreferenceSetAttribute (pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes,
                                              sizeof ws_bytes));
    cublasLtMatmulHeuristicResult_t res[8];
    int n = 0;
    const cublasStatus_t hs = cublasLtMatmulAlgoGetHeuristic (lt, c.op, c.a, c.b, c.d, c.d, pref, 8, res, &n);
    double best = -1;
    int best_i = -1;
    for (int i = 0; hs == CUBLAS_STATUS_SUCCESS && i < n; i++) {
      const double us = time_algo (lt, c, &res[i].algo, w, x, y, ws, ws_bytes, copies * std::max (1, 120 / copies), s);
      if (us > 0 && (best < 0 || us < best))
        best = us, best_i = i;
    }
    if (best < 0)
      printf ("%-5s %6lld x %-6lld M=%-3d no algorithm (heuristic status %d, %d offered)\n", fp8 ? "fp8" : "bf16",
              (long long) rows, (long long) cols, M, (int) hs, n);
    else
      printf ("%-5s %6lld x %-6lld %7.1f MB  M=%-3d %8.2f us %6.0f GB/s %7.1f TFLOP/s  (algo %d of %d)\n",
              fp8 ? "fp8" : "bf16", (long long) rows, (long long) cols, wbytes / 1e6, M, best, wbytes / best / 1e3,
              2.0 * M * rows * cols / best / 1e6, best_i, n);
    fflush (stdout);
    cublasLtMatmulPreferenceDestroy (pref);
    free_case (c);
  }
  for (auto p : w)
    cudaFree (p);
  cudaFree (x);
  cudaFree (y);
  cudaFree (ws);
}

int
main (int argc, char **argv)
{
  std::vector<std::pair<int64_t, int64_t>> shapes = {{22528, 4096}, {12288, 4096}, {4096, 11264}, {4096, 4096}};
  std::vector<int> Ms = {1, 16, 32, 64, 80, 128};
  if (argc > 1) {
    shapes.clear ();
    for (char *tok = strtok (argv[1], ","); tok; tok = strtok (NULL, ",")) {
      long long r, c;
      if (sscanf (tok, "%lldx%lld", &r, &c) == 2 && r > 0 && c > 0)
        shapes.push_back ({r, c});
    }
  }
  if (argc > 2) {
    Ms.clear ();
    for (char *tok = strtok (argv[2], ","); tok; tok = strtok (NULL, ","))
      if (atoi (tok) > 0)
        Ms.push_back (atoi (tok));
  }
  if (shapes.empty () || Ms.empty ()) {
    fprintf (stderr, "usage: %s [ROWSxCOLS,...] [M,M,...]\n", argv[0]);
    return 2;
  }
  cudaDeviceProp prop;
  CK (cudaGetDeviceProperties (&prop, 0));
  printf ("cuBLASLt %zu on %s: y = x W^T, f32 sums and output; us a call (median of 9 replays of a graph of\n"
          ">= 120 calls over copies of W beyond the L2), the fastest of the heuristic's first 8 algorithms\n",
          cublasLtGetVersion (), prop.name);
  cublasLtHandle_t lt;
  LT (cublasLtCreate (&lt));
  cudaStream_t s;
  CK (cudaStreamCreateWithFlags (&s, cudaStreamNonBlocking));
  for (int fp8 = 0; fp8 < 2; fp8++)
    for (auto &sh : shapes)
      bench_shape (lt, sh.first, sh.second, Ms, fp8 != 0, s);
  cudaStreamDestroy (s);
  cublasLtDestroy (lt);
  return 0;
}
