#!/usr/bin/env bash
# The main job: install what building and running needs, build, and run the personaplexduplex element
# from an audio file to a WAV file, with the agent's text and the run's statistics beside it.
#
# usage: scripts/setup-and-run.sh [--model-dir DIR] [--input FILE] [--output OUT.wav]
#                                 [--voice-prompt FILE|NAME]
#                                 [--text-prompt TEXT | --text-prompt-tokens 1,2,3]
#                                 [--quantization auto|bf16|int8|int4] [--backend auto|cpu|cuda]
#                                 [--no-deps] [--build-dir DIR] [--no-build]
#   Writes OUT.wav (default out/personaplex-demo.wav: the agent's voice, as long as the input),
#   OUT.txt (the text the element puts on text_src) and OUT-stats.json (its last personaplex-stats).
#   Without --model-dir it makes and uses the bundled tiny model (deterministic random weights, in
#   out/tiny-model): that proves the plumbing, not the conversation (its reply ignores the input).
#   With --model-dir pointing at the published nvidia/personaplex-7b-v1 files (model.safetensors,
#   tokenizer-e351c8d8-checkpoint125.safetensors, tokenizer_spm_32k_3.model, voices/; README says how
#   to download them) it runs the real model (--quantization int8|int4 quantizes at load).
#   --text-prompt needs the model's tokenizer; --text-prompt-tokens gives the prompt as token ids.
#   --no-deps skips scripts/install-deps.sh (apt); --build-dir builds in DIR (default build);
#   --no-build uses DIR as it is (no meson setup, no ninja: for the tests).
#   The tiny model and a test tone, when needed, are made in the output's folder.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)

fail() { echo "setup-and-run.sh: $*" >&2; exit 1; }

model_dir=""
input=""
output="$root/out/personaplex-demo.wav"
voice=""
text=""
tokens=""
quant="auto"
backend="auto"
deps=1
build="$root/build"
do_build=1
while [ $# -gt 0 ]; do
  case "$1" in
    --model-dir|--input|--output|--voice-prompt|--text-prompt|--text-prompt-tokens|--quantization|--backend|\
    --build-dir)
      [ $# -ge 2 ] || { echo "setup-and-run.sh: $1 needs a value (see --help)" >&2; exit 2; }
      case "$1" in
        --model-dir) model_dir="$2" ;;
        --input) input="$2" ;;
        --output) output="$2" ;;
        --voice-prompt) voice="$2" ;;
        --text-prompt) text="$2" ;;
        --text-prompt-tokens) tokens="$2" ;;
        --quantization) quant="$2" ;;
        --backend) backend="$2" ;;
        --build-dir) build="$2" ;;
      esac
      shift ;;
    --no-deps) deps=0 ;;
    --no-build) do_build=0 ;;
    -h|--help) sed -n '2,22p' "$0"; exit 0 ;;
    *) echo "setup-and-run.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done

# What the user named must exist before anything long starts.
[ -z "$input" ] || [ -f "$input" ] || fail "--input $input: no such file"
[ -z "$input" ] || [ -r "$input" ] || fail "--input $input: not readable"
[ -z "$model_dir" ] || [ -d "$model_dir" ] || fail "--model-dir $model_dir: no such directory"
[ -z "$model_dir" ] || [ -f "$model_dir/model.safetensors" ] ||
  fail "--model-dir $model_dir: no model.safetensors in it (README: obtaining the published model)"
[ -z "$text" ] || [ -z "$tokens" ] || fail "give either --text-prompt or --text-prompt-tokens, not both"
case "$output" in
  *.wav|*.WAV) ;;
  *) fail "--output $output: give a .wav file name (the text and stats files are named after it)" ;;
esac
case "$quant" in auto|bf16|int8|int4) ;; *) fail "--quantization $quant: use auto, bf16, int8 or int4" ;; esac
case "$backend" in auto|cpu|cuda) ;; *) fail "--backend $backend: use auto, cpu or cuda" ;; esac

# Paths are the caller's (relative to where the script was started); the script works in the root.
abspath() { case "$1" in /*) echo "$1" ;; *) echo "$PWD/$1" ;; esac; }
[ -z "$input" ] || input=$(abspath "$input")
[ -z "$model_dir" ] || model_dir=$(abspath "$model_dir")
[ -z "$voice" ] || [ ! -e "$voice" ] || voice=$(abspath "$voice")
output=$(abspath "$output")
build=$(abspath "$build")
cd "$root"

[ "$deps" = 1 ] && bash scripts/install-deps.sh
if [ "$do_build" = 1 ]; then
  if [ -f "$build/meson-private/coredata.dat" ]; then
    meson setup --reconfigure "$build" >/dev/null
  else
    meson setup "$build"
  fi
  ninja -C "$build"
fi
[ -x "$build/tools/personaplex-make-model" ] && [ -d "$build/gst" ] || fail "$build: not a built tree"

outdir=$(dirname "$output")
mkdir -p "$outdir"
base="${output%.*}"
text_out="$base.txt"
stats_out="$base-stats.json"
log="$base.log"

# A GPU is usable when the build has the CUDA backend and the driver lists a GPU.
gpu_usable() {
  [ -f "$build/kernels/cuda-runtime.o" ] && command -v nvidia-smi >/dev/null 2>&1 &&
    nvidia-smi -L 2>/dev/null | grep -q '^GPU '
}

demo=0
if [ -z "$model_dir" ]; then
  demo=1
  model_dir="$outdir/tiny-model"
  if [ ! -f "$model_dir/model.safetensors" ]; then
    echo "== making the bundled tiny model (random weights) in $model_dir"
    "$build/tools/personaplex-make-model" --preset tiny --output-dir "$model_dir"
  fi
else
  lm_bytes=$(stat -L -c %s "$model_dir/model.safetensors")
  if [ "$lm_bytes" -gt 1000000000 ] && { [ "$backend" = cpu ] || { [ "$backend" = auto ] && ! gpu_usable; }; }; then
    cat >&2 <<'EOF'
== WARNING: no GPU will be used (backend cpu, or no usable GPU: nvidia-smi lists none or the build
   has no CUDA backend). The 7B model on the CPU runs FAR SLOWER THAN REAL TIME: the int4 LM alone
   took 1.5 s per 80 ms frame on 2 cores (19 times slower than real time; docs/performance.md), so
   every second of input takes 20 seconds or more, and the bf16 weights need 17 GB of RAM.
   This is fine for checking that the model loads; a conversation needs a GPU (README: hardware).
EOF
  fi
fi
if [ -z "$input" ]; then
  for f in ../shared/data/input_assistant.wav; do [ -f "$f" ] && input="$f"; done
fi
if [ -z "$input" ]; then
  input="$outdir/tone.wav"
  gst-launch-1.0 -q audiotestsrc num-buffers=40 samplesperbuffer=1200 freq=220 ! \
    audio/x-raw,rate=24000,channels=1 ! wavenc ! filesink location="$input"
fi

export GST_PLUGIN_PATH="$(cd "$build/gst" && pwd)${GST_PLUGIN_PATH:+:$GST_PLUGIN_PATH}"
props=(model-dir="$model_dir" quantization="$quant" backend="$backend")
[ -n "$voice" ] && props+=(voice-prompt="$voice")
[ -n "$text" ] && props+=(text-prompt="$text")
[ -n "$tokens" ] && props+=(text-prompt-tokens="$tokens")
echo "== running: $input -> personaplexduplex -> $output (text: $text_out)"
# text_src goes straight to its file: the element serves it from a thread of its own.
if ! gst-launch-1.0 -m filesrc location="$input" ! decodebin ! audioconvert ! audioresample ! \
  audio/x-raw,format=F32LE,rate=24000,channels=1 ! \
  personaplexduplex name=pp "${props[@]}" ! audioconvert ! wavenc ! filesink location="$output" \
  pp.text_src ! filesink location="$text_out" > "$log" 2>&1; then
  # the element's message and its detail line (gst-launch puts the source location between them)
  grep -E -A3 "^ERROR: from element" "$log" |
    grep -v -E "^(Additional debug info:|[.][.]/|--$|ERROR: pipeline|Setting pipeline)" | head -n 6 >&2 || true
  echo "== the pipeline failed (full log: $log)" >&2
  exit 1
fi

# The element's last personaplex-stats message, as JSON.
python3 - "$log" "$stats_out" <<'PY'
import json, re, sys
lines = [l for l in open(sys.argv[1], errors='replace') if 'personaplex-stats,' in l]
stats = {}
if lines:
    body = lines[-1].split('personaplex-stats,', 1)[1]
    def value(typ, val):
        val = val.strip()
        if typ == 'string':
            return val[1:-1] if val.startswith('"') else val
        if typ in ('double', 'float'):
            return float(val)
        if typ == 'boolean':
            return val.lower() in ('true', '1')
        try:
            return int(val)
        except ValueError:
            return val
    # a value: a quoted string, an array "< a, b >" (the engine's tick buckets), or anything up to , or ;
    for key, typ, val in re.findall(r'([\w-]+)=\((\w+)\)("(?:[^"\\]|\\.)*"|<[^>]*>|[^,;]+)', body):
        if val.startswith('<'):
            stats[key] = [value(typ, v) for v in val.strip('<> ').split(',') if v.strip()]
        else:
            stats[key] = value(typ, val)
with open(sys.argv[2], 'w') as f:
    json.dump(stats, f, indent=2)
    f.write('\n')
PY
stats=$(python3 -c 'import json,sys; s=json.load(open(sys.argv[1])); print(" ".join("%s=%s" % (k, round(s[k], 2) if isinstance(s[k], float) else s[k]) for k in ("frames","mean-step-ms","max-step-ms","overruns","backend","quantization") if k in s))' "$stats_out")
echo "== stats: $stats (all fields: $stats_out)"
if [ -s "$text_out" ]; then
  echo "== agent text ($text_out): $(cat "$text_out")"
else
  echo "== agent text ($text_out): none"
fi
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
if [ "$demo" = 1 ]; then
  cat <<'EOF'
== What this demo shows: the whole chain works on this machine. Your audio was decoded, resampled to
   24 kHz mono, stepped through personaplexduplex 80 ms frame by frame, and answered with audio exactly
   as long as the input, with the element's text (text_src) and statistics written beside it.
== What it does not show: a conversation. The bundled tiny model has random weights: its reply
   ignores the input (any input gives the same answer) and sounds like noise, and it has no tokenizer,
   so its text file stays empty. For the real model see README.md, "Running the real model".
EOF
fi
