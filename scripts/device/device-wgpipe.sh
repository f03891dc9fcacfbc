#!/bin/sh
# Runs on the GPU machine: the software-pipelined wgmma stage (docs/cuda.md, "wgmma (sm_90a)", "The stage
# software-pipelined") against main's binaries, in one call within a time budget. PACK: device-pack.sh's pack
# of this branch plus bin/personaplex-bench; MAIN: a directory holding main's test-backend-cuda and
# personaplex-bench (run with PACK's lib/). Steps, in this order (default: all), each skipped or cut short when
# the budget (BUDGET seconds, default 225) runs low:
#   tests:  the linear tests that check the bits (batched rows against M = 1, slices, the path, against the CPU)
#           with PPX_CUDA_LINEAR_WGPIPE=1 (the pipelined stage) and 2 (and the ring without the block barrier),
#           then the golden model
#   bench:  --bench int4 on the four temporal shapes at PPX_BENCH_MS (default 80,128,160): main, then new with
#           PPX_CUDA_LINEAR_WGPIPE=1, 2 and 0 (main's order); the variant with the least summed time is the
#           sweep's (PIPE=N forces one)
#   sweep:  personaplex-bench's session sweep (int4, fp8 KV; 1,80,160 on a GPU of more than 100 GB, else
#           1,64,88), new then main (SWEEP_WHICH="main" or "new" for one), PPX_CUDA_LINEAR_WGPIPE set for both
#           (main ignores it)
# TESTS (names under /cuda/), TEST_PIPES, BENCH_PIPES and NO_GOLDEN=1 narrow the steps (a second, shorter call).
# Logs go to $OUT. Usage: sh device-wgpipe.sh PACK MAIN [steps...]
set -u
p=$(cd "$1" && pwd)
mb=$(cd "$2" && pwd)
shift 2
steps=${*:-tests bench sweep}
log=${OUT:-/tmp}
budget=${BUDGET:-225}
export LD_LIBRARY_PATH="$p/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" PPX_GOLDEN_DIR="$p/golden" PPX_DATA_DIR="$p/data"
export G_DEBUG=fatal-criticals
has () { case " $steps " in *" $1 "*) return 0;; esac; return 1; }
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader | tee "$log/gpu.txt"
mem=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
t0=$(date +%s)
el () { echo "[$(( $(date +%s) - t0 )) s] $*"; }
# the seconds a step may take: its cap, or what is left of the budget (0: skip it)
cap () {
  left=$(( budget - ($(date +%s) - t0) ))
  [ "$left" -lt 8 ] && { echo 0; return; }
  [ "$left" -lt "$1" ] && echo "$left" || echo "$1"
}
if has tests; then
  tests=""
  for x in ${TESTS:-linear-wgmma-path linear-batch linear-batch-slices linear}; do tests="$tests -p /cuda/$x"; done
  for v in ${TEST_PIPES:-1 2}; do
    t=$(cap 50)
    [ "$t" -gt 0 ] && PPX_CUDA_LINEAR_WGPIPE=$v timeout "$t" "$p/bin/test-backend-cuda" --verbose $tests \
      > "$log/tests-pipe$v.log" 2>&1
    el "linear tests (PPX_CUDA_LINEAR_WGPIPE=$v) exit $?"
    grep -E '^(ok|not ok)|Bail|ERROR|differs' "$log/tests-pipe$v.log" | tail -6
  done
  t=$(cap 30)
  if [ -z "${NO_GOLDEN:-}" ] && [ "$t" -gt 0 ]; then
    timeout "$t" "$p/bin/test-backend-cuda" --verbose -p /cuda/golden > "$log/tests-golden.log" 2>&1
    el "golden test exit $?"
    grep -E '^(ok|not ok)|Bail|ERROR' "$log/tests-golden.log" | tail -3
  fi
fi
best=${PIPE:-}
if has bench; then
  export PPX_BENCH_MS=${PPX_BENCH_MS:-80,128,160}
  shapes=${BENCH_SHAPES:-22528x4096,12288x4096,4096x11264,4096x4096}
  run () { # name, env..., binary
    name=$1; shift
    t=$(cap 30)
    [ "$t" -gt 0 ] || { el "== $name skipped (budget)"; return; }
    timeout "$t" env "$@" --bench int4 "$shapes" > "$log/bench-$name.log" 2>&1
    el "== $name"; grep -E '^int4' "$log/bench-$name.log" | awk '{printf "%s %s %s | ", $2"x"$4, $7, $8} END {print ""}' \
      | fold -w 200
  }
  run main "$mb/test-backend-cuda"
  for v in ${BENCH_PIPES:-1 2 0}; do
    run pipe$v PPX_CUDA_LINEAR_WGPIPE=$v "$p/bin/test-backend-cuda"
  done
  # the sweep's variant: the one with the least time summed over the bench's lines (all of them present)
  if [ -z "$best" ]; then
    bs=""
    for v in ${BENCH_PIPES:-1 2 0}; do
      n=$(grep -cE '^int4' "$log/bench-pipe$v.log" 2>/dev/null)
      s=$(grep -E '^int4' "$log/bench-pipe$v.log" 2>/dev/null | awk '{s += $8} END {printf "%.0f", s * 100}')
      [ "${n:-0}" -ge 12 ] || continue
      if [ -z "$bs" ] || [ "$s" -lt "$bs" ]; then bs=$s best=$v; fi
    done
  fi
fi
if has sweep; then
  sw=${SWEEP:-$([ "${mem:-0}" -gt 100000 ] && echo 1,80,160 || echo 1,64,88)}
  best=${best:-1}
  for nb in ${SWEEP_WHICH:-new main}; do
    case $nb in new) b=$p/bin/personaplex-bench;; *) b=$mb/personaplex-bench;; esac
    t=$(cap 75)
    [ "$t" -gt 0 ] || { el "sweep $nb skipped (budget)"; continue; }
    PPX_CUDA_LINEAR_WGPIPE=$best timeout "$t" "$b" -r full -q int4 -b cuda -c session --context 3000 --sweep "$sw" \
      --sweep-kv fp8 -n 20 -w 3 > "$log/sweep-$nb.log" 2>&1
    el "sweep $nb ($sw, PPX_CUDA_LINEAR_WGPIPE=$best) exit $?"
    grep -E '^(fp8|kv) ' "$log/sweep-$nb.log"
  done
fi
el done
