/* chat-client: one call of the PersonaPlex WebSocket protocol (chat-client.h). */
#include "chat-client.h"

#include <gst/app/app.h>
#include <gst/gst.h>
#include <libsoup/soup.h>
#include <string.h>

#include "chat-client-private.h"
#include "ogg-page.h"

#define DECODE_PIPELINE \
  "appsrc name=src caps=application/ogg format=bytes ! oggdemux ! opusdec ! audioconvert ! audioresample ! " \
  "audio/x-raw,format=F32LE,rate=24000,channels=1,layout=interleaved ! appsink name=sink sync=false"
#define DECODE_DRAIN_TIMEOUT (5 * GST_SECOND)

struct _PpxChatCall {
  char *url, *token, *origin, *response_header;
  gboolean accept_invalid_certificates, end_of_stream, decode;
  PpxChatPacing pacing;
  double clock_rate;    /* the capture clock's rate against ours: 1 + clock_ppm / 1e6 */
  PpxChatAudio *audio;
  PpxChatCallbacks callbacks;
  gpointer user_data;
  GMainContext *context;

  SoupSession *session;
  SoupMessage *msg;
  GCancellable *cancellable;
  SoupWebsocketConnection *ws;
  GSource *pace;        /* the next page's timer (real-time pacing) */
  guint next_page;

  PpxOggReader *answer; /* the answer's pages, for their granule positions */
  guint answer_pre_skip;
  GstElement *decoder;  /* appsrc ! oggdemux ! opusdec ! ... ! appsink */
  GMutex pcm_lock;      /* the decoder's streaming thread appends to record.pcm */

  PpxChatRecord record;
  gboolean started, finished;
};

/* ---- the URL ---- */

static void
append_param (GString *query, const char *key, const char *value)
{
  if (query->len)
    g_string_append_c (query, '&');
  g_string_append_uri_escaped (query, key, NULL, TRUE);
  g_string_append_c (query, '=');
  g_string_append_uri_escaped (query, value, NULL, TRUE);
}

/* ws:// -> http://, wss:// -> https:// (what SoupMessage takes), with the extra query parameters. */
static char *
build_url (const PpxChatOptions *o)
{
  const char *url = o->url ? o->url : "";
  g_autoptr (GString) s = g_string_new (NULL);
  if (g_str_has_prefix (url, "ws://"))
    g_string_append_printf (s, "http://%s", url + 5);
  else if (g_str_has_prefix (url, "wss://"))
    g_string_append_printf (s, "https://%s", url + 6);
  else
    g_string_append (s, url);
  g_autoptr (GString) query = g_string_new (NULL);
  for (guint i = 0; o->params && o->params[i] && o->params[i + 1]; i += 2)
    append_param (query, o->params[i], o->params[i + 1]);
  if (o->token && o->token_in_query)
    append_param (query, "token", o->token);
  if (query->len)
    g_string_append_printf (s, "%c%s", strchr (s->str, '?') ? '&' : '?', query->str);
  return g_string_free (g_steal_pointer (&s), FALSE);
}

/* ---- the record ---- */

static void
event_clear (gpointer data)
{
  g_free (((PpxChatEvent *) data)->text);
}

static void
record_init (PpxChatRecord *r)
{
  memset (r, 0, sizeof *r);
  r->close_code = -1;
  r->events = g_array_new (FALSE, TRUE, sizeof (PpxChatEvent));
  g_array_set_clear_func (r->events, event_clear);
  r->sent = g_array_new (FALSE, TRUE, sizeof (PpxChatSent));
  r->text = g_string_new (NULL);
  r->errors = g_ptr_array_new_with_free_func (g_free);
  r->pcm = g_array_new (FALSE, FALSE, sizeof (float));
}

static void
record_clear (PpxChatRecord *r)
{
  g_free (r->failure);
  g_free (r->close_reason);
  g_free (r->decode_error);
  g_free (r->response_header);
  g_array_unref (r->events);
  g_array_unref (r->sent);
  g_string_free (r->text, TRUE);
  g_ptr_array_unref (r->errors);
  g_array_unref (r->pcm);
}

static void
set_failure (PpxChatCall *call, const char *message)
{
  if (!call->record.failure)
    call->record.failure = g_strdup (message);
}

/* ---- decoding the answer ---- */

static GstFlowReturn
on_decoded (GstAppSink *sink, gpointer user_data)
{
  PpxChatCall *call = user_data;
  GstSample *sample = gst_app_sink_pull_sample (sink);
  if (!sample)
    return GST_FLOW_EOS;
  GstBuffer *buf = gst_sample_get_buffer (sample);
  GstMapInfo map;
  if (buf && gst_buffer_map (buf, &map, GST_MAP_READ)) {
    g_mutex_lock (&call->pcm_lock);
    g_array_append_vals (call->record.pcm, map.data, (guint) (map.size / sizeof (float)));
    g_mutex_unlock (&call->pcm_lock);
    gst_buffer_unmap (buf, &map);
  }
  gst_sample_unref (sample);
  return GST_FLOW_OK;
}

static void
decoder_start (PpxChatCall *call)
{
  g_autoptr (GError) error = NULL;
  call->decoder = gst_parse_launch (DECODE_PIPELINE, &error);
  if (!call->decoder) {
    call->record.decode_error = g_strdup (error->message);
    return;
  }
  g_autoptr (GstElement) sink = gst_bin_get_by_name (GST_BIN (call->decoder), "sink");
  GstAppSinkCallbacks callbacks = {.new_sample = on_decoded};
  gst_app_sink_set_callbacks (GST_APP_SINK (sink), &callbacks, call, NULL);
  if (gst_element_set_state (call->decoder, GST_STATE_PLAYING) == GST_STATE_CHANGE_FAILURE)
    call->record.decode_error = g_strdup ("the decoding pipeline did not start");
}

static void
decoder_push (PpxChatCall *call, const guint8 *data, gsize len)
{
  if (!call->decoder || call->record.decode_error)
    return;
  g_autoptr (GstElement) src = gst_bin_get_by_name (GST_BIN (call->decoder), "src");
  gst_app_src_push_buffer (GST_APP_SRC (src), gst_buffer_new_memdup (data, len));
}

/* Ends the decoder's input and waits (bounded) until everything it was given is decoded. */
static void
decoder_finish (PpxChatCall *call)
{
  if (!call->decoder)
    return;
  g_autoptr (GstElement) src = gst_bin_get_by_name (GST_BIN (call->decoder), "src");
  g_autoptr (GstBus) bus = gst_element_get_bus (call->decoder);
  gst_app_src_end_of_stream (GST_APP_SRC (src));
  g_autoptr (GstMessage) msg = gst_bus_timed_pop_filtered (bus, DECODE_DRAIN_TIMEOUT,
                                                           GST_MESSAGE_EOS | GST_MESSAGE_ERROR);
  if (!call->record.decode_error && call->record.n_audio > 0) {
    if (!msg) {
      call->record.decode_error = g_strdup ("the decoder did not drain in time");
    } else if (GST_MESSAGE_TYPE (msg) == GST_MESSAGE_ERROR) {
      g_autoptr (GError) e = NULL;
      gst_message_parse_error (msg, &e, NULL);
      call->record.decode_error = g_strdup (e->message);
    }
  }
  gst_element_set_state (call->decoder, GST_STATE_NULL);
  g_clear_object (&call->decoder);
}

/* ---- ending ---- */

static void
stop_pacing (PpxChatCall *call)
{
  if (call->pace) {
    g_source_destroy (call->pace);
    g_source_unref (call->pace);
    call->pace = NULL;
  }
}

static void
finish (PpxChatCall *call)
{
  if (call->finished)
    return;
  call->finished = TRUE;
  stop_pacing (call);
  decoder_finish (call);
  call->record.end_us = g_get_monotonic_time ();
  if (call->callbacks.finished)
    call->callbacks.finished (call, call->user_data);
}

/* ---- sending ---- */

static void send_due_pages (PpxChatCall *call);

static gboolean
on_pace (gpointer user_data)
{
  PpxChatCall *call = user_data;
  g_source_unref (call->pace);
  call->pace = NULL;
  send_due_pages (call);
  return G_SOURCE_REMOVE;
}

static void
send_page (PpxChatCall *call, guint i)
{
  gint64 end;
  GBytes *page = ppx_chat_audio_page (call->audio, i, &end);
  gsize len;
  const guint8 *data = g_bytes_get_data (page, &len);
  g_autofree guint8 *msg = g_malloc (len + 1);
  msg[0] = PPX_CHAT_AUDIO;
  memcpy (msg + 1, data, len);
  gboolean last = i + 1 == ppx_chat_audio_n_pages (call->audio);
  if (last && !call->end_of_stream && (msg[1 + 5] & PPX_OGG_FLAG_EOS)) {
    msg[1 + 5] &= (guint8) ~PPX_OGG_FLAG_EOS; /* the stream goes on as far as the server knows */
    ppx_ogg_page_update_crc (msg + 1, len);
  }
  soup_websocket_connection_send_binary (call->ws, msg, len + 1);
  PpxChatSent sent = {g_get_monotonic_time (), end, len};
  g_array_append_val (call->record.sent, sent);
  call->record.sent_samples = MAX (call->record.sent_samples, end);
}

/* Real time: page i is due when its last sample would have been captured, counted from the handshake, on the
 * client's capture clock (options.clock_ppm). */
static void
send_due_pages (PpxChatCall *call)
{
  guint n = ppx_chat_audio_n_pages (call->audio);
  while (call->next_page < n && soup_websocket_connection_get_state (call->ws) == SOUP_WEBSOCKET_STATE_OPEN) {
    gint64 end;
    ppx_chat_audio_page (call->audio, call->next_page, &end);
    gint64 due = call->record.handshake_us + (gint64) (end * (double) G_USEC_PER_SEC / PPX_CHAT_RATE /
                                                       call->clock_rate + 0.5);
    gint64 now = g_get_monotonic_time ();
    if (call->pacing == PPX_CHAT_PACE_REALTIME && due > now) {
      call->pace = g_timeout_source_new ((guint) ((due - now + 999) / 1000));
      g_source_set_callback (call->pace, on_pace, call, NULL);
      g_source_attach (call->pace, call->context);
      return;
    }
    send_page (call, call->next_page++);
  }
}

/* ---- receiving ---- */

/* The answer samples complete after these Ogg bytes, from the granule positions of complete pages. */
static void
track_answer (PpxChatCall *call, const guint8 *data, gsize len)
{
  if (!call->answer)
    return;
  ppx_ogg_reader_push (call->answer, data, len);
  PpxOggPage page;
  g_autoptr (GError) error = NULL;
  while (ppx_ogg_reader_next (call->answer, &page, &error)) {
    if (page.flags & PPX_OGG_FLAG_BOS && ppx_ogg_opus_head (page.body, page.body_len, NULL, &call->answer_pre_skip))
      call->record.answer_pre_skip = call->answer_pre_skip;
    else if (page.granule > (gint64) call->answer_pre_skip)
      call->record.answer_samples = MAX (call->record.answer_samples,
                                         (page.granule - call->answer_pre_skip) / 2);
  }
  if (error) {
    g_autofree char *why = g_strdup_printf ("the answer: %s", error->message);
    set_failure (call, why);
    g_clear_pointer (&call->answer, ppx_ogg_reader_free);
  }
}

static void
on_message (SoupWebsocketConnection *ws, gint type, GBytes *message, gpointer user_data)
{
  PpxChatCall *call = user_data;
  gsize len;
  const guint8 *data = g_bytes_get_data (message, &len);
  PpxChatEvent event = {.time_us = g_get_monotonic_time (), .kind = 0xff, .bytes = len};
  PpxChatRecord *r = &call->record;
  if (type == SOUP_WEBSOCKET_DATA_BINARY && len > 0) {
    event.kind = data[0];
    event.bytes = len - 1;
  }
  if (type == SOUP_WEBSOCKET_DATA_BINARY && call->callbacks.message)
    call->callbacks.message (call, data, len, call->user_data);
  switch (event.kind) {
    case PPX_CHAT_HANDSHAKE:
      if (!r->handshake_us) {
        r->handshake_us = event.time_us;
        if (call->audio)
          send_due_pages (call);
      }
      break;
    case PPX_CHAT_AUDIO:
      r->n_audio++;
      track_answer (call, data + 1, len - 1);
      decoder_push (call, data + 1, len - 1);
      break;
    case PPX_CHAT_TEXT:
    case PPX_CHAT_ERROR:
      event.text = g_strndup ((const char *) data + 1, len - 1);
      if (event.kind == PPX_CHAT_TEXT) {
        r->n_text++;
        g_string_append (r->text, event.text);
      } else {
        g_ptr_array_add (r->errors, g_strdup (event.text));
      }
      break;
    default:
      r->n_other++;
      break;
  }
  event.samples = r->answer_samples;
  g_array_append_val (r->events, event);
  if (call->callbacks.event)
    call->callbacks.event (call, &g_array_index (r->events, PpxChatEvent, r->events->len - 1), call->user_data);
}

static void
on_closed (SoupWebsocketConnection *ws, gpointer user_data)
{
  PpxChatCall *call = user_data;
  gushort code = soup_websocket_connection_get_close_code (ws);
  call->record.close_code = code ? code : 1006;
  call->record.close_reason = g_strdup (soup_websocket_connection_get_close_data (ws));
  finish (call);
}

static void
on_ws_error (SoupWebsocketConnection *ws, GError *error, gpointer user_data)
{
  set_failure (user_data, error->message);
}

static gboolean
accept_any_certificate (SoupMessage *msg, GTlsCertificate *certificate, GTlsCertificateFlags errors, gpointer data)
{
  return TRUE;
}

static void
on_connected (GObject *source, GAsyncResult *result, gpointer user_data)
{
  g_autoptr (GError) error = NULL;
  SoupWebsocketConnection *ws = soup_session_websocket_connect_finish (SOUP_SESSION (source), result, &error);
  if (g_error_matches (error, G_IO_ERROR, G_IO_ERROR_CANCELLED))
    return; /* the call was freed */
  PpxChatCall *call = user_data;
  call->record.http_status = soup_message_get_status (call->msg);
  if (call->response_header)
    call->record.response_header = g_strdup (soup_message_headers_get_one (
      soup_message_get_response_headers (call->msg), call->response_header));
  if (!ws) {
    set_failure (call, error->message);
    finish (call);
    return;
  }
  call->ws = ws;
  g_signal_connect (ws, "message", G_CALLBACK (on_message), call);
  g_signal_connect (ws, "closed", G_CALLBACK (on_closed), call);
  g_signal_connect (ws, "error", G_CALLBACK (on_ws_error), call);
}

/* ---- the API ---- */

PpxChatCall *
ppx_chat_call_new (const PpxChatOptions *options, const PpxChatCallbacks *callbacks, gpointer user_data)
{
  PpxChatCall *call = g_new0 (PpxChatCall, 1);
  call->url = build_url (options);
  call->token = options->token && !options->token_in_query ? g_strdup (options->token) : NULL;
  call->origin = g_strdup (options->origin);
  call->response_header = g_strdup (options->response_header);
  call->accept_invalid_certificates = options->accept_invalid_certificates;
  call->end_of_stream = options->end_of_stream;
  call->decode = options->decode;
  call->pacing = options->pacing;
  call->clock_rate = 1 + CLAMP (options->clock_ppm, -100000, 100000) / 1e6;
  call->audio = options->audio ? ppx_chat_audio_ref (options->audio) : NULL;
  if (callbacks)
    call->callbacks = *callbacks;
  call->user_data = user_data;
  call->context = options->context ? g_main_context_ref (options->context) : NULL;
  g_mutex_init (&call->pcm_lock);
  record_init (&call->record);
  return call;
}

void
ppx_chat_call_start (PpxChatCall *call)
{
  g_return_if_fail (!call->started);
  call->started = TRUE;
  if (!call->context)
    call->context = g_main_context_ref_thread_default ();
  g_main_context_push_thread_default (call->context);
  call->record.start_us = g_get_monotonic_time ();
  call->answer = ppx_ogg_reader_new ();
  if (call->decode)
    decoder_start (call);
  call->session = soup_session_new ();
  /* no permessage-deflate: the protocol's messages are Opus and short texts */
  soup_session_remove_feature_by_type (call->session, SOUP_TYPE_WEBSOCKET_EXTENSION_MANAGER);
  call->msg = soup_message_new (SOUP_METHOD_GET, call->url);
  if (!call->msg) {
    g_autofree char *why = g_strdup_printf ("not a ws:// or wss:// URL: %s", call->url);
    set_failure (call, why);
    g_main_context_pop_thread_default (call->context);
    finish (call);
    return;
  }
  if (call->token) {
    g_autofree char *bearer = g_strconcat ("Bearer ", call->token, NULL);
    soup_message_headers_replace (soup_message_get_request_headers (call->msg), "Authorization", bearer);
  }
  if (call->accept_invalid_certificates)
    g_signal_connect (call->msg, "accept-certificate", G_CALLBACK (accept_any_certificate), NULL);
  call->cancellable = g_cancellable_new ();
  soup_session_websocket_connect_async (call->session, call->msg, call->origin, NULL, G_PRIORITY_DEFAULT,
                                        call->cancellable, on_connected, call);
  g_main_context_pop_thread_default (call->context);
}

void
ppx_chat_call_close (PpxChatCall *call)
{
  stop_pacing (call);
  if (call->ws && soup_websocket_connection_get_state (call->ws) == SOUP_WEBSOCKET_STATE_OPEN)
    soup_websocket_connection_close (call->ws, SOUP_WEBSOCKET_CLOSE_NORMAL, NULL);
}

gboolean
ppx_chat_call_send_binary (PpxChatCall *call, const guint8 *data, gsize len)
{
  if (!call->ws || soup_websocket_connection_get_state (call->ws) != SOUP_WEBSOCKET_STATE_OPEN)
    return FALSE;
  soup_websocket_connection_send_binary (call->ws, data, len);
  return TRUE;
}

gboolean
ppx_chat_call_send_text (PpxChatCall *call, const char *text)
{
  if (!call->ws || soup_websocket_connection_get_state (call->ws) != SOUP_WEBSOCKET_STATE_OPEN)
    return FALSE;
  soup_websocket_connection_send_text (call->ws, text);
  return TRUE;
}

gboolean
ppx_chat_call_is_finished (const PpxChatCall *call)
{
  return call->finished;
}

const PpxChatRecord *
ppx_chat_call_get_record (const PpxChatCall *call)
{
  return &call->record;
}

void
ppx_chat_call_free (PpxChatCall *call)
{
  if (!call)
    return;
  call->callbacks.finished = NULL;
  call->callbacks.event = NULL;
  if (call->cancellable)
    g_cancellable_cancel (call->cancellable);
  if (call->ws) {
    g_signal_handlers_disconnect_by_data (call->ws, call);
    if (soup_websocket_connection_get_state (call->ws) == SOUP_WEBSOCKET_STATE_OPEN)
      soup_websocket_connection_close (call->ws, SOUP_WEBSOCKET_CLOSE_GOING_AWAY, NULL);
  }
  finish (call);
  g_clear_object (&call->ws);
  g_clear_object (&call->msg);
  g_clear_object (&call->session);
  g_clear_object (&call->cancellable);
  ppx_ogg_reader_free (call->answer);
  ppx_chat_audio_unref (call->audio);
  if (call->context)
    g_main_context_unref (call->context);
  record_clear (&call->record);
  g_mutex_clear (&call->pcm_lock);
  g_free (call->url);
  g_free (call->token);
  g_free (call->origin);
  g_free (call->response_header);
  g_free (call);
}

/* ---- waiting ---- */

static gboolean
on_wait_timeout (gpointer flag)
{
  *(gboolean *) flag = TRUE;
  return G_SOURCE_REMOVE;
}

gboolean
ppx_chat_calls_wait (PpxChatCall *const *calls, guint n_calls, GMainContext *context, guint timeout_ms)
{
  gboolean timed_out = FALSE;
  GSource *timer = g_timeout_source_new (timeout_ms);
  g_source_set_callback (timer, on_wait_timeout, &timed_out, NULL);
  g_source_attach (timer, context);
  for (;;) {
    guint done = 0;
    for (guint i = 0; i < n_calls; i++)
      done += calls[i]->finished;
    if (done == n_calls || timed_out)
      break;
    g_main_context_iteration (context, TRUE);
  }
  g_source_destroy (timer);
  g_source_unref (timer);
  return !timed_out || n_calls == 0;
}

gboolean
ppx_chat_call_wait (PpxChatCall *call, guint timeout_ms)
{
  GMainContext *context = call->context ? call->context : g_main_context_get_thread_default ();
  return ppx_chat_calls_wait (&call, 1, context ? context : g_main_context_default (), timeout_ms);
}

void
ppx_chat_record_init (PpxChatRecord *r)
{
  record_init (r);
}

void
ppx_chat_record_clear (PpxChatRecord *r)
{
  record_clear (r);
}

/* ---- figures ---- */

double
ppx_chat_record_join_ms (const PpxChatRecord *r)
{
  return r->handshake_us ? (r->handshake_us - r->start_us) / 1000.0 : -1.0;
}

GArray *
ppx_chat_record_frame_latencies (const PpxChatRecord *r, guint frame_samples)
{
  GArray *out = g_array_new (FALSE, FALSE, sizeof (double));
  guint s = 0;
  for (guint e = 0; e < r->events->len; e++) {
    const PpxChatEvent *ev = &g_array_index (r->events, PpxChatEvent, e);
    if (ev->kind != PPX_CHAT_AUDIO)
      continue;
    /* every answer frame this message completed (but for the encoder's lookahead) */
    gint64 lookahead = r->answer_pre_skip / 2;
    for (gint64 k = out->len; (k + 1) * (gint64) frame_samples - lookahead <= ev->samples; k = out->len) {
      gint64 need = (k + 1) * (gint64) frame_samples;
      while (s < r->sent->len && g_array_index (r->sent, PpxChatSent, s).samples < need)
        s++;
      if (s == r->sent->len)
        return out; /* answered more than was sent: not a frame of this call's input */
      double ms = (ev->time_us - g_array_index (r->sent, PpxChatSent, s).time_us) / 1000.0;
      g_array_append_val (out, ms);
    }
  }
  return out;
}

guint
ppx_chat_record_gaps (const PpxChatRecord *r, gint64 gap_us)
{
  guint gaps = 0;
  gint64 last = 0;
  for (guint e = 0; e < r->events->len; e++) {
    const PpxChatEvent *ev = &g_array_index (r->events, PpxChatEvent, e);
    if (ev->kind != PPX_CHAT_AUDIO)
      continue;
    if (last && ev->time_us - last > gap_us)
      gaps++;
    last = ev->time_us;
  }
  return gaps;
}
