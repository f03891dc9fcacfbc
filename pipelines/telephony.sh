#!/bin/sh
# Telephony: 8 kHz G.711 mu-law in and out (what a phone line or a SIP trunk carries). The call
# audio is upsampled to the model's 24 kHz and the answer downsampled back to 8 kHz mu-law.
#
#   pipelines/telephony.sh MODEL_DIR IN.wav OUT.wav [personaplexduplex properties...]
#
# IN.wav: an 8 kHz mu-law WAV. OUT.wav: 8 kHz mu-law WAV, as long as the input.
#
# Launch line:
#   gst-launch-1.0 -e filesrc location=IN.wav ! wavparse ! mulawdec ! audioconvert ! audioresample !
#     audio/x-raw,format=F32LE,rate=24000,channels=1 !
#     personaplexduplex name=pp model-dir=MODEL_DIR [properties] !
#     audioconvert ! audioresample ! audio/x-raw,format=S16LE,rate=8000,channels=1 !
#     mulawenc ! wavenc ! filesink location=OUT.wav
#     pp.text_src ! queue ! fakesink
#
# On a live call the same element chain sits between RTP PCMU elements:
#   udpsrc port=5004 caps="application/x-rtp,media=audio,clock-rate=8000,encoding-name=PCMU,payload=0" !
#     rtpjitterbuffer ! rtppcmudepay ! mulawdec ! audioconvert ! audioresample ! (as above) !
#     mulawenc ! rtppcmupay ! udpsink host=PEER port=5006
set -eu
. "$(dirname "$0")/common.sh"

ppx_file_conversation "$0" "wavparse ! mulawdec" \
  "audioresample ! audio/x-raw,format=S16LE,rate=8000,channels=1 ! mulawenc ! wavenc" "$@"
