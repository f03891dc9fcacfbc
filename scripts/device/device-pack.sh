#!/bin/sh
# Packs what the CUDA tests need on a GPU machine that has the NVIDIA driver but none of this project's
# build dependencies: the test binaries (test-backend-cuda, test-gpu-tick and, when built, test-engine;
# built here with nvcc), the shared libraries they load (all but the C library itself), the golden tiny model
# and the speech clips. Usage: scripts/device/device-pack.sh BUILD_DIR OUT_DIR
# (OUT_DIR must match an ignored pattern, e.g. build-cudarun). Then on the GPU machine:
#   sh OUT_DIR/device-check.sh OUT_DIR
set -eu
build=$1
out=$2
src=$(cd "$(dirname "$0")/../.." && pwd)
golden=${PPX_GOLDEN_DIR:-$src/../shared/golden/tiny}
rm -rf "$out"
mkdir -p "$out/bin" "$out/lib" "$out/golden"
# the op tests, the GPU tick's test, and the batched engine's test when they are built
for test in test-backend-cuda test-gpu-tick test-engine; do
  [ -x "$build/tests/$test" ] || continue
  cp "$build/tests/$test" "$out/bin/"
  ldd "$build/tests/$test" | awk '$3 ~ /^\// {print $3}' | while read -r lib; do
    case "$(basename "$lib")" in
      libc.so.*|libm.so.*|libpthread.so.*|libdl.so.*|librt.so.*|ld-linux*) ;;
      *) cp -L "$lib" "$out/lib/" ;;
    esac
  done
done
data=${PPX_DATA_DIR:-$src/../shared/data}
if [ -d "$data" ]; then
  mkdir -p "$out/data"
  cp "$data"/*.wav "$out/data/" 2>/dev/null || true
fi
if [ -d "$golden" ]; then
  cp "$golden"/golden.json "$golden"/golden.safetensors "$golden"/model.safetensors "$golden"/mimi.safetensors \
     "$golden"/voice_prompt.pt "$out/golden/"
fi
cp "$src/scripts/device/device-check.sh" "$out/"
du -sh "$out"
