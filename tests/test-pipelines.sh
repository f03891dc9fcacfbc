#!/bin/sh
# Runs the launch scripts of pipelines/ and the embedding example on a tiny random model, and checks
# what comes out (length, non-silent level).
#
#   test-pipelines.sh offline|telephony|live|rtp|embed|valgrind|s16|text-no-queue|bad-tokens|batch
#
# Environment (set by tests/meson.build): PPX_MAKE_MODEL (personaplex-make-model), PPX_EMBED
# (personaplex-embed), PPX_PIPELINES (the pipelines/ source dir), GST_PLUGIN_PATH_1_0 and friends,
# PPX_VALGRIND_SUPP (our suppressions). Exit 77 (skip) when a needed program is missing.
set -eu

what=${1:?usage: test-pipelines.sh offline|telephony|live|rtp|embed|valgrind|s16|text-no-queue|bad-tokens|batch}
pipelines=${PPX_PIPELINES:?}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/ppx-pipelines-XXXXXX")
server_pid=
cleanup () {
  [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT INT TERM

fail () { echo "FAIL: $*" >&2; exit 1; }
skip () { echo "SKIP: $*" >&2; exit 77; }

command -v gst-launch-1.0 >/dev/null || skip "gst-launch-1.0 not installed"
"$PPX_MAKE_MODEL" --preset tiny --output-dir "$tmp/model" >/dev/null || fail "personaplex-make-model"
model=$tmp/model

# Level and length of an audio file: prints "MAX_RMS_DB DURATION_NS" (level element messages;
# the last one ends at the end of the stream; an empty last window has rms -nan, skipped). $2: extra elements after wavparse (a decoder).
audio_stats () {
  gst-launch-1.0 -m filesrc location="$1" ! wavparse ! ${2:-identity} ! audioconvert ! \
      level interval=100000000 ! fakesink 2>/dev/null |
    sed -n 's/.*(element): level, endtime=(guint64)\([0-9]*\),.*rms=(GValueArray)< \([-0-9.a-z]*\).*/\2 \1/p' |
    awk 'BEGIN { max = -1000; end = 0 }
         $1 ~ /^-?[0-9]/ && $1 + 0 > max { max = $1 + 0 }
         $2 + 0 > end { end = $2 + 0 }
         END { printf "%.1f %.0f\n", max, end }'
}

check_answer () { # FILE EXPECTED_DURATION_NS|- [DECODER]
  set -- "$1" "$2" "${3:-}" "$(audio_stats "$1" "${3:-}")"
  rms=${4% *} duration=${4#* }
  echo "$1: max RMS $rms dBFS, $duration ns"
  awk -v r="$rms" 'BEGIN { exit !(r > -60) }' || fail "$1 is silent (max RMS $rms dBFS)"
  if [ "$2" != - ] && [ "$duration" != "$2" ]; then
    fail "$1 lasts $duration ns, expected $2 ns"
  fi
}

# A 3 s stereo 48 kHz input (the scripts must convert it) with a warbling tone.
make_input () {
  gst-launch-1.0 -q audiotestsrc wave=sine freq=330 volume=0.3 samplesperbuffer=4800 num-buffers=30 ! \
    audio/x-raw,rate=48000,channels=2 ! wavenc ! filesink location="$tmp/in.wav" || fail "make input"
}

# The 17 tokens of every frame (personaplex-frame messages of `gst-launch-1.0 -m`), one line a frame.
frame_tokens () {
  sed -n 's/.*personaplex-frame.*tokens=(int)< \([-0-9, ]*\) >.*/\1/p' "$1"
}

# A script run without arguments exits 2 printing its header comment as usage, all of it and no code.
check_usage () { # SCRIPT
  status=0
  sh "$pipelines/$1" >"$tmp/usage" 2>&1 || status=$?
  [ "$status" -eq 2 ] || { cat "$tmp/usage"; fail "$1 without arguments exited $status, expected 2"; }
  expected=$(sed -n '2,$ { /^#/!q; p; }' "$pipelines/$1" | wc -l)
  [ "$(wc -l <"$tmp/usage")" -eq "$expected" ] || { cat "$tmp/usage"; fail "$1: usage is not its $expected header lines"; }
  ! grep -q '^set -eu' "$tmp/usage" || { cat "$tmp/usage"; fail "$1: usage prints code"; }
}

# Runs a launch line (words in "$@") under a timeout; a hang is a failure, not a stuck test.
launch () {
  status=0
  timeout 60 gst-launch-1.0 "$@" >"$tmp/log" 2>&1 || status=$?
  [ "$status" -ne 124 ] || { cat "$tmp/log"; fail "gst-launch-1.0 hung (killed after 60 s): $*"; }
  return "$status"
}

# A model directory over the golden tiny model in $tmp/golden (skips without golden data). The random tiny
# model answers the same whatever it hears; the golden one's answer follows its input from the second frame.
golden_model () {
  golden=${PPX_GOLDEN_DIR:-$pipelines/../../shared/golden/tiny}
  [ -r "$golden/model.safetensors" ] || skip "golden data not found (set PPX_GOLDEN_DIR)"
  mkdir "$tmp/golden"
  ln -s "$(cd "$golden" && pwd)/model.safetensors" "$tmp/golden/model.safetensors"
  ln -s "$(cd "$golden" && pwd)/mimi.safetensors" "$tmp/golden/tokenizer-e351c8d8-checkpoint125.safetensors"
  ln -s "$(cd "$golden" && pwd)/golden.json" "$tmp/golden/config.json"
}

case $what in
  offline)
    check_usage offline.sh
    make_input
    sh "$pipelines/offline.sh" "$model" "$tmp/in.wav" "$tmp/out.wav" greedy=true >"$tmp/log" 2>&1 ||
      { cat "$tmp/log"; fail "offline.sh"; }
    check_answer "$tmp/out.wav" 3000000000
    ;;
  telephony)
    check_usage telephony.sh
    gst-launch-1.0 -q audiotestsrc wave=sine freq=440 volume=0.3 num-buffers=30 samplesperbuffer=800 ! \
      audio/x-raw,rate=8000,channels=1 ! mulawenc ! wavenc ! filesink location="$tmp/in.wav" ||
      fail "make mu-law input"
    sh "$pipelines/telephony.sh" "$model" "$tmp/in.wav" "$tmp/out.wav" greedy=true >"$tmp/log" 2>&1 ||
      { cat "$tmp/log"; fail "telephony.sh"; }
    gst-launch-1.0 -q filesrc location="$tmp/out.wav" ! wavparse ! audio/x-mulaw,rate=8000,channels=1 ! \
      fakesink || fail "the answer is not 8 kHz mono mu-law"
    check_answer "$tmp/out.wav" 3000000000 mulawdec
    ;;
  live)
    check_usage live-mic.sh
    # the live script with test ends instead of a sound card: 3 s of live input, real-time sink
    PPX_VERBOSE=1 \
    PPX_AUDIO_SRC="audiotestsrc is-live=true wave=sine freq=300 samplesperbuffer=480 num-buffers=300" \
    PPX_AUDIO_SINK="fakesink sync=true" \
      sh "$pipelines/live-mic.sh" "$model" greedy=true stats-interval=0 >"$tmp/log" 2>&1 ||
      { cat "$tmp/log"; fail "live-mic.sh"; }
    frames=$(sed -n 's/.*personaplex-stats, frames=(guint64)\([0-9]*\).*/\1/p' "$tmp/log" | tail -1)
    echo "live: $frames frames"
    [ "${frames:-0}" -ge 35 ] || fail "live pipeline stepped ${frames:-no} frames (expected 3 s = 37)"
    ;;
  rtp)
    check_usage rtp-server.sh
    port=$(( 20000 + $$ % 20000 ))
    PPX_RTP_RECV_PORT=$port PPX_RTP_SEND_PORT=$((port + 2)) \
      sh "$pipelines/rtp-server.sh" "$model" greedy=true >"$tmp/server.log" 2>&1 &
    server_pid=$!
    sleep 2
    make_input
    PPX_RTP_RECV_PORT=$port PPX_RTP_SEND_PORT=$((port + 2)) \
      sh "$pipelines/rtp-client.sh" "$tmp/in.wav" "$tmp/out.wav" 5 >"$tmp/client.log" 2>&1 ||
      { cat "$tmp/client.log" "$tmp/server.log"; fail "rtp-client.sh"; }
    kill "$server_pid"
    wait "$server_pid" 2>/dev/null || true
    server_pid=
    check_answer "$tmp/out.wav" -
    ;;
  embed)
    "$PPX_EMBED" --model-dir "$model" --seconds 2 --greedy >"$tmp/log" 2>&1 ||
      { cat "$tmp/log"; fail "personaplex-embed (test tone)"; }
    grep -q "^final: 25 frames" "$tmp/log" || { cat "$tmp/log"; fail "expected 25 frames in 2 s"; }
    make_input
    "$PPX_EMBED" --model-dir "$model" --input "$tmp/in.wav" --output "$tmp/out.wav" --greedy \
      --quantization bf16 --backend cpu >"$tmp/log" 2>&1 ||
      { cat "$tmp/log"; fail "personaplex-embed (file)"; }
    check_answer "$tmp/out.wav" 3000000000
    # errors come back as an exit status and a message naming the directory
    if "$PPX_EMBED" --model-dir "$tmp/no-such-model" >"$tmp/log" 2>&1; then
      fail "a missing model directory was accepted"
    fi
    grep -q "no-such-model" "$tmp/log" || { cat "$tmp/log"; fail "the error does not name the directory"; }
    ;;
  valgrind)
    command -v valgrind >/dev/null || skip "valgrind not installed"
    supp=
    for f in /usr/share/glib-2.0/valgrind/glib.supp ${PPX_VALGRIND_SUPP:-}; do
      [ -r "$f" ] && supp="$supp --suppressions=$f"
    done
    for args in "--seconds 0.5 --greedy" "--seconds 0.3" "--model-dir-missing"; do
      if [ "$args" = --model-dir-missing ]; then
        set -- --model-dir "$tmp/no-such-model"
      else
        # shellcheck disable=SC2086
        set -- --model-dir "$model" $args
      fi
      status=0
      # shellcheck disable=SC2086
      G_SLICE=always-malloc valgrind --leak-check=full --errors-for-leak-kinds=definite \
        --show-leak-kinds=definite --error-exitcode=99 --num-callers=30 $supp \
        --log-file="$tmp/valgrind.log" "$PPX_EMBED" "$@" >"$tmp/log" 2>&1 || status=$?
      grep -E "definitely lost:|ERROR SUMMARY" "$tmp/valgrind.log" || true
      if [ "$status" -eq 99 ]; then
        cat "$tmp/valgrind.log"
        fail "valgrind found errors or definite leaks (personaplex-embed $*)"
      fi
    done
    ;;
  s16)
    # 16-bit input is the same conversation as float input: the same 16-bit samples given as F32LE
    # (audioconvert, exact) and as S16LE (from a WAV, and as raw bytes cut at odd offsets) give the
    # same tokens in every frame. The random tiny model answers the same whatever it hears, so this
    # runs on the golden tiny model, whose answer follows its input from the second frame on.
    golden_model
    gst-launch-1.0 -q audiotestsrc wave=sine freq=330 volume=0.5 samplesperbuffer=2400 num-buffers=50 ! \
      audio/x-raw,format=S16LE,rate=24000,channels=1 ! tee name=t ! queue ! wavenc ! \
      filesink location="$tmp/in16.wav" t. ! queue ! filesink location="$tmp/in16.raw" || fail "make input"
    pp="personaplexduplex name=pp model-dir=$tmp/golden greedy=true frame-messages=true stats-interval=0"
    for fmt in F32LE S16LE; do
      # shellcheck disable=SC2086
      launch -m filesrc location="$tmp/in16.wav" ! wavparse ! audioconvert ! audio/x-raw,format=$fmt ! \
        $pp ! fakesink pp.text_src ! queue ! fakesink || { cat "$tmp/log"; fail "$fmt input"; }
      frame_tokens "$tmp/log" >"$tmp/tokens-$fmt"
    done
    # shellcheck disable=SC2086
    launch -m filesrc location="$tmp/in16.raw" blocksize=1001 ! \
      audio/x-raw,format=S16LE,rate=24000,channels=1,layout=interleaved ! \
      $pp ! fakesink pp.text_src ! queue ! fakesink || { cat "$tmp/log"; fail "raw S16LE input"; }
    frame_tokens "$tmp/log" >"$tmp/tokens-raw"
    # a different input must give other tokens, or the comparisons above prove nothing
    # shellcheck disable=SC2086
    launch -m audiotestsrc wave=sine freq=900 volume=0.5 samplesperbuffer=2400 num-buffers=50 ! \
      audio/x-raw,format=S16LE,rate=24000,channels=1 ! \
      $pp ! fakesink pp.text_src ! queue ! fakesink || { cat "$tmp/log"; fail "other input"; }
    frame_tokens "$tmp/log" >"$tmp/tokens-other"
    frames=$(wc -l <"$tmp/tokens-F32LE")
    echo "s16: $frames frames"
    [ "$frames" -eq 63 ] || fail "expected 63 frames (5 s), got $frames"
    ! cmp -s "$tmp/tokens-F32LE" "$tmp/tokens-other" || fail "the model answers the same to another input"
    cmp -s "$tmp/tokens-F32LE" "$tmp/tokens-S16LE" ||
      { diff "$tmp/tokens-F32LE" "$tmp/tokens-S16LE" | head; fail "S16LE input gives other tokens than F32LE"; }
    cmp -s "$tmp/tokens-F32LE" "$tmp/tokens-raw" ||
      { diff "$tmp/tokens-F32LE" "$tmp/tokens-raw" | head; fail "S16LE bytes cut at odd offsets give other tokens"; }
    ;;
  text-no-queue)
    # the launch line users write: text_src straight into a sink, no queue; it must finish (it used
    # to stay PREROLLING forever) with the whole answer and the text in a file
    make_input
    launch filesrc location="$tmp/in.wav" ! wavparse ! audioconvert ! audioresample ! \
      audio/x-raw,rate=24000,channels=1 ! personaplexduplex name=pp model-dir="$model" ! \
      wavenc ! filesink location="$tmp/out.wav" pp.text_src ! filesink location="$tmp/out.txt" ||
      { cat "$tmp/log"; fail "pipeline with an unqueued text branch"; }
    check_answer "$tmp/out.wav" 3000000000
    [ -f "$tmp/out.txt" ] || fail "no text file"
    # and live, with both sinks synchronised to the clock
    launch audiotestsrc is-live=true wave=sine freq=300 samplesperbuffer=480 num-buffers=100 ! \
      audio/x-raw,rate=24000,channels=1 ! personaplexduplex name=pp model-dir="$model" ! \
      fakesink sync=true pp.text_src ! fakesink sync=true ||
      { cat "$tmp/log"; fail "live pipeline with an unqueued text branch"; }
    ;;
  bad-tokens)
    # a bad text-prompt-tokens item stops the pipeline with an error naming it
    make_input
    if launch filesrc location="$tmp/in.wav" ! wavparse ! audioconvert ! audioresample ! \
        personaplexduplex model-dir="$model" text-prompt-tokens=1,abc,3 ! fakesink; then
      cat "$tmp/log"; fail "text-prompt-tokens=1,abc,3 was accepted"
    fi
    grep -q "text-prompt-tokens: item 2 ('abc')" "$tmp/log" || { cat "$tmp/log"; fail "the error does not name the item"; }
    ;;
  batch)
    # Three conversations in one pipeline on one shared engine (model-instance-id): each branch's answer
    # is byte for byte the one it gives alone (greedy, f32 KV cache, golden tiny model), and the frames
    # were stepped three at a time (personaplex-stats batch-size). The batch deadline is long (5 s), so
    # that a loaded machine cannot make a tick leave a branch behind; nothing here is live.
    golden_model
    for f in 330 600 900; do
      gst-launch-1.0 -q audiotestsrc wave=sine freq=$f volume=0.5 samplesperbuffer=2400 num-buffers=25 ! \
        audio/x-raw,format=S16LE,rate=24000,channels=1 ! wavenc ! filesink location="$tmp/in$f.wav" ||
        fail "make input"
    done
    branch () { # FREQ OUTPUT-SUFFIX [PROPERTIES...]
      f=$1 suffix=$2
      shift 2
      echo "filesrc location=$tmp/in$f.wav ! wavparse ! audioconvert ! audio/x-raw,format=F32LE !
        personaplexduplex name=pp$f model-dir=$tmp/golden greedy=true kv-cache-format=f32 stats-interval=5 $* !
        wavenc ! filesink location=$tmp/out$f-$suffix.wav pp$f.text_src ! fakesink"
    }
    for f in 330 600 900; do
      # shellcheck disable=SC2046
      launch $(branch $f alone) || { cat "$tmp/log"; fail "branch $f alone"; }
    done
    shared="model-instance-id=batch-test batch-deadline=5000000000"
    # shellcheck disable=SC2046
    launch -m $(branch 330 shared $shared) $(branch 600 shared $shared) $(branch 900 shared $shared) ||
      { cat "$tmp/log"; fail "three branches on one engine"; }
    for f in 330 600 900; do
      cmp "$tmp/out$f-alone.wav" "$tmp/out$f-shared.wav" ||
        fail "branch $f: the answer on the shared engine differs from the answer alone"
    done
    ! cmp -s "$tmp/out330-alone.wav" "$tmp/out600-alone.wav" || fail "two inputs give the same answer"
    # every branch: stats every 5 frames (2.5 s: 31 frames and a partial one) and at EOS, batch-size 3 in all but
    # the first and the last (a branch that starts or ends a frame before the others may tick alone there)
    grep 'personaplex-stats' "$tmp/log" |
      sed -n 's/.*from element "\(pp[0-9]*\)".*frames=(guint64)\([0-9]*\).*batch-size=(uint)\([0-9]*\).*/\1 \2 \3/p' \
      >"$tmp/stats"
    cat "$tmp/stats"
    for f in 330 600 900; do
      grep "^pp$f " "$tmp/stats" | sed '1d;$d' >"$tmp/middle"
      [ "$(wc -l <"$tmp/middle")" -ge 4 ] || fail "pp$f posted too few stats messages"
      ! grep -qv ' 3$' "$tmp/middle" || fail "pp$f was not stepped three at a time: $(cat "$tmp/middle")"
    done
    ;;
  *)
    fail "unknown test '$what'"
    ;;
esac
echo "PASS: $what"
