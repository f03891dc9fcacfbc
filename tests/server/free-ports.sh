# Sourced by shell tests (tests/server/server-script.sh, tests/test-fleet-live.sh): ppx_free_ports N sets $ports to
# the first of N free ports in a row of 127.0.0.1 (needs python3, and a function fail MESSAGE).
ppx_free_ports () {
  ports=$(python3 - "$1" <<'PYEOF'
import random, socket, sys
n = int(sys.argv[1])
for _ in range(200):
    base = random.randrange(20000, 60000)
    try:
        socks = []
        for p in range(base, base + n):
            s = socket.socket(); s.bind(("127.0.0.1", p)); socks.append(s)
        print(base); break
    except OSError:
        pass
    finally:
        for s in socks: s.close()
PYEOF
)
  [ -n "$ports" ] || fail "no $1 free ports in a row"
}
