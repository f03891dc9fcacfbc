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
command -v haproxy > /dev/null || { echo "SKIP: haproxy not installed (scripts/install-deps.sh --tests)" >&2; exit 77; }
ppx_name=fleet-admission
# shellcheck source=tests/server/server-script.sh
. "$(dirname "$0")/server/server-script.sh"
run=$tmp/fleet
ppx_cleanup () { [ -f "$run/servers" ] && sh "$fleet_sh" stop "$run" --timeout 10 > /dev/null 2>&1; }
# shellcheck source=pipelines/fleet/fleet-http.sh
. "$src/pipelines/fleet/fleet-http.sh"

# Four free ports in a row: two servers, the balancer, the ops listener.
ppx_free_ports 4
p1=$ports p2=$((ports + 1)) listen=127.0.0.1:$((ports + 2)) ops=127.0.0.1:$((ports + 3))
ppx_make_model

# the two servers: s1 takes 2 calls, s2 3
"$server" --model-dir "$tmp/model" --backend cpu --port "$p1" --max-sessions 2 --admission memory \
  --allowed-origin "http://$listen" > "$tmp/s1.log" 2>&1 &
pids="$pids $!"
"$server" --model-dir "$tmp/model" --backend cpu --port "$p2" --max-sessions 3 --admission memory \
  --allowed-origin "http://$listen" > "$tmp/s2.log" 2>&1 &
pids="$pids $!"
healthy () { [ "$(http_status "http://127.0.0.1:$1/health")" = 200 ]; }
for p in $p1 $p2; do wait_for 60 "the server on port $p to serve" healthy "$p"; done
sh "$fleet_sh" start --servers 0 --remote "s1=127.0.0.1:$p1" --remote "s2=127.0.0.1:$p2" --run-dir "$run" \
  --listen "$listen" --ops "$ops" > "$tmp/start.out" 2> "$tmp/start.err" ||
  { cat "$tmp/start.err" >&2; fail "the fleet did not start"; }

# 1. maxconn from /health
grep -q "^ *server s1 127.0.0.1:$p1 maxconn 2\$" "$run/haproxy.cfg" &&
  grep -q "^ *server s2 127.0.0.1:$p2 maxconn 3\$" "$run/haproxy.cfg" ||
  { grep "server s" "$run/haproxy.cfg" >&2; fail "maxconn is not each server's capacity (2 and 3)"; }
echo "1. $(grep -c 'maxconn [23]$' "$run/haproxy.cfg") servers' maxconn from their /health: $(grep -o 's[12] 127[^ ]* maxconn [0-9]*' "$run/haproxy.cfg" | tr '\n' ';')"

idle () { # every server holds no call, and is UP in HAProxy
  for p in $p1 $p2; do http_body "http://127.0.0.1:$p/health" | grep -q '"sessions" *: *0[,}]' || return 1; done
  [ "$(http_body "http://$ops/stats;csv" | awk -F, '$1 == "personaplex" && $2 ~ /^s[12]$/ && $18 == "UP"' | wc -l)" = 2 ]
}

# 2. 5 calls: all served, 2 and 3
wait_for 15 "the servers to come back idle and UP" idle
"$loadgen" --url "ws://$listen/api/chat" --calls 5 --seconds 6 --join-timeout 30 --json "$tmp/five.json" \
  > "$tmp/five.out" 2>&1 || { cat "$tmp/five.out"; fail "5 calls through HAProxy: not all served"; }
sed -n '/^outcomes/p;/^calls per server/p;/^result/p' "$tmp/five.out"
[ "$(json "$tmp/five.json" 'sorted(j["servers"].items())')" = "[('s1', 2), ('s2', 3)]" ] ||
  fail "5 calls: per server $(json "$tmp/five.json" 'j["servers"]'), expected s1 2 and s2 3"
echo "2. 5 calls through HAProxy: all served, s1 2, s2 3"

# 3. 6 calls: 5 served, the 6th refused with 503
wait_for 15 "the servers to come back idle and UP" idle
"$loadgen" --url "ws://$listen/api/chat" --calls 6 --seconds 6 --join-timeout 30 --expect-refused 1 \
  --json "$tmp/six.json" > "$tmp/six.out" 2>&1 || { cat "$tmp/six.out"; fail "6 calls through HAProxy: not 5 served and 1 refused"; }
sed -n '/^outcomes/p;/^calls per server/p;/^result/p' "$tmp/six.out"
[ "$(json "$tmp/six.json" 'sorted(j["reasons"].items())')" = "[('http-503', 1), ('ok', 5)]" ] ||
  fail "6 calls: outcomes $(json "$tmp/six.json" 'j["reasons"]'), expected 5 ok and one http-503"
echo "3. 6 calls through HAProxy: 5 served, the 6th refused with 503"
