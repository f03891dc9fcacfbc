#!/bin/sh
# Runs on the GPU machine over a folder made by device-pack.sh: Nsight Compute's per-instruction stall
# samples (CSV, --page source) and its stall summary for one tensor-core int4 linear launch of M rows
# (22528 x 4096), to $OUT. Usage: sh device-gemm-prof.sh DIR M [BINARY]
d=$(cd "$1" && pwd); m=$2; bin=${3:-test-backend-cuda}
export LD_LIBRARY_PATH=$d/lib
metrics=smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio,smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_wait_per_issue_active.ratio,smsp__average_warps_issue_stalled_math_pipe_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_short_scoreboard_per_issue_active.ratio,smsp__inst_executed.sum
PPX_BENCH_MS=$m timeout 150 ncu --clock-control none -k regex:tc_linear_kernel --launch-skip 2 --launch-count 1 \
  --section WarpStateStats --section SourceCounters --page source --print-source sass --csv \
  "$d/bin/$bin" --bench int4 22528x4096 > "$OUT/src-$bin-M$m.csv" 2> "$OUT/src-$bin-M$m.err"
PPX_BENCH_MS=$m timeout 150 ncu --clock-control none -k regex:tc_linear_kernel --launch-skip 2 --launch-count 1 \
  --section WarpStateStats --section SpeedOfLight --metrics $metrics \
  "$d/bin/$bin" --bench int4 22528x4096 > "$OUT/ncu-$bin-M$m.txt" 2>&1
grep -E "Duration|stalled|inst_executed|tc_linear" "$OUT/ncu-$bin-M$m.txt"
