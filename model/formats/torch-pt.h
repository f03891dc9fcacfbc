/* PyTorch `.pt` files (torch.save zip format) holding a dict of tensors, such as PersonaPlex voice
 * prompts {"embeddings": bf16 [N,1,1,D], "cache": int64 [1,17,4]}. The reader is strict and bounded:
 * libzip for the container, a small unpickler that knows only the opcodes and globals torch.save
 * writes for a dict of tensors, and every view checked against its storage. See docs/voice-prompt-pt.md. */
#ifndef PPX_TORCH_PT_H
#define PPX_TORCH_PT_H

#include "ppx-common.h"

G_BEGIN_DECLS

#define PPX_PT_MAX_DIMS 8
/* Limits; a file beyond any of them is refused with an error. */
#define PPX_PT_MAX_TENSORS 64                     /* tensors in the top-level dict */
#define PPX_PT_MAX_PICKLE_BYTES (1u << 20)        /* size of data.pkl */
#define PPX_PT_MAX_BYTES ((gsize) 512 << 20)      /* storage bytes read, all records together */

typedef struct {
  char *name;     /* key in the saved dict */
  PpxDType dtype; /* from the storage type: BFloat16Storage -> BF16, LongStorage -> I64, ... */
  int ndim;
  int64_t shape[PPX_PT_MAX_DIMS];
  void *data;     /* row-major contiguous copy, little-endian; NULL when nbytes is 0 */
  gsize nbytes;
} PpxPtTensor;

typedef struct PpxPtFile PpxPtFile;

/* Loads every tensor of the saved top-level dict (entries that are not tensors are ignored).
 * Errors name the file and the problem; nothing aborts on bad input. */
PpxPtFile *ppx_pt_load (const char *path, GError **error);

/* What a caller expects of a tensor, judged from the pickle alone: its name, dtype and shape as declared.
 * FALSE with `error` set refuses the file. */
typedef gboolean (*PpxPtCheck) (const char *name, PpxDType dtype, int ndim, const int64_t *shape, gpointer user_data,
                                GError **error);
/* ppx_pt_load, with `check` run over every tensor once data.pkl is read and before any storage record is
 * read: a file that declares what the caller would refuse (e.g. too many frames) is refused without
 * inflating its storages. */
PpxPtFile *ppx_pt_load_checked (const char *path, PpxPtCheck check, gpointer user_data, GError **error);
/* The same over a caller-owned buffer; `label` stands for the file name in errors. */
PpxPtFile *ppx_pt_load_buffer (const void *data, gsize size, const char *label, GError **error);
void ppx_pt_free (PpxPtFile *f);

guint ppx_pt_n_tensors (const PpxPtFile *f);
/* Tensors in the dict's order. */
const PpxPtTensor *ppx_pt_tensor_at (const PpxPtFile *f, guint i);
const PpxPtTensor *ppx_pt_find (const PpxPtFile *f, const char *name);
gint64 ppx_pt_numel (const PpxPtTensor *t);

G_DEFINE_AUTOPTR_CLEANUP_FUNC (PpxPtFile, ppx_pt_free)

G_END_DECLS
#endif
