#!/bin/sh
# Calls whose client clocks drift against the server's, on the CPU with the emulated GPU tick (docs/server.md,
# "Clocks that drift"): personaplex-server on the tiny model, PPX_TICK_EMULATE=$EMULATE, GST_DEBUG=personaplexticker:5,
# and personaplex-loadgen --clock-ppm $PPM; prints the ticks by stretch (scripts/drift/ticks-summary.py) and each
# call's figures at the reference player.
#   scripts/drift/drift-measure.sh BUILD OUT_DIR [CALLS SECONDS PPM EMULATE SERVER_ARGS...]
# defaults: 8 calls, 45 s, --clock-ppm 0,2000,0,-2000, PPX_TICK_EMULATE=20,3. Bounded: the loadgen's own limits.
set -u
build=$(cd "$1" && pwd)
out=$2
calls=${3:-8}
seconds=${4:-45}
ppm=${5:-0,2000,0,-2000}
emulate=${6:-20,3}
[ $# -gt 6 ] && shift 6 || shift $#
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
export GST_PLUGIN_PATH_1_0="$build/gst" OMP_NUM_THREADS=1 OMP_WAIT_POLICY=PASSIVE
[ -d "$out/model" ] || "$build/tools/personaplex-make-model" --preset tiny --output-dir "$out/model" > /dev/null
input=
f="$here/../../../shared/data/input_assistant.wav"
[ -f "$f" ] && input="--input $f"
GST_DEBUG=personaplexticker:${TICKER_LEVEL:-5} GST_DEBUG_NO_COLOR=1 PPX_TICK_EMULATE=$emulate \
  "$build/pipelines/server/personaplex-server" --model-dir "$out/model" --backend cpu --port 0 --admission memory \
  "$@" > "$out/server.log" 2>&1 &
spid=$!
trap 'kill $spid 2> /dev/null' EXIT
i=0
until port=$(sed -n 's|.*serving http://127\.0\.0\.1:\([0-9]*\)/.*|\1|p' "$out/server.log") && [ -n "$port" ]; do
  i=$((i + 1)); [ $i -lt 600 ] || { echo "no server" >&2; exit 1; }; sleep 0.1
done
# shellcheck disable=SC2086
"$build/tools/personaplex-loadgen" --url "ws://127.0.0.1:$port/api/chat" --calls "$calls" --ramp 2 \
  --seconds "$seconds" --tail 3 $input --clock-ppm "$ppm" --json "$out/calls.json" -q > "$out/calls.txt" 2>&1
echo "loadgen exit $?"
kill $spid; wait $spid 2> /dev/null
python3 "$here/ticks-summary.py" "$out/server.log" 10 --calls "$calls"
python3 - "$out/calls.json" <<'PY'
import json, sys
for c in json.load(open(sys.argv[1]))["per_call"]:
    p = c.get("playout") or {}
    print("call %d %+6.0f ppm: %s, answered %.2f/%.2f s, latency p50 first quarter %.0f last %.0f, p99 %.0f ms; "
          "player missed %.1f ms, dropped %.1f ms, %d re-buffers" % (
              c["index"], c["clock_ppm"], c["reason"], c["answered_s"], c["sent_s"],
              c["latency_first_quarter_p50_ms"] or -1, c["latency_last_quarter_p50_ms"] or -1,
              c["latency_p99_ms"] or -1, p.get("missed_ms", -1), p.get("dropped_ms", -1), p.get("rebuffers", -1)))
PY
