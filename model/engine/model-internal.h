/* Private: the model object, shared by the files of model/engine/ (model.c loads it; engines and
 * sessions read its weights, config and tokenizer). */
#ifndef PPX_MODEL_INTERNAL_H
#define PPX_MODEL_INTERNAL_H

#include "config.h"
#include "lm.h"
#include "mimi.h"
#include "personaplex.h"
#include "safetensors.h"
#include "tokenizer.h"

#define TOKENIZER_FILE "tokenizer_spm_32k_3.model"
#define TEXT_PAD 3

struct PpxModel {
  gint refcount;
  PpxConfig cfg;
  PpxBackend *be;
  PpxSafetensors *lm_st, *mimi_st;
  PpxLm *lm;
  PpxMimi *mimi;
  PpxTokenizer *tok;
  PpxQuantization quant;
  char *lm_path;
  char *model_dir;
  /* Voice prompts read once per model (session.c, load_voice), under voice_lock: voices maps a key (the
   * resolved path, and for audio its normalisation and disk cache directory) to a PpxVoicePrompt (a reference
   * each); voices_loading holds the keys a session is reading now (the others wait on voice_cond);
   * voice_reads counts the files read (for tests). */
  GMutex voice_lock;
  GCond voice_cond;
  GHashTable *voices, *voices_loading;
  guint voice_reads;
};

#endif
