#!/bin/sh
# Smoke test of personaplex-bench (not a timed test): every component runs for a couple of frames on the
# tiny model, made in memory and read from a directory; the expected report lines, the JSON form, the
# --measure-load table, --backend cuda (measured with a GPU, else a clear error) and bad options.
#   PPX_BENCH       the personaplex-bench executable
#   PPX_MAKE_MODEL  the personaplex-make-model executable
set -u
: "${PPX_BENCH:?set PPX_BENCH to the personaplex-bench executable}"
: "${PPX_MAKE_MODEL:?set PPX_MAKE_MODEL to the personaplex-make-model executable}"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0

fail () {
  echo "FAIL: $*"
  failures=$((failures + 1))
}

# run NAME EXPECTED_STATUS ARGS...: runs the bench, output in $tmp/NAME.out and $tmp/NAME.err
run () {
  name=$1 want=$2
  shift 2
  "$PPX_BENCH" "$@" >"$tmp/$name.out" 2>"$tmp/$name.err"
  got=$?
  if [ "$got" -ne "$want" ]; then
    fail "$name: exit status $got, expected $want"
    sed 's/^/  | /' "$tmp/$name.err"
  fi
}

# expect NAME REGEX...: every regular expression matches a line of $tmp/NAME.out
expect () {
  name=$1
  shift
  for re in "$@"; do
    grep -Eq "$re" "$tmp/$name.out" || fail "$name: no line matches '$re'"
  done
}

num='[0-9]+\.[0-9]+'
component_lines="
^  mimi-encode +2 +$num +$num +$num +$num +$num +$num +$num .*all sessions as one batch
^  mimi-decode +2 +$num
^  lm-prompt-step +2 +$num .*temporal only \(0 depformer steps\)
^  lm-step +2 +$num .*temporal \+ 8 depformer steps
^  session-step +2 +$num .*ppx_engine_step"

check_all () {
  name=$1
  expect "$name" '^personaplex-bench ' '^machine: .+, [0-9]+ cores, 1 threads used' '^build: ' '^model: ' \
    '^config:  LM dim 64, 2 layers' \
    '^run: +backend cpu, quantization auto, (f32|bf16|fp8) KV cache, batch 2, 2 frames after 1 warm-up.*position 0$' \
    "^  mimi +$num" "^  lm +$num" "^  model +$num" "^  session-new +$num" \
    "^  mimi +$num +$num +$num" "^  lm +$num +$num +$num" "^  session +$num +$num +- +$num +$num"
  echo "$component_lines" | while IFS= read -r re; do
    [ -n "$re" ] && { grep -Eq "$re" "$tmp/$name.out" || echo "$name: no line matches '$re'"; }
  done >"$tmp/$name.missing"
  if [ -s "$tmp/$name.missing" ]; then
    fail "$(cat "$tmp/$name.missing")"
  fi
}

common="--frames 2 --warmup 1 --threads 1 --batch 2"

# every component on random tiny weights made in memory
run random 0 --random-weights tiny $common
check_all random
expect random '^model: +random tiny \(made in memory\), generated in'

# the same from a model directory
if "$PPX_MAKE_MODEL" --preset tiny --output-dir "$tmp/tiny" >"$tmp/make.err" 2>&1; then
  run dir 0 --model-dir "$tmp/tiny" $common
  check_all dir
else
  fail "personaplex-make-model failed: $(cat "$tmp/make.err")"
fi

# --sequential: the sessions one after another (the cost without the batched engine)
run sequential 0 --random-weights tiny $common --sequential
expect sequential "^  mimi-encode +2 +$num .*one session after another" \
  "^  lm-step +2 +$num .*one session after another" "^  session-step +2 +$num .*ppx_session_step"

# --kv-cache-format and --context: every session's LM starts timing at a position past a full context
run context 0 --random-weights tiny $common --kv-cache-format fp8 --context 3001
expect context '^run: +backend cpu, quantization auto, fp8 KV cache, batch 2, .* from LM position 3001$' \
  "^  lm-step +2 +$num" "^  session-step +2 +$num"
run context-json 0 --random-weights tiny --component session --frames 2 --warmup 0 --threads 1 \
  --kv-cache-format bf16 --context 100 --json
expect context-json '"kv_cache_format" : "bf16"' '"context" : 100' '"p50_ms" : ' '"p99_ms" : ' \
  '"state_bytes_per_session" : [1-9]'

# one component, pre-quantized random LM, JSON
run json 0 --random-weights tiny --component lm --quantization int4 --frames 2 --warmup 0 --threads 1 --json
expect json '"program" : "personaplex-bench"' '"name" : "lm-step"' '"lm_file_format" : "int4"' \
  '"quantization" : "int4"' '"peak_rss_bytes" : [1-9]' '"p99_ms" : '
if grep -q '"mimi-encode"' "$tmp/json.out"; then
  fail "json: --component lm measured Mimi"
fi
if command -v python3 >/dev/null 2>&1; then
  python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); assert len(d["components"]) == 2' \
    "$tmp/json.out" 2>/dev/null || fail "json: not a JSON document with two components"
fi

# load times: bf16, quantized at load, pre-quantized
run load 0 --random-weights tiny --measure-load --load-repeats 1 --threads 1
expect load '^run: +backend cpu, load times only' "^  bf16 \(as stored\) +1 +$num" \
  "^  int8 quantized at load +1 +$num" "^  int8 pre-quantized +1 +$num" "^  int4 quantized at load +1 +$num" \
  "^  int4 pre-quantized +1 +$num"

# --backend cuda: measured where a GPU is usable, else a clear error before any work
"$PPX_BENCH" --random-weights tiny --backend cuda --frames 2 --warmup 1 >"$tmp/cuda.out" 2>"$tmp/cuda.err"
case $? in
  0) expect cuda '^run: +backend cuda' "^  session-step +2 +$num" ;;
  1) grep -q "CUDA" "$tmp/cuda.err" || fail "cuda: no clear error: $(cat "$tmp/cuda.err")"
     grep -q "making the random" "$tmp/cuda.err" && fail "cuda: work was done before the backend error" ;;
  *) fail "cuda: unexpected exit status" ;;
esac

# --sweep: one load, a row per (KV format, batch), the real-time summary per format
run sweep 0 --random-weights tiny --backend cpu --threads 1 --sweep 1,3 --sweep-kv f32,fp8 --context 8 --frames 2 --warmup 1
expect sweep '^sweep: .* weights .* on cpu, loaded in .*context 8' \
  '^f32 +1 +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+ +(yes|NO)$' \
  '^f32 +3 ' '^fp8 +1 ' '^fp8 +3 ' '^f32 +largest measured batch in real time .*: [0-9]+$' '^fp8 +largest measured'
run sweep-bad-batch 2 --random-weights tiny --sweep 1,0
run sweep-bad-kv 2 --random-weights tiny --sweep 1 --sweep-kv bf17
run sweep-kv-alone 2 --random-weights tiny --sweep-kv bf16
run sweep-sequential 2 --random-weights tiny --sweep 2 --sequential

# --join: a call joins while others tick in real time, step by step, prefill, prefill after the voice snapshot
# (the tiny model at context 3000)
run join 0 --random-weights tiny --lm-context 3000 --backend cpu --threads 1 --batch 2 --join --joins 1 \
  --join-voice-seconds 2 --join-text-tokens 40
expect join '^join: .* weights on cpu, .* 2 running sessions at context 0 .*2.0 s voice prompt.*40 text tokens' \
  "^first join .*: $num ms$" "^no join +[0-9]+ ticks, response ms p50 +$num" \
  "^step by step +join ms p50 +$num max +$num \| one single-row step a lock hold \| ticks during joins" \
  "^prefill +join ms p50 +$num max +$num \| +[0-9.]+ chunks a join \(largest [0-9]+ rows" \
  "^\+ voice copy +join ms p50 +$num max +$num \| " \
  "^voice snapshot: $num MB of device memory for the 2.0 s voice \(1 kept\)" \
  '^prefill chunk cost \(running mean, ms\): [0-9]+: '
run join-prefill-only 0 --random-weights tiny --backend cpu --threads 1 --batch 1 --join --joins 1 \
  --join-voice-seconds 1 --join-text-tokens 5 --join-prefill-only --prompt-chunk 8
expect join-prefill-only '^prefill +join ms'
grep -q '^step by step' "$tmp/join-prefill-only.out" && fail "join-prefill-only: a step-by-step line"
run join-idle 0 --random-weights tiny --backend cpu --threads 1 --batch 0 --join --joins 1 --join-voice-seconds 1 \
  --join-text-tokens 5
expect join-idle '^join: .* 0 running sessions' '^no join +0 ticks' '^prefill +join ms'
run join-batch-0 2 --random-weights tiny --batch 0
run join-sweep 2 --random-weights tiny --join --sweep 1
run join-bad-joins 2 --random-weights tiny --join --joins 0
run lm-context-dir 2 --model-dir "$tmp" --lm-context 100

# errors: bad options
run no-model 2 --frames 2
grep -q "exactly one of --model-dir and --random-weights" "$tmp/no-model.err" || fail "no-model: unclear error"
run bad-size 2 --random-weights huge
grep -q -- "--random-weights: unknown value 'huge' (expected tiny, mid, full)" "$tmp/bad-size.err" \
  || fail "bad-size: unclear error"
run bad-component 2 --random-weights tiny --component gpu
grep -q -- "--component: unknown value 'gpu'" "$tmp/bad-component.err" || fail "bad-component: unclear error"
run bad-frames 2 --random-weights tiny --frames 0
run bad-kv 2 --random-weights tiny --kv-cache-format f16
grep -q -- "--kv-cache-format: unknown value 'f16' (expected auto, f32, bf16, fp8)" "$tmp/bad-kv.err" \
  || fail "bad-kv: unclear error"
run bad-context 2 --random-weights tiny --context -1
grep -q -- "--context must be" "$tmp/bad-context.err" || fail "bad-context: unclear error"
run missing-dir 1 --model-dir "$tmp/does-not-exist"
grep -q "does-not-exist" "$tmp/missing-dir.err" || fail "missing-dir: the message does not name the directory"

if [ "$failures" -ne 0 ]; then
  echo "$failures check(s) failed"
  exit 1
fi
echo "all personaplex-bench checks passed"
