#!/bin/sh
# Calls at scale on a GPU machine (docs/fleet.md, "Live runs"): K personaplex-servers (one per GPU, or K sharing
# the GPUs there are) behind HAProxy (personaplex-fleet.sh), random weights made first, and personaplex-loadgen
# over 127.0.0.1: N calls joining over R seconds, S seconds each, straight to the one server or through HAProxy;
# optionally `kill -9` of one server at a given second. Runs from a fleet pack (fleet-pack.sh) on a machine
# without GStreamer or HAProxy, or from a build tree with the system's.
#
#   pipelines/fleet/fleet-live.sh [--pack DIR | --build DIR] (--model-dir DIR | --make-model PRESET:FORMAT)
#       [--model-root DIR] [--servers K] [--haproxy] [--calls 64] [--ramp 30] [--seconds 300]
#       [--kill-at S] [--kill NAME] [--stall-at S --stall-ms MS] [--backend cuda] [--quantization int4] [--kv-cache-format fp8]
#       [--max-sessions N] [--server-option OPT]... [--ports BASE] [--out DIR] [--check] [-- MORE personaplex-loadgen OPTIONS]
#
#   --make-model P:F  full:int4 (6.2 GB, the issue's), full:int8, full:bf16, tiny:bf16 (pipelines/live-run.sh)
#   --servers K       servers on this machine (default 1); --haproxy: the calls go through HAProxy (always with
#                     K > 1; with one server they go straight to it unless --haproxy)
#   --kill-at S       kill -9 one server S seconds after the loadgen starts (it first encodes its audio: about
#                     8 s for 300 s on 2 cores) (default: none); --kill NAME which one (default the last, sK);
#                     HAProxy's time to see it dead (DOWN, check L4...) is measured
#   --stall-at S      stop the servers (SIGSTOP) S seconds after the loadgen starts, for --stall-ms MS (default
#                     300), then SIGCONT: a host that did not run the process (docs/server.md, "After a stall");
#                     repeatable as a list, e.g. --stall-at "20 35"
#   --max-sessions N  each server's calls at most (default: as many as fit, the server decides)
#   --server-option O another option for every server, split at spaces (e.g. "--batch-deadline 5"); repeatable
#   --ports BASE      HAProxy on 127.0.0.1:BASE, its ops listener on BASE+1, the servers from BASE+2 (default:
#                     8080, 8404 and 8090 on): two runs on one machine, or a run beside a server, need their own
#   --check           first the pack's check.sh
#   --keep-logs       also the servers' whole logs, gzipped (NAME.log.gz); GST_DEBUG=personaplexticker:6 puts every
#                     frame's hand-in in them (how late, how far behind), beside every tick
#   after --          e.g. --input speech.wav, --text-prompt "...", --voice-prompt NATF2.pt
# Writes to OUT (default $OUT, else out/fleet-live), 8 files and one a server:
#   summary.txt   the loadgen's table (join time, frame latency and its growth over a call, audio missed and
#                 dropped at the reference web client's player, underruns, text, CPU of the loadgen and of each
#                 server and HAProxy), each server's tick p50/p99 and overruns (/health),
#                 tick p99 from its /metrics histogram, the audio it dropped (the model behind a call), its ticks
#                 (from the ticker's debug lines in its log: a second, rows each, waits), its admission (the tick
#                 measured at start-up, the capacity and the bound that holds, calls refused by reason), GPU memory over the run,
#                 the machine's CPU, the kill and HAProxy's DOWN
#   run.log       everything, with a line per call;  loadgen.json  every call's figures
#   report.html   the run by second in inline SVG (personaplex-loadgen --report): frame latency p50/p99, audio
#                 missed and dropped at the reference player, calls joined and open, each server's tick p99
#   gpu.csv       nvidia-smi every 5 s;  health.log  each server's /health every 10 s
#   stalls.txt    when a 5 ms sleep of a probe took over 25 ms (the machine, or the VM, did not run it): the
#                 seconds of the run (the report's axis) and the gap; the summary counts them, with the CPU steal
#   metrics.txt   each server's /metrics at the end;  servers.log  the servers' and HAProxy's logs (tails)
#   ticks-NAME.txt  every tick of server NAME over the run (time, tick or catch-up, rows, missed, waits, run)
# Exit status: 0 when the run happened (the figures say how it went), 1 when a step failed, 2 for bad options.
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
me='fleet-live.sh' usage_lines=46 rest='loadgen options'
# shellcheck source=pipelines/live-run.sh
. "$root/pipelines/live-run.sh"
servers=1 haproxy=0 calls=64 ramp=30 seconds=300 kill_at= kill_name= stall_at= stall_ms=300
backend=cuda quant=int4 kv=fp8 max_sessions= out=${OUT:-$root/out/fleet-live} extra_server_opts= keep_logs=0 ports=
live_option () {
  case $1 in
    --servers) servers=$2 ;;
    --haproxy) haproxy=1; return 1 ;;
    --keep-logs) keep_logs=1; return 1 ;;
    --ports) ports=$2 ;;
    --calls) calls=$2 ;;
    --ramp) ramp=$2 ;;
    --kill-at) kill_at=$2 ;;
    --kill) kill_name=$2 ;;
    --stall-at) stall_at=$2 ;;
    --stall-ms) stall_ms=$2 ;;
    --kv-cache-format) kv=$2 ;;
    --max-sessions) max_sessions=$2 ;;
    --server-option) extra_server_opts="$extra_server_opts $2" ;;
    *) return 2 ;;
  esac
}
ppx_live_parse "$@"
shift "$ppx_shift"
case $ports in
  '') lb_port=8080 ops_port=8404 base_port=8090 ;;
  *[!0-9]*) echo "fleet-live.sh: --ports '$ports': a port number" >&2; exit 2 ;;
  *) [ "$ports" -ge 1 ] && [ "$((ports + 2 + servers))" -le 65536 ] ||
       { echo "fleet-live.sh: --ports $ports: out of range" >&2; exit 2; }
     lb_port=$ports ops_port=$((ports + 1)) base_port=$((ports + 2)) ;;
esac
die () { echo "fleet-live.sh: $*" >&2; exit "${2:-1}"; }
case $servers in ''|*[!0-9]*|0) die "--servers '$servers': 1 or more" 2 ;; esac
[ "$servers" -gt 1 ] && haproxy=1
[ -z "$kill_at" ] || [ "$haproxy" = 1 ] || die "--kill-at needs the calls to go through HAProxy (--haproxy)" 2
[ -n "$kill_name" ] || kill_name=s$servers
ppx_live_runner build-devpack-fleet pipelines/fleet/fleet-pack.sh bin/personaplex-server \
  pipelines/server/personaplex-server
if [ -n "$pack" ]; then
  fleet_programs="--wrapper $pack/run --server personaplex-server --haproxy haproxy"
else
  export GST_PLUGIN_PATH="$build/gst${GST_PLUGIN_PATH:+:$GST_PLUGIN_PATH}"
  fleet_programs="--server $build/pipelines/server/personaplex-server"
fi
mkdir -p "$out" || exit 1
out=$(cd "$out" && pwd)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/ppx-fleet-live-XXXXXX")
fleet=$tmp/fleet
bg_pids=
cleanup () {
  [ -f "$fleet/servers" ] && sh "$here/personaplex-fleet.sh" stop "$fleet" --timeout 20 > /dev/null 2>&1
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 1' INT TERM
# shellcheck source=pipelines/fleet/fleet-http.sh
. "$here/fleet-http.sh"
summary=$out/summary.txt
say () { echo "$*" | tee -a "$summary"; }

# /proc/stat's busy and total jiffies of the whole machine
machine_cpu () { awk '/^cpu / { busy = $2 + $3 + $4 + $7 + $8; print busy, busy + $5 + $6, $9 + 0 }' /proc/stat; }

# The machine's own stalls: a probe sleeps 5 ms at a time and writes each sleep that took over 25 ms (when, in
# seconds since $1, a `date +%s.%N`, and the gap in ms): a second in which every call lost audio, and the server
# and the loadgen with it, shows here when the whole machine (or the VM it is) stopped.
stall_probe () {
  python3 -c 'import sys, time
t0 = float(sys.argv[1]); prev = time.time()
while True:
    time.sleep(0.005); now = time.time()
    if now - prev > 0.025: print("%.3f %.1f" % (now - t0, 1000 * (now - prev)), flush=True)
    prev = now' "$1"
}

# p99 of every tick histogram in a /metrics text: the smallest bucket bound holding 99 % of the ticks
tick_p99 () {
  awk '/^[a-z_]*tick[a-z_]*_bucket\{/ {
         name = $1; sub(/\{.*/, "", name); sub(/_bucket$/, "", name); le = $1; sub(/.*le="/, "", le); sub(/".*/, "", le)
         n[name]++; bound[name, n[name]] = le; count[name, n[name]] = $2 }
       END { for (m in n) { total = count[m, n[m]]; if (total == 0) continue
               for (i = 1; i <= n[m]; i++) if (count[m, i] >= 0.99 * total) break
               printf "%s: p99 <= %g ms (a bucket bound) of %d ticks\n", m, bound[m, i] * 1000, total } }' "$1"
}

# Every tick of a server, one line each, from its log (the ticker's debug lines, GST_DEBUG=personaplexticker:5; the
# whole run: servers.log keeps only the logs' tails, and a second that cost every call some audio needs the ticks
# around it): its time in seconds since the server's GStreamer start (the debug lines' clock), tick or catch-up,
# rows, members that missed it, how long its oldest frame waited and how long it ran (ms).
tick_lines () {
  echo "# seconds kind rows missed oldest-waited-ms ran-ms (seconds since the server's GStreamer start)"
  awk '/ tick of [0-9]+ rows / {
         for (k = 1; k <= NF; k++) if ($k == "tick" && $(k + 1) == "of") break
         split($1, hms, ":"); kind = ($(k - 1) ~ /catch-up/) ? "catch-up" : "tick"
         printf "%.3f %s %s %s %s %s\n", hms[1] * 3600 + hms[2] * 60 + hms[3], kind, $(k + 2), $(k + 7), $(NF - 4), $(NF - 1) }' "$1"
}

# The engine's ticks, from a server's tick_lines file: how many a second, rows a tick, ticks that ran without a
# member (it missed it), the wait of each tick's oldest frame for the others and the tick's own time; over the
# ticks with at least half the most rows seen (the calls' middle, not their ramps); the catch-up ticks (calls
# behind real time stepped between the grid's ticks, docs/element.md "Behind") are counted apart.
tick_summary () {
  awk '$2 == "tick" { print $1, $3, $4, $5, $6 }' "$1" > "$tmp/ticks"
  [ -s "$tmp/ticks" ] || { echo "no tick lines (GST_DEBUG=personaplexticker:5)"; return; }
  most=$(sort -k2,2n "$tmp/ticks" | tail -1 | cut -d" " -f2)
  awk -v most="$most" '2 * $2 >= most' "$tmp/ticks" > "$tmp/busy"
  pct () { sort -n | awk -v p="$1" '{ v[NR] = $1 } END { i = int(p * NR + 0.999); if (i < 1) i = 1; print v[i] }'; }
  awk -v most="$most" '{ n++; rows += $2; missed += ($3 > 0); if (NR == 1) t0 = $1; t1 = $1 }
       END { printf "%d ticks of %d to %d rows (the calls%s middle), %.2f a second, %.1f rows a tick, %d missed a member",
             n, int((most + 1) / 2), most, "\047", (t1 > t0 ? (n - 1) / (t1 - t0) : 0), rows / n, missed }' "$tmp/busy"
  printf "; oldest frame waited p50 %s p99 %s ms; ran p50 %s p99 %s ms; %s catch-up ticks\n" \
    "$(cut -d" " -f4 "$tmp/busy" | pct 0.5)" "$(cut -d" " -f4 "$tmp/busy" | pct 0.99)" \
    "$(cut -d" " -f5 "$tmp/busy" | pct 0.5)" "$(cut -d" " -f5 "$tmp/busy" | pct 0.99)" \
    "$(awk '$2 == "catch-up"' "$1" | wc -l | tr -d ' ')"
}

main () {
  : > "$summary"
  ppx_live_machine | tee -a "$summary"
  ppx_live_model || return

  # the servers and HAProxy
  gpus=$(nvidia-smi -L 2> /dev/null | grep -c '^GPU' || true)
  if [ -z "$max_sessions" ] && [ "${gpus:-0}" -gt 0 ] && [ "$servers" -gt "$gpus" ]; then
    say "== WARNING: $servers servers share $gpus GPU(s) without --max-sessions: the first to start takes the" \
        "memory of as many calls as fit, the others may get none"
  fi
  server_opts="--model-dir $model --backend $backend --quantization $quant --kv-cache-format $kv"
  [ -z "$max_sessions" ] || server_opts="$server_opts --max-sessions $max_sessions"
  server_opts="$server_opts$extra_server_opts"
  say "== $servers server(s): $server_opts"
  # each tick's line in the servers' logs, summed up after the run
  case ${GST_DEBUG:-} in
    *personaplexticker*) ;;
    *) export GST_DEBUG="${GST_DEBUG:+$GST_DEBUG,}personaplexticker:5" ;;
  esac
  t0=$(date +%s.%N)
  # shellcheck disable=SC2086 # option lists
  sh "$here/personaplex-fleet.sh" start --servers "$servers" --run-dir "$fleet" $fleet_programs \
    --listen "127.0.0.1:$lb_port" --ops "127.0.0.1:$ops_port" --base-port "$base_port" -- $server_opts > "$tmp/fleet.out" || return 1
  say "== the fleet served after $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }') s" \
      "(model load and start-up)"
  url=ws://127.0.0.1:$base_port/api/chat
  [ "$haproxy" = 0 ] || url=ws://127.0.0.1:$lb_port/api/chat
  pids=
  for f in "$fleet"/s*.pid; do pids="$pids --server-pid $(basename "$f" .pid)=$(cat "$f")"; done
  pids="$pids --server-pid haproxy=$(cat "$fleet/haproxy.pid")"
  # each server's /health read by the loadgen each second: the tick p99 of report.html
  health=$(awk '{ printf " --health %s=http://%s:%s/health", $1, $2, $3 }' "$fleet/servers")

  # samplers: GPU memory every 5 s, each server's /health every 10 s
  if command -v nvidia-smi > /dev/null; then
    nvidia-smi --query-gpu=timestamp,index,memory.used,utilization.gpu --format=csv,nounits -l 5 > "$out/gpu.csv" &
    bg_pids="$bg_pids $!"
  fi
  (while :; do
     while read -r name addr port _; do
       echo "$(date +%s) $name $(http_body "http://$addr:$port/health" | tr -d '\n')"
     done < "$fleet/servers"
     sleep 10
   done) > "$out/health.log" 2>&1 &
  bg_pids="$bg_pids $!"
  if [ -n "$kill_at" ]; then
    (sleep "$kill_at"
     victim=$(cat "$fleet/$kill_name.pid")
     t_kill=$(date +%s.%N)
     kill -9 "$victim" && echo "== killed $kill_name (pid $victim) with SIGKILL at $(date -u +%H:%M:%S)"
     i=0
     while [ $i -lt 100 ]; do
       # DOWN for not answering (L4...): a full server is DOWN already, for its 503 (L7STS)
       state=$(http_body "http://127.0.0.1:$ops_port/stats;csv" |
               awk -F, -v n="$kill_name" '$1 == "personaplex" && $2 == n {sub(/^\* /, "", $37); print $18, $37}')
       case $state in "DOWN L4"*) break ;; esac
       sleep 0.1
       i=$((i + 1))
     done
     echo "== HAProxy marked $kill_name ${state:-?} after $(awk -v a="$t_kill" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }') s"
    ) > "$tmp/kill.log" 2>&1 &
    bg_pids="$bg_pids $!"
  fi

  if [ -n "$stall_at" ]; then
    (prev=0
     for at in $stall_at; do
       sleep "$(awk -v a="$at" -v p="$prev" -v m="$stall_ms" 'BEGIN { d = a - p - (p > 0 ? m / 1000 : 0); print (d > 0 ? d : 0) }')"
       prev=$at
       for f in "$fleet"/s*.pid; do kill -STOP "$(cat "$f")"; done
       sleep "$(awk -v m="$stall_ms" 'BEGIN { print m / 1000 }')"
       for f in "$fleet"/s*.pid; do kill -CONT "$(cat "$f")"; done
       echo "== stalled the server(s) $stall_ms ms (SIGSTOP) at $at s of the loadgen ($(date -u +%H:%M:%S))"
     done) > "$tmp/stall.log" 2>&1 &
    bg_pids="$bg_pids $!"
  fi
  cpu0=$(machine_cpu)
  if command -v python3 > /dev/null; then
    echo "# seconds-of-the-run gap-ms: a 5 ms sleep that took over 25 ms" > "$out/stalls.txt"
    stall_probe "$(date +%s.%N)" >> "$out/stalls.txt" 2>&1 &
    bg_pids="$bg_pids $!"
  fi
  say "== personaplex-loadgen: $calls calls to $url joining over $ramp s, $seconds s each"
  # shellcheck disable=SC2086 # option lists
  run_in personaplex-loadgen --url "$url" --calls "$calls" --ramp "$ramp" --seconds "$seconds" \
    --json "$out/loadgen.json" --report "$out/report.html" $pids $health "$@" > "$tmp/loadgen.txt"
  loadgen_status=$?
  cpu1=$(machine_cpu)
  cat "$tmp/loadgen.txt" >> "$summary"
  cat "$tmp/loadgen.txt"
  say "== personaplex-loadgen exit $loadgen_status (1: calls refused or failed that were not expected to, or a rule broken: audio dropped, latency)"
  [ "$loadgen_status" -le 1 ] || return 1
  echo "$cpu0 $cpu1" | awk -v cores="$(getconf _NPROCESSORS_ONLN)" '{ busy = $4 - $1; all = $5 - $2; steal = $6 - $3
    if (all > 0) printf "== the machine: %.1f of %d cores busy during the calls, %.2f %% stolen (/proc/stat)\n",
                        cores * busy / all, cores, 100 * steal / (all + steal) }' |
    tee -a "$summary"
  [ -f "$out/stalls.txt" ] && awk '!/^#/ { n++; if ($2 > most) { most = $2; at = $1 } }
    END { if (n) printf "== the machine stalled: %d sleep(s) of the probe over 25 ms, the longest %.0f ms at %.1f s of the run (stalls.txt)\n", n, most, at
          else print "== the machine stalled: never over 25 ms (stalls.txt)" }' "$out/stalls.txt" | tee -a "$summary"
  [ -z "$kill_at" ] || tee -a "$summary" < "$tmp/kill.log"
  [ -z "$stall_at" ] || tee -a "$summary" < "$tmp/stall.log"

  # the servers' own figures
  : > "$out/metrics.txt"
  while read -r name addr port _; do
    say "== $name /health: $(http_body "http://$addr:$port/health" | tr -d '\n')"
    http_body "http://$addr:$port/metrics" > "$tmp/metrics-$name.txt"
    { echo "# ---- $name"; cat "$tmp/metrics-$name.txt"; } >> "$out/metrics.txt"
    tick_p99 "$tmp/metrics-$name.txt" | sed "s/^/== $name \/metrics /" | tee -a "$summary"
    say "== $name /metrics audio dropped, the model behind (s): $(awk '/^personaplex_input_dropped_seconds_total\{/ {
      sub(/.*protocol="/, "", $1); sub(/".*/, "", $1); printf "%s%s %s", sep, $1, $2; sep = ", " }' "$tmp/metrics-$name.txt")"
    tick_lines "$fleet/$name.log" > "$out/ticks-$name.txt"
    say "== $name ticks: $(tick_summary "$out/ticks-$name.txt")"
    # admission (server.md, "Admission"): the tick measured at start-up, the capacity then and at its last change,
    # the refusals
    grep -m1 ' at full context (ms, by calls)' "$fleet/$name.log" | sed "s/^personaplex-server: /== $name /" | tee -a "$summary"
    grep ' bound holds ' "$fleet/$name.log" | sed -n '1p;$p' | uniq | sed "s/^personaplex-server: /== $name /" | tee -a "$summary"
    say "== $name refused: $(awk '/^personaplex_calls_refused_total\{/ { sub(/.*reason="/, "", $1); sub(/".*/, "", $1)
      n[$1] += $2 } END { for (r in n) { printf "%s%s %d", sep, r, n[r]; sep = ", " } }' "$tmp/metrics-$name.txt")"
  done < "$fleet/servers"
  if [ -s "$out/gpu.csv" ]; then
    awk -F', *' 'NR > 1 && $3 ~ /^[0-9]+$/ { g = $2; if (!(g in lo) || $3 < lo[g]) lo[g] = $3; if ($3 > hi[g]) hi[g] = $3
                 n[g]++; u[g] += $4 }
         END { for (g in lo) printf "== GPU %s memory.used %d to %d MiB over %d samples, utilization mean %.0f %%\n",
               g, lo[g], hi[g], n[g], u[g] / n[g] }' "$out/gpu.csv" | tee -a "$summary"
  fi
  return 0
}

# main runs in the pipeline's subshell: it ends its own samplers
{ main "$@"; echo $? > "$tmp/status"; for p in $bg_pids; do kill "$p" 2> /dev/null; done; } 2>&1 | tee "$out/run.log"
status=$(cat "$tmp/status" 2> /dev/null || echo 1)
sh "$here/personaplex-fleet.sh" stop "$fleet" --timeout 30 >> "$out/run.log" 2>&1
for f in "$fleet"/*.log; do
  [ -f "$f" ] && { echo "---- $(basename "$f") (last 400 lines)"; tail -400 "$f"; }
done > "$out/servers.log" 2>&1
if [ "$keep_logs" = 1 ]; then
  for f in "$fleet"/*.log; do [ -f "$f" ] && gzip -c "$f" > "$out/$(basename "$f").gz"; done
fi
echo "== fleet-live.sh: exit $status; files in $out: $(cd "$out" && ls | tr '\n' ' ')"
exit "$status"
