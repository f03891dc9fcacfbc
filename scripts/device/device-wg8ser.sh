#!/bin/sh
# Runs on the GPU machine: int8 on wgmma without serialized wgmma (docs/cuda.md, "int8 on wgmma": ptxas's C7512
# removed; PPX_CUDA_LINEAR_WGPIPE8, the pipelined stage for int8's 4-n-tile configuration) against main's
# binaries, in one call within a time budget. PACK: device-pack.sh's pack of this branch plus bin/personaplex-bench;
# MAIN: a directory holding main's test-backend-cuda and personaplex-bench (run with PACK's lib/). Steps, in this
# order (default: all), each skipped or cut short when the budget (BUDGET seconds, default 165) runs low:
#   tests:  the linear tests that check the bits (the path, batched rows against M = 1, slices, against the CPU) at
#           the default switch; the batch tests again with int8 on wgmma from 17 rows and PPX_CUDA_LINEAR_WGPIPE8=1;
#           then the golden model
#   bench:  --bench int8 on the depformer's five shapes at PPX_BENCH_MS (default 1,80,160): main, then new with
#           PPX_CUDA_LINEAR_WGPIPE8=0 (the fix alone) and 1 (and the pipelined stage at 4 n-tiles)
#   sass:   (only when named) where the machine has cuobjdump: per int8 wgmma kernel of main's and new's
#           test-backend-cuda, its HGMMA and WARPGROUP.DEPBAR counts (serialized wgmma: a wait behind every HGMMA);
#           the first call's 20 s a binary were not enough (nothing printed, 40 s of the budget gone)
#   sweep:  personaplex-bench's session sweep (int4, fp8 KV; 80,160 on a GPU of more than 130 GB, else 80,88), new
#           then main, only when the budget has room for both; PPX_CUDA_LINEAR_WGPIPE8=PIPE8 (default: the faster
#           of the bench's two, summed over its M = 160 lines)
# Logs go to $OUT. Usage: sh device-wg8ser.sh PACK MAIN [steps...]
set -u
p=$(cd "$1" && pwd)
mb=$(cd "$2" && pwd)
shift 2
steps=${*:-tests bench sweep}
log=${OUT:-/tmp}
budget=${BUDGET:-165}
export LD_LIBRARY_PATH="$p/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" PPX_GOLDEN_DIR="$p/golden" PPX_DATA_DIR="$p/data"
export G_DEBUG=fatal-criticals
has () { case " $steps " in *" $1 "*) return 0;; esac; return 1; }
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader | tee "$log/gpu.txt"
mem=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
t0=$(date +%s)
el () { echo "[$(( $(date +%s) - t0 )) s] $*"; }
left () { echo $(( budget - ($(date +%s) - t0) )); }
cap () {
  l=$(left)
  [ "$l" -lt 8 ] && { echo 0; return; }
  [ "$l" -lt "$1" ] && echo "$l" || echo "$1"
}
tb="$p/bin/test-backend-cuda"
if has tests; then
  tests=""
  for x in linear-wgmma-path linear-batch linear-batch-slices linear; do tests="$tests -p /cuda/$x"; done
  t=$(cap 45)
  [ "$t" -gt 0 ] && timeout "$t" "$tb" --verbose $tests > "$log/tests-default.log" 2>&1
  el "linear tests (default) exit $?"
  grep -E '^(ok|not ok)|Bail|ERROR|differs' "$log/tests-default.log" | tail -6
  t=$(cap 35)
  [ "$t" -gt 0 ] && PPX_CUDA_LINEAR_WGPIPE8=1 PPX_CUDA_LINEAR_WGMMA_INT8=17 timeout "$t" "$tb" --verbose \
    -p /cuda/linear-batch -p /cuda/linear-batch-slices > "$log/tests-pipe8.log" 2>&1
  el "batch tests (PPX_CUDA_LINEAR_WGPIPE8=1, int8 on wgmma from 17 rows) exit $?"
  grep -E '^(ok|not ok)|Bail|ERROR|differs' "$log/tests-pipe8.log" | tail -4
  t=$(cap 25)
  [ "$t" -gt 0 ] && timeout "$t" "$tb" --verbose -p /cuda/golden > "$log/tests-golden.log" 2>&1
  el "golden test exit $?"
  grep -E '^(ok|not ok)|Bail|ERROR' "$log/tests-golden.log" | tail -3
fi
best=${PIPE8:-}
if has bench; then
  export PPX_BENCH_MS=${PPX_BENCH_MS:-1,80,160}
  shapes=${BENCH_SHAPES:-3072x1024,1024x1024,5632x1024,1024x2816,1024x4096}
  run () { # name, env..., binary
    name=$1; shift
    t=$(cap 25)
    [ "$t" -gt 0 ] || { el "== $name skipped (budget)"; return; }
    timeout "$t" env "$@" --bench int8 "$shapes" > "$log/bench-$name.log" 2>&1
    el "== $name"; grep -E '^int8' "$log/bench-$name.log" | awk '{printf "%s %s %s | ", $2"x"$4, $7, $8} END {print ""}' \
      | fold -w 200
  }
  run main "$mb/test-backend-cuda"
  run pipe8-0 PPX_CUDA_LINEAR_WGPIPE8=0 "$tb"
  run pipe8-1 PPX_CUDA_LINEAR_WGPIPE8=1 "$tb"
  if [ -z "$best" ]; then
    s0=$(grep -E '^int8' "$log/bench-pipe8-0.log" 2>/dev/null | awk '$7 == "M=160" {s += $8} END {printf "%.0f", s * 100}')
    s1=$(grep -E '^int8' "$log/bench-pipe8-1.log" 2>/dev/null | awk '$7 == "M=160" {s += $8} END {printf "%.0f", s * 100}')
    best=0
    [ "${s1:-0}" -gt 0 ] && [ "${s0:-0}" -gt 0 ] && [ "$s1" -lt "$s0" ] && best=1
  fi
fi
if has sass; then
  od=$(command -v cuobjdump || ls /usr/local/cuda*/bin/cuobjdump 2>/dev/null | head -1)
  if [ -n "$od" ]; then
    for nb in main new; do
      case $nb in new) b=$tb;; *) b=$mb/test-backend-cuda;; esac
      timeout 60 "$od" -sass "$b" 2>/dev/null | awk -v nb=$nb '/Function :/ {f = $3} f ~ /tc_linear_kernelILi2ELi8E.*Lb1E/ {
          if ($0 ~ /HGMMA/) h[f]++; if ($0 ~ /WARPGROUP.DEPBAR/) d[f]++ }
        END {for (f in h) printf "%s %s HGMMA %d DEPBAR %d\n", nb, f, h[f], d[f]}' | sort | tee -a "$log/sass.txt"
    done
    el "sass counts"
  else
    el "no cuobjdump"
  fi
fi
if has sweep; then
  sw=${SWEEP:-$([ "${mem:-0}" -gt 130000 ] && echo 80,160 || echo 80,88)}
  best=${best:-0}
  if [ "$(left)" -lt "${SWEEP_MIN:-100}" ]; then
    el "sweeps skipped (budget: $(left) s left)"
  else
    half=$(( $(left) / 2 ))
    for nb in new main; do
      case $nb in new) b=$p/bin/personaplex-bench;; *) b=$mb/personaplex-bench;; esac
      t=$(cap "$half")
      [ "$t" -gt 0 ] || { el "sweep $nb skipped (budget)"; continue; }
      PPX_CUDA_LINEAR_WGPIPE8=$best timeout "$t" "$b" -r full -q int4 -b cuda -c session --context 3000 --sweep "$sw" \
        --sweep-kv fp8 -n 20 -w 3 > "$log/sweep-$nb.log" 2>&1
      el "sweep $nb ($sw, PPX_CUDA_LINEAR_WGPIPE8=$best) exit $?"
      grep -E '^(fp8|kv) ' "$log/sweep-$nb.log"
    done
  fi
fi
el done
