#!/bin/sh
# Runs on the GPU machine: the int8 linears on wgmma (docs/cuda.md, "int8 on wgmma") against mma.sync, the same
# binary (PPX_CUDA_LINEAR_WGMMA_INT8=0: mma.sync, main's path; 17: wgmma from 17 rows on every shape; unset: the
# default, by shape; PPX_CUDA_LINEAR_SLICE_DEP=N: slices of N n-tiles for the depformer's shapes past 128 rows).
# PACK: a pack made by device-pack.sh with tools/personaplex-bench in bin/ (profsum.py beside this script, or PROFSUM).
#   bench:   --bench int8 on the depformer's shapes and two temporal ones at PPX_BENCH_MS, mma.sync and the
#            default; both paths again with forced slices (PPX_BENCH_SLICES) at 128..256 rows on the depformer's shapes
#   tests:   the linear tests (rows bit for bit against M = 1, slices, the path check) at the default
#   tests1:  the batch tests with wgmma at every M (PPX_CUDA_LINEAR_WGMMA=1), /cuda/linear, /cuda/golden, test-engine
#   profile: PPX_CUDA_PROFILE=1 at M = PROFILE_M (160 on an H200, 80 on an H100), three ways (mma.sync as main;
#            mma.sync in slices of 4 past 128 rows; the default), by part and by shape
#   sweep:   the session sweep (1,80; 1,80,160 on an H200), the same three ways
# Logs go to $OUT. Usage: sh device-wgmma-int8.sh PACK [bench] [tests] [tests1] [profile] [sweep]
set -u
p=$(cd "$1" && pwd)
shift
modes=${*:-bench tests profile sweep}
log=${OUT:-/tmp}
here=$(cd "$(dirname "$0")" && pwd)
profsum=${PROFSUM:-$here/profsum.py}
export LD_LIBRARY_PATH="$p/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export G_DEBUG=fatal-criticals
has () { case " $modes " in *" $1 "*) return 0;; esac; return 1; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$log/gpu.txt"
mem=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
big=$([ "${mem:-0}" -gt 100000 ] && echo 1 || echo 0)
t0=$(date +%s)
el () { echo "[$(( $(date +%s) - t0 )) s] $*"; }
tb="$p/bin/test-backend-cuda"
dep=3072x1024,1024x1024,5632x1024,1024x2816,1024x4096
tab () { grep -E '^int8' "$1" | awk '{printf "%s %s %s%s | ", $2"x"$4, $7, $8, ($NF ~ /^slice=/ ? " " $NF : "")} END {print ""}' | fold -w 230; }
if has bench; then
  export PPX_BENCH_MS=${PPX_BENCH_MS:-17,32,80,128,160,200,256}
  for w in 0 dflt; do
    e=PPX_CUDA_LINEAR_WGMMA_INT8=$w; [ $w = dflt ] && e=PPX_DEFAULT=1
    timeout 60 env $e "$tb" --bench int8 $dep,22528x4096,4096x4096 > "$log/bench-int8-$w.log" 2>&1
    el "int8 bench, PPX_CUDA_LINEAR_WGMMA_INT8=$w: exit $?"; tab "$log/bench-int8-$w.log"
  done
  for w in 0 17; do
    timeout 50 env PPX_CUDA_LINEAR_WGMMA_INT8=$w PPX_BENCH_MS=${SLICE_MS:-128,160,200,256} PPX_BENCH_SLICES=${SLICES:-0,2,4,8} \
      "$tb" --bench int8 $dep > "$log/bench-int8-slices-$w.log" 2>&1
    el "int8 bench, PPX_CUDA_LINEAR_WGMMA_INT8=$w, forced slices: exit $?"; tab "$log/bench-int8-slices-$w.log"
  done
fi
if has tests; then
  PPX_GOLDEN_DIR="$p/golden" timeout 70 "$tb" --verbose -p /cuda/linear-wgmma-path -p /cuda/linear-batch \
    -p /cuda/linear-batch-slices > "$log/tests-batch.log" 2>&1
  el "batch tests (default switch) exit $?"
  grep -E '^(ok|not ok)|Bail|ERROR|differs|first launch|expected' "$log/tests-batch.log" | tail -6
fi
if has tests1; then
  PPX_CUDA_LINEAR_WGMMA=1 timeout 70 "$tb" --verbose -p /cuda/linear-batch -p /cuda/linear-batch-slices \
    > "$log/tests1-batch.log" 2>&1
  el "batch tests (wgmma at every M) exit $?"
  grep -E '^(ok|not ok)|Bail|ERROR|differs' "$log/tests1-batch.log" | tail -6
  PPX_GOLDEN_DIR="$p/golden" timeout 60 "$tb" --verbose -p /cuda/linear -p /cuda/golden > "$log/tests-linear.log" 2>&1
  el "linear + golden tests exit $?"
  grep -E '^(ok|not ok)|Bail|ERROR|mismatch' "$log/tests-linear.log" | tail -6
  if [ -x "$p/bin/test-engine" ]; then
    PPX_GOLDEN_DIR="$p/golden" timeout 60 "$p/bin/test-engine" cuda > "$log/test-engine.log" 2>&1
    el "test-engine cuda exit $?"
    tail -3 "$log/test-engine.log"
  fi
fi
# the ways compared: name and environment (new: the defaults)
ways=${WAYS:-mma:PPX_CUDA_LINEAR_WGMMA_INT8=0 mma4:PPX_CUDA_LINEAR_WGMMA_INT8=0,PPX_CUDA_LINEAR_SLICE_DEP=4 new:PPX_DEFAULT=1}
if has profile; then
  m=${PROFILE_M:-$([ "$big" = 1 ] && echo 160 || echo 80)}
  for wy in $ways; do
    n=${wy%%:*}; e=$(echo "${wy#*:}" | tr ',' ' ')
    env $e PPX_CUDA_PROFILE=1 timeout 60 "$p/bin/personaplex-bench" -r full -q int4 -b cuda \
      -c session --context 3000 --cuda-graphs off -B "$m" --kv-cache-format fp8 -n 10 -w 3 > "$log/profile-$m-$n.log" 2>&1
    el "profile M=$m, $n ($e): exit $?"
    python3 "$profsum" "$log/profile-$m-$n.log" "$m" 13 2>&1 | head -4
    grep -E "linear.*int8 [0-9]+x[0-9]+ M=$m\$" "$log/profile-$m-$n.log" | grep -v 32000x4096 | \
      awk '{printf "%s %.3f ms | ", $(NF-1), $1 / 13}' | fold -w 230; echo
  done
fi
if has sweep; then
  sw=${SWEEP:-$([ "$big" = 1 ] && echo 1,80,160 || echo 1,80)}
  for wy in $ways; do
    n=${wy%%:*}; e=$(echo "${wy#*:}" | tr ',' ' ')
    env $e timeout ${SWEEP_TIMEOUT:-70} "$p/bin/personaplex-bench" -r full -q int4 -b cuda \
      -c session --context 3000 --sweep "$sw" --sweep-kv fp8 -n 20 -w 3 > "$log/sweep-$n.log" 2>&1
    el "sweep ($sw), $n ($e): exit $?"
    grep -E '^fp8 ' "$log/sweep-$n.log" | tail -4
  done
fi
(cd "$log" && tar -czf logs.tgz *.log && rm -f *.log)
