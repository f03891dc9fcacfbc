#define _GNU_SOURCE /* memmem */
#include "pt-fixtures.h"

#include "ppx-common.h"

#include <stdio.h>
#include <string.h>
#include <zip.h>

/* ---- a pickle writer ---- */

typedef struct {
  GByteArray *b;
  guint memo; /* next memo index */
} Pickler;

static void
op (Pickler *p, guint8 code)
{
  g_byte_array_append (p->b, &code, 1);
}

static void
raw (Pickler *p, const void *data, gsize len)
{
  g_byte_array_append (p->b, data, (guint) len);
}

static void
le (Pickler *p, guint64 v, int nbytes)
{
  for (int i = 0; i < nbytes; i++)
    op (p, (guint8) (v >> (8 * i)));
}

/* BINPUT / LONG_BINPUT; returns the index. */
static guint
put (Pickler *p)
{
  guint idx = p->memo++;
  if (idx < 256) {
    op (p, 'q');
    op (p, (guint8) idx);
  } else {
    op (p, 'r');
    le (p, idx, 4);
  }
  return idx;
}

static void
get (Pickler *p, guint idx)
{
  if (idx < 256) {
    op (p, 'h');
    op (p, (guint8) idx);
  } else {
    op (p, 'j');
    le (p, idx, 4);
  }
}

static void
str (Pickler *p, const char *s)
{
  op (p, 'X');
  le (p, strlen (s), 4);
  raw (p, s, strlen (s));
}

/* The shortest encoding, as CPython's protocol 2 chooses it. */
static void
integer (Pickler *p, gint64 v)
{
  if (v >= 0 && v < 256) {
    op (p, 'K');
    op (p, (guint8) v);
  } else if (v >= 0 && v < 65536) {
    op (p, 'M');
    le (p, (guint64) v, 2);
  } else if (v >= G_MININT32 && v <= G_MAXINT32) {
    op (p, 'J');
    le (p, (guint64) v, 4);
  } else {
    int n = 8;
    while (n > 1) {
      gint64 shifted = v >> (8 * (n - 1) - 1); /* the top byte plus the next byte's sign bit */
      if (shifted != 0 && shifted != -1)
        break;
      n--;
    }
    op (p, 0x8a);
    op (p, (guint8) n);
    le (p, (guint64) v, n);
  }
}

static void
global (Pickler *p, const char *module, const char *name)
{
  op (p, 'c');
  raw (p, module, strlen (module));
  op (p, '\n');
  raw (p, name, strlen (name));
  op (p, '\n');
}

static void
int_tuple (Pickler *p, int n, const gint64 *v)
{
  if (n == 0) {
    op (p, ')');
    return;
  }
  if (n > 3)
    op (p, '(');
  for (int i = 0; i < n; i++)
    integer (p, v[i]);
  op (p, n > 3 ? 't' : (guint8) (0x84 + n));
}

static Pickler
pickler_new (void)
{
  Pickler p = {g_byte_array_new (), 0};
  op (&p, 0x80);
  op (&p, 2);
  return p;
}

static GBytes *
pickler_finish (Pickler *p)
{
  return g_byte_array_free_to_bytes (p->b);
}

/* One tensor value, as torch's reduce of a tensor writes it; memo indices of reusable values in `m`. */
typedef struct {
  int rebuild, storage_str, location, ordered_dict;
} TorchMemo;

static void
tensor_value (Pickler *p, TorchMemo *m, const PtFixtureTensor *t)
{
  if (m->rebuild < 0) {
    global (p, "torch._utils", "_rebuild_tensor_v2");
    m->rebuild = (int) put (p);
  } else {
    get (p, (guint) m->rebuild);
  }
  op (p, '(');
  op (p, '(');
  if (m->storage_str < 0) {
    str (p, "storage");
    m->storage_str = (int) put (p);
  } else {
    get (p, (guint) m->storage_str);
  }
  global (p, "torch", t->storage_type);
  put (p);
  str (p, t->key);
  put (p);
  if (m->location < 0) {
    str (p, "cpu");
    m->location = (int) put (p);
  } else {
    get (p, (guint) m->location);
  }
  integer (p, t->storage_numel);
  op (p, 't');
  put (p);
  op (p, 'Q'); /* BINPERSID */
  integer (p, t->offset);
  int_tuple (p, t->ndim, t->shape);
  put (p);
  int_tuple (p, t->ndim, t->stride);
  put (p);
  op (p, 0x89); /* requires_grad False */
  if (m->ordered_dict < 0) {
    global (p, "collections", "OrderedDict");
    m->ordered_dict = (int) put (p);
  } else {
    get (p, (guint) m->ordered_dict);
  }
  op (p, ')');
  op (p, 'R');
  put (p);
  op (p, 't');
  put (p);
  op (p, 'R');
  put (p);
}

GBytes *
pt_fixture_pickle (const PtFixtureTensor *tensors, guint n)
{
  Pickler p = pickler_new ();
  TorchMemo m = {-1, -1, -1, -1};
  op (&p, '}');
  put (&p);
  op (&p, '(');
  for (guint i = 0; i < n; i++) {
    str (&p, tensors[i].name);
    put (&p);
    tensor_value (&p, &m, &tensors[i]);
  }
  op (&p, 'u');
  op (&p, '.');
  return pickler_finish (&p);
}

/* ---- zip archives ---- */

/* An archive written into memory: archive_new, then the records (archive_add), then archive_bytes. */
static zip_t *
archive_new (zip_source_t **mem)
{
  zip_error_t ze;
  zip_error_init (&ze);
  *mem = zip_source_buffer_create (NULL, 0, 0, &ze);
  g_assert (*mem);
  zip_source_keep (*mem);
  zip_t *za = zip_open_from_source (*mem, ZIP_TRUNCATE, &ze);
  g_assert (za);
  zip_error_fini (&ze);
  return za;
}

/* Adds a record (method ZIP_CM_STORE or ZIP_CM_DEFLATE, level 1) with a fixed time, for reproducible bytes. */
static void
archive_add (zip_t *za, const char *name, zip_source_t *src, zip_int32_t method)
{
  g_assert (src);
  zip_int64_t idx = zip_file_add (za, name, src, ZIP_FL_ENC_UTF_8);
  g_assert (idx >= 0);
  zip_set_file_compression (za, (zip_uint64_t) idx, method, method == ZIP_CM_STORE ? 0 : 1);
  zip_file_set_mtime (za, (zip_uint64_t) idx, 315532800, 0);
}

static GBytes *
archive_bytes (zip_t *za, zip_source_t *mem)
{
  g_assert (zip_close (za) == 0);
  g_assert (zip_source_open (mem) == 0);
  zip_source_seek (mem, 0, SEEK_END);
  zip_int64_t size = zip_source_tell (mem);
  zip_source_seek (mem, 0, SEEK_SET);
  guint8 *buf = g_malloc (MAX (size, 1));
  g_assert (zip_source_read (mem, buf, (zip_uint64_t) size) == size);
  zip_source_close (mem);
  zip_source_free (mem);
  return g_bytes_new_take (buf, (gsize) size);
}

GBytes *
pt_fixture_zip (guint n, const char *const *names, GBytes *const *datas)
{
  zip_source_t *mem;
  zip_t *za = archive_new (&mem);
  for (guint i = 0; i < n; i++) {
    gsize len;
    const void *data = g_bytes_get_data (datas[i], &len);
    archive_add (za, names[i], zip_source_buffer (za, data, len, 0), ZIP_CM_STORE);
  }
  return archive_bytes (za, mem);
}

GBytes *
pt_fixture_file (GBytes *pickle, guint n_storages, const char *const *keys, GBytes *const *storages)
{
  guint n = 3 + n_storages;
  g_autoptr (GPtrArray) names = g_ptr_array_new_with_free_func (g_free);
  g_autoptr (GPtrArray) datas = g_ptr_array_new_with_free_func ((GDestroyNotify) g_bytes_unref);
  g_ptr_array_add (names, g_strdup (PT_FIXTURE_FOLDER "/data.pkl"));
  g_ptr_array_add (datas, g_bytes_ref (pickle));
  g_ptr_array_add (names, g_strdup (PT_FIXTURE_FOLDER "/byteorder"));
  g_ptr_array_add (datas, g_bytes_new_static ("little", 6));
  g_ptr_array_add (names, g_strdup (PT_FIXTURE_FOLDER "/version"));
  g_ptr_array_add (datas, g_bytes_new_static ("3\n", 2));
  for (guint i = 0; i < n_storages; i++) {
    g_ptr_array_add (names, g_strconcat (PT_FIXTURE_FOLDER "/data/", keys[i], NULL));
    g_ptr_array_add (datas, g_bytes_ref (storages[i]));
  }
  return pt_fixture_zip (n, (const char *const *) names->pdata, (GBytes *const *) datas->pdata);
}

/* ---- the bf16 voice prompt ---- */

float
pt_fixture_embedding (int i)
{
  return (float) (i - 10) * 0.375f; /* exact in bf16 */
}

gint64
pt_fixture_cache (int i)
{
  return i % 5 == 0 ? -1 : (gint64) ((i * 7919) % 2048);
}

static const PtFixtureTensor voice_tensors[] = {
  {"embeddings", "BFloat16Storage", "0", PT_FIXTURE_N_FRAMES * PT_FIXTURE_DIM, 0, 4,
   {PT_FIXTURE_N_FRAMES, 1, 1, PT_FIXTURE_DIM}, {PT_FIXTURE_DIM, PT_FIXTURE_DIM, PT_FIXTURE_DIM, 1}},
  {"cache", "LongStorage", "1", 68, 0, 3, {1, 17, 4}, {68, 4, 1}},
};

static GBytes *
voice_storage_embeddings (void)
{
  guint16 *v = g_new (guint16, PT_FIXTURE_N_FRAMES * PT_FIXTURE_DIM);
  for (int i = 0; i < PT_FIXTURE_N_FRAMES * PT_FIXTURE_DIM; i++)
    v[i] = GUINT16_TO_LE (ppx_f32_to_bf16 (pt_fixture_embedding (i)));
  return g_bytes_new_take (v, PT_FIXTURE_N_FRAMES * PT_FIXTURE_DIM * sizeof *v);
}

static GBytes *
voice_storage_cache (void)
{
  gint64 *v = g_new (gint64, 68);
  for (int i = 0; i < 68; i++)
    v[i] = GINT64_TO_LE (pt_fixture_cache (i));
  return g_bytes_new_take (v, 68 * sizeof *v);
}

/* The voice file with its storages replaced where `emb`/`cache` are non-NULL. */
static GBytes *
voice_file_with (GBytes *pickle, GBytes *emb, GBytes *cache)
{
  g_autoptr (GBytes) e = emb ? g_bytes_ref (emb) : voice_storage_embeddings ();
  g_autoptr (GBytes) c = cache ? g_bytes_ref (cache) : voice_storage_cache ();
  const char *keys[] = {"0", "1"};
  GBytes *storages[] = {e, c};
  return pt_fixture_file (pickle, 2, keys, storages);
}

GBytes *
pt_fixture_voice_bf16 (void)
{
  g_autoptr (GBytes) pkl = pt_fixture_pickle (voice_tensors, G_N_ELEMENTS (voice_tensors));
  return voice_file_with (pkl, NULL, NULL);
}

/* ---- a small file that inflates to a large one ---- */

/* A libzip source of `left` zero bytes, read in pieces. */
static zip_int64_t
zeros_source (void *userdata, void *data, zip_uint64_t len, zip_source_cmd_t cmd)
{
  guint64 *total = userdata; /* [0]: size, [1]: bytes left */
  switch (cmd) {
    case ZIP_SOURCE_OPEN:
      total[1] = total[0];
      return 0;
    case ZIP_SOURCE_READ: {
      zip_uint64_t n = MIN (len, total[1]);
      memset (data, 0, n);
      total[1] -= n;
      return (zip_int64_t) n;
    }
    case ZIP_SOURCE_CLOSE:
    case ZIP_SOURCE_FREE:
      return 0;
    case ZIP_SOURCE_STAT: {
      zip_stat_t *st = data;
      zip_stat_init (st);
      st->size = total[0];
      st->mtime = 315532800;
      st->valid |= ZIP_STAT_SIZE | ZIP_STAT_MTIME;
      return sizeof *st;
    }
    case ZIP_SOURCE_SUPPORTS:
      return zip_source_make_command_bitmap (ZIP_SOURCE_OPEN, ZIP_SOURCE_READ, ZIP_SOURCE_CLOSE, ZIP_SOURCE_STAT,
                                             ZIP_SOURCE_ERROR, ZIP_SOURCE_FREE, -1);
    default:
      return -1;
  }
}

GBytes *
pt_fixture_voice_zeros (gint64 n_frames, int dim)
{
  const PtFixtureTensor tensors[] = {
    {"embeddings", "BFloat16Storage", "0", n_frames * dim, 0, 4, {n_frames, 1, 1, dim}, {dim, dim, dim, 1}},
    voice_tensors[1],
  };
  g_autoptr (GBytes) pkl = pt_fixture_pickle (tensors, G_N_ELEMENTS (tensors));
  g_autoptr (GBytes) cache = voice_storage_cache ();
  guint64 zeros[2] = {(guint64) n_frames * dim * 2, 0};
  zip_source_t *mem;
  zip_t *za = archive_new (&mem);
  archive_add (za, PT_FIXTURE_FOLDER "/data.pkl", zip_source_buffer (za, g_bytes_get_data (pkl, NULL),
                                                                 g_bytes_get_size (pkl), 0), ZIP_CM_STORE);
  archive_add (za, PT_FIXTURE_FOLDER "/byteorder", zip_source_buffer (za, "little", 6, 0), ZIP_CM_STORE);
  archive_add (za, PT_FIXTURE_FOLDER "/version", zip_source_buffer (za, "3\n", 2, 0), ZIP_CM_STORE);
  archive_add (za, PT_FIXTURE_FOLDER "/data/0", zip_source_function (za, zeros_source, zeros), ZIP_CM_DEFLATE);
  archive_add (za, PT_FIXTURE_FOLDER "/data/1", zip_source_buffer (za, g_bytes_get_data (cache, NULL),
                                                               g_bytes_get_size (cache), 0), ZIP_CM_STORE);
  return archive_bytes (za, mem);
}

/* ---- fuzzing the pickle alone ---- */

GBytes *
pt_fixture_wrap_pickle (const guint8 *pickle, gsize len)
{
  g_autoptr (GBytes) pkl = g_bytes_new (pickle, len);
  guint8 *block = g_malloc (PT_FIXTURE_FUZZ_STORAGE_BYTES);
  for (int i = 0; i < PT_FIXTURE_FUZZ_STORAGE_BYTES; i++)
    block[i] = (guint8) (i * 29 + 7);
  g_autoptr (GBytes) data = g_bytes_new_take (block, PT_FIXTURE_FUZZ_STORAGE_BYTES);
  const char *keys[PT_FIXTURE_FUZZ_STORAGES] = {"0", "1", "2", "3"};
  GBytes *storages[PT_FIXTURE_FUZZ_STORAGES] = {data, data, data, data};
  return pt_fixture_file (pkl, PT_FIXTURE_FUZZ_STORAGES, keys, storages);
}

/* ---- the catalogue ---- */

/* Takes `bytes`. */
static void
add (GPtrArray *cases, const char *name, GBytes *bytes, gboolean is_pickle, const char *expect)
{
  format_case_add (cases, name, bytes, expect)->is_pickle = is_pickle;
}

static void
add_file (GPtrArray *cases, const char *name, const void *data, gsize len, const char *expect)
{
  add (cases, name, g_bytes_new (data, len), FALSE, expect);
}

static void
add_pickle (GPtrArray *cases, const char *name, Pickler *p, const char *expect)
{
  add (cases, name, pickler_finish (p), TRUE, expect);
}

static void
add_tensors (GPtrArray *cases, const char *name, const PtFixtureTensor *t, guint n, const char *expect)
{
  add (cases, name, pt_fixture_pickle (t, n), TRUE, expect);
}

/* Tensors that fit the wrap layout's 4096-byte storages. */
#define EMB(...) {"embeddings", "BFloat16Storage", "0", 2048, __VA_ARGS__}
static const PtFixtureTensor wrap_emb = EMB (0, 4, {3, 1, 1, 8}, {8, 8, 8, 1});
static const PtFixtureTensor wrap_cache = {"cache", "LongStorage", "1", 512, 0, 3, {1, 17, 4}, {68, 4, 1}};

/* A pickle writer positioned inside the top-level dict's MARK, ready for entries. */
static Pickler
dict_begin (void)
{
  Pickler p = pickler_new ();
  op (&p, '}');
  put (&p);
  op (&p, '(');
  return p;
}

static void
dict_end (Pickler *p)
{
  op (p, 'u');
  op (p, '.');
}

/* SHORT_BINUNICODE (protocol 4's short string, which the reader also takes). */
static void
short_str (Pickler *p, const char *s)
{
  op (p, 0x8c);
  op (p, (guint8) strlen (s));
  raw (p, s, strlen (s));
}

/* The argument tuple of a LongStorage [1,17,4] tensor on "cuda:0", followed by REDUCE; with `metadata`, the
 * optional seventh argument (an empty dict). BUILD with a None state on the hooks dict on the way. */
static void
rare_tensor_args (Pickler *p, gboolean metadata)
{
  op (p, '(');
  op (p, '(');
  str (p, "storage");
  global (p, "torch", "LongStorage");
  str (p, "1");
  str (p, "cuda:0");
  integer (p, 512);
  op (p, 't');
  op (p, 'Q');
  integer (p, 0);
  int_tuple (p, 3, (const gint64[]){1, 17, 4});
  int_tuple (p, 3, (const gint64[]){68, 4, 1});
  op (p, 0x88); /* NEWTRUE */
  global (p, "collections", "OrderedDict");
  op (p, ')');
  op (p, 'R');
  op (p, 'N');
  op (p, 'b');
  if (metadata)
    op (p, '}');
  op (p, 't');
  op (p, 'R');
}

static void
add_valid_cases (GPtrArray *c)
{
  add (c, "valid-voice-bf16", pt_fixture_voice_bf16 (), FALSE, NULL);
  const PtFixtureTensor pair[] = {wrap_emb, wrap_cache};
  add_tensors (c, "valid-wrapped", pair, 2, NULL);
  /* A transposed view, an offset view, a scalar and an empty tensor. */
  const PtFixtureTensor views[] = {
    {"transposed", "BFloat16Storage", "0", 2048, 0, 2, {8, 3}, {1, 8}},
    {"offset", "FloatStorage", "2", 1024, 100, 2, {2, 3}, {3, 1}},
    {"scalar", "LongStorage", "1", 512, 5, 0, {0}, {0}},
    {"empty", "FloatStorage", "2", 1024, 1024, 2, {0, 4}, {4, 1}},
    {"bytes", "ByteStorage", "3", 4096, 4000, 1, {96}, {1}},
  };
  add_tensors (c, "valid-views", views, G_N_ELEMENTS (views), NULL);

  /* The less common opcodes: SHORT_BINUNICODE, MEMOIZE, LONG_BINPUT/GET, BININT, LONG1, SETITEM, BUILD,
   * NEWTRUE, NONE; non-tensor values, which the reader skips. */
  Pickler p = pickler_new ();
  op (&p, '}');
  op (&p, 0x94); /* MEMOIZE -> 0 */
  p.memo = 1;
  short_str (&p, "n");
  op (&p, 'J');
  le (&p, (guint64) -5, 4);
  op (&p, 's');
  short_str (&p, "flag");
  op (&p, 0x88);
  op (&p, 's');
  short_str (&p, "none");
  op (&p, 'N');
  op (&p, 's');
  short_str (&p, "big");
  integer (&p, G_GINT64_CONSTANT (-1234567890123));
  op (&p, 's');
  str (&p, "cache");
  global (&p, "torch._utils", "_rebuild_tensor_v2");
  op (&p, 'r'); /* LONG_BINPUT 300 */
  le (&p, 300, 4);
  rare_tensor_args (&p, FALSE);
  op (&p, 's');
  str (&p, "cache_again");
  op (&p, 'j'); /* LONG_BINGET 300 */
  le (&p, 300, 4);
  rare_tensor_args (&p, TRUE);
  op (&p, 's');
  op (&p, '.');
  add_pickle (c, "valid-rare-opcodes", &p, NULL);
}

static void
add_container_cases (GPtrArray *c)
{
  g_autoptr (GBytes) voice = pt_fixture_voice_bf16 ();
  gsize len;
  const guint8 *v = g_bytes_get_data (voice, &len);

  add_file (c, "empty-file", "", 0, "file is empty");
  add_file (c, "not-a-zip", "this is not a zip archive at all, just some text", 48, "not a torch.save zip archive");
  static const guint8 legacy[] = {0x80, 0x02, 0x8a, 0x0a, 'l', 'z', 0xfc, 0x9c, 0x46, 0xf9, 0x20, 0x6a, 0xa8, 0x50, 0x19, '.'};
  add_file (c, "legacy-format", legacy, sizeof legacy, "legacy");
  add_file (c, "truncated-half", v, len / 2, "not a torch.save zip archive");
  add_file (c, "truncated-tail", v, len - 7, "not a torch.save zip archive");

  /* A flipped byte inside the embeddings record: the zip CRC catches it. */
  g_autoptr (GBytes) emb = voice_storage_embeddings ();
  gsize emb_len;
  const guint8 *e = g_bytes_get_data (emb, &emb_len);
  const guint8 *at = memmem (v, len, e, emb_len);
  g_assert (at);
  guint8 *flipped = g_memdup2 (v, len);
  flipped[(at - v) + 5] ^= 0x40;
  add (c, "crc-mismatch", g_bytes_new_take (flipped, len), FALSE, "CRC");

  g_autoptr (GBytes) pkl = pt_fixture_pickle (voice_tensors, G_N_ELEMENTS (voice_tensors));
  g_autoptr (GBytes) cache = voice_storage_cache ();
  {
    const char *names[] = {PT_FIXTURE_FOLDER "/byteorder", PT_FIXTURE_FOLDER "/data/0", PT_FIXTURE_FOLDER "/data/1"};
    g_autoptr (GBytes) order = g_bytes_new_static ("little", 6);
    GBytes *datas[] = {order, emb, cache};
    add (c, "missing-data-pkl", pt_fixture_zip (3, names, datas), FALSE, "no <folder>/data.pkl");
  }
  {
    const char *names[] = {"data.pkl", "data/0", "data/1"};
    GBytes *datas[] = {pkl, emb, cache};
    add (c, "data-pkl-without-folder", pt_fixture_zip (3, names, datas), FALSE, "no <folder>/data.pkl");
  }
  {
    const char *names[] = {"a/data.pkl", "b/data.pkl", "a/data/0", "a/data/1"};
    GBytes *datas[] = {pkl, pkl, emb, cache};
    add (c, "two-data-pkl", pt_fixture_zip (4, names, datas), FALSE, "several data.pkl");
  }
  {
    const char *names[] = {PT_FIXTURE_FOLDER "/data.pkl", PT_FIXTURE_FOLDER "/byteorder", PT_FIXTURE_FOLDER "/data/0",
                           PT_FIXTURE_FOLDER "/data/1"};
    g_autoptr (GBytes) order = g_bytes_new_static ("big", 3);
    GBytes *datas[] = {pkl, order, emb, cache};
    add (c, "byteorder-big", pt_fixture_zip (4, names, datas), FALSE, "byteorder");
  }
  {
    const char *names[] = {PT_FIXTURE_FOLDER "/data.pkl", PT_FIXTURE_FOLDER "/data/0"};
    GBytes *datas[] = {pkl, emb};
    add (c, "missing-storage-record", pt_fixture_zip (2, names, datas), FALSE, "record 'archive/data/1' is missing");
  }
  /* The record is shorter than the pickle says the storage is. */
  g_autoptr (GBytes) short_emb = g_bytes_new_from_bytes (emb, 0, emb_len - 4);
  add (c, "storage-record-short", voice_file_with (pkl, short_emb, NULL), FALSE, "pickle declares 24 elements");
  /* Consistent pickle and record, but the tensor's shape needs more than the storage holds. */
  PtFixtureTensor small[] = {voice_tensors[0], voice_tensors[1]};
  small[0].storage_numel = 20;
  g_autoptr (GBytes) small_pkl = pt_fixture_pickle (small, 2);
  g_autoptr (GBytes) small_emb = g_bytes_new_from_bytes (emb, 0, 40);
  add (c, "storage-too-small", voice_file_with (small_pkl, small_emb, NULL), FALSE,
       "storage data/0 holds 40 bytes, shape [3, 1, 1, 8] of BF16 at offset 0 needs 48");
}

/* Pickles given as their bytes after the protocol-2 header, then `fill` repeated `repeat` times: every
 * interpreter case but the one built in a loop. (String literals are split where a hex or octal escape
 * would swallow the next character.) */
typedef struct {
  const char *name;
  const char *ops;
  gsize len;
  guint8 fill;
  guint repeat;
  const char *expect;
} OpCase;

#define OPS(name, bytes, expect) {name, bytes, sizeof (bytes) - 1, 0, 0, expect}
#define OPS_THEN(name, bytes, fill, repeat, expect) {name, bytes, sizeof (bytes) - 1, fill, repeat, expect}
/* dict_begin's bytes: EMPTY_DICT, BINPUT 0, MARK; dict_end's: SETITEMS, STOP */
#define DICT_BEGIN "}q\0("
#define DICT_END "u."

static const OpCase op_cases[] = {
  OPS ("bad-opcode", DICT_BEGIN "X\x01\0\0\0" "x\x93", "unsupported pickle opcode 0x93 at byte 12"),
  OPS ("protocol-1", "\x80\x01", "protocol 1"),
  OPS ("no-stop", "N", "without a STOP"),
  OPS ("trailing-bytes", "}.N", "1 trailing bytes after STOP"),
  OPS ("not-a-dict", "N.", "not a dict"),
  OPS ("two-values-at-stop", "}}.", "STOP with 2 values"),
  OPS ("open-mark-at-stop", "}(.", "1 MARKs"),
  OPS_THEN ("deep-marks", "", '(', 100, "MARKs nested deeper than 64"),
  OPS_THEN ("deep-tuples", "K\0", 0x85, 40, "nested deeper than 16"),
  OPS_THEN ("stack-overflow", "", 'N', 5000, "stack deeper than 4096"),
  OPS ("stack-underflow", "s", "stack underflow"),
  OPS ("pop-below-mark", "N(\x85", "stack underflow"),
  OPS ("tuple-without-mark", "t", "no MARK"),
  OPS ("memo-miss", "h\x09", "memo entry 9 was never stored"),
  OPS ("put-on-empty-stack", "q\0", "stack underflow"),
  OPS ("disallowed-global", "cos\nsystem\n", "global 'os.system' is not allowed"),
  OPS_THEN ("global-unterminated", "c", 'a', 300, "not terminated"),
  OPS ("bad-utf8", "X\x03\0\0\0" "a\xff\0", "not valid UTF-8"),
  OPS ("string-past-end", "X\xff\xff\xff\x7f" "abc", "truncated"),
  OPS ("long1-too-big", "\x8a\x09" "123456789", "9 bytes is too large"),
  OPS ("persid-not-tuple", "K\x01Q", "persistent id is not"),
  OPS ("reduce-non-global", "))R", "REDUCE on a tuple"),
  OPS ("ordereddict-with-args", "ccollections\nOrderedDict\nK\x01\x85R", "OrderedDict called with arguments"),
  OPS ("storage-type-called", "ctorch\nFloatStorage\n)R", "storage type is called"),
  OPS ("build-non-empty", "}K\x01\x85" "b", "BUILD with a non-empty state"),
  OPS ("dict-value-is-dict", DICT_BEGIN "X\x05\0\0\0" "inner}" DICT_END, "only tensors and scalars"),
  /* d['a'] = d would be a cycle. */
  OPS ("dict-contains-itself", "}q\0X\x01\0\0\0" "ah\0s.", "only tensors and scalars"),
  OPS ("non-string-key", DICT_BEGIN "K\x01N" DICT_END, "dict key is a int"),
  OPS ("odd-setitems", DICT_BEGIN "X\x01\0\0\0" "a" DICT_END, "odd number (1)"),
  OPS ("setitems-on-none", "N(u", "SETITEMS on a None"),
};

static void
add_interpreter_cases (GPtrArray *c)
{
  for (guint i = 0; i < G_N_ELEMENTS (op_cases); i++) {
    const OpCase *oc = &op_cases[i];
    Pickler p = pickler_new ();
    raw (&p, oc->ops, oc->len);
    for (guint k = 0; k < oc->repeat; k++)
      op (&p, oc->fill);
    add_pickle (c, oc->name, &p, oc->expect);
  }

  Pickler p = dict_begin ();
  for (int i = 0; i < 300; i++) {
    char key[16];
    g_snprintf (key, sizeof key, "k%d", i);
    str (&p, key);
    op (&p, 'N');
  }
  dict_end (&p);
  add_pickle (c, "dict-too-large", &p, "more than 256 entries");
}

/* Entry "t" of a dict_begin pickle, as far as _rebuild_tensor_v2's storage offset: the call of a
 * FloatStorage tensor on storage "2" (1024 elements), its shape, stride and the rest to follow. */
static void
float_tensor_begin (Pickler *p)
{
  str (p, "t");
  global (p, "torch._utils", "_rebuild_tensor_v2");
  op (p, '(');
  op (p, '(');
  str (p, "storage");
  global (p, "torch", "FloatStorage");
  str (p, "2");
  str (p, "cpu");
  integer (p, 1024);
  op (p, 't');
  op (p, 'Q');
  integer (p, 0);
}

static void
add_tensor_cases (GPtrArray *c)
{
  PtFixtureTensor t[2];

  t[0] = wrap_emb;
  t[0].storage_type = "ComplexFloatStorage";
  add_tensors (c, "unknown-storage-type", t, 1, "unsupported storage type 'torch.ComplexFloatStorage'");

  t[0] = wrap_emb;
  t[0].key = "../0";
  add_tensors (c, "storage-key-path", t, 1, "storage key is not a short alphanumeric string");

  t[0] = wrap_emb;
  t[0].key = "7";
  add_tensors (c, "storage-key-absent", t, 1, "record 'archive/data/7' is missing");

  t[0] = wrap_emb;
  t[0].storage_numel = 2000;
  add_tensors (c, "storage-numel-mismatch", t, 1, "pickle declares 2000 elements of BF16");

  t[0] = wrap_emb;
  t[1] = wrap_cache;
  t[1].key = "0";
  add_tensors (c, "storage-declared-twice", t, 2, "declared twice");

  t[0] = t[1] = wrap_emb;
  add_tensors (c, "duplicate-name", t, 2, "duplicate dict key 'embeddings'");

  t[0] = wrap_emb;
  t[0].ndim = 3;
  t[0].shape[0] = t[0].shape[1] = t[0].shape[2] = (gint64) 1 << 40;
  add_tensors (c, "huge-shape-overflow", t, 1, "overflows");

  t[0] = wrap_emb;
  t[0].ndim = 2;
  t[0].shape[0] = t[0].shape[1] = (gint64) 1 << 30;
  t[0].stride[0] = (gint64) 1 << 30;
  t[0].stride[1] = 1;
  add_tensors (c, "huge-shape", t, 1, "needs 2305843009213693952");

  t[0] = wrap_emb;
  t[0].offset = 2047;
  add_tensors (c, "offset-past-storage", t, 1, "at offset 2047 needs 4142");

  t[0] = wrap_emb;
  t[0].stride[0] = 1100;
  add_tensors (c, "stride-past-storage", t, 1, "needs 4416");

  t[0] = wrap_emb;
  t[0].ndim = 1;
  t[0].shape[0] = 100000;
  t[0].stride[0] = 0;
  add_tensors (c, "overlapping-view", t, 1, "overlapping views are not supported");

  t[0] = wrap_emb;
  t[0].ndim = 1;
  t[0].shape[0] = -1;
  add_tensors (c, "negative-size", t, 1, "non-negative integers");

  /* Nine dimensions: written by hand, the fixture struct holds eight. */
  Pickler p = dict_begin ();
  float_tensor_begin (&p);
  for (int k = 0; k < 2; k++) {
    op (&p, '(');
    for (int d = 0; d < 9; d++)
      integer (&p, 1);
    op (&p, 't');
  }
  op (&p, 0x89);
  global (&p, "collections", "OrderedDict");
  op (&p, ')');
  op (&p, 'R');
  op (&p, 't');
  op (&p, 'R');
  dict_end (&p);
  add_pickle (c, "nine-dims", &p, "at most 8");

  /* _rebuild_tensor_v2 with five arguments. */
  p = dict_begin ();
  float_tensor_begin (&p);
  int_tuple (&p, 1, (const gint64[]){4});
  int_tuple (&p, 1, (const gint64[]){1});
  op (&p, 0x89);
  op (&p, 't');
  op (&p, 'R');
  dict_end (&p);
  add_pickle (c, "rebuild-five-args", &p, "5 arguments");

  /* Backward hooks: an OrderedDict with an entry. */
  p = dict_begin ();
  float_tensor_begin (&p);
  int_tuple (&p, 1, (const gint64[]){4});
  int_tuple (&p, 1, (const gint64[]){1});
  op (&p, 0x89);
  global (&p, "collections", "OrderedDict");
  op (&p, ')');
  op (&p, 'R');
  str (&p, "hook");
  op (&p, 'N');
  op (&p, 's');
  op (&p, 't');
  op (&p, 'R');
  dict_end (&p);
  add_pickle (c, "backward-hooks", &p, "backward hooks are not supported");

  /* More tensors than the limit. */
  PtFixtureTensor many[65];
  char names[65][8];
  for (int i = 0; i < 65; i++) {
    g_snprintf (names[i], sizeof names[i], "t%d", i);
    many[i] = wrap_emb;
    many[i].name = names[i];
  }
  add_tensors (c, "too-many-tensors", many, 65, "more than 64 tensors");
}

GPtrArray *
pt_fixture_cases (void)
{
  GPtrArray *c = format_cases_new ();
  add_valid_cases (c);
  add_container_cases (c);
  add_interpreter_cases (c);
  add_tensor_cases (c);
  return c;
}
