#!/bin/sh
# The fleet's GPU run path, exercised on the CPU: pipelines/fleet/fleet-pack.sh packs this build (CPU only) with
# personaplex-server, personaplex-loadgen and HAProxy and checks that the pack runs on its own; then
# pipelines/fleet/fleet-live.sh runs through the pack with the tiny random model:
#   (a) one server, 2 calls joining over 1 s, 10 s each, straight to it: both ok, the summary has the loadgen's
#       table and verdict (with the latency growth), the CPU of the server, the loadgen and HAProxy, the server's
#       /health, the tick p99 of its /metrics histogram, its dropped audio (none) and its ticks, and the 8 files
#       and ticks-s1.txt (every tick, one line each; with --keep-logs and the ticker at level 6, s1.log.gz holds every
#       frame's hand-in, which pipelines/fleet/ticker-phases.py reads; every call's playout at the reference player in loadgen.json;
#       report.html well-formed, fetching nothing, with the server's tick p99 from /health);
#   (b) 2 servers behind HAProxy, 2 calls of 8 s (one each, 1 s apart), both stopped 200 ms at 2 s (--stall-at), kill -9
#       of s2 after 4 s: the summary says they were stalled, s2 killed and marked DOWN, one call ok and one
#       connection-lost.
# Environment (tests/meson.build): PPX_SOURCE_ROOT, PPX_BUILD_ROOT. Exit 77 (skip) without haproxy, python3 or
# GStreamer's tools.
set -u
src=${PPX_SOURCE_ROOT:?}
build=${PPX_BUILD_ROOT:?}
for p in haproxy python3 gst-launch-1.0 ldd pkg-config; do
  command -v "$p" > /dev/null || { echo "SKIP: $p not installed" >&2; exit 77; }
done
tmp=$(mktemp -d "${TMPDIR:-/tmp}/ppx-fleet-live-test-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
trap 'exit 1' INT TERM
fail () { echo "FAIL: $*" >&2; exit 1; }
export PPX_GST_REGISTRY="$tmp/registry" OMP_NUM_THREADS=1 OMP_WAIT_POLICY=PASSIVE

sh "$src/pipelines/fleet/fleet-pack.sh" --allow-no-cuda "$build" "$tmp/pack" > "$tmp/pack.log" 2>&1 ||
  { cat "$tmp/pack.log"; fail "fleet-pack.sh"; }
grep -E "MiB|OK" "$tmp/pack.log"
for p in personaplex-server personaplex-loadgen haproxy; do
  [ -x "$tmp/pack/bin/$p" ] || fail "$p is not in the pack"
done
"$build/tools/personaplex-make-model" --preset tiny --output-dir "$tmp/model" > /dev/null || fail "personaplex-make-model"

# four free ports in a row of 127.0.0.1 (HAProxy, its ops listener, two servers): the run's own (--ports), so that a
# server or another run on the defaults (8080, 8404, 8090) does not answer in its place
# shellcheck source=tests/server/free-ports.sh
. "$(dirname "$0")/server/free-ports.sh"
ppx_free_ports 4
live () { # NAME ARGS...: fleet-live.sh through the pack; its status in $status
  name=$1
  shift
  sh "$src/pipelines/fleet/fleet-live.sh" --pack "$tmp/pack" --model-dir "$tmp/model" --backend cpu \
    --quantization auto --kv-cache-format auto --ports "$ports" --out "$tmp/$name" "$@" > "$tmp/$name.log" 2>&1
  status=$?
  [ "$status" = 0 ] || { cat "$tmp/$name.log"; fail "fleet-live.sh ($name) exited $status"; }
}
expect () { # NAME REGEX...: each matches a line of NAME's summary
  name=$1
  shift
  for re in "$@"; do
    grep -Eq "$re" "$tmp/$name/summary.txt" || { cat "$tmp/$name/summary.txt"; fail "$name: no summary line matches '$re'"; }
  done
}

# (the ticks line's rows: 2 when the two calls share ticks, 1 when their frames fall 20 ms or more apart, as
# /api/chat calls on an engine that is not loaded may: frame alignment cannot line up 40 ms Ogg pages; server.md)
# --keep-logs with the ticker at level 6: the whole log, every frame's hand-in in it, and the ticks read from it
export GST_DEBUG=personaplexticker:6
live a --calls 2 --ramp 1 --seconds 10 --keep-logs --server-option "--batch-deadline 20" --server-option "--admission memory"
unset GST_DEBUG
sed -n '/^personaplex-loadgen: /,$p' "$tmp/a/summary.txt"
expect a '^outcomes: ok 2 \(ok 2, refused 0, failed 0\)$' '^result: PASS' \
  '^join time, connect to handshake \(ms\) +2 ' '^frame latency, all frames \(ms\) +[0-9]{3} ' \
  '^loadgen CPU: ' '^s1 pid [0-9]+ CPU: ' '^haproxy pid [0-9]+ CPU: ' '^== the machine: .* stolen' \
  '^== the machine stalled: (never over 25 ms|[0-9]+ sleep)' \
  '^== s1 /health: \{.*"sessions" *: *0' '^== s1 /metrics personaplex_tick_duration_seconds: p99 <= [0-9.]+ ms \(a bucket bound\) of [0-9]+ ticks' \
  '^== 1 server\(s\): .* --batch-deadline 20 --admission memory$' "^== personaplex-loadgen: 2 calls to ws://127.0.0.1:$((ports + 2))/api/chat" \
  '^latency growth: last quarter - first \(ms\) +2 ' '^== s1 /metrics audio dropped, the model behind \(s\): chat 0\.000' \
  '^== s1 ticks: [0-9]+ ticks of [0-9]+ to [12] rows .*, [0-9.]+ a second, '
for f in summary.txt run.log loadgen.json health.log metrics.txt servers.log report.html ticks-s1.txt stalls.txt; do
  [ -s "$tmp/a/$f" ] || fail "(a) $f was not written"
done
# every tick of the run, one line each: as many as the summary's tick lines count, all well formed
grep -Evq '^(#.*|[0-9]+\.[0-9]{3} (tick|catch-up) [0-9]+ [0-9]+ [0-9.]+ [0-9.]+)$' "$tmp/a/ticks-s1.txt" &&
  fail "(a) ticks-s1.txt has a malformed line: $(grep -Ev '^(#.*|[0-9]+\.[0-9]{3} (tick|catch-up) [0-9]+ [0-9]+ [0-9.]+ [0-9.]+)$' "$tmp/a/ticks-s1.txt" | head -1)"
[ "$(grep -c ' tick ' "$tmp/a/ticks-s1.txt")" -ge 60 ] || fail "(a) ticks-s1.txt holds $(grep -c ' tick ' "$tmp/a/ticks-s1.txt") ticks"
expect a '^missed audio at the reference player \(ms\) +2 '
[ -s "$tmp/a/s1.log.gz" ] || fail "(a) --keep-logs: no s1.log.gz in $(ls "$tmp/a" | tr '\n' ' ')"
[ "$(gzip -dc "$tmp/a/s1.log.gz" | grep -c ' handed in ')" -ge 100 ] ||
  fail "(a) s1.log.gz holds $(gzip -dc "$tmp/a/s1.log.gz" | grep -c ' handed in ') hand-in lines (GST_DEBUG=personaplexticker:6)"
# pipelines/fleet/ticker-phases.py reads it: both calls' hand-in phases in a window, and every tick in a timeline
python3 "$src/pipelines/fleet/ticker-phases.py" "$tmp/a/s1.log.gz" --window 3 8 --timeline 4 5 > "$tmp/a/phases.txt" ||
  fail "(a) ticker-phases.py on s1.log.gz"
grep -Eq '^3\.00-8\.00 s: spread [0-9.]+ ms; m[01]:-?[0-9]+ m[01]:-?[0-9]+$' "$tmp/a/phases.txt" &&
  grep -q ' START tick of [12] rows ' "$tmp/a/phases.txt" || { cat "$tmp/a/phases.txt"; fail "(a) ticker-phases.py: no phases of two calls, or no tick"; }
python3 - "$tmp/a/loadgen.json" "$tmp/a/report.html" <<'EOF' || fail "(a) the per-call playout or report.html"
import json, re, sys, xml.etree.ElementTree as ET
j = json.load(open(sys.argv[1]))
for c in j["per_call"]:
    p = c["playout"]
    assert p["played_ms"] > 0 and p["missed_ms"] >= 0 and p["dropped_ms"] >= 0 and p["rebuffers"] >= 0, p
html = open(sys.argv[2]).read()
svgs = re.findall(r"<svg .*?</svg>", html, re.S)
assert len(svgs) == 4, len(svgs)
for s in svgs:
    ET.fromstring(s)
assert not re.search(r"https?:|<script|<link|<img|src=|href=|url\(", html), "the report would fetch something"
assert "not measured" not in html, "no tick p99 from /health"
EOF
grep -q '^call [01]: ok' "$tmp/a/run.log" || fail "(a) no per-call lines in run.log"

# the second call joins 1 s after the first: two calls at the same instant once both went to s1 (a CI run on 2
# busy cores), and the kill of s2 then tested nothing
live b --servers 2 --calls 2 --ramp 1 --seconds 8 --kill-at 4 --stall-at 2 --stall-ms 200 --server-option "--admission memory"
sed -n '/^outcomes/p; /^calls per server/p; /killed/p; /marked/p' "$tmp/b/summary.txt"
expect b '^== stalled the server\(s\) 200 ms \(SIGSTOP\) at 2 s of the loadgen' \
  '^== killed s2 \(pid [0-9]+\) with SIGKILL' '^== HAProxy marked s2 DOWN L4[A-Z]* after [0-9.]+ s' \
  '^outcomes: .*(ok 1, refused 0, failed 1)' "^== personaplex-loadgen: 2 calls to ws://127.0.0.1:$ports/api/chat" \
  '^calls per server: (s1 1, s2 1|s2 1, s1 1)$'
python3 - "$tmp/b/loadgen.json" <<'EOF' || fail "(b) the killed server's call did not end connection-lost"
import json, sys
j = json.load(open(sys.argv[1]))
lost = [c for c in j["per_call"] if c["reason"] != "ok"]
assert len(lost) == 1 and lost[0]["server"] == "s2" and lost[0]["reason"] == "connection-lost", lost
EOF
echo "fleet-live: (a) $(grep '^frame latency, all' "$tmp/a/summary.txt"); (b) $(grep 'marked s2' "$tmp/b/summary.txt")"
