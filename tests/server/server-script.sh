# Sourced by the shell tests that run personaplex-server on 127.0.0.1 (tests/test-server-realtime.sh,
# test-server-admission.sh, test-fleet.sh, test-fleet-admission.sh, test-fleet-monitoring.sh): their common
# start, wait and clean-up. Before sourcing, set build (the build tree) and ppx_name (the folder's name). Sourcing
# checks for python3 (exit 77, the skip, without it), makes the folder $tmp, exports the build's plugin path and one
# passive OpenMP thread a server, and sets the traps: at exit ppx_cleanup runs when the test defines it, the server
# in $spid and every process in $pids are ended, and $tmp is removed.
#   fail MESSAGE                   FAIL: MESSAGE and the last 20 lines of each log in $tmp and $run; exit 1
#   wait_for LIMIT_S WHAT CMD...   polls CMD every 0.1 s until it succeeds; fails after LIMIT_S seconds
#   ppx_make_model                 the tiny random model in $tmp/model
#   ppx_input                      $input: --input and the speech clip of $PPX_DATA_DIR or ../shared/data, or nothing
#   ppx_serve LOG ARGS...          a server on a free port (--port 0) of the model in $tmp/model on the CPU, on the
#                                  emulated tick $emulate when set (PPX_TICK_EMULATE); its port in $port, pid in $spid
#   ppx_stop                       ends the server of $spid
#   ppx_get URL                    the body of a GET (of any HTTP status), 10 s at most
#   ppx_free_ports N               $ports: the first of N free ports in a row of 127.0.0.1
#   json FILE EXPR                 a Python expression over a JSON file (j)
#   ppx_pressure_begin, ppx_pressure_end
#                                  $cpu_pressure: the share (%) of the time between the two that a task waited for a
#                                  CPU (/proc/pressure/cpu; 0 where there is none)
#   ppx_again VERDICT              in a loop of attempts ($attempt, from 1): a failed run is taken again while the CPU
#                                  pressure was over 40 % and fewer than 3 runs were made (it says so)
server=$build/pipelines/server/personaplex-server
loadgen=$build/tools/personaplex-loadgen
command -v python3 > /dev/null || { echo "SKIP: python3 not installed" >&2; exit 77; }
spid=
pids=
run=
ppx_finish () {
  command -v ppx_cleanup > /dev/null && ppx_cleanup
  [ -n "$spid" ] && kill "$spid" 2> /dev/null && wait "$spid" 2> /dev/null
  for p in $pids; do kill "$p" 2> /dev/null && wait "$p" 2> /dev/null; done
  rm -rf "$tmp"
}
fail () {
  echo "FAIL: $*" >&2
  for f in "$tmp"/*.log ${run:+"$run"/*.log}; do [ -f "$f" ] && { echo "---- $f" >&2; tail -20 "$f" >&2; }; done
  exit 1
}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/ppx-${ppx_name:-server}-test-XXXXXX")
trap ppx_finish EXIT
trap 'exit 1' INT TERM
export GST_PLUGIN_PATH_1_0="$build/gst" OMP_NUM_THREADS=1 OMP_WAIT_POLICY=PASSIVE

wait_for () {
  ppx_limit=$1 ppx_what=$2
  shift 2
  ppx_i=0
  until "$@"; do
    ppx_i=$((ppx_i + 1))
    [ "$ppx_i" -le $((ppx_limit * 10)) ] || fail "waited $ppx_limit s for $ppx_what"
    sleep 0.1
  done
}

ppx_make_model () {
  "$build/tools/personaplex-make-model" --preset tiny --output-dir "$tmp/model" > /dev/null || fail "personaplex-make-model"
}

ppx_input () {
  input=
  for f in "${PPX_DATA_DIR:-}/input_assistant.wav" "$(dirname "$0")/../../shared/data/input_assistant.wav"; do
    [ -f "$f" ] && { input="--input $f"; break; }
  done
}

ppx_served () { # LOG: the port the server says it serves on, in $port
  port=$(sed -n 's|.*serving http://127\.0\.0\.1:\([0-9]*\)/.*|\1|p' "$1")
  [ -n "$port" ] && return 0
  kill -0 "$spid" 2> /dev/null || fail "the server exited"
  return 1
}
ppx_serve () {
  ppx_log=$1
  shift
  PPX_TICK_EMULATE=${emulate:-} "$server" --model-dir "$tmp/model" --backend cpu --port 0 "$@" > "$ppx_log" 2>&1 &
  spid=$!
  wait_for 60 "the server to serve" ppx_served "$ppx_log"
}
ppx_stop () { kill "$spid"; wait "$spid"; spid=; }

ppx_get () {
  python3 -c 'import sys, urllib.request, urllib.error
try: print(urllib.request.urlopen(sys.argv[1], timeout=10).read().decode())
except urllib.error.HTTPError as e: print(e.read().decode())' "$1"
}

# shellcheck source=tests/server/free-ports.sh
. "$(dirname "$0")/server/free-ports.sh"

json () { python3 -c "import json, sys; j = json.load(open(sys.argv[1])); print($2)" "$1"; }

ppx_pressure () { awk '/^some/ { sub("total=", "", $5); print $5 }' /proc/pressure/cpu 2> /dev/null || echo 0; }
ppx_pressure_begin () { ppx_p0=$(ppx_pressure) ppx_t0=$(date +%s%N); }
ppx_pressure_end () {
  cpu_pressure=$(awk -v a="$ppx_p0" -v b="$(ppx_pressure)" -v t0="$ppx_t0" -v t1="$(date +%s%N)" \
    'BEGIN { printf "%.0f", 100 * (b - a) / ((t1 - t0) / 1000) }')
}
ppx_again () {
  [ "$cpu_pressure" -gt 40 ] && [ "$attempt" -lt 3 ] || return 1
  echo "NOTE: run $attempt failed ($1) at CPU pressure $cpu_pressure %: taken again"
  attempt=$((attempt + 1))
}
