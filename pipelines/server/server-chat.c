/* personaplex-server: one /api/chat call (server-chat.h).
 *
 * Threads: the main thread owns the call; GStreamer's streaming threads (the answer's appsink, the bus's sync
 * handler) hand what they produce to the main context as a Delivery holding a reference, dropped there when the
 * call ended meanwhile; state changes run on the worker pool (server-worker.h). */
#include "server-chat.h"

#include "chat-protocol.h"

#include <gst/app/app.h>
#include <string.h>

#include "ogg-page.h"
#include "server-backlog.h"
#include "server-model.h"
#include "server-pacer.h"
#include "server-opus-clock.h"
#include "server-worker.h"
#include "server-ws.h"

/* The client's audio is decoded as it comes; the decoded audio waits for the model in a queue bounded in time
 * (--max-input-backlog, server-backlog.h): beyond it the oldest is dropped and counted, so a call the model falls
 * behind keeps a bounded latency. The Ogg bytes are read no faster than they are decoded: when INPUT_HIGH bytes wait
 * in appsrc (the decoder starved of CPU), the server stops reading the WebSocket, and TCP flow control slows the
 * client down; appsrc asks for more below half of it.
 * capssetter: oggdemux puts the OpusHead's input sample rate in the caps (44100 from a browser whose audio runs
 * at 44.1 kHz, as the reference web client's encoder writes it) and opusdec refuses any rate Opus does not
 * decode at; that field is informational (RFC 7845 5.1), so the caps say 48000, the rate of every Opus stream. */
#define INPUT_HIGH (64 * 1024)
#define RECEIVE_CHAIN \
  "appsrc name=in is-live=true format=bytes caps=application/ogg max-bytes=65536 min-percent=50 ! " \
  "oggdemux ! capssetter caps=audio/x-opus,rate=48000 ! opusdec max-errors=0 ! audioconvert ! audioresample ! " \
  "audio/x-raw,format=F32LE,rate=24000,channels=1,layout=interleaved ! " \
  "queue name=decoded"
/* The Opus packets become Ogg pages here (answer_packet), not in oggmux: oggmux holds each packet until the next
 * one arrives (to know whether it is the last), which would hold every frame's last page for a frame (80 ms). */
#define SEND_CHAIN \
  "audioconvert name=convert ! opusenc frame-size=20 audio-type=voice ! appsink name=out sync=false async=false"
#define PACKETS_PER_PAGE 2
/* A call's audio (by what its packets decode to, server-opus-clock.h) may run this far ahead of what the model took
 * (AHEAD_BOUNDS --max-input-backlog, at least AHEAD_MIN_MS) before the server stops reading its socket: whatever the
 * granule positions say, a client that sends faster than real time is slowed, never buffered (issue 25, defect 6).
 * The 64 KiB of Ogg that may wait in front of the decoder hold 8-20 s of ordinary Opus: a file sent at once is slowed
 * by them and by the queue's bound as before; 2-byte packets of 120 ms (30 s a page) are slowed here. */
#define AHEAD_BOUNDS 6
#define AHEAD_MIN_MS 60000
#define AHEAD_CHECK_MS 100
/* Answer not yet written when a call's audio stops: the client stopped reading (2 s of answer), as it did where
 * fewer bytes wait and the socket took none of them for half the media timeout. */
#define NOT_READING_BYTES (16 * 1024)


typedef enum { JOINING, TALKING, ENDED } ChatState;

typedef struct {
  gint refcount;
  PpxServer *server;
  PpxServerCall *slot; /* NULL once removed */
  guint id;
  char *peer;
  PpxCallParams params;
  PpxWs *ws;
  gboolean ws_pending; /* the upgrade is not complete yet */
  GstElement *pipeline, *appsrc;
  PpxBacklog *backlog; /* the decoded audio waiting for the model */
  PpxOggReader *ogg;   /* checks the client's stream */
  gboolean have_head, input_ended;
  gboolean reading_paused; /* the model is behind this call's input (appsrc full) */
  gboolean ahead_paused;   /* the call's audio runs AHEAD_BOUNDS ahead of what the model took */
  guint ahead_timer;
  guint ahead_logged;
  guint pages;             /* Ogg pages checked */
  guint32 serial;          /* the client's stream's */
  gint64 audio_in_us;      /* the call's audio so far, by its Opus packets */
  gint64 talking_us;       /* the handshake */
  GByteArray *early;   /* audio before the handshake */
  ChatState state;
  gboolean joining, torn_down;
  gint64 last_audio_us;
  guint media_timer;
  char *end_reason;    /* the metrics label of how it ended */
  GMutex lock;         /* first_error: written by the bus's sync handler */
  char *first_error;
  gboolean busy;       /* the engine refused the session (no free slot) */
  /* the answer's Ogg stream: the appsink's streaming thread only */
  guint32 ogg_serial, ogg_sequence;
  GPtrArray *ogg_packets; /* GBytes: packets of the page being filled */
  gint64 ogg_granule;
  gint64 page_granule;    /* the granule position the last page ended at */
  gint64 frame_in_us;     /* when the latest answer frame entered the encoder (its tick's end) */
  PpxPacer *pacer;        /* main thread: the answer pages on their clock */
} Chat;

typedef enum { DELIVER_AUDIO, DELIVER_TEXT, DELIVER_ERROR, DELIVER_BAD_INPUT, DELIVER_EOS, DELIVER_RESUME } DeliveryKind;

typedef struct {
  Chat *chat; /* a reference */
  DeliveryKind kind;
  GBytes *data;
  gint64 duration_us; /* DELIVER_AUDIO: the page's audio (0: a header page) */
  PpxPageTrace trace;
} Delivery;

static void chat_end (Chat *chat, const char *reason, const char *why, gboolean tell_client);
static void update_reading (Chat *chat);

static Chat *
chat_ref (Chat *chat)
{
  g_atomic_int_inc (&chat->refcount);
  return chat;
}

static void
chat_unref (gpointer data)
{
  Chat *chat = data;
  if (!g_atomic_int_dec_and_test (&chat->refcount))
    return;
  ppx_pacer_free (chat->pacer);
  ppx_ws_free (chat->ws);
  if (chat->pipeline)
    gst_object_unref (chat->pipeline);
  if (chat->appsrc)
    gst_object_unref (chat->appsrc);
  ppx_backlog_unref (chat->backlog);
  ppx_ogg_reader_free (chat->ogg);
  g_byte_array_unref (chat->early);
  g_ptr_array_unref (chat->ogg_packets);
  ppx_call_params_clear (&chat->params);
  g_mutex_clear (&chat->lock);
  g_free (chat->first_error);
  g_free (chat->end_reason);
  g_free (chat->peer);
  g_free (chat);
}

/* ---- sending ---- */

static gboolean
send_kind (Chat *chat, guint8 kind, const void *data, gsize len)
{
  if (!chat->ws || !ppx_ws_is_open (chat->ws))
    return FALSE;
  g_autofree guint8 *msg = g_malloc (len + 1);
  msg[0] = kind;
  if (len)
    memcpy (msg + 1, data, len);
  if (ppx_ws_send_binary (chat->ws, msg, len + 1))
    return TRUE;
  if (ppx_ws_end_reason (chat->ws))
    chat_end (chat, ppx_ws_end_label (chat->ws), ppx_ws_end_reason (chat->ws), FALSE);
  return FALSE;
}

/* The pacer's: FALSE once the call ended (a page the WebSocket could not take before the upgrade is dropped). */
static gboolean
pacer_send (GBytes *page, gpointer user_data)
{
  Chat *chat = user_data;
  if (chat->state != TALKING)
    return FALSE;
  gsize len;
  const void *bytes = g_bytes_get_data (page, &len);
  send_kind (chat, PPX_CHAT_AUDIO, bytes, len);
  return chat->state == TALKING;
}

/* Every page before the client's end of stream was sent: the call ends normally. */
static void
on_drained (gpointer user_data)
{
  chat_end (user_data, "end_of_stream", "the client's audio ended (Ogg end of stream) and was all answered", FALSE);
}

/* ---- deliveries from the streaming threads ---- */

static gboolean
deliver (gpointer data)
{
  Delivery *d = data;
  Chat *chat = d->chat;
  if (chat->state != TALKING)
    return G_SOURCE_REMOVE;
  gsize len = 0;
  const char *bytes = d->data ? g_bytes_get_data (d->data, &len) : NULL;
  switch (d->kind) {
    case DELIVER_AUDIO:
      d->trace.dispatched_us = g_get_monotonic_time ();
      ppx_pacer_push (chat->pacer, g_bytes_ref (d->data), d->duration_us, &d->trace);
      break;
    case DELIVER_TEXT:
      send_kind (chat, PPX_CHAT_TEXT, bytes, len);
      break;
    case DELIVER_ERROR:
    case DELIVER_BAD_INPUT: {
      g_autofree char *why = g_strndup (bytes, len);
      chat_end (chat, d->kind == DELIVER_BAD_INPUT ? "bad_input" : "error", why, TRUE);
      break;
    }
    case DELIVER_RESUME:
      if (chat->ws && chat->reading_paused) {
        chat->reading_paused = FALSE;
        update_reading (chat);
      }
      break;
    case DELIVER_EOS:
      ppx_pacer_finish (chat->pacer, on_drained); /* the call ends once its last pages went */
      break;
  }
  return G_SOURCE_REMOVE;
}

static void
delivery_free (gpointer data)
{
  Delivery *d = data;
  chat_unref (d->chat);
  if (d->data)
    g_bytes_unref (d->data);
  g_free (d);
}

/* From any thread; takes `bytes`. */
static void
post_page (Chat *chat, DeliveryKind kind, GBytes *bytes, gint64 duration_us, const PpxPageTrace *trace)
{
  Delivery *d = g_new0 (Delivery, 1);
  d->chat = chat_ref (chat);
  d->kind = kind;
  d->data = bytes;
  d->duration_us = duration_us;
  if (trace)
    d->trace = *trace;
  g_main_context_invoke_full (g_main_context_default (), G_PRIORITY_DEFAULT, deliver, d, delivery_free);
}

static void
post (Chat *chat, DeliveryKind kind, GBytes *bytes)
{
  post_page (chat, kind, bytes, 0, NULL);
}

/* Sends the packets gathered as one page (of `flags`). */
static void
answer_page (Chat *chat, guint8 flags)
{
  gint64 granule = chat->ogg_sequence < 2 ? 0 : chat->ogg_granule; /* headers: 0 */
  GBytes *page = ppx_ogg_page_build (chat->ogg_serial, chat->ogg_sequence++, flags, granule,
                                     (const GBytes *const *) chat->ogg_packets->pdata, chat->ogg_packets->len);
  g_ptr_array_set_size (chat->ogg_packets, 0);
  gint64 duration_us = 0;
  if (chat->ogg_sequence > 2) { /* an audio page: what its granule position adds */
    duration_us = (granule - chat->page_granule) * G_USEC_PER_SEC / 48000;
    chat->page_granule = granule;
  } else {
    chat->page_granule = chat->ogg_granule; /* the pre-skip */
  }
  PpxPageTrace trace = {chat->frame_in_us, g_get_monotonic_time (), 0};
  post_page (chat, DELIVER_AUDIO, page, duration_us, &trace);
}

/* The header pages, from opusenc's caps (streamheader: OpusHead, then OpusTags): a page each, the first flagged
 * BOS. The granule positions start at OpusHead's pre-skip. */
static void
answer_headers (Chat *chat, GstCaps *caps)
{
  const GValue *headers = caps ? gst_structure_get_value (gst_caps_get_structure (caps, 0), "streamheader") : NULL;
  for (guint i = 0; headers && GST_VALUE_HOLDS_ARRAY (headers) && i < gst_value_array_get_size (headers); i++) {
    GstBuffer *header = gst_value_get_buffer (gst_value_array_get_value (headers, i));
    GstMapInfo map;
    if (!header || !gst_buffer_map (header, &map, GST_MAP_READ))
      continue;
    guint pre_skip;
    if (ppx_ogg_opus_head (map.data, map.size, NULL, &pre_skip))
      chat->ogg_granule = pre_skip;
    g_ptr_array_add (chat->ogg_packets, g_bytes_new (map.data, map.size));
    gst_buffer_unmap (header, &map);
    answer_page (chat, i == 0 ? PPX_OGG_FLAG_BOS : 0);
  }
}

/* One Opus packet of opusenc: a page every PACKETS_PER_PAGE packets, sent at once. Granule positions count 48 kHz
 * samples, pre-skip included; opusenc's durations leave out what its clipping takes off (the pre-skip of the
 * first packet, the padding of the last), so the last page's granule ends exactly at the answer's end. */
static void
answer_packet (Chat *chat, GstBuffer *buf)
{
  GstMapInfo map;
  if (!gst_buffer_map (buf, &map, GST_MAP_READ))
    return;
  g_ptr_array_add (chat->ogg_packets, g_bytes_new (map.data, map.size));
  gst_buffer_unmap (buf, &map);
  if (GST_BUFFER_DURATION_IS_VALID (buf))
    chat->ogg_granule += (gint64) gst_util_uint64_scale_round (GST_BUFFER_DURATION (buf), 48000, GST_SECOND);
  if (chat->ogg_packets->len >= PACKETS_PER_PAGE)
    answer_page (chat, 0);
}

/* The answer frame enters the encoder (the same streaming thread as on_answer): its tick just ended. */
static GstPadProbeReturn
on_frame_in (GstPad *pad, GstPadProbeInfo *info, gpointer user_data)
{
  ((Chat *) user_data)->frame_in_us = g_get_monotonic_time ();
  return GST_PAD_PROBE_OK;
}

static GstFlowReturn
on_answer (GstAppSink *sink, gpointer user_data)
{
  Chat *chat = user_data;
  GstSample *sample = gst_app_sink_pull_sample (sink);
  if (!sample)
    return GST_FLOW_EOS;
  if (chat->ogg_sequence == 0)
    answer_headers (chat, gst_sample_get_caps (sample));
  GstBuffer *buf = gst_sample_get_buffer (sample);
  if (buf && gst_buffer_get_size (buf))
    answer_packet (chat, buf);
  gst_sample_unref (sample);
  return GST_FLOW_OK;
}

static void
on_answer_eos (GstAppSink *sink, gpointer user_data)
{
  Chat *chat = user_data;
  if (chat->ogg_sequence >= 2) /* the last packets, or an empty page that ends the stream */
    answer_page (chat, PPX_OGG_FLAG_EOS);
  post (user_data, DELIVER_EOS, NULL);
}

/* Everything the pipeline posts is read here, on the thread that posts it, and dropped (a sync handler that drops
 * a message unrefs it: every message holds its source, so one kept would keep the whole pipeline, its bus and the
 * bus's two sockets alive after the call; issue 25, defect 1). */
static GstBusSyncReply
on_bus_sync (GstBus *bus, GstMessage *msg, gpointer user_data)
{
  Chat *chat = user_data;
  if (GST_MESSAGE_TYPE (msg) == GST_MESSAGE_ERROR) {
    g_autoptr (GError) e = NULL;
    gst_message_parse_error (msg, &e, NULL);
    /* the demuxer and the decoder fail on what the client sent */
    const char *source = GST_OBJECT_NAME (GST_MESSAGE_SRC (msg));
    gboolean bad_input = g_str_has_prefix (source, "oggdemux") || g_str_has_prefix (source, "opusdec");
    g_autofree char *text = g_strdup_printf ("%s%s: %s", bad_input ? "malformed Ogg Opus: " : "", source, e->message);
    if (ppx_server_keep_first_error (&chat->lock, &chat->first_error, &chat->busy, e, text))
      post (chat, bad_input ? DELIVER_BAD_INPUT : DELIVER_ERROR, g_bytes_new (text, strlen (text)));
  } else if (GST_MESSAGE_TYPE (msg) == GST_MESSAGE_ELEMENT) {
    const GstStructure *s = gst_message_get_structure (msg);
    const char *text;
    if (gst_structure_has_name (s, "personaplex-text") && (text = gst_structure_get_string (s, "text")) &&
             *text)
      post (chat, DELIVER_TEXT, g_bytes_new (text, strlen (text)));
  }
  gst_message_unref (msg);
  return GST_BUS_DROP;
}

static void on_need_data (GstAppSrc *src, guint length, gpointer user_data);

/* ---- the pipeline ---- */

/* A bin of `description` whose element `sink` / `src` (NULL: none) get ghost pads. Unlinked pads are not
 * ghosted automatically: oggdemux's delayed link to opusdec would find opusdec's sink taken by a ghost pad. */
static GstElement *
parse_chain (const char *description, const char *name, const char *sink, const char *src, GError **error)
{
  GstElement *bin = gst_parse_bin_from_description_full (description, FALSE, NULL, GST_PARSE_FLAG_FATAL_ERRORS,
                                                         error);
  if (!bin)
    return NULL;
  gst_object_set_name (GST_OBJECT (bin), name);
  const char *names[] = {sink, src}, *pads[] = {"sink", "src"};
  for (int i = 0; i < 2; i++) {
    if (!names[i])
      continue;
    g_autoptr (GstElement) e = gst_bin_get_by_name (GST_BIN (bin), names[i]);
    g_autoptr (GstPad) pad = gst_element_get_static_pad (e, pads[i]);
    gst_element_add_pad (bin, gst_ghost_pad_new (pads[i], pad));
  }
  return bin;
}

static gboolean
build_pipeline (Chat *chat, GError **error)
{
  const PpxServerOptions *o = ppx_server_get_options (chat->server);
  g_autofree char *name = g_strdup_printf ("chat-%u", chat->id);
  chat->pipeline = gst_pipeline_new (name);
  GstElement *receive, *duplex, *send, *text_sink;
  if (!(receive = parse_chain (RECEIVE_CHAIN, "receive", NULL, "decoded", error)))
    return FALSE;
  gst_bin_add (GST_BIN (chat->pipeline), receive);
  if (!(duplex = ppx_server_duplex_new (o, &chat->params, "duplex", error)))
    return FALSE;
  gst_bin_add (GST_BIN (chat->pipeline), duplex);
  if (!(send = parse_chain (SEND_CHAIN, "send", "convert", NULL, error)))
    return FALSE;
  gst_bin_add (GST_BIN (chat->pipeline), send);
  text_sink = gst_element_factory_make ("fakesink", "text-sink");
  g_object_set (text_sink, "async", FALSE, "sync", FALSE, NULL);
  gst_bin_add (GST_BIN (chat->pipeline), text_sink);
  if (!gst_element_link (receive, duplex) || !gst_element_link_pads (duplex, "src", send, "sink") ||
      !gst_element_link_pads (duplex, "text_src", text_sink, "sink")) {
    g_set_error (error, g_quark_from_static_string ("ppx-server-chat"), 0, "linking personaplexduplex failed");
    return FALSE;
  }
  chat->appsrc = gst_bin_get_by_name (GST_BIN (receive), "in");
  g_autoptr (GstElement) decoded = gst_bin_get_by_name (GST_BIN (receive), "decoded");
  chat->backlog = ppx_backlog_attach (decoded, PPX_PROTO_CHAT, chat->id, (guint) o->max_input_backlog_ms);
  GstAppSrcCallbacks src_callbacks = {.need_data = on_need_data};
  gst_app_src_set_callbacks (GST_APP_SRC (chat->appsrc), &src_callbacks, chat, NULL);
  g_autoptr (GstElement) convert = gst_bin_get_by_name (GST_BIN (send), "convert");
  g_autoptr (GstPad) convert_sink = gst_element_get_static_pad (convert, "sink");
  gst_pad_add_probe (convert_sink, GST_PAD_PROBE_TYPE_BUFFER, on_frame_in, chat, NULL);
  g_autoptr (GstElement) out = gst_bin_get_by_name (GST_BIN (send), "out");
  GstAppSinkCallbacks callbacks = {.new_sample = on_answer, .eos = on_answer_eos};
  gst_app_sink_set_callbacks (GST_APP_SINK (out), &callbacks, chat, NULL);
  g_autoptr (GstBus) bus = gst_element_get_bus (chat->pipeline);
  gst_bus_set_sync_handler (bus, on_bus_sync, chat, NULL);
  return TRUE;
}

/* ---- teardown ---- */

static void
stop_pipeline (gpointer data, gpointer unused)
{
  Chat *chat = data;
  g_autofree char *what = g_strdup_printf ("call %u (%s)", chat->id, chat->peer);
  ppx_server_duplex_log_drift (chat->pipeline, what);
  gst_element_set_state (chat->pipeline, GST_STATE_NULL);
}

static gboolean
on_stopped (gpointer data)
{
  Chat *chat = data;
  g_autoptr (GstBus) bus = gst_element_get_bus (chat->pipeline);
  gst_bus_set_sync_handler (bus, NULL, NULL, NULL);
  chat->torn_down = TRUE;
  if (ppx_backlog_dropped_s (chat->backlog) > 0)
    g_printerr ("personaplex-server: call %u (%s): %.1f s of its audio dropped in all, the model behind it\n", chat->id,
                chat->peer, ppx_backlog_dropped_s (chat->backlog));
  if (chat->slot) {
    ppx_server_call_remove (chat->slot, chat->end_reason ? chat->end_reason : "error");
    chat->slot = NULL;
  }
  return G_SOURCE_REMOVE;
}

/* Stops the pipeline on a worker (the engine slot is freed there), once the join is over. */
static void
teardown (Chat *chat)
{
  if (chat->joining || chat->torn_down)
    return;
  ppx_server_work (stop_pipeline, on_stopped, chat_ref (chat), chat_unref);
}

/* Ends the call once: one log line; 0x05 with `why` when `tell_client`; the WebSocket closed; teardown. */
static void
chat_end (Chat *chat, const char *reason, const char *why, gboolean tell_client)
{
  if (chat->state == ENDED)
    return;
  chat->state = ENDED;
  chat->end_reason = g_strdup (reason);
  if (chat->media_timer) {
    g_source_remove (chat->media_timer);
    chat->media_timer = 0;
  }
  if (chat->ahead_timer) {
    g_source_remove (chat->ahead_timer);
    chat->ahead_timer = 0;
  }
  if (chat->pacer)
    ppx_pacer_stop (chat->pacer); /* pages still queued are dropped */
  g_printerr ("personaplex-server: call %u (%s): ended: %s\n", chat->id, chat->peer, why);
  if (chat->ws && ppx_ws_is_open (chat->ws)) {
    if (tell_client) {
      /* the log has the whole text; the client no path of the server's (an element's error names its files) */
      const char *dir = ppx_server_get_options (chat->server)->model_dir;
      g_auto (GStrv) parts = g_strsplit (why, dir, -1);
      g_autofree char *shown = g_strjoinv ("<model>", parts);
      send_kind (chat, PPX_CHAT_ERROR, shown, strlen (shown));
    }
    gboolean normal = g_str_equal (reason, "end_of_stream");
    gboolean bad_input = g_str_equal (reason, "bad_input");
    ppx_ws_close (chat->ws, normal ? SOUP_WEBSOCKET_CLOSE_NORMAL
                            : bad_input ? SOUP_WEBSOCKET_CLOSE_POLICY_VIOLATION
                            : g_str_equal (reason, "drain") || g_str_equal (reason, "timeout")
                                ? SOUP_WEBSOCKET_CLOSE_GOING_AWAY
                            : SOUP_WEBSOCKET_CLOSE_SERVER_ERROR, NULL);
  }
  teardown (chat);
}

/* ---- the client's audio ---- */

/* Reads the client's socket unless the model is behind its audio. */
static void
update_reading (Chat *chat)
{
  if (chat->ws)
    ppx_ws_pause_reading (chat->ws, chat->reading_paused || chat->ahead_paused);
}

static gint64
ahead_limit_ms (Chat *chat)
{
  return MAX ((gint64) ppx_server_get_options (chat->server)->max_input_backlog_ms * AHEAD_BOUNDS, AHEAD_MIN_MS);
}

static gboolean
audio_ahead (Chat *chat)
{
  return chat->audio_in_us / 1000 - ppx_backlog_taken_ms (chat->backlog) > ahead_limit_ms (chat);
}

static gboolean
on_ahead_check (gpointer user_data)
{
  Chat *chat = user_data;
  if (chat->state == TALKING && audio_ahead (chat))
    return G_SOURCE_CONTINUE;
  chat->ahead_timer = 0;
  chat->ahead_paused = FALSE;
  update_reading (chat);
  return G_SOURCE_REMOVE;
}

static void
check_ahead (Chat *chat)
{
  if (chat->ahead_paused || !audio_ahead (chat))
    return;
  if (!chat->ahead_logged++) /* the first time */
    g_printerr ("personaplex-server: call %u (%s): its audio (%.1f s by its Opus packets) runs more than %.0f s ahead "
                "of the model: not read until the model catches up\n", chat->id, chat->peer, chat->audio_in_us / 1e6,
                ahead_limit_ms (chat) / 1e3);
  chat->ahead_paused = TRUE;
  update_reading (chat);
  if (!chat->ahead_timer)
    chat->ahead_timer = g_timeout_add (AHEAD_CHECK_MS, on_ahead_check, chat);
}

static void
push_audio (Chat *chat, const guint8 *data, gsize len)
{
  gst_app_src_push_buffer (GST_APP_SRC (chat->appsrc), gst_buffer_new_memdup (data, len));
  if (chat->input_ended)
    gst_app_src_end_of_stream (GST_APP_SRC (chat->appsrc));
  if (!chat->reading_paused && gst_app_src_get_current_level_bytes (GST_APP_SRC (chat->appsrc)) >= INPUT_HIGH) {
    chat->reading_paused = TRUE;
    update_reading (chat);
  }
  check_ahead (chat);
}

/* appsrc's streaming thread: its queue went below half */
static void
on_need_data (GstAppSrc *src, guint length, gpointer user_data)
{
  post (user_data, DELIVER_RESUME, NULL);
}

/* Checks the pages these bytes complete: Ogg pages with valid checksums, the first one an OpusHead. */
static gboolean
check_ogg (Chat *chat, const guint8 *data, gsize len, GError **error)
{
  ppx_ogg_reader_push (chat->ogg, data, len);
  PpxOggPage page;
  while (ppx_ogg_reader_next (chat->ogg, &page, error)) {
    guint channels = 0;
    if (!chat->have_head &&
        (!(page.flags & PPX_OGG_FLAG_BOS) || !ppx_ogg_opus_head (page.body, page.body_len, &channels, NULL) ||
         channels < 1 || channels > 2)) {
      g_set_error (error, g_quark_from_static_string ("ppx-server-chat"), 0,
                   "not an Ogg Opus stream: its first page is not an OpusHead of 1 or 2 channels");
      return FALSE;
    }
    if (chat->have_head && ((page.flags & PPX_OGG_FLAG_BOS) || page.serial != chat->serial)) {
      /* oggdemux would take it for a second stream and fail the call as an internal error */
      g_set_error (error, g_quark_from_static_string ("ppx-server-chat"), 0,
                   "a second logical stream (a %s page %u) in the middle of the stream: one Opus stream per call",
                   page.flags & PPX_OGG_FLAG_BOS ? "BOS" : "foreign serial's", page.sequence);
      return FALSE;
    }
    if (!chat->have_head)
      chat->serial = page.serial;
    chat->have_head = TRUE;
    if (++chat->pages > 2) /* after OpusHead and OpusTags */
      chat->audio_in_us += (gint64) ppx_opus_page_samples (&page) * 1000 / 48;
    if (page.flags & PPX_OGG_FLAG_EOS)
      chat->input_ended = TRUE;
  }
  return !*error;
}

static void
on_audio (Chat *chat, const guint8 *data, gsize len)
{
  g_autoptr (GError) error = NULL;
  if (chat->input_ended) {
    chat_end (chat, "bad_input", "audio after the Ogg end-of-stream page", TRUE);
    return;
  }
  if (!check_ogg (chat, data, len, &error)) {
    g_autofree char *why = g_strdup_printf ("malformed Ogg: %s", error->message);
    chat_end (chat, "bad_input", why, TRUE);
    return;
  }
  chat->last_audio_us = g_get_monotonic_time ();
  if (chat->input_ended && chat->media_timer) {
    g_source_remove (chat->media_timer); /* no more audio to wait for: the rest is answered, then it ends */
    chat->media_timer = 0;
  }
  if (chat->state == TALKING) {
    push_audio (chat, data, len);
  } else if (chat->early->len + len <= PPX_CHAT_MAX_EARLY_AUDIO) {
    g_byte_array_append (chat->early, data, (guint) len);
  } else {
    chat_end (chat, "bad_input", "more than 256 KiB of audio before the handshake", TRUE);
  }
}

static void
on_message (PpxWs *ws, gint type, GBytes *message, gpointer user_data)
{
  Chat *chat = user_data;
  if (chat->state == ENDED)
    return;
  gsize len;
  const guint8 *data = g_bytes_get_data (message, &len);
  if (type != SOUP_WEBSOCKET_DATA_BINARY) {
    chat_end (chat, "bad_input", "a text message: the protocol's messages are binary", TRUE);
  } else if (len == 0) {
    chat_end (chat, "bad_input", "an empty message (no kind byte)", TRUE);
  } else if (data[0] == PPX_CHAT_AUDIO) {
    on_audio (chat, data + 1, len - 1);
  } else {
    g_autofree char *why = g_strdup_printf ("a message of unknown kind 0x%02x", data[0]);
    chat_end (chat, "bad_input", why, TRUE);
  }
}

static void
on_closed (PpxWs *ws, gpointer user_data)
{
  Chat *chat = user_data;
  if (chat->state != ENDED) {
    const char *reason = ppx_ws_end_reason (ws);
    gushort code = ppx_ws_peer_close_code (ws);
    g_autofree char *why = reason ? g_strdup (reason)
                           : code ? g_strdup_printf ("closed by the client (code %u)%s", code,
                                                     chat->state == JOINING ? " during the prompts" : "")
                                  : g_strdup_printf ("the client's connection dropped (no close frame)%s",
                                                     chat->state == JOINING ? " during the prompts" : "");
    chat_end (chat, ppx_ws_end_label (ws), why, FALSE);
  }
  chat_unref (chat); /* the WebSocket's reference */
}

/* The call's audio must keep up with real time: it is ended once what came (by its Opus packets, from the
 * handshake on) falls --media-timeout behind the wall clock, whether nothing comes or a page now and then (issue 25,
 * defect 9); not while its audio waits for the model (the server is not reading it then). */
static gboolean
on_media_check (gpointer user_data)
{
  Chat *chat = user_data;
  int timeout = ppx_server_get_options (chat->server)->media_timeout;
  gint64 now = g_get_monotonic_time ();
  if (chat->reading_paused || chat->ahead_paused) {
    /* its audio waits for the model, not the other way round: the wall clock starts again from what came */
    chat->talking_us = now - chat->audio_in_us;
    return G_SOURCE_CONTINUE;
  }
  gint64 behind_us = (now - chat->talking_us) - chat->audio_in_us;
  if (behind_us <= (gint64) timeout * G_USEC_PER_SEC)
    return G_SOURCE_CONTINUE;
  chat->media_timer = 0;
  gsize unsent = chat->ws ? ppx_ws_send_queue (chat->ws) : 0;
  gint64 stalled_us = chat->ws ? ppx_ws_send_stalled_us (chat->ws) : 0;
  if (unsent > NOT_READING_BYTES || stalled_us > (gint64) timeout * G_USEC_PER_SEC / 2) {
    /* its audio stopped because it stopped reading (libsoup reads no more while it cannot write): say so */
    g_autofree char *why = g_strdup_printf ("the client stopped reading (%" G_GSIZE_FORMAT " bytes unsent), and "
                                            "sent no more audio", unsent);
    chat_end (chat, "client_not_reading", why, TRUE);
    return G_SOURCE_REMOVE;
  }
  g_autofree char *why =
      now - chat->last_audio_us > (gint64) timeout * G_USEC_PER_SEC
          ? g_strdup_printf ("no audio from the client for %d s", timeout)
          : g_strdup_printf ("the client's audio fell %d s behind real time (%.1f s of audio in %.1f s)", timeout,
                             chat->audio_in_us / 1e6, (now - chat->talking_us) / 1e6);
  chat_end (chat, "timeout", why, TRUE);
  return G_SOURCE_REMOVE;
}

/* ---- the join ---- */

static void
start_pipeline (gpointer data, gpointer unused)
{
  Chat *chat = data;
  if (gst_element_set_state (chat->pipeline, GST_STATE_PLAYING) == GST_STATE_CHANGE_FAILURE) {
    g_mutex_lock (&chat->lock);
    if (!chat->first_error)
      chat->first_error = g_strdup ("the call's pipeline could not start");
    g_mutex_unlock (&chat->lock);
  }
}

static void
send_handshake (Chat *chat)
{
  chat->state = TALKING;
  ppx_server_call_joined (chat->slot);
  send_kind (chat, PPX_CHAT_HANDSHAKE, NULL, 0);
  g_printerr ("personaplex-server: call %u (%s): prompts done, handshake sent\n", chat->id, chat->peer);
  chat->last_audio_us = g_get_monotonic_time ();
  chat->talking_us = chat->last_audio_us - chat->audio_in_us; /* audio that came during the prompts counts */
  if (!chat->input_ended)
    chat->media_timer = g_timeout_add_seconds (1, on_media_check, chat);
  if (chat->early->len) {
    push_audio (chat, chat->early->data, chat->early->len);
    g_byte_array_set_size (chat->early, 0);
  }
}

static gboolean
on_started (gpointer data)
{
  Chat *chat = data;
  chat->joining = FALSE;
  g_mutex_lock (&chat->lock);
  g_autofree char *error = g_strdup (chat->first_error);
  gboolean busy = chat->busy;
  g_mutex_unlock (&chat->lock);
  if (chat->state == ENDED) {
    teardown (chat); /* it ended during the prompts (the client left): stop now */
  } else if (error) {
    chat_end (chat, busy ? "engine_full" : "error", busy ? "the server is full (the engine has no free slot)"
                                                         : error, TRUE);
  } else if (chat->ws_pending) {
    chat->state = TALKING; /* the handshake follows the upgrade */
  } else {
    send_handshake (chat);
  }
  return G_SOURCE_REMOVE;
}

static void
on_upgraded (PpxWs *ws, gpointer user_data)
{
  Chat *chat = user_data;
  chat->ws_pending = FALSE;
  if (!ws) {
    chat_end (chat, "client_closed", "the client left before the upgrade", FALSE);
    chat_unref (chat);
    return;
  }
  chat->ws = ws;
  PpxWsCallbacks callbacks = {on_message, on_closed, chat}; /* keeps the upgrade's reference */
  ppx_ws_set_callbacks (ws, &callbacks);
  if (chat->state == TALKING)
    send_handshake (chat);
  else if (chat->state == ENDED)
    ppx_ws_close (ws, SOUP_WEBSOCKET_CLOSE_SERVER_ERROR, NULL);
}

/* ---- the server's view ---- */

static void
server_end (gpointer call, const char *why)
{
  chat_end (call, "drain", why, TRUE);
}

static void
server_destroy (gpointer call)
{
  Chat *chat = call;
  chat->state = ENDED;
  chat->slot = NULL;
  if (chat->pacer)
    ppx_pacer_stop (chat->pacer);
  if (chat->media_timer)
    g_source_remove (chat->media_timer);
  chat->media_timer = 0;
  if (chat->ahead_timer)
    g_source_remove (chat->ahead_timer);
  chat->ahead_timer = 0;
  if (!chat->torn_down) {
    gst_element_set_state (chat->pipeline, GST_STATE_NULL);
    g_autoptr (GstBus) bus = gst_element_get_bus (chat->pipeline);
    gst_bus_set_sync_handler (bus, NULL, NULL, NULL);
    chat->torn_down = TRUE;
  }
  if (chat->ws)
    ppx_ws_close (chat->ws, SOUP_WEBSOCKET_CLOSE_GOING_AWAY, "server stopping");
}

static const PpxServerCallClass chat_class = {server_end, server_destroy};

void
ppx_server_chat_start (PpxServer *server, SoupServerMessage *msg, PpxCallParams *params)
{
  const PpxServerOptions *o = ppx_server_get_options (server);
  PpxWsLimits limits = {PPX_CHAT_MAX_MESSAGE, PPX_CHAT_MAX_SEND_QUEUE, (guint) o->ping_interval,
                        (guint) o->ping_timeout};
  Chat *chat = g_new0 (Chat, 1);
  chat->refcount = 1; /* the upgrade's, then the WebSocket's */
  chat->server = server;
  chat->params = *params;
  memset (params, 0, sizeof *params);
  chat->ogg = ppx_ogg_reader_new ();
  chat->early = g_byte_array_new ();
  chat->ogg_packets = g_ptr_array_new_with_free_func ((GDestroyNotify) g_bytes_unref);
  chat->ogg_serial = g_random_int ();
  g_mutex_init (&chat->lock);
  if (!ppx_ws_accept (msg, &limits, on_upgraded, chat)) {
    g_printerr ("personaplex-server: refused /api/chat from %s: not a WebSocket handshake\n",
                soup_server_message_get_remote_host (msg));
    ppx_metrics_refused (PPX_PROTO_CHAT, "bad_request");
    chat_unref (chat);
    return;
  }
  chat->ws_pending = TRUE;
  chat->id = ppx_server_next_call_id (server);
  chat->pacer = ppx_pacer_new (PPX_PROTO_CHAT, chat->id, !o->no_pacing, (guint) o->pacing_max_delay_ms, pacer_send,
                               chat);
  chat->peer = g_strdup_printf ("%s:%u", soup_server_message_get_remote_host (msg),
                                g_inet_socket_address_get_port (G_INET_SOCKET_ADDRESS (
                                    soup_server_message_get_remote_address (msg))));
  chat->slot = ppx_server_call_add (server, PPX_PROTO_CHAT, chat->id, &chat_class, chat);
  if (ppx_server_pacing_rise (server))
    ppx_pacer_set_rise (chat->pacer, ppx_server_tick_rise_us (server));
  g_autofree char *persona = ppx_call_params_describe (&chat->params, o->voice_prompt,
                                                       o->text_prompt || o->text_prompt_tokens);
  g_printerr ("personaplex-server: call %u (%s): /api/chat, %s\n", chat->id, chat->peer, persona);
  g_autoptr (GError) error = NULL;
  if (!build_pipeline (chat, &error)) {
    chat->state = ENDED;
    chat->end_reason = g_strdup ("error");
    g_printerr ("personaplex-server: call %u (%s): ended: %s\n", chat->id, chat->peer, error->message);
    chat->torn_down = TRUE;
    ppx_server_call_remove (chat->slot, "error");
    chat->slot = NULL;
    return; /* the upgrade's callback closes the WebSocket */
  }
  chat->joining = TRUE;
  ppx_server_work (start_pipeline, on_started, chat_ref (chat), chat_unref);
}
