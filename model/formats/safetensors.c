#include "safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include "json-strict.h"
#include <stdio.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

struct PpxSafetensors {
  char *path;
  const uint8_t *map;
  gsize map_size;
  gboolean owns_map;
  GPtrArray *tensors;      /* PpxStTensor* */
  GHashTable *by_name;     /* name -> PpxStTensor* */
  GHashTable *metadata;    /* key -> value */
};

static void
tensor_free (gpointer p)
{
  PpxStTensor *t = p;
  g_free ((char *) t->name);
  g_free (t);
}

char *
ppx_shape_str (int ndim, const int64_t *shape)
{
  GString *s = g_string_new ("[");
  for (int i = 0; i < ndim; i++)
    g_string_append_printf (s, "%s%" G_GINT64_FORMAT, i ? ", " : "", shape[i]);
  g_string_append_c (s, ']');
  return g_string_free (s, FALSE);
}

gint64
ppx_st_numel (const PpxStTensor *t)
{
  gint64 n = 1;
  for (int i = 0; i < t->ndim; i++)
    n *= t->shape[i];
  return n;
}

static int
cmp_by_offset (gconstpointer a, gconstpointer b)
{
  const PpxStTensor *x = *(PpxStTensor *const *) a, *y = *(PpxStTensor *const *) b;
  if (x->data != y->data)
    return (const uint8_t *) x->data < (const uint8_t *) y->data ? -1 : 1;
  return x->nbytes < y->nbytes ? -1 : (x->nbytes > y->nbytes);
}

static gboolean
get_u64 (JsonNode *n, guint64 *out)
{
  if (!n || !JSON_NODE_HOLDS_VALUE (n) || json_node_get_value_type (n) != G_TYPE_INT64)
    return FALSE;
  gint64 v = json_node_get_int (n);
  if (v < 0)
    return FALSE;
  *out = (guint64) v;
  return TRUE;
}

static gboolean
parse_tensor (PpxSafetensors *st, const char *name, JsonNode *node, const uint8_t *data, guint64 data_len,
              GError **error)
{
  const char *file = st->path;
  if (!JSON_NODE_HOLDS_OBJECT (node)) {
    g_set_error (error, PPX_ERROR, PPX_ERROR_FORMAT, "%s: tensor '%s': header entry is not an object", file, name);
    return FALSE;
  }
  JsonObject *o = json_node_get_object (node);
  JsonNode *dn = json_object_get_member (o, "dtype");
  JsonNode *sn = json_object_get_member (o, "shape");
  JsonNode *on = json_object_get_member (o, "data_offsets");
  if (!dn || !JSON_NODE_HOLDS_VALUE (dn) || json_node_get_value_type (dn) != G_TYPE_STRING) {
    g_set_error (error, PPX_ERROR, PPX_ERROR_FORMAT, "%s: tensor '%s': missing or non-string dtype", file, name);
    return FALSE;
  }
  PpxDType dt;
  if (!ppx_dtype_from_name (json_node_get_string (dn), &dt)) {
    g_set_error (error, PPX_ERROR, PPX_ERROR_FORMAT, "%s: tensor '%s': unknown dtype '%s'", file, name,
                 json_node_get_string (dn));
    return FALSE;
  }
  if (!sn || !JSON_NODE_HOLDS_ARRAY (sn)) {
    g_set_error (error, PPX_ERROR, PPX_ERROR_FORMAT, "%s: tensor '%s': missing or non-array shape", file, name);
    return FALSE;
  }
  JsonArray *sa = json_node_get_array (sn);
  guint nd = json_array_get_length (sa);
  if (nd > PPX_ST_MAX_DIMS) {
    g_set_error (error, PPX_ERROR, PPX_ERROR_FORMAT, "%s: tensor '%s': %u dimensions (at most %d supported)", file,
                 name, nd, PPX_ST_MAX_DIMS);
    return FALSE;
  }
  PpxStTensor *t = g_new0 (PpxStTensor, 1);
  t->name = g_strdup (name);
  t->dtype = dt;
  t->ndim = (int) nd;
  guint64 numel = 1;
  for (guint i = 0; i < nd; i++) {
    guint64 d;
    if (!get_u64 (json_array_get_element (sa, i), &d) || d > (guint64) G_MAXINT64) {
      g_set_error (error, PPX_ERROR, PPX_ERROR_FORMAT, "%s: tensor '%s': shape entry %u is not a non-negative integer",
                   file, name, i);
      tensor_free (t);
      return FALSE;
    }
    t->shape[i] = (int64_t) d;
    /* Keep every partial product within gint64 so ppx_st_numel() cannot overflow either. */
    if (d != 0 && numel > (guint64) G_MAXINT64 / d) {
      g_set_error (error, PPX_ERROR, PPX_ERROR_FORMAT, "%s: tensor '%s': shape overflows", file, name);
      tensor_free (t);
      return FALSE;
    }
    numel *= d;
  }
  guint64 esz = ppx_dtype_size (dt);
  if (numel > G_MAXUINT64 / esz) {
    g_set_error (error, PPX_ERROR, PPX_ERROR_FORMAT, "%s: tensor '%s': shape overflows", file, name);
    tensor_free (t);
    return FALSE;
  }
  guint64 begin, end;
  if (!on || !JSON_NODE_HOLDS_ARRAY (on) || json_array_get_length (json_node_get_array (on)) != 2 ||
      !get_u64 (json_array_get_element (json_node_get_array (on), 0), &begin) ||
      !get_u64 (json_array_get_element (json_node_get_array (on), 1), &end)) {
    g_set_error (error, PPX_ERROR, PPX_ERROR_FORMAT, "%s: tensor '%s': data_offsets must be two non-negative integers",
                 file, name);
    tensor_free (t);
    return FALSE;
  }
  if (begin > end || end > data_len) {
    g_set_error (error, PPX_ERROR, PPX_ERROR_FORMAT,
                 "%s: tensor '%s': data_offsets [%" G_GUINT64_FORMAT ", %" G_GUINT64_FORMAT
                 "] outside the data section of %" G_GUINT64_FORMAT " bytes (file truncated?)",
                 file, name, begin, end, data_len);
    tensor_free (t);
    return FALSE;
  }
  if (end - begin != numel * esz) {
    char *s = ppx_shape_str (t->ndim, t->shape);
    g_set_error (error, PPX_ERROR, PPX_ERROR_FORMAT,
                 "%s: tensor '%s': shape %s of %s needs %" G_GUINT64_FORMAT " bytes but data_offsets span %" G_GUINT64_FORMAT,
                 file, name, s, ppx_dtype_name (dt), numel * esz, end - begin);
    g_free (s);
    tensor_free (t);
    return FALSE;
  }
  t->nbytes = end - begin;
  t->data = data + begin;
  g_ptr_array_add (st->tensors, t);
  g_hash_table_insert (st->by_name, (gpointer) t->name, t);
  return TRUE;
}

static gboolean
parse_header (PpxSafetensors *st, GError **error)
{
  const char *file = st->path;
  if (st->map_size < 8) {
    g_set_error (error, PPX_ERROR, PPX_ERROR_FORMAT, "%s: file is %" G_GSIZE_FORMAT " bytes, too short for a safetensors header",
                 file, st->map_size);
    return FALSE;
  }
  guint64 hlen = 0;
  for (int i = 7; i >= 0; i--)
    hlen = (hlen << 8) | st->map[i];
  if (hlen == 0 || hlen > PPX_ST_MAX_HEADER || hlen > st->map_size - 8) {
    g_set_error (error, PPX_ERROR, PPX_ERROR_FORMAT,
                 "%s: header length %" G_GUINT64_FORMAT " is invalid for a file of %" G_GSIZE_FORMAT " bytes (truncated or not safetensors)",
                 file, hlen, st->map_size);
    return FALSE;
  }
  const uint8_t *data = st->map + 8 + hlen;
  guint64 data_len = st->map_size - 8 - hlen;

  PpxJsonDuplicate dup = {0};
  g_autoptr (JsonParser) parser =
    ppx_json_parse_strict ((const char *) st->map + 8, (gsize) hlen, file, "header", &dup, error);
  if (!parser)
    return FALSE;
  JsonNode *root = json_parser_get_root (parser);
  if (!root || !JSON_NODE_HOLDS_OBJECT (root)) {
    g_set_error (error, PPX_ERROR, PPX_ERROR_FORMAT, "%s: header is not a JSON object", file);
    ppx_json_duplicate_clear (&dup);
    return FALSE;
  }
  if (dup.key) {
    if (dup.object == json_node_get_object (root))
      g_set_error (error, PPX_ERROR, PPX_ERROR_FORMAT, "%s: tensor '%s' appears twice", file, dup.key);
    else
      g_set_error (error, PPX_ERROR, PPX_ERROR_FORMAT, "%s: duplicate key '%s' in the header", file, dup.key);
    ppx_json_duplicate_clear (&dup);
    return FALSE;
  }
  JsonObject *obj = json_node_get_object (root);
  JsonObjectIter it;
  const char *name;
  JsonNode *node;
  json_object_iter_init (&it, obj);
  while (json_object_iter_next (&it, &name, &node)) {
    if (strcmp (name, "__metadata__") == 0) {
      if (!JSON_NODE_HOLDS_OBJECT (node)) {
        g_set_error (error, PPX_ERROR, PPX_ERROR_FORMAT, "%s: __metadata__ is not an object", file);
        return FALSE;
      }
      JsonObjectIter mi;
      const char *k;
      JsonNode *v;
      json_object_iter_init (&mi, json_node_get_object (node));
      while (json_object_iter_next (&mi, &k, &v)) {
        if (!JSON_NODE_HOLDS_VALUE (v) || json_node_get_value_type (v) != G_TYPE_STRING) {
          g_set_error (error, PPX_ERROR, PPX_ERROR_FORMAT, "%s: __metadata__ entry '%s' is not a string", file, k);
          return FALSE;
        }
        g_hash_table_insert (st->metadata, g_strdup (k), g_strdup (json_node_get_string (v)));
      }
      continue;
    }
    if (g_hash_table_contains (st->by_name, name)) {
      g_set_error (error, PPX_ERROR, PPX_ERROR_FORMAT, "%s: tensor '%s' appears twice", file, name);
      return FALSE;
    }
    if (!parse_tensor (st, name, node, data, data_len, error))
      return FALSE;
  }
  /* Overlap check: sort a copy by offset. Zero-sized tensors never overlap. */
  g_autoptr (GPtrArray) sorted = g_ptr_array_sized_new (st->tensors->len);
  for (guint i = 0; i < st->tensors->len; i++)
    g_ptr_array_add (sorted, g_ptr_array_index (st->tensors, i));
  g_ptr_array_sort (sorted, cmp_by_offset);
  const PpxStTensor *prev = NULL;
  for (guint i = 0; i < sorted->len; i++) {
    const PpxStTensor *t = g_ptr_array_index (sorted, i);
    if (t->nbytes == 0)
      continue;
    if (prev && (const uint8_t *) prev->data + prev->nbytes > (const uint8_t *) t->data) {
      g_set_error (error, PPX_ERROR, PPX_ERROR_FORMAT, "%s: tensors '%s' and '%s' overlap in the data section", file,
                   prev->name, t->name);
      return FALSE;
    }
    prev = t;
  }
  return TRUE;
}

static PpxSafetensors *
st_new (const char *label)
{
  PpxSafetensors *st = g_new0 (PpxSafetensors, 1);
  st->path = g_strdup (label);
  st->tensors = g_ptr_array_new_with_free_func (tensor_free);
  st->by_name = g_hash_table_new (g_str_hash, g_str_equal);
  st->metadata = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, g_free);
  return st;
}

PpxSafetensors *
ppx_st_open_buffer (const void *data, gsize size, const char *label, GError **error)
{
  PpxSafetensors *st = st_new (label ? label : "<buffer>");
  st->map = data;
  st->map_size = size;
  if (!parse_header (st, error)) {
    ppx_st_close (st);
    return NULL;
  }
  return st;
}

PpxSafetensors *
ppx_st_open (const char *path, GError **error)
{
  int fd = open (path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    g_set_error (error, PPX_ERROR, errno == ENOENT ? PPX_ERROR_MISSING : PPX_ERROR_IO, "%s: cannot open: %s", path,
                 g_strerror (errno));
    return NULL;
  }
  struct stat sb;
  if (fstat (fd, &sb) != 0 || !S_ISREG (sb.st_mode)) {
    g_set_error (error, PPX_ERROR, PPX_ERROR_IO, "%s: not a regular file", path);
    close (fd);
    return NULL;
  }
  PpxSafetensors *st = st_new (path);
  st->map_size = (gsize) sb.st_size;
  if (st->map_size > 0) {
    void *m = mmap (NULL, st->map_size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (m == MAP_FAILED) {
      g_set_error (error, PPX_ERROR, PPX_ERROR_IO, "%s: cannot map: %s", path, g_strerror (errno));
      close (fd);
      ppx_st_close (st);
      return NULL;
    }
    st->map = m;
    st->owns_map = TRUE;
  }
  close (fd);
  if (!parse_header (st, error)) {
    ppx_st_close (st);
    return NULL;
  }
  return st;
}

void
ppx_st_close (PpxSafetensors *st)
{
  if (!st)
    return;
  if (st->owns_map && st->map)
    munmap ((void *) st->map, st->map_size);
  g_hash_table_destroy (st->by_name);
  g_hash_table_destroy (st->metadata);
  g_ptr_array_free (st->tensors, TRUE);
  g_free (st->path);
  g_free (st);
}

const char *
ppx_st_path (const PpxSafetensors *st)
{
  return st->path;
}

guint
ppx_st_n_tensors (const PpxSafetensors *st)
{
  return st->tensors->len;
}

const PpxStTensor *
ppx_st_tensor_at (const PpxSafetensors *st, guint i)
{
  return i < st->tensors->len ? g_ptr_array_index (st->tensors, i) : NULL;
}

const PpxStTensor *
ppx_st_find (const PpxSafetensors *st, const char *name)
{
  return g_hash_table_lookup (st->by_name, name);
}

const char *
ppx_st_metadata (const PpxSafetensors *st, const char *key)
{
  return g_hash_table_lookup (st->metadata, key);
}

gboolean
ppx_st_check (const PpxSafetensors *st, const PpxStTensor *t, PpxDType dtype, int ndim, const int64_t *shape,
              GError **error)
{
  gboolean ok = t->ndim == ndim;
  for (int i = 0; ok && i < ndim; i++)
    ok = t->shape[i] == shape[i];
  if (!ok) {
    char *want = ppx_shape_str (ndim, shape), *got = ppx_shape_str (t->ndim, t->shape);
    g_set_error (error, PPX_ERROR, PPX_ERROR_SHAPE, "%s: tensor '%s' has shape %s, expected %s", st->path, t->name, got,
                 want);
    g_free (want);
    g_free (got);
    return FALSE;
  }
  if (t->dtype != dtype) {
    g_set_error (error, PPX_ERROR, PPX_ERROR_SHAPE, "%s: tensor '%s' has dtype %s, expected %s", st->path, t->name,
                 ppx_dtype_name (t->dtype), ppx_dtype_name (dtype));
    return FALSE;
  }
  return TRUE;
}

float *
ppx_st_load_f32 (const PpxSafetensors *st, const char *name, int ndim, const int64_t *shape, GError **error)
{
  const PpxStTensor *t = ppx_st_find (st, name);
  if (!t) {
    g_set_error (error, PPX_ERROR, PPX_ERROR_MISSING, "%s: tensor '%s' is missing", st->path, name);
    return NULL;
  }
  PpxDType dt = t->dtype;
  if (dt != PPX_DTYPE_F32 && dt != PPX_DTYPE_BF16 && dt != PPX_DTYPE_F16) {
    g_set_error (error, PPX_ERROR, PPX_ERROR_SHAPE, "%s: tensor '%s' has dtype %s, expected a float type (F32, BF16, F16)",
                 st->path, name, ppx_dtype_name (dt));
    return NULL;
  }
  if (!ppx_st_check (st, t, dt, ndim, shape, error))
    return NULL;
  gsize n = (gsize) ppx_st_numel (t);
  float *out = g_try_new (float, MAX (n, 1));
  if (!out) {
    g_set_error (error, PPX_ERROR, PPX_ERROR_NOMEM, "%s: out of memory loading tensor '%s'", st->path, name);
    return NULL;
  }
  ppx_convert_to_f32 (dt, t->data, out, n);
  return out;
}

/* ---- writer ---- */

typedef struct {
  char *name;
  PpxDType dtype;
  int ndim;
  int64_t shape[PPX_ST_MAX_DIMS];
  guint64 nbytes;
} Decl;

struct PpxStWriter {
  GArray *decls; /* Decl */
  GHashTable *meta;
  FILE *f;
  char *path;
  guint cur;
  guint64 cur_written;
};

static void
decl_clear (gpointer p)
{
  g_free (((Decl *) p)->name);
}

PpxStWriter *
ppx_st_writer_new (void)
{
  PpxStWriter *w = g_new0 (PpxStWriter, 1);
  w->decls = g_array_new (FALSE, TRUE, sizeof (Decl));
  g_array_set_clear_func (w->decls, decl_clear);
  w->meta = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, g_free);
  return w;
}

void
ppx_st_writer_set_metadata (PpxStWriter *w, const char *key, const char *value)
{
  g_hash_table_replace (w->meta, g_strdup (key), g_strdup (value));
}

void
ppx_st_writer_declare (PpxStWriter *w, const char *name, PpxDType dtype, int ndim, const int64_t *shape)
{
  Decl d = {g_strdup (name), dtype, ndim, {0}, ppx_dtype_size (dtype)};
  for (int i = 0; i < ndim; i++) {
    d.shape[i] = shape[i];
    d.nbytes *= (guint64) shape[i];
  }
  g_array_append_val (w->decls, d);
}

gboolean
ppx_st_writer_begin (PpxStWriter *w, const char *path, GError **error)
{
  g_autoptr (JsonBuilder) b = json_builder_new ();
  json_builder_begin_object (b);
  if (g_hash_table_size (w->meta) > 0) {
    json_builder_set_member_name (b, "__metadata__");
    json_builder_begin_object (b);
    g_autoptr (GList) keys = g_list_sort (g_hash_table_get_keys (w->meta), (GCompareFunc) strcmp);
    for (GList *l = keys; l; l = l->next) {
      json_builder_set_member_name (b, l->data);
      json_builder_add_string_value (b, g_hash_table_lookup (w->meta, l->data));
    }
    json_builder_end_object (b);
  }
  guint64 off = 0;
  for (guint i = 0; i < w->decls->len; i++) {
    Decl *d = &g_array_index (w->decls, Decl, i);
    json_builder_set_member_name (b, d->name);
    json_builder_begin_object (b);
    json_builder_set_member_name (b, "dtype");
    json_builder_add_string_value (b, ppx_dtype_name (d->dtype));
    json_builder_set_member_name (b, "shape");
    json_builder_begin_array (b);
    for (int k = 0; k < d->ndim; k++)
      json_builder_add_int_value (b, d->shape[k]);
    json_builder_end_array (b);
    json_builder_set_member_name (b, "data_offsets");
    json_builder_begin_array (b);
    json_builder_add_int_value (b, (gint64) off);
    json_builder_add_int_value (b, (gint64) (off + d->nbytes));
    json_builder_end_array (b);
    json_builder_end_object (b);
    off += d->nbytes;
  }
  json_builder_end_object (b);
  g_autoptr (JsonGenerator) gen = json_generator_new ();
  g_autoptr (JsonNode) root = json_builder_get_root (b);
  json_generator_set_root (gen, root);
  gsize len;
  g_autofree char *json = json_generator_to_data (gen, &len);
  /* Pad the header with spaces to a multiple of 8 so the data is aligned. */
  gsize padded = (len + 7) & ~(gsize) 7;
  w->f = fopen (path, "wb");
  if (!w->f) {
    g_set_error (error, PPX_ERROR, PPX_ERROR_IO, "%s: cannot create: %s", path, g_strerror (errno));
    return FALSE;
  }
  w->path = g_strdup (path);
  uint8_t hdr[8];
  for (int i = 0; i < 8; i++)
    hdr[i] = (uint8_t) ((guint64) padded >> (8 * i));
  gboolean ok = fwrite (hdr, 1, 8, w->f) == 8 && fwrite (json, 1, len, w->f) == len;
  for (gsize i = len; ok && i < padded; i++)
    ok = fputc (' ', w->f) != EOF;
  if (!ok) {
    g_set_error (error, PPX_ERROR, PPX_ERROR_IO, "%s: write failed: %s", path, g_strerror (errno));
    return FALSE;
  }
  w->cur = 0;
  w->cur_written = 0;
  return TRUE;
}

guint64
ppx_st_writer_data_bytes (const PpxStWriter *w, guint64 *written)
{
  guint64 total = 0, done = 0;
  for (guint i = 0; i < w->decls->len; i++) {
    const guint64 n = g_array_index (w->decls, Decl, i).nbytes;
    total += n;
    done += i < w->cur ? n : 0;
  }
  if (written)
    *written = done + w->cur_written;
  return total;
}

gboolean
ppx_st_writer_write (PpxStWriter *w, const void *data, gsize nbytes, GError **error)
{
  const uint8_t *p = data;
  while (nbytes > 0) {
    if (w->cur >= w->decls->len) {
      g_set_error (error, PPX_ERROR, PPX_ERROR_INVALID, "%s: more data written than declared", w->path);
      return FALSE;
    }
    Decl *d = &g_array_index (w->decls, Decl, w->cur);
    guint64 room = d->nbytes - w->cur_written;
    gsize n = (gsize) MIN ((guint64) nbytes, room);
    if (n > 0 && fwrite (p, 1, n, w->f) != n) {
      g_set_error (error, PPX_ERROR, PPX_ERROR_IO, "%s: write failed: %s", w->path, g_strerror (errno));
      return FALSE;
    }
    p += n;
    nbytes -= n;
    w->cur_written += n;
    while (w->cur < w->decls->len && w->cur_written == g_array_index (w->decls, Decl, w->cur).nbytes) {
      w->cur++;
      w->cur_written = 0;
    }
  }
  return TRUE;
}

gboolean
ppx_st_writer_finish (PpxStWriter *w, GError **error)
{
  while (w->cur < w->decls->len && g_array_index (w->decls, Decl, w->cur).nbytes == 0)
    w->cur++;
  if (w->cur != w->decls->len) {
    g_set_error (error, PPX_ERROR, PPX_ERROR_INVALID, "%s: tensor '%s' was declared but not fully written", w->path,
                 g_array_index (w->decls, Decl, w->cur).name);
    return FALSE;
  }
  int rc = fclose (w->f);
  w->f = NULL;
  if (rc != 0) {
    g_set_error (error, PPX_ERROR, PPX_ERROR_IO, "%s: close failed: %s", w->path, g_strerror (errno));
    return FALSE;
  }
  return TRUE;
}

void
ppx_st_writer_free (PpxStWriter *w)
{
  if (!w)
    return;
  if (w->f)
    fclose (w->f);
  g_array_free (w->decls, TRUE);
  g_hash_table_destroy (w->meta);
  g_free (w->path);
  g_free (w);
}
