/* Safetensors files: a validating reader over mmap, and a streaming writer. */
#ifndef PPX_SAFETENSORS_H
#define PPX_SAFETENSORS_H

#include "ppx-common.h"

G_BEGIN_DECLS

#define PPX_ST_MAX_DIMS 8
/* A header larger than this is refused (the real 7B header is about 40 KiB). */
#define PPX_ST_MAX_HEADER (100u * 1024u * 1024u)

typedef struct {
  const char *name;
  PpxDType dtype;
  int ndim;
  int64_t shape[PPX_ST_MAX_DIMS];
  gsize nbytes;
  const void *data; /* inside the mapping, valid until ppx_st_close() */
} PpxStTensor;

typedef struct PpxSafetensors PpxSafetensors;

/* Opens and validates the whole header (JSON, dtypes, shapes, offsets, overlap, file size).
 * Every error message names the file and, where one is at fault, the tensor. */
PpxSafetensors *ppx_st_open (const char *path, GError **error);
/* The same checks over a caller-owned buffer (used by the fuzz target). */
PpxSafetensors *ppx_st_open_buffer (const void *data, gsize size, const char *label, GError **error);
void ppx_st_close (PpxSafetensors *st);

const char *ppx_st_path (const PpxSafetensors *st);
guint ppx_st_n_tensors (const PpxSafetensors *st);
const PpxStTensor *ppx_st_tensor_at (const PpxSafetensors *st, guint i);
const PpxStTensor *ppx_st_find (const PpxSafetensors *st, const char *name);
/* Value of a `__metadata__` entry, or NULL. */
const char *ppx_st_metadata (const PpxSafetensors *st, const char *key);
gint64 ppx_st_numel (const PpxStTensor *t);

/* Checks dtype and shape; the error names the file, the tensor, the expected and the found shape. */
gboolean ppx_st_check (const PpxSafetensors *st, const PpxStTensor *t, PpxDType dtype, int ndim,
                       const int64_t *shape, GError **error);
/* Finds a tensor and converts it to a newly allocated f32 array of the expected shape. */
float *ppx_st_load_f32 (const PpxSafetensors *st, const char *name, int ndim, const int64_t *shape,
                        GError **error);
/* Formats a shape as "[a, b, c]" (g_free the result). */
char *ppx_shape_str (int ndim, const int64_t *shape);

/* Streaming writer: declare every tensor, then write their data in declaration order.
 * Memory stays bounded by what the caller passes to ppx_st_writer_write. */
typedef struct PpxStWriter PpxStWriter;
PpxStWriter *ppx_st_writer_new (void);
void ppx_st_writer_set_metadata (PpxStWriter *w, const char *key, const char *value);
void ppx_st_writer_declare (PpxStWriter *w, const char *name, PpxDType dtype, int ndim, const int64_t *shape);
/* Writes the header; then call ppx_st_writer_write for each declared tensor in order. */
gboolean ppx_st_writer_begin (PpxStWriter *w, const char *path, GError **error);
/* Appends bytes of the current tensor; may be called several times per tensor. */
gboolean ppx_st_writer_write (PpxStWriter *w, const void *data, gsize nbytes, GError **error);
/* The data bytes declared; *written (may be NULL) gets how many of them were written so far (progress). */
guint64 ppx_st_writer_data_bytes (const PpxStWriter *w, guint64 *written);
/* Checks every declared byte was written, and closes. */
gboolean ppx_st_writer_finish (PpxStWriter *w, GError **error);
void ppx_st_writer_free (PpxStWriter *w);

G_END_DECLS
#endif
