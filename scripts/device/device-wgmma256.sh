#!/bin/sh
# Runs on the GPU machine: the wgmma linears' one launch for up to 256 rows of x (docs/cuda.md, "wgmma (sm_90a)").
# DIR holds two packs made by device-pack.sh (plus tools/personaplex-bench in each bin/): DIR/new and DIR/base
# (main's), sharing DIR/new/lib.
#   tests:  the linear tests touched (batched rows bit for bit against M = 1 up to M = 300, slices, the path and
#           launch-rows check, /cuda/linear against the CPU)
#   tests1: the batch tests with wgmma at every M (PPX_CUDA_LINEAR_WGMMA=1)
#   bench:  --bench int4 on the four temporal shapes, base and new, PPX_BENCH_MS (default 80,128,160,200,256);
#           new again with one slice against two slices of 16 n-tiles (PPX_BENCH_SLICES=0,16)
#   sweep:  personaplex-bench's session sweep, new then base (1,80,128,160 on an H200; 1,80,88,120 where the
#           GPU has less than 100 GB)
# Logs go to $OUT. Usage: sh device-wgmma256.sh DIR [tests] [bench] [sweep]
set -u
dir=$(cd "$1" && pwd)
shift
modes=${*:-tests bench sweep}
log=${OUT:-/tmp}
export LD_LIBRARY_PATH="$dir/new/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export G_DEBUG=fatal-criticals
has () { case " $modes " in *" $1 "*) return 0;; esac; return 1; }
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader | tee "$log/gpu.txt"
t0=$(date +%s)
el () { echo "[$(( $(date +%s) - t0 )) s] $*"; }
if has tests; then
  timeout 70 "$dir/new/bin/test-backend-cuda" --verbose -p /cuda/linear-wgmma-path -p /cuda/linear-batch \
    -p /cuda/linear-batch-slices > "$log/tests-batch.log" 2>&1
  el "batch tests exit $?"
  grep -E '^(ok|not ok)|Bail|ERROR|differs|first launch' "$log/tests-batch.log" | tail -6
  PPX_GOLDEN_DIR="$dir/new/golden" timeout 100 "$dir/new/bin/test-backend-cuda" --verbose -p /cuda/linear \
    -p /cuda/rmsnorm-linear -p /cuda/silu-gate-linear -p /cuda/pdl-chain -p /cuda/golden > "$log/tests-linear.log" 2>&1
  el "linear tests exit $?"
  grep -E '^(ok|not ok)|Bail|ERROR|M=200' "$log/tests-linear.log" | tail -14
fi
if has tests1; then
  PPX_CUDA_LINEAR_WGMMA=1 timeout 70 "$dir/new/bin/test-backend-cuda" --verbose -p /cuda/linear-batch \
    -p /cuda/linear-batch-slices > "$log/tests1-batch.log" 2>&1
  el "batch tests (wgmma at every M) exit $?"
  grep -E '^(ok|not ok)|Bail|ERROR|differs' "$log/tests1-batch.log" | tail -6
fi
if has bench; then
  export PPX_BENCH_MS=${PPX_BENCH_MS:-80,128,160,200,256}
  shapes=${BENCH_SHAPES:-22528x4096,12288x4096,4096x11264,4096x4096}
  run () { # name, env..., binary
    name=$1; shift
    timeout 60 env "$@" --bench int4 "$shapes" > "$log/bench-$name.log" 2>&1
    el "== $name"; grep -E '^int4' "$log/bench-$name.log" | awk '{printf "%s %s %s%s | ", $2"x"$4, $7, $8, ($NF ~ /^slice=/ ? " " $NF : "")} END {print ""}' \
      | fold -w 220
  }
  run base "$dir/base/bin/test-backend-cuda"
  run new "$dir/new/bin/test-backend-cuda"
  run new-slices PPX_BENCH_MS=160,200 PPX_BENCH_SLICES=0,16 "$dir/new/bin/test-backend-cuda"
fi
if has sweep; then
  mem=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
  sw=${SWEEP:-$([ "${mem:-0}" -gt 100000 ] && echo 1,80,128,160 || echo 1,80,88,120)}
  for b in new base; do
    timeout ${SWEEP_TIMEOUT:-80} "$dir/$b/bin/personaplex-bench" -r full -q int4 -b cuda -c session --context 3000 \
      --sweep "$sw" --sweep-kv fp8 -n 20 -w 3 > "$log/sweep-$b.log" 2>&1
    el "sweep $b ($sw) exit $?"
    grep -vE '^(personaplex-bench|machine|build|model|config|run):' "$log/sweep-$b.log" | tail -8
  done
fi
