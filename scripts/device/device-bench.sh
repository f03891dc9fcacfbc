#!/bin/sh
# One device call that checks and measures the GPU path end to end (docs/performance.md quotes its output):
#   1. test-backend-cuda: every op against the CPU backend, the golden conversation on the GPU;
#   2. test-engine cuda: N = 1..8 sessions on one engine against their one-session runs;
#   3. test-gpu-tick: device LMGen, graph API, the engine with graphs on/off; then (fuse-gate) the op test,
#      the golden conversation and the engine's test with PPX_CUDA_FUSE_GATE=1;
#   4. test-backend-cuda-sm80 (a -Dcuda-arch=80 build: on a newer GPU the driver must compile its compute_80
#      PTX, i.e. the code path of A100/RTX 30xx): the batched-row linear test and the golden conversation;
#   5. personaplex-bench --sweep at full context (--context 3000) on full-size random weights: int4 and int8
#      weights with fp8 and bf16 KV caches, bf16 weights with bf16 KV; then one int4 session's components
#      (Mimi encode/decode, LM step) with CUDA graphs on and off;
#   6. a per-op GPU time profile of one int4 session at full context (PPX_CUDA_PROFILE=1, graphs off);
#   7. with the time left, compute-sanitizer racecheck over the kernels with shared memory, memcheck over
#      every op test, and memcheck on the engine with sessions joining and leaving;
#   8. only when named in PPX_DEVICE_STEPS: prompt prefill (docs/engine.md, "Prompt prefill"): `prefill`, the T-row
#      attention and chunked vs step-by-step prompts on the GPU (/cuda/attention, /cuda/prefill), the engine's
#      join from another thread; `join-int4`, the join time of a 64th call while 63 run at full context in real
#      time (personaplex-bench --join), step by step then prefill.
# Each step gets a timeout that keeps the whole call under BUDGET seconds (default 560); a step that would
# not fit is skipped and said so. Logs and a summary go to $OUT (or /tmp/ppx-device).
# Usage: [PPX_DEVICE_STEPS="ops sweep-int4 ..."] sh scripts/device/device-bench.sh PACK_DIR [BUDGET]
#   (PPX_DEVICE_STEPS: run only the steps named; the step names are the log names below)
#   PACK_DIR: made by scripts/device/device-pack.sh from a -Dcuda-arch=90 build, plus bin/test-backend-cuda-sm80 and
#   bin/personaplex-bench (scripts/device/device-pack-bench.sh does all of it).
set -u
dir=$(cd "$1" && pwd)
budget=${2:-560}
out=${OUT:-/tmp/ppx-device}
mkdir -p "$out"
start=$(date +%s)
export LD_LIBRARY_PATH="$dir/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PPX_GOLDEN_DIR="$dir/golden" PPX_DATA_DIR="$dir/data" G_DEBUG=fatal-criticals PATH="/usr/local/cuda/bin:$PATH"
export OMP_WAIT_POLICY=passive
summary="$out/summary.txt"
: > "$summary"

say () { echo "$*" | tee -a "$summary"; }

# step NAME LIMIT CMD...: runs CMD with at most LIMIT seconds, never past the budget (20 s kept in reserve)
step () {
  name=$1 limit=$2
  shift 2
  case " ${PPX_DEVICE_STEPS:-$name} " in *" $name "*) ;; *) return ;; esac
  left=$((budget - 20 - ($(date +%s) - start)))
  if [ "$left" -lt 15 ]; then
    say "== $name: skipped (budget spent)"
    return
  fi
  [ "$limit" -gt "$left" ] && limit=$left
  t0=$(date +%s)
  timeout "$limit" "$@" > "$out/$name.log" 2>&1
  rc=$?
  say "== $name: exit $rc in $(( $(date +%s) - t0 )) s (limit $limit s)"
}

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee -a "$summary"
step ops 150 "$dir/bin/test-backend-cuda" --verbose
grep -E '^not ok|golden on|Bail' "$out/ops.log" | tee -a "$summary"
grep -c '^ok' "$out/ops.log" | sed 's/^/ops ok: /' | tee -a "$summary"
step engine 150 "$dir/bin/test-engine" cuda --verbose
grep -E '^(ok|not ok)|Bail|differ' "$out/engine.log" | tail -14 | tee -a "$summary"
step gpu-tick 90 "$dir/bin/test-gpu-tick" --verbose
grep -E '^(ok|not ok)|Bail' "$out/gpu-tick.log" | tee -a "$summary"
# the gate fused into the FFN's second linear layer (off by default until these pass): the op test, the golden
# conversation and the engine's batched == alone with it on
step fuse-gate 150 env PPX_CUDA_FUSE_GATE=1 sh -c '"$1" --verbose -p /cuda/silu-gate-linear -p /cuda/golden &&
  PPX_TEST_ENGINE_SHORT=1 "$2" cuda --verbose' - "$dir/bin/test-backend-cuda" "$dir/bin/test-engine"
grep -E '^(ok|not ok)|golden on|Bail|differ' "$out/fuse-gate.log" | tail -16 | tee -a "$summary"
step jit-sm80 150 "$dir/bin/test-backend-cuda-sm80" --verbose -p /cuda/linear-batch -p /cuda/golden
grep -E '^(ok|not ok)|golden on|Bail' "$out/jit-sm80.log" | tee -a "$summary"

bench="$dir/bin/personaplex-bench"
step sweep-int4 150 "$bench" -r full -q int4 -b cuda --sweep 1,8,32,64 --sweep-kv fp8,bf16 --context 3000 -n 20 -w 3
grep -vE '^(personaplex-bench|machine|build|model|config|run):' "$out/sweep-int4.log" | tee -a "$summary"
step sweep-int8 130 "$bench" -r full -q int8 -b cuda --sweep 1,8,32,64 --sweep-kv fp8,bf16 --context 3000 -n 20 -w 3
grep -vE '^(personaplex-bench|machine|build|model|config|run):' "$out/sweep-int8.log" | tee -a "$summary"
step sweep-bf16 90 "$bench" -r full -q bf16 -b cuda --sweep 1,8,16 --sweep-kv bf16 --context 3000 -n 20 -w 3
grep -vE '^(personaplex-bench|machine|build|model|config|run):' "$out/sweep-bf16.log" | tee -a "$summary"
step components-int4 100 "$bench" -r full -q int4 -b cuda --context 3000 --cuda-graphs both -n 30 -w 5
grep -E 'mimi|lm-|session' "$out/components-int4.log" | tee -a "$summary"

step profile-int4 80 env PPX_CUDA_PROFILE=1 "$bench" -r full -q int4 -b cuda -c session --context 3000 \
  --cuda-graphs off -n 10 -w 2
sed -n '/op kinds/,$p' "$out/profile-int4.log" | sed -n '1,32p' | tee -a "$summary"

# sanitizers: shared-memory races in the kernels that use it, then memory errors over every op test
step racecheck 150 compute-sanitizer --tool racecheck --error-exitcode 9 "$dir/bin/test-backend-cuda" \
  -p /cuda/vq -p /cuda/conv1d -p /cuda/conv-transpose1d -p /cuda/linear-batch -p /cuda/sample -p /cuda/elementwise
grep -E '^(ok|not ok)|RACECHECK SUMMARY' "$out/racecheck.log" | tee -a "$summary"
step racecheck-attention 120 compute-sanitizer --tool racecheck --error-exitcode 9 "$dir/bin/test-backend-cuda" \
  -p /cuda/attention
grep -E '^(ok|not ok)|RACECHECK SUMMARY' "$out/racecheck-attention.log" | tee -a "$summary"
step memcheck-ops 150 compute-sanitizer --tool memcheck --leak-check full --error-exitcode 9 \
  "$dir/bin/test-backend-cuda" -s /cuda/golden
grep -E '^(ok|not ok)|ERROR SUMMARY|LEAK SUMMARY' "$out/memcheck-ops.log" | tee -a "$summary"

step memcheck-engine 200 env PPX_TEST_ENGINE_SHORT=1 compute-sanitizer --tool memcheck --leak-check full \
  --error-exitcode 9 "$dir/bin/test-engine" cuda -p /engine/batch-equals-alone/4 -p /engine/limit
grep -E '^(ok|not ok)|ERROR SUMMARY|LEAK SUMMARY' "$out/memcheck-engine.log" | tee -a "$summary"

# prompt prefill (named steps only: PPX_DEVICE_STEPS="prefill join-int4")
case " ${PPX_DEVICE_STEPS:-} " in *" prefill "*|*" join-int4 "*) ;; *) say "total $(( $(date +%s) - start )) s"; exit 0 ;; esac
step prefill 200 sh -c '"$1" --verbose -p /cuda/attention -p /cuda/prefill && "$2" cuda --verbose -p /engine/join-from-thread' \
  - "$dir/bin/test-backend-cuda" "$dir/bin/test-engine"
grep -E '^(ok|not ok)|Bail|attention .* rows|chunked|conversation after|ticks completed' "$out/prefill.log" | tee -a "$summary"
step join-int4 300 "$bench" -r full -q int4 -b cuda --kv-cache-format fp8 --context 3000 --batch 63 --join --joins 5
grep -E '^(join|first join|no join|step by step|prefill)' "$out/join-int4.log" | tee -a "$summary"
say "total $(( $(date +%s) - start )) s"
