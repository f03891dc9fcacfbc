#!/usr/bin/env bash
# The main job: install what is needed, build, and run the personaplexduplex element from a WAV file
# to a WAV file.
#
# usage: scripts/setup-and-run.sh [--model-dir DIR] [--input FILE] [--output OUT.wav]
#                                 [--voice-prompt FILE|NAME] [--text-prompt TEXT] [--quantization Q]
#                                 [--backend B] [--no-deps]
#   Without --model-dir it makes and uses the bundled tiny model (deterministic random weights, in
#   out/tiny-model): that proves the plumbing, not the conversation - its replies are noise.
#   With --model-dir pointing at the published nvidia/personaplex-7b-v1 files (model.safetensors,
#   tokenizer-e351c8d8-checkpoint125.safetensors, tokenizer_spm_32k_3.model, voices/) it runs the
#   real model (see docs/model-directory.md; --quantization int8|int4 quantizes at load).
set -euo pipefail
cd "$(dirname "$0")/.."

model_dir=""
input=""
output="out/personaplex-demo.wav"
voice=""
text=""
quant="auto"
backend="auto"
deps=1
while [ $# -gt 0 ]; do
  case "$1" in
    --model-dir) model_dir="$2"; shift ;;
    --input) input="$2"; shift ;;
    --output) output="$2"; shift ;;
    --voice-prompt) voice="$2"; shift ;;
    --text-prompt) text="$2"; shift ;;
    --quantization) quant="$2"; shift ;;
    --backend) backend="$2"; shift ;;
    --no-deps) deps=0 ;;
    -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
    *) echo "setup-and-run.sh: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done

[ "$deps" = 1 ] && bash scripts/install-deps.sh
if [ -f build/meson-private/coredata.dat ]; then
  meson setup --reconfigure build >/dev/null
else
  meson setup build
fi
ninja -C build

mkdir -p out "$(dirname "$output")"
if [ -z "$model_dir" ]; then
  model_dir="out/tiny-model"
  if [ ! -f "$model_dir/model.safetensors" ]; then
    echo "== making the bundled tiny model (random weights) in $model_dir"
    ./build/tools/personaplex-make-model --preset tiny --output-dir "$model_dir"
  fi
  echo "== NOTE: the tiny model has random weights: this run proves the plumbing, its reply is noise."
fi
if [ -z "$input" ]; then
  for f in ../shared/data/input_assistant.wav; do [ -f "$f" ] && input="$f"; done
fi
if [ -z "$input" ]; then
  input="out/tone.wav"
  gst-launch-1.0 -q audiotestsrc num-buffers=40 samplesperbuffer=1200 freq=220 ! \
    audio/x-raw,rate=24000,channels=1 ! wavenc ! filesink location="$input"
fi

export GST_PLUGIN_PATH="$PWD/build/gst${GST_PLUGIN_PATH:+:$GST_PLUGIN_PATH}"
props=(model-dir="$model_dir" quantization="$quant" backend="$backend")
[ -n "$voice" ] && props+=(voice-prompt="$voice")
[ -n "$text" ] && props+=(text-prompt="$text")
echo "== running: $input -> personaplexduplex -> $output"
log="out/personaplex-demo.log"
# The text branch needs its own queue: the element pushes text and audio from one thread.
if ! gst-launch-1.0 -m filesrc location="$input" ! decodebin ! audioconvert ! audioresample ! \
  audio/x-raw,format=F32LE,rate=24000,channels=1 ! \
  personaplexduplex name=pp "${props[@]}" ! audioconvert ! wavenc ! filesink location="$output" \
  pp.text_src ! queue ! fakesink > "$log" 2>&1; then
  grep -E "ERROR|error" "$log" | head -n 5 >&2
  echo "== the pipeline failed (full log: $log)" >&2
  exit 1
fi
text=$(grep -o 'personaplex-text, text=(string)"[^"]*"' "$log" | sed -e 's/.*(string)"//; s/"$//' | tr -d '\n' || true)
stats=$(grep 'personaplex-stats' "$log" | tail -n 1 | grep -oE '(frames|mean-step-ms|max-step-ms|overruns|backend|quantization)=\([a-z0-9]+\)[^,]*' | sed -e 's/([a-z0-9]*)//' | tr '\n' ' ' || true)
echo "== stats: $stats"
[ -n "$text" ] && echo "== agent text: $text"
wav_seconds() { # duration of a WAV file from its fmt and data chunks
  python3 - "$1" <<'PY'
import struct, sys
d = open(sys.argv[1], 'rb').read()
pos, rate, align, n = 12, 0, 0, 0
while pos + 8 <= len(d):
    cid, size = d[pos:pos + 4], struct.unpack('<I', d[pos + 4:pos + 8])[0]
    if cid == b'fmt ':
        rate, align = struct.unpack('<I', d[pos + 12:pos + 16])[0], struct.unpack('<H', d[pos + 20:pos + 22])[0]
    elif cid == b'data':
        n = min(size, len(d) - pos - 8) // max(align, 1)
    pos += 8 + size + (size & 1)
print('%.3f s' % (n / rate if rate else 0))
PY
}
case "$input" in
  *.wav|*.WAV) echo "== wrote $output: $(wav_seconds "$output") of agent audio for $(wav_seconds "$input") of input" ;;
  *) echo "== wrote $output: $(wav_seconds "$output") of agent audio" ;;
esac
