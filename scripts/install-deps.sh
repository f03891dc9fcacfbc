#!/usr/bin/env bash
# Installs the Debian 12 packages personaplex-gst needs to build, test and run.
# docs/dependencies.md says why each one is there.
set -euo pipefail
PKGS=(
  build-essential meson ninja-build pkg-config python3
  libglib2.0-dev libjson-glib-dev libsndfile1-dev libebur128-dev libsamplerate0-dev
  libsentencepiece-dev libzip-dev libopus-dev libsoup-3.0-dev
  libgstreamer1.0-dev libgstreamer-plugins-base1.0-dev libgstreamer-plugins-bad1.0-dev
  gstreamer1.0-tools gstreamer1.0-plugins-base gstreamer1.0-plugins-good
  gstreamer1.0-plugins-bad
  clang libclang-rt-14-dev valgrind
  gstreamer1.0-nice chromium nodejs
)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  echo "installing: ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
