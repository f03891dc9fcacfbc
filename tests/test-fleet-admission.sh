#!/bin/sh
# The fleet routes around a full server (issue 27; docs/fleet.md): two personaplex-servers on this machine (CPU,
# tiny random model) that take 2 and 3 calls (--max-sessions; --admission memory, so that this shared machine's
# load does not move their capacity), HAProxy in front started by pipelines/fleet/personaplex-fleet.sh with the
# two as --remote servers; everything on 127.0.0.1.
#   1. the configuration's maxconn of each server is the capacity its /health says (2 and 3);
#   2. 5 calls at once through HAProxy: all 5 served, 2 by s1 and 3 by s2;
#   3. 6 calls at once: 5 served, the 6th refused with HTTP 503.
# Bounded: every wait has a limit; about 40 s. Environment (tests/meson.build): PPX_SOURCE_ROOT, PPX_BUILD_ROOT.
# Exit 77 (skip) without haproxy or python3.
set -u
src=${PPX_SOURCE_ROOT:?}
build=${PPX_BUILD_ROOT:?}
fleet_sh=$src/pipelines/fleet/personaplex-fleet.sh
server=$build/pipelines/server/personaplex-server
loadgen=$build/tools/personaplex-loadgen
for p in haproxy python3; do
  command -v "$p" > /dev/null || { echo "SKIP: $p not installed (scripts/install-deps.sh --tests)" >&2; exit 77; }
done
tmp=$(mktemp -d "${TMPDIR:-/tmp}/ppx-fleet-admission-XXXXXX")
run=$tmp/fleet
pids=
finish () {
  [ -f "$run/servers" ] && sh "$fleet_sh" stop "$run" --timeout 10 > /dev/null 2>&1
  for p in $pids; do kill "$p" 2> /dev/null && wait "$p" 2> /dev/null; done
  rm -rf "$tmp"
}
trap finish EXIT
trap 'exit 1' INT TERM
fail () {
  echo "FAIL: $*" >&2
  for f in "$tmp"/*.log "$run"/*.log; do [ -f "$f" ] && { echo "---- $f" >&2; tail -20 "$f" >&2; }; done
  exit 1
}
# shellcheck source=pipelines/fleet/fleet-http.sh
. "$src/pipelines/fleet/fleet-http.sh"
export GST_PLUGIN_PATH_1_0="$build/gst" OMP_NUM_THREADS=1 OMP_WAIT_POLICY=PASSIVE

# Four free ports in a row: two servers, the balancer, the ops listener.
ports=$(python3 - <<'PYEOF'
import random, socket
for _ in range(200):
    base = random.randrange(20000, 60000)
    try:
        socks = []
        for p in range(base, base + 4):
            s = socket.socket(); s.bind(("127.0.0.1", p)); socks.append(s)
        print(base); break
    except OSError:
        pass
    finally:
        for s in socks: s.close()
PYEOF
)
[ -n "$ports" ] || fail "no free ports"
p1=$ports p2=$((ports + 1)) listen=127.0.0.1:$((ports + 2)) ops=127.0.0.1:$((ports + 3))
"$build/tools/personaplex-make-model" --preset tiny --output-dir "$tmp/model" > /dev/null || fail "personaplex-make-model"

# the two servers: s1 takes 2 calls, s2 3
"$server" --model-dir "$tmp/model" --backend cpu --port "$p1" --max-sessions 2 --admission memory \
  --allowed-origin "http://$listen" > "$tmp/s1.log" 2>&1 &
pids="$pids $!"
"$server" --model-dir "$tmp/model" --backend cpu --port "$p2" --max-sessions 3 --admission memory \
  --allowed-origin "http://$listen" > "$tmp/s2.log" 2>&1 &
pids="$pids $!"
for p in $p1 $p2; do
  i=0
  until [ "$(http_status "http://127.0.0.1:$p/health")" = 200 ]; do
    i=$((i + 1))
    [ $i -le 300 ] || fail "the server on port $p did not serve within 60 s"
    sleep 0.2
  done
done
sh "$fleet_sh" start --servers 0 --remote "s1=127.0.0.1:$p1" --remote "s2=127.0.0.1:$p2" --run-dir "$run" \
  --listen "$listen" --ops "$ops" > "$tmp/start.out" 2> "$tmp/start.err" ||
  { cat "$tmp/start.err" >&2; fail "the fleet did not start"; }

# 1. maxconn from /health
grep -q "^ *server s1 127.0.0.1:$p1 maxconn 2\$" "$run/haproxy.cfg" &&
  grep -q "^ *server s2 127.0.0.1:$p2 maxconn 3\$" "$run/haproxy.cfg" ||
  { grep "server s" "$run/haproxy.cfg" >&2; fail "maxconn is not each server's capacity (2 and 3)"; }
echo "1. $(grep -c 'maxconn [23]$' "$run/haproxy.cfg") servers' maxconn from their /health: $(grep -o 's[12] 127[^ ]* maxconn [0-9]*' "$run/haproxy.cfg" | tr '\n' ';')"

json () { python3 -c "import json, sys; j = json.load(open(sys.argv[1])); print($2)" "$1"; }
idle () { # every server holds no call, and is UP in HAProxy
  for p in $p1 $p2; do http_body "http://127.0.0.1:$p/health" | grep -q '"sessions" *: *0[,}]' || return 1; done
  [ "$(http_body "http://$ops/stats;csv" | awk -F, '$1 == "personaplex" && $2 ~ /^s[12]$/ && $18 == "UP"' | wc -l)" = 2 ]
}
wait_idle () {
  i=0
  until idle; do i=$((i + 1)); [ $i -le 150 ] || fail "the servers did not come back idle and UP within 15 s"; sleep 0.1; done
}

# 2. 5 calls: all served, 2 and 3
wait_idle
"$loadgen" --url "ws://$listen/api/chat" --calls 5 --seconds 6 --join-timeout 30 --json "$tmp/five.json" \
  > "$tmp/five.out" 2>&1 || { cat "$tmp/five.out"; fail "5 calls through HAProxy: not all served"; }
sed -n '/^outcomes/p;/^calls per server/p;/^result/p' "$tmp/five.out"
[ "$(json "$tmp/five.json" 'sorted(j["servers"].items())')" = "[('s1', 2), ('s2', 3)]" ] ||
  fail "5 calls: per server $(json "$tmp/five.json" 'j["servers"]'), expected s1 2 and s2 3"
echo "2. 5 calls through HAProxy: all served, s1 2, s2 3"

# 3. 6 calls: 5 served, the 6th refused with 503
wait_idle
"$loadgen" --url "ws://$listen/api/chat" --calls 6 --seconds 6 --join-timeout 30 --expect-refused 1 \
  --json "$tmp/six.json" > "$tmp/six.out" 2>&1 || { cat "$tmp/six.out"; fail "6 calls through HAProxy: not 5 served and 1 refused"; }
sed -n '/^outcomes/p;/^calls per server/p;/^result/p' "$tmp/six.out"
[ "$(json "$tmp/six.json" 'sorted(j["reasons"].items())')" = "[('http-503', 1), ('ok', 5)]" ] ||
  fail "6 calls: outcomes $(json "$tmp/six.json" 'j["reasons"]'), expected 5 ok and one http-503"
echo "3. 6 calls through HAProxy: 5 served, the 6th refused with 503"
