#include "torch-pt.h"

#include "torch-pickle.h"

#include <errno.h>
#include <stdio.h>
#include <zip.h>

struct PpxPtFile {
  GPtrArray *tensors;   /* PpxPtTensor* */
  GHashTable *by_name;  /* name -> PpxPtTensor* */
};

typedef struct {
  const char *label; /* the file name in errors */
  zip_t *zip;
  char *folder;      /* the archive's top-level folder, e.g. "voice_prompt" */
  GHashTable *storages; /* key -> GBytes, the records read so far */
  gsize bytes_read;
  PpxPtCheck check;     /* NULL, or the caller's check of the declared tensors */
  gpointer check_data;
} Archive;

static void
pt_tensor_free (PpxPtTensor *t)
{
  g_free (t->name);
  g_free (t->data);
  g_free (t);
}

void
ppx_pt_free (PpxPtFile *f)
{
  if (!f)
    return;
  g_hash_table_unref (f->by_name);
  g_ptr_array_unref (f->tensors);
  g_free (f);
}

guint
ppx_pt_n_tensors (const PpxPtFile *f)
{
  return f->tensors->len;
}

const PpxPtTensor *
ppx_pt_tensor_at (const PpxPtFile *f, guint i)
{
  return i < f->tensors->len ? g_ptr_array_index (f->tensors, i) : NULL;
}

const PpxPtTensor *
ppx_pt_find (const PpxPtFile *f, const char *name)
{
  return g_hash_table_lookup (f->by_name, name);
}

gint64
ppx_pt_numel (const PpxPtTensor *t)
{
  gint64 n = 1;
  for (int i = 0; i < t->ndim; i++)
    n *= t->shape[i];
  return n;
}

/* ---- the zip container ---- */

/* Reads a whole record; refuses one larger than `limit`. Reads in pieces so that a size the central
 * directory lies about costs no more memory than the data actually there. */
static GBytes *
read_record (Archive *a, const char *name, gsize limit, GError **error)
{
  zip_int64_t index = zip_name_locate (a->zip, name, 0);
  if (index < 0) {
    g_set_error (error, PPX_ERROR, PPX_ERROR_FORMAT, "%s: record '%s' is missing", a->label, name);
    return NULL;
  }
  zip_stat_t st;
  zip_stat_init (&st);
  if (zip_stat_index (a->zip, (zip_uint64_t) index, 0, &st) != 0 || !(st.valid & ZIP_STAT_SIZE)) {
    g_set_error (error, PPX_ERROR, PPX_ERROR_FORMAT, "%s: record '%s': %s", a->label, name,
                 zip_strerror (a->zip));
    return NULL;
  }
  if (st.size > limit) {
    g_set_error (error, PPX_ERROR, PPX_ERROR_FORMAT, "%s: record '%s' is %" G_GUINT64_FORMAT " bytes, over the limit of %" G_GSIZE_FORMAT,
                 a->label, name, (guint64) st.size, limit);
    return NULL;
  }
  zip_file_t *zf = zip_fopen_index (a->zip, (zip_uint64_t) index, 0);
  if (!zf) {
    g_set_error (error, PPX_ERROR, PPX_ERROR_FORMAT, "%s: record '%s' cannot be opened: %s", a->label, name,
                 zip_strerror (a->zip));
    return NULL;
  }
  GByteArray *buf = g_byte_array_new ();
  guint8 chunk[65536];
  gboolean ok = TRUE;
  for (;;) {
    zip_int64_t n = zip_fread (zf, chunk, sizeof chunk);
    if (n < 0) {
      g_set_error (error, PPX_ERROR, PPX_ERROR_FORMAT, "%s: record '%s' is corrupt: %s", a->label, name,
                   zip_file_strerror (zf));
      ok = FALSE;
      break;
    }
    if (n == 0)
      break;
    if ((guint64) buf->len + (guint64) n > st.size) {
      g_set_error (error, PPX_ERROR, PPX_ERROR_FORMAT, "%s: record '%s' holds more data than its declared %" G_GUINT64_FORMAT " bytes",
                   a->label, name, (guint64) st.size);
      ok = FALSE;
      break;
    }
    g_byte_array_append (buf, chunk, (guint) n);
  }
  zip_fclose (zf);
  if (ok && buf->len != st.size) {
    g_set_error (error, PPX_ERROR, PPX_ERROR_FORMAT, "%s: record '%s' holds %u bytes, not its declared %" G_GUINT64_FORMAT " (truncated?)",
                 a->label, name, buf->len, (guint64) st.size);
    ok = FALSE;
  }
  if (!ok) {
    g_byte_array_unref (buf);
    return NULL;
  }
  return g_byte_array_free_to_bytes (buf);
}

/* torch.save puts every record under one folder: finds "<folder>/data.pkl". */
static gboolean
find_folder (Archive *a, GError **error)
{
  zip_int64_t n = zip_get_num_entries (a->zip, 0);
  for (zip_int64_t i = 0; i < n; i++) {
    const char *name = zip_get_name (a->zip, (zip_uint64_t) i, 0);
    if (!name)
      continue;
    const char *slash = strchr (name, '/');
    if (!slash || slash == name || strcmp (slash, "/data.pkl") != 0)
      continue;
    if (a->folder) {
      g_set_error (error, PPX_ERROR, PPX_ERROR_FORMAT, "%s: several data.pkl records (not a single torch.save file)",
                   a->label);
      return FALSE;
    }
    a->folder = g_strndup (name, (gsize) (slash - name));
  }
  if (!a->folder) {
    g_set_error (error, PPX_ERROR, PPX_ERROR_FORMAT, "%s: no <folder>/data.pkl record (not a torch.save file?)", a->label);
    return FALSE;
  }
  return TRUE;
}

static gboolean
check_byteorder (Archive *a, GError **error)
{
  g_autofree char *name = g_strconcat (a->folder, "/byteorder", NULL);
  if (zip_name_locate (a->zip, name, 0) < 0)
    return TRUE; /* older writers omit it; they wrote little-endian */
  g_autoptr (GBytes) b = read_record (a, name, 16, error);
  if (!b)
    return FALSE;
  gsize len;
  const char *s = g_bytes_get_data (b, &len);
  if (len != 6 || memcmp (s, "little", 6) != 0) {
    g_set_error (error, PPX_ERROR, PPX_ERROR_UNSUPPORTED, "%s: byteorder record is not 'little'", a->label);
    return FALSE;
  }
  return TRUE;
}

/* ---- tensors ---- */

/* "[a, b, c]", as ppx_shape_str formats it (kept local so the reader stands alone for the fuzzer). */
static char *
shape_str (int ndim, const gint64 *shape)
{
  GString *s = g_string_new ("[");
  for (int i = 0; i < ndim; i++)
    g_string_append_printf (s, "%s%" G_GINT64_FORMAT, i ? ", " : "", shape[i]);
  g_string_append_c (s, ']');
  return g_string_free (s, FALSE);
}

static GBytes *
storage_bytes (Archive *a, const PpxPickleTensor *pt, GError **error)
{
  GBytes *b = g_hash_table_lookup (a->storages, pt->storage_key);
  if (b)
    return b;
  g_autofree char *name = g_strconcat (a->folder, "/data/", pt->storage_key, NULL);
  b = read_record (a, name, PPX_PT_MAX_BYTES - a->bytes_read, error);
  if (!b)
    return NULL;
  gsize esize = ppx_dtype_size (pt->dtype);
  guint64 declared;
  if (!g_uint64_checked_mul (&declared, (guint64) pt->storage_numel, esize) || declared != g_bytes_get_size (b)) {
    g_set_error (error, PPX_ERROR, PPX_ERROR_FORMAT,
                 "%s: storage data/%s holds %" G_GSIZE_FORMAT " bytes, but the pickle declares %" G_GINT64_FORMAT
                 " elements of %s",
                 a->label, pt->storage_key, g_bytes_get_size (b), pt->storage_numel, ppx_dtype_name (pt->dtype));
    g_bytes_unref (b);
    return NULL;
  }
  a->bytes_read += g_bytes_get_size (b);
  g_hash_table_insert (a->storages, g_strdup (pt->storage_key), b);
  return b;
}

/* Copies the strided view into a contiguous row-major buffer. The caller checked the bounds. */
static void
gather (const PpxPickleTensor *pt, const guint8 *src, guint8 *dst, guint64 numel, gsize esize)
{
  gint64 index[PPX_PT_MAX_DIMS] = {0};
  guint64 pos = (guint64) pt->offset;
  for (guint64 e = 0; e < numel; e++) {
    memcpy (dst + e * esize, src + pos * esize, esize);
    for (int d = pt->ndim - 1; d >= 0; d--) {
      pos += (guint64) pt->stride[d];
      if (++index[d] < pt->shape[d])
        break;
      pos -= (guint64) pt->stride[d] * (guint64) pt->shape[d];
      index[d] = 0;
    }
  }
}

static gboolean
is_contiguous (const PpxPickleTensor *pt)
{
  gint64 expect = 1;
  for (int d = pt->ndim - 1; d >= 0; d--) {
    if (pt->shape[d] != 1 && pt->stride[d] != expect)
      return FALSE;
    expect *= pt->shape[d];
  }
  return TRUE;
}

static PpxPtTensor *
make_tensor (Archive *a, const PpxPickleTensor *pt, GError **error)
{
  gsize esize = ppx_dtype_size (pt->dtype);
  /* numel, and the last element the view touches: offset + sum (shape - 1) * stride. */
  guint64 numel = 1, last = (guint64) pt->offset, term;
  gboolean overflow = FALSE;
  for (int d = 0; d < pt->ndim; d++)
    overflow |= !g_uint64_checked_mul (&numel, numel, (guint64) pt->shape[d]);
  for (int d = 0; d < pt->ndim && numel > 0; d++) {
    overflow |= !g_uint64_checked_mul (&term, (guint64) pt->shape[d] - 1, (guint64) pt->stride[d]);
    overflow |= !g_uint64_checked_add (&last, last, term);
  }
  g_autofree char *shape = shape_str (pt->ndim, pt->shape);
  guint64 needed = 0;
  overflow |= !g_uint64_checked_mul (&needed, numel > 0 ? last + 1 : last, esize);
  GBytes *b = overflow ? NULL : storage_bytes (a, pt, error);
  if (overflow) {
    g_set_error (error, PPX_ERROR, PPX_ERROR_FORMAT, "%s: tensor '%s': shape %s with its strides overflows", a->label,
                 pt->name, shape);
    return NULL;
  }
  if (!b)
    return NULL;
  gsize have = g_bytes_get_size (b);
  if (needed > have) {
    g_set_error (error, PPX_ERROR, PPX_ERROR_FORMAT,
                 "%s: tensor '%s': storage data/%s holds %" G_GSIZE_FORMAT " bytes, shape %s of %s at offset %"
                 G_GINT64_FORMAT " needs %" G_GUINT64_FORMAT,
                 a->label, pt->name, pt->storage_key, have, shape, ppx_dtype_name (pt->dtype), pt->offset, needed);
    return NULL;
  }
  /* A view with more elements than its storage (an expanded, overlapping view) would make the copy
   * larger than anything the file holds; torch never writes those for a voice prompt. */
  guint64 out_bytes;
  if (!g_uint64_checked_mul (&out_bytes, numel, esize) || out_bytes > have) {
    g_set_error (error, PPX_ERROR, PPX_ERROR_UNSUPPORTED,
                 "%s: tensor '%s': shape %s has more elements than its storage data/%s (overlapping views are not supported)",
                 a->label, pt->name, shape, pt->storage_key);
    return NULL;
  }
  PpxPtTensor *t = g_new0 (PpxPtTensor, 1);
  t->name = g_strdup (pt->name);
  t->dtype = pt->dtype;
  t->ndim = pt->ndim;
  memcpy (t->shape, pt->shape, sizeof t->shape);
  t->nbytes = (gsize) out_bytes;
  t->data = g_malloc (t->nbytes);
  const guint8 *src = g_bytes_get_data (b, NULL);
  if (t->nbytes == 0)
    ; /* nothing to copy */
  else if (is_contiguous (pt))
    memcpy (t->data, src + (gsize) pt->offset * esize, t->nbytes);
  else
    gather (pt, src, t->data, numel, esize);
  return t;
}

static PpxPtFile *
load_archive (Archive *a, GError **error)
{
  if (!find_folder (a, error) || !check_byteorder (a, error))
    return NULL;
  g_autofree char *pkl_name = g_strconcat (a->folder, "/data.pkl", NULL);
  g_autoptr (GBytes) pkl = read_record (a, pkl_name, PPX_PT_MAX_PICKLE_BYTES, error);
  if (!pkl)
    return NULL;
  gsize pkl_size;
  const guint8 *pkl_data = g_bytes_get_data (pkl, &pkl_size);
  g_autoptr (GPtrArray) refs = ppx_torch_unpickle (pkl_data, pkl_size, a->label, error);
  if (!refs)
    return NULL;
  for (guint i = 0; a->check && i < refs->len; i++) {
    const PpxPickleTensor *pt = g_ptr_array_index (refs, i);
    if (!a->check (pt->name, pt->dtype, pt->ndim, pt->shape, a->check_data, error))
      return NULL;
  }

  PpxPtFile *f = g_new0 (PpxPtFile, 1);
  f->tensors = g_ptr_array_new_with_free_func ((GDestroyNotify) pt_tensor_free);
  f->by_name = g_hash_table_new (g_str_hash, g_str_equal);
  for (guint i = 0; i < refs->len; i++) {
    PpxPtTensor *t = make_tensor (a, g_ptr_array_index (refs, i), error);
    if (!t) {
      ppx_pt_free (f);
      return NULL;
    }
    g_ptr_array_add (f->tensors, t);
    g_hash_table_insert (f->by_name, t->name, t);
  }
  return f;
}

/* Refuses what libzip would misread: an empty file (an empty archive to libzip) and the legacy
 * (torch < 1.6) format, which starts with a pickle instead of a zip header. */
static gboolean
check_head (const guint8 *head, gsize len, const char *label, GError **error)
{
  if (len == 0) {
    g_set_error (error, PPX_ERROR, PPX_ERROR_FORMAT, "%s: file is empty", label);
    return FALSE;
  }
  if (len >= 2 && head[0] == 0x80 && head[1] <= 5) {
    g_set_error (error, PPX_ERROR, PPX_ERROR_UNSUPPORTED,
                 "%s: legacy (pre-zip) torch.save format is not supported; re-save it with torch >= 1.6", label);
    return FALSE;
  }
  return TRUE;
}

static PpxPtFile *
load_source (zip_source_t *src, const char *label, PpxPtCheck check, gpointer check_data, GError **error)
{
#if G_BYTE_ORDER != G_LITTLE_ENDIAN
  g_set_error (error, PPX_ERROR, PPX_ERROR_UNSUPPORTED, "%s: .pt files are only supported on little-endian hosts",
               label);
  zip_source_free (src);
  return NULL;
#endif
  zip_error_t zerr;
  zip_error_init (&zerr);
  zip_t *zip = zip_open_from_source (src, ZIP_RDONLY, &zerr);
  if (!zip) {
    int code = zip_error_code_zip (&zerr);
    gboolean io = code == ZIP_ER_OPEN || code == ZIP_ER_NOENT || code == ZIP_ER_READ || code == ZIP_ER_SEEK;
    g_set_error (error, PPX_ERROR, io ? PPX_ERROR_IO : PPX_ERROR_FORMAT, "%s: %s%s", label,
                 io ? "" : "not a torch.save zip archive: ", zip_error_strerror (&zerr));
    zip_error_fini (&zerr);
    zip_source_free (src);
    return NULL;
  }
  zip_error_fini (&zerr);
  Archive a = {
    .label = label,
    .zip = zip,
    .storages = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, (GDestroyNotify) g_bytes_unref),
    .check = check,
    .check_data = check_data,
  };
  PpxPtFile *f = load_archive (&a, error);
  zip_discard (zip); /* also frees the source */
  g_hash_table_unref (a.storages);
  g_free (a.folder);
  return f;
}

PpxPtFile *
ppx_pt_load_buffer (const void *data, gsize size, const char *label, GError **error)
{
  if (!check_head (data, size, label, error))
    return NULL;
  zip_error_t zerr;
  zip_error_init (&zerr);
  zip_source_t *src = zip_source_buffer_create (size ? data : "", size, 0, &zerr);
  if (!src) {
    g_set_error (error, PPX_ERROR, PPX_ERROR_NOMEM, "%s: %s", label, zip_error_strerror (&zerr));
    zip_error_fini (&zerr);
    return NULL;
  }
  zip_error_fini (&zerr);
  return load_source (src, label, NULL, NULL, error);
}

PpxPtFile *
ppx_pt_load (const char *path, GError **error)
{
  return ppx_pt_load_checked (path, NULL, NULL, error);
}

PpxPtFile *
ppx_pt_load_checked (const char *path, PpxPtCheck check, gpointer user_data, GError **error)
{
  /* Open it ourselves first, for a plain I/O error message. */
  FILE *fp = fopen (path, "rb");
  if (!fp) {
    int e = errno;
    g_set_error (error, PPX_ERROR, e == ENOENT ? PPX_ERROR_MISSING : PPX_ERROR_IO, "%s: %s", path, g_strerror (e));
    return NULL;
  }
  guint8 magic[2] = {0};
  gsize got = fread (magic, 1, 2, fp);
  fclose (fp);
  if (!check_head (magic, got, path, error))
    return NULL;
  zip_error_t zerr;
  zip_error_init (&zerr);
  zip_source_t *src = zip_source_file_create (path, 0, -1, &zerr);
  if (!src) {
    g_set_error (error, PPX_ERROR, PPX_ERROR_IO, "%s: %s", path, zip_error_strerror (&zerr));
    zip_error_fini (&zerr);
    return NULL;
  }
  zip_error_fini (&zerr);
  return load_source (src, path, check, user_data, error);
}
