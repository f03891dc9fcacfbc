# Sourced by the pipeline scripts: finds the plugin and checks the model directory.
# If personaplexduplex is not already visible to GStreamer, the build tree next to this checkout
# (../build/gst, or $PPX_BUILD_DIR/gst) is added to GST_PLUGIN_PATH.

ppx_find_plugin () {
  if gst-inspect-1.0 personaplexduplex >/dev/null 2>&1; then
    return 0
  fi
  build_dir=${PPX_BUILD_DIR:-$(dirname "$0")/../build}
  if [ -e "$build_dir/gst/libgstpersonaplex.so" ]; then
    GST_PLUGIN_PATH="$build_dir/gst${GST_PLUGIN_PATH:+:$GST_PLUGIN_PATH}"
    export GST_PLUGIN_PATH
  fi
  if ! gst-inspect-1.0 personaplexduplex >/dev/null 2>&1; then
    echo "personaplexduplex not found: build the project and set GST_PLUGIN_PATH to build/gst" >&2
    exit 1
  fi
}

ppx_check_model () {
  if [ ! -d "$1" ]; then
    echo "model directory '$1' not found" >&2
    exit 1
  fi
}

# ppx_need_args SCRIPT N LAST "$@": with fewer than N arguments, prints SCRIPT's usage (its comment lines 2
# to LAST, without the '# ') and exits 2.
ppx_need_args () {
  script=$1 n=$2 last=$3
  shift 3
  if [ $# -lt "$n" ]; then
    sed -n "2,${last}p" "$script" | sed 's/^# \{0,1\}//'
    exit 2
  fi
}

# ppx_prepare MODEL_DIR [INPUT]: checks the model directory and, when given, that the input is readable,
# then finds the plugin.
ppx_prepare () {
  ppx_check_model "$1"
  if [ $# -gt 1 ] && [ ! -r "$2" ]; then
    echo "input '$2' not readable" >&2
    exit 1
  fi
  ppx_find_plugin
}
