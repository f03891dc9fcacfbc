#!/usr/bin/env bash
# Installs the Debian 12 packages personaplex-gst needs; docs/dependencies.md says why each one is there.
#
# usage: scripts/install-deps.sh [--tests]
#   without options: what building and running needs (the set-up, scripts/setup-and-run.sh)
#   --tests:         that plus what only the tests need (scripts/run-tests.sh): the fuzzing/sanitizer
#                    compiler, valgrind, the browser tests' Chromium and Node.js, npm (when missing), and
#                    HAProxy for the fleet test, prometheus (promtool) for the fleet's alert rules,
#                    systemd-analyze (package systemd) for the server's unit
# Packages already installed are skipped; --no-install-recommends keeps the set small.
set -euo pipefail

# Building and running: compiler and build system, the inference library's libraries, GStreamer
# (headers, gst-check, gst-launch, the plugins the pipelines use) and the WebRTC example's libraries.
RUN_PKGS=(
  build-essential meson ninja-build pkg-config python3
  libglib2.0-dev libjson-glib-dev libsndfile1-dev libebur128-dev libsamplerate0-dev
  libsentencepiece-dev libzip-dev libopus-dev libsoup-3.0-dev glib-networking libgnutls28-dev
  libgstreamer1.0-dev libgstreamer-plugins-base1.0-dev libgstreamer-plugins-bad1.0-dev
  gstreamer1.0-tools gstreamer1.0-plugins-base gstreamer1.0-plugins-good
  gstreamer1.0-plugins-bad gstreamer1.0-nice
)
# Only the tests: fuzz targets and sanitizer builds, leak checks, the WebRTC browser test, the fleet test.
TEST_PKGS=(
  clang libclang-rt-14-dev valgrind
  chromium nodejs
  haproxy curl prometheus
  systemd
)

pkgs=("${RUN_PKGS[@]}")
case "${1:-}" in
  "") ;;
  --tests)
    pkgs+=("${TEST_PKGS[@]}")
    # npm builds the reference web client (scripts/build-reference-client.sh). Debian's nodejs has no npm
    # (Debian's npm package brings it); NodeSource's nodejs has its own and conflicts with Debian's npm.
    command -v npm >/dev/null 2>&1 || pkgs+=(npm) ;;
  -h|--help) sed -n '2,9p' "$0"; exit 0 ;;
  *) echo "install-deps.sh: unknown option $1 (use --tests or nothing)" >&2; exit 2 ;;
esac

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  echo "installing: ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
