#!/bin/sh
# RTP/Opus conversation server: receives the user's voice as Opus over RTP (UDP), answers with the
# agent's voice as Opus over RTP. One conversation per server; runs until killed.
#
#   pipelines/rtp-server.sh MODEL_DIR [personaplexduplex properties...]
#
# Ports (environment): PPX_RTP_RECV_PORT (default 5004) where the user's audio arrives,
# PPX_RTP_SEND_HOST (127.0.0.1) and PPX_RTP_SEND_PORT (5006) where the answer goes.
#
# Launch line:
#   gst-launch-1.0 udpsrc port=5004
#       caps="application/x-rtp,media=audio,clock-rate=48000,encoding-name=OPUS,payload=96" !
#     rtpjitterbuffer latency=60 do-lost=true ! rtpopusdepay ! opusdec plc=true !
#     audioconvert ! audioresample ! audio/x-raw,format=F32LE,rate=24000,channels=1 !
#     personaplexduplex name=pp model-dir=MODEL_DIR [properties] !
#     audioconvert ! audioresample ! opusenc bitrate=32000 ! rtpopuspay pt=96 !
#     udpsink host=127.0.0.1 port=5006
#     pp.text_src ! queue ! fakesink
#
# Lost packets become GAP events (do-lost) that opusdec conceals; silence in the input keeps the
# model's 80 ms clock running. Pair it with pipelines/rtp-client.sh.
set -eu
. "$(dirname "$0")/common.sh"

ppx_start "$0" 1 "$@"
model=$1
shift
recv_port=${PPX_RTP_RECV_PORT:-5004}
send_host=${PPX_RTP_SEND_HOST:-127.0.0.1}
send_port=${PPX_RTP_SEND_PORT:-5006}

exec gst-launch-1.0 -e ${PPX_VERBOSE:+-m} \
  udpsrc port="$recv_port" \
    caps="application/x-rtp,media=audio,clock-rate=48000,encoding-name=OPUS,payload=96" ! \
  rtpjitterbuffer latency=60 do-lost=true ! rtpopusdepay ! opusdec plc=true ! \
  audioconvert ! audioresample ! audio/x-raw,format=F32LE,rate=24000,channels=1 ! \
  personaplexduplex name=pp model-dir="$model" "$@" ! \
  audioconvert ! audioresample ! opusenc bitrate=32000 ! rtpopuspay pt=96 ! \
  udpsink host="$send_host" port="$send_port" \
  pp.text_src ! queue ! fakesink
