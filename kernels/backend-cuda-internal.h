/* Private: what the files of the CUDA backend share (backend-cuda.c: the vtable, memory and the ops;
 * backend-cuda-graph.c: graph capture; backend-cuda-tune.c: the tuning and benchmark extras of
 * backend-cuda.h). */
#ifndef PPX_BACKEND_CUDA_INTERNAL_H
#define PPX_BACKEND_CUDA_INTERNAL_H

#include "backend-cuda.h"

#include "backend-impl.h"
#include "cuda-kernels.h"

/* A device buffer grown on demand (device_buffer_grow). */
typedef struct {
  void *ptr;
  gsize bytes;
  gsize capture_need; /* bytes an op asked for during the recording (ppx_backend_graph_end grows it) */
} DeviceBuffer;

typedef struct {
  int device;
  void *stream;
  char device_name[256];
  GMutex scratch_lock;
  DeviceBuffer scratch;
  guint64 scratch_epoch; /* +1 whenever the scratch buffer or the linear workspace moves: graphs recorded before are stale */
  GMutex rope_lock;
  GArray *rope_tables; /* RopeTable: device frequency tables by (Dh, max_period) */
  GMutex linear_lock;
  DeviceBuffer linear_ws; /* split-K workspace of the linear kernels (cuda-kernels.h) */
  /* graphs: one recording at a time per backend, on a stream of its own (capture_lock held throughout) */
  GMutex capture_lock;
  void *capture_stream;
  guint64 capture_epoch; /* scratch_epoch when the recording began */
  GArray *capture_rope;  /* RopeTable keys (freqs NULL) an op asked for during the recording */
} CudaPriv;

typedef struct {
  int Dh;
  float max_period;
  float *freqs; /* device, Dh/2 floats */
} RopeTable;

/* The backend the calling thread records a graph on (ppx_backend_graph_begin .. _end), or NULL. Its ops
 * then go to that backend's capture stream; other threads keep using the backend's stream. */
extern _Thread_local PpxBackend *cuda_tls_recording;

#define PRIV(be) ((CudaPriv *) (be)->priv)
/* The stream an op of this thread goes to: the capture stream while this thread records a graph. */
#define STREAM(be) (cuda_tls_recording == (be) ? PRIV (be)->capture_stream : PRIV (be)->stream)
#define F32(t) ((float *) (t)->data)
#define I32(t) ((int32_t *) (t)->data)

/* TRUE when be is a CUDA backend. */
gboolean cuda_is_backend (const PpxBackend *be);
/* Makes the backend's device current for this thread (ops may come from any thread); with PPX_CUDA_PROFILE,
 * opens the op's timing. */
void cuda_enter (PpxBackend *be);
/* Reports a CUDA error of `what` (a programming error or a lost device: g_critical), and closes the op's
 * timing. */
void cuda_check (PpxBackend *be, int err, const char *what);
/* The scratch buffer, at least `bytes` large; call with scratch_lock held (NULL inside a recording). */
void *cuda_scratch_get (PpxBackend *be, gsize bytes);
/* The linear kernels' split-K workspace, at least `bytes` large; call with linear_lock held. */
void *cuda_linear_workspace (PpxBackend *be, gsize bytes);
/* The RoPE frequency table of (Dh, max_period) on the device (NULL inside a recording when it is new). */
const float *cuda_rope_freqs (PpxBackend *be, int Dh, float max_period);
/* A weight as the kernels take it. */
PpxCudaWeight cuda_device_weight (const PpxWeight *w);

/* Graphs (backend-cuda-graph.c): the vtable's graph ops. */
gboolean cuda_graph_begin (PpxBackend *be, GError **error);
PpxGraph *cuda_graph_end (PpxBackend *be, GError **error);
gboolean cuda_graph_launch (PpxBackend *be, PpxGraph *graph);
void cuda_graph_free (PpxGraph *graph);

/* cuda-linear-mma.cu: the M <= 8 kernel choice for tests (ppx_backend_cuda_linear_force_gemv; declared here,
 * not in cuda-kernels.h, which every kernel object depends on) */
void ppx_cuda_linear_force_gemv (int mode);

#endif
