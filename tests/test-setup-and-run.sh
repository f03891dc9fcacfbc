#!/bin/sh
# scripts/setup-and-run.sh on the built tree (--no-deps --no-build): the user errors it reports before
# anything long starts (naming the file or option), the bundled tiny demo with --text-prompt-tokens and
# every output it promises (WAV as long as the input, text file, stats JSON, what the demo shows and
# does not), a bad token list, and the CPU warning for a 7B model directory without a GPU.
#
#   test-setup-and-run.sh SCRIPT BUILD_DIR
set -eu

script=${1:?usage: test-setup-and-run.sh SCRIPT BUILD_DIR}
build=${2:?usage: test-setup-and-run.sh SCRIPT BUILD_DIR}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/ppx-setup-XXXXXX")
trap 'rm -rf "$tmp"' EXIT INT TERM

fail () { echo "FAIL: $*" >&2; exit 1; }
skip () { echo "SKIP: $*" >&2; exit 77; }
command -v gst-launch-1.0 >/dev/null || skip "gst-launch-1.0 not installed"
command -v python3 >/dev/null || skip "python3 not installed"

run () { # runs the script with the test's fixed options; status in $status, output in $tmp/out
  status=0
  timeout 300 bash "$script" --no-deps --no-build --build-dir "$build" "$@" >"$tmp/out" 2>&1 || status=$?
}
expect_error () { # NEEDLE ARGS...: exit status 1 and the needle in the output, nothing started
  needle=$1; shift
  run "$@"
  [ "$status" -eq 1 ] || { cat "$tmp/out"; fail "exit status $status for $*"; }
  grep -qF -- "$needle" "$tmp/out" || { cat "$tmp/out"; fail "no '$needle' in the message for $*"; }
  ! grep -q "^== running" "$tmp/out" || fail "the pipeline was started for $*"
}

expect_error "--input $tmp/missing.wav: no such file" --input "$tmp/missing.wav" --output "$tmp/o.wav"
expect_error "--model-dir $tmp/no-model: no such directory" --model-dir "$tmp/no-model" --output "$tmp/o.wav"
expect_error "not both" --text-prompt hi --text-prompt-tokens 1,2 --output "$tmp/o.wav"
expect_error "--quantization int3" --quantization int3 --output "$tmp/o.wav"

# 1 s of input
gst-launch-1.0 -q audiotestsrc num-buffers=10 samplesperbuffer=2400 freq=300 ! \
  audio/x-raw,rate=24000,channels=1 ! wavenc ! filesink location="$tmp/in.wav" || fail "make input"

# the demo, with a prompt as token ids
run --input "$tmp/in.wav" --output "$tmp/demo/answer.wav" --text-prompt-tokens 1,2,3
[ "$status" -eq 0 ] || { cat "$tmp/out"; fail "the demo failed"; }
cat "$tmp/out"
for f in answer.wav answer.txt answer-stats.json; do
  [ -f "$tmp/demo/$f" ] || fail "no $f"
done
grep -q "wrote $tmp/demo/answer.wav: 1.000 s of agent audio for 1.000 s of input" "$tmp/out" ||
  fail "the answer is not as long as the input"
python3 - "$tmp/demo/answer-stats.json" <<'PY' || fail "stats JSON"
import json, sys
s = json.load(open(sys.argv[1]))
assert s["frames"] == 13, s          # 1 s = 12.5 frames of 80 ms
assert s["backend"] in ("cpu", "cuda") and "mean-step-ms" in s and "overruns" in s, s
PY
grep -q "What this demo shows" "$tmp/out" || fail "the demo does not say what it shows"
grep -q "its reply" "$tmp/out" && grep -q "ignores the input" "$tmp/out" ||
  fail "the demo does not say that its reply ignores the input"

# a bad token list: the element's error names the item
run --input "$tmp/in.wav" --output "$tmp/bad/answer.wav" --text-prompt-tokens 1,abc,3
[ "$status" -eq 1 ] || { cat "$tmp/out"; fail "a bad token list was accepted"; }
grep -qF "text-prompt-tokens: item 2 ('abc')" "$tmp/out" || { cat "$tmp/out"; fail "the error does not name the item"; }

# a 7B-sized model directory with the CPU: the warning comes before the run starts (the fake file then
# fails to load, which is expected here)
mkdir "$tmp/big"
truncate -s 2G "$tmp/big/model.safetensors"
run --input "$tmp/in.wav" --output "$tmp/big-out/answer.wav" --model-dir "$tmp/big" --backend cpu
grep -q "FAR SLOWER THAN REAL TIME" "$tmp/out" || { cat "$tmp/out"; fail "no CPU warning"; }
[ "$(grep -n "FAR SLOWER" "$tmp/out" | cut -d: -f1)" -lt "$(grep -n "^== running" "$tmp/out" | cut -d: -f1)" ] ||
  fail "the CPU warning comes after the run started"
echo "PASS"
