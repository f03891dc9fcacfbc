/* CUDA backend: an optional per-op GPU time profile (PPX_CUDA_PROFILE=1, docs/cuda.md "Profiling").
 *
 * backend-cuda.c brackets every op it enqueues outside a graph recording with two events on the op's stream
 * and names the pair (the op, plus the shape for linear layers, convolutions and attention). The pairs are
 * resolved in batches (a stream sync every PROFILE_BATCH ops) and summed per name; ppx_cuda_profile_dump
 * prints the table, slowest total first. An event pair times the GPU from the end of the previous work on
 * the stream to the end of the op, so an op that the host launches slower than the GPU runs it also counts
 * the host's launch gap: the figures are the op's share of the stream's wall time. Off by default: the
 * hooks then cost one branch per op. */
#include "cuda-common.cuh"

#include <algorithm>
#include <map>
#include <mutex>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <string>
#include <vector>

namespace
{
const size_t PROFILE_BATCH = 4096;

struct Pending {
  cudaEvent_t start, end;
  std::string key;
};

struct Total {
  long calls = 0;
  double ms = 0.0;
};

std::mutex lock;
std::vector<Pending> pending;
std::vector<cudaEvent_t> spare;
std::map<std::string, Total> totals;
thread_local cudaEvent_t open_start = NULL;

cudaEvent_t
event_get ()
{
  if (!spare.empty ()) {
    cudaEvent_t e = spare.back ();
    spare.pop_back ();
    return e;
  }
  cudaEvent_t e = NULL;
  if (cudaEventCreate (&e) != cudaSuccess)
    return NULL;
  return e;
}

/* Resolves every pending pair (waits for them); call with the lock held. */
void
resolve ()
{
  for (Pending &p : pending) {
    float ms = 0.0f;
    if (cudaEventSynchronize (p.end) == cudaSuccess && cudaEventElapsedTime (&ms, p.start, p.end) == cudaSuccess) {
      Total &t = totals[p.key];
      t.calls++;
      t.ms += ms;
    }
    spare.push_back (p.start);
    spare.push_back (p.end);
  }
  pending.clear ();
}
} // namespace

extern "C" int
ppx_cuda_profile_enabled (void)
{
  static int enabled = -1;
  if (enabled < 0) {
    const char *e = getenv ("PPX_CUDA_PROFILE");
    enabled = e && *e && strcmp (e, "0") != 0;
  }
  return enabled;
}

extern "C" void
ppx_cuda_profile_begin (void *stream)
{
  std::lock_guard<std::mutex> g (lock);
  open_start = event_get ();
  if (open_start)
    cudaEventRecord (open_start, PPX_CUDA_STREAM (stream));
}

extern "C" void
ppx_cuda_profile_end (void *stream, const char *key)
{
  std::lock_guard<std::mutex> g (lock);
  if (!open_start)
    return;
  cudaEvent_t end = event_get ();
  if (!end) {
    spare.push_back (open_start);
    open_start = NULL;
    return;
  }
  cudaEventRecord (end, PPX_CUDA_STREAM (stream));
  pending.push_back (Pending{open_start, end, key});
  open_start = NULL;
  if (pending.size () >= PROFILE_BATCH)
    resolve ();
}

extern "C" void
ppx_cuda_profile_dump (const char *title)
{
  std::lock_guard<std::mutex> g (lock);
  resolve ();
  if (totals.empty ())
    return;
  std::vector<std::pair<std::string, Total>> rows (totals.begin (), totals.end ());
  double all = 0.0;
  for (auto &r : rows)
    all += r.second.ms;
  std::sort (rows.begin (), rows.end (), [] (const auto &a, const auto &b) { return a.second.ms > b.second.ms; });
  fprintf (stderr, "cuda profile (%s): %.3f ms in %zu op kinds\n%12s %8s %10s %6s  %s\n", title, all, rows.size (),
           "total ms", "calls", "us/call", "%", "op");
  for (auto &r : rows)
    fprintf (stderr, "%12.3f %8ld %10.2f %6.2f  %s\n", r.second.ms, r.second.calls, 1000.0 * r.second.ms / r.second.calls,
             100.0 * r.second.ms / all, r.first.c_str ());
  totals.clear ();
}
