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
};

#endif
