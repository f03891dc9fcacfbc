#!/bin/sh
# Runs on the GPU machine: the fp8 attention on the tensor cores (branch attntc) against main, in one call
# within BUDGET seconds (default 300). The kernel modes (PPX_CUDA_ATTENTION_FP8_MMA) exist in a build of commit
# e65eebf only (docs/cuda.md, "fp8 on the tensor cores": measured slower, not merged); elsewhere the knob is
# ignored and every mode runs main's kernel. PACK_TAR: device-pack.sh's pack plus bin/personaplex-bench, as
# tar.xz of a folder named pack; MAIN_TAR: main's test-backend-cuda and personaplex-bench (tar.xz).
# Steps (default: tests abench sweep):
#   modes:  --bench-attention (fp8, M = 1,80,160, T = 64) of main and of every PPX_CUDA_ATTENTION_FP8_MMA mode
#           0..7 (see cuda-attention.cu's Mode); the fastest at M = 160 (graph-replayed) becomes MODE for the
#           later steps when it beats mode 0 by more than 1 %
#   quick:  /cuda/attention (PPX_TEST_ATTENTION_QUICK=1), /cuda/golden and test-engine cuda under MODE, when MODE
#           is 3 or 7 (or FORCE_QUICK is set): the others give the bits of mode 0 or 1
#   tests:  test-backend-cuda /cuda/attention and /cuda/golden (verbose: every call's max abs err), test-engine cuda
#   abench: --bench-attention, fp8, M = 1,80,160 (ABENCH_M) and T = 64: main, new with PPX_CUDA_ATTENTION_FP8_MMA=0
#           (the CUDA-core path), new (its default: the tensor cores at d381a37, mode 0 at e65eebf)
#   sweep:  personaplex-bench int4, fp8 KV, context 3000: 1,80,160 on a GPU of more than 100 GB, else 1,64,88
#           (SWEEP), main then new
# Logs go to $OUT. Usage: sh device-attntc.sh PACK_TAR MAIN_TAR [steps...]
set -u
packtar=$1
maintar=$2
shift 2
steps=${*:-tests abench sweep}
log=${OUT:-/tmp}
budget=${BUDGET:-300}
t0=$(date +%s)
el () { echo "[$(( $(date +%s) - t0 )) s] $*"; }
left () { echo $(( budget - ($(date +%s) - t0) )); }
# timeout of a step: its cap or what is left of the budget, whichever is less
tmo () { l=$(left); [ "$l" -lt "$1" ] && echo "$l" || echo "$1"; }
has () { case " $steps " in *" $1 "*) return 0;; esac; return 1; }
mkdir -p /tmp/attntc /tmp/mb
tar -C /tmp/attntc -xJf "$packtar"
tar -C /tmp/mb -xJf "$maintar"
p=/tmp/attntc/pack
export LD_LIBRARY_PATH="$p/lib" PPX_GOLDEN_DIR="$p/golden" PPX_DATA_DIR="$p/data" G_DEBUG=fatal-criticals
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$log/gpu.txt"
mem=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
el unpacked
MODE=${MODE:-}
if has modes; then
  export PPX_BENCH_ATTENTION_KV=fp8 PPX_BENCH_ATTENTION_M=${ABENCH_M:-1,80,160} PPX_BENCH_ATTENTION_T=64
  timeout "$(tmo 30)" /tmp/mb/test-backend-cuda --bench-attention > "$log/modes-main.log" 2>&1
  for md in 0 1 2 3 4 5 6 7; do
    PPX_CUDA_ATTENTION_FP8_MMA=$md timeout "$(tmo 30)" "$p/bin/test-backend-cuda" --bench-attention > "$log/modes-$md.log" 2>&1
  done
  el "modes done"
  for n in main 0 1 2 3 4 5 6 7; do echo "== $n"; grep -E '^fp8' "$log/modes-$n.log" | sed 's/  */ /g'; done
  # graph-replayed us at M = 160 (the last M) of each mode
  best=$(for md in 0 1 2 3 4 5 6 7; do
    grep -E "^fp8 +M=${ABENCH_LAST:-160} +T=1 " "$log/modes-$md.log" | awk -v m=$md '{for (i = 1; i < NF; i++) if ($i == "graph") print $(i+1), m}'
  done | sort -g)
  echo "$best" | tr '\n' ';'; echo
  b0=$(echo "$best" | awk '$2 == 0 {print $1}')
  bm=$(echo "$best" | head -1)
  if [ -n "$b0" ] && [ -n "$bm" ] && awk -v a="${bm% *}" -v b="$b0" 'BEGIN {exit !(a < 0.99 * b)}'; then
    MODE=${bm#* }
  fi
  el "MODE=${MODE:-none (mode 0 is as fast)}"
  unset PPX_BENCH_ATTENTION_KV PPX_BENCH_ATTENTION_M PPX_BENCH_ATTENTION_T
fi
[ -n "$MODE" ] && export PPX_CUDA_ATTENTION_FP8_MMA=$MODE
if has quick; then
  # modes 2 and 4 only add L2 prefetches to mode 1, 5 and 6 to mode 0: the same bits; 3 and 7 tile differently
  if [ -n "$MODE" ] && { [ "$MODE" = 3 ] || [ "$MODE" = 7 ] || [ -n "${FORCE_QUICK:-}" ]; }; then
    PPX_TEST_ATTENTION_QUICK=1 timeout "$(tmo 60)" "$p/bin/test-backend-cuda" --verbose -p /cuda/attention -p /cuda/golden \
      > "$log/quick-cuda.log" 2>&1
    el "quick /cuda/attention /cuda/golden (mode $MODE) exit $?"
    grep -E '^(ok|not ok)|Bail|ERROR|differs|mismatch' "$log/quick-cuda.log" | tail -6
    grep "attention fp8 " "$log/quick-cuda.log" | sed -n 's/.*max abs err \([^ ]*\) (scale \([^)]*\)).*/\1 \2/p' |
      sort -g | tail -1 | sed "s/^/worst fp8: /"
    timeout "$(tmo 40)" "$p/bin/test-engine" cuda > "$log/quick-engine.log" 2>&1
    el "test-engine cuda (mode $MODE) exit $?"
  else
    el "quick: skipped (mode ${MODE:-0} computes the bits of a mode tested in full)"
  fi
fi
if has tests; then
  timeout "$(tmo 150)" "$p/bin/test-backend-cuda" --verbose -p /cuda/attention -p /cuda/golden > "$log/tests-cuda.log" 2>&1
  el "test-backend-cuda /cuda/attention /cuda/golden exit $?"
  grep -E '^(ok|not ok)|Bail|ERROR|differs|mismatch' "$log/tests-cuda.log" | tail -8
  # the worst max abs err per format over the attention calls (scale in parentheses)
  for f in f32 bf16 fp8; do
    grep "attention $f " "$log/tests-cuda.log" | sed -n 's/.*max abs err \([^ ]*\) (scale \([^)]*\)).*/\1 \2/p' |
      sort -g | tail -1 | sed "s/^/worst $f: /"
  done
  timeout "$(tmo 90)" "$p/bin/test-engine" cuda > "$log/test-engine.log" 2>&1
  el "test-engine cuda exit $?"
  tail -3 "$log/test-engine.log"
fi
if has abench; then
  export PPX_BENCH_ATTENTION_KV=fp8 PPX_BENCH_ATTENTION_M=${ABENCH_M:-1,80,160} PPX_BENCH_ATTENTION_T=64
  timeout "$(tmo 40)" /tmp/mb/test-backend-cuda --bench-attention > "$log/abench-main.log" 2>&1
  el "abench main exit $?"
  PPX_CUDA_ATTENTION_FP8_MMA=0 timeout "$(tmo 40)" "$p/bin/test-backend-cuda" --bench-attention > "$log/abench-cc.log" 2>&1
  el "abench new, CUDA cores exit $?"
  timeout "$(tmo 40)" "$p/bin/test-backend-cuda" --bench-attention > "$log/abench-tc.log" 2>&1
  el "abench new, tensor cores exit $?"
  for n in main cc tc; do echo "== $n"; grep -E 'fp8' "$log/abench-$n.log"; done
  unset PPX_BENCH_ATTENTION_KV PPX_BENCH_ATTENTION_M PPX_BENCH_ATTENTION_T
fi
if has sweep && [ -z "$MODE" ] && has modes; then
  el "sweep: skipped (no mode beats mode 0)"
elif has sweep; then
  sw=${SWEEP:-$([ "${mem:-0}" -gt 100000 ] && echo 1,80,160 || echo 1,64,88)}
  [ "$(left)" -lt 110 ] && sw=${sw##*,}
  for nb in main:/tmp/mb/personaplex-bench new:$p/bin/personaplex-bench; do
    n=${nb%%:*} b=${nb#*:}
    [ "$n" = main ] && cap=$(( ($(left) - 3) / 2 )) || cap=$(( $(left) - 2 ))
    timeout "$(tmo $cap)" "$b" -r full -q int4 -b cuda -c session --context 3000 --sweep "$sw" --sweep-kv fp8 \
      -n 20 -w 3 > "$log/sweep-$n.log" 2>&1
    el "sweep $n ($sw) exit $?"
    grep -E '^(fp8|kv) ' "$log/sweep-$n.log"
  done
fi
el done
