#!/bin/sh
# personaplex-loadgen's reference player (tools/loadgen/loadgen-playout.c) against the reference itself: the web client's
# player worklet (client/src/audio-processor.ts of NVIDIA/personaplex) run under node with a small shim for
# AudioWorkletProcessor (tests/playout/reference-player.js), both driven by the same replay rules on the same
# traces of decoded chunks: steady pages and bursts, late bursts, doubled bursts, long gaps, jitter, odd chunk
# sizes. They must agree: re-buffers exactly; missed, dropped and played audio within one quantum (128 samples).
# Where the client's sources come from, as scripts/build-reference-client.sh looks: $PPX_PERSONAPLEX_SOURCE,
# then the mirror ../.mirror/NVIDIA+personaplex/repo (beside the checkout), then
# /work/.mirror/NVIDIA+personaplex/repo; a checkout (client/ in it) or a git repository (HEAD is read).
# Environment (tests/meson.build): PPX_SOURCE_ROOT, PPX_LOADGEN. Exit 77 (skip) without node or the sources.
set -u
src=${PPX_SOURCE_ROOT:?}
loadgen=${PPX_LOADGEN:?}
command -v node > /dev/null || { echo "SKIP: node is not installed" >&2; exit 77; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/ppx-playout-test-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
trap 'exit 1' INT TERM
fail () { echo "FAIL: $*" >&2; exit 1; }

worklet=$tmp/audio-processor.ts
mirror=.mirror/NVIDIA+personaplex/repo
for s in "${PPX_PERSONAPLEX_SOURCE:-}" "$src/../$mirror" "/work/$mirror"; do
  [ -n "$s" ] && [ -d "$s" ] || continue
  if [ -f "$s/client/src/audio-processor.ts" ]; then
    cp "$s/client/src/audio-processor.ts" "$worklet" && break
  elif git -C "$s" show HEAD:client/src/audio-processor.ts > "$worklet" 2> /dev/null; then
    echo "the worklet: $s at $(git -C "$s" rev-parse --short HEAD)"
    break
  fi
  rm -f "$worklet"
done
[ -s "$worklet" ] || { echo "SKIP: no NVIDIA/personaplex sources (set PPX_PERSONAPLEX_SOURCE)" >&2; exit 77; }

# The traces: "ARRIVAL_MS SAMPLES" a line; the server's pattern is a burst of two 40 ms pages (1920 samples at
# 48 kHz each) per 80 ms tick. Pseudo-random ones are made by a fixed generator (the same file for both sides).
burst () { # ticks, then awk code that sets d (the burst's delay, ms) from k (the tick) and r (0..1)
  awk -v n="$1" "BEGIN { x = 12345; t = 0
    for (k = 0; k < n; k++) { x = (x * 1103 + 12345) % 65536; r = x / 65536; d = 0; $2
      a = 312 + 80 * k + d; if (a < t) a = t; t = a + 0.4
      printf \"%.3f 1920\\n%.3f 1920\\n\", a, a + 0.4 } }"
}
burst 250 '' > "$tmp/steady-bursts"
awk 'BEGIN { for (k = 0; k < 500; k++) printf "%d 1920\n", 100 + 40 * k }' > "$tmp/steady-pages"
burst 250 'if (k == 50) d = 15; if (k == 100) d = 30; if (k == 150) d = 70; if (k == 200) d = 11' > "$tmp/late-bursts"
burst 250 'if (k % 20 == 7) d = 80; if (k % 50 == 9) d = 160' > "$tmp/doubled-bursts"
burst 250 'if (k >= 40) d = 300; if (k >= 80) d = 1300; if (k >= 120) d = 3800' > "$tmp/long-gaps"
burst 400 'if (k % 12 == 5) d = 200 + 120 * (k % 24 == 5)' > "$tmp/many-gaps"
burst 400 'd = 60 * r' > "$tmp/jittery"
burst 400 'd = 200 * r * r' > "$tmp/very-jittery"
awk 'BEGIN { x = 777; t = -500
  for (k = 0; k < 1500; k++) { x = (x * 1103 + 12345) % 65536; t += (x % 5000) / 100; x = (x * 1103 + 12345) % 65536
    printf "%.2f %d\n", t, x % 5000 } }' > "$tmp/odd-chunks"
: > "$tmp/empty"

checked=0
for trace in steady-bursts steady-pages late-bursts doubled-bursts long-gaps many-gaps jittery very-jittery \
             odd-chunks empty; do
  ref=$(node "$src/tests/playout/reference-player.js" "$worklet" "$tmp/$trace") || fail "$trace: the worklet under node"
  port=$("$loadgen" --playout-trace "$tmp/$trace") || fail "$trace: personaplex-loadgen --playout-trace"
  node -e '
    const [name, a, b] = process.argv.slice(1);
    const ref = JSON.parse(a), port = JSON.parse(b), quantum = 128 * 1000 / 48000;
    const far = (k) => !(Math.abs(ref[k] - port[k]) <= quantum);
    const bad = ["missed_ms", "dropped_ms", "played_ms"].filter(far);
    if (ref.rebuffers !== port.rebuffers) bad.push("rebuffers");
    console.log(`${name}: reference ${a}; port ${b}${bad.length ? "; DIFFER: " + bad.join(", ") : ""}`);
    process.exit(bad.length ? 1 : 0);' "$trace" "$ref" "$port" || fail "$trace: the port differs from the reference"
  checked=$((checked + 1))
done
# the traces must exercise every rule: some re-buffer, some drop, some miss audio, one is clean
for trace in steady-bursts late-bursts doubled-bursts long-gaps many-gaps; do
  "$loadgen" --playout-trace "$tmp/$trace"
done > "$tmp/ports"
grep -q '"missed_ms": 0.000, "dropped_ms": 0.000, "rebuffers": 0' "$tmp/ports" || fail "no clean trace"
grep -qv '"dropped_ms": 0.000' "$tmp/ports" || fail "no trace drops audio"
grep -qv '"rebuffers": 0}' "$tmp/ports" || fail "no trace re-buffers"
echo "playout-reference: $checked traces agree"
