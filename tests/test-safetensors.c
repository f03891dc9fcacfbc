/* The safetensors reader and writer: round trips, every malformed-file case, shape checks. */
#include "corrupt-safetensors.h"
#include "safetensors.h"

#include <glib/gstdio.h>
#include <math.h>

static char *tmp_dir;

static char *
tmp_path (const char *name)
{
  return g_build_filename (tmp_dir, name, NULL);
}

/* ---- round trip ---- */

typedef struct {
  const char *name;
  PpxDType dtype;
  int ndim;
  int64_t shape[4];
} Spec;

static const Spec round_trip_specs[] = {
  {"f32.matrix", PPX_DTYPE_F32, 2, {3, 5}},
  {"bf16.vector", PPX_DTYPE_BF16, 1, {7}},
  {"empty.rows", PPX_DTYPE_F32, 2, {0, 4}},
  {"f16.cube", PPX_DTYPE_F16, 3, {2, 3, 2}},
  {"i64.scalar", PPX_DTYPE_I64, 0, {0}},
  {"u8.bytes", PPX_DTYPE_U8, 1, {13}},
  {"empty.vector", PPX_DTYPE_BF16, 1, {0}},
  {"i8.signed", PPX_DTYPE_I8, 2, {2, 3}},
  {"i32.last", PPX_DTYPE_I32, 1, {3}},
};

static gsize
spec_bytes (const Spec *s)
{
  gsize n = ppx_dtype_size (s->dtype);
  for (int d = 0; d < s->ndim; d++)
    n *= (gsize) s->shape[d];
  return n;
}

static guint8
pattern_byte (guint t, gsize i)
{
  return (guint8) (t * 31 + i * 7 + 1);
}

static void
test_round_trip (void)
{
  g_autofree char *path = tmp_path ("round-trip.safetensors");
  g_autoptr (GError) error = NULL;
  PpxStWriter *w = ppx_st_writer_new ();
  ppx_st_writer_set_metadata (w, "format", "pt");
  ppx_st_writer_set_metadata (w, "note", "quotes \" and unicode \xc3\xa9");
  for (guint t = 0; t < G_N_ELEMENTS (round_trip_specs); t++) {
    const Spec *s = &round_trip_specs[t];
    ppx_st_writer_declare (w, s->name, s->dtype, s->ndim, s->shape);
  }
  g_assert_true (ppx_st_writer_begin (w, path, &error));
  g_assert_no_error (error);
  /* Write byte by byte for odd tensors and in one call for even ones: chunking must not matter. */
  for (guint t = 0; t < G_N_ELEMENTS (round_trip_specs); t++) {
    gsize n = spec_bytes (&round_trip_specs[t]);
    g_autofree guint8 *buf = g_malloc (n + 1);
    for (gsize i = 0; i < n; i++)
      buf[i] = pattern_byte (t, i);
    if (t % 2)
      for (gsize i = 0; i < n; i++)
        g_assert_true (ppx_st_writer_write (w, buf + i, 1, &error));
    else
      g_assert_true (ppx_st_writer_write (w, buf, n, &error));
  }
  g_assert_true (ppx_st_writer_finish (w, &error));
  g_assert_no_error (error);
  ppx_st_writer_free (w);

  PpxSafetensors *st = ppx_st_open (path, &error);
  g_assert_no_error (error);
  g_assert_nonnull (st);
  g_assert_cmpstr (ppx_st_path (st), ==, path);
  g_assert_cmpstr (ppx_st_metadata (st, "format"), ==, "pt");
  g_assert_cmpstr (ppx_st_metadata (st, "note"), ==, "quotes \" and unicode \xc3\xa9");
  g_assert_null (ppx_st_metadata (st, "absent"));
  g_assert_cmpuint (ppx_st_n_tensors (st), ==, G_N_ELEMENTS (round_trip_specs));
  g_assert_null (ppx_st_find (st, "absent"));
  g_assert_null (ppx_st_tensor_at (st, ppx_st_n_tensors (st)));
  for (guint t = 0; t < G_N_ELEMENTS (round_trip_specs); t++) {
    const Spec *s = &round_trip_specs[t];
    const PpxStTensor *tensor = ppx_st_find (st, s->name);
    g_assert_nonnull (tensor);
    g_assert_cmpstr (tensor->name, ==, s->name);
    g_assert_cmpint (tensor->dtype, ==, s->dtype);
    g_assert_cmpint (tensor->ndim, ==, s->ndim);
    for (int d = 0; d < s->ndim; d++)
      g_assert_cmpint (tensor->shape[d], ==, s->shape[d]);
    g_assert_cmpuint (tensor->nbytes, ==, spec_bytes (s));
    g_assert_cmpint (ppx_st_numel (tensor), ==, (gint64) (spec_bytes (s) / ppx_dtype_size (s->dtype)));
    const guint8 *bytes = tensor->data;
    for (gsize i = 0; i < tensor->nbytes; i++)
      g_assert_cmpuint (bytes[i], ==, pattern_byte (t, i));
  }
  /* The data section starts 8-aligned (the writer pads the header). */
  g_assert_cmpuint ((guintptr) ppx_st_find (st, "f32.matrix")->data % 8, ==, 0);
  ppx_st_close (st);
}

static void
test_float_values (void)
{
  g_autofree char *path = tmp_path ("floats.safetensors");
  g_autoptr (GError) error = NULL;
  const float values[4] = {1.0f, -2.5f, 0.15625f, 49152.0f};
  const int64_t shape[2] = {2, 2};
  uint16_t bf16[4], f16[4];
  for (int i = 0; i < 4; i++) {
    bf16[i] = ppx_f32_to_bf16 (values[i]);
    f16[i] = ppx_f32_to_f16 (values[i]);
  }
  PpxStWriter *w = ppx_st_writer_new ();
  ppx_st_writer_declare (w, "f32", PPX_DTYPE_F32, 2, shape);
  ppx_st_writer_declare (w, "bf16", PPX_DTYPE_BF16, 2, shape);
  ppx_st_writer_declare (w, "f16", PPX_DTYPE_F16, 2, shape);
  ppx_st_writer_declare (w, "i64", PPX_DTYPE_I64, 1, shape);
  const gint64 ints[2] = {-1, 1};
  g_assert_true (ppx_st_writer_begin (w, path, &error) && ppx_st_writer_write (w, values, sizeof values, &error) &&
                 ppx_st_writer_write (w, bf16, sizeof bf16, &error) &&
                 ppx_st_writer_write (w, f16, sizeof f16, &error) &&
                 ppx_st_writer_write (w, ints, sizeof ints, &error) && ppx_st_writer_finish (w, &error));
  g_assert_no_error (error);
  ppx_st_writer_free (w);

  PpxSafetensors *st = ppx_st_open (path, &error);
  g_assert_no_error (error);
  const char *names[3] = {"f32", "bf16", "f16"};
  for (int k = 0; k < 3; k++) {
    g_autofree float *got = ppx_st_load_f32 (st, names[k], 2, shape, &error);
    g_assert_no_error (error);
    for (int i = 0; i < 4; i++)
      g_assert_cmpfloat (got[i], ==, values[i]); /* all four are exact in bf16 and f16 */
  }

  /* Errors: the message names the file, the tensor, and both shapes. */
  const int64_t wrong[2] = {4, 1};
  float *none = ppx_st_load_f32 (st, "bf16", 2, wrong, &error);
  g_assert_null (none);
  g_assert_error (error, PPX_ERROR, PPX_ERROR_SHAPE);
  g_assert_nonnull (strstr (error->message, path));
  g_assert_nonnull (strstr (error->message, "'bf16'"));
  g_assert_nonnull (strstr (error->message, "has shape [2, 2], expected [4, 1]"));
  g_clear_error (&error);

  g_assert_null (ppx_st_load_f32 (st, "f32", 1, wrong, &error));
  g_assert_nonnull (strstr (error->message, "has shape [2, 2], expected [4]"));
  g_clear_error (&error);

  g_assert_null (ppx_st_load_f32 (st, "missing.weight", 2, shape, &error));
  g_assert_error (error, PPX_ERROR, PPX_ERROR_MISSING);
  g_assert_nonnull (strstr (error->message, path));
  g_assert_nonnull (strstr (error->message, "'missing.weight' is missing"));
  g_clear_error (&error);

  g_assert_null (ppx_st_load_f32 (st, "i64", 1, shape, &error));
  g_assert_error (error, PPX_ERROR, PPX_ERROR_SHAPE);
  g_assert_nonnull (strstr (error->message, "'i64' has dtype I64"));
  g_clear_error (&error);

  const PpxStTensor *t = ppx_st_find (st, "bf16");
  g_assert_true (ppx_st_check (st, t, PPX_DTYPE_BF16, 2, shape, &error));
  g_assert_false (ppx_st_check (st, t, PPX_DTYPE_F32, 2, shape, &error));
  g_assert_error (error, PPX_ERROR, PPX_ERROR_SHAPE);
  g_assert_nonnull (strstr (error->message, "'bf16' has dtype BF16, expected F32"));
  g_clear_error (&error);
  g_assert_false (ppx_st_check (st, t, PPX_DTYPE_BF16, 2, wrong, &error));
  g_assert_nonnull (strstr (error->message, "expected [4, 1]"));
  g_assert_nonnull (strstr (error->message, path));
  ppx_st_close (st);
}

static void
test_shape_str (void)
{
  const int64_t s[3] = {2, 0, 4096};
  g_autofree char *a = ppx_shape_str (3, s), *b = ppx_shape_str (0, s);
  g_assert_cmpstr (a, ==, "[2, 0, 4096]");
  g_assert_cmpstr (b, ==, "[]");
}

/* ---- writer misuse ---- */

static void
test_writer_errors (void)
{
  g_autoptr (GError) error = NULL;
  const int64_t shape[1] = {2};
  const float two[2] = {1, 2};

  PpxStWriter *w = ppx_st_writer_new ();
  ppx_st_writer_declare (w, "x", PPX_DTYPE_F32, 1, shape);
  g_autofree char *bad = g_build_filename (tmp_dir, "no-such-dir", "x.safetensors", NULL);
  g_assert_false (ppx_st_writer_begin (w, bad, &error));
  g_assert_error (error, PPX_ERROR, PPX_ERROR_IO);
  g_assert_nonnull (strstr (error->message, bad));
  g_clear_error (&error);
  ppx_st_writer_free (w);

  g_autofree char *path = tmp_path ("short-write.safetensors");
  w = ppx_st_writer_new ();
  ppx_st_writer_declare (w, "x", PPX_DTYPE_F32, 1, shape);
  g_assert_true (ppx_st_writer_begin (w, path, &error));
  g_assert_true (ppx_st_writer_write (w, two, 4, &error));
  g_assert_false (ppx_st_writer_finish (w, &error));
  g_assert_error (error, PPX_ERROR, PPX_ERROR_INVALID);
  g_assert_nonnull (strstr (error->message, "'x' was declared but not fully written"));
  g_clear_error (&error);
  ppx_st_writer_free (w);

  w = ppx_st_writer_new ();
  ppx_st_writer_declare (w, "x", PPX_DTYPE_F32, 1, shape);
  g_assert_true (ppx_st_writer_begin (w, path, &error));
  g_assert_true (ppx_st_writer_write (w, two, 8, &error));
  g_assert_false (ppx_st_writer_write (w, two, 1, &error));
  g_assert_error (error, PPX_ERROR, PPX_ERROR_INVALID);
  g_assert_nonnull (strstr (error->message, "more data written than declared"));
  g_clear_error (&error);
  ppx_st_writer_free (w); /* freeing mid-write closes the file without leaking */
}

/* ---- reader errors ---- */

static void
test_missing_file (void)
{
  g_autoptr (GError) error = NULL;
  g_autofree char *path = tmp_path ("does-not-exist.safetensors");
  g_assert_null (ppx_st_open (path, &error));
  g_assert_error (error, PPX_ERROR, PPX_ERROR_MISSING);
  g_assert_nonnull (strstr (error->message, path));
  g_clear_error (&error);

  g_assert_null (ppx_st_open (tmp_dir, &error));
  g_assert_error (error, PPX_ERROR, PPX_ERROR_IO);
  g_assert_nonnull (strstr (error->message, tmp_dir));
  g_assert_nonnull (strstr (error->message, "not a regular file"));
}

static void
check_case_error (const PpxCorruptCase *c, const char *label, GError *error)
{
  g_assert_nonnull (error);
  if (g_test_verbose ())
    g_printerr ("  %s\n", error->message);
  g_assert_true (error->domain == PPX_ERROR);
  g_assert_cmpint (error->code, ==, PPX_ERROR_FORMAT);
  if (!strstr (error->message, label) || !strstr (error->message, c->expect) ||
      (c->tensor && !strstr (error->message, c->tensor)))
    g_error ("case %s: message \"%s\" should name \"%s\", contain \"%s\"%s%s", c->name, error->message, label,
             c->expect, c->tensor ? " and name tensor " : "", c->tensor ? c->tensor : "");
}

static void
test_case (gconstpointer data)
{
  const PpxCorruptCase *c = data;
  g_autofree char *file_name = g_strconcat (c->name, ".safetensors", NULL);
  g_autofree char *path = tmp_path (file_name);
  gsize len;
  const void *bytes = g_bytes_get_data (c->bytes, &len);
  g_autoptr (GError) error = NULL;
  g_assert_true (g_file_set_contents (path, bytes ? bytes : "", (gssize) len, &error));

  PpxSafetensors *st = ppx_st_open (path, &error);
  if (!c->expect) {
    g_assert_no_error (error);
    g_assert_nonnull (st);
    ppx_st_close (st);
  } else {
    g_assert_null (st);
    check_case_error (c, path, error);
  }
  g_clear_error (&error);

  /* The in-memory entry point applies the same checks and names its label. */
  st = ppx_st_open_buffer (bytes, len, "buffer-label", &error);
  if (!c->expect) {
    g_assert_no_error (error);
    ppx_st_close (st);
  } else {
    g_assert_null (st);
    check_case_error (c, "buffer-label", error);
  }
  g_unlink (path);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_autoptr (GError) error = NULL;
  tmp_dir = g_dir_make_tmp ("ppx-test-safetensors-XXXXXX", &error);
  g_assert_no_error (error);

  g_test_add_func ("/safetensors/round-trip", test_round_trip);
  g_test_add_func ("/safetensors/float-values-and-shape-errors", test_float_values);
  g_test_add_func ("/safetensors/shape-str", test_shape_str);
  g_test_add_func ("/safetensors/writer-errors", test_writer_errors);
  g_test_add_func ("/safetensors/missing-file", test_missing_file);
  g_autoptr (GPtrArray) cases = ppx_corrupt_safetensors_cases ();
  for (guint i = 0; i < cases->len; i++) {
    const PpxCorruptCase *c = g_ptr_array_index (cases, i);
    g_autofree char *test_path = g_strdup_printf ("/safetensors/%s/%s", c->expect ? "corrupt" : "valid", c->name);
    g_test_add_data_func (test_path, c, test_case);
  }
  int rc = g_test_run ();

  const char *left;
  GDir *dir = g_dir_open (tmp_dir, 0, NULL);
  while (dir && (left = g_dir_read_name (dir))) {
    g_autofree char *p = tmp_path (left);
    g_unlink (p);
  }
  if (dir)
    g_dir_close (dir);
  g_rmdir (tmp_dir);
  g_free (tmp_dir);
  return rc;
}
