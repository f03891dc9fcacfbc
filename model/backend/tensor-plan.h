/* Allocating a set of device tensors and counting their bytes from one description: code that makes
 * its tensors through a PpxTensorPlan with be == NULL learns how many device bytes it would allocate
 * without allocating anything (engine memory figures before an engine exists). */
#ifndef PPX_TENSOR_PLAN_H
#define PPX_TENSOR_PLAN_H

#include "backend.h"

typedef struct {
  PpxBackend *be;  /* NULL: count only */
  guint64 bytes;   /* device bytes planned so far */
  GError **error;
  gboolean failed; /* an allocation failed (the error is set); later ones are skipped */
} PpxTensorPlan;

/* A tensor of n elements (ppx_tensor_new), or NULL when only counting or after a failure. */
static inline PpxTensor *
ppx_plan_tensor (PpxTensorPlan *p, PpxTensorType type, gsize n)
{
  p->bytes += (guint64) MAX (n, 1) * 4;
  if (!p->be || p->failed)
    return NULL;
  PpxTensor *t = ppx_tensor_new (p->be, type, n, p->error);
  p->failed = t == NULL;
  return t;
}

/* A KV cache (ppx_kv_cache_new). */
static inline PpxTensor *
ppx_plan_kv_cache (PpxTensorPlan *p, PpxTensorType type, int n_slots, int cap, int H, int Dh)
{
  p->bytes += ppx_kv_cache_bytes (type, n_slots, cap, H, Dh);
  if (!p->be || p->failed)
    return NULL;
  PpxTensor *t = ppx_kv_cache_new (p->be, type, n_slots, cap, H, Dh, p->error);
  p->failed = t == NULL;
  return t;
}

#endif
