/* webrtc-make-tokenizer DIR: trains a small SentencePiece model into DIR/tokenizer_spm_32k_3.model so
 * that a random tiny model directory has text pieces to show (its sampled text ids below the piece count
 * decode to words); the WebRTC test checks that they reach the page. */
#include <glib.h>
#include <glib/gstdio.h>

#include "../spm-train.h"

#define VOCAB_SIZE 400

static const char *const corpus_lines[] = {
  "Hello, how can I help you today?",
  "I would like to book a table for two people tonight.",
  "Sure, what time would you like to come in?",
  "The weather is lovely this morning, isn't it?",
  "Could you tell me the way to the train station?",
  "Thank you very much for calling, have a wonderful day.",
  "My order arrived yesterday but one item was missing.",
  "I am sorry to hear that, let me check the details for you.",
  "Please hold on for a moment while I look it up.",
  "We are open from nine in the morning until six in the evening.",
  "Do you have any questions about your account or your last payment?",
  "The quick brown fox jumps over the lazy dog near the river bank.",
  "Music, books, films and games are all part of the catalogue.",
  "Every conversation starts with a friendly greeting and a question.",
  "Numbers like one, two, three, four and five are easy to say.",
  "Let's talk about travel plans, hotels, flights and trains.",
  "Our assistant listens and answers at the same time, like a person.",
  "Could you repeat that more slowly, please?",
  "Yes, absolutely, that sounds like a great idea to me.",
  "No problem at all, I will send you a confirmation right away.",
};

int
main (int argc, char **argv)
{
  if (argc != 2) {
    g_printerr ("usage: %s MODEL-DIR\n", argv[0]);
    return 2;
  }
  g_autofree char *corpus = g_build_filename (argv[1], "tokenizer-corpus.txt", NULL);
  g_autofree char *prefix = g_build_filename (argv[1], "tokenizer_spm_32k_3", NULL);
  g_autoptr (GString) text = g_string_new (NULL);
  for (int round = 0; round < 20; round++)
    for (guint i = 0; i < G_N_ELEMENTS (corpus_lines); i++)
      g_string_append_printf (text, "%s\n", corpus_lines[(i + round) % G_N_ELEMENTS (corpus_lines)]);
  g_autoptr (GError) error = NULL;
  if (!g_file_set_contents (corpus, text->str, (gssize) text->len, &error) ||
      !ppx_test_spm_train (corpus, prefix, VOCAB_SIZE, &error)) {
    g_printerr ("%s: %s\n", argv[0], error->message);
    return 1;
  }
  g_unlink (corpus);
  g_autofree char *vocab = g_strconcat (prefix, ".vocab", NULL);
  g_unlink (vocab);
  return 0;
}
