#!/bin/sh
# Every curl line of docs/server.md, run as the page writes it, against personaplex-server on 127.0.0.1: a plain
# HTTP server for the lines that name port 8080 and one with --ssl-dir (a self-signed pair made in a temporary
# folder) for those that name 8998, both with a token in $PERSONAPLEX_AUTH_TOKEN. Only the port and the
# certificate's folder (~/.config/personaplex/ssl) are replaced. Each line must succeed (curl -f is not in the
# docs: the answer is checked instead): /health answers with exactly the fields of the page's example, /metrics
# with every series of the page's table, the cookie jar's lines as a browser's sign-in does. The lines are run in
# the page's order, in one folder (cookies.txt stays between them). About 10 s.
# Environment (tests/meson.build): PPX_SOURCE_ROOT, PPX_SERVER, PPX_MAKE_MODEL, GST_PLUGIN_PATH_1_0.
# Exit 77 (skip) without curl.
set -u
doc=${PPX_SOURCE_ROOT:?}/docs/server.md
server=${PPX_SERVER:?}
command -v curl > /dev/null || { echo "SKIP: curl not installed (scripts/install-deps.sh --tests)"; exit 77; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/ppx-server-curl-XXXXXX")
pids=
finish () {
  for p in $pids; do kill "$p" 2> /dev/null; done
  for p in $pids; do wait "$p" 2> /dev/null; done
  rm -rf "$tmp"
}
trap finish EXIT
trap 'exit 1' INT TERM
failed=0
fail () { echo "FAIL: $*"; failed=1; }

"${PPX_MAKE_MODEL:?}" --preset tiny --output-dir "$tmp/model" > /dev/null || { echo "FAIL: personaplex-make-model"; exit 1; }
export PERSONAPLEX_AUTH_TOKEN=curl-test-token_01

# start NAME ARGS...: a server on a free port; its port in $port
start () {
  name=$1
  shift
  "$server" --model-dir "$tmp/model" --port 0 --max-sessions 1 "$@" > "$tmp/$name.out" 2> "$tmp/$name.log" &
  pids="$pids $!"
  i=0
  until grep -q 'serving' "$tmp/$name.out"; do
    i=$((i + 1))
    [ "$i" -le 600 ] || { cat "$tmp/$name.log"; echo "FAIL: $name did not serve within 60 s"; exit 1; }
    sleep 0.1
  done
  port=$(sed -n 's|.*serving https\{0,1\}://127\.0\.0\.1:\([0-9]*\)/.*|\1|p' "$tmp/$name.out")
}
start plain
plain=$port
start tls --ssl-dir "$tmp/ssl"
tls=$port
grep -q 'serving https://' "$tmp/tls.out" || fail "the --ssl-dir server does not serve HTTPS: $(cat "$tmp/tls.out")"

# the page's curl lines (in ```sh blocks), and the fields of its /health example and the series of its table
awk '/^```sh/ { in_sh = 1; next } /^```/ { in_sh = 0 } in_sh && /^curl / { print }' "$doc" > "$tmp/lines"
[ "$(wc -l < "$tmp/lines")" -ge 6 ] || fail "docs/server.md has $(wc -l < "$tmp/lines") curl lines (6 expected at least)"
fields=$(awk '/^curl -s http:\/\/127.0.0.1:8080\/health$/ { take = 1; next } take && /^```/ { exit } take { print }' "$doc" |
  grep -o '"[a-z_0-9]*":' | tr -d '":' | sort | tr '\n' ' ')
[ -n "$fields" ] || fail "no /health example after its curl line"
series=$(awk '/^### `\/metrics`/ { take = 1 } take && /^\| `personaplex_/ { print } take && /^### Draining/ { exit }' "$doc" |
  grep -o 'personaplex_[a-z_]*' | sort -u)

cd "$tmp" || exit 1
n=0
while IFS= read -r line; do
  n=$((n + 1))
  run=$(printf '%s\n' "$line" | sed -e "s|127\.0\.0\.1:8080|127.0.0.1:$plain|g" -e "s|127\.0\.0\.1:8998|127.0.0.1:$tls|g" \
    -e "s|~/\.config/personaplex/ssl|$tmp/ssl|g")
  out=$(sh -c "$run" 2> "$tmp/err.$n")
  status=$?
  echo "\$ $line"
  printf '%s\n' "$out" | head -c 300
  echo
  [ "$status" = 0 ] || { fail "line $n exited $status: $(cat "$tmp/err.$n")"; continue; }
  case $line in
    *-o\ /dev/null*) ;; # the sign-in: the jar must now hold the cookie
    */health*)
      got=$(printf '%s' "$out" | grep -o '"[a-z_0-9]*":' | tr -d '":' | sort | tr '\n' ' ')
      [ "$got" = "$fields" ] || fail "line $n: /health's fields are '$got', the page's example has '$fields'" ;;
    */metrics*)
      # every family of the table (a labelled counter has only its HELP and TYPE lines before its first count)
      for s in $series; do
        printf '%s\n' "$out" | grep -q "^# TYPE $s " || fail "line $n: /metrics has no $s (the page's table names it)"
      done
      printf '%s\n' "$out" | grep -q '^personaplex_tick_duration_seconds_count 0$' ||
        fail "line $n: no personaplex_tick_duration_seconds_count 0 before any call" ;;
    *) fail "line $n: no check for '$line'" ;;
  esac
done < "$tmp/lines"
[ ! -f cookies.txt ] || grep -q 'personaplex_auth' cookies.txt || fail "the cookie jar holds no personaplex_auth"
# what the lines rely on: without the token /metrics is 401, with a wrong cookie too
[ "$(curl -sk -o /dev/null -w '%{http_code}' "https://127.0.0.1:$tls/metrics")" = 401 ] || fail "/metrics without a token is not 401"
[ "$(curl -sk -o /dev/null -w '%{http_code}' -b 'personaplex_auth=0' "https://127.0.0.1:$tls/metrics")" = 401 ] ||
  fail "/metrics with a forged cookie is not 401"
echo "$n curl lines of docs/server.md run against servers on ports $plain (HTTP) and $tls (HTTPS)"
exit $failed
