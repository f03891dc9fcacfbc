#!/bin/sh
# Live conversation: microphone in, speakers out, with WebRTC echo cancellation so that the agent does
# not hear itself. Needs a sound card (autoaudiosrc/autoaudiosink: PulseAudio, PipeWire or ALSA);
# headphones work best. Runs until Ctrl-C.
#
#   pipelines/live-mic.sh MODEL_DIR [personaplexduplex properties...]
#
# Launch line:
#   gst-launch-1.0 autoaudiosrc ! audioconvert ! audioresample !
#     audio/x-raw,format=S16LE,rate=48000,channels=1 !
#     webrtcdsp probe=echo echo-cancel=true noise-suppression=true gain-control=false !
#     audioconvert ! audioresample ! audio/x-raw,format=F32LE,rate=24000,channels=1 ! queue !
#     personaplexduplex name=pp model-dir=MODEL_DIR [properties] !
#     audioconvert ! audioresample ! audio/x-raw,format=S16LE,rate=48000,channels=1 !
#     webrtcechoprobe name=echo ! audioconvert ! autoaudiosink
#     pp.text_src ! queue ! fakesink
#
# webrtcdsp runs at 48 kHz (it accepts 8/16/32/48 kHz); the model at 24 kHz. The queue before the
# element lets the capture thread run while a frame is computed. The element reports one frame
# (80 ms) plus processing-deadline (automatic: 80 ms on its new engine, more if its steps grow)
# of latency, so the sink plays each answer that long after its input was captured.
# Without a sound card, PPX_AUDIO_SRC and PPX_AUDIO_SINK replace the two ends, e.g.
#   PPX_AUDIO_SRC="audiotestsrc is-live=true num-buffers=300" PPX_AUDIO_SINK="fakesink sync=true"
set -eu
. "$(dirname "$0")/common.sh"

ppx_start "$0" 1 "$@"
model=$1
shift
audio_src=${PPX_AUDIO_SRC:-autoaudiosrc}
audio_sink=${PPX_AUDIO_SINK:-autoaudiosink}

# $audio_src and $audio_sink are launch-line fragments: word splitting is wanted
# shellcheck disable=SC2086
exec gst-launch-1.0 -e ${PPX_VERBOSE:+-m} \
  $audio_src ! audioconvert ! audioresample ! \
  audio/x-raw,format=S16LE,rate=48000,channels=1 ! \
  webrtcdsp probe=echo echo-cancel=true noise-suppression=true gain-control=false ! \
  audioconvert ! audioresample ! audio/x-raw,format=F32LE,rate=24000,channels=1 ! queue ! \
  personaplexduplex name=pp model-dir="$model" "$@" ! \
  audioconvert ! audioresample ! audio/x-raw,format=S16LE,rate=48000,channels=1 ! \
  webrtcechoprobe name=echo ! audioconvert ! $audio_sink \
  pp.text_src ! queue ! fakesink
