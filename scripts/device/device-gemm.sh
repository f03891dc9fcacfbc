#!/bin/sh
# Runs on the GPU machine over a folder made by device-pack.sh with a baseline binary beside the new one
# (bin/test-backend-cuda-base): the linear tests (batched rows bit for bit against M = 1, the CPU tolerances)
# and the golden run on the new binary, then the int4/int8 linear benchmark at M = 1..128 for both binaries
# and the measuring knobs of the tensor-core kernel on one shape. Logs go to $OUT.
# Usage: sh device-gemm.sh DIR [tests|bench|all]
set -u
dir=$(cd "$1" && pwd)
mode=${2:-all}
log=${OUT:-/tmp}
export LD_LIBRARY_PATH="$dir/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PPX_GOLDEN_DIR="$dir/golden" PPX_DATA_DIR="$dir/data" G_DEBUG=fatal-criticals
new="$dir/bin/test-backend-cuda" base="$dir/bin/test-backend-cuda-base"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
if [ "$mode" != bench ]; then
  timeout 240 "$new" --verbose -p /cuda/linear -p /cuda/linear-batch -p /cuda/rmsnorm-linear \
    -p /cuda/silu-gate-linear -p /cuda/golden > "$log/tests.log" 2>&1
  echo "tests exit $?"
  grep -E '^(ok|not ok)|Bail|ERROR|golden on' "$log/tests.log" | tail -20
fi
[ "$mode" = tests ] && exit 0
export PPX_BENCH_MS=${PPX_BENCH_MS:-1,16,64,80,128}
for f in ${BENCH_FORMATS:-int4}; do
  for b in base new; do
    bin=$base; [ $b = new ] && bin=$new
    "$bin" --bench $f > "$log/bench-$f-$b.log" 2>&1
    echo "== $f $b"; grep -E '^(int|bf)' "$log/bench-$f-$b.log" | awk '{printf "%s %s%s%s %s %s | ", $1,$2,$3,$4, $7, $8} /M=128/ {print ""}'
  done
done
for v in "PPX_CUDA_LINEAR_NT16_FROM=33" "PPX_CUDA_LINEAR_DEPTH=3" "PPX_CUDA_LINEAR_DEPTH=2" "PPX_CUDA_LINEAR_MMAX=64"; do
  env $v "$new" --bench int4 22528x4096 > "$log/var-$v.log" 2>&1
  echo "== $v"; grep -E '^int' "$log/var-$v.log" | awk '{printf "%s %s | ", $7, $8} END {print ""}'
done
