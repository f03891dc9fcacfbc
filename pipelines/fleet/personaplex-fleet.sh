#!/bin/sh
# A fleet of personaplex-servers behind HAProxy (docs/fleet.md): K servers on this machine (one per GPU with
# --device i, or K sharing a CPU or a GPU for tests) and/or servers on other machines, one HAProxy in front.
#
#   personaplex-fleet.sh start [OPTIONS] [-- SERVER_OPTIONS...]   start the servers and HAProxy, wait until
#                                                                  they serve, print the URL, return
#   personaplex-fleet.sh stop RUN_DIR [--timeout S]                drain every local server (SIGTERM), then
#                                                                  stop HAProxy
#   personaplex-fleet.sh restart RUN_DIR [NAME...]                 rolling restart with drain, one at a time
#   personaplex-fleet.sh status RUN_DIR                            each server as HAProxy sees it, and its /health
#   personaplex-fleet.sh config [OPTIONS]                          print the HAProxy configuration only
#
# start/config OPTIONS:
#   --servers K            local servers (default: one per GPU that nvidia-smi lists, else 1)
#   --devices LIST         their GPUs, comma-separated (default with GPUs: 0,1,...,K-1, round robin when K is
#                          more; without GPUs: none); each server gets --device i (nvidia-smi's numbering)
#   --listen ADDR:PORT     where callers connect (default 127.0.0.1:8080)
#   --tls-pem FILE         HAProxy terminates TLS on --listen with this PEM (certificate and key)
#   --ops ADDR:PORT        stats page, HAProxy's Prometheus metrics, each server's /metrics and /health under
#                          /servers/NAME/ (default 127.0.0.1:8404)
#   --server-address ADDR  where the local servers listen (default 127.0.0.1; with WebRTC, an address the
#                          callers can reach: docs/fleet.md)
#   --base-port P          the first local server's port; the others follow (default 8090)
#   --remote NAME=HOST:PORT  a server on another machine (repeatable): balanced, not started here
#   --origin ORIGIN        the web origin callers' pages come from (repeatable; default the --listen address,
#                          http:// or https://): each local server allows it (--allowed-origin), since a page
#                          loaded through the balancer is not from the server's own address
#   --run-dir DIR          configuration, logs and pids (default ./personaplex-fleet)
#   --server PROGRAM       default: the build tree's personaplex-server, else the one on PATH
#   --haproxy PROGRAM      default: haproxy on PATH
#   --wrapper PROGRAM      run the servers and HAProxy through it (a runtime pack's `run`)
#   --check-interval MS    health check interval (default 1000)
#   --start-timeout S      how long a server may take to load its model (default 600)
#   --foreground           after starting, stay until SIGINT/SIGTERM, then stop (drain)
# Every option after `--` goes to each local server as it is (the model, --max-sessions, --auth-token, ...);
# the script adds --address, --port (and --device).
set -eu

here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/../.." && pwd)
me=personaplex-fleet

say () { echo "$me: $*" >&2; }
die () { say "$*"; exit 1; }
usage () { sed -n '2,37p' "$0" | sed 's/^# \{0,1\}//'; exit "${1:-0}"; }

# Shell-quotes one word.
quote () { printf "'%s'" "$(printf '%s' "$1" | sed "s/'/'\\\\''/g")"; }

# shellcheck source=pipelines/fleet/fleet-http.sh
. "$here/fleet-http.sh"

alive () { [ -n "$1" ] && kill -0 "$1" 2> /dev/null; }

# ---- options ----
servers= devices= listen=127.0.0.1:8080 tls_pem= ops=127.0.0.1:8404 server_address=127.0.0.1 base_port=8090
remotes= origins= run_dir=./personaplex-fleet server= haproxy= wrapper= check_ms=1000 start_timeout=600 foreground=0

parse_start_options () {
  while [ $# -gt 0 ]; do
    case $1 in
      --servers) servers=$2; shift ;;
      --devices) devices=$2; shift ;;
      --listen) listen=$2; shift ;;
      --tls-pem) tls_pem=$2; shift ;;
      --ops) ops=$2; shift ;;
      --server-address) server_address=$2; shift ;;
      --base-port) base_port=$2; shift ;;
      --remote) remotes="$remotes $2"; shift ;;
      --origin) origins="$origins $2"; shift ;;
      --run-dir) run_dir=$2; shift ;;
      --server) server=$2; shift ;;
      --haproxy) haproxy=$2; shift ;;
      --wrapper) wrapper=$2; shift ;;
      --check-interval) check_ms=$2; shift ;;
      --start-timeout) start_timeout=$2; shift ;;
      --foreground) foreground=1 ;;
      --) shift; break ;;
      -h|--help) usage ;;
      *) say "unknown option '$1' (server options go after --)"; usage 2 ;;
    esac
    shift
  done
  n_rest=$#
  server_args= prev= cpu=0
  for a in "$@"; do
    server_args="$server_args $(quote "$a")"
    # servers on the CPU get no GPU (a server refuses --device with --backend cpu)
    { [ "$prev" = --backend ] && [ "$a" = cpu ]; } || [ "$a" = --backend=cpu ] && cpu=1
    prev=$a
  done
  gpus=0
  [ "$cpu" = 1 ] || ! command -v nvidia-smi > /dev/null 2>&1 || gpus=$(nvidia-smi -L 2> /dev/null | grep -c '^GPU' || true)
  if [ -z "$servers" ]; then
    if [ -n "$devices" ]; then servers=$(echo "$devices" | tr ',' '\n' | grep -c .)
    elif [ "$gpus" -gt 0 ]; then servers=$gpus
    elif [ -z "$remotes" ]; then servers=1
    else servers=0
    fi
  fi
  case $servers in ''|*[!0-9]*) die "--servers '$servers': a number, please" ;; esac
  case $check_ms in ''|*[!0-9]*) die "--check-interval '$check_ms': milliseconds, please" ;; esac
  case $base_port in ''|*[!0-9]*) die "--base-port '$base_port': a port, please" ;; esac
  [ $((base_port + servers)) -le 65536 ] || die "--base-port $base_port: the $servers servers need ports up to $((base_port + servers - 1))"
  if [ -z "$devices" ] && [ "$gpus" -gt 0 ] && [ "$servers" -gt 0 ]; then
    devices=$(seq 0 $((servers - 1)) | awk -v g="$gpus" '{printf "%s%d", (NR > 1 ? "," : ""), $1 % g}')
  fi
  if [ -n "$devices" ]; then
    n=$(echo "$devices" | tr ',' '\n' | grep -c .)
    [ "$n" -eq "$servers" ] || die "--devices '$devices' names $n GPUs for $servers servers"
    for d in $(echo "$devices" | tr ',' ' '); do
      case $d in *[!0-9]*) die "--devices '$devices': GPU indices (0,1,...), please" ;; esac
    done
  fi
  [ -z "$tls_pem" ] || [ -f "$tls_pem" ] || die "--tls-pem $tls_pem: no such file"
  [ "$servers" -gt 0 ] || [ -n "$remotes" ] || die "no servers: --servers 0 and no --remote"
  if [ -z "$origins" ]; then
    case $listen in
      0.0.0.0:*|\[::\]:*|:*) ;;  # every address: the public name is not known here (give --origin)
      *) if [ -n "$tls_pem" ]; then origins="https://$listen"; else origins="http://$listen"; fi ;;
    esac
  fi
  : "$n_rest"
}

# The backend's server lines, the ops routes and backends, one server per line of $run_dir/servers
# ("NAME ADDR PORT DEVICE LOCAL").
write_config () {
  servers_file=$1 out=$2
  retries=$(wc -l < "$servers_file")
  [ "$retries" -ge 2 ] || retries=2
  # each server's maxconn: the capacity its /health said at start (NAME CAPACITY lines in $run_dir/capacity), so
  # that HAProxy sends a server no more calls than it takes; beyond it a call waits (timeout queue) or goes on
  awk -v capf="$(dirname "$servers_file")/capacity" '
    BEGIN { while ((getline line < capf) > 0) { split(line, f, " "); cap[f[1]] = f[2] } }
    {printf "    server %s %s:%s%s\n", $1, $2, $3, ($1 in cap) ? " maxconn " cap[$1] : ""}' "$servers_file" > "$out.servers"
  awk '{printf "    use_backend ops_%s if { path_beg /servers/%s/ }\n", $1, $1}' "$servers_file" > "$out.routes"
  awk '{printf "backend ops_%s\n    http-request replace-path /servers/%s(/.*) \\1\n    server %s %s:%s\n\n", $1, $1, $1, $2, $3}' \
    "$servers_file" > "$out.backends"
  # 4000 connections, or what the descriptor limit allows (HAProxy needs about two a connection)
  fds=$(ulimit -Hn 2> /dev/null || echo 1024)
  case $fds in unlimited) fds=1048576 ;; esac
  maxconn=$(( (fds - 100) / 2 ))
  [ "$maxconn" -le 4000 ] || maxconn=4000
  bind=$listen
  [ -z "$tls_pem" ] || bind="$listen ssl crt $tls_pem"
  awk -v listen="$bind" -v ops="$ops" -v run_dir="$run_dir" -v inter="${check_ms}ms" -v retries="$retries" -v maxconn="$maxconn" \
      -v sfile="$out.servers" -v rfile="$out.routes" -v bfile="$out.backends" '
    function slurp(f,   line, s) { s = ""; while ((getline line < f) > 0) s = s line "\n"; close(f); sub(/\n$/, "", s); return s }
    BEGIN { S = slurp(sfile); R = slurp(rfile); B = slurp(bfile) }
    /^@SERVERS@$/ { print S; next }
    /^@OPS_ROUTES@$/ { print R; next }
    /^@OPS_BACKENDS@$/ { print B; next }
    { gsub(/@LISTEN_BIND@/, listen); gsub(/@OPS_BIND@/, ops); gsub(/@RUN_DIR@/, run_dir)
      gsub(/@CHECK_INTER@/, inter); gsub(/@RETRIES@/, retries); gsub(/@MAXCONN@/, maxconn); print }' "$here/haproxy.cfg.in" > "$out"
  rm -f "$out.servers" "$out.routes" "$out.backends"
}

list_servers () {
  : > "$1"
  i=0
  while [ "$i" -lt "$servers" ]; do
    dev=-
    [ -z "$devices" ] || dev=$(echo "$devices" | cut -d, -f$((i + 1)))
    echo "s$((i + 1)) $server_address $((base_port + i)) $dev local" >> "$1"
    i=$((i + 1))
  done
  for r in $remotes; do
    name=${r%%=*} addr=${r#*=}
    [ "$name" != "$r" ] && [ -n "$name" ] || die "--remote '$r': use NAME=HOST:PORT"
    case $name in *[!A-Za-z0-9_-]*) die "--remote '$r': the name takes letters, digits, - and _" ;; esac
    echo "$name ${addr%:*} ${addr##*:} - remote" >> "$1"
  done
}

# With --wrapper, --server and --haproxy may be names the wrapper finds (a pack's bin/).
find_programs () {
  if [ -z "$server" ]; then
    for s in "$src/build/pipelines/server/personaplex-server" "$(command -v personaplex-server || true)"; do
      [ -n "$s" ] && [ -x "$s" ] && { server=$s; break; }
    done
    [ -n "$server" ] || [ "$servers" -eq 0 ] || die "personaplex-server not found: build it, or give --server"
  fi
  [ -n "$haproxy" ] || haproxy=$(command -v haproxy || true)
  [ -n "$haproxy" ] || die "haproxy not found (apt-get install haproxy, or --haproxy PROGRAM)"
  if [ -z "$wrapper" ]; then
    [ "$servers" -eq 0 ] || [ -x "$server" ] || die "--server $server: not an executable"
    [ -x "$haproxy" ] || die "--haproxy $haproxy: not an executable"
  fi
}

# Waits until URL answers 200 (or, with `any`, any HTTP status) while PID lives; FALSE after S seconds.
wait_health () {
  url=$1 pid=$2 limit=$3 want=${4:-200}
  t=0
  while [ "$t" -lt $((limit * 5)) ]; do
    code=$(http_status "$url")
    [ "$code" = 200 ] && return 0
    [ "$want" = any ] && [ "$code" != 000 ] && return 0
    [ -z "$pid" ] || alive "$pid" || return 1
    sleep 0.2
    t=$((t + 1))
  done
  return 1
}

# NAME CAPACITY for every server whose /health answers with a capacity (at least 1: maxconn 0 is no limit).
read_capacities () {
  while read -r name addr port _; do
    cap=$(http_body "http://$addr:$port/health" | sed -n 's/.*"capacity" *: *\([0-9][0-9]*\).*/\1/p')
    [ -n "$cap" ] || { say "$name: no capacity in its /health: no maxconn"; continue; }
    [ "$cap" -ge 1 ] || cap=1
    say "$name: capacity $cap call(s) (its /health): maxconn $cap"
    echo "$name $cap"
  done < "$1"
}

start_server () {
  name=$1
  sh "$run_dir/$name.sh" >> "$run_dir/$name.log" 2>&1 < /dev/null &
  echo $! > "$run_dir/$name.pid"
}

cmd_start () {
  parse_start_options "$@"
  find_programs
  mkdir -p "$run_dir"
  run_dir=$(cd "$run_dir" && pwd)
  [ ! -f "$run_dir/haproxy.pid" ] || ! alive "$(cat "$run_dir/haproxy.pid")" ||
    die "$run_dir: a fleet runs there already (personaplex-fleet.sh stop $run_dir)"
  list_servers "$run_dir/servers"
  rm -f "$run_dir/capacity"
  write_config "$run_dir/servers" "$run_dir/haproxy.cfg"
  echo "$ops" > "$run_dir/ops"
  $wrapper "$haproxy" -c -q -f "$run_dir/haproxy.cfg" || die "HAProxy refuses $run_dir/haproxy.cfg"

  setsid=
  command -v setsid > /dev/null 2>&1 && setsid=setsid
  origin_args=
  help=$($wrapper "$server" --help 2>&1 || true)
  if echo "$help" | grep -q -- '--allowed-origin'; then
    for o in $origins; do origin_args="$origin_args --allowed-origin $(quote "$o")"; done
  fi
  # a port something answers on already (another fleet, a server left running) would make this fleet's checks and
  # measurements read that one: refuse to start
  while read -r name addr port dev where; do
    [ "$where" = local ] || continue
    [ "$(http_status "http://$addr:$port/health")" = 000 ] ||
      die "$name: $addr:$port answers already (another server or fleet runs there): stop it or choose --base-port"
  done < "$run_dir/servers"
  for hp in "$listen" "$ops"; do
    [ "$(http_status "http://${hp#*://}/")" = 000 ] ||
      die "$hp answers already (another fleet's HAProxy?): stop it or choose --listen / --ops"
  done
  while read -r name addr port dev where; do
    [ "$where" = local ] || continue
    # a server's GPU: --device (the server numbers GPUs as nvidia-smi does)
    device_arg= gpu=
    [ "$dev" = - ] || { device_arg="--device $dev" gpu=" (GPU $dev)"; }
    # exec: the pid file holds the server's own pid
    echo "exec $setsid $wrapper $(quote "$server") --address $addr --port $port $device_arg" \
      "$origin_args $server_args" > "$run_dir/$name.sh"
    : > "$run_dir/$name.log"
    start_server "$name"
    say "$name: $server on $addr:$port$gpu, pid $(cat "$run_dir/$name.pid"), log $run_dir/$name.log"
  done < "$run_dir/servers"
  while read -r name addr port dev where; do
    [ "$where" = local ] || continue
    wait_health "http://$addr:$port/health" "$(cat "$run_dir/$name.pid")" "$start_timeout" any ||
      { tail -5 "$run_dir/$name.log" >&2; die "$name did not start (log: $run_dir/$name.log)"; }
  done < "$run_dir/servers"

  # every server's capacity (its /health, read now that they serve) becomes its maxconn
  read_capacities "$run_dir/servers" > "$run_dir/capacity"
  write_config "$run_dir/servers" "$run_dir/haproxy.cfg"
  $wrapper "$haproxy" -c -q -f "$run_dir/haproxy.cfg" || die "HAProxy refuses $run_dir/haproxy.cfg"
  $setsid $wrapper "$haproxy" -db -f "$run_dir/haproxy.cfg" > "$run_dir/haproxy.log" 2>&1 < /dev/null &
  echo $! > "$run_dir/haproxy.pid"
  scheme=ws
  [ -z "$tls_pem" ] || scheme=wss
  wait_health "http://$ops/stats" "$(cat "$run_dir/haproxy.pid")" 10 ||
    { cat "$run_dir/haproxy.log" >&2; die "HAProxy did not start (log: $run_dir/haproxy.log)"; }
  # every server up (or every one answered, when they are full already): the checks need rise x inter
  wait_up "$run_dir" 10 || say "warning: not every server is UP in HAProxy yet ($me status $run_dir)"
  say "serving $scheme://$listen/api/chat with $(wc -l < "$run_dir/servers") server(s); ops http://$ops/stats"
  echo "$scheme://$listen/api/chat $run_dir"
  if [ "$foreground" = 1 ]; then
    trap 'cmd_stop "$run_dir"; exit 0' INT TERM
    while alive "$(cat "$run_dir/haproxy.pid")"; do sleep 1; done
    say "HAProxy ended; stopping"
    cmd_stop "$run_dir"
  fi
}

# The backend's servers as HAProxy sees them: "NAME STATUS SESSIONS TOTAL" per line (the stats CSV).
haproxy_states () {
  http_body "http://$(cat "$1/ops")/stats;csv" |
    awk -F, '$1 == "personaplex" && $2 != "BACKEND" && $2 != "FRONTEND" {print $2, $18, $5, $8}'
}

wait_up () {
  dir=$1 limit=$2
  t=0
  while [ "$t" -lt $((limit * 5)) ]; do
    if haproxy_states "$dir" | awk '$2 != "UP" {bad = 1} END {exit bad || NR == 0}'; then return 0; fi
    sleep 0.2
    t=$((t + 1))
  done
  return 1
}

check_run_dir () {
  [ -n "${1:-}" ] && [ -f "$1/servers" ] || die "${1:-(none)}: not a fleet's run directory (give the one start printed)"
}

# stop RUN_DIR [--timeout S]: SIGTERM every local server (each drains its calls), wait, then HAProxy.
cmd_stop () {
  dir=$1
  check_run_dir "$dir"
  timeout=${2:-60}
  pids=
  for f in "$dir"/*.pid; do
    [ -f "$f" ] && [ "$(basename "$f")" != haproxy.pid ] || continue
    pid=$(cat "$f")
    alive "$pid" && { kill -TERM "$pid"; pids="$pids $pid"; }
  done
  t=0
  for pid in $pids; do
    while alive "$pid" && [ "$t" -lt $((timeout * 5)) ]; do sleep 0.2; t=$((t + 1)); done
    alive "$pid" && { say "pid $pid still runs after ${timeout} s: SIGKILL"; kill -KILL "$pid"; }
  done
  hp=$(cat "$dir/haproxy.pid" 2> /dev/null || true)
  if alive "$hp"; then
    kill -TERM "$hp"
    t=0
    while alive "$hp" && [ "$t" -lt 50 ]; do sleep 0.1; t=$((t + 1)); done
  fi
  say "stopped the fleet in $dir"
}

cmd_status () {
  dir=$1
  check_run_dir "$dir"
  echo "server  haproxy  sessions(haproxy) calls-total  /health"
  haproxy_states "$dir" | while read -r name state cur total; do
    health=$(http_body "http://$(cat "$dir/ops")/servers/$name/health" | tr -d '\n' | cut -c1-160)
    printf '%-7s %-8s %-18s %-12s %s\n' "$name" "$state" "$cur" "$total" "${health:-(no answer)}"
  done
}

# restart RUN_DIR [NAME...]: for each local server in turn: SIGTERM (it drains: /health says 503, HAProxy
# sends new calls elsewhere, its calls end or reach --drain-timeout), wait for it to exit, start it again,
# wait for HAProxy to see it UP. The others keep serving all along.
cmd_restart () {
  dir=$1
  check_run_dir "$dir"
  shift
  timeout=${PPX_FLEET_DRAIN_WAIT:-3600}
  names=$*
  [ -n "$names" ] || names=$(awk '$5 == "local" {print $1}' "$dir/servers")
  for name in $names; do
    line=$(awk -v n="$name" '$1 == n && $5 == "local"' "$dir/servers")
    [ -n "$line" ] || die "$name: not a local server of $dir"
    addr=$(echo "$line" | cut -d' ' -f2) port=$(echo "$line" | cut -d' ' -f3)
    pid=$(cat "$dir/$name.pid")
    say "$name: draining (pid $pid)"
    alive "$pid" && kill -TERM "$pid"
    t=0
    while alive "$pid" && [ "$t" -lt $((timeout * 5)) ]; do sleep 0.2; t=$((t + 1)); done
    alive "$pid" && die "$name: still running after ${timeout} s"
    run_dir=$dir
    start_server "$name"
    wait_health "http://$addr:$port/health" "$(cat "$dir/$name.pid")" "$start_timeout" ||
      die "$name did not come back (log: $dir/$name.log)"
    t=0
    until haproxy_states "$dir" | awk -v n="$name" '$1 == n && $2 == "UP" {ok = 1} END {exit !ok}'; do
      [ "$t" -lt 100 ] || die "$name: HAProxy does not see it UP"
      sleep 0.2
      t=$((t + 1))
    done
    say "$name: back (pid $(cat "$dir/$name.pid"))"
  done
}

[ $# -gt 0 ] || usage 2
cmd=$1
shift
case $cmd in
  start) cmd_start "$@" ;;
  stop) [ $# -ge 1 ] || usage 2; dir=$1; shift; [ "${1:-}" != --timeout ] || { shift; set -- "${1:-60}"; }
        cmd_stop "$dir" "${1:-60}" ;;
  restart) [ $# -ge 1 ] || usage 2; cmd_restart "$@" ;;
  status) [ $# -ge 1 ] || usage 2; cmd_status "$1" ;;
  config) parse_start_options "$@"; tmpd=$(mktemp -d); list_servers "$tmpd/servers"
          write_config "$tmpd/servers" "$tmpd/haproxy.cfg"; cat "$tmpd/haproxy.cfg"; rm -rf "$tmpd" ;;
  -h|--help) usage ;;
  *) say "unknown command '$cmd'"; usage 2 ;;
esac
