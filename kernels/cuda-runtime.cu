/* CUDA backend: devices, streams and memory (the CUDA runtime behind plain C functions). */
#include "cuda-common.cuh"

#include <stdlib.h>
#include <string.h>

extern "C" const char *
ppx_cuda_error_string (int err)
{
  return cudaGetErrorString ((cudaError_t) err);
}

extern "C" int
ppx_cuda_device_count (int *n)
{
  *n = 0;
  cudaError_t e = cudaGetDeviceCount (n);
  if (e != cudaSuccess)
    *n = 0;
  return (int) e;
}

extern "C" int
ppx_cuda_device_name (int device, char *name, size_t len, size_t *total_mem)
{
  cudaDeviceProp p;
  cudaError_t e = cudaGetDeviceProperties (&p, device);
  if (e != cudaSuccess)
    return (int) e;
  if (len > 0) {
    strncpy (name, p.name, len - 1);
    name[len - 1] = '\0';
  }
  if (total_mem)
    *total_mem = p.totalGlobalMem;
  return 0;
}

extern "C" int
ppx_cuda_compute_capability (void)
{
  int dev = 0, major = 0, minor = 0;
  if (cudaGetDevice (&dev) != cudaSuccess || cudaDeviceGetAttribute (&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
      cudaDeviceGetAttribute (&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess) {
    cudaGetLastError ();
    return 0;
  }
  return 10 * major + minor;
}

extern "C" int
ppx_cuda_mem_free (size_t *free_bytes)
{
  size_t total = 0;
  *free_bytes = 0;
  return (int) cudaMemGetInfo (free_bytes, &total);
}

extern "C" int
ppx_cuda_set_device (int device)
{
  return (int) cudaSetDevice (device);
}

extern "C" int
ppx_cuda_stream_create (void **stream)
{
  cudaStream_t s = NULL;
  cudaError_t e = cudaStreamCreateWithFlags (&s, cudaStreamNonBlocking);
  *stream = (void *) s;
  return (int) e;
}

extern "C" int
ppx_cuda_stream_destroy (void *stream)
{
  return (int) cudaStreamDestroy (PPX_CUDA_STREAM (stream));
}

extern "C" int
ppx_cuda_stream_sync (void *stream)
{
  return (int) cudaStreamSynchronize (PPX_CUDA_STREAM (stream));
}

extern "C" int
ppx_cuda_malloc (void **ptr, size_t bytes)
{
  *ptr = NULL;
  cudaError_t e = cudaMalloc (ptr, bytes);
  if (e != cudaSuccess) {
    *ptr = NULL;
    cudaGetLastError (); /* an allocation failure is not sticky: clear it */
  }
  return (int) e;
}

extern "C" int
ppx_cuda_free (void *ptr)
{
  return (int) cudaFree (ptr);
}

extern "C" int
ppx_cuda_memset_async (void *ptr, int value, size_t bytes, void *stream)
{
  return (int) cudaMemsetAsync (ptr, value, bytes, PPX_CUDA_STREAM (stream));
}

/* From pageable memory cudaMemcpyAsync returns once the source is staged, so the caller may reuse
 * its buffer at once (backend.h promises upload returns without waiting for queued work). */
extern "C" int
ppx_cuda_upload (void *dst, const void *src, size_t bytes, void *stream)
{
  return (int) cudaMemcpyAsync (dst, src, bytes, cudaMemcpyHostToDevice, PPX_CUDA_STREAM (stream));
}

extern "C" int
ppx_cuda_download (void *dst, const void *src, size_t bytes, void *stream)
{
  cudaError_t e = cudaMemcpyAsync (dst, src, bytes, cudaMemcpyDeviceToHost, PPX_CUDA_STREAM (stream));
  if (e != cudaSuccess)
    return (int) e;
  return (int) cudaStreamSynchronize (PPX_CUDA_STREAM (stream));
}

extern "C" int
ppx_cuda_copy_d2d (void *dst, const void *src, size_t bytes, void *stream)
{
  return (int) cudaMemcpyAsync (dst, src, bytes, cudaMemcpyDeviceToDevice, PPX_CUDA_STREAM (stream));
}

/* ---- graphs ---- */

extern "C" int
ppx_cuda_capture_begin (void *stream)
{
  return (int) cudaStreamBeginCapture (PPX_CUDA_STREAM (stream), cudaStreamCaptureModeThreadLocal);
}

extern "C" int
ppx_cuda_capture_end (void *stream, void **exec, size_t *nodes)
{
  cudaGraph_t graph = NULL;
  *exec = NULL;
  *nodes = 0;
  cudaError_t e = cudaStreamEndCapture (PPX_CUDA_STREAM (stream), &graph);
  if (e != cudaSuccess) {
    if (graph)
      cudaGraphDestroy (graph);
    cudaGetLastError (); /* an invalidated capture is not sticky */
    return (int) e;
  }
  size_t n = 0;
  cudaGraphGetNodes (graph, NULL, &n);
  cudaGraphExec_t x = NULL;
  e = cudaGraphInstantiate (&x, graph, 0);
  cudaGraphDestroy (graph);
  if (e != cudaSuccess) {
    cudaGetLastError ();
    return (int) e;
  }
  *exec = (void *) x;
  *nodes = n;
  return 0;
}

extern "C" int
ppx_cuda_graph_launch (void *exec, void *stream)
{
  return (int) cudaGraphLaunch ((cudaGraphExec_t) exec, PPX_CUDA_STREAM (stream));
}

extern "C" int
ppx_cuda_graph_destroy (void *exec)
{
  return (int) cudaGraphExecDestroy ((cudaGraphExec_t) exec);
}

/* ---- programmatic dependent launch (cuda-common.cuh, ppx_launch) ---- */

/* Compiled like every kernel of the backend: its PTX version tells whether the kernels carry the waits. */
__global__ void
pdl_probe_kernel (void)
{
}

static int pdl_allowed = 1;

extern "C" void
ppx_cuda_pdl_allow (int allow)
{
  __atomic_store_n (&pdl_allowed, allow ? 1 : 0, __ATOMIC_RELAXED);
}

extern "C" int
ppx_cuda_pdl_mode (void)
{
  static int state[64]; /* per device: 0 not known yet, else mode + 1 */
  if (!__atomic_load_n (&pdl_allowed, __ATOMIC_RELAXED))
    return 0;
  int dev = 0;
  if (cudaGetDevice (&dev) != cudaSuccess || dev < 0 || dev >= 64) {
    cudaGetLastError ();
    return 0;
  }
  int st = __atomic_load_n (&state[dev], __ATOMIC_RELAXED);
  if (!st) {
    const char *env = getenv ("PPX_CUDA_PDL");
    const int want = env && *env ? atoi (env) : 2;
    int major = 0;
    cudaFuncAttributes fa;
    st = 1;
    if (want >= 1 && want <= 2 &&
        cudaDeviceGetAttribute (&major, cudaDevAttrComputeCapabilityMajor, dev) == cudaSuccess && major >= 9 &&
        cudaFuncGetAttributes (&fa, pdl_probe_kernel) == cudaSuccess && fa.ptxVersion >= 90)
      st = want + 1;
    cudaGetLastError ();
    __atomic_store_n (&state[dev], st, __ATOMIC_RELAXED);
  }
  return st - 1;
}
