#!/bin/sh
# The M <= 8 linear kernel (tc_gemv_kernel) on a GPU machine, in one call (docs/cuda.md, "M <= 8 without the
# stage barrier"): its tests, then main's and this build's linear benchmarks and whole-session benchmark side
# by side. Usage (repository root of the device copy): sh PACKDIR/device-gemv.sh PACKDIR [STEPS]
# PACKDIR holds pack.tar.xz (scripts/device/device-pack.sh of this build plus bin/personaplex-bench and
# bin/test-backend-cuda-main, main's test binary); build-mainbench/main-bench.tar.xz is main's personaplex-bench.
# STEPS (default "tests lin sess extra") picks the parts; outputs go to $OUT.
set -u
dir=$1
steps=${2:-tests lin sess extra}
T0=$(date +%s)
budget=${GEMV_BUDGET:-228}
left () { echo $((budget - ($(date +%s) - T0))); }
P=/tmp/gp
mkdir -p $P /tmp/mb
tar -C $P -xJf "$dir/pack.tar.xz"
[ -f build-mainbench/main-bench.tar.xz ] && tar -C /tmp/mb -xJf build-mainbench/main-bench.tar.xz
export LD_LIBRARY_PATH=$P/lib PPX_GOLDEN_DIR=$P/golden PPX_DATA_DIR=$P/data
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$OUT/gpu.txt" 2>&1
echo "unpacked at $(($(date +%s) - T0)) s" >> "$OUT/gpu.txt"
I4="22528x4096,12288x4096,4096x11264,4096x4096"
I8="3072x1024,1024x1024,5632x1024,1024x2816,1024x4096,2048x1024"
B16="12288x4096,4096x4096"
for s in $steps; do
  case $s in
  tests)
    timeout 100 $P/bin/test-backend-cuda --verbose -p /cuda/linear-gemv -p /cuda/linear-batch -p /cuda/linear-batch-slices \
      -p /cuda/rmsnorm-linear -p /cuda/silu-gate-linear -p /cuda/linear-wgmma-path -p /cuda/golden -p /cuda/layer-tail \
      -p /cuda/pdl-chain > "$OUT/tests.log" 2>&1
    echo "rc=$? at $(($(date +%s) - T0)) s" >> "$OUT/tests.log"
    if [ -x $P/bin/test-engine ] && [ "$(left)" -gt 150 ]; then
      timeout 45 $P/bin/test-engine cuda --verbose -p /engine/batch-equals-alone/4 -p /engine/batch-equals-alone/8 > "$OUT/engine.log" 2>&1
      echo "rc=$? at $(($(date +%s) - T0)) s" >> "$OUT/engine.log"
    fi ;;
  lin)
    for b in test-backend-cuda-main test-backend-cuda; do
      PPX_BENCH_MS=1,2,4,8 timeout 60 $P/bin/$b --bench int4 $I4 > "$OUT/lin-int4-$b.log" 2>&1
      PPX_BENCH_MS=1,2,4,8 timeout 40 $P/bin/$b --bench int8 $I8 > "$OUT/lin-int8-$b.log" 2>&1
      echo "done at $(($(date +%s) - T0)) s" >> "$OUT/lin-int8-$b.log"
    done ;;
  sess)
    for b in /tmp/mb/personaplex-bench $P/bin/personaplex-bench; do
      [ "$(left)" -gt 40 ] || break
      n=$(basename $(dirname $b))
      timeout $(( $(left) > 70 ? 65 : $(left) - 5 )) $b -r full -q int4 -b cuda -c session --context 3000 --sweep 1,8 \
        --sweep-kv fp8 -n 20 -w 3 > "$OUT/sess-$n.log" 2>&1
      echo "rc=$? at $(($(date +%s) - T0)) s" >> "$OUT/sess-$n.log"
    done ;;
  extra)
    # bf16 (it goes through this kernel at M <= 8), the ring depth where blocks share an SM, L2-resident weights
    [ "$(left)" -gt 30 ] && for b in test-backend-cuda-main test-backend-cuda; do
      PPX_BENCH_MS=1,8 timeout 25 $P/bin/$b --bench bf16 $B16 > "$OUT/lin-bf16-$b.log" 2>&1
    done
    for d in 2 3 6 8; do
      [ "$(left)" -gt 15 ] || break
      PPX_CUDA_GEMV_DEPTH_SHARED=$d PPX_BENCH_MS=1 timeout 20 $P/bin/test-backend-cuda --bench int4 $I4 > "$OUT/depth-$d.log" 2>&1
    done
    [ "$(left)" -gt 15 ] && PPX_BENCH_COPIES=1 PPX_BENCH_MS=1 timeout 20 $P/bin/test-backend-cuda --bench int4 $I4 > "$OUT/l2-gemv.log" 2>&1
    [ "$(left)" -gt 15 ] && PPX_BENCH_COPIES=1 PPX_BENCH_MS=1 timeout 20 $P/bin/test-backend-cuda-main --bench int4 $I4 > "$OUT/l2-main.log" 2>&1
    ;;
  esac
done
echo "total $(($(date +%s) - T0)) s" >> "$OUT/gpu.txt"
