/* libFuzzer target: the safetensors header parser and the accessors over whatever it accepts.
 * Invariants checked: a refused input gives a PPX_ERROR naming the label; an accepted one has tensors that
 * lie inside the input, whose sizes agree with their shapes, and that the accessors handle without error. */
#include "safetensors.h"

#include <stdio.h>
#include <stdlib.h>

#define LABEL "fuzz-input"

static void
check (int ok, const char *what)
{
  if (!ok) {
    fprintf (stderr, "fuzz-safetensors: invariant broken: %s\n", what);
    abort ();
  }
}

static void
exercise_tensor (const PpxSafetensors *st, const PpxStTensor *t, const uint8_t *data, size_t size)
{
  check (ppx_st_find (st, t->name) == t, "find returns the listed tensor");
  check (ppx_st_numel (t) >= 0, "numel is non-negative");
  check ((guint64) ppx_st_numel (t) * ppx_dtype_size (t->dtype) == t->nbytes, "shape x dtype = byte span");
  check (t->nbytes == 0 ||
           ((const uint8_t *) t->data >= data && (const uint8_t *) t->data + t->nbytes <= data + size),
         "tensor data inside the input");
  volatile uint8_t sink = 0;
  for (gsize i = 0; i < t->nbytes; i++)
    sink ^= ((const uint8_t *) t->data)[i];
  (void) sink;

  GError *error = NULL;
  gboolean is_float = t->dtype == PPX_DTYPE_F32 || t->dtype == PPX_DTYPE_BF16 || t->dtype == PPX_DTYPE_F16;
  if (is_float && t->nbytes <= (1u << 24)) {
    float *v = ppx_st_load_f32 (st, t->name, t->ndim, t->shape, &error);
    check (v != NULL && error == NULL, "load_f32 of a float tensor with its own shape");
    g_free (v);
  }
  /* A wrong shape must be refused with a message naming the tensor. */
  int64_t wrong[PPX_ST_MAX_DIMS + 1];
  for (int d = 0; d < t->ndim; d++)
    wrong[d] = t->shape[d];
  wrong[t->ndim] = 3;
  check (!ppx_st_check (st, t, t->dtype, t->ndim + 1, wrong, &error), "check refuses an extra dimension");
  check (error && strstr (error->message, LABEL) && strstr (error->message, t->name), "shape error names it");
  g_clear_error (&error);
  float *none = ppx_st_load_f32 (st, t->name, t->ndim + 1, wrong, &error);
  check (none == NULL && error != NULL, "load_f32 refuses a wrong shape");
  g_clear_error (&error);
}

int LLVMFuzzerTestOneInput (const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
  GError *error = NULL;
  PpxSafetensors *st = ppx_st_open_buffer (data, size, LABEL, &error);
  if (!st) {
    check (error != NULL && error->domain == PPX_ERROR, "refusal sets a PPX_ERROR");
    check (strstr (error->message, LABEL) != NULL, "the message names the input");
    g_error_free (error);
    return 0;
  }
  check (error == NULL, "no error on success");
  (void) ppx_st_metadata (st, "format");
  (void) ppx_st_metadata (st, "");
  check (ppx_st_find (st, "__metadata__") == NULL, "metadata is not a tensor");
  for (guint i = 0; i < ppx_st_n_tensors (st); i++)
    exercise_tensor (st, ppx_st_tensor_at (st, i), data, size);
  check (ppx_st_tensor_at (st, ppx_st_n_tensors (st)) == NULL, "tensor_at past the end");
  const char *absent = "no such tensor";
  if (!ppx_st_find (st, absent)) {
    float *missing = ppx_st_load_f32 (st, absent, 0, NULL, &error);
    check (missing == NULL && error && error->code == PPX_ERROR_MISSING, "missing tensor refused");
    g_clear_error (&error);
  }
  ppx_st_close (st);
  return 0;
}
