#!/bin/sh
# The M <= 8 linear kernel (tc_gemv_kernel) on a GPU machine, in one call (docs/cuda.md, "M <= 8 without the
# stage barrier"): its tests (every PPX_CUDA_GEMV_STAGES), main's and this build's linear benchmarks side by
# side, the stage and ring sweeps, and the whole-session benchmark. Usage (repository root of the device copy):
#   sh PACKDIR/device-gemv.sh PACKDIR [STEPS]
# PACKDIR/pack.tar.xz: scripts/device/device-pack.sh of this build plus bin/personaplex-bench and
# bin/test-backend-cuda-main (main's test binary); build-mainbench/main-bench.tar.xz: main's personaplex-bench.
# Everything lands in $OUT/gemv.tar (the device tool brings back only a few files); summaries on stdout.
set -u
dir=$1
steps=${2:-tests lin sess sweep bf16}
T0=$(date +%s)
budget=${GEMV_BUDGET:-230}
left () { echo $((budget - ($(date +%s) - T0))); }
P=/tmp/gp
R=/tmp/gemv-out
mkdir -p $P /tmp/mb $R
tar -C $P -xJf "$dir/pack.tar.xz"
[ -f build-mainbench/main-bench.tar.xz ] && tar -C /tmp/mb -xJf build-mainbench/main-bench.tar.xz
export LD_LIBRARY_PATH=$P/lib PPX_GOLDEN_DIR=$P/golden PPX_DATA_DIR=$P/data
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > $R/gpu.txt 2>&1
cat $R/gpu.txt
I4="22528x4096,12288x4096,4096x11264,4096x4096"
I8="3072x1024,1024x1024,5632x1024,1024x2816,1024x4096,2048x1024"
B16="12288x4096,4096x4096"
M=$P/bin/test-backend-cuda-main
Y=$P/bin/test-backend-cuda
summ () { grep -h " M=" "$@" | sed 's/  */ /g' | cut -d' ' -f1-9; }
for s in $steps; do
  [ "$(left)" -gt 10 ] || break
  case $s in
  tests)
    timeout 90 $Y --verbose -p /cuda/linear-gemv -p /cuda/linear-batch -p /cuda/linear-batch-slices \
      -p /cuda/rmsnorm-linear -p /cuda/silu-gate-linear -p /cuda/linear-wgmma-path -p /cuda/golden -p /cuda/layer-tail \
      -p /cuda/pdl-chain > $R/tests.log 2>&1
    echo "tests rc=$? at $(($(date +%s) - T0)) s"; grep -h "^ok\|^not ok" $R/tests.log | tr '\n' ' '; echo
    for st in 1 4; do
      PPX_CUDA_GEMV_STAGES=$st timeout 30 $Y --verbose -p /cuda/linear-gemv -p /cuda/rmsnorm-linear -p /cuda/silu-gate-linear \
        -p /cuda/layer-tail > $R/tests-stages$st.log 2>&1
      echo "tests STAGES=$st rc=$? at $(($(date +%s) - T0)) s"
    done
    timeout 45 $P/bin/test-engine cuda --verbose -p /engine/batch-equals-alone/4 -p /engine/batch-equals-alone/8 > $R/engine.log 2>&1
    echo "engine rc=$? at $(($(date +%s) - T0)) s" ;;
  lin)
    for b in $M $Y; do
      PPX_BENCH_MS=1,2,4,8 timeout 40 $b --bench int4 $I4 > $R/lin-int4-$(basename $b).log 2>&1
      PPX_BENCH_MS=1,2,4,8 timeout 30 $b --bench int8 $I8 > $R/lin-int8-$(basename $b).log 2>&1
    done
    echo "lin done at $(($(date +%s) - T0)) s" ;;
  sweep)
    for st in 1 2 4; do
      for ds in 4 6; do
        [ "$(left)" -gt 25 ] || break
        PPX_CUDA_GEMV_STAGES=$st PPX_CUDA_GEMV_DEPTH_SHARED=$ds PPX_BENCH_MS=1 timeout 20 $Y --bench int4 $I4 > $R/sw-int4-s$st-d$ds.log 2>&1
        PPX_CUDA_GEMV_STAGES=$st PPX_CUDA_GEMV_DEPTH_SHARED=$ds PPX_BENCH_MS=1 timeout 20 $Y --bench int8 $I8 > $R/sw-int8-s$st-d$ds.log 2>&1
      done
    done
    [ "$(left)" -gt 20 ] && PPX_CUDA_LINEAR_GEMV=0 PPX_BENCH_MS=1 timeout 20 $Y --bench int4 $I4 > $R/sw-int4-off.log 2>&1
    echo "sweep done at $(($(date +%s) - T0)) s" ;;
  sess)
    for b in /tmp/mb/personaplex-bench $P/bin/personaplex-bench; do
      [ "$(left)" -gt 35 ] || break
      n=$(basename $(dirname $b))
      timeout $(( $(left) > 65 ? 60 : $(left) - 5 )) $b -r full -q int4 -b cuda -c session --context 3000 --sweep 1,8 \
        --sweep-kv fp8 -n 20 -w 3 > $R/sess-$n.log 2>&1
      echo "sess $n rc=$? at $(($(date +%s) - T0)) s"; tail -n 12 $R/sess-$n.log
    done ;;
  bf16)
    for b in $M $Y; do
      [ "$(left)" -gt 20 ] || break
      PPX_BENCH_MS=1,8 timeout 20 $b --bench bf16 $B16 > $R/lin-bf16-$(basename $b).log 2>&1
    done ;;
  esac
done
echo "== int4 main / gemv"; summ $R/lin-int4-test-backend-cuda-main.log $R/lin-int4-test-backend-cuda.log 2>/dev/null
echo "total $(($(date +%s) - T0)) s" | tee -a $R/gpu.txt
tar -C /tmp -cf "$OUT/gemv.tar" gemv-out
