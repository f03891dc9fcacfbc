/* personaplexduplex: the text-prompt-tokens string ("1,2,3"). */
#include "gstpptokens.h"

#include <errno.h>
#include <stdlib.h>

#include "personaplex.h"

GArray *
gst_pp_parse_token_list (const gchar * str, GError ** error)
{
  GArray *tokens = g_array_new (FALSE, FALSE, sizeof (int));
  g_auto (GStrv) items = NULL;
  guint i;

  if (str == NULL)
    return tokens;
  items = g_strsplit (str, ",", -1);
  if (g_strv_length (items) == 1) {
    g_autofree gchar *only = g_strstrip (g_strdup (items[0]));
    if (only[0] == '\0')
      return tokens;
  }
  for (i = 0; items[i] != NULL; i++) {
    gchar *item = g_strstrip (items[i]);
    gchar *end = NULL;
    gint64 value;

    errno = 0;
    value = g_ascii_strtoll (item, &end, 10);
    if (item[0] == '\0' || end == item || *end != '\0' || errno != 0
        || value < 0 || value > G_MAXINT) {
      g_set_error (error, PPX_ERROR, PPX_ERROR_INVALID,
          "text-prompt-tokens: item %u ('%s') of '%s' is not a non-negative "
          "integer token id (expected a comma-separated list such as "
          "\"1,529,2047\")", i + 1, item, str);
      g_array_unref (tokens);
      return NULL;
    }
    {
      int token = (int) value;
      g_array_append_val (tokens, token);
    }
  }
  return tokens;
}
