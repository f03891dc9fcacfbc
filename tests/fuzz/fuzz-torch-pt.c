/* libFuzzer target: the .pt reader (zip container, restricted unpickler, storage views).
 * An input starting with "PK" is a whole .pt file. Anything else is taken as a data.pkl and wrapped in a
 * valid archive with four 4096-byte storages (pt_fixture_wrap_pickle), so that mutations of the pickle
 * reach the interpreter instead of failing the zip's CRC check.
 * Invariants checked: a refused input gives a PPX_ERROR naming the label; an accepted one has tensors whose
 * byte counts agree with their shapes and dtypes, which find() returns by name. */
#include "pt-fixtures.h"
#include "torch-pt.h"

#include <stdio.h>
#include <stdlib.h>

#define LABEL "fuzz-input"

static void
check (int ok, const char *what)
{
  if (!ok) {
    fprintf (stderr, "fuzz-torch-pt: invariant broken: %s\n", what);
    abort ();
  }
}

static void
exercise (const void *data, size_t size)
{
  GError *error = NULL;
  PpxPtFile *f = ppx_pt_load_buffer (data, size, LABEL, &error);
  if (!f) {
    check (error != NULL && error->domain == PPX_ERROR, "refusal sets a PPX_ERROR");
    check (g_str_has_prefix (error->message, LABEL), "the message names the input");
    check (g_utf8_validate (error->message, -1, NULL), "the message is UTF-8");
    g_error_free (error);
    return;
  }
  check (error == NULL, "no error on success");
  check (ppx_pt_n_tensors (f) <= PPX_PT_MAX_TENSORS, "tensor count within the limit");
  gsize total = 0;
  for (guint i = 0; i < ppx_pt_n_tensors (f); i++) {
    const PpxPtTensor *t = ppx_pt_tensor_at (f, i);
    check (ppx_pt_find (f, t->name) == t, "find returns the listed tensor");
    check (t->ndim >= 0 && t->ndim <= PPX_PT_MAX_DIMS, "rank within the limit");
    check ((guint64) ppx_pt_numel (t) * ppx_dtype_size (t->dtype) == t->nbytes, "shape x dtype = byte count");
    volatile guint8 sink = 0;
    for (gsize b = 0; b < t->nbytes; b++)
      sink ^= ((const guint8 *) t->data)[b];
    (void) sink;
    total += t->nbytes;
  }
  check (total <= PPX_PT_MAX_BYTES, "output within the byte limit");
  check (ppx_pt_tensor_at (f, ppx_pt_n_tensors (f)) == NULL, "tensor_at past the end");
  ppx_pt_free (f);
}

int LLVMFuzzerTestOneInput (const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
  if (size >= 2 && data[0] == 'P' && data[1] == 'K') {
    exercise (data, size);
    return 0;
  }
  if (size > PPX_PT_MAX_PICKLE_BYTES)
    return 0;
  GBytes *file = pt_fixture_wrap_pickle (data, size);
  gsize len;
  const void *bytes = g_bytes_get_data (file, &len);
  exercise (bytes, len);
  g_bytes_unref (file);
  return 0;
}
