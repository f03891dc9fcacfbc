/* The catalogues of malformed (and a few valid edge-case) model files the format readers must refuse, built in
 * memory: the safetensors one (corrupt-safetensors.c) and the .pt one (pt-fixtures.c). Their tests check the
 * reader's error for each case; make-corrupt-safetensors and make-corrupt-pt write them out as the fuzzers' seed
 * corpora. */
#ifndef PPX_FORMAT_CASES_H
#define PPX_FORMAT_CASES_H

#include <glib.h>

typedef struct {
  char *name;         /* short identifier, also the corpus file name */
  GBytes *bytes;      /* the whole file, or (.pt, `is_pickle`) a data.pkl for pt_fixture_wrap_pickle */
  gboolean is_pickle;
  const char *expect; /* substring the error message must contain; NULL: the file is valid */
  const char *tensor; /* (safetensors) the tensor the message must name, or NULL */
} FormatCase;

/* An empty catalogue: a GPtrArray of FormatCase*, owning them. */
GPtrArray *format_cases_new (void);
/* Adds the case `name` (copied) of `bytes` (taken) that must fail with `expect` (static, NULL: valid); the case,
 * for the fields a catalogue adds. */
FormatCase *format_case_add (GPtrArray *cases, const char *name, GBytes *bytes, const char *expect);

#endif
