#!/bin/sh
# Runs on the GPU machine over a folder made by device-pack.sh with earlier binaries beside the new one
# (bin/test-backend-cuda-NAME): the linear tests (batched rows bit for bit against M = 1, the CPU
# tolerances) and the golden run on the new binary; the int4 linear benchmark at M = 1..128 for every binary;
# an Nsight Compute profile of one tensor-core linear launch per binary; the new kernel's SASS. Logs go to
# $OUT. Usage: sh device-gemm.sh DIR [tests|bench|prof|all]...
set -u
dir=$(cd "$1" && pwd)
shift
modes=${*:-all}
log=${OUT:-/tmp}
export LD_LIBRARY_PATH="$dir/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PPX_GOLDEN_DIR="$dir/golden" PPX_DATA_DIR="$dir/data" G_DEBUG=fatal-criticals
new="$dir/bin/test-backend-cuda"
has () { case " $modes " in *" $1 "*|*" all "*) return 0;; esac; return 1; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
if has tests; then
  timeout 240 "$new" --verbose -p /cuda/linear -p /cuda/linear-batch -p /cuda/rmsnorm-linear \
    -p /cuda/silu-gate-linear -p /cuda/golden > "$log/tests.log" 2>&1
  echo "tests exit $?"
  grep -E '^(ok|not ok)|Bail|ERROR|golden on' "$log/tests.log" | tail -20
fi
if has bench; then
  export PPX_BENCH_MS=${PPX_BENCH_MS:-1,16,64,80,128}
  for shape in ${BENCH_SHAPES:-22528x4096 12288x4096}; do
    for bin in "$dir"/bin/test-backend-cuda*; do
      b=$(basename "$bin")
      "$bin" --bench ${BENCH_FORMAT:-int4} $shape > "$log/bench-$shape-$b.log" 2>&1
      printf '%-28s %s ' "$b" "$shape"
      grep -E '^(int|bf)' "$log/bench-$shape-$b.log" | awk '{printf "%s %s | ", $7, $8} END {print ""}'
    done
  done
fi
if has prof && command -v ncu > /dev/null; then
  for bin in "$dir"/bin/test-backend-cuda*; do
    b=$(basename "$bin")
    for m in ${PROF_MS:-128}; do
      PPX_BENCH_MS=$m timeout 120 ncu --clock-control none -k regex:tc_linear_kernel --launch-skip 2 --launch-count 1 \
        --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section ComputeWorkloadAnalysis \
        --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats \
        "$bin" --bench int4 22528x4096 > "$log/ncu-$b-M$m.txt" 2>&1
      echo "== ncu $b M=$m"
      grep -E "tc_linear_kernel|Duration|Compute \(SM\) Throughput|Memory Throughput|Issue Slots Busy|No Eligible|Active Warps Per Scheduler|Eligible Warps|Warp Cycles Per Issued|Registers Per|Achieved Occupancy|L1/TEX Hit|L2 Hit|Mem Pipes Busy|Executed Ipc A" "$log/ncu-$b-M$m.txt" | head -20
    done
  done
  cuobjdump -sass "$new" 2>/dev/null | awk '/Function : .*tc_linear_kernelILi3ELi4ELi16/ {p=1} p && /Function : / && !/ILi3ELi4ELi16/ {p=0} p' > "$log/sass-int4g64-nt16.txt"
  cuobjdump -sass "$dir/bin/test-backend-cuda-base" 2>/dev/null | awk '/Function : .*tc_linear_kernelILi3ELi4ELi8/ {p=1} p && /Function : / && !/ILi3ELi4ELi8/ {p=0} p' > "$log/sass-base-int4g64-nt8.txt"
  wc -l "$log"/sass-*.txt
fi
