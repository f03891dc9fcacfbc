#!/bin/sh
# Runs on the GPU machine over a folder made by device-pack.sh: the op-by-op test (verbose), the batched
# engine's test (when packed), the GEMV bandwidth benchmark, then the op tests once more under
# compute-sanitizer memcheck (the golden run is skipped there: it is thousands of launches), and the engine
# with sessions joining and leaving (short run) under memcheck. Logs go to $OUT when set.
# Usage: sh device-check.sh DIR [quick]   (quick: no memcheck)
set -u
dir=$(cd "$1" && pwd)
mode=${2:-all}
log=${OUT:-/tmp}
export LD_LIBRARY_PATH="$dir/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PPX_GOLDEN_DIR="$dir/golden" PPX_DATA_DIR="$dir/data" G_DEBUG=fatal-criticals PATH="/usr/local/cuda/bin:$PATH"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv
echo "== op tests + golden"
timeout 300 "$dir/bin/test-backend-cuda" --verbose > "$log/test.log" 2>&1
rc_test=$?
grep -v '^  ' "$log/test.log" | tail -40
grep -E 'golden on|out of memory' "$log/test.log"
echo "test exit $rc_test"
if [ -x "$dir/bin/test-engine" ]; then
  echo "== batched engine (N = 1..8 sessions against their one-session runs)"
  timeout 600 "$dir/bin/test-engine" cuda --verbose > "$log/engine.log" 2>&1
  rc_engine=$?
  grep -E '^(ok|not ok)|session [0-9]|ticks completed|ERROR' "$log/engine.log" | tail -30
  echo "engine exit $rc_engine"
fi
echo "== GEMV bandwidth"
"$dir/bin/test-backend-cuda" --bench 2>&1 | tee "$log/bench.log"
[ "$mode" = quick ] && exit 0
echo "== compute-sanitizer memcheck"
timeout 300 compute-sanitizer --tool memcheck --leak-check full --error-exitcode 9 "$dir/bin/test-backend-cuda" -s /cuda/golden \
  > "$log/memcheck.log" 2>&1
rc_mc=$?
grep -E '^(ok|not ok|# )|ERROR SUMMARY|LEAK SUMMARY|Invalid|error' "$log/memcheck.log" | tail -30
echo "memcheck exit $rc_mc"
if [ -x "$dir/bin/test-engine" ]; then
  echo "== compute-sanitizer memcheck: sessions joining and leaving an engine (short run)"
  PPX_TEST_ENGINE_SHORT=1 timeout 900 compute-sanitizer --tool memcheck --leak-check full --error-exitcode 9 \
    "$dir/bin/test-engine" cuda -p /engine/batch-equals-alone/4 -p /engine/limit > "$log/memcheck-engine.log" 2>&1
  rc_mce=$?
  grep -E '^(ok|not ok)|ERROR SUMMARY|LEAK SUMMARY|Invalid' "$log/memcheck-engine.log" | tail -20
  echo "engine memcheck exit $rc_mce"
fi
