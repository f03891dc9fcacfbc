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
me='gpu-live.sh' usage_lines=26 rest='extra bench arguments'
# shellcheck source=pipelines/live-run.sh
. "$here/live-run.sh"
backend=cuda
quant=auto
seconds=330
out=${OUT:-$root/out/gpu-live}
live_option () { return 2; } # no options of its own
ppx_live_parse "$@"
shift "$ppx_shift"
ppx_live_runner build-devpack-gst scripts/device/device-pack-gst.sh run gst/libgstpersonaplex.so
mkdir -p "$out" || exit 1
out=$(cd "$out" && pwd)
status_file=$(mktemp "${TMPDIR:-/tmp}/ppx-gpu-live-XXXXXX")
trap 'rm -f "$status_file"' EXIT INT TERM

main () {
  ppx_live_machine
  ppx_live_model || return
  echo "== personaplex-live-bench: $seconds s, backend $backend, quantization $quant"
  run_in personaplex-live-bench --model-dir "$model" --backend "$backend" --quantization "$quant" \
    --seconds "$seconds" --output-dir "$out" "$@"
}

{ main "$@"; echo $? > "$status_file"; } 2>&1 | tee "$out/run.log"
status=$(cat "$status_file")
echo "== gpu-live.sh: exit $status; files in $out: $(cd "$out" && ls | tr '\n' ' ')"
exit "$status"
