/* A catalogue of malformed (and a few valid edge-case) safetensors files, built in memory.
 * test-safetensors checks the reader's error for each; make-corrupt-safetensors writes them out as the
 * fuzzer's seed corpus. */
#ifndef PPX_CORRUPT_SAFETENSORS_H
#define PPX_CORRUPT_SAFETENSORS_H

#include <glib.h>

typedef struct {
  char *name;         /* short identifier, also the corpus file name */
  GBytes *bytes;      /* the whole file */
  const char *expect; /* substring the error message must contain; NULL: the file is valid */
  const char *tensor; /* tensor the message must name, or NULL */
} PpxCorruptCase;

/* GPtrArray of PpxCorruptCase*, owning them. */
GPtrArray *ppx_corrupt_safetensors_cases (void);

#endif
