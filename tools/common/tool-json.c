/* JSON members and text as the tools' reports write them (tool-json.h). */
#include "tool-json.h"

void
tool_json_add_string (JsonBuilder *b, const char *key, const char *v)
{
  json_builder_set_member_name (b, key);
  if (v)
    json_builder_add_string_value (b, v);
  else
    json_builder_add_null_value (b);
}

void
tool_json_add_int (JsonBuilder *b, const char *key, gint64 v)
{
  json_builder_set_member_name (b, key);
  json_builder_add_int_value (b, v);
}

char *
tool_json_to_text (JsonBuilder *b)
{
  g_autoptr (JsonGenerator) gen = json_generator_new ();
  g_autoptr (JsonNode) root = json_builder_get_root (b);
  json_generator_set_root (gen, root);
  json_generator_set_pretty (gen, TRUE);
  return json_generator_to_data (gen, NULL);
}
