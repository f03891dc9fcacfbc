/* CODES.json, the file personaplex-mimi writes and reads: {"codes": [[8 ids], ...]}, one row of
 * num_codebooks Mimi codes per 80 ms frame. */
#ifndef PPX_CODES_JSON_H
#define PPX_CODES_JSON_H

#include <glib.h>

G_BEGIN_DECLS

/* Writes n_frames rows of n_codebooks codes (row-major `codes`). */
gboolean codes_json_write (const char *path, const int *codes, gsize n_frames, int n_codebooks, GError **error);

/* Reads and validates CODES.json: an object whose "codes" member is an array of rows, each an array of
 * exactly n_codebooks integers in [0, card). Returns g_malloc'd row-major codes; errors name the file
 * and, where one is at fault, the row (0-based) and the code. */
int *codes_json_read (const char *path, int n_codebooks, int card, gsize *n_frames, GError **error);

G_END_DECLS
#endif
