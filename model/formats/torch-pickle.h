/* A restricted unpickler for the data.pkl record of a torch.save zip. It runs only the opcodes and
 * globals that torch.save emits for a dict of tensors (protocol 2) and turns the result into a list
 * of tensor references; anything else is an error. Internal to torch-pt.c. */
#ifndef PPX_TORCH_PICKLE_H
#define PPX_TORCH_PICKLE_H

#include "torch-pt.h"

G_BEGIN_DECLS

/* Bounds of the interpreter. */
#define PPX_PICKLE_MAX_STACK 4096
#define PPX_PICKLE_MAX_MARKS 64
#define PPX_PICKLE_MAX_MEMO 65536
#define PPX_PICKLE_MAX_DEPTH 16       /* nesting of tuples and dicts */
#define PPX_PICKLE_MAX_DICT 256       /* entries of one dict */
#define PPX_PICKLE_MAX_KEY 64         /* length of a storage key */

/* One `_rebuild_tensor_v2` call found in the top-level dict. */
typedef struct {
  char *name;           /* dict key */
  PpxDType dtype;       /* from the storage type */
  char *storage_key;    /* the record is <folder>/data/<storage_key>; [A-Za-z0-9_] only */
  gint64 storage_numel; /* elements of the storage, as the pickle declares */
  gint64 offset;        /* storage offset, in elements */
  int ndim;
  gint64 shape[PPX_PT_MAX_DIMS];
  gint64 stride[PPX_PT_MAX_DIMS]; /* in elements */
} PpxPickleTensor;

void ppx_pickle_tensor_free (PpxPickleTensor *t);

/* Runs the pickle. Returns a GPtrArray of PpxPickleTensor* (owning them) in dict order, or NULL with
 * `error` set to "<label>: data.pkl: <problem> at byte <offset>". */
GPtrArray *ppx_torch_unpickle (const guint8 *data, gsize size, const char *label, GError **error);

G_END_DECLS
#endif
