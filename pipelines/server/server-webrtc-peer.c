/* personaplex-server: one browser's WebRTC call (see server-webrtc-peer.h).
 *
 * webrtcbin calls back on its own threads; everything the page or the server must see is handed to
 * the main context as a Delivery holding a reference on the peer, and dropped there when the session
 * was freed meanwhile. */
#define GST_USE_UNSTABLE_API /* webrtc library headers */
#include "server-webrtc-peer.h"

#include <gio/gio.h>
#include <gst/app/app.h>
#include <gst/gst.h>
#include <gst/sdp/sdp.h>
#include <gst/webrtc/webrtc.h>

#include "server-backlog.h"
#include "server-metrics.h"
#include "server-ice.h"
#include "server-model.h"
#include "server-signalling.h"
#include "server-worker.h"

/* One Opus stream each way; 96 is what the offer names, the page answers with it. */
#define RTP_OPUS_CAPS \
  "application/x-rtp,media=audio,encoding-name=OPUS,clock-rate=48000,encoding-params=(string)2,payload=96"
#define RECEIVE_CHAIN \
  "rtpopusdepay ! opusdec plc=true ! audioconvert ! audioresample ! " \
  "audio/x-raw,format=F32LE,rate=24000,channels=1,layout=interleaved ! " \
  "queue name=decoded"
/* The decoded audio waiting for the model beyond this is dropped (server-backlog.h): RTP comes in real time. */
#define RECEIVE_BACKLOG_MS 400
#define SEND_CHAIN \
  "audioconvert ! audioresample ! audio/x-raw,rate=48000 ! opusenc audio-type=voice bitrate=48000 ! " \
  "rtpopuspay pt=96 ! appsink name=rtp-out sync=false async=false"
#define DATA_CHANNEL_LABEL "transcript"
/* A page that leaves within moments of the offer: its pipeline is stopped once ICE gathering is complete, or
 * STOP_SETTLE_MS after the offer. webrtcbin 1.22 stopped while its transports are being set up now and then keeps a
 * TransportReceiveBin (nicesrc, dtls, srtp: 4 fds) alive for ever (issue 25's soak: 4 of 300 sessions that left at
 * once; none of 300 that stayed 300 ms). */
#define STOP_SETTLE_MS 300
#define STOP_CHECK_MS 20

struct _PpxWebrtcPeer {
  guint id;
  const PpxServerOptions *options;
  PpxWebrtcPeerCallbacks callbacks;
  gboolean alive;    /* main thread only: FALSE once ppx_webrtc_peer_stop ran */
  gboolean starting; /* main thread only: the start runs on a worker */
  GSourceFunc stopped;
  gpointer stopped_data;
  GstElement *pipeline;
  GstElement *webrtc;
  GstElement *receive_chain; /* linked to webrtcbin's first audio src pad when it appears */
  GstWebRTCDataChannel *channel;
  guint bus_watch;
  guint n_candidates;
  gboolean start_failed, busy, destroyed;
  gint64 offered_us;       /* main thread: when the offer was asked for (0: not yet) */
  char *start_error;
  gint connected;          /* atomic */
  GMutex audio_lock;       /* the streaming threads write these: */
  gint64 last_audio_us;    /* the last buffer of the page's audio */
  char *first_error;       /* the pipeline's first error, and whether it was the engine's RESOURCE/BUSY */
  gboolean first_busy;
};

typedef enum { DELIVER_SEND, DELIVER_FAILED } DeliveryKind;

typedef struct {
  PpxWebrtcPeer *peer; /* a reference */
  DeliveryKind kind;
  char *text;
} Delivery;

GQuark
ppx_webrtc_peer_error_quark (void)
{
  return g_quark_from_static_string ("ppx-server-peer");
}
#define peer_error_quark ppx_webrtc_peer_error_quark

static PpxWebrtcPeer *
peer_ref (PpxWebrtcPeer *peer)
{
  return g_atomic_rc_box_acquire (peer);
}

static void
peer_clear (PpxWebrtcPeer *peer)
{
  g_clear_object (&peer->channel);
  if (peer->pipeline)
    gst_object_unref (peer->pipeline);
  g_free (peer->start_error);
  g_free (peer->first_error);
  g_mutex_clear (&peer->audio_lock);
}

static void
peer_unref (gpointer peer)
{
  g_atomic_rc_box_release_full (peer, (GDestroyNotify) peer_clear);
}

static gboolean
deliver (gpointer data)
{
  Delivery *d = data;
  if (!d->peer->alive)
    return G_SOURCE_REMOVE;
  if (d->kind == DELIVER_SEND)
    d->peer->callbacks.send (d->text, d->peer->callbacks.user_data);
  else
    d->peer->callbacks.failed (d->text, FALSE, d->peer->callbacks.user_data);
  return G_SOURCE_REMOVE;
}

static void
delivery_free (gpointer data)
{
  Delivery *d = data;
  peer_unref (d->peer);
  g_free (d->text);
  g_free (d);
}

/* From any thread; takes `text`. */
static void
post_to_main (PpxWebrtcPeer *peer, DeliveryKind kind, char *text)
{
  Delivery *d = g_new0 (Delivery, 1);
  d->peer = peer_ref (peer);
  d->kind = kind;
  d->text = text;
  g_main_context_invoke_full (NULL, G_PRIORITY_DEFAULT, deliver, d, delivery_free);
}

/* ---- webrtcbin callbacks (its threads) ---- */

/* webrtcbin's answer to a promise, once it came (NULL when it did not), and the error it holds, if any. */
static const GstStructure *
promise_reply (GstPromise *promise, GError **error)
{
  const GstStructure *reply =
      gst_promise_wait (promise) == GST_PROMISE_RESULT_REPLIED ? gst_promise_get_reply (promise) : NULL;
  if (reply && gst_structure_has_field (reply, "error"))
    gst_structure_get (reply, "error", G_TYPE_ERROR, error, NULL);
  return reply;
}

static void
on_offer_created (GstPromise *promise, gpointer user_data)
{
  PpxWebrtcPeer *peer = user_data;
  GError *e = NULL;
  const GstStructure *reply = promise_reply (promise, &e);
  GstWebRTCSessionDescription *offer = NULL;
  if (e || !reply || !gst_structure_get (reply, "offer", GST_TYPE_WEBRTC_SESSION_DESCRIPTION, &offer, NULL)) {
    post_to_main (peer, DELIVER_FAILED, g_strdup_printf ("creating the offer failed: %s",
                                                         e ? e->message : "no offer"));
    g_clear_error (&e);
    return;
  }
  g_signal_emit_by_name (peer->webrtc, "set-local-description", offer, NULL);
  g_autofree char *sdp = gst_sdp_message_as_text (offer->sdp);
  post_to_main (peer, DELIVER_SEND, ppx_signal_offer_new (sdp));
  gst_webrtc_session_description_free (offer);
}

/* The offer is made once, when the data channel and the audio transceiver both exist. webrtcbin's
 * on-negotiation-needed is not used: it can fire for the transceiver alone, before the data channel
 * is created, and an offer made then has no data channel section. */
static void
create_offer (PpxWebrtcPeer *peer)
{
  GstPromise *promise = gst_promise_new_with_change_func (on_offer_created, peer_ref (peer), peer_unref);
  peer->offered_us = g_get_monotonic_time ();
  g_signal_emit_by_name (peer->webrtc, "create-offer", NULL, promise);
  gst_promise_unref (promise);
}

static void
on_ice_candidate (GstElement *webrtc, guint mline, const char *candidate, gpointer user_data)
{
  post_to_main (user_data, DELIVER_SEND, ppx_signal_ice_new (mline, candidate));
}

static void
on_connection_state (GObject *webrtc, GParamSpec *pspec, gpointer user_data)
{
  PpxWebrtcPeer *peer = user_data;
  GstWebRTCPeerConnectionState state;
  g_object_get (webrtc, "connection-state", &state, NULL);
  GEnumValue *v = g_enum_get_value (g_type_class_peek (GST_TYPE_WEBRTC_PEER_CONNECTION_STATE), state);
  const char *name = v ? v->value_nick : "unknown";
  if (state == GST_WEBRTC_PEER_CONNECTION_STATE_CONNECTED)
    g_atomic_int_set (&peer->connected, 1);
  g_printerr ("personaplex-server: session %u: connection %s\n", peer->id, name);
  post_to_main (peer, DELIVER_SEND, ppx_signal_state_new (name));
}

/* The page's audio arrives (the receive chain's streaming thread): the media timeout starts over. */
static GstPadProbeReturn
on_audio_buffer (GstPad *pad, GstPadProbeInfo *info, gpointer user_data)
{
  PpxWebrtcPeer *peer = user_data;
  g_mutex_lock (&peer->audio_lock);
  peer->last_audio_us = g_get_monotonic_time ();
  g_mutex_unlock (&peer->audio_lock);
  return GST_PAD_PROBE_OK;
}

/* The first incoming audio stream feeds the conversation; anything else is discarded. */
static void
on_pad_added (GstElement *webrtc, GstPad *pad, gpointer user_data)
{
  PpxWebrtcPeer *peer = user_data;
  if (GST_PAD_DIRECTION (pad) != GST_PAD_SRC)
    return;
  g_autoptr (GstPad) sink = gst_element_get_static_pad (peer->receive_chain, "sink");
  g_autoptr (GstCaps) caps = gst_pad_get_current_caps (pad);
  GstStructure *s = caps ? gst_caps_get_structure (caps, 0) : NULL;
  gboolean opus = s && g_strcmp0 (gst_structure_get_string (s, "encoding-name"), "OPUS") == 0;
  if (opus && !gst_pad_is_linked (sink) && gst_pad_link (pad, sink) == GST_PAD_LINK_OK) {
    g_printerr ("personaplex-server: session %u: receiving audio\n", peer->id);
    gst_pad_add_probe (sink, GST_PAD_PROBE_TYPE_BUFFER | GST_PAD_PROBE_TYPE_BUFFER_LIST, on_audio_buffer,
                       peer_ref (peer), peer_unref);
    return;
  }
  GstElement *discard = gst_element_factory_make ("fakesink", NULL);
  g_object_set (discard, "async", FALSE, "sync", FALSE, NULL);
  gst_bin_add (GST_BIN (peer->pipeline), discard);
  gst_element_sync_state_with_parent (discard);
  g_autoptr (GstPad) discard_sink = gst_element_get_static_pad (discard, "sink");
  gst_pad_link (pad, discard_sink);
}

static void
on_remote_description_set (GstPromise *promise, gpointer user_data)
{
  PpxWebrtcPeer *peer = user_data;
  GError *e = NULL;
  if (promise_reply (promise, &e) && e) {
    g_printerr ("personaplex-server: session %u: the answer was refused: %s\n", peer->id, e->message);
    g_autofree char *msg = g_strdup_printf ("the answer was refused: %s", e->message);
    post_to_main (peer, DELIVER_SEND, ppx_signal_error_new (msg));
    g_error_free (e);
  }
}

/* ---- bus (main thread) ---- */

static void
send_on_channel (PpxWebrtcPeer *peer, const char *json)
{
  GstWebRTCDataChannelState state = GST_WEBRTC_DATA_CHANNEL_STATE_CLOSED;
  g_object_get (peer->channel, "ready-state", &state, NULL);
  if (state != GST_WEBRTC_DATA_CHANNEL_STATE_OPEN)
    return;
  g_autoptr (GError) e = NULL;
  if (!gst_webrtc_data_channel_send_string_full (peer->channel, json, &e))
    g_printerr ("personaplex-server: session %u: data channel: %s\n", peer->id, e->message);
}

static void
forward_element_message (PpxWebrtcPeer *peer, const GstStructure *s)
{
  if (gst_structure_has_name (s, "personaplex-text")) {
    const char *text = gst_structure_get_string (s, "text");
    guint64 frame = 0;
    gst_structure_get_uint64 (s, "frame", &frame);
    if (text) {
      g_autofree char *json = ppx_signal_text_new (text, frame * 0.08);
      send_on_channel (peer, json);
    }
  } else if (gst_structure_has_name (s, "personaplex-stats")) {
    guint64 frames = 0, overruns = 0;
    double mean = 0;
    guint users = 0, batch = 0;
    gst_structure_get (s, "frames", G_TYPE_UINT64, &frames, "mean-step-ms", G_TYPE_DOUBLE, &mean,
                       "overruns", G_TYPE_UINT64, &overruns, "model-users", G_TYPE_UINT, &users, "batch-size",
                       G_TYPE_UINT, &batch, NULL);
    g_autofree char *json = ppx_signal_stats_new (frames, mean, overruns, users, batch);
    send_on_channel (peer, json);
  }
}

static gboolean
on_bus_message (GstBus *bus, GstMessage *msg, gpointer user_data)
{
  PpxWebrtcPeer *peer = user_data;
  if (!peer->alive)
    return G_SOURCE_REMOVE;
  switch (GST_MESSAGE_TYPE (msg)) {
    case GST_MESSAGE_ERROR: {
      g_autoptr (GError) e = NULL;
      g_autofree char *debug = NULL;
      gst_message_parse_error (msg, &e, &debug);
      g_autofree char *text = g_strdup_printf ("%s: %s", GST_OBJECT_NAME (GST_MESSAGE_SRC (msg)), e->message);
      g_printerr ("personaplex-server: session %u: error: %s (%s)\n", peer->id, text, debug ? debug : "");
      if (!peer->starting) /* an error of the start is the start's answer */
        peer->callbacks.failed (text, FALSE, peer->callbacks.user_data);
      break;
    }
    case GST_MESSAGE_WARNING: {
      g_autoptr (GError) e = NULL;
      gst_message_parse_warning (msg, &e, NULL);
      g_printerr ("personaplex-server: session %u: warning: %s: %s\n", peer->id,
                  GST_OBJECT_NAME (GST_MESSAGE_SRC (msg)), e->message);
      break;
    }
    case GST_MESSAGE_ELEMENT:
      forward_element_message (peer, gst_message_get_structure (msg));
      break;
    default:
      break;
  }
  return G_SOURCE_CONTINUE;
}

/* On the thread that posts: the first error (the start's answer). */
static GstBusSyncReply
on_bus_sync (GstBus *bus, GstMessage *msg, gpointer user_data)
{
  PpxWebrtcPeer *peer = user_data;
  if (GST_MESSAGE_TYPE (msg) == GST_MESSAGE_ERROR) {
    g_autoptr (GError) e = NULL;
    gst_message_parse_error (msg, &e, NULL);
    ppx_server_keep_first_error (&peer->audio_lock, &peer->first_error, &peer->first_busy, e, e->message);
  }
  return GST_BUS_PASS;
}

/* ---- building ---- */

static GstElement *
parse_chain (const char *description, const char *name, GError **error)
{
  GstElement *bin = gst_parse_bin_from_description_full (description, TRUE, NULL, GST_PARSE_FLAG_FATAL_ERRORS,
                                                         error);
  if (bin)
    gst_object_set_name (GST_OBJECT (bin), name);
  return bin;
}

/* The agent's RTP goes from the send chain's appsink to an appsrc in front of webrtcbin: linking the
 * chain to webrtcbin directly would close a loop in the pipeline graph (webrtcbin -> ... -> webrtcbin),
 * which GStreamer cannot order for state changes.
 * Pacing (docs/server.md, "Pacing"): webrtcbin 1.22 sends RTP as it comes (its nicesinks do not sync: basesink logs
 * "sync disabled" for every packet), so a tick's 80 ms frame would leave as a burst of four 20 ms packets. A
 * clocksync (sync-to-first: the first packet sets the call's clock) releases each packet at its timestamp on that
 * clock instead, one every 20 ms; a packet already late goes at once. The RTP timestamps were steady before (they
 * follow the audio's timestamps), so the browser's jitter buffer, which plays by them, absorbs a late tick itself:
 * no playout delay is added here. The spacing is counted in personaplex_answer_send_interval_seconds. */
/* clocksync's src (the appsrc's streaming thread): the interval since the call's previous RTP packet. */
static GstPadProbeReturn
on_rtp_out (GstPad *pad, GstPadProbeInfo *info, gpointer user_data)
{
  gint64 *last_us = user_data, now = g_get_monotonic_time ();
  const double stages[PPX_PAGE_STAGES] = {-1, -1, -1};
  ppx_metrics_answer_page (PPX_PROTO_WEBRTC, *last_us ? (double) (now - *last_us) / G_USEC_PER_SEC : -1, stages);
  *last_us = now;
  return GST_PAD_PROBE_OK;
}

static GstFlowReturn
forward_rtp (GstAppSink *sink, gpointer user_data)
{
  GstSample *sample = gst_app_sink_pull_sample (sink);
  if (!sample)
    return GST_FLOW_EOS;
  GstFlowReturn ret = gst_app_src_push_sample (GST_APP_SRC (user_data), sample);
  gst_sample_unref (sample);
  return ret == GST_FLOW_FLUSHING ? ret : GST_FLOW_OK;
}

/* The send transceiver: sendrecv Opus, so that the offer has one audio section the page answers. */
static gboolean
link_send_chain (PpxWebrtcPeer *peer, GstElement *send_chain, GError **error)
{
  GstElement *rtp_in = gst_element_factory_make ("appsrc", "rtp-in");
  g_object_set (rtp_in, "is-live", TRUE, "format", GST_FORMAT_TIME, "max-time", (guint64) GST_SECOND, NULL);
  gst_util_set_object_arg (G_OBJECT (rtp_in), "leaky-type", "downstream");
  gst_bin_add (GST_BIN (peer->pipeline), rtp_in);
  GstElement *pacer = gst_element_factory_make ("clocksync", "rtp-pacer");
  if (!pacer) {
    g_set_error (error, peer_error_quark (), 0, "GStreamer element clocksync not found (GStreamer core >= 1.18)");
    return FALSE;
  }
  g_object_set (pacer, "sync-to-first", TRUE, NULL);
  gst_bin_add (GST_BIN (peer->pipeline), pacer);
  g_autoptr (GstPad) pacer_src = gst_element_get_static_pad (pacer, "src");
  gst_pad_add_probe (pacer_src, GST_PAD_PROBE_TYPE_BUFFER, on_rtp_out, g_new0 (gint64, 1), g_free);
  if (!gst_element_link (rtp_in, pacer)) {
    g_set_error (error, peer_error_quark (), 0, "linking the agent's RTP to its pacer failed");
    return FALSE;
  }
  g_autoptr (GstElement) rtp_out = gst_bin_get_by_name (GST_BIN (send_chain), "rtp-out");
  GstAppSinkCallbacks callbacks = {.new_sample = forward_rtp};
  gst_app_sink_set_callbacks (GST_APP_SINK (rtp_out), &callbacks, rtp_in, NULL);

  GstPad *sink = gst_element_request_pad_simple (peer->webrtc, "sink_%u");
  g_autoptr (GstPad) src = gst_element_get_static_pad (pacer, "src");
  if (!sink || gst_pad_link (src, sink) != GST_PAD_LINK_OK) {
    g_set_error (error, peer_error_quark (), 0, "linking the agent's RTP to webrtcbin failed");
    if (sink)
      gst_object_unref (sink);
    return FALSE;
  }
  GstWebRTCRTPTransceiver *transceiver = NULL;
  g_object_get (sink, "transceiver", &transceiver, NULL);
  g_autoptr (GstCaps) caps = gst_caps_from_string (RTP_OPUS_CAPS);
  g_object_set (transceiver, "direction", GST_WEBRTC_RTP_TRANSCEIVER_DIRECTION_SENDRECV, "codec-preferences", caps,
                NULL);
  gst_object_unref (transceiver);
  gst_object_unref (sink); /* webrtcbin keeps its request pad */
  return TRUE;
}

static gboolean
build_pipeline (PpxWebrtcPeer *peer, const PpxServerOptions *o, const PpxCallParams *params, GError **error)
{
  g_autofree char *name = g_strdup_printf ("session-%u", peer->id);
  peer->pipeline = gst_pipeline_new (name);
  peer->webrtc = gst_element_factory_make ("webrtcbin", "webrtc");
  if (!peer->webrtc) {
    g_set_error (error, peer_error_quark (), 0, "GStreamer element webrtcbin not found (gstreamer1.0-plugins-bad)");
    return FALSE;
  }
  g_object_set (peer->webrtc, "bundle-policy", GST_WEBRTC_BUNDLE_POLICY_MAX_BUNDLE, NULL);
  gst_bin_add (GST_BIN (peer->pipeline), peer->webrtc);
  ppx_server_ice_configure (peer->webrtc, o->address);

  GstElement *duplex, *send_chain, *text_sink;
  if (!(peer->receive_chain = parse_chain (RECEIVE_CHAIN, "receive", error)))
    return FALSE;
  gst_bin_add (GST_BIN (peer->pipeline), peer->receive_chain);
  g_autoptr (GstElement) decoded = gst_bin_get_by_name (GST_BIN (peer->receive_chain), "decoded");
  ppx_backlog_unref (ppx_backlog_attach (decoded, PPX_PROTO_WEBRTC, peer->id, RECEIVE_BACKLOG_MS));
  if (!(duplex = ppx_server_duplex_new (o, params, "duplex", error)))
    return FALSE;
  gst_bin_add (GST_BIN (peer->pipeline), duplex);
  if (!(send_chain = parse_chain (SEND_CHAIN, "send", error)))
    return FALSE;
  gst_bin_add (GST_BIN (peer->pipeline), send_chain);
  /* Text pieces reach the page through the bus messages; the pad itself just needs a consumer. */
  text_sink = gst_element_factory_make ("fakesink", "text-sink");
  g_object_set (text_sink, "async", FALSE, "sync", FALSE, NULL);
  gst_bin_add (GST_BIN (peer->pipeline), text_sink);
  if (!gst_element_link (peer->receive_chain, duplex) || !gst_element_link_pads (duplex, "src", send_chain, "sink") ||
      !gst_element_link_pads (duplex, "text_src", text_sink, "sink")) {
    g_set_error (error, peer_error_quark (), 0, "linking personaplexduplex failed");
    return FALSE;
  }
  if (!link_send_chain (peer, send_chain, error))
    return FALSE;

  g_signal_connect (peer->webrtc, "on-ice-candidate", G_CALLBACK (on_ice_candidate), peer);
  g_signal_connect (peer->webrtc, "notify::connection-state", G_CALLBACK (on_connection_state), peer);
  g_signal_connect (peer->webrtc, "pad-added", G_CALLBACK (on_pad_added), peer);
  g_autoptr (GstBus) bus = gst_element_get_bus (peer->pipeline);
  gst_bus_set_sync_handler (bus, on_bus_sync, peer_ref (peer), peer_unref);
  peer->bus_watch = gst_bus_add_watch_full (bus, G_PRIORITY_DEFAULT, on_bus_message, peer_ref (peer), peer_unref);
  return TRUE;
}

/* ---- starting and stopping (the state changes run on a worker) ---- */

/* The model is loaded (or shared) and the prompts run in READY->PAUSED; a failure there carries the element's
 * message (RESOURCE/BUSY when the engine holds max-sessions conversations already). */
static void
start_on_worker (gpointer data, gpointer unused)
{
  PpxWebrtcPeer *peer = data;
  if (gst_element_set_state (peer->pipeline, GST_STATE_PLAYING) != GST_STATE_CHANGE_FAILURE)
    return;
  g_mutex_lock (&peer->audio_lock);
  peer->busy = peer->first_busy;
  peer->start_error = g_strdup_printf ("the session's pipeline could not start: %s",
                                       peer->first_error ? peer->first_error : "state change failed");
  g_mutex_unlock (&peer->audio_lock);
  peer->start_failed = TRUE;
}

static void stop_after_start (PpxWebrtcPeer *peer);

static gboolean
on_started (gpointer data)
{
  PpxWebrtcPeer *peer = data;
  peer->starting = FALSE;
  if (peer->destroyed)
    return G_SOURCE_REMOVE;
  if (!peer->alive)
    stop_after_start (peer);
  else if (peer->start_failed)
    peer->callbacks.failed (peer->start_error, peer->busy, peer->callbacks.user_data);
  else {
    peer->callbacks.started (peer->callbacks.user_data);
    if (peer->alive)
      create_offer (peer);
  }
  return G_SOURCE_REMOVE;
}

static void
stop_on_worker (gpointer data, gpointer unused)
{
  PpxWebrtcPeer *peer = data;
  g_autofree char *what = g_strdup_printf ("session %u", peer->id);
  ppx_server_duplex_log_drift (peer->pipeline, what);
  gst_element_set_state (peer->pipeline, GST_STATE_NULL);
}

static gboolean
on_stopped (gpointer data)
{
  PpxWebrtcPeer *peer = data;
  if (peer->stopped)
    peer->stopped (peer->stopped_data);
  return G_SOURCE_REMOVE;
}

static void
remove_watches (PpxWebrtcPeer *peer)
{
  if (!peer->pipeline)
    return;
  g_autoptr (GstBus) bus = gst_element_get_bus (peer->pipeline);
  if (peer->bus_watch) {
    gst_bus_remove_watch (bus);
    peer->bus_watch = 0;
  }
  gst_bus_set_sync_handler (bus, NULL, NULL, NULL);
}

/* TRUE while the page left too soon after the offer for webrtcbin to be stopped safely (STOP_SETTLE_MS above). */
static gboolean
too_soon (PpxWebrtcPeer *peer)
{
  if (!peer->offered_us || !peer->webrtc)
    return FALSE;
  gint64 since_ms = (g_get_monotonic_time () - peer->offered_us) / 1000;
  GstWebRTCICEGatheringState gathering = GST_WEBRTC_ICE_GATHERING_STATE_NEW;
  g_object_get (peer->webrtc, "ice-gathering-state", &gathering, NULL);
  return since_ms < STOP_SETTLE_MS && gathering != GST_WEBRTC_ICE_GATHERING_STATE_COMPLETE;
}

static gboolean
on_stop_wait (gpointer data)
{
  PpxWebrtcPeer *peer = data;
  if (too_soon (peer))
    return G_SOURCE_CONTINUE;
  peer->offered_us = 0;
  stop_after_start (peer);
  return G_SOURCE_REMOVE;
}

/* Stops the pipeline on a worker; the last reference goes with the job. */
static void
stop_after_start (PpxWebrtcPeer *peer)
{
  if (too_soon (peer)) {
    g_timeout_add (STOP_CHECK_MS, on_stop_wait, peer);
    return;
  }
  if (peer->pipeline)
    ppx_server_work (stop_on_worker, on_stopped, peer, peer_unref);
  else {
    on_stopped (peer);
    peer_unref (peer);
  }
}

PpxWebrtcPeer *
ppx_webrtc_peer_new (guint id, const PpxServerOptions *options, const PpxCallParams *params,
                     const PpxWebrtcPeerCallbacks *callbacks, GError **error)
{
  PpxWebrtcPeer *peer = g_atomic_rc_box_new0 (PpxWebrtcPeer);
  peer->id = id;
  peer->options = options;
  peer->callbacks = *callbacks;
  peer->alive = TRUE;
  g_mutex_init (&peer->audio_lock);
  peer->last_audio_us = g_get_monotonic_time ();
  if (!build_pipeline (peer, options, params, error) ||
      gst_element_set_state (peer->pipeline, GST_STATE_READY) == GST_STATE_CHANGE_FAILURE) {
    if (error && !*error)
      g_set_error (error, peer_error_quark (), 0, "the session's pipeline could not start");
    ppx_webrtc_peer_destroy (peer);
    return NULL;
  }
  g_signal_emit_by_name (peer->webrtc, "create-data-channel", DATA_CHANNEL_LABEL, NULL, &peer->channel);
  if (!peer->channel) {
    g_set_error (error, peer_error_quark (), 0, "webrtcbin could not create the data channel");
    ppx_webrtc_peer_destroy (peer);
    return NULL;
  }
  peer->starting = TRUE;
  ppx_server_work (start_on_worker, on_started, peer_ref (peer), peer_unref);
  return peer;
}

gboolean
ppx_webrtc_peer_set_answer (PpxWebrtcPeer *peer, const char *sdp, GError **error)
{
  GstSDPMessage *message = NULL;
  if (gst_sdp_message_new_from_text (sdp, &message) != GST_SDP_OK || gst_sdp_message_medias_len (message) == 0) {
    g_set_error (error, peer_error_quark (), 0, "the answer is not a session description with media");
    if (message)
      gst_sdp_message_free (message);
    return FALSE;
  }
  GstWebRTCSessionDescription *answer = gst_webrtc_session_description_new (GST_WEBRTC_SDP_TYPE_ANSWER, message);
  GstPromise *promise = gst_promise_new_with_change_func (on_remote_description_set, peer_ref (peer), peer_unref);
  g_signal_emit_by_name (peer->webrtc, "set-remote-description", answer, promise);
  gst_promise_unref (promise);
  gst_webrtc_session_description_free (answer);
  return TRUE;
}

/* "candidate:F C udp PRIO ADDRESS PORT typ ..." -> ADDRESS is the 5th field. */
static gboolean
candidate_has_hostname (const char *candidate)
{
  g_auto (GStrv) fields = g_strsplit (candidate, " ", 6);
  if (g_strv_length (fields) < 5)
    return FALSE;
  g_autoptr (GInetAddress) inet = g_inet_address_new_from_string (fields[4]);
  return inet == NULL;
}

gboolean
ppx_webrtc_peer_add_candidate (PpxWebrtcPeer *peer, guint mline, const char *candidate, GError **error)
{
  if (!*candidate)
    return TRUE;
  if (peer->n_candidates >= (guint) peer->options->max_ice_candidates) {
    g_set_error (error, peer_error_quark (), 0, "more than %d ICE candidates: ignored",
                 peer->options->max_ice_candidates);
    return FALSE;
  }
  peer->n_candidates++;
  /* An mDNS name (".local") would make the resolver query the network; only IP literals are used. */
  if (candidate_has_hostname (candidate)) {
    g_set_error (error, peer_error_quark (), 0, "ICE candidate with a host name (mDNS) ignored: only IP addresses "
                 "are used");
    return FALSE;
  }
  g_signal_emit_by_name (peer->webrtc, "add-ice-candidate", mline, candidate);
  return TRUE;
}

gint64
ppx_webrtc_peer_audio_idle_us (PpxWebrtcPeer *peer)
{
  g_mutex_lock (&peer->audio_lock);
  gint64 last = peer->last_audio_us;
  g_mutex_unlock (&peer->audio_lock);
  return g_get_monotonic_time () - last;
}

gboolean
ppx_webrtc_peer_connected (PpxWebrtcPeer *peer)
{
  return g_atomic_int_get (&peer->connected) != 0;
}

static void
silence (PpxWebrtcPeer *peer)
{
  peer->alive = FALSE;
  remove_watches (peer);
  if (peer->webrtc)
    g_signal_handlers_disconnect_by_data (peer->webrtc, peer);
}

void
ppx_webrtc_peer_stop (PpxWebrtcPeer *peer, GSourceFunc stopped, gpointer data)
{
  silence (peer);
  peer->stopped = stopped;
  peer->stopped_data = data;
  if (!peer->starting)
    stop_after_start (peer); /* else when the start is over (on_started) */
}

void
ppx_webrtc_peer_destroy (PpxWebrtcPeer *peer)
{
  if (!peer)
    return;
  silence (peer);
  peer->destroyed = TRUE;
  if (peer->pipeline)
    gst_element_set_state (peer->pipeline, GST_STATE_NULL);
  peer_unref (peer);
}
