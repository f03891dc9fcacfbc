#!/bin/sh
# Runs on the GPU machine: the bf16 linears on wgmma (docs/cuda.md, "bf16 on wgmma") against mma.sync, the same
# binary (PPX_CUDA_LINEAR_WGMMA_BF16=0: mma.sync, main's path; 17: wgmma from 17 rows on every shape; unset: the
# default, by shape). All in one call, within BUDGET seconds (default 190): each step gets what is left.
# PACK: a pack made by device-pack.sh with tools/personaplex-bench in bin/.
#   tests:  the linear tests (rows bit for bit against M = 1, slices, the path check, /cuda/linear, golden) at the
#           default
#   tests1: the batch tests with wgmma at every M (PPX_CUDA_LINEAR_WGMMA=1)
#   bench:  --bench bf16 on the temporal shapes (and the depformer's) at PPX_BENCH_MS, mma.sync and wgmma
#   sweep:  the session sweep (1,32, bf16 KV), mma.sync and the default
# Logs go to $OUT. Usage: sh device-wgmma-bf16.sh PACK [tests] [tests1] [bench] [sweep] (run in that order)
set -u
p=$(cd "$1" && pwd)
shift
modes=${*:-tests tests1 bench sweep}
log=${OUT:-/tmp}
export LD_LIBRARY_PATH="$p/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export G_DEBUG=fatal-criticals
has () { case " $modes " in *" $1 "*) return 0;; esac; return 1; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$log/gpu.txt"
t0=$(date +%s)
budget=${BUDGET:-190}
el () { echo "[$(( $(date +%s) - t0 )) s] $*"; }
# timeout for a step: at most $1 seconds, and no more than what is left of the budget (at least 5)
tmo () { left=$(( budget - ($(date +%s) - t0) )); [ "$left" -lt "$1" ] && echo $(( left > 5 ? left : 5 )) || echo "$1"; }
# whether at least $1 seconds of the budget are left (else the step is skipped)
room () { [ $(( budget - ($(date +%s) - t0) )) -ge "$1" ] || { el "skipped: $2 (budget)"; return 1; }; }
tb="$p/bin/test-backend-cuda"
tab () { grep -E '^bf16' "$1" | awk '{printf "%s %s %s | ", $2"x"$4, $7, $8} END {print ""}' | fold -w 230; }
do_tests () {
  PPX_GOLDEN_DIR="$p/golden" PPX_DATA_DIR="$p/data" timeout "$(tmo 50)" "$tb" --verbose -p /cuda/linear-wgmma-path \
    -p /cuda/linear-batch -p /cuda/linear-batch-slices -p /cuda/linear -p /cuda/golden > "$log/tests.log" 2>&1
  el "tests (default switch) exit $?"
  grep -E '^(ok|not ok)|Bail|ERROR|differs|expected|mismatch' "$log/tests.log" | tail -8
}
do_tests1 () {
  room 20 "batch tests at PPX_CUDA_LINEAR_WGMMA=1" && PPX_CUDA_LINEAR_WGMMA=1 timeout "$(tmo 35)" "$tb" --verbose -p /cuda/linear-batch -p /cuda/linear-batch-slices \
    > "$log/tests1.log" 2>&1
  el "batch tests (wgmma at every M) exit $?"
  [ -f "$log/tests1.log" ] && grep -E '^(ok|not ok)|Bail|ERROR|differs' "$log/tests1.log" | tail -4
}
do_bench () {
  export PPX_BENCH_MS=${PPX_BENCH_MS:-1,17,32,64,80}
  for w in 0 17; do
    room 12 "bench $w" || continue
    timeout "$(tmo 25)" env PPX_CUDA_LINEAR_WGMMA_BF16=$w "$tb" --bench bf16 \
      ${SHAPES:-22528x4096,12288x4096,4096x11264,4096x4096,3072x1024,1024x4096} > "$log/bench-bf16-$w.log" 2>&1
    el "bf16 bench, PPX_CUDA_LINEAR_WGMMA_BF16=$w: exit $?"; tab "$log/bench-bf16-$w.log"
  done
}
do_sweep () {
  for wy in new:PPX_DEFAULT=1 mma:PPX_CUDA_LINEAR_WGMMA_BF16=0; do
    n=${wy%%:*}; e=${wy#*:}
    room 25 "sweep $n" || continue
    env $e timeout "$(tmo 45)" "$p/bin/personaplex-bench" -r full -q bf16 -b cuda \
      -c session --context 3000 --sweep "${SWEEP:-1,32}" --sweep-kv bf16 -n 20 -w 3 > "$log/sweep-$n.log" 2>&1
    el "sweep, $n ($e): exit $?"
    grep -E '^bf16 ' "$log/sweep-$n.log" | tail -3
  done
}
for m in $modes; do "do_$m"; done
(cd "$log" && tar -czf logs.tgz *.log && rm -f *.log)
