# Sourced by the GPU run scripts (gpu-live.sh, fleet/fleet-live.sh): makes full-size (or other) random weights
# with personaplex-make-model once, where they can stay for the run.
#
#   ppx_random_model PRESET:FORMAT [ROOT]   (full:int4, full:bf16, tiny:bf16, ...)
#
# Needs a function run_in (runs a program of the pack or the build). Sets `model` to ROOT/ppx-PRESET-FORMAT; an
# existing complete one (marked .complete) is reused. ROOT defaults to /dev/shm when it has room for the weights
# and 2 GiB more (tmpfs: no disk write-back during the run), else /tmp. full:bf16 writes 17.1 GB, full:int8
# 9.1 GB, full:int4 6.2 GB. Returns non-zero when making them fails.
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
