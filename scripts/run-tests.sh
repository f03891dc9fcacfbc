#!/usr/bin/env bash
# Builds personaplex-gst and runs its test suite. The last line printed is always
#   N passed, N failed[, N skipped]
# and the exit status is non-zero when anything failed (a failed build counts as one failure).
#
# usage: scripts/run-tests.sh [--asan] [--no-deps] [--build-dir DIR] [-- MESON-TEST-ARGS...]
#   --asan         build in build-asan with -Db_sanitize=address,undefined and run the suite there
#   --no-deps      skip scripts/install-deps.sh --tests (apt: the set-up packages plus the test-only ones)
#   --build-dir    build directory (default: build, or build-asan with --asan)
#   after --        passed to `meson test` (e.g. a suite: -- --suite slow, or test names)
# Golden tests read $PPX_GOLDEN_DIR (default ../shared/golden/tiny) and are skipped when it is absent.
set -uo pipefail
cd "$(dirname "$0")/.."

asan=0
deps=1
build_dir=""
test_args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --asan) asan=1 ;;
    --no-deps) deps=0 ;;
    --build-dir) build_dir="$2"; shift ;;
    --) shift; test_args=("$@"); break ;;
    -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
    *) echo "run-tests.sh: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done

setup_args=()
if [ "$asan" = 1 ]; then
  build_dir="${build_dir:-build-asan}"
  setup_args+=(-Db_sanitize=address,undefined -Db_lundef=false)
  export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:halt_on_error=1:abort_on_error=1:fast_unwind_on_malloc=0}"
  export UBSAN_OPTIONS="${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}"
  # GLib abandons its quark block on purpose once GStreamer registers many quarks.
  export LSAN_OPTIONS="${LSAN_OPTIONS:-suppressions=$PWD/tests/lsan-glib-quarks.supp}"
fi
build_dir="${build_dir:-build}"

fail_build() {
  echo "run-tests.sh: $1" >&2
  echo "0 passed, 1 failed"
  exit 1
}

if [ "$deps" = 1 ]; then
  bash scripts/install-deps.sh --tests || fail_build "installing dependencies failed (scripts/install-deps.sh --tests)"
fi

if [ -f "$build_dir/meson-private/coredata.dat" ]; then
  meson setup --reconfigure "$build_dir" "${setup_args[@]}" >/dev/null ||
    meson setup --wipe "$build_dir" "${setup_args[@]}" || fail_build "meson setup failed"
else
  meson setup "$build_dir" "${setup_args[@]}" || fail_build "meson setup failed"
fi
ninja -C "$build_dir" || fail_build "the build failed"

log="$build_dir/meson-logs/testlog.json"
rm -f "$log"
meson test -C "$build_dir" --no-rebuild --print-errorlogs \
  --timeout-multiplier "${PPX_TEST_TIMEOUT_MULTIPLIER:-3}" "${test_args[@]}"
meson_status=$?

[ -f "$log" ] || fail_build "meson test wrote no $log (status $meson_status)"
python3 - "$log" "$meson_status" <<'EOF'
import json, sys

counts = {"passed": 0, "failed": 0, "skipped": 0}
failed_names = []
with open(sys.argv[1]) as f:
    for line in f:
        line = line.strip()
        if not line:
            continue
        t = json.loads(line)
        result = t.get("result", "")
        if result in ("OK", "EXPECTEDFAIL"):
            counts["passed"] += 1
        elif result == "SKIP":
            counts["skipped"] += 1
        else:  # FAIL, UNEXPECTEDPASS, TIMEOUT, ERROR
            counts["failed"] += 1
            failed_names.append("%s (%s)" % (t.get("name", "?"), result))
if counts["failed"] == 0 and int(sys.argv[2]) != 0:
    counts["failed"] = 1  # meson test itself failed without recording a failing test
    failed_names.append("meson test exited with status %s" % sys.argv[2])
for name in failed_names:
    print("FAILED: " + name)
summary = "%d passed, %d failed" % (counts["passed"], counts["failed"])
if counts["skipped"]:
    summary += ", %d skipped" % counts["skipped"]
print(summary)
sys.exit(1 if counts["failed"] else 0)
EOF
