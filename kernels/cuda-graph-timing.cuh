/* Timing a kernel sequence the way a whole-frame graph runs it (the linear and convolution planners' benches):
 * warm-up calls, the calls captured into one graph, the graph replayed; private to the kernel files. */
#ifndef PPX_CUDA_GRAPH_TIMING_CUH
#define PPX_CUDA_GRAPH_TIMING_CUH

#include <cuda_runtime.h>

/* call(i) enqueues call i on @s and returns its CUDA error. Runs calls 0..warmups-1 and waits (module load,
 * shared-memory attributes), records calls 0..calls-1 in a graph, replays it once, then @reps times between events;
 * *us is the median time of one call in microseconds. *step names the stage an error came from. Returns the first
 * CUDA error; the graph and events are released either way. */
template <typename Call>
static int
ppx_time_graph (cudaStream_t s, int warmups, int calls, int reps, Call call, double *us, const char **step)
{
  cudaGraph_t graph = NULL;
  cudaGraphExec_t exec = NULL;
  cudaEvent_t ev[2] = {NULL, NULL};
  double *times = new double[reps > 0 ? reps : 1];
  int e = 0;
  *step = "warm-up";
  for (int i = 0; !e && i < warmups; i++)
    e = call (i);
  if (!e)
    e = (int) cudaStreamSynchronize (s);
  if (!e) {
    *step = "capture";
    e = (int) cudaStreamBeginCapture (s, cudaStreamCaptureModeThreadLocal);
  }
  if (!e) {
    for (int i = 0; !e && i < calls; i++)
      e = call (i);
    const int e2 = (int) cudaStreamEndCapture (s, &graph);
    e = e ? e : e2;
  }
  if (!e) {
    *step = "replay";
    e = (int) cudaGraphInstantiate (&exec, graph, 0);
  }
  if (!e)
    e = (int) cudaEventCreate (&ev[0]);
  if (!e)
    e = (int) cudaEventCreate (&ev[1]);
  if (!e)
    e = (int) cudaGraphLaunch (exec, s);
  for (int r = 0; !e && r < reps; r++) {
    float ms = 0.0f;
    if (!(e = (int) cudaEventRecord (ev[0], s)) && !(e = (int) cudaGraphLaunch (exec, s)) &&
        !(e = (int) cudaEventRecord (ev[1], s)) && !(e = (int) cudaEventSynchronize (ev[1])) &&
        !(e = (int) cudaEventElapsedTime (&ms, ev[0], ev[1])))
      times[r] = 1000.0 * ms / calls;
  }
  if (!e && reps > 0) {
    for (int i = 1; i < reps; i++) /* insertion sort for the median */
      for (int j = i; j > 0 && times[j] < times[j - 1]; j--) {
        const double tmp = times[j];
        times[j] = times[j - 1];
        times[j - 1] = tmp;
      }
    *us = times[reps / 2];
  }
  delete[] times;
  if (exec || graph)
    cudaStreamSynchronize (s);
  for (int i = 0; i < 2; i++)
    if (ev[i])
      cudaEventDestroy (ev[i]);
  if (exec)
    cudaGraphExecDestroy (exec);
  if (graph)
    cudaGraphDestroy (graph);
  return e;
}

#endif
