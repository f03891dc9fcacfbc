/* A catalogue of malformed (and a few valid edge-case) safetensors files, built in memory (format-cases.h).
 * test-safetensors checks the reader's error for each; make-corrupt-safetensors writes them out as the
 * fuzzer's seed corpus. */
#ifndef PPX_CORRUPT_SAFETENSORS_H
#define PPX_CORRUPT_SAFETENSORS_H

#include "format-cases.h"

typedef FormatCase PpxCorruptCase;

/* GPtrArray of PpxCorruptCase*, owning them. */
GPtrArray *ppx_corrupt_safetensors_cases (void);

#endif
