#!/bin/sh
# personaplex-server admits only what its tick serves in real time (issue 27; docs/server.md, "Admission"), driven
# by personaplex-loadgen over 127.0.0.1 on the tiny model with the CPU backend and a GPU-like tick
# (PPX_TICK_EMULATE=F,R, docs/testing.md: every tick lasts at least F ms + R ms a row, slept). Real time (80 ms)
# holds (80 - F) / R calls, the 70 ms budget (70 - F) / R. The issue's goal is 40,2 (real time up to 20 calls, the
# budget 15) with 24 calls offered; 24 calls overload this 2-core machine (measured: 15 served and 9 refused as
# asked, but the 15 fell 2 s behind and lost 16 s of audio, the CPU's own work making the ticks longer than
# emulated), so the test runs 40,4 by default: real time up to 10, the budget 7, 12 calls offered (docs/testing.md):
#   1. --admission tick (the default): the start-up measurement makes the compute bound hold (/health: capacity
#      7 of memory's 63 (64 slots, one the keeper's), bound compute; /metrics: personaplex_capacity_calls{bound=
#      "compute"} 7; the log says so). 12 calls offered (joining over 6 s, 20 s each): 60 % to all of what real
#      time holds served (6 to 10), every other one refused with HTTP 503 before its upgrade and counted in
#      /metrics, no audio dropped (the loadgen's dropped rule, /metrics).
#   1b. --pacing-rise: /health says new calls wait for the tick's predicted rise (off by default on the CPU: 1. says so)
#   2. --admission memory --max-sessions N with N calls (N: a 100 ms tick, 15 for 40,4): all admitted, the tick
#      falls behind, the server drops audio and personaplex-loadgen's verdict is FAIL, its rules naming it.
# A run of part 1 that fails while the CPU pressure (/proc/pressure/cpu) was over 40 % is taken again, up to 3 runs.
# Bounded: each part about 40 s. Environment (tests/meson.build): PPX_BUILD_ROOT, PPX_DATA_DIR (speech; a test
# signal without it); PPX_ADMISSION_EMULATE (F,R; default 40,4), PPX_ADMISSION_CALLS (part 1's calls, default
# 1.2 x what real time holds), PPX_ADMISSION_MEMORY_CALLS (part 2's). The issue's run on a quiet machine:
# PPX_ADMISSION_EMULATE=40,2 PPX_ADMISSION_CALLS=24 PPX_ADMISSION_MEMORY_CALLS=30. Exit 77 (skip) without python3.
set -u
build=${PPX_BUILD_ROOT:?}
ppx_name=admission
# shellcheck source=tests/server/server-script.sh
. "$(dirname "$0")/server/server-script.sh"
# the emulated device: FIXED,PER_ROW ms; real time (80 ms) holds realtime_calls, the 70 ms budget budget_calls
emulate=${PPX_ADMISSION_EMULATE:-40,4}
fixed=${emulate%,*} per_row=${emulate#*,}
realtime_calls=$(( (80 - fixed) / per_row )) budget_calls=$(( (70 - fixed) / per_row ))
calls=${PPX_ADMISSION_CALLS:-$((realtime_calls * 6 / 5))}
memory_calls=${PPX_ADMISSION_MEMORY_CALLS:-$(( (100 - fixed) / per_row ))}
ppx_input
ppx_make_model

# start ARGS...: a server on the emulated tick (its port in $port, pid in $spid)
start () { ppx_serve "$tmp/server.log" "$@"; }

# 1. the compute bound holds: CALLS offered, 60 % to all of what real time holds served, the rest refused with 503,
# nothing dropped
attempt=1
while :; do
  start
  health=$(ppx_get "http://127.0.0.1:$port/health") || fail "/health"
  echo "1. /health at start: $health"
  python3 - "$health" "$budget_calls" <<'PYEOF' || fail "/health does not say the compute bound holds at $budget_calls"
import json, sys
h, want = json.loads(sys.argv[1]), int(sys.argv[2])
assert h["capacity"] == want and h["free"] == want and h["bound"] == "compute", h
assert h["capacity_compute"] == want and h["capacity_memory"] == 63 and h["admission"] == "tick", h
assert h["tick_budget_ms"] == 70, h
assert h["pacing_rise"] is False and h["pacing_rise_ms"] == 0, h  # the rise's default: only where measured on a GPU
PYEOF
  ppx_get "http://127.0.0.1:$port/metrics" | grep -q "^personaplex_capacity_calls{bound=\"compute\"} $budget_calls\$" ||
    fail "/metrics: no personaplex_capacity_calls{bound=\"compute\"} $budget_calls"
  grep -q "the compute bound holds" "$tmp/server.log" || fail "the log does not say which bound holds"
  ppx_pressure_begin
  # shellcheck disable=SC2086 # $input is an option and its value
  "$loadgen" --url "ws://127.0.0.1:$port/api/chat" --calls "$calls" --ramp 6 --seconds 20 --tail 3 $input \
    --json "$tmp/tick.json" --server-pid "s=$spid" -q > "$tmp/tick.txt" 2>&1
  status=$?
  ppx_pressure_end
  [ "$status" -le 1 ] || { cat "$tmp/tick.txt"; fail "personaplex-loadgen exited $status"; }
  metrics=$(ppx_get "http://127.0.0.1:$port/metrics") || fail "/metrics"
  ppx_stop
  sed -n '/^outcomes/p;/^frame latency, all/p;/^result/p' "$tmp/tick.txt"
  verdict=$(python3 - "$tmp/tick.json" "$calls" "$metrics" "$realtime_calls" <<'PYEOF'
import json, math, sys
j = json.load(open(sys.argv[1]))
calls, metrics, realtime = int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
res = j["result"]
ok, refused, failed = res["ok"], res["refused"], res["failed"]
codes = sorted(set(c["http_status"] for c in j["per_call"] if c["reason"] != "ok"))
print("%d calls offered: %d served, %d refused (HTTP %s), %d failed; rules broken: %s" %
      (calls, ok, refused, codes, failed, res["rules_broken"] or "none"), file=sys.stderr)
lines = [l for l in metrics.splitlines() if l.startswith('personaplex_calls_refused_total{protocol="chat"')]
n = sum(int(l.split()[1]) for l in lines if 'reason="full"' in l or 'reason="over_budget"' in l)
dropped = [float(l.split()[1]) for l in metrics.splitlines()
           if l.startswith('personaplex_input_dropped_seconds_total{protocol="chat"}')]
low = math.ceil(0.6 * realtime)
if not low <= ok <= realtime:
    print("served %d, not %d to %d" % (ok, low, realtime))
elif refused != calls - ok or failed != 0 or codes not in ([], [503]):
    print("refused %d, failed %d, HTTP %s" % (refused, failed, codes))
elif n != refused:
    print("/metrics counts %d refusals (full, over_budget), the loadgen %d" % (n, refused))
elif "dropped" in res["rules_broken"] or dropped != [0.0]:
    print("audio dropped: %s; /metrics %s s" % (res["rules_broken"], dropped))
else:
    print("ok %d %d" % (ok, refused))
PYEOF
)
  case $verdict in ok*) break ;; esac
  ppx_again "$verdict" && continue
  fail "admission by the tick, $calls calls offered: $verdict (CPU pressure $cpu_pressure %)"
done
set -- $verdict
echo "1. $calls calls offered on the ${emulate} ms tick: $2 served, $3 refused with 503, nothing dropped (run $attempt)"

# 1b. --pacing-rise (on the CPU only when asked): /health says a new call waits for the tick's predicted growth to
# the capacity, (7 - 1) x 4 ms on the emulated tick, more with the CPU's own work in the measurement
start --pacing-rise
health=$(ppx_get "http://127.0.0.1:$port/health") || fail "/health"
ppx_stop
python3 - "$health" "$per_row" "$budget_calls" <<'PYEOF' || fail "--pacing-rise: /health says no rise: $health"
import json, sys
h, per_row, want = json.loads(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])
assert h["pacing_rise"] is True and h["pacing_rise_ms"] >= 0.5 * per_row * (want - 1), h
print("1b. --pacing-rise: a new call waits %.1f ms for the tick's rise" % h["pacing_rise_ms"])
PYEOF

# 2. admission by memory alone: MEMORY_CALLS calls on a 100 ms tick; the loadgen's verdict is FAIL
start --admission memory --max-sessions "$memory_calls"
# shellcheck disable=SC2086
"$loadgen" --url "ws://127.0.0.1:$port/api/chat" --calls "$memory_calls" --ramp 3 --seconds 15 --tail 3 $input \
  --json "$tmp/memory.json" -q > "$tmp/memory.txt" 2>&1
status=$?
ppx_stop
sed -n '/^outcomes/p;/^frame latency, all/p;/^result/p' "$tmp/memory.txt"
[ "$status" = 1 ] || { cat "$tmp/memory.txt"; fail "$memory_calls calls on a 100 ms tick: personaplex-loadgen exited $status, not 1"; }
grep -q '^result: FAIL .*rules broken: .*dropped: ' "$tmp/memory.txt" ||
  fail "$memory_calls calls on a 100 ms tick: the verdict does not name the audio dropped"
python3 - "$tmp/memory.json" "$memory_calls" <<'PYEOF' || fail "admission by memory: not all $memory_calls admitted"
import json, sys
res = json.load(open(sys.argv[1]))["result"]
print("2. --admission memory, %s calls: %d admitted (ok %d, failed %d), passed %s: %s" %
      (sys.argv[2], res["ok"] + res["failed"], res["ok"], res["failed"], res["passed"], res["rules_broken"]))
assert res["refused"] == 0 and not res["passed"], res
PYEOF
