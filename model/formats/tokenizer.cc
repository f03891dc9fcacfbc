// SentencePiece behind a C API. Every entry point catches C++ exceptions and turns them into a GError:
// nothing may unwind into C.
#include "tokenizer.h"

#include <sentencepiece_processor.h>

#include <exception>
#include <new>
#include <string>
#include <vector>

struct PpxTokenizer {
  sentencepiece::SentencePieceProcessor sp;
  std::string path;
};

namespace {

const int kEpadId = 0;
const int kPadId = 3;
const char kWordBoundary[] = "\xe2\x96\x81"; // U+2581 LOWER ONE EIGHTH BLOCK, sentencepiece's space
const char kSystemTag[] = "<system>";

void
set_exception_error (GError **error, const char *file, const char *what, const std::exception *e)
{
  g_set_error (error, PPX_ERROR, PPX_ERROR_INVALID, "%s: tokenizer: %s failed: %s", file, what,
               e ? e->what () : "unknown C++ exception");
}

// Python's str.isspace() (Unicode White_Space minus a few, plus the C0 separators), so that the prompt
// is stripped exactly as the reference's text.strip() does.
bool
is_python_space (gunichar c)
{
  return (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xa0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f || c == 0x205f || c == 0x3000;
}

std::string
python_strip (const char *text)
{
  const char *begin = text, *end = text + strlen (text);
  while (begin < end && is_python_space (g_utf8_get_char (begin)))
    begin = g_utf8_next_char (begin);
  while (end > begin) {
    const char *prev = g_utf8_prev_char (end);
    if (!is_python_space (g_utf8_get_char (prev)))
      break;
    end = prev;
  }
  return std::string (begin, (size_t) (end - begin));
}

bool
starts_and_ends_with_tag (const std::string &s)
{
  size_t n = sizeof kSystemTag - 1;
  return s.size () >= n && s.compare (0, n, kSystemTag) == 0 && s.compare (s.size () - n, n, kSystemTag) == 0;
}

int *
encode_utf8 (const PpxTokenizer *t, const std::string &text, int *n_ids, GError **error)
{
  std::vector<int> ids;
  auto status = t->sp.Encode (text, &ids);
  if (!status.ok ()) {
    g_set_error (error, PPX_ERROR, PPX_ERROR_INVALID, "%s: encoding failed: %s", t->path.c_str (),
                 status.ToString ().c_str ());
    return NULL;
  }
  int *out = g_new (int, ids.size () + 1); // +1: never NULL on success
  for (size_t i = 0; i < ids.size (); i++)
    out[i] = ids[i];
  *n_ids = (int) ids.size ();
  return out;
}

bool
check_text (const PpxTokenizer *t, const char *text, GError **error)
{
  if (!text || !g_utf8_validate (text, -1, NULL)) {
    g_set_error (error, PPX_ERROR, PPX_ERROR_INVALID, "%s: text to encode is %s", t->path.c_str (),
                 text ? "not valid UTF-8" : "NULL");
    return false;
  }
  return true;
}

} // namespace

PpxTokenizer *
ppx_tokenizer_load (const char *path, GError **error)
{
  if (!g_file_test (path, G_FILE_TEST_EXISTS)) {
    g_set_error (error, PPX_ERROR, PPX_ERROR_MISSING, "%s: tokenizer model not found", path);
    return NULL;
  }
  if (!g_file_test (path, G_FILE_TEST_IS_REGULAR)) {
    g_set_error (error, PPX_ERROR, PPX_ERROR_IO, "%s: tokenizer model is not a regular file", path);
    return NULL;
  }
  PpxTokenizer *t = NULL;
  try {
    t = new PpxTokenizer ();
    t->path = path;
    auto status = t->sp.Load (path);
    if (!status.ok ()) {
      g_set_error (error, PPX_ERROR, PPX_ERROR_FORMAT, "%s: not a valid SentencePiece model: %s", path,
                   status.ToString ().c_str ());
      delete t;
      return NULL;
    }
    if (t->sp.GetPieceSize () <= 0) {
      g_set_error (error, PPX_ERROR, PPX_ERROR_FORMAT, "%s: SentencePiece model has an empty vocabulary", path);
      delete t;
      return NULL;
    }
    return t;
  } catch (const std::bad_alloc &e) {
    g_set_error (error, PPX_ERROR, PPX_ERROR_NOMEM, "%s: out of memory loading the tokenizer", path);
  } catch (const std::exception &e) {
    set_exception_error (error, path, "loading", &e);
  } catch (...) {
    set_exception_error (error, path, "loading", NULL);
  }
  delete t;
  return NULL;
}

void
ppx_tokenizer_free (PpxTokenizer *t)
{
  delete t;
}

int
ppx_tokenizer_vocab_size (const PpxTokenizer *t)
{
  try {
    return t->sp.GetPieceSize ();
  } catch (...) {
    return 0;
  }
}

int *
ppx_tokenizer_encode (const PpxTokenizer *t, const char *text, int *n_ids, GError **error)
{
  *n_ids = 0;
  if (!check_text (t, text, error))
    return NULL;
  try {
    return encode_utf8 (t, text, n_ids, error);
  } catch (const std::exception &e) {
    set_exception_error (error, t->path.c_str (), "encoding", &e);
  } catch (...) {
    set_exception_error (error, t->path.c_str (), "encoding", NULL);
  }
  *n_ids = 0;
  return NULL;
}

char *
ppx_tokenizer_piece_text (const PpxTokenizer *t, int id)
{
  try {
    if (id == kEpadId || id == kPadId || id < 0 || id >= t->sp.GetPieceSize ())
      return NULL;
    std::string piece = t->sp.IdToPiece (id);
    const size_t n = sizeof kWordBoundary - 1;
    for (size_t at = piece.find (kWordBoundary); at != std::string::npos; at = piece.find (kWordBoundary, at + 1))
      piece.replace (at, n, " ");
    return g_strndup (piece.data (), piece.size ());
  } catch (...) {
    return NULL;
  }
}

int *
ppx_tokenizer_encode_prompt (const PpxTokenizer *t, const char *text, int *n_ids, GError **error)
{
  *n_ids = 0;
  if (!check_text (t, text, error))
    return NULL;
  try {
    std::string stripped = python_strip (text);
    if (stripped.empty ())
      return g_new (int, 1);
    if (starts_and_ends_with_tag (stripped))
      return encode_utf8 (t, stripped, n_ids, error);
    return encode_utf8 (t, std::string (kSystemTag) + " " + stripped + " " + kSystemTag, n_ids, error);
  } catch (const std::exception &e) {
    set_exception_error (error, t->path.c_str (), "encoding the prompt", &e);
  } catch (...) {
    set_exception_error (error, t->path.c_str (), "encoding the prompt", NULL);
  }
  *n_ids = 0;
  return NULL;
}
