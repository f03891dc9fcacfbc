/* The SentencePiece shim: a tiny model trained at test time (tests/spm-train.cc) checks encode against
 * sentencepiece's own decoder, piece text ("▁" -> " ", PAD/EPAD -> NULL), the <system> prompt wrapping,
 * and errors for missing, corrupt and empty model files. */
#include "spm-train.h"
#include "test-util.h"
#include "tokenizer.h"

#include <glib/gstdio.h>

static char *tmp_dir;
static char *model_path;

/* A few hundred words; every character used in the tests below appears here, so nothing encodes to <unk>. */
static const char *const corpus_lines[] = {
  "<system> You enjoy having a good conversation. Have a deep conversation about technology. <system>",
  "<system> You are a wise and friendly teacher. Answer in a clear and engaging way. <system>",
  "You work for a small bakery in the old town and you take orders over the phone.",
  "The customer wants to know when the bread is ready and whether the shop is open on Sunday.",
  "Hello there, how are you doing today? I am doing well, thank you for asking.",
  "Could you tell me more about the weather this weekend and whether it will rain?",
  "The quick brown fox jumps over the lazy dog while the cat watches from the window.",
  "Speech to speech models listen and talk at the same time, which makes conversation feel natural.",
  "She said that the meeting would start at nine, but nobody arrived before half past nine.",
  "We should plan a trip to the mountains next summer and bring warm clothes for the evenings.",
  "Numbers like 12, 250 and 4096 appear in many places: sizes, rates and counts.",
  "Please repeat the last sentence slowly so that everyone in the room can follow along.",
  "My favourite books are about history, science and the long journeys of early explorers.",
  "If you have any questions about your order, just ask and I will do my best to help.",
  "The library opens at eight in the morning and closes at six in the evening on weekdays.",
  "Good morning! It is a bright and sunny day, perfect for a walk in the park with friends.",
  "Technology changes quickly, yet good conversation remains one of the oldest human pleasures.",
  "Your name is Jane, and you help people choose the right plants for their gardens.",
  "Water the tomatoes every second day, and keep the herbs on the sunny side of the house.",
  "Thank you for calling, have a wonderful day and see you again soon.",
  "Wide spaces\u3000and odd\u00a0spaces show up in text copied from the web.",
};

static void
write_corpus (const char *path)
{
  GString *s = g_string_new (NULL);
  for (int rep = 0; rep < 4; rep++)
    for (guint i = 0; i < G_N_ELEMENTS (corpus_lines); i++)
      g_string_append_printf (s, "%s\n", corpus_lines[i]);
  g_assert_true (g_file_set_contents (path, s->str, (gssize) s->len, NULL));
  g_string_free (s, TRUE);
}

static PpxTokenizer *
load_model (void)
{
  g_autoptr (GError) error = NULL;
  PpxTokenizer *t = ppx_tokenizer_load (model_path, &error);
  g_assert_no_error (error);
  g_assert_nonnull (t);
  return t;
}

/* The transcript PersonaPlex would print for these ids: the piece texts, concatenated. */
static char *
transcript (const PpxTokenizer *t, const int *ids, int n)
{
  GString *s = g_string_new (NULL);
  for (int i = 0; i < n; i++) {
    g_autofree char *piece = ppx_tokenizer_piece_text (t, ids[i]);
    g_assert_nonnull (piece);
    g_string_append (s, piece);
  }
  return g_string_free (s, FALSE);
}

static void
test_vocab (void)
{
  g_autoptr (PpxTokenizer) t = load_model ();
  int n = ppx_tokenizer_vocab_size (t);
  g_assert_cmpint (n, >, 20);
  g_assert_cmpint (n, <=, 300);
}

static void
test_round_trip (void)
{
  g_autoptr (PpxTokenizer) t = load_model ();
  for (guint i = 0; i < G_N_ELEMENTS (corpus_lines); i++) {
    const char *line = corpus_lines[i];
    g_autoptr (GError) error = NULL;
    int n = -1;
    g_autofree int *ids = ppx_tokenizer_encode (t, line, &n, &error);
    g_assert_no_error (error);
    g_assert_nonnull (ids);
    g_assert_cmpint (n, >, 0);
    for (int k = 0; k < n; k++) {
      g_assert_cmpint (ids[k], >, 3); /* no <unk>, <s>, </s> or <pad>: plain encode adds no BOS/EOS */
      g_assert_cmpint (ids[k], <, ppx_tokenizer_vocab_size (t));
    }
    /* sentencepiece's own decoder gives the text back (after its NFKC normalisation of the odd spaces). */
    g_autofree char *decoded = ppx_test_spm_decode (model_path, ids, n);
    g_autofree char *nfkc = g_utf8_normalize (line, -1, G_NORMALIZE_ALL_COMPOSE);
    g_assert_cmpstr (decoded, ==, nfkc);
    /* The printed transcript is the same text with a leading space (the word-start marker of the first piece). */
    g_autofree char *printed = transcript (t, ids, n);
    g_autofree char *expected = g_strconcat (" ", nfkc, NULL);
    g_assert_cmpstr (printed, ==, expected);
  }
}

static void
test_piece_text (void)
{
  g_autoptr (PpxTokenizer) t = load_model ();
  int n = ppx_tokenizer_vocab_size (t);
  g_assert_null (ppx_tokenizer_piece_text (t, 0)); /* EPAD */
  g_assert_null (ppx_tokenizer_piece_text (t, 3)); /* PAD */
  g_assert_null (ppx_tokenizer_piece_text (t, -1));
  g_assert_null (ppx_tokenizer_piece_text (t, n));
  g_assert_null (ppx_tokenizer_piece_text (t, G_MAXINT));
  g_autofree char *bos = ppx_tokenizer_piece_text (t, 1);
  g_autofree char *eos = ppx_tokenizer_piece_text (t, 2);
  g_assert_cmpstr (bos, ==, "<s>");
  g_assert_cmpstr (eos, ==, "</s>");
  int with_boundary = 0;
  for (int id = 4; id < n; id++) {
    g_autofree char *raw = ppx_test_spm_id_to_piece (model_path, id);
    g_autofree char *text = ppx_tokenizer_piece_text (t, id);
    g_assert_nonnull (raw);
    g_assert_nonnull (text);
    g_auto (GStrv) parts = g_strsplit (raw, "\xe2\x96\x81", -1);
    g_autofree char *expected = g_strjoinv (" ", parts);
    g_assert_cmpstr (text, ==, expected);
    g_assert_null (strstr (text, "\xe2\x96\x81"));
    with_boundary += g_str_has_prefix (raw, "\xe2\x96\x81");
  }
  g_assert_cmpint (with_boundary, >, 5);
}

/* encode_prompt(text) must equal encode(expected_wrapped). */
static void
check_prompt (const PpxTokenizer *t, const char *text, const char *expected_wrapped)
{
  g_autoptr (GError) error = NULL;
  int n_prompt = -1, n_plain = -1;
  g_autofree int *prompt = ppx_tokenizer_encode_prompt (t, text, &n_prompt, &error);
  g_assert_no_error (error);
  g_autofree int *plain = ppx_tokenizer_encode (t, expected_wrapped, &n_plain, &error);
  g_assert_no_error (error);
  g_assert_nonnull (prompt);
  g_assert_cmpmem (prompt, n_prompt * sizeof (int), plain, n_plain * sizeof (int));
}

static void
test_prompt (void)
{
  g_autoptr (PpxTokenizer) t = load_model ();
  check_prompt (t, "You are a wise and friendly teacher.", "<system> You are a wise and friendly teacher. <system>");
  check_prompt (t, "  \n\tGood morning!  \r\n", "<system> Good morning! <system>");
  /* Python's str.strip() also removes Unicode spaces at the ends, but keeps them inside. */
  check_prompt (t, "\u3000\u00a0Wide spaces\u3000and\u00a0odd spaces\u2009", "<system> Wide spaces\u3000and\u00a0odd spaces <system>");
  /* Already wrapped: kept as it is (stripped), not wrapped twice. */
  check_prompt (t, "<system> Have a deep conversation. <system>", "<system> Have a deep conversation. <system>");
  check_prompt (t, "   <system> Have a deep conversation. <system>  ", "<system> Have a deep conversation. <system>");
  check_prompt (t, "<system>", "<system>");
  /* Only one end tagged: wrapped. */
  check_prompt (t, "<system> Hello there", "<system> <system> Hello there <system>");
  check_prompt (t, "Hello there <system>", "<system> Hello there <system> <system>");

  /* The wrapped prompt tokenises differently from the bare text. */
  int n_bare = 0, n_wrapped = 0;
  g_autofree int *bare = ppx_tokenizer_encode (t, "Hello there", &n_bare, NULL);
  g_autofree int *wrapped = ppx_tokenizer_encode_prompt (t, "Hello there", &n_wrapped, NULL);
  g_assert_cmpint (n_wrapped, >, n_bare);

  /* Empty and all-whitespace prompts: no tokens, no error, and a non-NULL result. */
  const char *blanks[] = {"", "   ", "\t\n\r ", "\u3000\u00a0 "};
  for (guint i = 0; i < G_N_ELEMENTS (blanks); i++) {
    g_autoptr (GError) error = NULL;
    int n = -1;
    g_autofree int *ids = ppx_tokenizer_encode_prompt (t, blanks[i], &n, &error);
    g_assert_no_error (error);
    g_assert_nonnull (ids);
    g_assert_cmpint (n, ==, 0);
  }
  int n = -1;
  g_autofree int *none = ppx_tokenizer_encode (t, "", &n, NULL);
  g_assert_nonnull (none);
  g_assert_cmpint (n, ==, 0);
}

static void
test_bad_text (void)
{
  g_autoptr (PpxTokenizer) t = load_model ();
  g_autoptr (GError) error = NULL;
  int n = -1;
  g_assert_null (ppx_tokenizer_encode (t, "bad \xff\xfe bytes", &n, &error));
  g_assert_error (error, PPX_ERROR, PPX_ERROR_INVALID);
  g_assert_nonnull (strstr (error->message, "UTF-8"));
  g_assert_nonnull (strstr (error->message, model_path));
  g_assert_cmpint (n, ==, 0);
  g_clear_error (&error);
  g_assert_null (ppx_tokenizer_encode_prompt (t, "\xc3", &n, &error));
  g_assert_error (error, PPX_ERROR, PPX_ERROR_INVALID);
}

static void
expect_load_error (const char *path, int code)
{
  g_autoptr (GError) error = NULL;
  PpxTokenizer *t = ppx_tokenizer_load (path, &error);
  g_assert_null (t);
  g_assert_nonnull (error);
  g_assert_true (error->domain == PPX_ERROR);
  if (code >= 0)
    g_assert_cmpint (error->code, ==, code);
  if (!strstr (error->message, path))
    g_error ("message '%s' does not name %s", error->message, path);
  if (g_test_verbose ())
    g_printerr ("%s\n", error->message);
}

static void
test_bad_files (void)
{
  g_autofree char *missing = g_build_filename (tmp_dir, "missing.model", NULL);
  expect_load_error (missing, PPX_ERROR_MISSING);
  expect_load_error (tmp_dir, PPX_ERROR_IO);

  g_autofree char *garbage = g_build_filename (tmp_dir, "garbage.model", NULL);
  guint8 bytes[4096];
  for (guint i = 0; i < sizeof bytes; i++)
    bytes[i] = (guint8) (i * 131 + 17);
  g_assert_true (g_file_set_contents (garbage, (const char *) bytes, sizeof bytes, NULL));
  expect_load_error (garbage, PPX_ERROR_FORMAT);

  g_autofree char *empty = g_build_filename (tmp_dir, "empty.model", NULL);
  g_assert_true (g_file_set_contents (empty, "", 0, NULL));
  expect_load_error (empty, -1);

  g_autofree char *text = g_build_filename (tmp_dir, "text.model", NULL);
  g_assert_true (g_file_set_contents (text, "this is not a model\n", -1, NULL));
  expect_load_error (text, -1);

  /* The trained model cut in half. */
  g_autofree char *contents = NULL;
  gsize len;
  g_assert_true (g_file_get_contents (model_path, &contents, &len, NULL));
  g_autofree char *cut = g_build_filename (tmp_dir, "cut.model", NULL);
  g_assert_true (g_file_set_contents (cut, contents, (gssize) (len / 2), NULL));
  expect_load_error (cut, -1);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  tmp_dir = g_dir_make_tmp ("ppx-tokenizer-XXXXXX", NULL);
  g_assert_nonnull (tmp_dir);
  g_autofree char *corpus = g_build_filename (tmp_dir, "corpus.txt", NULL);
  g_autofree char *prefix = g_build_filename (tmp_dir, "tiny", NULL);
  write_corpus (corpus);
  g_autoptr (GError) error = NULL;
  if (!ppx_test_spm_train (corpus, prefix, 200, &error))
    g_error ("%s", error->message);
  model_path = g_strconcat (prefix, ".model", NULL);

  g_test_add_func ("/tokenizer/vocab", test_vocab);
  g_test_add_func ("/tokenizer/round-trip", test_round_trip);
  g_test_add_func ("/tokenizer/piece-text", test_piece_text);
  g_test_add_func ("/tokenizer/prompt", test_prompt);
  g_test_add_func ("/tokenizer/bad-text", test_bad_text);
  g_test_add_func ("/tokenizer/bad-files", test_bad_files);
  int rc = g_test_run ();
  ppx_test_remove_tree (tmp_dir);
  g_free (tmp_dir);
  g_free (model_path);
  return rc;
}
