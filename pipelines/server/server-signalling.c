/* personaplex-server: parsing the page's messages and writing the server's. */
#include "server-signalling.h"

#include <json-glib/json-glib.h>
#include <string.h>

#include "json-strict.h"

static GQuark
signal_error_quark (void)
{
  return g_quark_from_static_string ("ppx-server-signalling");
}

/* A string member of at most max_len bytes; NULL with an error naming the member otherwise. */
static const char *
get_string (JsonObject *obj, const char *kind, const char *member, gsize max_len, GError **error)
{
  JsonNode *node = json_object_get_member (obj, member);
  if (!node || !JSON_NODE_HOLDS_VALUE (node) || json_node_get_value_type (node) != G_TYPE_STRING) {
    g_set_error (error, signal_error_quark (), 0, "'%s' message: '%s' must be a string", kind, member);
    return NULL;
  }
  const char *value = json_node_get_string (node);
  if (strlen (value) > max_len) {
    g_set_error (error, signal_error_quark (), 0, "'%s' message: '%s' is longer than %" G_GSIZE_FORMAT " bytes",
                 kind, member, max_len);
    return NULL;
  }
  return value;
}

static gboolean
only_members (JsonObject *obj, const char *kind, const char *const *allowed, GError **error)
{
  g_autoptr (GList) members = json_object_get_members (obj);
  for (GList *l = members; l; l = l->next) {
    if (!g_strv_contains (allowed, l->data)) {
      g_set_error (error, signal_error_quark (), 0, "'%s' message: unknown member '%s'", kind, (char *) l->data);
      return FALSE;
    }
  }
  return TRUE;
}

static gboolean
parse_answer (JsonObject *obj, PpxSignalMessage *msg, GError **error)
{
  static const char *const allowed[] = {"type", "sdp", NULL};
  const char *sdp;
  if (!only_members (obj, "answer", allowed, error) ||
      !(sdp = get_string (obj, "answer", "sdp", PPX_SIGNAL_MAX_SDP, error)))
    return FALSE;
  if (!g_str_has_prefix (sdp, "v=0") || !strstr (sdp, "\nm=")) {
    g_set_error (error, signal_error_quark (), 0, "'answer' message: 'sdp' is not a session description "
                 "(no 'v=0' or no media section)");
    return FALSE;
  }
  msg->kind = PPX_SIGNAL_ANSWER;
  msg->sdp = g_strdup (sdp);
  return TRUE;
}

static gboolean
candidate_is_printable (const char *candidate)
{
  for (const char *c = candidate; *c; c++)
    if (*c < 0x20 || *c > 0x7e)
      return FALSE;
  return TRUE;
}

static gboolean
parse_ice (JsonObject *obj, PpxSignalMessage *msg, GError **error)
{
  static const char *const allowed[] = {"type", "candidate", "sdpMLineIndex", NULL};
  const char *candidate;
  if (!only_members (obj, "ice", allowed, error) ||
      !(candidate = get_string (obj, "ice", "candidate", PPX_SIGNAL_MAX_CANDIDATE, error)))
    return FALSE;
  if (*candidate && (!g_str_has_prefix (candidate, "candidate:") || !candidate_is_printable (candidate))) {
    g_set_error (error, signal_error_quark (), 0, "'ice' message: 'candidate' is not an ICE candidate line");
    return FALSE;
  }
  JsonNode *node = json_object_get_member (obj, "sdpMLineIndex");
  if (!node || !JSON_NODE_HOLDS_VALUE (node) || json_node_get_value_type (node) != G_TYPE_INT64 ||
      json_node_get_int (node) < 0 || json_node_get_int (node) > PPX_SIGNAL_MAX_MLINE) {
    g_set_error (error, signal_error_quark (), 0, "'ice' message: 'sdpMLineIndex' must be an integer 0 to %d",
                 PPX_SIGNAL_MAX_MLINE);
    return FALSE;
  }
  msg->kind = PPX_SIGNAL_ICE;
  msg->candidate = g_strdup (candidate);
  msg->mline = (guint) json_node_get_int (node);
  return TRUE;
}

gboolean
ppx_signal_parse (const char *data, gsize len, PpxSignalMessage *msg, GError **error)
{
  memset (msg, 0, sizeof *msg);
  if (len > PPX_SIGNAL_MAX_MESSAGE) {
    g_set_error (error, signal_error_quark (), 0, "message of %" G_GSIZE_FORMAT " bytes is larger than %d",
                 len, PPX_SIGNAL_MAX_MESSAGE);
    return FALSE;
  }
  g_autoptr (JsonParser) parser = ppx_json_parse_strict (data, len, "signalling", "the message", NULL, error);
  if (!parser)
    return FALSE;
  JsonNode *root = json_parser_get_root (parser);
  if (!root || !JSON_NODE_HOLDS_OBJECT (root)) {
    g_set_error (error, signal_error_quark (), 0, "message is not a JSON object");
    return FALSE;
  }
  JsonObject *obj = json_node_get_object (root);
  const char *type = get_string (obj, "signalling", "type", 32, error);
  if (!type)
    return FALSE;
  if (g_str_equal (type, "answer"))
    return parse_answer (obj, msg, error);
  if (g_str_equal (type, "ice"))
    return parse_ice (obj, msg, error);
  g_autofree char *shown = g_strescape (type, NULL);
  g_set_error (error, signal_error_quark (), 0, "unknown message type '%s'", shown);
  return FALSE;
}

void
ppx_signal_message_clear (PpxSignalMessage *msg)
{
  g_free (msg->sdp);
  g_free (msg->candidate);
  memset (msg, 0, sizeof *msg);
}

static JsonBuilder *
begin (const char *type)
{
  JsonBuilder *b = json_builder_new_immutable ();
  json_builder_begin_object (b);
  json_builder_set_member_name (b, "type");
  json_builder_add_string_value (b, type);
  return b;
}

static char *
finish (JsonBuilder *b)
{
  json_builder_end_object (b);
  g_autoptr (JsonNode) root = json_builder_get_root (b);
  g_object_unref (b);
  return json_to_string (root, FALSE);
}

static void
add_string (JsonBuilder *b, const char *name, const char *value)
{
  json_builder_set_member_name (b, name);
  json_builder_add_string_value (b, value);
}

/* {"type": TYPE, NAME: VALUE} */
static char *
one_string_message (const char *type, const char *name, const char *value)
{
  JsonBuilder *b = begin (type);
  add_string (b, name, value);
  return finish (b);
}

char *
ppx_signal_welcome_new (guint session, const char *model)
{
  JsonBuilder *b = begin ("welcome");
  json_builder_set_member_name (b, "session");
  json_builder_add_int_value (b, session);
  add_string (b, "model", model);
  return finish (b);
}

char *
ppx_signal_offer_new (const char *sdp)
{
  return one_string_message ("offer", "sdp", sdp);
}

char *
ppx_signal_ice_new (guint mline, const char *candidate)
{
  JsonBuilder *b = begin ("ice");
  add_string (b, "candidate", candidate);
  json_builder_set_member_name (b, "sdpMLineIndex");
  json_builder_add_int_value (b, mline);
  return finish (b);
}

char *
ppx_signal_state_new (const char *connection)
{
  return one_string_message ("state", "connection", connection);
}

char *
ppx_signal_error_new (const char *message)
{
  return one_string_message ("error", "message", message);
}

char *
ppx_signal_text_new (const char *text, double seconds)
{
  JsonBuilder *b = begin ("text");
  /* A piece is one token; the tokenizer should give UTF-8, but the page must never get invalid JSON. */
  g_autofree char *valid = g_utf8_make_valid (text, -1);
  add_string (b, "text", valid);
  json_builder_set_member_name (b, "time");
  json_builder_add_double_value (b, seconds);
  return finish (b);
}

char *
ppx_signal_stats_new (guint64 frames, double mean_step_ms, guint64 overruns, guint model_users, guint batch_size)
{
  JsonBuilder *b = begin ("stats");
  json_builder_set_member_name (b, "frames");
  json_builder_add_int_value (b, (gint64) frames);
  json_builder_set_member_name (b, "mean-step-ms");
  json_builder_add_double_value (b, mean_step_ms);
  json_builder_set_member_name (b, "overruns");
  json_builder_add_int_value (b, (gint64) overruns);
  json_builder_set_member_name (b, "model-users");
  json_builder_add_int_value (b, model_users);
  json_builder_set_member_name (b, "sessions");
  json_builder_add_int_value (b, model_users > 0 ? model_users - 1 : 0);
  json_builder_set_member_name (b, "batch-size");
  json_builder_add_int_value (b, batch_size);
  return finish (b);
}
