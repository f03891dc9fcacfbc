#!/bin/sh
# Packs what the CUDA tests need on a GPU machine that has the NVIDIA driver but none of this project's
# build dependencies: the test binaries (test-backend-cuda, test-gpu-tick; built here with nvcc), the
# shared libraries they load (all but the C library itself), and the golden tiny model. Usage: kernels/device-pack.sh BUILD_DIR OUT_DIR
# (OUT_DIR must match an ignored pattern, e.g. build-cudarun). Then on the GPU machine:
#   sh OUT_DIR/device-check.sh OUT_DIR
set -eu
build=$1
out=$2
src=$(cd "$(dirname "$0")/.." && pwd)
golden=${PPX_GOLDEN_DIR:-$src/../shared/golden/tiny}
rm -rf "$out"
mkdir -p "$out/bin" "$out/lib" "$out/golden"
for bin in test-backend-cuda test-gpu-tick; do
  [ -f "$build/tests/$bin" ] || continue
  cp "$build/tests/$bin" "$out/bin/"
  ldd "$build/tests/$bin" | awk '$3 ~ /^\// {print $3}' | while read -r lib; do
    case "$(basename "$lib")" in
      libc.so.*|libm.so.*|libpthread.so.*|libdl.so.*|librt.so.*|ld-linux*) ;;
      *) cp -L "$lib" "$out/lib/" ;;
    esac
  done
done
if [ -d "$golden" ]; then
  cp "$golden"/golden.json "$golden"/golden.safetensors "$golden"/model.safetensors "$golden"/mimi.safetensors \
     "$golden"/voice_prompt.pt "$out/golden/"
fi
cp "$src/kernels/device-check.sh" "$out/"
du -sh "$out"
