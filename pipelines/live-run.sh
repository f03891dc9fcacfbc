# Sourced by the GPU run scripts (gpu-live.sh, fleet/fleet-live.sh): what they share. The script sets `root` (the
# checkout), `me` (its name, for messages), `usage_lines` (the last line of its usage comment) and `rest` (what
# goes after --, for the message about an unknown option) first.
#
#   ppx_live_parse ARGS...         the command line up to -- (the rest is the script's, after `shift "$ppx_shift"`):
#                                  the options both take, --pack, --build, --model-dir, --make-model, --model-root,
#                                  --backend, --quantization, --seconds, --out (they set pack, build, model, make,
#                                  model_root, backend, quant, seconds, out: the script sets the last four's defaults),
#                                  --check (check=1) and -h; the script's own by its function live_option OPTION
#                                  VALUE (0: it took the option and its value, 1: the option alone, 2: unknown: exit 2)
#   ppx_live_runner DEFAULT_PACK PACK_TOOL PACK_FILE BUILD_FILE
#                                  after the options: a model is asked for (exit 2 without); the pack (--pack, else
#                                  ROOT/DEFAULT_PACK when it has a run script), which must hold PACK_FILE, or the build
#                                  tree (--build), which must hold BUILD_FILE (exit 1 when one does not; 2 when there
#                                  is neither; PACK_TOOL makes packs); defines run_in (runs a program of the pack, or of
#                                  the build tree with its plugin and tools/ first in the paths)
#   ppx_live_machine               the machine (kernel, cores, memory) and its GPUs (nvidia-smi), a line each
#   ppx_live_model                 the pack's manifest, its check.sh with --check (2: --check without a pack), the
#                                  model made with --make-model (ppx_random_model); non-zero when a step fails or the
#                                  model directory is missing
#   ppx_random_model PRESET:FORMAT [ROOT]   (full:int4, full:bf16, tiny:bf16, ...) makes full-size (or other) random
#                                  weights with personaplex-make-model once, where they can stay for the run.
#
# ppx_random_model sets `model` to ROOT/ppx-PRESET-FORMAT; an existing complete one (marked .complete) is reused. ROOT
# defaults to /dev/shm when it has room for the weights and 2 GiB more (tmpfs: no disk write-back during the run),
# else /tmp. full:bf16 writes 17.1 GB, full:int8 9.1 GB, full:int4 6.2 GB. Returns non-zero when making them fails.
# shellcheck disable=SC2034,SC2154,SC2317 # root, me, usage_lines, rest: the sourcing script's; the options it sets and run_in: for it
pack=''
build=''
model=''
make=''
model_root=''
check=0

ppx_live_parse () {
  ppx_shift=0
  while [ $# -gt 0 ]; do
    n=2 v=${2-}
    case $1 in
      --pack) pack=$v ;;
      --build) build=$v ;;
      --model-dir) model=$v ;;
      --make-model) make=$v ;;
      --model-root) model_root=$v ;;
      --backend) backend=$v ;;
      --quantization) quant=$v ;;
      --seconds) seconds=$v ;;
      --out) out=$v ;;
      --check) check=1 n=1 ;;
      --) ppx_shift=$((ppx_shift + 1)); return ;;
      -h|--help) sed -n "2,${usage_lines}p" "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
      *)
        live_option "$1" "$v"
        case $? in
          0) ;;
          1) n=1 ;;
          *) echo "$me: unknown option $1 ($rest go after --)" >&2; exit 2 ;;
        esac ;;
    esac
    [ $# -ge $n ] || { echo "$me: $1 needs a value" >&2; exit 2; }
    shift $n
    ppx_shift=$((ppx_shift + n))
  done
}

ppx_live_runner () {
  if [ -z "$model" ] && [ -z "$make" ]; then
    echo "$me: give --model-dir DIR or --make-model PRESET:FORMAT" >&2
    exit 2
  fi
  if [ -z "$pack" ] && [ -z "$build" ] && [ -x "$root/$1/run" ]; then
    pack=$root/$1
  fi
  if [ -n "$pack" ]; then
    if [ ! -x "$pack/run" ] || [ ! -e "$pack/$3" ]; then
      echo "$me: $pack: no run or $3 there: make the pack with $2" >&2
      exit 1
    fi
    pack=$(cd "$pack" && pwd)
    run_in () { "$pack/run" "$@"; }
  elif [ -n "$build" ]; then
    [ -e "$build/$4" ] || { echo "$me: $build/$4 not found" >&2; exit 1; }
    build=$(cd "$build" && pwd)
    run_in () { GST_PLUGIN_PATH="$build/gst${GST_PLUGIN_PATH:+:$GST_PLUGIN_PATH}" PATH="$build/tools:$PATH" "$@"; }
  else
    echo "$me: no pack ($2 BUILD $1) and no --build DIR" >&2
    exit 2
  fi
}

ppx_live_machine () {
  echo "== $me $(date -u +%Y-%m-%dT%H:%M:%SZ): $(uname -srm), $(getconf _NPROCESSORS_ONLN) cores," \
       "$(awk '/MemTotal/ { printf "%.0f GiB", $2 / 1048576 }' /proc/meminfo)"
  if command -v nvidia-smi > /dev/null; then
    nvidia-smi --query-gpu=index,name,driver_version,memory.total,memory.used --format=csv,noheader
  else
    echo "(no nvidia-smi: no GPU memory figures)"
  fi
}

ppx_live_model () {
  [ -z "$pack" ] || sed -n '2,3p' "$pack/MANIFEST.txt"
  if [ "$check" = 1 ]; then
    [ -n "$pack" ] || { echo "$me: --check needs a pack" >&2; return 2; }
    sh "$pack/check.sh" || return 1
  fi
  if [ -n "$make" ]; then
    ppx_random_model "$make" "$model_root" || return 1
  fi
  [ -d "$model" ] || { echo "$me: $model: no such model directory" >&2; return 1; }
}

ppx_random_model () {
  preset=${1%%:*}
  format=${1#*:}
  [ "$format" != "$1" ] || format=bf16
  model_root=${2:-}
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
    return 0
  fi
  rm -rf "$model"
  mkdir -p "$model_root" || return 1
  echo "== making $preset $format random weights in $model (df: $(df -h "$model_root" | awk 'NR == 2 { print $4 }') free)"
  t0=$(date +%s.%N)
  run_in personaplex-make-model --preset "$preset" --format "$format" --output-dir "$model" || return 1
  echo "== made in $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }') s: $(du -sh "$model" | cut -f1)"
  touch "$model/.complete"
}
