#!/bin/sh
# Packs what scripts/device/device-bench.sh runs on a GPU machine into one gzip tarball that fits a device call:
# the test binaries and libraries of an sm_90 build (device-pack.sh), personaplex-bench from it, and
# test-backend-cuda of an sm_80 build (renamed test-backend-cuda-sm80: its compute_80 PTX is what the driver
# compiles on a newer GPU). Multi-architecture builds are ~2.5x larger, too large to carry three of.
# Usage: scripts/device/device-pack-bench.sh BUILD_SM90 BUILD_SM80 OUT.tar.gz
#   (BUILD_SM90: meson setup B -Dcuda-arch=90; BUILD_SM80: meson setup B -Dcuda-arch=80, only
#    tests/test-backend-cuda needs building there). Then on the GPU machine:
#   mkdir -p /tmp/p && tar -xzf OUT.tar.gz -C /tmp/p && sh scripts/device/device-bench.sh /tmp/p/pack
set -eu
sm90=$1
sm80=$2
tarball=$3
here=$(cd "$(dirname "$0")" && pwd)
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
sh "$here/device-pack.sh" "$sm90" "$stage/pack" > /dev/null
cp "$sm90/tools/personaplex-bench" "$stage/pack/bin/"
cp "$sm80/tests/test-backend-cuda" "$stage/pack/bin/test-backend-cuda-sm80"
mkdir -p "$(dirname "$tarball")"
tar -C "$stage" -czf "$tarball" pack
echo "$tarball: $(du -m "$tarball" | cut -f1) MiB"
