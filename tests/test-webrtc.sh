#!/usr/bin/env bash
# personaplex-server's WebRTC calls end to end in headless Chromium (tests/webrtc/test-webrtc.mjs does the work).
# Needs node and Debian's chromium (tests/browser-env.sh finds them, or skips with 77). Environment (set by
# tests/meson.build): PPX_WEBRTC_SERVER, PPX_MAKE_MODEL, PPX_WEBRTC_MAKE_TOKENIZER, PPX_WEBRTC_ARTIFACTS,
# PPX_SOURCE_ROOT.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)

. "$here/browser-env.sh" "${PPX_WEBRTC_AUDIO:-${PPX_DATA_DIR:-${PPX_SOURCE_ROOT:-$here/..}/../shared/data}/input_assistant.wav}"
exec node "$here/webrtc/test-webrtc.mjs"
