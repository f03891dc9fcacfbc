/* Quantized files: personaplex-quantize on the golden tiny model (int8, int4) reloaded through
 * ppx_quant_load_linear equals quantizing at load time; corrupt or mismatched files give clear errors;
 * the tool refuses bad invocations.
 *
 *   test-quant-load          file validation and tool errors (no golden data needed)
 *   test-quant-load golden   the golden tiny model round trip (exit 77 without golden data)
 * $PPX_QUANTIZE names the tool. */
#include "quant-load.h"
#include "quant-policy.h"
#include "quant.h"
#include "test-util.h"

#include <glib/gstdio.h>
#include <json-glib/json-glib.h>
#include <math.h>

#define LM_FILE "model.safetensors"
#define MIMI_FILE "tokenizer-e351c8d8-checkpoint125.safetensors"

static char *tmp_root;

/* Runs the tool; returns its exit status; *err_text gets stderr. */
static int
run_quantize (const char *const *args, char **out_text, char **err_text)
{
  const char *tool = g_getenv ("PPX_QUANTIZE");
  if (!tool)
    tool = PPX_BUILD_ROOT "/tools/personaplex-quantize";
  g_autoptr (GPtrArray) argv = g_ptr_array_new ();
  g_ptr_array_add (argv, (char *) tool);
  for (const char *const *a = args; *a; a++)
    g_ptr_array_add (argv, (char *) *a);
  g_ptr_array_add (argv, NULL);
  int status = 0;
  g_autoptr (GError) error = NULL;
  g_assert_true (g_spawn_sync (NULL, (char **) argv->pdata, NULL, G_SPAWN_DEFAULT, NULL, NULL, out_text, err_text,
                               &status, &error));
  g_assert_no_error (error);
  g_assert_true (WIFEXITED (status));
  return WEXITSTATUS (status);
}

static void
assert_same_bytes (const void *a, const void *b, gsize n, const char *what)
{
  if (memcmp (a, b, n) != 0)
    g_error ("%s differs", what);
}

static gboolean
same_file_contents (const char *a, const char *b)
{
  g_autofree char *da = NULL, *db = NULL;
  gsize la = 0, lb = 0;
  return g_file_get_contents (a, &da, &la, NULL) && g_file_get_contents (b, &db, &lb, NULL) && la == lb &&
         memcmp (da, db, la) == 0;
}

/* ---- small hand-made files ---- */

typedef struct {
  const char *name;
  PpxDType dtype;
  int ndim;
  int64_t shape[2];
} Spec;

/* Writes a safetensors file with the given metadata (NULL-terminated key/value pairs) and tensors whose
 * bytes are filled from a fixed pattern (0x11 for every byte: small valid floats, codes, scales). */
static char *
write_file (const char *label, const char *const *meta, const Spec *specs, int n_specs)
{
  g_autofree char *base = g_strconcat (label, ".safetensors", NULL);
  char *path = g_build_filename (tmp_root, base, NULL);
  PpxStWriter *w = ppx_st_writer_new ();
  for (const char *const *m = meta; m && *m; m += 2)
    ppx_st_writer_set_metadata (w, m[0], m[1]);
  for (int i = 0; i < n_specs; i++)
    ppx_st_writer_declare (w, specs[i].name, specs[i].dtype, specs[i].ndim, specs[i].shape);
  g_autoptr (GError) error = NULL;
  g_assert_true (ppx_st_writer_begin (w, path, &error));
  for (int i = 0; i < n_specs; i++) {
    gsize n = ppx_dtype_size (specs[i].dtype);
    for (int d = 0; d < specs[i].ndim; d++)
      n *= (gsize) specs[i].shape[d];
    g_autofree uint8_t *bytes = g_malloc (MAX (n, 1));
    memset (bytes, 0x11, n);
    g_assert_true (ppx_st_writer_write (w, bytes, n, &error));
  }
  g_assert_true (ppx_st_writer_finish (w, &error));
  ppx_st_writer_free (w);
  return path;
}

/* Loads `name` [rows, cols] from `path` and expects the error `code` whose message names the file and
 * every string of `needles`. */
static void
expect_load_error (const char *path, const char *name, int64_t rows, int64_t cols, PpxQuantization q, int code,
                   const char *const *needles)
{
  g_autoptr (GError) error = NULL;
  PpxSafetensors *st = ppx_st_open (path, &error);
  g_assert_no_error (error);
  PpxWeightDesc desc;
  gpointer owned = (gpointer) 0x1;
  g_assert_false (ppx_quant_load_linear (st, name, rows, cols, q, &desc, &owned, &error));
  g_assert_null (owned);
  g_assert_error (error, PPX_ERROR, code);
  g_test_message ("%s", error->message);
  if (!strstr (error->message, path))
    g_error ("message does not name the file: %s", error->message);
  for (const char *const *n = needles; *n; n++)
    if (!strstr (error->message, *n))
      g_error ("message lacks '%s': %s", *n, error->message);
  ppx_st_close (st);
}

#define STRS(...) ((const char *const[]){__VA_ARGS__, NULL})
#define META_INT8 PPX_QUANT_META_FORMAT, "int8", PPX_QUANT_META_VERSION, "1"
#define META_INT4(g) PPX_QUANT_META_FORMAT, "int4", PPX_QUANT_META_VERSION, "1", PPX_QUANT_META_GROUP_SIZE, g

static void
test_file_format_metadata (void)
{
  const Spec one[] = {{"x", PPX_DTYPE_BF16, 2, {2, 2}}};
  const struct {
    const char *label;
    const char *const *meta;
    gboolean ok;
    PpxQuantization q;
    int group, code;
    const char *needle;
  } cases[] = {
    {"meta-none", NULL, TRUE, PPX_QUANT_BF16, 0, 0, NULL},
    {"meta-int8", STRS (META_INT8), TRUE, PPX_QUANT_INT8, 0, 0, NULL},
    {"meta-int4", STRS (META_INT4 ("32")), TRUE, PPX_QUANT_INT4, 32, 0, NULL},
    {"meta-int3", STRS (PPX_QUANT_META_FORMAT, "int3", PPX_QUANT_META_VERSION, "1"), FALSE, 0, 0,
     PPX_ERROR_UNSUPPORTED, "'int3'"},
    {"meta-v2", STRS (PPX_QUANT_META_FORMAT, "int8", PPX_QUANT_META_VERSION, "2"), FALSE, 0, 0,
     PPX_ERROR_UNSUPPORTED, "version '2'"},
    {"meta-no-version", STRS (PPX_QUANT_META_FORMAT, "int4", PPX_QUANT_META_GROUP_SIZE, "64"), FALSE, 0, 0,
     PPX_ERROR_UNSUPPORTED, PPX_QUANT_META_VERSION},
    {"meta-no-group", STRS (PPX_QUANT_META_FORMAT, "int4", PPX_QUANT_META_VERSION, "1"), FALSE, 0, 0,
     PPX_ERROR_FORMAT, PPX_QUANT_META_GROUP_SIZE},
    {"meta-group-abc", STRS (META_INT4 ("abc")), FALSE, 0, 0, PPX_ERROR_FORMAT, "'abc'"},
    {"meta-group-12", STRS (META_INT4 ("12")), FALSE, 0, 0, PPX_ERROR_FORMAT, "'12'"},
    {"meta-group-0", STRS (META_INT4 ("0")), FALSE, 0, 0, PPX_ERROR_FORMAT, "'0'"},
  };
  for (gsize i = 0; i < G_N_ELEMENTS (cases); i++) {
    g_autofree char *path = write_file (cases[i].label, cases[i].meta, one, 1);
    g_autoptr (GError) error = NULL;
    PpxSafetensors *st = ppx_st_open (path, &error);
    g_assert_no_error (error);
    PpxQuantization q = PPX_QUANT_AUTO;
    int group = -1;
    gboolean ok = ppx_quant_file_format (st, &q, &group, &error);
    g_assert_cmpint (ok, ==, cases[i].ok);
    if (ok) {
      g_assert_no_error (error);
      g_assert_cmpint (q, ==, cases[i].q);
      g_assert_cmpint (group, ==, cases[i].group);
    } else {
      g_assert_error (error, PPX_ERROR, cases[i].code);
      g_assert_nonnull (strstr (error->message, path));
      g_assert_nonnull (strstr (error->message, cases[i].needle));
      /* Loading any tensor reports the same problem. */
      g_clear_error (&error);
      PpxWeightDesc desc;
      gpointer owned;
      g_assert_false (ppx_quant_load_linear (st, "x", 2, 2, PPX_QUANT_AUTO, &desc, &owned, &error));
      g_assert_error (error, PPX_ERROR, cases[i].code);
    }
    ppx_st_close (st);
  }
}

static void
test_corrupt_quantized_entries (void)
{
  /* int4, 3 rows x 40 columns: 20 packed bytes per row; group 16 -> 3 groups, group 8 -> 5. */
  {
    const Spec s[] = {{"w.q4", PPX_DTYPE_U8, 2, {3, 20}}, {"w.scale", PPX_DTYPE_F32, 2, {3, 3}}};
    g_autofree char *p = write_file ("group-mismatch", STRS (META_INT4 ("8")), s, 2);
    expect_load_error (p, "w", 3, 40, PPX_QUANT_AUTO, PPX_ERROR_SHAPE,
                       STRS ("'w.scale'", "3 groups per row", "group size 8", "implies 5"));
  }
  {
    const Spec s[] = {{"w.q4", PPX_DTYPE_U8, 2, {3, 40}}, {"w.scale", PPX_DTYPE_F32, 2, {3, 3}}};
    g_autofree char *p = write_file ("q4-unpacked", STRS (META_INT4 ("16")), s, 2);
    expect_load_error (p, "w", 3, 40, PPX_QUANT_AUTO, PPX_ERROR_SHAPE, STRS ("'w.q4'", "[3, 40]", "[3, 20]"));
  }
  {
    const Spec s[] = {{"w.q4", PPX_DTYPE_U8, 2, {3, 20}}, {"w.scale", PPX_DTYPE_I32, 2, {3, 3}}};
    g_autofree char *p = write_file ("scale-i32", STRS (META_INT4 ("16")), s, 2);
    expect_load_error (p, "w", 3, 40, PPX_QUANT_AUTO, PPX_ERROR_SHAPE, STRS ("'w.scale'", "I32"));
  }
  {
    const Spec s[] = {{"w.q8", PPX_DTYPE_I8, 2, {5, 7}}, {"w.scale", PPX_DTYPE_F32, 1, {6}}};
    g_autofree char *p = write_file ("q8-scale-shape", STRS (META_INT8), s, 2);
    expect_load_error (p, "w", 5, 7, PPX_QUANT_AUTO, PPX_ERROR_SHAPE, STRS ("'w.scale'", "[6]", "[5]"));
  }
  {
    const Spec s[] = {{"w.q8", PPX_DTYPE_U8, 2, {5, 7}}, {"w.scale", PPX_DTYPE_F32, 1, {5}}};
    g_autofree char *p = write_file ("q8-dtype", STRS (META_INT8), s, 2);
    expect_load_error (p, "w", 5, 7, PPX_QUANT_AUTO, PPX_ERROR_SHAPE, STRS ("'w.q8'", "U8", "I8"));
  }
  {
    const Spec s[] = {{"w.q8", PPX_DTYPE_I8, 2, {5, 8}}, {"w.scale", PPX_DTYPE_F32, 1, {5}}};
    g_autofree char *p = write_file ("q8-shape", STRS (META_INT8), s, 2);
    expect_load_error (p, "w", 5, 7, PPX_QUANT_AUTO, PPX_ERROR_SHAPE, STRS ("'w.q8'", "[5, 8]", "[5, 7]"));
  }
  {
    const Spec s[] = {{"w.q8", PPX_DTYPE_I8, 2, {5, 7}}};
    g_autofree char *p = write_file ("q8-no-scale", STRS (META_INT8), s, 1);
    expect_load_error (p, "w", 5, 7, PPX_QUANT_AUTO, PPX_ERROR_MISSING, STRS ("'w.scale'"));
  }
  {
    const Spec s[] = {{"w.q4", PPX_DTYPE_U8, 2, {3, 20}}, {"w.scale", PPX_DTYPE_F32, 2, {3, 3}}};
    g_autofree char *p = write_file ("q4-in-int8", STRS (META_INT8), s, 2);
    expect_load_error (p, "w", 3, 40, PPX_QUANT_AUTO, PPX_ERROR_FORMAT, STRS ("'w.q4'", "int4", "int8"));
  }
  {
    const Spec s[] = {{"w.q8", PPX_DTYPE_I8, 2, {5, 7}}, {"w.scale", PPX_DTYPE_F32, 1, {5}}};
    g_autofree char *p = write_file ("q8-no-metadata", NULL, s, 2);
    expect_load_error (p, "w", 5, 7, PPX_QUANT_AUTO, PPX_ERROR_FORMAT, STRS ("'w.q8'", "missing"));
  }
  {
    const Spec s[] = {{"w.q8", PPX_DTYPE_I8, 2, {5, 7}},
                      {"w.q4", PPX_DTYPE_U8, 2, {5, 4}},
                      {"w.scale", PPX_DTYPE_F32, 1, {5}}};
    g_autofree char *p = write_file ("q8-and-q4", STRS (META_INT8), s, 3);
    expect_load_error (p, "w", 5, 7, PPX_QUANT_AUTO, PPX_ERROR_FORMAT, STRS ("'w.q8'", "'w.q4'"));
  }
  {
    const Spec s[] = {{"w.q8", PPX_DTYPE_I8, 2, {5, 7}}, {"w.scale", PPX_DTYPE_F32, 1, {5}}};
    g_autofree char *p = write_file ("q8-as-int4", STRS (META_INT8), s, 2);
    expect_load_error (p, "w", 5, 7, PPX_QUANT_INT4, PPX_ERROR_UNSUPPORTED, STRS ("'w'", "int8", "int4"));
    expect_load_error (p, "w", 5, 7, PPX_QUANT_BF16, PPX_ERROR_UNSUPPORTED, STRS ("'w'", "int8", "bf16"));
  }
  /* Plain (unquantized) entries. */
  {
    const Spec s[] = {{"w", PPX_DTYPE_BF16, 2, {4, 6}}, {"ids", PPX_DTYPE_I32, 2, {4, 6}}};
    g_autofree char *p = write_file ("plain", NULL, s, 2);
    expect_load_error (p, "w", 4, 5, PPX_QUANT_AUTO, PPX_ERROR_SHAPE, STRS ("'w'", "[4, 6]", "[4, 5]"));
    expect_load_error (p, "nothing", 4, 6, PPX_QUANT_AUTO, PPX_ERROR_MISSING, STRS ("'nothing'"));
    expect_load_error (p, "ids", 4, 6, PPX_QUANT_INT8, PPX_ERROR_SHAPE, STRS ("'ids'", "I32"));
    expect_load_error (p, "w", 0, 6, PPX_QUANT_AUTO, PPX_ERROR_INVALID, STRS ("'w'"));
  }
}

/* Valid small files: BF16 scales are converted; F16 weights become F32; BF16 weights are borrowed;
 * text_linear.weight is quantized at load time when asked. */
static void
test_valid_small_files (void)
{
  g_autoptr (GError) error = NULL;
  {
    const Spec s[] = {{"w.q4", PPX_DTYPE_U8, 2, {3, 20}}, {"w.scale", PPX_DTYPE_BF16, 2, {3, 3}}};
    g_autofree char *p = write_file ("q4-bf16-scales", STRS (META_INT4 ("16")), s, 2);
    PpxSafetensors *st = ppx_st_open (p, &error);
    g_assert_no_error (error);
    PpxWeightDesc d;
    gpointer owned = NULL;
    g_assert_true (ppx_quant_load_linear (st, "w", 3, 40, PPX_QUANT_INT4, &d, &owned, &error));
    g_assert_no_error (error);
    g_assert_nonnull (owned);
    g_assert_false (d.borrow);
    g_assert_cmpint (d.format, ==, PPX_WFMT_INT4);
    g_assert_cmpint (d.group_size, ==, 16);
    g_assert_true (d.data == ppx_st_find (st, "w.q4")->data);
    for (int i = 0; i < 9; i++)
      g_assert_cmpfloat (d.scales[i], ==, ppx_bf16_to_f32 (0x1111));
    g_free (owned);
    ppx_st_close (st);
  }
  {
    /* 35 bytes of codes put the f32 scales off 4-byte alignment: they are copied, not borrowed */
    const Spec s[] = {{"w.q8", PPX_DTYPE_I8, 2, {5, 7}}, {"w.scale", PPX_DTYPE_F32, 1, {5}}};
    g_autofree char *p = write_file ("q8-misaligned-scales", STRS (META_INT8), s, 2);
    PpxSafetensors *st = ppx_st_open (p, &error);
    g_assert_no_error (error);
    PpxWeightDesc d;
    gpointer owned = NULL;
    g_assert_true (ppx_quant_load_linear (st, "w", 5, 7, PPX_QUANT_AUTO, &d, &owned, &error));
    g_assert_no_error (error);
    g_assert_false (d.borrow);
    g_assert_nonnull (owned);
    g_assert_true (((guintptr) d.scales & 3) == 0);
    g_assert_cmpmem (d.scales, 5 * sizeof (float), ppx_st_find (st, "w.scale")->data, 5 * sizeof (float));
    g_free (owned);
    ppx_st_close (st);
  }
  {
    /* int8 entries may sit in an int4 file (the int4 policy keeps the heads at int8) */
    const Spec s[] = {{"w.q8", PPX_DTYPE_I8, 2, {5, 8}}, {"w.scale", PPX_DTYPE_F32, 1, {5}}};
    g_autofree char *p = write_file ("q8-in-int4", STRS (META_INT4 ("64")), s, 2);
    PpxSafetensors *st = ppx_st_open (p, &error);
    g_assert_no_error (error);
    PpxWeightDesc d;
    gpointer owned = NULL;
    g_assert_true (ppx_quant_load_linear (st, "w", 5, 8, PPX_QUANT_INT4, &d, &owned, &error));
    g_assert_no_error (error);
    g_assert_cmpint (d.format, ==, PPX_WFMT_INT8);
    g_assert_true (d.borrow); /* 40 bytes of codes: the f32 scales are aligned in the mapping */
    g_assert_null (owned);
    g_assert_true (d.scales == ppx_st_find (st, "w.scale")->data);
    ppx_st_close (st);
    expect_load_error (p, "w", 5, 8, PPX_QUANT_INT8, PPX_ERROR_UNSUPPORTED, STRS ("'w'", "int4 model", "as int8"));
  }
  {
    const Spec s[] = {{"f16", PPX_DTYPE_F16, 2, {2, 3}}, {"text_linear.weight", PPX_DTYPE_BF16, 2, {3, 20}},
                      {"transformer.layers.0.gating.linear_out.weight", PPX_DTYPE_BF16, 2, {3, 20}}};
    g_autofree char *p = write_file ("plain-valid", NULL, s, 3);
    PpxSafetensors *st = ppx_st_open (p, &error);
    g_assert_no_error (error);
    PpxWeightDesc d;
    gpointer owned = NULL;
    g_assert_true (ppx_quant_load_linear (st, "f16", 2, 3, PPX_QUANT_INT8, &d, &owned, &error));
    g_assert_cmpint (d.format, ==, PPX_WFMT_F32); /* not selected by the policy: kept in float */
    g_assert_false (d.borrow);
    g_assert_cmpfloat (((const float *) d.data)[5], ==, ppx_f16_to_f32 (0x1111));
    g_free (owned);

    g_assert_true (ppx_quant_load_linear (st, "text_linear.weight", 3, 20, PPX_QUANT_BF16, &d, &owned, &error));
    g_assert_cmpint (d.format, ==, PPX_WFMT_BF16);
    g_assert_true (d.borrow);
    g_assert_null (owned);
    g_assert_true (d.data == ppx_st_find (st, "text_linear.weight")->data);

    /* quantized at load time: int8 for the head even in an int4 model, int4 for the temporal linears */
    g_assert_true (ppx_quant_load_linear (st, "text_linear.weight", 3, 20, PPX_QUANT_INT4, &d, &owned, &error));
    g_assert_no_error (error);
    g_assert_cmpint (d.format, ==, PPX_WFMT_INT8);
    g_assert_false (d.borrow);
    g_assert_true (d.data == owned);
    float row8[20];
    ppx_q8_dequantize_row (d.data, d.scales[0], 20, row8);
    for (int c = 0; c < 20; c++)
      g_assert_cmpfloat (fabsf (row8[c] - ppx_bf16_to_f32 (0x1111)), <, 1e-6f * ppx_bf16_to_f32 (0x1111));
    g_free (owned);

    g_assert_true (ppx_quant_load_linear (st, "transformer.layers.0.gating.linear_out.weight", 3, 20, PPX_QUANT_INT4,
                                          &d, &owned, &error));
    g_assert_no_error (error);
    g_assert_cmpint (d.format, ==, PPX_WFMT_INT4);
    g_assert_cmpint (d.group_size, ==, PPX_Q4_DEFAULT_GROUP_SIZE);
    g_assert_false (d.borrow);
    g_assert_true (d.data == owned);
    float row[20];
    ppx_q4_dequantize_row (d.data, d.scales, d.group_size, 20, row);
    for (int c = 0; c < 20; c++) /* a constant row is on the lattice */
      g_assert_cmpfloat (row[c], ==, ppx_bf16_to_f32 (0x1111));
    g_free (owned);
    ppx_st_close (st);
  }
}

static void
test_tool_errors (void)
{
  g_autofree char *bad_dir = g_build_filename (tmp_root, "no-such-dir", NULL);
  g_autofree char *empty_dir = g_build_filename (tmp_root, "empty-model", NULL);
  g_autofree char *out_dir = g_build_filename (tmp_root, "tool-err-out", NULL);
  g_autofree char *file = g_build_filename (tmp_root, "a-regular-file", NULL);
  g_autofree char *under_file = g_build_filename (file, "out", NULL);
  g_autofree char *garbage_dir = g_build_filename (tmp_root, "garbage-model", NULL);
  g_autofree char *garbage = g_build_filename (garbage_dir, LM_FILE, NULL);
  g_assert_cmpint (g_mkdir_with_parents (empty_dir, 0755), ==, 0);
  g_assert_cmpint (g_mkdir_with_parents (garbage_dir, 0755), ==, 0);
  g_assert_true (g_file_set_contents (file, "x", 1, NULL));
  g_assert_true (g_file_set_contents (garbage, "not a safetensors file", -1, NULL));

  /* A valid one-tensor model to pair with bad options. */
  g_autofree char *ok_dir = g_build_filename (tmp_root, "ok-model", NULL);
  g_assert_cmpint (g_mkdir_with_parents (ok_dir, 0755), ==, 0);
  const Spec s[] = {{"text_linear.weight", PPX_DTYPE_BF16, 2, {4, 8}}};
  g_autofree char *written = write_file ("ok-model-lm", NULL, s, 1);
  g_autofree char *ok_lm = g_build_filename (ok_dir, LM_FILE, NULL);
  g_assert_cmpint (g_rename (written, ok_lm), ==, 0);

  const struct {
    const char *const *args;
    const char *needle;
  } cases[] = {
    {STRS ("--model-dir", bad_dir, "--format", "int8", "--output-dir", out_dir), "not a directory"},
    {STRS ("--model-dir", empty_dir, "--format", "int8", "--output-dir", out_dir), "missing"},
    {STRS ("--model-dir", garbage_dir, "--format", "int8", "--output-dir", out_dir), garbage},
    {STRS ("--model-dir", ok_dir, "--format", "int5", "--output-dir", out_dir), "int5"},
    {STRS ("--model-dir", ok_dir, "--format", "int4", "--group-size", "12", "--output-dir", out_dir), "12"},
    {STRS ("--model-dir", ok_dir, "--format", "int8", "--group-size", "64", "--output-dir", out_dir), "int4 only"},
    {STRS ("--model-dir", ok_dir, "--format", "int8", "--output-dir", under_file), under_file},
    {STRS ("--model-dir", ok_dir, "--format", "int8", "--output-dir", ok_dir), "differ"},
    {STRS ("--model-dir", ok_dir, "--output-dir", out_dir), "required"},
    {STRS ("--bogus"), "bogus"},
  };
  for (gsize i = 0; i < G_N_ELEMENTS (cases); i++) {
    g_autofree char *err = NULL;
    g_assert_cmpint (run_quantize (cases[i].args, NULL, &err), ==, 1);
    g_test_message ("%s", err);
    if (!strstr (err, cases[i].needle))
      g_error ("case %" G_GSIZE_FORMAT ": stderr lacks '%s': %s", i, cases[i].needle, err);
  }

  /* A file that cannot be written: the partial output's name is taken by a directory. */
  g_autofree char *blocked = g_build_filename (tmp_root, "blocked-out", LM_FILE ".partial", NULL);
  g_autofree char *blocked_out = g_path_get_dirname (blocked);
  g_assert_cmpint (g_mkdir_with_parents (blocked, 0755), ==, 0);
  {
    g_autofree char *err = NULL;
    g_assert_cmpint (run_quantize (STRS ("--model-dir", ok_dir, "--format", "int8", "--output-dir", blocked_out), NULL,
                                   &err), ==, 1);
    g_test_message ("%s", err);
    g_assert_nonnull (strstr (err, blocked));
    g_autofree char *final = g_build_filename (blocked_out, LM_FILE, NULL);
    g_assert_false (g_file_test (final, G_FILE_TEST_EXISTS));
  }

  /* The tool works on the valid model, and refuses its own output as input. */
  g_autofree char *q_dir = g_build_filename (tmp_root, "ok-model-int8", NULL);
  g_autofree char *q_dir2 = g_build_filename (tmp_root, "ok-model-int8-again", NULL);
  g_autofree char *err = NULL;
  g_assert_cmpint (run_quantize (STRS ("--model-dir", ok_dir, "--format", "int8", "--output-dir", q_dir), NULL, &err),
                   ==, 0);
  g_clear_pointer (&err, g_free);
  g_assert_cmpint (run_quantize (STRS ("--model-dir", q_dir, "--format", "int4", "--output-dir", q_dir2), NULL, &err),
                   ==, 1);
  g_assert_nonnull (strstr (err, "already quantized"));
  g_clear_pointer (&err, g_free);

  /* An output directory inside the model directory is not copied into itself. */
  g_autofree char *nested = g_build_filename (ok_dir, "int4", NULL);
  g_assert_cmpint (run_quantize (STRS ("--model-dir", ok_dir, "--format", "int4", "--output-dir", nested), NULL, &err),
                   ==, 0);
  g_autofree char *nested_twice = g_build_filename (nested, "int4", NULL);
  g_assert_false (g_file_test (nested_twice, G_FILE_TEST_EXISTS));
}

/* Progress on a terminal (issue 17, defect 9): tensor i of N and MB/s on stderr when it is a terminal,
 * nothing of it otherwise. */
static void
test_progress (void)
{
  g_autofree char *dir = g_build_filename (tmp_root, "progress-model", NULL);
  g_autofree char *out_dir = g_build_filename (tmp_root, "progress-int8", NULL);
  g_autofree char *out_dir2 = g_build_filename (tmp_root, "progress-int8-pipe", NULL);
  g_assert_cmpint (g_mkdir_with_parents (dir, 0755), ==, 0);
  const Spec s[] = {{"text_linear.weight", PPX_DTYPE_BF16, 2, {64, 64}},
                    {"out_norm.alpha", PPX_DTYPE_BF16, 2, {1, 64}},
                    {"linears.0.weight", PPX_DTYPE_BF16, 2, {32, 64}}};
  g_autofree char *written = write_file ("progress-lm", NULL, s, 3);
  g_autofree char *lm = g_build_filename (dir, LM_FILE, NULL);
  g_assert_cmpint (g_rename (written, lm), ==, 0);

  const char *tool = g_getenv ("PPX_QUANTIZE") ? g_getenv ("PPX_QUANTIZE") : PPX_BUILD_ROOT "/tools/personaplex-quantize";
  g_autofree char *out = NULL;
  const char *argv[] = {tool, "--model-dir", dir, "--format", "int8", "--output-dir", out_dir, NULL};
  g_assert_cmpint (ppx_test_run_on_terminal (argv, &out), ==, 0);
  g_test_message ("on a terminal:\n%s", out);
  g_assert_nonnull (strstr (out, "tensor 1 of 3"));
  g_assert_nonnull (strstr (out, "tensor 3 of 3"));
  g_assert_nonnull (strstr (out, "MB/s"));

  g_autofree char *err = NULL;
  g_assert_cmpint (run_quantize (STRS ("--model-dir", dir, "--format", "int8", "--output-dir", out_dir2), NULL, &err),
                   ==, 0);
  g_assert_null (strstr (err, "MB/s"));
  g_assert_null (strstr (err, "tensor 1 of"));
}

/* ---- golden tiny model ---- */

static char *
make_golden_model_dir (const char *golden)
{
  char *dir = g_build_filename (tmp_root, "golden-model", NULL);
  g_autofree char *voices = g_build_filename (dir, "voices", NULL);
  g_assert_cmpint (g_mkdir_with_parents (voices, 0755), ==, 0);
  const char *copies[][2] = {{"model.safetensors", LM_FILE}, {"mimi.safetensors", MIMI_FILE},
                             {"voice_prompt.pt", "voices/test.pt"}};
  for (gsize i = 0; i < G_N_ELEMENTS (copies); i++) {
    g_autofree char *src = g_build_filename (golden, copies[i][0], NULL);
    g_autofree char *dst = g_build_filename (dir, copies[i][1], NULL);
    g_autofree char *data = NULL;
    gsize len;
    g_assert_true (g_file_get_contents (src, &data, &len, NULL));
    g_assert_true (g_file_set_contents (dst, data, (gssize) len, NULL));
  }
  /* config.json: the "lm" and "mimi" objects of golden.json. */
  g_autofree char *gj = g_build_filename (golden, "golden.json", NULL);
  g_autoptr (JsonParser) parser = json_parser_new ();
  g_assert_true (json_parser_load_from_file (parser, gj, NULL));
  JsonObject *root = json_node_get_object (json_parser_get_root (parser));
  g_autoptr (JsonBuilder) b = json_builder_new ();
  json_builder_begin_object (b);
  const char *keys[] = {"lm", "mimi"};
  for (int k = 0; k < 2; k++) {
    json_builder_set_member_name (b, keys[k]);
    json_builder_add_value (b, json_node_copy (json_object_get_member (root, keys[k])));
  }
  json_builder_end_object (b);
  g_autoptr (JsonGenerator) gen = json_generator_new ();
  g_autoptr (JsonNode) node = json_builder_get_root (b);
  json_generator_set_root (gen, node);
  g_autofree char *cfg = g_build_filename (dir, "config.json", NULL);
  g_assert_true (json_generator_to_file (gen, cfg, NULL));
  return dir;
}

/* The reference for a pre-quantized weight: quantizing the bf16 tensor at load time (which uses the
 * default int4 group size), or, for other group sizes, calling the quantizer directly. */
static gpointer
reference_quantization (const PpxSafetensors *in, const PpxStTensor *t, PpxQuantization q, int group_size,
                        PpxWeightDesc *ref)
{
  g_autoptr (GError) error = NULL;
  int64_t rows = t->shape[0], cols = t->shape[1];
  gpointer owned = NULL;
  if (ppx_quant_policy_format (t->name, q) == PPX_QUANT_INT8 || group_size == PPX_Q4_DEFAULT_GROUP_SIZE) {
    g_assert_true (ppx_quant_load_linear (in, t->name, rows, cols, q, ref, &owned, &error));
    g_assert_no_error (error);
    g_assert_false (ref->borrow);
    return owned;
  }
  g_autofree float *w = ppx_st_load_f32 (in, t->name, 2, t->shape, &error);
  g_assert_no_error (error);
  gsize packed = ppx_q4_packed_bytes (rows, cols);
  owned = g_malloc (packed + 16 + (gsize) rows * ppx_q4_n_groups (cols, group_size) * sizeof (float));
  float *scales = (float *) ((uint8_t *) owned + ((packed + 15) & ~(gsize) 15));
  ppx_q4_quantize (w, rows, cols, group_size, owned, scales);
  *ref = (PpxWeightDesc){.format = PPX_WFMT_INT4, .rows = rows, .cols = cols, .data = owned, .scales = scales,
                         .group_size = group_size};
  return owned;
}

static void
check_quantized_dir (const char *in_dir, const char *out_dir, PpxQuantization q, int group_size)
{
  g_autoptr (GError) error = NULL;
  g_autofree char *in_lm = g_build_filename (in_dir, LM_FILE, NULL);
  g_autofree char *out_lm = g_build_filename (out_dir, LM_FILE, NULL);
  PpxSafetensors *in = ppx_st_open (in_lm, &error);
  g_assert_no_error (error);
  PpxSafetensors *out = ppx_st_open (out_lm, &error);
  g_assert_no_error (error);

  PpxQuantization file_q;
  int file_group;
  g_assert_true (ppx_quant_file_format (out, &file_q, &file_group, &error));
  g_assert_cmpint (file_q, ==, q);
  g_assert_cmpint (file_group, ==, q == PPX_QUANT_INT4 ? group_size : 0);

  guint n_selected = 0, n_kept = 0, n_int4 = 0;
  for (guint i = 0; i < ppx_st_n_tensors (in); i++) {
    const PpxStTensor *t = ppx_st_tensor_at (in, i);
    if (!ppx_quant_policy_selects (t->name, q)) {
      /* Kept tensors are copied byte for byte. */
      const PpxStTensor *o = ppx_st_find (out, t->name);
      g_assert_nonnull (o);
      g_assert_true (ppx_st_check (out, o, t->dtype, t->ndim, t->shape, &error));
      assert_same_bytes (o->data, t->data, t->nbytes, t->name);
      n_kept++;
      continue;
    }
    n_selected++;
    PpxQuantization fmt = ppx_quant_policy_format (t->name, q);
    n_int4 += fmt == PPX_QUANT_INT4;
    int64_t rows = t->shape[0], cols = t->shape[1];
    g_assert_null (ppx_st_find (out, t->name));

    PpxWeightDesc pre, now;
    gpointer pre_owned = NULL, now_owned = NULL;
    g_assert_true (ppx_quant_load_linear (out, t->name, rows, cols, PPX_QUANT_AUTO, &pre, &pre_owned, &error));
    g_assert_no_error (error);
    now_owned = reference_quantization (in, t, q, group_size, &now);
    g_assert_cmpint (pre.format, ==, fmt == PPX_QUANT_INT8 ? PPX_WFMT_INT8 : PPX_WFMT_INT4);
    g_assert_cmpint (now.format, ==, pre.format);
    g_assert_cmpint (pre.rows, ==, rows);
    g_assert_cmpint (pre.cols, ==, cols);
    g_assert_cmpint (pre.group_size, ==, now.group_size);
    /* f32 scales inside the mapping: zero copies. */
    g_assert_true (pre.borrow);
    g_assert_null (pre_owned);
    gsize data_bytes = fmt == PPX_QUANT_INT8 ? (gsize) rows * cols : ppx_q4_packed_bytes (rows, cols);
    gsize n_scales = fmt == PPX_QUANT_INT8 ? (gsize) rows : (gsize) rows * ppx_q4_n_groups (cols, group_size);
    assert_same_bytes (pre.data, now.data, data_bytes, t->name);
    assert_same_bytes (pre.scales, now.scales, n_scales * sizeof (float), t->name);

    /* Explicitly asking for the file's format works; another one is refused. */
    PpxWeightDesc again;
    gpointer again_owned = NULL;
    g_assert_true (ppx_quant_load_linear (out, t->name, rows, cols, q, &again, &again_owned, &error));
    g_assert_true (again.data == pre.data);
    g_assert_false (ppx_quant_load_linear (out, t->name, rows, cols, PPX_QUANT_BF16, &again, &again_owned, &error));
    g_assert_error (error, PPX_ERROR, PPX_ERROR_UNSUPPORTED);
    g_clear_error (&error);
    g_free (now_owned);
  }
  g_assert_cmpuint (n_selected, ==, 2 * 4 + 2 * (2 + 16 * 2) + 16 + 16 + 1); /* tiny: 2 + 2 layers, 16 steps */
  g_assert_cmpuint (n_int4, ==, q == PPX_QUANT_INT4 ? 2 * 4 : 0); /* the temporal transformer's linears */
  g_assert_cmpuint (ppx_st_n_tensors (out), ==, n_kept + 2 * n_selected);

  /* A kept table loads as borrowed bf16 from the quantized file. */
  PpxWeightDesc emb;
  gpointer emb_owned = NULL;
  g_assert_true (ppx_quant_load_linear (out, "emb.0.weight", 2049, 64, PPX_QUANT_AUTO, &emb, &emb_owned, &error));
  g_assert_cmpint (emb.format, ==, PPX_WFMT_BF16);
  g_assert_true (emb.borrow);

  /* The rest of the directory is there, with the same contents. */
  const char *others[] = {MIMI_FILE, "config.json", "voices/test.pt"};
  for (gsize i = 0; i < G_N_ELEMENTS (others); i++) {
    g_autofree char *a = g_build_filename (in_dir, others[i], NULL), *b = g_build_filename (out_dir, others[i], NULL);
    if (!same_file_contents (a, b))
      g_error ("%s was not carried over", b);
  }
  ppx_st_close (in);
  ppx_st_close (out);
}

static void
test_golden_round_trip (void)
{
  const char *golden = ppx_test_golden_or_skip ();
  g_autofree char *model = make_golden_model_dir (golden);
  const struct {
    const char *format, *group;
    PpxQuantization q;
    int group_size;
  } runs[] = {
    {"int8", NULL, PPX_QUANT_INT8, 0},
    {"int4", NULL, PPX_QUANT_INT4, PPX_Q4_DEFAULT_GROUP_SIZE},
    {"int4", "32", PPX_QUANT_INT4, 32},
  };
  for (gsize i = 0; i < G_N_ELEMENTS (runs); i++) {
    g_autofree char *name = g_strdup_printf ("golden-%s-%s", runs[i].format, runs[i].group ? runs[i].group : "default");
    g_autofree char *out = g_build_filename (tmp_root, name, NULL);
    g_autofree char *stdout_text = NULL, *err = NULL;
    int rc = runs[i].group
               ? run_quantize (STRS ("--model-dir", model, "--format", runs[i].format, "--group-size", runs[i].group,
                                     "--output-dir", out, "--report"),
                               &stdout_text, &err)
               : run_quantize (STRS ("--model-dir", model, "--format", runs[i].format, "--output-dir", out, "--report"),
                               &stdout_text, &err);
    if (rc != 0)
      g_error ("personaplex-quantize failed: %s", err);
    g_test_message ("%s", stdout_text);
    g_assert_nonnull (strstr (stdout_text, "transformer.layers.0.self_attn.in_proj_weight"));
    g_assert_nonnull (strstr (stdout_text, runs[i].q == PPX_QUANT_INT8 ? "\nint8: 109 tensors" : "\nint4: 8 tensors"));
    check_quantized_dir (model, out, runs[i].q, runs[i].group_size);
  }
}

int
main (int argc, char **argv)
{
  gboolean golden = argc > 1 && strcmp (argv[1], "golden") == 0;
  if (golden) {
    argv[1] = argv[0];
    argv++;
    argc--;
  }
  g_test_init (&argc, &argv, NULL);
  if (golden)
    ppx_test_golden_or_skip (); /* exits 77 without golden data */
  tmp_root = g_dir_make_tmp ("ppx-quant-load-XXXXXX", NULL);
  g_assert_nonnull (tmp_root);
  if (golden) {
    g_test_add_func ("/quant-load/golden-round-trip", test_golden_round_trip);
  } else {
    g_test_add_func ("/quant-load/file-format-metadata", test_file_format_metadata);
    g_test_add_func ("/quant-load/corrupt-quantized-entries", test_corrupt_quantized_entries);
    g_test_add_func ("/quant-load/valid-small-files", test_valid_small_files);
    g_test_add_func ("/quant-load/tool-errors", test_tool_errors);
    g_test_add_func ("/quant-load/progress", test_progress);
  }
  int rc = g_test_run ();
  ppx_test_remove_tree (tmp_root);
  g_free (tmp_root);
  return rc;
}
