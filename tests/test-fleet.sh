#!/bin/sh
# The fleet on this machine: 3 personaplex-servers (CPU, tiny random model, at most 2 calls each) behind HAProxy,
# started by pipelines/fleet/personaplex-fleet.sh, driven by personaplex-loadgen; everything on 127.0.0.1.
#   1. 7 calls at once: 6 spread 2/2/2 and run to their end, the 7th is refused with HTTP 503; afterwards every
#      server is back UP in HAProxy with no session.
#   2. kill -9 of a server while its 2 calls run: those 2 end with an error (connection-lost) and the other 4
#      run to their end; HAProxy marks it DOWN for not answering (L4) within 3 s (being full, it was DOWN
#      for its 503 already); a call while the other two are full is refused (503);
#      once their calls end, 4 new calls land on the two, none on the dead one.
#   3. SIGTERM of a server (personaplex-fleet.sh restart brought the dead one back first) while each server has
#      a call: /health says 503 and draining at once, new calls go to the others, the draining server's call runs
#      to its end and the server exits.
#   0. a port something answers on already (s2's, a python http.server): start refuses, naming it, and starts nothing.
#   4. a rolling restart of all three (personaplex-fleet.sh restart) and 6 calls spread 2/2/2 again; kill -9 of
#      an idle server (UP): DOWN within 3 s; stop ends every process.
# HAProxy terminates TLS (a self-signed certificate, when openssl is there to make one) and the servers want a
# token: a call without it is refused with 401; a call with the Origin of the balancer's address (a page loaded
# through it) is taken, one from another origin refused (403); each server's /health and /metrics answer on the
# ops listener.
# Bounded: every wait has a limit; about a minute in all. Environment (tests/meson.build): PPX_SOURCE_ROOT,
# PPX_BUILD_ROOT. Exit 77 (skip) without haproxy, python3 or gst-launch-1.0.
set -u
src=${PPX_SOURCE_ROOT:?}
build=${PPX_BUILD_ROOT:?}
fleet_sh=$src/pipelines/fleet/personaplex-fleet.sh
for p in haproxy gst-launch-1.0; do
  command -v "$p" > /dev/null || { echo "SKIP: $p not installed (scripts/install-deps.sh --tests)" >&2; exit 77; }
done
ppx_name=fleet
# shellcheck source=tests/server/server-script.sh
. "$(dirname "$0")/server/server-script.sh"
run=$tmp/fleet
ppx_cleanup () { [ -f "$run/servers" ] && sh "$fleet_sh" stop "$run" --timeout 10 > /dev/null 2>&1; }
# shellcheck source=pipelines/fleet/fleet-http.sh
. "$src/pipelines/fleet/fleet-http.sh"

# Five free ports in a row: three servers, the balancer, the ops listener.
ppx_free_ports 5
listen=127.0.0.1:$((ports + 3)) ops=127.0.0.1:$((ports + 4))
# HAProxy terminates TLS with a self-signed certificate when openssl can make one; the servers want a token
tls= scheme=ws
if command -v openssl > /dev/null &&
   openssl req -x509 -newkey rsa:2048 -nodes -keyout "$tmp/key.pem" -out "$tmp/cert.pem" -days 1 \
     -subj /CN=127.0.0.1 > /dev/null 2>&1; then
  cat "$tmp/cert.pem" "$tmp/key.pem" > "$tmp/fleet.pem"
  tls="--tls-pem $tmp/fleet.pem" scheme=wss
fi
token=fleet-test-token
url=$scheme://$listen

ppx_make_model
# a small tokenizer, so that the random model's text comes out as pieces (and a text prompt can be given)
"$build/tests/webrtc-make-tokenizer" "$tmp/model" > /dev/null || fail "webrtc-make-tokenizer"
# ---- --devices: each server gets --device i; GPU 0 on this machine, or (no GPU, a build without CUDA) a server
# that stops at once naming GPU 0, never one on the CPU ----
dev_run=$tmp/devices
sh "$fleet_sh" start --devices 0 --run-dir "$dev_run" --server "$server" --listen "$listen" --ops "$ops" \
  --base-port "$ports" --start-timeout 60 -- --model-dir "$tmp/model" --max-sessions 1 > /dev/null 2> "$tmp/dev.err"
dev_status=$?
grep -q -- "--device 0 " "$dev_run/s1.sh" || fail "--devices 0: s1.sh is '$(cat "$dev_run/s1.sh")'"
if [ "$dev_status" = 0 ]; then
  http_body "http://127.0.0.1:$ports/health" | grep -q '"device" *: *"cuda:0"' || fail "--devices 0: not on cuda:0"
  sh "$fleet_sh" stop "$dev_run" --timeout 10 > /dev/null 2>&1
else
  grep -q "on GPU 0 (--device 0): " "$dev_run/s1.log" || { cat "$tmp/dev.err" "$dev_run/s1.log" >&2; fail "--devices 0: the server's log does not name GPU 0"; }
  grep -q "s1 did not start" "$tmp/dev.err" || fail "--devices 0: the fleet did not say s1 did not start"
fi
sh "$fleet_sh" config --devices 0,x --run-dir "$dev_run" 2> "$tmp/dev.err" > /dev/null &&
  fail "--devices 0,x was taken"
grep -q "GPU indices" "$tmp/dev.err" || fail "--devices 0,x: '$(cat "$tmp/dev.err")'"
echo "--devices: s1.sh passes --device 0; $( [ "$dev_status" = 0 ] && echo "it served on cuda:0" || echo "the server refused: $(grep -o 'GPU 0 (--device 0): .*' "$dev_run/s1.log" | head -1)")"

# ---- a port something answers on already (s2's): the fleet refuses to start rather than measure that one ----
python3 -m http.server "$((ports + 1))" --bind 127.0.0.1 > /dev/null 2>&1 &
squatter=$!
i=0
while [ "$(http_status "http://127.0.0.1:$((ports + 1))/")" = 000 ] && [ $i -lt 50 ]; do sleep 0.1; i=$((i + 1)); done
sh "$fleet_sh" start --servers 3 --run-dir "$tmp/busy" --server "$server" --listen "$listen" --ops "$ops" \
  --base-port "$ports" --start-timeout 20 -- --model-dir "$tmp/model" --backend cpu > /dev/null 2> "$tmp/busy.err" &&
  { kill "$squatter"; sh "$fleet_sh" stop "$tmp/busy" --timeout 10 > /dev/null 2>&1; fail "a fleet started on a port in use"; }
kill "$squatter"
wait "$squatter" 2> /dev/null
grep -q "s2: 127.0.0.1:$((ports + 1)) answers already" "$tmp/busy.err" || fail "port in use: '$(cat "$tmp/busy.err")'"
[ ! -f "$tmp/busy/s1.pid" ] || fail "port in use: s1 was started anyway"
echo "a port in use: $(cat "$tmp/busy.err")"

# shellcheck disable=SC2086 # $tls: an option and its value, or nothing
sh "$fleet_sh" start --servers 3 --run-dir "$run" --server "$server" --listen "$listen" --ops "$ops" $tls \
  --base-port "$ports" --start-timeout 60 -- --model-dir "$tmp/model" --backend cpu --max-sessions 2 --admission memory \
  --drain-timeout 30 --auth-token "$token" > "$tmp/start.out" 2> "$tmp/start.err" || { cat "$tmp/start.err" >&2; fail "the fleet did not start"; }
grep -q "^$url/api/chat $run\$" "$tmp/start.out" || fail "start printed '$(cat "$tmp/start.out")'"

pid_of () { cat "$run/$1.pid"; }
alive () { kill -0 "$1" 2> /dev/null; }
# haproxy_state NAME: its status and last check (UP L7OK, DOWN L7STS for a 503, DOWN L4CON for a refused
# connection, ...: the stats page's CSV)
haproxy_state () { http_body "http://$ops/stats;csv" | awk -F, -v n="$1" '$1 == "personaplex" && $2 == n {sub(/^\* /, "", $37); print $18, $37}'; }
# DOWN because it does not answer at all (a full server is DOWN already, by its 503)
is_dead () { case $(haproxy_state "$1") in "DOWN L4"*) return 0 ;; esac; return 1; }
gone () { ! alive "$1"; }
# kill_and_time NAME: kill -9 the server, wait (3 s at most) until HAProxy sees it dead; the seconds in $took
kill_and_time () {
  t0=$(date +%s.%N)
  kill -9 "$(pid_of "$1")"
  wait_for 3 "HAProxy to mark $1 DOWN for not answering after kill -9" is_dead "$1"
  took=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }')
}
all_up () { for s in "$@"; do case $(haproxy_state "$s") in UP*) ;; *) return 1 ;; esac; done; }
sessions_are () { # NAME N: the server's /health says N sessions
  http_body "http://$(awk -v n="$1" '$1 == n {print $2 ":" $3}' "$run/servers")/health" | grep -q "\"sessions\" *: *$2[,}]"
}
# loadgen NAME ARGS...: runs a load, the table in $tmp/NAME.out, the JSON in $tmp/NAME.json, its status in $status
loadgen () {
  name=$1
  shift
  "$loadgen" --url "$url" ${tls:+--insecure} --auth-token "$token" --json "$tmp/$name.json" --join-timeout 30 "$@" \
    > "$tmp/$name.out" 2> "$tmp/$name.err"
  status=$?
}
expect_run () { # NAME: the loadgen passed (exactly the expected refusals and failures)
  [ "$status" = 0 ] || { cat "$tmp/$1.out" "$tmp/$1.err" >&2; fail "$1: personaplex-loadgen exited $status"; }
}

# ---- 0. through TLS (when there is a certificate) with the token; without it: 401, and no model time ----
wait_for 10 "every server UP" all_up s1 s2 s3
"$loadgen" --url "$url" ${tls:+--insecure} --calls 1 --seconds 1 --expect-failed 1 --json "$tmp/no-token.json" \
  > "$tmp/no-token.out" 2>&1 || { cat "$tmp/no-token.out" >&2; fail "a call without the token was not refused"; }
[ "$(json "$tmp/no-token.json" 'j["per_call"][0]["reason"]')" = http-401 ] ||
  fail "a call without the token ended $(json "$tmp/no-token.json" 'j["per_call"][0]["reason"]'), expected http-401"
# a web page's call (an Origin header): from the balancer's own origin it is taken, from another one refused
page_origin=http://$listen
[ -z "$tls" ] || page_origin=https://$listen
loadgen page --calls 1 --seconds 1 --origin "$page_origin"
expect_run page
loadgen foreign-page --calls 1 --seconds 1 --origin http://elsewhere.example --expect-failed 1
expect_run foreign-page
[ "$(json "$tmp/foreign-page.json" 'j["per_call"][0]["reason"]')" = http-403 ] ||
  fail "a call from a foreign origin ended $(json "$tmp/foreign-page.json" 'j["per_call"][0]["reason"]'), expected http-403"
[ "$(http_status "http://$ops/servers/s1/health")" = 200 ] || fail "s1's /health is not reachable through the ops listener"
[ "$(http_status "http://$ops/servers/s1/metrics")" = 401 ] || fail "s1's /metrics through the ops listener without the token: not 401"

# ---- 1. spread 2/2/2, the 7th refused ----
loadgen spread --calls 7 --seconds 4 --expect-refused 1 --text-prompt "You answer questions about trains." --seed 7
expect_run spread
cat "$tmp/spread.out"
[ "$(json "$tmp/spread.json" 'sorted(j["servers"].items())')" = "[('s1', 2), ('s2', 2), ('s3', 2)]" ] ||
  fail "calls per server: $(json "$tmp/spread.json" 'j["servers"]'), expected 2/2/2"
[ "$(json "$tmp/spread.json" 'sorted(j["reasons"].items())')" = "[('http-503', 1), ('ok', 6)]" ] ||
  fail "outcomes $(json "$tmp/spread.json" 'j["reasons"]'), expected 6 ok and one 503"
[ "$(json "$tmp/spread.json" 'min(c["frames_answered"] for c in j["per_call"] if c["reason"] == "ok")')" -ge 45 ] ||
  fail "an ok call was answered less than 45 of its 50 frames"
[ "$(json "$tmp/spread.json" 'sum(c["text_pieces"] for c in j["per_call"])')" -gt 0 ] || fail "no text pieces arrived"
wait_for 10 "every server UP again after the calls" all_up s1 s2 s3
for s in s1 s2 s3; do sessions_are "$s" 0 || fail "$s still has sessions after the calls"; done

# ---- 2. kill -9 ----
loadgen kill --calls 6 --seconds 12 --expect-failed 2 &
kill_load=$!
for s in s1 s2 s3; do wait_for 20 "$s to hold 2 calls" sessions_are "$s" 2; done
sleep 1
kill_and_time s2
down_s=$took
echo "kill -9 s2: HAProxy marked it DOWN ($(haproxy_state s2)) after $down_s s"
# while s1 and s3 are full and s2 is dead, a call finds no room
loadgen full --calls 1 --seconds 2 --expect-refused 1
expect_run full
wait "$kill_load"
status=$?
expect_run kill
cat "$tmp/kill.out"
[ "$(json "$tmp/kill.json" 'sorted((c["server"], c["reason"]) for c in j["per_call"] if c["reason"] != "ok")')" = \
  "[('s2', 'connection-lost'), ('s2', 'connection-lost')]" ] ||
  fail "the failed calls: $(json "$tmp/kill.json" '[(c["server"], c["reason"]) for c in j["per_call"]]'), expected s2's two, connection-lost"
# the loadgen's figures by server: the killed one's calls failed, the others' ended ok
[ "$(json "$tmp/kill.json" 'sorted((k, v["calls"], v["ok"], v["failed"]) for k, v in j["per_server"].items())')" = \
  "[('s1', 2, 2, 0), ('s2', 2, 0, 2), ('s3', 2, 2, 0)]" ] ||
  fail "per server: $(json "$tmp/kill.json" 'j["per_server"]'), expected s2's 2 calls failed and the others' ok"
grep -q '^  s1: 2 calls, ok 2, failed 0; join p50 .* ms; frame latency p50 .* ms; underruns [0-9]* in all' "$tmp/kill.out" ||
  fail "no per-server line for s1 in the loadgen's summary"
wait_for 10 "s1 and s3 UP with room" all_up s1 s3
# (a short WAV, looped to the call's 3 s)
gst-launch-1.0 -q audiotestsrc num-buffers=15 samplesperbuffer=4800 wave=sine freq=220 ! \
  audio/x-raw,rate=48000,channels=2 ! wavenc ! filesink location="$tmp/input.wav" || fail "making a WAV"
loadgen after-kill --calls 4 --seconds 3 --input "$tmp/input.wav"
expect_run after-kill
[ "$(json "$tmp/after-kill.json" 'min(c["frames_sent"] for c in j["per_call"])')" = 37 ] ||
  fail "a call of 3 s of a looped WAV sent $(json "$tmp/after-kill.json" '[c["frames_sent"] for c in j["per_call"]]') frames, expected 37"
[ "$(json "$tmp/after-kill.json" 'sorted(j["servers"].items())')" = "[('s1', 2), ('s3', 2)]" ] ||
  fail "after the kill, calls per server: $(json "$tmp/after-kill.json" 'j["servers"]'), expected s1 2 and s3 2"

# ---- 3. SIGTERM: drain ----
sh "$fleet_sh" restart "$run" s2 > "$tmp/restart-s2.log" 2>&1 || { cat "$tmp/restart-s2.log" >&2; fail "restart s2"; }
wait_for 10 "every server UP" all_up s1 s2 s3
loadgen drain --calls 3 --seconds 8 &
drain_load=$!
for s in s1 s2 s3; do wait_for 20 "$s to hold a call" sessions_are "$s" 1; done
draining=$(pid_of s2)
kill -TERM "$draining"
sleep 0.3
health=$(http_body "http://$(awk '$1 == "s2" {print $2 ":" $3}' "$run/servers")/health")
code=$(http_status "http://$(awk '$1 == "s2" {print $2 ":" $3}' "$run/servers")/health")
[ "$code" = 503 ] || fail "/health of the draining server answered $code, expected 503"
echo "$health" | grep -q '"draining" *: *true' || fail "/health of the draining server: $health"
loadgen during-drain --calls 2 --seconds 3
expect_run during-drain
[ "$(json "$tmp/during-drain.json" 'sorted(j["servers"].items())')" = "[('s1', 1), ('s3', 1)]" ] ||
  fail "during the drain, calls per server: $(json "$tmp/during-drain.json" 'j["servers"]'), expected s1 1 and s3 1"
wait "$drain_load"
status=$?
expect_run drain
[ "$(json "$tmp/drain.json" 'j["reasons"]')" = "{'ok': 3}" ] ||
  fail "the calls open at SIGTERM: $(json "$tmp/drain.json" 'j["reasons"]'), expected all 3 ok (drained)"
wait_for 10 "the drained server to exit" gone "$draining"

# ---- 4. rolling restart, then the spread again ----
sh "$fleet_sh" restart "$run" > "$tmp/rolling.log" 2>&1 || { cat "$tmp/rolling.log" >&2; fail "rolling restart"; }
[ "$(grep -c ': back (pid' "$tmp/rolling.log")" = 3 ] || { cat "$tmp/rolling.log" >&2; fail "not every server came back"; }
wait_for 10 "every server UP after the rolling restart" all_up s1 s2 s3
loadgen again --calls 6 --seconds 2 --ramp 1
expect_run again
[ "$(json "$tmp/again.json" 'sorted(j["servers"].items())')" = "[('s1', 2), ('s2', 2), ('s3', 2)]" ] ||
  fail "after the rolling restart, calls per server: $(json "$tmp/again.json" 'j["servers"]')"
# an idle server (UP, with room) that dies: DOWN after the failed check and a fast re-check
wait_for 10 "every server UP after the calls" all_up s1 s2 s3
kill_and_time s3
idle_down_s=$took
echo "kill -9 of the idle s3: HAProxy marked it DOWN ($(haproxy_state s3)) after $idle_down_s s"
stopped="$(pid_of s1) $(pid_of s2) $(cat "$run/haproxy.pid")"
sh "$fleet_sh" stop "$run" --timeout 20 > /dev/null 2>&1 || fail "stop"
for p in $stopped; do alive "$p" && fail "pid $p still runs after stop"; done
echo "fleet: spread 2/2/2 with one 503; kill -9: 2 calls lost, DOWN after $down_s s (an idle one after" \
     "$idle_down_s s), new calls on the others; drain: the call finished, new calls elsewhere; rolling restart: 3 back"
