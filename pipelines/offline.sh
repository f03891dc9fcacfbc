#!/bin/sh
# Offline conversation, file to file: the agent's answer to IN, as a 32-bit float WAV exactly as long
# as the input. Any format GStreamer decodes is accepted; it is converted to 24 kHz mono first.
#
#   pipelines/offline.sh MODEL_DIR IN OUT.wav [personaplexduplex properties...]
#
# Launch line:
#   gst-launch-1.0 -e filesrc location=IN ! decodebin ! audioconvert ! audioresample !
#     audio/x-raw,format=F32LE,rate=24000,channels=1 !
#     personaplexduplex name=pp model-dir=MODEL_DIR [properties] !
#     audioconvert ! audio/x-raw,format=F32LE ! wavenc ! filesink location=OUT.wav
#     pp.text_src ! queue ! fakesink
#
# Example: pipelines/offline.sh /models/personaplex question.wav answer.wav greedy=true \
#            voice-prompt=NATF2 text-prompt="You are a helpful assistant."
# Set PPX_VERBOSE=1 to print the element messages (text pieces, timing) as they are posted.
set -eu
. "$(dirname "$0")/common.sh"

ppx_file_conversation "$0" decodebin "audio/x-raw,format=F32LE ! wavenc" "$@"
