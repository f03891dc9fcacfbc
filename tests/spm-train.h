/* Test helpers that talk to SentencePiece directly (C++, tests/spm-train.cc): train a tiny model at test
 * time, and decode / look up pieces independently of model/tokenizer.cc to check it against the library. */
#ifndef PPX_SPM_TRAIN_H
#define PPX_SPM_TRAIN_H

#include <glib.h>

G_BEGIN_DECLS

/* Trains a unigram model on the text file `corpus` into `<prefix>.model` with the PersonaPlex special ids
 * (unk 0, bos 1, eos 2, pad 3). */
gboolean ppx_test_spm_train (const char *corpus, const char *prefix, int vocab_size, GError **error);

/* sentencepiece's own DecodeIds and IdToPiece on a freshly loaded `model`; g_free the result, NULL on error. */
char *ppx_test_spm_decode (const char *model, const int *ids, int n_ids);
char *ppx_test_spm_id_to_piece (const char *model, int id);

G_END_DECLS
#endif
