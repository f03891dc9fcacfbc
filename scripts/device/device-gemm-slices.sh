#!/bin/sh
# Runs on the GPU machine over a pack made by device-pack.sh with, beside bin/test-backend-cuda (new),
# bin/test-backend-cuda-base (the build compared against) and, optionally, bin/cublaslt-bench: the steps named
# in STEPS (default: all of them), each bounded in time, logs to $OUT:
#   tests    the linear tests (CPU tolerances, batched rows bit for bit against M = 1, with every forced slice)
#   slices   the linear benchmark of the new binary at each M with each forced slice (PPX_BENCH_SLICES)
#   base     the same shapes and M with the base binary
#   new      the linear benchmark of the new binary at each M, planned slices (int4 and int8 shapes)
#   tie      the same for the 4096-row int4 shapes with PPX_CUDA_LINEAR_PLAN_TIE=1 (the larger K split on a tie)
#   depth4   M = 1 and 8 with the ring depth capped at 4 (PPX_CUDA_LINEAR_DEPTH=4), new and base
#   prof     Nsight Compute stall samples per SASS instruction (device-gemm-prof.sh) of one launch at
#            PROF ("M:ROWSxCOLS ...", default 1:4096x11264 80:22528x4096)
#   cublas   cublaslt-bench on the temporal shapes (library from the toolkit or the nvidia-cublas package)
#   full     the whole op test (every op, golden)
# Usage: [STEPS="tests slices"] [MS=1,8,16,...] [SLICES=0,2,4] sh device-gemm-slices.sh PACK_DIR
set -u
dir=$(cd "$1" && pwd)
log=${OUT:-/tmp}
export LD_LIBRARY_PATH="$dir/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PPX_GOLDEN_DIR="$dir/golden" PPX_DATA_DIR="$dir/data" G_DEBUG=fatal-criticals
steps=${STEPS:-tests slices base cublas}
has () { case " $steps " in *" $1 "*) return 0;; esac; return 1; }
ms=${MS:-1,8,16,32,64,80,128}
int4_shapes=${INT4_SHAPES:-22528x4096,12288x4096,4096x11264,4096x4096}
int8_shapes=${INT8_SHAPES:-1024x2816,1024x1024,5632x1024,3072x1024,1024x4096,2048x1024}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
if has tests; then
  timeout ${T_TESTS:-60} "$dir/bin/test-backend-cuda" --verbose -p /cuda/linear -p /cuda/linear-batch \
    -p /cuda/linear-batch-slices -p /cuda/rmsnorm-linear -p /cuda/silu-gate-linear > "$log/tests.log" 2>&1
  echo "tests exit $?"
  grep -E '^(ok|not ok)|Bail|ERROR' "$log/tests.log" | tail -12
fi
if has slices; then
  for f in int4 int8; do
    [ $f = int4 ] && shapes=$int4_shapes || shapes=$int8_shapes
    PPX_BENCH_MS=$ms PPX_BENCH_SLICES=${SLICES:-0,2,4,5,8,16} timeout ${T_SLICES:-60} \
      "$dir/bin/test-backend-cuda" --bench $f "$shapes" > "$log/slices-$f.log" 2>&1
    echo "slices $f exit $?"
  done
  grep -hE '^int' "$log"/slices-int*.log | awk '{printf "%s %s%s%s %s %s%s\n", $1, $2, $3, $4, $7, $8, ($NF ~ /slice/ ? " " $NF : "")}'
fi
if has base; then
  for f in int4 int8; do
    [ $f = int4 ] && shapes=$int4_shapes || shapes=$int8_shapes
    for s in $(echo "$shapes" | tr ',' ' '); do
      PPX_BENCH_MS=$ms timeout 30 "$dir/bin/test-backend-cuda-base" --bench $f $s
    done > "$log/base-$f.log" 2>&1
  done
  grep -hE '^int' "$log"/base-int*.log | awk '{printf "base %s %s%s%s %s %s\n", $1, $2, $3, $4, $7, $8}'
fi
if has new; then
  for f in int4 int8; do
    [ $f = int4 ] && shapes=$int4_shapes || shapes=$int8_shapes
    PPX_BENCH_MS=$ms timeout ${T_NEW:-40} "$dir/bin/test-backend-cuda" --bench $f "$shapes" > "$log/new-$f.log" 2>&1
    echo "new $f exit $?"
  done
  grep -hE '^int' "$log"/new-int*.log | awk '{printf "new %s %s%s%s %s %s\n", $1, $2, $3, $4, $7, $8}'
fi
if has tie; then
  PPX_CUDA_LINEAR_PLAN_TIE=1 PPX_BENCH_MS=$ms timeout 30 "$dir/bin/test-backend-cuda" --bench int4 4096x11264,4096x4096 \
    > "$log/tie.log" 2>&1
  grep -hE '^int' "$log"/tie.log | awk '{printf "tie %s %s%s%s %s %s\n", $1, $2, $3, $4, $7, $8}'
fi
if has depth4; then
  for b in test-backend-cuda test-backend-cuda-base; do
    PPX_CUDA_LINEAR_DEPTH=4 PPX_BENCH_MS=1,8 timeout 30 "$dir/bin/$b" --bench int4 "$int4_shapes" > "$log/depth4-$b.log" 2>&1
    grep -hE '^int' "$log/depth4-$b.log" | awk -v b=$b '{printf "depth4 %s %s %s%s%s %s %s\n", b, $1, $2, $3, $4, $7, $8}'
  done
fi
if has prof && command -v ncu > /dev/null; then
  for p in ${PROF:-1:4096x11264 80:22528x4096}; do
    m=${p%%:*} shape=${p#*:}
    PPX_BENCH_MS=$m timeout ${T_PROF:-40} ncu --clock-control none -k regex:tc_linear_kernel --launch-skip 2 --launch-count 1 \
      --section WarpStateStats --section SourceCounters --section SpeedOfLight --section Occupancy --page source \
      --print-source sass --csv "$dir/bin/test-backend-cuda" --bench int4 $shape > "$log/src-M$m-$shape.csv" 2> "$log/src-M$m-$shape.err"
    echo "prof M=$m $shape exit $? $(wc -l < "$log/src-M$m-$shape.csv") lines"
  done
fi
if has cublas && [ -x "$dir/bin/cublaslt-bench" ]; then
  lib=$(python3 -c "import nvidia.cublas, os; print(os.path.dirname(nvidia.cublas.__file__) + '/lib')" 2>/dev/null)
  for d in "$lib" /usr/local/cuda/lib64 $(python3 -c "import nvidia, os; print(' '.join(os.path.join(p, q, 'lib') for p in nvidia.__path__ for q in os.listdir(p)))" 2>/dev/null); do
    if ls "$d"/libcublasLt.so.1* > /dev/null 2>&1; then lib=$d; break; fi
  done
  echo "cuBLASLt from $lib"
  LD_LIBRARY_PATH="$lib:$LD_LIBRARY_PATH" timeout ${T_CUBLAS:-60} "$dir/bin/cublaslt-bench" "$int4_shapes" \
    "${CUBLAS_MS:-1,16,32,64,80,128}" > "$log/cublas.log" 2>&1
  echo "cublas exit $?"
  grep -E '^(bf16|fp8|cuBLAS)' "$log/cublas.log" | awk '{print}'
fi
if has full; then
  timeout ${T_FULL:-140} "$dir/bin/test-backend-cuda" --verbose > "$log/full.log" 2>&1
  echo "full op test exit $?"
  grep -E '^(ok|not ok)|Bail|golden on' "$log/full.log" | tail -40
fi
