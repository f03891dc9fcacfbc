#!/usr/bin/env bash
# The reference PersonaPlex web client (NVIDIA/personaplex client/) served by personaplex-server --static
# and driven in headless Chromium with a fake microphone (tests/webclient/test-webclient.mjs does that).
# The client is built here by scripts/build-reference-client.sh into $PPX_WEBCLIENT_BUILD, once per client
# version (later runs reuse it). Skips (77) without node, npm, chromium, the client's sources (no checkout,
# mirror or network: set PPX_PERSONAPLEX_SOURCE to a checkout) or the npm registry.
# Environment (set by tests/meson.build): PPX_SERVER, PPX_MAKE_MODEL, PPX_MAKE_TOKENIZER, PPX_MAKE_VOICE,
# PPX_WEBCLIENT_BUILD, PPX_WEBCLIENT_ARTIFACTS, PPX_SOURCE_ROOT.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root="${PPX_SOURCE_ROOT:-$here/..}"

. "$here/browser-env.sh" "${PPX_WEBCLIENT_AUDIO:-${PPX_DATA_DIR:-$root/../shared/data}/input_assistant.wav}"

status=0
dist=$(timeout 540 "$root/scripts/build-reference-client.sh" --out "$PPX_WEBCLIENT_BUILD" | tail -1) || status=$?
case "$status" in
  0) ;;
  3) echo "skip: the reference client's sources are not available (see above; PPX_PERSONAPLEX_SOURCE names a checkout)"; exit 77 ;;
  4) echo "skip: the npm registry is unreachable, so the reference client cannot be built"; exit 77 ;;
  5) echo "skip: node >= 18 and npm are needed to build the reference client (scripts/install-deps.sh --tests)"; exit 77 ;;
  124) echo "FAIL - building the reference client took more than 540 s"; exit 1 ;;
  *) echo "FAIL - scripts/build-reference-client.sh failed (exit $status)"; exit 1 ;;
esac
export PPX_WEBCLIENT_DIST="$dist"
exec node "$here/webclient/test-webclient.mjs"
