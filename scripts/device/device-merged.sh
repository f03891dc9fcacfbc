#!/bin/sh
# Runs on the GPU machine: the merged tree's GPU tests and its engine sweep against main's personaplex-bench of
# an earlier commit, in one call. PACK: device-pack.sh's pack plus bin/personaplex-bench; BASE: a directory
# holding the earlier personaplex-bench (or empty: no comparison). Steps (default: tests sweep):
#   tests:   the linear, golden, tail and chain tests of test-backend-cuda; test-engine cuda; test-gpu-tick
#   sweep:   int4, fp8 KV, SWEEP (default 1,8,64,80,88; 1,144,160 on a GPU of more than 100 GB), base then new
#   bf16:    bf16 weights and KV, 1 and 32 sessions, base then new
#   profile: PPX_CUDA_PROFILE=1 at PROFILE_MS (default 1,80), summed by part (profsum.py beside this script)
# Logs go to $OUT. Usage: sh device-merged.sh PACK BASE [steps...]
set -u
p=$(cd "$1" && pwd)
base=$2
shift 2
steps=${*:-tests sweep}
log=${OUT:-/tmp}
here=$(cd "$(dirname "$0")" && pwd)
export LD_LIBRARY_PATH="$p/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" PPX_GOLDEN_DIR="$p/golden" PPX_DATA_DIR="$p/data"
export G_DEBUG=fatal-criticals
has () { case " $steps " in *" $1 "*) return 0;; esac; return 1; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$log/gpu.txt"
mem=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
t0=$(date +%s)
el () { echo "[$(( $(date +%s) - t0 )) s] $*"; }
benches () { [ -x "$base/personaplex-bench" ] && echo "base:$base/personaplex-bench"; echo "new:$p/bin/personaplex-bench"; }
if has tests; then
  timeout 200 "$p/bin/test-backend-cuda" --verbose -p /cuda/linear-gemv -p /cuda/linear-batch -p /cuda/linear-batch-slices \
    -p /cuda/rmsnorm-linear -p /cuda/silu-gate-linear -p /cuda/linear-wgmma-path -p /cuda/linear -p /cuda/golden \
    -p /cuda/layer-tail -p /cuda/pdl-chain > "$log/tests-cuda.log" 2>&1
  el "test-backend-cuda exit $?"
  grep -E '^(ok|not ok)|Bail|ERROR|differs' "$log/tests-cuda.log" | tail -12
  for t in "test-engine cuda" test-gpu-tick; do
    timeout 150 $p/bin/$t > "$log/$(echo $t | cut -d' ' -f1).log" 2>&1
    el "$t exit $?"
  done
fi
if has sweep; then
  sw=${SWEEP:-$([ "${mem:-0}" -gt 100000 ] && echo 1,144,160 || echo 1,8,64,80,88)}
  for nb in $(benches); do
    n=${nb%%:*} b=${nb#*:}
    timeout ${SWEEP_TIMEOUT:-150} "$b" -r full -q int4 -b cuda -c session --context 3000 --sweep "$sw" --sweep-kv fp8 \
      -n 20 -w 3 > "$log/sweep-$n.log" 2>&1
    el "sweep $n ($sw) exit $?"
    grep -E '^(fp8|kv) ' "$log/sweep-$n.log"
  done
fi
if has bf16; then
  for nb in $(benches); do
    n=${nb%%:*} b=${nb#*:}
    timeout 150 "$b" -r full -q bf16 -b cuda -c session --context 3000 --sweep 1,32 --sweep-kv bf16 -n 20 -w 3 \
      > "$log/bf16-$n.log" 2>&1
    el "bf16 $n exit $?"
    grep -E '^(bf16|kv) ' "$log/bf16-$n.log"
  done
fi
if has profile; then
  for m in $(echo ${PROFILE_MS:-1,80} | tr , ' '); do
    PPX_CUDA_PROFILE=1 timeout 150 "$p/bin/personaplex-bench" -r full -q int4 -b cuda -c session --context 3000 \
      --cuda-graphs off -B "$m" --kv-cache-format fp8 -n 10 -w 3 > "$log/profile-$m.log" 2>&1
    el "profile M=$m exit $?"
    extra=""; [ "$m" -gt 128 ] && extra="128,$((m - 128))"
    python3 "$here/profsum.py" "$log/profile-$m.log" "$m" 13 $extra | head -12
  done
fi
el done
