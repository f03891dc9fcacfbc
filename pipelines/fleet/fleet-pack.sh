#!/bin/sh
# Packs what the fleet's GPU runs (pipelines/fleet/fleet-live.sh) need on a machine that has the NVIDIA driver
# but neither GStreamer nor HAProxy (the lent GPU machines): the GStreamer pack of device-pack-gst.sh (its
# wrapper `run`, its check.sh) plus personaplex-server, personaplex-loadgen and HAProxy (this machine's Debian
# binary) in bin/, the plugins /api/chat calls use (opus, ogg, debug: capssetter), and every library they load
# but glibc's. Not the WebRTC plugins: with libnice's and libsrtp's libraries (ICU, NSS, GnuTLS) they add about
# 40 MiB, past what a device call carries; PPX_PACK_EXTRA_PLUGINS="webrtc nice dtls srtp sctp rtp rtpmanager" adds them.
#
#   pipelines/fleet/fleet-pack.sh [--allow-no-cuda] [--no-check] BUILD_DIR OUT_DIR
#
# BUILD_DIR: a build with CUDA (meson setup BUILD -Dcuda=enabled -Dcuda-arch=90,90a: one architecture keeps the pack
# small) holding pipelines/server/personaplex-server and tools/personaplex-loadgen; --allow-no-cuda packs a
# CPU-only build (the tests do). OUT_DIR, e.g. build-devpack-fleet (ignored by git, as build-*/ is). After
# packing, unless --no-check: the pack's check.sh, then HAProxy, the server and the loadgen start from the pack
# under `env -i`. The size is printed against the 64 MiB a device call carries.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/../.." && pwd)
die () { echo "fleet-pack.sh: $*" >&2; exit 1; }
pack_args=
check=1
while [ $# -gt 0 ]; do
  case $1 in
    --allow-no-cuda) pack_args="$pack_args --allow-no-cuda" ;;
    --no-check) check=0 ;;
    -h|--help) sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) die "unknown option $1" ;;
    *) break ;;
  esac
  shift
done
[ $# -eq 2 ] || { echo "usage: pipelines/fleet/fleet-pack.sh [--allow-no-cuda] [--no-check] BUILD_DIR OUT_DIR" >&2; exit 2; }
build=$1 out=$2
server=$build/pipelines/server/personaplex-server
loadgen=$build/tools/personaplex-loadgen
[ -x "$server" ] || die "$server not found: build it first (ninja -C $build)"
[ -x "$loadgen" ] || die "$loadgen not found: build it first (ninja -C $build)"
haproxy=$(command -v haproxy || true)
[ -n "$haproxy" ] || haproxy=/usr/sbin/haproxy
[ -x "$haproxy" ] || die "haproxy not found (apt-get install haproxy)"
pack_gst=
for p in "$src/scripts/device/device-pack-gst.sh" "$src/kernels/device-pack-gst.sh"; do
  [ -f "$p" ] && { pack_gst=$p; break; }
done
[ -n "$pack_gst" ] || die "device-pack-gst.sh not found"

# opus, ogg: /api/chat's Ogg Opus; debug: the capssetter that sets the decoder's rate (server-chat.c)
# shellcheck disable=SC2086 # word lists
PPX_PACK_EXTRA_PLUGINS="opus ogg debug ${PPX_PACK_EXTRA_PLUGINS:-}" \
PPX_PACK_EXTRA_BINS="$server $loadgen $haproxy" \
  sh "$pack_gst" --no-check $pack_args "$build" "$out"

if [ "$check" = 1 ]; then
  sh "$out/check.sh"
  tmp=$(mktemp -d "${TMPDIR:-/tmp}/ppx-fleet-pack-XXXXXX")
  trap 'rm -rf "$tmp"' EXIT INT TERM
  r () { env -i PATH=/usr/bin:/bin HOME="$tmp" TMPDIR="$tmp" PPX_GST_REGISTRY="$tmp/registry" "$out/run" "$@"; }
  r haproxy -v > "$tmp/haproxy.log" 2>&1 || { cat "$tmp/haproxy.log"; die "HAProxy does not run from the pack"; }
  sh "$here/personaplex-fleet.sh" config --servers 2 --run-dir "$tmp" > "$tmp/haproxy.cfg"
  r haproxy -c -q -f "$tmp/haproxy.cfg" || die "the pack's HAProxy refuses the fleet's configuration"
  r personaplex-server --help > "$tmp/server.log" 2>&1 || { cat "$tmp/server.log"; die "personaplex-server does not run from the pack"; }
  r personaplex-loadgen --help > "$tmp/loadgen.log" 2>&1 || { cat "$tmp/loadgen.log"; die "personaplex-loadgen does not run from the pack"; }
  echo "fleet-pack.sh: OK: $out ($(sed -n 's/^gstreamer: //p' "$out/MANIFEST.txt"), $(head -1 "$tmp/haproxy.log"))"
fi
