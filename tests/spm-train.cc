// Direct SentencePiece calls for test-tokenizer (see spm-train.h).
#include "spm-train.h"

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <string>
#include <vector>

gboolean
ppx_test_spm_train (const char *corpus, const char *prefix, int vocab_size, GError **error)
{
  try {
    std::string args = std::string ("--input=") + corpus + " --model_prefix=" + prefix +
                       " --vocab_size=" + std::to_string (vocab_size) +
                       " --model_type=unigram --character_coverage=1.0 --hard_vocab_limit=false"
                       " --unk_id=0 --bos_id=1 --eos_id=2 --pad_id=3 --num_threads=1 --minloglevel=2";
    auto status = sentencepiece::SentencePieceTrainer::Train (args);
    if (!status.ok ()) {
      g_set_error (error, g_quark_from_static_string ("ppx-test-spm"), 1, "training failed: %s", status.ToString ().c_str ());
      return FALSE;
    }
    return TRUE;
  } catch (const std::exception &e) {
    g_set_error (error, g_quark_from_static_string ("ppx-test-spm"), 1, "training threw: %s", e.what ());
    return FALSE;
  }
}

char *
ppx_test_spm_decode (const char *model, const int *ids, int n_ids)
{
  sentencepiece::SentencePieceProcessor sp;
  if (!sp.Load (model).ok ())
    return NULL;
  std::string text;
  if (!sp.Decode (std::vector<int> (ids, ids + n_ids), &text).ok ())
    return NULL;
  return g_strdup (text.c_str ());
}

char *
ppx_test_spm_id_to_piece (const char *model, int id)
{
  sentencepiece::SentencePieceProcessor sp;
  if (!sp.Load (model).ok () || id < 0 || id >= sp.GetPieceSize ())
    return NULL;
  return g_strdup (sp.IdToPiece (id).c_str ());
}
