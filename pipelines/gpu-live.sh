#!/bin/sh
# The element live on a GPU: personaplexduplex in a live pipeline for minutes (past the model's 3000-frame
# context), timed by personaplex-live-bench: per-frame step time p50/p99/max, the latency query's answer,
# overruns and late buffers (must be 0), GPU memory every 10 s (must be flat). Runs from a GStreamer pack
# (scripts/device/device-pack-gst.sh) on a machine without GStreamer, or from a build tree with the system's.
#
#   pipelines/gpu-live.sh [--pack DIR | --build DIR] (--model-dir DIR | --make-model PRESET:FORMAT)
#                         [--model-root DIR] [--backend cuda] [--quantization auto] [--seconds 330]
#                         [--out DIR] [--check] [-- MORE personaplex-live-bench ARGUMENTS...]
#
#   --pack DIR        the pack (default: build-devpack-gst beside pipelines/ when it exists)
#   --build DIR       run from a build tree instead (its gst/ plugin and tools/, the system's GStreamer)
#   --model-dir DIR   an existing model directory
#   --make-model P:F  make random weights first with personaplex-make-model --preset P --format F
#                     (full:int4, full:bf16, tiny:bf16, ...) in MODEL_ROOT/ppx-P-F, timed; an existing
#                     complete one is reused. full:bf16 writes 17.1 GB, full:int8 9.1 GB, full:int4 6.2 GB
#   --model-root DIR  where to make them (default /dev/shm when it has room for them and 2 GiB more: no
#                     disk write-back during the run; else /tmp)
#   --backend B, --quantization Q, --seconds S   passed on (defaults cuda, auto, 330 s: 4125
#                     frames, past the 7B's 3000-frame context)
#   --out DIR         summary.txt, frames.csv, memory.csv and run.log (default $OUT, else out/gpu-live)
#   --check           first run the pack's check.sh (seconds, CPU only): the pack works on its own
#   after --          e.g. `greedy=true`, `processing-deadline=40000000`, `--format S16LE`, `--source ...`
#
# Exit status: personaplex-live-bench's (0 verdict PASS, 3 verdict FAIL, 1 error), 1 when a step before it
# fails, 2 for bad options. The GPU machine's command is in docs/performance.md.
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
pack=
build=
model=
make=
model_root=
backend=cuda
quant=auto
seconds=330
out=${OUT:-$root/out/gpu-live}
check=0
usage () { sed -n '2,26p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
while [ $# -gt 0 ]; do
  case $1 in
    --pack) pack=$2; shift ;;
    --build) build=$2; shift ;;
    --model-dir) model=$2; shift ;;
    --make-model) make=$2; shift ;;
    --model-root) model_root=$2; shift ;;
    --backend) backend=$2; shift ;;
    --quantization) quant=$2; shift ;;
    --seconds) seconds=$2; shift ;;
    --out) out=$2; shift ;;
    --check) check=1 ;;
    --) shift; break ;;
    -h|--help) usage ;;
    *) echo "gpu-live.sh: unknown option $1 (extra bench arguments go after --)" >&2; exit 2 ;;
  esac
  shift
done
if [ -z "$model" ] && [ -z "$make" ]; then
  echo "gpu-live.sh: give --model-dir DIR or --make-model PRESET:FORMAT" >&2
  exit 2
fi
if [ -z "$pack" ] && [ -z "$build" ] && [ -x "$root/build-devpack-gst/run" ]; then
  pack=$root/build-devpack-gst
fi
if [ -n "$pack" ]; then
  [ -x "$pack/run" ] || { echo "gpu-live.sh: $pack/run not found: make the pack with scripts/device/device-pack-gst.sh" >&2; exit 1; }
  pack=$(cd "$pack" && pwd)
  run_in () { "$pack/run" "$@"; }
elif [ -n "$build" ]; then
  [ -f "$build/gst/libgstpersonaplex.so" ] || { echo "gpu-live.sh: $build/gst/libgstpersonaplex.so not found" >&2; exit 1; }
  build=$(cd "$build" && pwd)
  run_in () { GST_PLUGIN_PATH="$build/gst${GST_PLUGIN_PATH:+:$GST_PLUGIN_PATH}" PATH="$build/tools:$PATH" "$@"; }
else
  echo "gpu-live.sh: no pack (scripts/device/device-pack-gst.sh BUILD build-devpack-gst) and no --build DIR" >&2
  exit 2
fi
mkdir -p "$out" || exit 1
out=$(cd "$out" && pwd)
status_file=$(mktemp "${TMPDIR:-/tmp}/ppx-gpu-live-XXXXXX")
trap 'rm -f "$status_file"' EXIT INT TERM

now () { date +%s.%N; }
elapsed () { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

main () {
  echo "== gpu-live.sh $(date -u +%Y-%m-%dT%H:%M:%SZ): $(uname -srm), $(getconf _NPROCESSORS_ONLN) cores," \
       "$(awk '/MemTotal/ { printf "%.0f GiB", $2 / 1048576 }' /proc/meminfo)"
  if command -v nvidia-smi >/dev/null; then
    nvidia-smi --query-gpu=index,name,driver_version,memory.total,memory.used --format=csv,noheader
  else
    echo "(no nvidia-smi: no GPU memory figures)"
  fi
  [ -n "$pack" ] && sed -n '2,3p' "$pack/MANIFEST.txt"
  if [ "$check" = 1 ]; then
    [ -n "$pack" ] || { echo "gpu-live.sh: --check needs a pack" >&2; return 2; }
    sh "$pack/check.sh" || return 1
  fi
  if [ -n "$make" ]; then
    preset=${make%%:*}
    format=${make#*:}
    [ "$format" != "$make" ] || format=bf16
    if [ -z "$model_root" ]; then
      case $preset:$format in
        full:bf16) need_mb=17600 ;; full:int8) need_mb=9400 ;; full:int4) need_mb=6500 ;; mid:*) need_mb=1200 ;;
        *) need_mb=100 ;;
      esac
      shm_mb=$(df -Pm /dev/shm 2>/dev/null | awk 'NR == 2 { print $4 }')
      if [ -n "$shm_mb" ] && [ "$shm_mb" -gt $((need_mb + 2048)) ]; then model_root=/dev/shm; else model_root=/tmp; fi
    fi
    model=$model_root/ppx-$preset-$format
    if [ -f "$model/.complete" ]; then
      echo "== reusing $model"
    else
      rm -rf "$model"
      mkdir -p "$model_root" || return 1
      echo "== making $preset $format random weights in $model (df: $(df -h "$model_root" | awk 'NR == 2 { print $4 }') free)"
      t0=$(now)
      run_in personaplex-make-model --preset "$preset" --format "$format" --output-dir "$model" || return 1
      echo "== made in $(elapsed "$t0") s: $(du -sh "$model" | cut -f1)"
      touch "$model/.complete"
    fi
  fi
  [ -d "$model" ] || { echo "gpu-live.sh: $model: no such model directory" >&2; return 1; }
  echo "== personaplex-live-bench: $seconds s, backend $backend, quantization $quant"
  run_in personaplex-live-bench --model-dir "$model" --backend "$backend" --quantization "$quant" \
    --seconds "$seconds" --output-dir "$out" "$@"
}

{ main "$@"; echo $? > "$status_file"; } 2>&1 | tee "$out/run.log"
status=$(cat "$status_file")
echo "== gpu-live.sh: exit $status; files in $out: $(cd "$out" && ls | tr '\n' ' ')"
exit "$status"
