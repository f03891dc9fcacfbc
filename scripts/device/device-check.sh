#!/bin/sh
# Runs on the GPU machine over a folder made by device-pack.sh: the op-by-op test (verbose); the batched
# engine's test (when packed); the batched-row linear test and the golden conversation again through PTX JIT
# (CUDA_FORCE_PTX_JIT=1: the driver compiles the embedded compute_XX PTX, the lowest architecture of the
# build, instead of loading the sm_XX machine code, which exercises the code older GPUs run); the linear-layer
# benchmark; then the op tests once more under compute-sanitizer memcheck (the golden run is skipped there:
# it is thousands of launches) and the engine with sessions joining and leaving under memcheck.
# Logs go to $OUT when set.
# Usage: [PPX_TEST_TIMEOUT=s] sh device-check.sh DIR [quick|all] [BENCH_FORMAT]   (quick: no memcheck;
# BENCH_FORMAT: int4, int8, bf16 or f32 limits the benchmark to one format, "none" skips it)
set -u
dir=$(cd "$1" && pwd)
mode=${2:-all}
bench=${3:-}
log=${OUT:-/tmp}
bin="$dir/bin/test-backend-cuda"
export LD_LIBRARY_PATH="$dir/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PPX_GOLDEN_DIR="$dir/golden" PPX_DATA_DIR="$dir/data" G_DEBUG=fatal-criticals PATH="/usr/local/cuda/bin:$PATH"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv
if command -v cuobjdump > /dev/null; then
  echo "== architectures in the binary"
  cuobjdump --list-elf "$bin" 2>/dev/null | sed 's/.*\.\(sm_[0-9a-z]*\)\..*/\1/' | sort | uniq -c
  cuobjdump --list-ptx "$bin" 2>/dev/null | sed 's/.*\.\(sm_[0-9a-z]*\)\..*/PTX \1/' | sort | uniq -c
fi
echo "== op tests + golden"
timeout "${PPX_TEST_TIMEOUT:-300}" "$bin" --verbose > "$log/test.log" 2>&1
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
echo "== batched-row linear test + golden through PTX JIT"
CUDA_FORCE_PTX_JIT=1 timeout "${PPX_TEST_TIMEOUT:-300}" "$bin" --verbose -p /cuda/linear-batch -p /cuda/golden > "$log/jit.log" 2>&1
rc_jit=$?
grep -E '^(ok|not ok)|golden on|Bail|ERROR' "$log/jit.log" | tail -20
echo "PTX JIT exit $rc_jit"
if [ "$bench" != none ]; then
  echo "== linear layers"
  "$bin" --bench $bench 2>&1 | tee "$log/bench.log"
fi
[ "$mode" = quick ] && exit 0
echo "== compute-sanitizer memcheck"
timeout 300 compute-sanitizer --tool memcheck --leak-check full --error-exitcode 9 "$bin" -s /cuda/golden \
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
