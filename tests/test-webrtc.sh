#!/usr/bin/env bash
# personaplex-server's WebRTC calls end to end in headless Chromium (tests/webrtc/test-webrtc.mjs does the work).
# Needs node and Debian's chromium; installs chromium when it is missing and this runs as root with
# apt-get, and skips (77) when it still cannot be found. Environment (set by tests/meson.build):
# PPX_WEBRTC_SERVER, PPX_MAKE_MODEL, PPX_WEBRTC_MAKE_TOKENIZER, PPX_WEBRTC_ARTIFACTS, PPX_SOURCE_ROOT.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)

find_chromium() {
  for c in "${PPX_CHROMIUM:-}" chromium chromium-browser; do
    [ -n "$c" ] && command -v "$c" >/dev/null 2>&1 && { command -v "$c"; return 0; }
  done
  return 1
}

if ! command -v node >/dev/null 2>&1; then
  echo "skip: node is not installed (scripts/install-deps.sh)"
  exit 77
fi
if ! chromium_bin=$(find_chromium); then
  if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "chromium is missing: apt-get install -y chromium"
    DEBIAN_FRONTEND=noninteractive timeout 900 apt-get install -y -qq chromium >/dev/null 2>&1 || true
  fi
  if ! chromium_bin=$(find_chromium); then
    echo "skip: chromium is not installed and could not be installed (scripts/install-deps.sh)"
    exit 77
  fi
fi

export PPX_CHROMIUM="$chromium_bin"
audio="${PPX_WEBRTC_AUDIO:-${PPX_SOURCE_ROOT:-$here/..}/../shared/data/input_assistant.wav}"
if [ -f "$audio" ]; then
  # Chromium refuses a capture file path with ".." in it (and then records silence).
  PPX_WEBRTC_AUDIO=$(realpath "$audio")
  export PPX_WEBRTC_AUDIO
else
  echo "note: $audio not found: the fake microphone plays Chromium's beep instead"
  unset PPX_WEBRTC_AUDIO
fi
exec node "$here/webrtc/test-webrtc.mjs"
