#!/bin/sh
# Runs on the GPU machine: Mimi's convolutions with the leaves planned for 80-160 sessions and one-stage
# pieces at small M (docs/cuda.md, "Leaves for 80-160 sessions, one-stage pieces for few"), against main's
# binaries, in one call.
# PACK: device-pack.sh's pack plus bin/personaplex-bench; MAIN: a directory holding main's test-backend-cuda and
# personaplex-bench (device-rules.md: /tmp/mb). Steps in order, each skipped once BUDGET seconds (default 185)
# are spent:
#   tests:  the conv tests of test-backend-cuda (conv-pieces among them) and the golden conversation;
#           test-engine cuda (N sessions each equal to its one-session run)
#   bench:  test-backend-cuda --bench-conv at 1,8,80,160: main's, this one's (pieces as planned), this one's with
#           pieces never and always at 1,8 (PPX_BENCH_CONV_PIECES)
#   sweep:  personaplex-bench int4, fp8 KV, 1 and 80 sessions: main's then this one's
# Logs go to $OUT. Usage: sh device-conv1.sh PACK MAIN [steps...]
set -u
p=$(cd "$1" && pwd)
mb=$2
shift 2
steps=${*:-tests bench sweep}
log=${OUT:-/tmp}
budget=${BUDGET:-185}
export LD_LIBRARY_PATH="$p/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" PPX_GOLDEN_DIR="$p/golden" PPX_DATA_DIR="$p/data"
export G_DEBUG=fatal-criticals
has () { case " $steps " in *" $1 "*) return 0;; esac; return 1; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$log/gpu.txt"
t0=$(date +%s)
el () { echo "[$(( $(date +%s) - t0 )) s] $*"; }
left () { echo $(( budget - ($(date +%s) - t0) )); }
# runs "$@" with a timeout of at most $1 seconds and what the budget leaves; skipped when under 10 s are left
step () {
  lim=$1; shift
  l=$(left)
  [ "$l" -lt 10 ] && { el "skipped (budget): $*"; return 99; }
  [ "$l" -lt "$lim" ] && lim=$l
  timeout "$lim" "$@"
}
convsum () { grep -E '^(encoder|decoder) sum' "$1"; }
if has tests; then
  step 80 "$p/bin/test-backend-cuda" --verbose -p /cuda/conv1d -p /cuda/conv-transpose1d -p /cuda/conv-mimi \
    -p /cuda/conv-batch -p /cuda/conv-pieces -p /cuda/golden > "$log/tests-conv.log" 2>&1
  el "conv tests + golden exit $?"
  grep -E '^(ok|not ok)|Bail|ERROR|differs|comparisons|golden on' "$log/tests-conv.log" | tail -10
fi
if has bench; then
  step 30 env PPX_BENCH_MS=1,8,80,160 PPX_BENCH_CONV_DIRECT=0 "$mb/test-backend-cuda" --bench-conv > "$log/bench-conv-main.log" 2>&1
  el "bench-conv main exit $?"
  convsum "$log/bench-conv-main.log"
  step 30 env PPX_BENCH_MS=1,8,80,160 PPX_BENCH_CONV_DIRECT=0 "$p/bin/test-backend-cuda" --bench-conv > "$log/bench-conv-this.log" 2>&1
  el "bench-conv this exit $?"
  convsum "$log/bench-conv-this.log"
  for pc in 0 1; do
    step 20 env PPX_BENCH_CONV_PIECES=$pc PPX_BENCH_MS=1,8 PPX_BENCH_CONV_DIRECT=0 "$p/bin/test-backend-cuda" --bench-conv \
      > "$log/bench-conv-pieces$pc.log" 2>&1
    el "bench-conv this, pieces $pc, exit $?"
    convsum "$log/bench-conv-pieces$pc.log"
  done
fi
if has tests && [ -x "$p/bin/test-engine" ]; then
  step 40 "$p/bin/test-engine" cuda > "$log/test-engine.log" 2>&1
  el "test-engine cuda exit $?"
  grep -cE '^ok' "$log/test-engine.log"
  grep -E '^not ok|Bail' "$log/test-engine.log" | head -3
fi
if has sweep; then
  for nb in "main:$mb/personaplex-bench" "this:$p/bin/personaplex-bench"; do
    n=${nb%%:*} b=${nb#*:}
    step 45 "$b" -r full -q int4 -b cuda -c session --context 3000 --sweep 1,80 --sweep-kv fp8 -n 20 -w 3 \
      > "$log/sweep-$n.log" 2>&1
    el "sweep $n exit $?"
    grep -E '^fp8 ' "$log/sweep-$n.log"
  done
fi
el done
