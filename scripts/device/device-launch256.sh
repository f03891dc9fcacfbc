#!/bin/sh
# Runs on the GPU machine: one launch for up to 256 rows of x on mma.sync too (int8, bf16; docs/cuda.md, "Up to
# 256 rows in one launch"), against the two launches before (PPX_CUDA_LINEAR_LAUNCH_ROWS=128, the same binary).
# PACK: a pack made by device-pack.sh with tools/personaplex-bench in bin/ (and profsum.py beside this script's
# copy, or PROFSUM).
#   tests:   the linear tests (rows bit for bit against M = 1 up to M = 300, slices, the launch-rows check, the
#            golden conversation), test-engine (batched == alone)
#   bench:   --bench int8 on the depformer's shapes, bf16 on two temporal ones, at PPX_BENCH_MS, both ways
#   profile: PPX_CUDA_PROFILE=1 at M = PROFILE_M (160), both ways, summed by part (profsum.py)
#   sweep:   the session sweep (SWEEP, default 1,144,160), both ways
# Logs go to $OUT. Usage: sh device-launch256.sh PACK [tests] [bench] [profile] [sweep]
set -u
p=$(cd "$1" && pwd)
shift
modes=${*:-tests bench profile sweep}
log=${OUT:-/tmp}
here=$(cd "$(dirname "$0")" && pwd)
profsum=${PROFSUM:-$here/profsum.py}
export LD_LIBRARY_PATH="$p/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export G_DEBUG=fatal-criticals
has () { case " $modes " in *" $1 "*) return 0;; esac; return 1; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$log/gpu.txt"
t0=$(date +%s)
el () { echo "[$(( $(date +%s) - t0 )) s] $*"; }
if has tests; then
  PPX_GOLDEN_DIR="$p/golden" timeout 150 "$p/bin/test-backend-cuda" --verbose -p /cuda/linear-wgmma-path \
    -p /cuda/linear-batch -p /cuda/linear-batch-slices -p /cuda/linear -p /cuda/golden > "$log/tests-linear.log" 2>&1
  el "linear tests exit $?"
  grep -E '^(ok|not ok)|Bail|ERROR|differs|first launch' "$log/tests-linear.log" | tail -8
  if [ -x "$p/bin/test-engine" ]; then
    PPX_GOLDEN_DIR="$p/golden" timeout 120 "$p/bin/test-engine" cuda > "$log/test-engine.log" 2>&1
    el "test-engine cuda exit $?"
    tail -3 "$log/test-engine.log"
  fi
fi
if has bench; then
  export PPX_BENCH_MS=${PPX_BENCH_MS:-80,128,144,160,200,256}
  for rows in 128 256; do
    timeout 60 env PPX_CUDA_LINEAR_LAUNCH_ROWS=$rows "$p/bin/test-backend-cuda" --bench int8 \
      3072x1024,1024x1024,5632x1024,1024x2816,1024x4096 > "$log/bench-int8-$rows.log" 2>&1
    el "int8, launches of $rows rows: exit $?"
    grep -E '^int8' "$log/bench-int8-$rows.log" | awk '{printf "%s %s %s | ", $2"x"$4, $7, $8} END {print ""}' | fold -w 200
    timeout 60 env PPX_CUDA_LINEAR_LAUNCH_ROWS=$rows PPX_BENCH_MS=80,160,200 "$p/bin/test-backend-cuda" --bench bf16 \
      22528x4096,4096x4096 > "$log/bench-bf16-$rows.log" 2>&1
    el "bf16, launches of $rows rows: exit $?"
    grep -E '^bf16' "$log/bench-bf16-$rows.log" | awk '{printf "%s %s %s | ", $2"x"$4, $7, $8} END {print ""}' | fold -w 200
  done
fi
if has profile; then
  m=${PROFILE_M:-160}
  for rows in 128 256; do
    PPX_CUDA_LINEAR_LAUNCH_ROWS=$rows PPX_CUDA_PROFILE=1 timeout 120 "$p/bin/personaplex-bench" -r full -q int4 -b cuda \
      -c session --context 3000 --cuda-graphs off -B "$m" --kv-cache-format fp8 -n 10 -w 3 > "$log/profile-$m-$rows.log" 2>&1
    el "profile M=$m, launches of $rows rows: exit $?"
    python3 "$profsum" "$log/profile-$m-$rows.log" "$m" 13 "128,$((m - 128))" 2>&1 | head -12
  done
fi
if has sweep; then
  sw=${SWEEP:-1,144,160}
  for rows in 256 128; do
    PPX_CUDA_LINEAR_LAUNCH_ROWS=$rows timeout ${SWEEP_TIMEOUT:-120} "$p/bin/personaplex-bench" -r full -q int4 -b cuda \
      -c session --context 3000 --sweep "$sw" --sweep-kv fp8 -n 20 -w 3 > "$log/sweep-$rows.log" 2>&1
    el "sweep ($sw), launches of $rows rows: exit $?"
    grep -vE '^(personaplex-bench|machine|build|model|config|run):' "$log/sweep-$rows.log" | tail -6
  done
fi
