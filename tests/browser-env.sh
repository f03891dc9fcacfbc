# Sourced by the browser tests (tests/test-webrtc.sh, tests/test-webclient.sh): finds node and Debian's
# chromium (installing chromium when it is missing and this runs as root with apt-get), exits 77 (skip)
# when either is still missing, and exports PPX_CHROMIUM and PPX_FAKE_MIC (the fake microphone's WAV, an
# absolute path without "..", or unset when $1 is missing: Chromium then plays its beep).

find_chromium() {
  for c in "${PPX_CHROMIUM:-}" chromium chromium-browser; do
    [ -n "$c" ] && command -v "$c" >/dev/null 2>&1 && { command -v "$c"; return 0; }
  done
  return 1
}

if ! command -v node >/dev/null 2>&1; then
  echo "skip: node is not installed (scripts/install-deps.sh --tests)"
  exit 77
fi
if ! chromium_bin=$(find_chromium); then
  if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "chromium is missing: apt-get install -y chromium"
    DEBIAN_FRONTEND=noninteractive timeout 900 apt-get install -y -qq chromium >/dev/null 2>&1 || true
  fi
  if ! chromium_bin=$(find_chromium); then
    echo "skip: chromium is not installed and could not be installed (scripts/install-deps.sh --tests)"
    exit 77
  fi
fi
export PPX_CHROMIUM="$chromium_bin"

if [ -f "$1" ]; then
  # Chromium refuses a capture file path with ".." in it (and then records silence).
  PPX_FAKE_MIC=$(realpath "$1")
  export PPX_FAKE_MIC
else
  echo "note: $1 not found: the fake microphone plays Chromium's beep instead"
  unset PPX_FAKE_MIC
fi
