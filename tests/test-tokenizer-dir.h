/* A small SentencePiece tokenizer trained at test time and put in a model directory (needs
 * spm-train.cc in the test executable). */
#ifndef PPX_TEST_TOKENIZER_DIR_H
#define PPX_TEST_TOKENIZER_DIR_H

#include <glib.h>
#include <glib/gstdio.h>
#include <stdlib.h>

#include "spm-train.h"

/* Adds a small SentencePiece tokenizer (trained now, vocabulary 400) to a
 * tiny model directory, so that sampled text ids decode to pieces. */
static inline void
ppx_test_add_tokenizer (const char *dir)
{
  static const char corpus[] =
      "Hello, how can I help you today?\n"
      "I would like to book a table for two people tonight.\n"
      "Sure, what time would you like to come in?\n"
      "The weather is lovely this morning, isn't it?\n"
      "Could you tell me the way to the train station?\n"
      "Thank you very much for calling, have a wonderful day.\n"
      "Please hold on for a moment while I look it up.\n"
      "We are open from nine in the morning until six in the evening.\n"
      "The quick brown fox jumps over the lazy dog near the river bank.\n"
      "Yes, absolutely, that sounds like a great idea to me.\n";
  g_autofree char *corpus_path = g_build_filename (dir, "corpus.txt", NULL);
  g_autofree char *prefix = g_build_filename (dir, "tokenizer_spm_32k_3", NULL);
  g_autofree char *vocab = g_strconcat (prefix, ".vocab", NULL);
  g_autoptr (GError) err = NULL;
  GString *text = g_string_new (NULL);
  int i;

  for (i = 0; i < 20; i++)
    g_string_append (text, corpus);
  g_file_set_contents (corpus_path, text->str, text->len, &err);
  g_string_free (text, TRUE);
  g_assert_no_error (err);
  if (!ppx_test_spm_train (corpus_path, prefix, 400, &err)) {
    g_printerr ("training the test tokenizer failed: %s\n", err->message);
    exit (1);
  }
  g_unlink (corpus_path);
  g_unlink (vocab);
}

#endif
