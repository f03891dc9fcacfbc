/* The CUDA backend's graphs (backend.h): ppx_backend_graph_begin captures the calling thread's ops on a
 * second stream (cudaStreamCaptureModeThreadLocal, so other threads' ops and allocations on the backend are
 * unaffected); graph_end instantiates the capture, and a launch replays it on the backend's stream. An op
 * that needs scratch memory or a RoPE table the backend has not allocated yet gets none inside a recording
 * (nothing may allocate there): graph_end allocates it and fails, and the caller records again. A graph
 * remembers the scratch buffer it was recorded with (scratch_epoch); one recorded before the buffer moved is
 * stale and not launched. */
#include "backend-cuda-internal.h"

typedef struct {
  PpxGraph g;
  void *exec;     /* cudaGraphExec_t */
  guint64 epoch;  /* the scratch_epoch it was recorded with */
} CudaGraph;

gboolean
cuda_graph_begin (PpxBackend *be, GError **error)
{
  CudaPriv *p = PRIV (be);
  if (cuda_tls_recording) {
    g_set_error (error, PPX_ERROR, PPX_ERROR_INVALID, "CUDA backend: this thread records a graph already");
    return FALSE;
  }
  cuda_enter (be);
  g_mutex_lock (&p->capture_lock); /* one recording at a time: the capture stream and fields are shared */
  int e = p->capture_stream ? 0 : ppx_cuda_stream_create (&p->capture_stream);
  if (!e) {
    g_mutex_lock (&p->scratch_lock);
    p->capture_epoch = p->scratch_epoch;
    p->scratch.capture_need = 0;
    g_mutex_unlock (&p->scratch_lock);
    g_mutex_lock (&p->linear_lock);
    p->linear_ws.capture_need = 0;
    g_mutex_unlock (&p->linear_lock);
    g_array_set_size (p->capture_rope, 0);
    e = ppx_cuda_capture_begin (p->capture_stream);
  }
  if (e) {
    g_mutex_unlock (&p->capture_lock);
    g_set_error (error, PPX_ERROR, PPX_ERROR_UNSUPPORTED, "CUDA backend (GPU %d): cannot record a graph: %s",
                 p->device, ppx_cuda_error_string (e));
    return FALSE;
  }
  cuda_tls_recording = be;
  return TRUE;
}

PpxGraph *
cuda_graph_end (PpxBackend *be, GError **error)
{
  CudaPriv *p = PRIV (be);
  if (cuda_tls_recording != be) {
    g_set_error (error, PPX_ERROR, PPX_ERROR_INVALID, "CUDA backend: this thread records no graph on this backend");
    return NULL;
  }
  cuda_enter (be);
  void *exec = NULL;
  size_t nodes = 0;
  const int e = ppx_cuda_capture_end (p->capture_stream, &exec, &nodes);
  cuda_tls_recording = NULL;
  /* what the recorded ops could not allocate is allocated now, so the next recording succeeds */
  for (guint i = 0; i < p->capture_rope->len; i++) {
    const RopeTable *t = &g_array_index (p->capture_rope, RopeTable, i);
    cuda_rope_freqs (be, t->Dh, t->max_period);
  }
  const gboolean rope_missing = p->capture_rope->len > 0;
  g_array_set_size (p->capture_rope, 0);
  g_mutex_lock (&p->linear_lock);
  const gsize linear_need = p->linear_ws.capture_need;
  if (linear_need > p->linear_ws.bytes)
    cuda_linear_workspace (be, linear_need); /* bumps scratch_epoch: checked below */
  p->linear_ws.capture_need = 0;
  g_mutex_unlock (&p->linear_lock);
  g_mutex_lock (&p->scratch_lock);
  const gsize need = p->scratch.capture_need;
  const gboolean moved = p->scratch_epoch != p->capture_epoch;
  if (need > p->scratch.bytes)
    cuda_scratch_get (be, need);
  const guint64 epoch = p->scratch_epoch;
  g_mutex_unlock (&p->scratch_lock);
  g_mutex_unlock (&p->capture_lock);
  if (e) {
    g_set_error (error, PPX_ERROR, PPX_ERROR_UNSUPPORTED, "CUDA backend (GPU %d): recording a graph failed: %s",
                 p->device, ppx_cuda_error_string (e));
    return NULL;
  }
  if (need > 0 || linear_need > 0 || rope_missing || moved) {
    ppx_cuda_graph_destroy (exec);
    g_set_error (error, PPX_ERROR, PPX_ERROR_UNSUPPORTED,
                 "CUDA backend (GPU %d): the graph's ops needed %s; allocated now, record again", p->device,
                 moved ? "scratch memory that moved during the recording"
                 : rope_missing ? "RoPE tables" : linear_need > 0 ? "a larger linear workspace" : "more scratch memory");
    return NULL;
  }
  CudaGraph *g = g_new0 (CudaGraph, 1);
  g->g.be = be;
  g->g.nodes = nodes;
  g->g.priv = g;
  g->exec = exec;
  g->epoch = epoch;
  return &g->g;
}

gboolean
cuda_graph_launch (PpxBackend *be, PpxGraph *graph)
{
  CudaPriv *p = PRIV (be);
  CudaGraph *g = graph->priv;
  cuda_enter (be);
  g_mutex_lock (&p->scratch_lock); /* the scratch buffer cannot move between the check and the launch */
  const gboolean fresh = g->epoch == p->scratch_epoch;
  if (fresh)
    cuda_check (be, ppx_cuda_graph_launch (g->exec, STREAM (be)), "graph launch");
  g_mutex_unlock (&p->scratch_lock);
  return fresh;
}

void
cuda_graph_free (PpxGraph *graph)
{
  CudaGraph *g = graph->priv;
  cuda_enter (graph->be);
  cuda_check (graph->be, ppx_cuda_graph_destroy (g->exec), "graph free");
  g_free (g);
}
