/* The text tokenizer: a thin C API over SentencePiece (tokenizer_spm_32k_3.model), doing exactly what
 * the PersonaPlex reference does with it: plain encode for the system prompt, id_to_piece with "▁" -> " "
 * for the text stream. The only C++ in the project lives behind this header (tokenizer.cc). */
#ifndef PPX_TOKENIZER_H
#define PPX_TOKENIZER_H

#include "ppx-common.h"

G_BEGIN_DECLS

typedef struct PpxTokenizer PpxTokenizer;

/* Loads a SentencePiece model file. Errors name the file. */
PpxTokenizer *ppx_tokenizer_load (const char *path, GError **error);
void ppx_tokenizer_free (PpxTokenizer *t);
int ppx_tokenizer_vocab_size (const PpxTokenizer *t);

/* Plain encode (no BOS/EOS), as sentencepiece's `encode(text)`. `text` must be UTF-8.
 * Returns g_malloc'd ids (never NULL on success, even for 0 ids) and sets *n_ids; NULL on error. */
int *ppx_tokenizer_encode (const PpxTokenizer *t, const char *text, int *n_ids, GError **error);

/* The piece as PersonaPlex prints it: id_to_piece with U+2581 replaced by a space. NULL for ids 0 and 3
 * (EPAD and PAD: no text) and for ids outside the vocabulary. g_free the result. */
char *ppx_tokenizer_piece_text (const PpxTokenizer *t, int id);

/* The system prompt: `text` stripped of leading and trailing whitespace (Python's str.strip), wrapped as
 * "<system> " + text + " <system>" unless it already starts and ends with "<system>", then encoded.
 * An empty or all-whitespace text gives 0 ids (the reference crashes on an empty prompt; it would wrap an
 * all-whitespace one). Returns as ppx_tokenizer_encode. */
int *ppx_tokenizer_encode_prompt (const PpxTokenizer *t, const char *text, int *n_ids, GError **error);

G_DEFINE_AUTOPTR_CLEANUP_FUNC (PpxTokenizer, ppx_tokenizer_free)

G_END_DECLS
#endif
