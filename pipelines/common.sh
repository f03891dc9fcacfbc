# Sourced by the pipeline scripts: finds the plugin, checks the model directory, runs a file-to-file
# conversation.
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

# ppx_start SCRIPT N "$@": the start of a pipeline script taking MODEL_DIR and N - 1 more arguments. With
# fewer than N arguments, prints SCRIPT's usage (the comment lines after the #! line, up to the first other
# line, without the '# ') and exits 2. Then checks the model directory and, for a file-to-file script
# (N >= 3: MODEL_DIR IN OUT), that its input is readable, and finds the plugin.
ppx_start () {
  script=$1 n=$2
  shift 2
  if [ $# -lt "$n" ]; then
    sed -n '2,$ { /^#/!q; s/^# \{0,1\}//p; }' "$script"
    exit 2
  fi
  ppx_check_model "$1"
  if [ "$n" -ge 3 ] && [ ! -r "$2" ]; then
    echo "input '$2' not readable" >&2
    exit 1
  fi
  ppx_find_plugin
}

# ppx_file_conversation SCRIPT DECODE ENCODE MODEL_DIR IN OUT [properties...]: a conversation file to
# file (SCRIPT's usage when an argument is missing): IN through the element chain DECODE, converted to the
# model's 24 kHz mono F32, personaplexduplex with the properties, converted, through the chain ENCODE to OUT;
# the text pad to a fakesink. DECODE and ENCODE are launch-line fragments (no paths): split into words.
ppx_file_conversation () {
  script=$1 decode=$2 encode=$3
  shift 3
  ppx_start "$script" 3 "$@"
  model=$1 in=$2 out=$3
  shift 3
  # shellcheck disable=SC2086
  exec gst-launch-1.0 -e ${PPX_VERBOSE:+-m} \
    filesrc location="$in" ! $decode ! audioconvert ! audioresample ! \
    audio/x-raw,format=F32LE,rate=24000,channels=1 ! \
    personaplexduplex name=pp model-dir="$model" "$@" ! \
    audioconvert ! $encode ! filesink location="$out" \
    pp.text_src ! queue ! fakesink
}
