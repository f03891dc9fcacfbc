#!/bin/sh
# RTP/Opus conversation client for pipelines/rtp-server.sh: sends IN (a file, played in real time)
# or the microphone (IN = "mic") as Opus over RTP, and records the agent's answer to OUT.wav (or
# plays it, OUT = "speakers"). Stops after SECONDS (default: runs until Ctrl-C).
#
#   pipelines/rtp-client.sh IN|mic OUT.wav|speakers [SECONDS]
#
# Ports (environment): PPX_RTP_SERVER_HOST (127.0.0.1) and PPX_RTP_RECV_PORT (5004) of the server;
# PPX_RTP_SEND_PORT (5006), where the server's answer arrives.
#
# Launch line (file in, WAV out):
#   gst-launch-1.0 -e filesrc location=IN ! decodebin ! audioconvert ! audioresample !
#     audio/x-raw,rate=48000,channels=1 ! opusenc bitrate=32000 ! rtpopuspay pt=96 !
#     udpsink host=127.0.0.1 port=5004
#     udpsrc port=5006
#       caps="application/x-rtp,media=audio,clock-rate=48000,encoding-name=OPUS,payload=96" !
#     rtpjitterbuffer latency=60 ! rtpopusdepay ! opusdec ! audioconvert !
#     audio/x-raw,format=S16LE ! wavenc ! filesink async=false location=OUT.wav
#
# The receiving sink is async=false: it only gets data once the server answers, and the pipeline
# must not wait for it to preroll before it starts sending.
set -eu

if [ $# -lt 2 ]; then
  sed -n '2,23p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
fi
in=$1 out=$2 seconds=${3:-}
server=${PPX_RTP_SERVER_HOST:-127.0.0.1}
server_port=${PPX_RTP_RECV_PORT:-5004}
answer_port=${PPX_RTP_SEND_PORT:-5006}
caps="application/x-rtp,media=audio,clock-rate=48000,encoding-name=OPUS,payload=96"

if [ "$in" = mic ]; then
  source="autoaudiosrc"
else
  [ -r "$in" ] || { echo "input '$in' not readable" >&2; exit 1; }
  source="filesrc location=$in ! decodebin"
fi
if [ "$out" = speakers ]; then
  sink="autoaudiosink async=false"
else
  sink="audio/x-raw,format=S16LE ! wavenc ! filesink async=false location=$out"
fi

# $source and $sink are launch-line fragments: word splitting is wanted
# shellcheck disable=SC2086
set -- gst-launch-1.0 -e ${PPX_VERBOSE:+-m} \
  $source ! audioconvert ! audioresample ! audio/x-raw,rate=48000,channels=1 ! \
  opusenc bitrate=32000 ! rtpopuspay pt=96 ! udpsink host="$server" port="$server_port" \
  udpsrc port="$answer_port" caps="$caps" ! \
  rtpjitterbuffer latency=60 ! rtpopusdepay ! opusdec ! audioconvert ! $sink
if [ -n "$seconds" ]; then
  # SIGINT makes gst-launch -e send EOS, so the WAV header is finalized; timeout then exits 124
  status=0
  timeout -s INT -k 10 "$seconds" "$@" || status=$?
  [ "$status" -eq 124 ] && status=0
  exit "$status"
fi
exec "$@"
