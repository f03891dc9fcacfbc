#!/bin/sh
# pipelines/server/personaplex-server.service: systemd-analyze verify finds nothing to say about it (its ExecStart
# pointed at the built server), and it holds what docs/server.md promises: SIGTERM drains, TimeoutStopSec above
# the drain (30 s) and the end grace (10 s), Restart=on-failure, LimitNOFILE, the token from an EnvironmentFile,
# the hardening options. A copy with a bad signal name must make systemd-analyze speak (the check can fail).
# Skipped (77) without systemd-analyze (Debian: package systemd; scripts/install-deps.sh --tests).
set -eu
command -v systemd-analyze >/dev/null 2>&1 || { echo "no systemd-analyze: skipped"; exit 77; }
unit="$PPX_SOURCE_ROOT/pipelines/server/personaplex-server.service"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

sed "s|/usr/local/bin/personaplex-server|$PPX_SERVER|" "$unit" > "$tmp/personaplex-server.service"
out=$(systemd-analyze verify --man=no "$tmp/personaplex-server.service" 2>&1) || fail "systemd-analyze verify: $out"
[ -z "$out" ] || fail "systemd-analyze verify: $out"
echo "systemd-analyze verify: nothing to say"

sed 's/^KillSignal=SIGTERM/KillSignal=SIGNOPE/' "$tmp/personaplex-server.service" > "$tmp/broken.service"
out=$(systemd-analyze verify --man=no "$tmp/broken.service" 2>&1 || true)
[ -n "$out" ] || fail "systemd-analyze verify said nothing about KillSignal=SIGNOPE"

value() { sed -n "s/^$1=//p" "$unit" | head -1; }
[ "$(value KillSignal)" = SIGTERM ] || fail "KillSignal is not SIGTERM"
[ "$(value Restart)" = on-failure ] || fail "Restart is not on-failure"
stop=$(value TimeoutStopSec)
[ "${stop:-0}" -gt 40 ] || fail "TimeoutStopSec ${stop:-unset} is not above the drain timeout (30 s) + 10 s"
nofile=$(value LimitNOFILE)
[ "${nofile:-0}" -ge 1024 ] || fail "LimitNOFILE ${nofile:-unset} is under 1024"
[ -n "$(value EnvironmentFile)" ] || fail "no EnvironmentFile (the token)"
grep -q '^ExecStart=.*--auth-token' "$unit" && fail "the token is on the command line"
for opt in NoNewPrivileges=yes ProtectSystem=strict ProtectHome=yes PrivateTmp=yes; do
  grep -qx "$opt" "$unit" || fail "no $opt"
done
echo "PASS: KillSignal=SIGTERM, TimeoutStopSec=$stop, Restart=on-failure, LimitNOFILE=$nofile, EnvironmentFile, hardening"
