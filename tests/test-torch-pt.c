/* The .pt (torch.save) reader: the golden voice prompt against golden.safetensors, a hand-made bf16 voice
 * prompt, strided views, and every malformed file of pt-fixtures.c (plus corruptions of the golden file). */
#define _GNU_SOURCE /* memmem */
#include "pt-fixtures.h"
#include "safetensors.h"
#include "test-util.h"
#include "torch-pt.h"
#include "voice-prompt.h"

#include <glib/gstdio.h>
#include <zip.h>

static char *tmp_dir;

static PpxPtFile *
load_bytes (GBytes *b, const char *label, GError **error)
{
  gsize len;
  const void *data = g_bytes_get_data (b, &len);
  return ppx_pt_load_buffer (data, len, label, error);
}

/* Loads a fixture case the way the fuzzer does: a whole file, or a data.pkl wrapped in the fixed archive. */
static PpxPtFile *
load_case (const PtFixtureCase *c, GError **error)
{
  if (!c->is_pickle)
    return load_bytes (c->bytes, c->name, error);
  gsize len;
  const guint8 *pkl = g_bytes_get_data (c->bytes, &len);
  g_autoptr (GBytes) file = pt_fixture_wrap_pickle (pkl, len);
  return load_bytes (file, c->name, error);
}

static void
assert_shape (const PpxPtTensor *t, PpxDType dtype, int ndim, const int64_t *shape)
{
  g_assert_nonnull (t);
  g_assert_cmpint (t->dtype, ==, dtype);
  g_assert_cmpint (t->ndim, ==, ndim);
  gsize n = ppx_dtype_size (dtype);
  for (int d = 0; d < ndim; d++) {
    g_assert_cmpint (t->shape[d], ==, shape[d]);
    n *= (gsize) shape[d];
  }
  g_assert_cmpuint (t->nbytes, ==, n);
  g_assert_cmpint (ppx_pt_numel (t) * (gint64) ppx_dtype_size (dtype), ==, (gint64) n);
}

/* ---- golden ---- */

static void
compare_with_golden (const PpxPtTensor *t, const PpxSafetensors *st, const char *golden_name)
{
  const PpxStTensor *g = ppx_st_find (st, golden_name);
  g_assert_nonnull (g);
  assert_shape (t, g->dtype, g->ndim, g->shape);
  g_assert_cmpmem (t->data, t->nbytes, g->data, g->nbytes);
}

static void
test_golden (void)
{
  const char *dir = ppx_test_golden_dir ();
  if (!dir) {
    g_test_skip ("golden data not found (set PPX_GOLDEN_DIR)");
    return;
  }
  g_autofree char *pt_path = g_build_filename (dir, "voice_prompt.pt", NULL);
  g_autofree char *st_path = g_build_filename (dir, "golden.safetensors", NULL);
  g_autoptr (GError) error = NULL;
  g_autoptr (PpxPtFile) f = ppx_pt_load (pt_path, &error);
  g_assert_no_error (error);
  PpxSafetensors *st = ppx_st_open (st_path, &error);
  g_assert_no_error (error);
  g_assert_cmpuint (ppx_pt_n_tensors (f), ==, 2);
  g_assert_cmpstr (ppx_pt_tensor_at (f, 0)->name, ==, "embeddings");
  g_assert_cmpstr (ppx_pt_tensor_at (f, 1)->name, ==, "cache");
  g_assert_null (ppx_pt_tensor_at (f, 2));
  compare_with_golden (ppx_pt_find (f, "embeddings"), st, "voice_prompt_embeddings");
  compare_with_golden (ppx_pt_find (f, "cache"), st, "voice_prompt_cache");
  g_assert_null (ppx_pt_find (f, "missing"));
  ppx_st_close (st);
}

/* Reads the golden file's records, replaces one with `data` (or deletes it when NULL) and returns the zip. */
static GBytes *
golden_with_record (const char *golden, const char *suffix, GBytes *data)
{
  g_autofree char *copy = g_build_filename (tmp_dir, "golden-copy.pt", NULL);
  g_autofree char *contents = NULL;
  gsize len;
  g_assert_true (g_file_get_contents (golden, &contents, &len, NULL));
  g_assert_true (g_file_set_contents (copy, contents, (gssize) len, NULL));
  int zerr;
  zip_t *za = zip_open (copy, 0, &zerr);
  g_assert_nonnull (za);
  zip_int64_t idx = -1;
  for (zip_int64_t i = 0; i < zip_get_num_entries (za, 0); i++)
    if (g_str_has_suffix (zip_get_name (za, (zip_uint64_t) i, 0), suffix))
      idx = i;
  g_assert_cmpint (idx, >=, 0);
  if (data) {
    gsize dlen;
    const void *d = g_bytes_get_data (data, &dlen);
    zip_source_t *src = zip_source_buffer (za, d, dlen, 0);
    g_assert_cmpint (zip_file_replace (za, (zip_uint64_t) idx, src, 0), ==, 0);
  } else {
    g_assert_cmpint (zip_delete (za, (zip_uint64_t) idx), ==, 0);
  }
  g_assert_cmpint (zip_close (za), ==, 0);
  g_autofree char *out = NULL;
  g_assert_true (g_file_get_contents (copy, &out, &len, NULL));
  return g_bytes_new_take (g_steal_pointer (&out), len);
}

static GBytes *
golden_record (const char *golden, const char *suffix)
{
  int zerr;
  zip_t *za = zip_open (golden, ZIP_RDONLY, &zerr);
  g_assert_nonnull (za);
  for (zip_int64_t i = 0; i < zip_get_num_entries (za, 0); i++) {
    const char *name = zip_get_name (za, (zip_uint64_t) i, 0);
    if (!g_str_has_suffix (name, suffix))
      continue;
    zip_stat_t st;
    g_assert_cmpint (zip_stat_index (za, (zip_uint64_t) i, 0, &st), ==, 0);
    guint8 *buf = g_malloc (st.size);
    zip_file_t *zf = zip_fopen_index (za, (zip_uint64_t) i, 0);
    g_assert_cmpint (zip_fread (zf, buf, st.size), ==, (zip_int64_t) st.size);
    zip_fclose (zf);
    zip_discard (za);
    return g_bytes_new_take (buf, st.size);
  }
  g_assert_not_reached ();
}

static void
expect_error (GBytes *file, const char *label, const char *fragment)
{
  g_autoptr (GError) error = NULL;
  g_autoptr (PpxPtFile) f = load_bytes (file, label, &error);
  g_assert_null (f);
  g_assert_nonnull (error);
  g_assert_true (error->domain == PPX_ERROR);
  if (!strstr (error->message, fragment) || !g_str_has_prefix (error->message, label))
    g_error ("'%s': message '%s' lacks '%s' or the label", label, error->message, fragment);
}

/* The golden file rewritten: each change must be refused, and the message must say what is wrong. */
static void
test_golden_corruptions (void)
{
  const char *dir = ppx_test_golden_dir ();
  if (!dir) {
    g_test_skip ("golden data not found (set PPX_GOLDEN_DIR)");
    return;
  }
  g_autofree char *golden = g_build_filename (dir, "voice_prompt.pt", NULL);
  g_autofree char *contents = NULL;
  gsize len;
  g_assert_true (g_file_get_contents (golden, &contents, &len, NULL));
  for (gsize cut = 0; cut < len; cut += len / 17 + 1) {
    g_autoptr (GBytes) b = g_bytes_new (contents, cut);
    expect_error (b, "golden-truncated.pt", cut ? "not a torch.save zip archive" : "file is empty");
  }

  g_autoptr (GBytes) pkl = golden_record (golden, "/data.pkl");
  gsize plen;
  const char *p = g_bytes_get_data (pkl, &plen);
  const char *storage = memmem (p, plen, "FloatStorage", 12);
  g_assert_nonnull (storage);

  g_autoptr (GBytes) no_pkl = golden_with_record (golden, "/data.pkl", NULL);
  expect_error (no_pkl, "golden-no-pkl.pt", "no <folder>/data.pkl");

  /* torch FloatStorage -> torch FloatStorxge */
  g_autofree char *renamed = g_memdup2 (p, plen);
  renamed[storage - p + 9] = 'x';
  g_autoptr (GBytes) renamed_b = g_bytes_new (renamed, plen);
  g_autoptr (GBytes) bad_type = golden_with_record (golden, "/data.pkl", renamed_b);
  expect_error (bad_type, "golden-storage-type.pt", "unsupported storage type 'torch.FloatStorxge'");

  /* The first opcode after PROTO replaced by STACK_GLOBAL. */
  g_autofree char *bad_op = g_memdup2 (p, plen);
  bad_op[2] = (char) 0x93;
  g_autoptr (GBytes) bad_op_b = g_bytes_new (bad_op, plen);
  g_autoptr (GBytes) bad_opcode = golden_with_record (golden, "/data.pkl", bad_op_b);
  expect_error (bad_opcode, "golden-opcode.pt", "unsupported pickle opcode 0x93 at byte 2");

  g_autoptr (GBytes) truncated_pkl = g_bytes_new (p, plen - 1);
  g_autoptr (GBytes) no_stop = golden_with_record (golden, "/data.pkl", truncated_pkl);
  expect_error (no_stop, "golden-no-stop.pt", "without a STOP");

  g_autoptr (GBytes) storage0 = golden_record (golden, "/data/0");
  g_autoptr (GBytes) short0 = g_bytes_new_from_bytes (storage0, 0, g_bytes_get_size (storage0) - 4);
  g_autoptr (GBytes) short_storage = golden_with_record (golden, "/data/0", short0);
  expect_error (short_storage, "golden-short-storage.pt", "storage data/0 holds 4860 bytes, but the pickle declares 1216");

  g_autoptr (GBytes) no_storage = golden_with_record (golden, "/data/1", NULL);
  expect_error (no_storage, "golden-no-storage.pt", "data/1' is missing");
}

/* ---- hand-made files ---- */

static void
test_voice_bf16 (void)
{
  g_autoptr (GBytes) file = pt_fixture_voice_bf16 ();
  g_autofree char *path = g_build_filename (tmp_dir, "voice-bf16.pt", NULL);
  g_assert_true (g_file_set_contents (path, g_bytes_get_data (file, NULL), (gssize) g_bytes_get_size (file), NULL));
  g_autoptr (GError) error = NULL;
  g_autoptr (PpxPtFile) f = ppx_pt_load (path, &error);
  g_assert_no_error (error);
  const PpxPtTensor *emb = ppx_pt_find (f, "embeddings");
  assert_shape (emb, PPX_DTYPE_BF16, 4, (const int64_t[]){PT_FIXTURE_N_FRAMES, 1, 1, PT_FIXTURE_DIM});
  const guint16 *e = emb->data;
  for (int i = 0; i < PT_FIXTURE_N_FRAMES * PT_FIXTURE_DIM; i++)
    g_assert_cmpfloat (ppx_bf16_to_f32 (GUINT16_FROM_LE (e[i])), ==, pt_fixture_embedding (i));
  const PpxPtTensor *cache = ppx_pt_find (f, "cache");
  assert_shape (cache, PPX_DTYPE_I64, 3, (const int64_t[]){1, 17, 4});
  const gint64 *c = cache->data;
  for (int i = 0; i < 68; i++)
    g_assert_cmpint (GINT64_FROM_LE (c[i]), ==, pt_fixture_cache (i));
}

static const PtFixtureCase *
find_case (GPtrArray *cases, const char *name)
{
  for (guint i = 0; i < cases->len; i++) {
    const PtFixtureCase *c = g_ptr_array_index (cases, i);
    if (strcmp (c->name, name) == 0)
      return c;
  }
  g_assert_not_reached ();
}

/* Transposed, offset, scalar, empty and byte views over the wrap layout's storages (byte i = i*29+7). */
static void
test_views (void)
{
  g_autoptr (GPtrArray) cases = pt_fixture_cases ();
  g_autoptr (GError) error = NULL;
  g_autoptr (PpxPtFile) f = load_case (find_case (cases, "valid-views"), &error);
  g_assert_no_error (error);
  g_assert_cmpuint (ppx_pt_n_tensors (f), ==, 5);
  guint8 storage[PT_FIXTURE_FUZZ_STORAGE_BYTES];
  for (int i = 0; i < PT_FIXTURE_FUZZ_STORAGE_BYTES; i++)
    storage[i] = (guint8) (i * 29 + 7);

  const PpxPtTensor *t = ppx_pt_find (f, "transposed"); /* [8,3], stride [1,8]: t[i][j] = s[i + 8j] */
  assert_shape (t, PPX_DTYPE_BF16, 2, (const int64_t[]){8, 3});
  for (int i = 0; i < 8; i++)
    for (int j = 0; j < 3; j++)
      g_assert_cmpmem ((const guint8 *) t->data + 2 * (i * 3 + j), 2, storage + 2 * (i + 8 * j), 2);

  t = ppx_pt_find (f, "offset");
  assert_shape (t, PPX_DTYPE_F32, 2, (const int64_t[]){2, 3});
  g_assert_cmpmem (t->data, t->nbytes, storage + 400, 24);

  t = ppx_pt_find (f, "scalar");
  assert_shape (t, PPX_DTYPE_I64, 0, NULL);
  g_assert_cmpmem (t->data, t->nbytes, storage + 40, 8);

  t = ppx_pt_find (f, "empty");
  assert_shape (t, PPX_DTYPE_F32, 2, (const int64_t[]){0, 4});
  g_assert_null (t->data);

  t = ppx_pt_find (f, "bytes");
  assert_shape (t, PPX_DTYPE_U8, 1, (const int64_t[]){96});
  g_assert_cmpmem (t->data, t->nbytes, storage + 4000, 96);
}

static void
test_rare_opcodes (void)
{
  g_autoptr (GPtrArray) cases = pt_fixture_cases ();
  g_autoptr (GError) error = NULL;
  g_autoptr (PpxPtFile) f = load_case (find_case (cases, "valid-rare-opcodes"), &error);
  g_assert_no_error (error);
  /* Only the tensors are kept; the int, bool and None entries are skipped. */
  g_assert_cmpuint (ppx_pt_n_tensors (f), ==, 2);
  const PpxPtTensor *a = ppx_pt_find (f, "cache"), *b = ppx_pt_find (f, "cache_again");
  assert_shape (a, PPX_DTYPE_I64, 3, (const int64_t[]){1, 17, 4});
  assert_shape (b, PPX_DTYPE_I64, 3, (const int64_t[]){1, 17, 4});
  g_assert_cmpmem (a->data, a->nbytes, b->data, b->nbytes);
}

/* Every fixture case: valid ones load, the others give a PPX_ERROR with the expected text naming the input. */
static void
test_case (gconstpointer data)
{
  const PtFixtureCase *c = data;
  g_autoptr (GError) error = NULL;
  g_autoptr (PpxPtFile) f = load_case (c, &error);
  if (!c->expect) {
    g_assert_no_error (error);
    g_assert_nonnull (f);
    return;
  }
  g_assert_null (f);
  g_assert_nonnull (error);
  g_assert_true (error->domain == PPX_ERROR);
  if (!g_str_has_prefix (error->message, c->name) || !strstr (error->message, c->expect))
    g_error ("case %s: message '%s' does not start with the label or lacks '%s'", c->name, error->message, c->expect);
  if (g_test_verbose ())
    g_printerr ("%s\n", error->message);
}

static void
test_pickle_size_limit (void)
{
  gsize len = PPX_PT_MAX_PICKLE_BYTES + 1;
  guint8 *pkl = g_malloc (len);
  memset (pkl, 'N', len);
  g_autoptr (GBytes) file = pt_fixture_wrap_pickle (pkl, len);
  g_free (pkl);
  expect_error (file, "big-pickle.pt", "over the limit of 1048576");
}

static void
test_file_errors (void)
{
  g_autoptr (GError) error = NULL;
  g_autofree char *missing = g_build_filename (tmp_dir, "no-such-voice.pt", NULL);
  g_assert_null (ppx_pt_load (missing, &error));
  g_assert_error (error, PPX_ERROR, PPX_ERROR_MISSING);
  g_assert_nonnull (strstr (error->message, missing));
  g_clear_error (&error);

  g_assert_null (ppx_pt_load (tmp_dir, &error)); /* a directory */
  g_assert_nonnull (error);
  g_assert_nonnull (strstr (error->message, tmp_dir));
  g_clear_error (&error);

  g_autofree char *text = g_build_filename (tmp_dir, "text.pt", NULL);
  g_assert_true (g_file_set_contents (text, "hello", 5, NULL));
  g_assert_null (ppx_pt_load (text, &error));
  g_assert_error (error, PPX_ERROR, PPX_ERROR_FORMAT);
  g_assert_nonnull (strstr (error->message, text));
}

/* Issue 17, defect 6: a voice prompt .pt whose "embeddings" declare more frames than a voice prompt may
 * have (N <= 2^20), in a small file (the zero bytes deflate) that inflates to 134 MB, is refused from its
 * declared shape, before any storage is inflated. In a subprocess of its own (run natively even when this
 * program runs under valgrind): the refusal names the file and the limit and takes under 0.1 s; the
 * subprocess's peak RSS (VmHWM), making the file included, stays under 64 MB. (Before the check came first, the
 * loader inflated and copied the storage: 261 MB at its peak and 0.22 s here; after, 4.3 MB, 0.001 s.) */
static void
test_voice_declared_too_large (void)
{
  if (!g_test_subprocess ()) {
    g_test_trap_subprocess (NULL, 0, G_TEST_SUBPROCESS_INHERIT_STDERR);
    g_test_trap_assert_passed ();
    return;
  }
  const gint64 n_frames = PPX_VOICE_PROMPT_MAX_FRAMES + 1;
  const int dim = 64;
  g_autoptr (GBytes) file = pt_fixture_voice_zeros (n_frames, dim);
  g_autofree char *path = g_build_filename (tmp_dir, "voice-inflates.pt", NULL);
  g_assert_true (g_file_set_contents (path, g_bytes_get_data (file, NULL), (gssize) g_bytes_get_size (file), NULL));
  g_assert_cmpuint (g_bytes_get_size (file), <, 1 << 20);
  PpxConfig cfg;
  ppx_config_default (&cfg);
  cfg.lm.dim = dim;
  g_autoptr (GError) error = NULL;
  gint64 t0 = g_get_monotonic_time ();
  PpxVoicePrompt *vp = ppx_voice_prompt_from_embeddings_file (&cfg, path, &error);
  const double seconds = (g_get_monotonic_time () - t0) / 1e6;
  g_printerr ("%s (%" G_GSIZE_FORMAT " bytes, inflating to %" G_GINT64_FORMAT "): refused in %.3f s: %s\n", path,
              g_bytes_get_size (file), n_frames * dim * 2, seconds, error ? error->message : "(no error)");
  g_assert_null (vp);
  g_assert_error (error, PPX_ERROR, PPX_ERROR_SHAPE);
  g_assert_nonnull (strstr (error->message, path));
  g_assert_nonnull (strstr (error->message, "1 <= N <= 1048576"));
  g_assert_cmpfloat (seconds, <, 0.1);
  /* the peak RSS of this program image (VmHWM starts again at exec, unlike getrusage's maximum, which under
   * valgrind would count the valgrind process that forked it) */
  g_autofree char *status = NULL;
  g_assert_true (g_file_get_contents ("/proc/self/status", &status, NULL, NULL));
  const char *hwm = strstr (status, "VmHWM:");
  g_assert_nonnull (hwm);
  const double peak_mb = g_ascii_strtod (hwm + 6, NULL) / 1024.0;
  g_printerr ("peak RSS %.1f MB\n", peak_mb);
  g_assert_cmpfloat (peak_mb, <, 64.0);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  tmp_dir = g_dir_make_tmp ("ppx-torch-pt-XXXXXX", NULL);
  g_assert_nonnull (tmp_dir);
  g_test_add_func ("/torch-pt/golden", test_golden);
  g_test_add_func ("/torch-pt/golden-corruptions", test_golden_corruptions);
  g_test_add_func ("/torch-pt/voice-bf16", test_voice_bf16);
  g_test_add_func ("/torch-pt/views", test_views);
  g_test_add_func ("/torch-pt/rare-opcodes", test_rare_opcodes);
  g_test_add_func ("/torch-pt/pickle-size-limit", test_pickle_size_limit);
  g_test_add_func ("/torch-pt/file-errors", test_file_errors);
  g_test_add_func ("/torch-pt/voice-declared-too-large", test_voice_declared_too_large);
  g_autoptr (GPtrArray) cases = pt_fixture_cases ();
  for (guint i = 0; i < cases->len; i++) {
    const PtFixtureCase *c = g_ptr_array_index (cases, i);
    g_autofree char *path = g_strconcat ("/torch-pt/case/", c->name, NULL);
    g_test_add_data_func (path, c, test_case);
  }
  int rc = g_test_run ();
  ppx_test_remove_tree (tmp_dir);
  g_free (tmp_dir);
  return rc;
}
