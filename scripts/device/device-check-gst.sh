#!/bin/sh
# Proves that a GStreamer pack made by scripts/device/device-pack-gst.sh works on its own (copied into the pack as
# check.sh). Every command runs under `env -i` (no inherited LD_LIBRARY_PATH or GST_* variables) through the
# pack's `run` wrapper, with a fresh registry, and with LD_DEBUG=files so that every library the processes
# load (gst-plugin-scanner included) is listed: each must come from the pack, except glibc's own and the
# NVIDIA driver's. Then:
#   - gst-inspect-1.0 finds personaplexduplex in the pack's plugins/ and blacklists no plugin;
#   - a pipeline runs: audiotestsrc ! audioconvert ! audioresample ! [personaplexduplex backend=cpu !]
#     wavenc ! filesink, and the file is read back through filesrc ! wavparse ! level ! fakesink.
# The element is in the pipeline when MODEL_DIR is given, or when personaplex-make-model (in the pack) can
# make the tiny model in a temporary folder (it always can; it takes well under a second).
#
#   sh PACK/check.sh [MODEL_DIR]
set -u
dir=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/ppx-pack-check-XXXXXX")
trap 'rm -rf "$tmp"' EXIT INT TERM
problems=0
problem () { echo "check.sh: FAIL: $*" >&2; problems=$((problems + 1)); }
# A pack command in an empty environment; LD_DEBUG=files writes $tmp/ld.PID for every process.
r () {
  env -i PATH=/usr/bin:/bin HOME="$tmp" TMPDIR="$tmp" PPX_GST_REGISTRY="$tmp/registry" \
    LD_DEBUG=files LD_DEBUG_OUTPUT="$tmp/ld" "$dir/run" "$@"
}

model=${1:-}
if [ -z "$model" ]; then
  model=$tmp/tiny-model
  r personaplex-make-model --preset tiny --output-dir "$model" > "$tmp/make.log" 2>&1 ||
    { cat "$tmp/make.log"; problem "personaplex-make-model --preset tiny failed"; model=; }
fi

r gst-inspect-1.0 personaplexduplex > "$tmp/inspect.log" 2>&1 || { cat "$tmp/inspect.log"; problem "gst-inspect-1.0 personaplexduplex"; }
grep -q "Filename *$dir/plugins/libgstpersonaplex.so" "$tmp/inspect.log" ||
  problem "personaplexduplex was not loaded from $dir/plugins ($(grep Filename "$tmp/inspect.log"))"
r gst-inspect-1.0 -b > "$tmp/blacklist.log" 2>&1
grep -q "Total count: 0 blacklisted" "$tmp/blacklist.log" || { cat "$tmp/blacklist.log"; problem "blacklisted plugins"; }
for e in queue fakesink filesrc filesink audiotestsrc audioconvert audioresample wavparse wavenc appsrc appsink level; do
  r gst-inspect-1.0 --exists "$e" || problem "element $e not found in the pack"
done

element=
[ -n "$model" ] && element="personaplexduplex model-dir=$model backend=cpu greedy=true !"
# shellcheck disable=SC2086 # $element is a launch-line fragment
r gst-launch-1.0 -q audiotestsrc num-buffers=25 samplesperbuffer=1920 ! audioconvert ! audioresample ! \
  audio/x-raw,format=F32LE,rate=24000,channels=1 ! $element wavenc ! filesink location="$tmp/out.wav" \
  > "$tmp/launch.log" 2>&1 || { cat "$tmp/launch.log"; problem "the pipeline ${element:+with personaplexduplex }failed"; }
r gst-launch-1.0 -m filesrc location="$tmp/out.wav" ! wavparse ! audioconvert ! level ! fakesink \
  > "$tmp/read.log" 2>&1 || { cat "$tmp/read.log"; problem "reading the WAV back failed"; }
grep -q "level, " "$tmp/read.log" || problem "no level message when reading the WAV back"

# Libraries loaded from outside the pack (the dynamic loader's "calling init: PATH" lines).
outside=$(cat "$tmp"/ld.* 2>/dev/null | sed -n 's/.*calling init: //p' | sort -u | grep -v "^$dir/" |
  grep -vE '/(libc\.so\.[0-9]+|libm\.so\.[0-9]+|libpthread\.so\.[0-9]+|libdl\.so\.[0-9]+|librt\.so\.[0-9]+|ld-linux[^/]*|libcuda\.so[^/]*|libnvidia-[^/]*)$' || true)
[ -z "$outside" ] || problem "libraries loaded from outside the pack: $(echo "$outside" | tr '\n' ' ')"
processes=$(ls "$tmp"/ld.* 2>/dev/null | wc -l)
inits=$(cat "$tmp"/ld.* 2>/dev/null | grep -c "calling init: $dir/")

if [ "$problems" -gt 0 ]; then
  echo "check.sh: $problems problem(s) with the pack in $dir" >&2
  exit 1
fi
echo "check.sh: OK: $dir runs on its own (${element:+personaplexduplex in a pipeline, }$processes processes traced," \
     "$inits library loads from the pack, none from elsewhere but glibc)"
