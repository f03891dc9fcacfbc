#!/bin/sh
# Runs on the GPU machine over a folder made by device-pack.sh (with bin/personaplex-bench added) for the
# depformer's layer tail as one persistent kernel (docs/cuda.md, "The depformer's layer tail"); BASE: another
# such folder (main's) whose personaplex-bench runs beside ours.
#   tests:   /cuda/layer-tail (fused == the ops one by one, bit for bit; the CPU within TOL), the golden
#            conversation with the fusion on (PPX_CUDA_FUSE_TAIL=1)
#   tests2:  /cuda/linear-batch (TcBlock's task index), test-engine cuda and test-gpu-tick with the fusion on
#   bench:   the engine sweep (1 and SWEEP sessions) for base, ours off and ours on
#   bench-var: ours on with one block an SM, without the L2 prefetch, with a plain launch
#   prof:    PPX_CUDA_PROFILE=1 at 80 sessions op by op, ours off and on
# Logs go to $OUT. Usage: sh device-layer-tail.sh DIR [tests|tests2|bench|prof]...
set -u
dir=$(cd "$1" && pwd)
shift
modes=${*:-tests bench}
log=${OUT:-/tmp}
base=${BASE:-}
export LD_LIBRARY_PATH="$dir/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PPX_GOLDEN_DIR="$dir/golden" PPX_DATA_DIR="$dir/data" G_DEBUG=fatal-criticals
t0=$(date +%s)
has () { case " $modes " in *" $1 "*) return 0;; esac; return 1; }
el () { echo "[$(( $(date +%s) - t0 )) s]"; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
if has tests; then
  timeout 100 "$dir/bin/test-backend-cuda" --verbose -p /cuda/layer-tail > "$log/tail.log" 2>&1
  echo "layer-tail exit $? $(el)"
  grep -E '^(ok|not ok)|Bail|ERROR|fused|differs' "$log/tail.log" | tail -5
  PPX_CUDA_FUSE_TAIL=1 timeout 60 "$dir/bin/test-backend-cuda" --verbose -p /cuda/golden > "$log/golden-on.log" 2>&1
  echo "golden (fused) exit $? $(el)"
  grep -E '^(ok|not ok)|Bail|ERROR|golden on' "$log/golden-on.log" | tail -3
fi
if has tests2; then
  timeout 90 "$dir/bin/test-backend-cuda" --verbose -p /cuda/linear-batch > "$log/batch.log" 2>&1
  echo "linear-batch exit $? $(el)"
  grep -E '^(ok|not ok)|Bail|ERROR|differs' "$log/batch.log" | tail -3
  for t in test-engine test-gpu-tick; do
    [ -x "$dir/bin/$t" ] || continue
    PPX_CUDA_FUSE_TAIL=1 timeout 120 "$dir/bin/$t" > "$log/$t-on.log" 2>&1
    echo "$t (fused) exit $? $(el)"
    grep -E '^(not ok)|Bail|ERROR' "$log/$t-on.log" | tail -5
  done
fi
sweep=${SWEEP:-80}
bench () { # name, env..., binary
  name=$1; shift
  timeout 100 env "$@" -r full -q int4 -b cuda -c session --context 3000 --sweep "1,$sweep" --sweep-kv fp8 \
    -n "${N:-20}" -w 3 > "$log/bench-$name.log" 2>&1
  echo "== $name exit $? $(el)"
  grep -vE '^(personaplex-bench|machine|build|model|config|run):' "$log/bench-$name.log" | tail -6
}
if has bench; then
  [ -n "$base" ] && bench base "$base/bin/personaplex-bench"
  bench off PPX_CUDA_FUSE_TAIL=0 "$dir/bin/personaplex-bench"
  bench on PPX_CUDA_FUSE_TAIL=1 "$dir/bin/personaplex-bench"
fi
if has bench-var; then # the persistent kernel's knobs: one block an SM, no L2 prefetch, a plain launch
  bench on-1blk PPX_CUDA_FUSE_TAIL=1 PPX_CUDA_TAIL_BLOCKS=1 "$dir/bin/personaplex-bench"
  bench on-nopf PPX_CUDA_FUSE_TAIL=1 PPX_CUDA_TAIL_PREFETCH=0 "$dir/bin/personaplex-bench"
  bench on-plain PPX_CUDA_FUSE_TAIL=2 "$dir/bin/personaplex-bench"
fi
prof () { # name, value of PPX_CUDA_FUSE_TAIL
  timeout 100 env PPX_CUDA_PROFILE=1 PPX_CUDA_FUSE_TAIL="$2" "$dir/bin/personaplex-bench" -r full -q int4 -b cuda \
    -c session --context 3000 --cuda-graphs off -B "$sweep" --kv-cache-format fp8 -n 10 -w 3 > "$log/prof-$1.log" 2>&1
  echo "== profile $1 exit $? $(el)"
  grep -E 'layer_tail|linear int8 (1024x|3072x|5632x|2048x)|attention f32|total' "$log/prof-$1.log" | head -14
}
if has prof; then
  prof off 0
  prof on 1
fi
