#!/bin/sh
# Runs the launch scripts of pipelines/ and the embedding example on a tiny random model, and checks
# what comes out (length, non-silent level).
#
#   test-pipelines.sh offline|telephony|live|rtp|embed|valgrind
#
# Environment (set by tests/meson.build): PPX_MAKE_MODEL (personaplex-make-model), PPX_EMBED
# (personaplex-embed), PPX_PIPELINES (the pipelines/ source dir), GST_PLUGIN_PATH_1_0 and friends,
# PPX_VALGRIND_SUPP (our suppressions). Exit 77 (skip) when a needed program is missing.
set -eu

what=${1:?usage: test-pipelines.sh offline|telephony|live|rtp|embed|valgrind}
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

case $what in
  offline)
    make_input
    sh "$pipelines/offline.sh" "$model" "$tmp/in.wav" "$tmp/out.wav" greedy=true >"$tmp/log" 2>&1 ||
      { cat "$tmp/log"; fail "offline.sh"; }
    check_answer "$tmp/out.wav" 3000000000
    ;;
  telephony)
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
  *)
    fail "unknown test '$what'"
    ;;
esac
echo "PASS: $what"
