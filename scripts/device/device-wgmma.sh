#!/bin/sh
# Runs on the GPU machine over a folder made by device-pack.sh with the branch point's test-backend-cuda beside
# the new one (bin/test-backend-cuda-base): the wgmma linears (docs/cuda.md, "wgmma (sm_90a)").
#   tests:   the linear tests (batched rows bit for bit against M = 1 at the default switch M = 9, so wgmma
#            rows against mma.sync rows), the slices, the fused norms, the golden run; test-gpu-tick and
#            test-engine when packed
#   tests1:  /cuda/linear-batch and -slices with wgmma at every M (PPX_CUDA_LINEAR_WGMMA=1)
#   bench:   --bench int4 on the four temporal shapes for base, new and new with wgmma off
#            (PPX_CUDA_LINEAR_WGMMA=0), PPX_BENCH_MS (default 1,16,32,64,80,88,128,160)
#   bench-small: new with wgmma at M = 16, 32 in one slice, and at M = 1, 8
# Logs go to $OUT. Usage: sh device-wgmma.sh DIR [tests|tests1|bench|bench-small]...
set -u
dir=$(cd "$1" && pwd)
shift
modes=${*:-tests bench}
log=${OUT:-/tmp}
export LD_LIBRARY_PATH="$dir/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PPX_GOLDEN_DIR="$dir/golden" PPX_DATA_DIR="$dir/data" G_DEBUG=fatal-criticals
new="$dir/bin/test-backend-cuda"
has () { case " $modes " in *" $1 "*) return 0;; esac; return 1; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
if has tests; then
  # the batched rows first, apart: a row that differs ends that process (g_error)
  timeout 200 "$new" --verbose -p /cuda/linear-batch -p /cuda/linear-batch-slices > "$log/tests-batch.log" 2>&1
  echo "batch tests exit $?"
  grep -E '^(ok|not ok)|Bail|ERROR|differs' "$log/tests-batch.log" | tail -6
  timeout 300 "$new" --verbose -p /cuda/linear -p /cuda/rmsnorm-linear -p /cuda/silu-gate-linear -p /cuda/golden \
    > "$log/tests.log" 2>&1
  echo "tests exit $?"
  grep -E '^(ok|not ok)|Bail|ERROR|differs|golden on|relative' "$log/tests.log" | tail -12
  for t in test-gpu-tick test-engine; do
    [ -x "$dir/bin/$t" ] || continue
    timeout 240 "$dir/bin/$t" > "$log/$t.log" 2>&1
    echo "$t exit $?"
    grep -E '^(not ok)|Bail|ERROR' "$log/$t.log" | tail -5
  done
fi
if has tests1; then
  PPX_CUDA_LINEAR_WGMMA=1 timeout 200 "$new" --verbose -p /cuda/linear-batch -p /cuda/linear-batch-slices \
    > "$log/tests1-batch.log" 2>&1
  echo "batch tests (wgmma at every M) exit $?"
  grep -E '^(ok|not ok)|Bail|ERROR|differs' "$log/tests1-batch.log" | tail -6
  PPX_CUDA_LINEAR_WGMMA=1 timeout 240 "$new" --verbose -p /cuda/linear -p /cuda/rmsnorm-linear -p /cuda/golden \
    > "$log/tests1.log" 2>&1
  echo "tests (wgmma at every M) exit $?"
  grep -E '^(ok|not ok)|Bail|ERROR|differs' "$log/tests1.log" | tail -8
fi
if has bench; then
  export PPX_BENCH_MS=${PPX_BENCH_MS:-1,16,32,64,80,88,128,160}
  shapes=${BENCH_SHAPES:-22528x4096,12288x4096,4096x11264,4096x4096}
  run () { # name, env..., binary
    name=$1; shift
    env "$@" --bench int4 "$shapes" > "$log/bench-$name.log" 2>&1
    echo "== $name"; grep -E '^int4' "$log/bench-$name.log" | awk '{printf "%s %s %s | ", $2"x"$4, $7, $8} END {print ""}' | fold -w 220
  }
  run base "$dir/bin/test-backend-cuda-base"
  run new "$new"
  [ -n "${BENCH_OFF:-}" ] && run new-off PPX_CUDA_LINEAR_WGMMA=0 "$new"
fi
if has bench-small; then
  # wgmma at M = 16, 32 in one slice (PPX_CUDA_LINEAR_SLICE=16) and at M = 1, 8 (PPX_CUDA_LINEAR_WGMMA=1)
  shapes=${BENCH_SHAPES:-22528x4096,12288x4096,4096x11264,4096x4096}
  PPX_BENCH_MS=16,32 PPX_CUDA_LINEAR_SLICE=16 "$new" --bench int4 "$shapes" > "$log/bench-slice16.log" 2>&1
  echo "== new, one slice"; grep -E '^int4' "$log/bench-slice16.log" | awk '{printf "%s %s %s | ", $2"x"$4, $7, $8} END {print ""}' | fold -w 220
  PPX_BENCH_MS=1,8 PPX_CUDA_LINEAR_WGMMA=1 "$new" --bench int4 "$shapes" > "$log/bench-wg1.log" 2>&1
  echo "== new, wgmma at M = 1, 8"; grep -E '^int4' "$log/bench-wg1.log" | awk '{printf "%s %s %s | ", $2"x"$4, $7, $8} END {print ""}' | fold -w 220
fi
