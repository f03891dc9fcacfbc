#!/bin/sh
# Packs a GStreamer runtime with the personaplexduplex plugin, for a GPU machine that has the NVIDIA driver
# but no GStreamer (the lent GPU machines: no -dev packages, no network). Like device-pack.sh does for the
# CUDA tests, it copies this machine's binaries and every shared library they load except the C library
# itself (libc, libm, libpthread, libdl, librt, ld-linux: the target's newer glibc runs them).
#
#   scripts/device/device-pack-gst.sh [--allow-no-cuda] [--no-check] BUILD_DIR OUT_DIR
#
# OUT_DIR (e.g. build-devpack-gst, ignored by .gitignore's build-*/) gets
#   bin/      gst-launch-1.0, gst-inspect-1.0, personaplex-live-bench, personaplex-make-model,
#             personaplex-bench (ours with their debug info stripped)
#   libexec/  gst-plugin-scanner
#   plugins/  libgstpersonaplex.so from BUILD_DIR/gst and the system plugins the live runs need:
#             coreelements (queue, fakesink, filesrc, filesink, identity, tee), audiotestsrc, audioconvert,
#             audioresample, wavparse, wavenc, app (appsrc/appsink), level; PPX_PACK_EXTRA_PLUGINS="opus rtp"
#             adds libgstopus.so, libgstrtp.so, ...
#   lib/      the shared libraries all of the above need (ldd), glibc's own excluded
#   run       the wrapper: `OUT_DIR/run PROGRAM ARGS...` runs a program with only the pack's GStreamer
#             (LD_LIBRARY_PATH, GST_PLUGIN_SYSTEM_PATH, GST_PLUGIN_SCANNER, a registry in $TMPDIR or /tmp)
#   check.sh  `sh OUT_DIR/check.sh [MODEL_DIR]`: proves the pack works on its own (below)
#   MANIFEST.txt  what was packed, from where, the GStreamer version and the newest glibc symbol needed
#
# BUILD_DIR must be configured with CUDA (meson setup BUILD -Dcuda=enabled): the plugin carries the CUDA
# backend (cudart linked statically, only the driver is needed there). --allow-no-cuda packs a CPU-only
# build (the test suite does, on machines without nvcc). After packing, check.sh runs here unless
# --no-check. The size is printed with the repository's tracked files, against the device tool's 64 MiB.
set -eu

allow_no_cuda=0
check=1
while [ $# -gt 0 ]; do
  case $1 in
    --allow-no-cuda) allow_no_cuda=1 ;;
    --no-check) check=0 ;;
    -h|--help) sed -n '2,28p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "device-pack-gst.sh: unknown option $1" >&2; exit 2 ;;
    *) break ;;
  esac
  shift
done
if [ $# -ne 2 ]; then
  echo "usage: scripts/device/device-pack-gst.sh [--allow-no-cuda] [--no-check] BUILD_DIR OUT_DIR" >&2
  exit 2
fi
build=$1
out=$2
src=$(cd "$(dirname "$0")/../.." && pwd)
die () { echo "device-pack-gst.sh: $*" >&2; exit 1; }

plugin=$build/gst/libgstpersonaplex.so
[ -f "$plugin" ] || die "$plugin not found: build BUILD_DIR first (ninja -C $build)"
for t in personaplex-live-bench personaplex-make-model personaplex-bench; do
  [ -x "$build/tools/$t" ] || die "$build/tools/$t not found: build BUILD_DIR first (ninja -C $build)"
done
if grep -q "was built without CUDA" "$plugin"; then
  [ "$allow_no_cuda" = 1 ] || die "$build was configured without CUDA (meson setup $build -Dcuda=enabled), \
or pass --allow-no-cuda for a CPU-only pack"
  echo "device-pack-gst.sh: note: $build has no CUDA backend (CPU only)"
fi
gst_launch=$(command -v gst-launch-1.0) || die "gst-launch-1.0 not found (apt-get install gstreamer1.0-tools)"
gst_inspect=$(command -v gst-inspect-1.0) || die "gst-inspect-1.0 not found"
plugins_dir=$(pkg-config --variable=pluginsdir gstreamer-1.0 2>/dev/null || echo /usr/lib/x86_64-linux-gnu/gstreamer-1.0)
scanner_dir=$(pkg-config --variable=pluginscannerdir gstreamer-1.0 2>/dev/null ||
              echo /usr/lib/x86_64-linux-gnu/gstreamer1.0/gstreamer-1.0)
scanner=$scanner_dir/gst-plugin-scanner
[ -x "$scanner" ] || die "$scanner not found"

case $out in /|"$src"|"$src/") die "refusing to use $out as the output folder" ;; esac
rm -rf "$out"
mkdir -p "$out/bin" "$out/libexec" "$out/plugins" "$out/lib" "$out/gio-modules"
cp "$gst_launch" "$gst_inspect" "$out/bin/"
cp "$scanner" "$out/libexec/"
for t in personaplex-live-bench personaplex-make-model personaplex-bench; do
  cp "$build/tools/$t" "$out/bin/"
done
cp "$plugin" "$out/plugins/"
for p in coreelements audiotestsrc audioconvert audioresample wavparse wavenc app level ${PPX_PACK_EXTRA_PLUGINS:-}; do
  [ -f "$plugins_dir/libgst$p.so" ] || die "$plugins_dir/libgst$p.so not found (GStreamer plugin '$p')"
  cp "$plugins_dir/libgst$p.so" "$out/plugins/"
done
if command -v strip >/dev/null; then
  strip --strip-debug "$out/plugins/libgstpersonaplex.so" "$out"/bin/personaplex-*
fi

# Every library any of them loads, except glibc's own (the target's must be used: it matches its kernel
# and its ld.so). ldd lists the whole closure of each file.
for f in "$out"/bin/* "$out"/libexec/* "$out"/plugins/*; do
  ldd "$f" > "$out/ldd.tmp" || die "ldd $f failed"
  if grep -q "not found" "$out/ldd.tmp"; then
    die "$f needs a library that is not installed here: $(grep 'not found' "$out/ldd.tmp" | tr -s ' \t' ' ')"
  fi
  awk '$2 == "=>" && $3 ~ /^\// {print $3}' "$out/ldd.tmp" | while read -r lib; do
    case $(basename "$lib") in
      libc.so.*|libm.so.*|libpthread.so.*|libdl.so.*|librt.so.*|ld-linux*|libcuda.so*|libnvidia-*) ;;
      *) [ -e "$out/lib/$(basename "$lib")" ] || cp -L "$lib" "$out/lib/" ;;
    esac
  done
done
rm -f "$out/ldd.tmp"

cat > "$out/run" <<'EOF'
#!/bin/sh
# Runs PROGRAM (one of bin/, or any command) with this pack's GStreamer only: its libraries first on
# LD_LIBRARY_PATH, its plugins as the system plugin path (nothing else is scanned), its plugin scanner, and a
# registry of its own (PPX_GST_REGISTRY, default $TMPDIR or /tmp). Usage: run PROGRAM [ARGS...]
here=$(cd "$(dirname "$0")" && pwd)
export LD_LIBRARY_PATH="$here/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export GST_PLUGIN_SYSTEM_PATH_1_0="$here/plugins"
export GST_PLUGIN_SCANNER_1_0="$here/libexec/gst-plugin-scanner"
export GST_REGISTRY_1_0="${PPX_GST_REGISTRY:-${TMPDIR:-/tmp}/ppx-devpack-gst-$(id -u).registry}"
export GIO_MODULE_DIR="$here/gio-modules"
export PATH="$here/bin:$PATH"
unset GST_PLUGIN_PATH GST_PLUGIN_PATH_1_0 GST_PLUGIN_SYSTEM_PATH GST_PLUGIN_SCANNER GST_REGISTRY
exec "$@"
EOF
chmod +x "$out/run"
cp "$src/scripts/device/device-check-gst.sh" "$out/check.sh"

{
  echo "personaplex GStreamer runtime pack"
  echo "made: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -n), from $build (source $(git -C "$src" rev-parse --short HEAD 2>/dev/null || echo ?))"
  echo "gstreamer: $("$gst_launch" --gst-version 2>/dev/null | head -1)"
  echo "plugins: $(cd "$out/plugins" && ls | tr '\n' ' ')"
  echo "newest glibc symbol needed: $(for f in "$out"/bin/* "$out"/libexec/* "$out"/plugins/* "$out"/lib/*; do
      objdump -T "$f" 2>/dev/null; done | grep -o 'GLIBC_[0-9.]*' | sort -u -t. -k2,2n -k3,3n | tail -1)"
  echo "libraries: $(ls "$out/lib" | wc -l)"
} > "$out/MANIFEST.txt"

pack_bytes=$(du -sb "$out" | cut -f1)
tree_bytes=$(cd "$src" && git ls-files -z 2>/dev/null | xargs -0 cat 2>/dev/null | wc -c)
echo "device-pack-gst.sh: $out: $((pack_bytes / 1048576)) MiB ($(ls "$out/lib" | wc -l) libraries);" \
     "with the tracked files ($((tree_bytes / 1048576)) MiB) $(((pack_bytes + tree_bytes) / 1048576)) MiB of the 64 MiB a device call carries"
[ $((pack_bytes + tree_bytes)) -lt $((60 * 1048576)) ] || echo "device-pack-gst.sh: WARNING: over 60 MiB" >&2
if [ "$check" = 1 ]; then
  sh "$out/check.sh"
fi
