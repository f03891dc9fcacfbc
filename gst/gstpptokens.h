/* personaplexduplex: the text-prompt-tokens string ("1,2,3"). */
#ifndef __GST_PP_TOKENS_H__
#define __GST_PP_TOKENS_H__

#include <glib.h>

G_BEGIN_DECLS

/* Parses a comma-separated list of non-negative token ids; spaces around
 * the ids are allowed; NULL or "" gives an empty array. Returns NULL and
 * sets @error (naming the offending item) on anything else. */
GArray *gst_pp_parse_token_list (const gchar * str, GError ** error);

G_END_DECLS

#endif /* __GST_PP_TOKENS_H__ */
