#!/bin/sh
# personaplex-server keeps real time when its engine's tick does (docs/server.md, "Falling behind"), driven by
# personaplex-loadgen over 127.0.0.1 on the tiny model with the CPU backend, the tick made to cost what a GPU's does
# (PPX_TICK_EMULATE, docs/testing.md: every tick lasts at least 40 ms + 2 ms a row, slept, so the CPU stays free):
#   1. 8 calls joining over 2 s, 20 s of speech each, paced in real time from their own clocks (so their frames
#      complete at unrelated phases of the 80 ms period): one tick of all 8 takes 56 ms, 3 ticks of a few take
#      over 80. Every call ends ok, answered in full (answer audio / input audio >= 0.99, the rest of the answer
#      within 2 s of the input's end) and its frame latency does not grow (the p50 of its last quarter of frames
#      within 500 ms of its first quarter's). Before the ticker waited for the due tick under load, the calls'
#      ticks split into groups that never merged again and every call fell 2-3 s behind in 20 s.
#   2. a model that cannot keep up with even one call (every tick 120 ms) and --max-input-backlog 400: the oldest
#      audio is dropped instead of waiting (the log says so, /metrics counts it), so the answer ends within 2 s of
#      the input, short by what was dropped (to 0.3 s); personaplex-loadgen's verdict is FAIL (dropped).
#   3. 16 calls joining a loaded engine one after another (below): the calls already there keep their latency
#      (--admission memory: all 16 admitted, however the live ticks run; tests/test-server-admission.sh tests the
#      admission by the tick).
# A shared 2-core machine can stall the server for a while: a run of part 1 or 3 that fails while the CPU pressure
# (/proc/pressure/cpu) was over 40 % is taken again, up to 3 runs. Environment (tests/meson.build):
# PPX_BUILD_ROOT, PPX_DATA_DIR (speech; a test signal without it). Exit 77 (skip) without python3.
set -u
build=${PPX_BUILD_ROOT:?}
ppx_name=realtime
# shellcheck source=tests/server/server-script.sh
. "$(dirname "$0")/server/server-script.sh"
ppx_input
ppx_make_model

# start EMULATE ARGS...: a server on the emulated tick EMULATE (its port in $port, pid in $spid)
start () {
  emulate=$1
  shift
  ppx_serve "$tmp/server.log" "$@"
}

# 1. 8 calls in real time on a GPU-like tick
attempt=1
while :; do
  start 40,2
  ppx_pressure_begin
  # shellcheck disable=SC2086 # $input is an option and its value
  "$loadgen" --url "ws://127.0.0.1:$port/api/chat" --calls 8 --ramp 2 --seconds 20 --tail 2 $input \
    --json "$tmp/calls.json" --server-pid "s=$spid" -q > "$tmp/calls.txt" 2>&1
  status=$?
  ppx_pressure_end
  ppx_stop
  sed -n '/^outcomes/,/^s pid/p' "$tmp/calls.txt"
  verdict=$(python3 - "$tmp/calls.json" <<'EOF'
import json, sys
calls = json.load(open(sys.argv[1]))["per_call"]
bad = []
for c in calls:
    ratio = c["answered_s"] / c["sent_s"] if c["sent_s"] else 0
    first, last = c["latency_first_quarter_p50_ms"], c["latency_last_quarter_p50_ms"]
    growth = last - first if first is not None and last is not None else float("inf")
    print("call %d: %s, answered %.2f of %.2f s (%.3f), latency p50 %.0f ms first quarter, %.0f ms last" %
          (c["index"], c["reason"], c["answered_s"], c["sent_s"], ratio, first or -1, last or -1), file=sys.stderr)
    if c["reason"] != "ok" or ratio < 0.99 or growth > 500:
        bad.append("call %d (%s, answered %.3f, latency growth %.0f ms)" % (c["index"], c["reason"], ratio, growth))
print("; ".join(bad) if bad else "ok")
EOF
)
  [ "$status" -le 1 ] || fail "personaplex-loadgen exited $status"
  [ "$verdict" = ok ] && [ "$status" = 0 ] && break
  ppx_again "$verdict" && continue
  fail "8 calls on a 56 ms tick did not keep real time (CPU pressure $cpu_pressure %): $verdict"
done
echo "1. 8 calls kept real time (run $attempt, CPU pressure $cpu_pressure %)"

# 2. a model behind its one call: the backlog stays bounded
start 120 --max-input-backlog 400
# the loadgen's verdict is FAIL, for the audio the server dropped (issue 27: the verdict tells the truth)
# shellcheck disable=SC2086
"$loadgen" --url "ws://127.0.0.1:$port/api/chat" --calls 1 --seconds 12 --tail 5 $input --json "$tmp/one.json" -q \
  > "$tmp/one.txt" 2>&1
[ $? = 1 ] && grep -q '^result: FAIL (expected 0 refused and 0 failed; got 0 and 0); rules broken: dropped: 1 call' \
  "$tmp/one.txt" || { cat "$tmp/one.txt"; fail "the loadgen did not fail the run for the audio dropped"; }
metrics=$(ppx_get "http://127.0.0.1:$port/metrics" |
  awk '$1 == "personaplex_input_dropped_seconds_total{protocol=\"chat\"}" { print $2 }')
[ -n "$metrics" ] || fail "/metrics: no personaplex_input_dropped_seconds_total for chat"
ppx_stop
grep -q "the model is more than 400 ms behind the call's audio: the oldest is dropped" "$tmp/server.log" ||
  fail "no log line about the dropped audio"
grep -q "s of its audio dropped in all" "$tmp/server.log" || fail "no log line with the call's dropped total"
python3 - "$tmp/one.json" "$metrics" <<'EOF' || fail "the backlog of a call behind its model was not bounded"
import json, sys
c = json.load(open(sys.argv[1]))["per_call"][0]
dropped = float(sys.argv[2])
tail = c["end_s"] - c["connect_s"] - c["join_ms"] / 1000 - c["sent_s"]
print("2. a 120 ms tick: %.2f s answered of %.2f s, %.2f s dropped (/metrics), the answer ended %.2f s after the "
      "input" % (c["answered_s"], c["sent_s"], dropped, tail))
assert c["reason"] == "ok", c["reason"]
assert dropped > 2, dropped
assert abs(c["sent_s"] - c["answered_s"] - dropped) < 0.3, (c["sent_s"], c["answered_s"], dropped)
assert tail < 2.0, tail
EOF

# 3. calls joining a loaded engine one after another do not add to the latency of the calls already there: 16 calls
# joining over 8 s (30 s each) on a tick of 40 ms + 1.5 ms a row (64 ms for all: loaded from about 11 calls on).
# (24 calls at 1 ms a row until the pacer and the hardened input came: the tiny model's own CPU work for 24 rows,
# on one OpenMP thread beside the server's and the loadgen's, then outgrew the emulated tick on a 2-core machine,
# 180-800 ms of growth with or without the grid; 16 calls at 1.5 ms a row load the engine as much with a third less
# CPU work: 5-12 ms.)
# Before the ticks kept to a grid, each joining call could make every later tick due a little later (its first
# frames arrived after the due time, the tick waited for them, and the next one was due a period after that late
# start), so the latency of the calls already there grew with every join and stayed: the first calls' p50 grew by
# 35-85 ms from their first quarter to their last (on the H100 with 64 calls, to 330-430 ms against 87 ms for the
# last to join). Now the median growth over the first 8 calls stays under 40 ms (measured 9-20 ms).
attempt=1
while :; do
  start 40,1.5 --admission memory
  ppx_pressure_begin
  # shellcheck disable=SC2086
  "$loadgen" --url "ws://127.0.0.1:$port/api/chat" --calls 16 --ramp 8 --seconds 30 $input \
    --json "$tmp/joins.json" -q > "$tmp/joins.txt" 2>&1
  status=$?
  ppx_pressure_end
  ppx_stop
  [ "$status" -le 1 ] || fail "personaplex-loadgen exited $status"
  verdict=$(python3 - "$tmp/joins.json" <<'EOF'
import json, sys
calls = json.load(open(sys.argv[1]))["per_call"]
bad = [c["index"] for c in calls if c["reason"] != "ok"]
growth = sorted(c["latency_last_quarter_p50_ms"] - c["latency_first_quarter_p50_ms"] for c in calls[:8]
                if c["latency_first_quarter_p50_ms"] is not None and c["latency_last_quarter_p50_ms"] is not None)
median = growth[len(growth) // 2] if growth else float("inf")
print("growth of the first 8 calls' latency p50 (ms): %s" % " ".join("%.0f" % g for g in growth), file=sys.stderr)
print("calls not ok: %s" % bad if bad else ("ok %.0f" % median if median < 40 else "median growth %.0f ms" % median))
EOF
)
  case $verdict in ok*) break ;; esac
  ppx_again "$verdict" && continue
  fail "16 calls joining a loaded engine: $verdict (CPU pressure $cpu_pressure %)"
done
echo "3. 16 calls joining a loaded engine: the first 8 calls' latency grew by a median ${verdict#ok } ms (run $attempt)"
