/* personaplex-quantize: quantize a model directory once, load it fast afterwards.
 *
 *   personaplex-quantize --model-dir DIR --format int8|int4 --output-dir OUT [--group-size N] [--report]
 *
 * Writes OUT/model.safetensors with the tensors the default policy selects stored as NAME.q8/NAME.q4 +
 * NAME.scale (docs/quantization.md; an int4 model keeps the depformer and the output heads at int8) and every other tensor copied unchanged, and hard-links (or, across
 * file systems, copies) every other entry of DIR into OUT. The LM is streamed in row chunks, so peak
 * memory stays around one chunk plus one tensor's scales however large the model is. */
#include "quant-load.h"
#include "quant-policy.h"
#include "quant.h"
#include "safetensors.h"
#include "tool-fail.h"
#include "tool-progress.h"

#include <errno.h>
#include <fcntl.h>
#include <gio/gio.h>
#include <glib/gstdio.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define PROG "personaplex-quantize"
#define LM_FILE "model.safetensors"
/* Rows are quantized in chunks of about this many elements (16 MiB of f32). */
#define CHUNK_ELEMENTS ((gsize) 4 << 20)
/* Unchanged tensors are copied in pieces of this many bytes. */
#define COPY_BYTES ((gsize) 64 << 20)

typedef struct {
  PpxQuantization format;
  int group_size;
  gboolean report;
} Options;

/* Per stored format: [0] int8, [1] int4. */
typedef struct {
  guint64 in_bytes, out_bytes;
  guint64 params[2];
  guint n_quantized[2], n_copied;
  PpxQuantError error[2];
} Totals;

static gboolean
is_float (PpxDType dt)
{
  return dt == PPX_DTYPE_F32 || dt == PPX_DTYPE_BF16 || dt == PPX_DTYPE_F16;
}

/* The format the policy gives tensor t (PPX_QUANT_BF16: copied unchanged). */
static PpxQuantization
target_format (const PpxStTensor *t, const Options *o)
{
  if (t->ndim != 2 || !is_float (t->dtype) || t->shape[0] <= 0 || t->shape[1] <= 0)
    return PPX_QUANT_BF16;
  return ppx_quant_policy_format (t->name, o->format);
}

/* Tells the kernel this process no longer needs the mapped pages of [p, p + n) (the file stays cached
 * by the page cache; only our resident set shrinks). */
static void
release_mapped (const void *p, gsize n)
{
  gsize page = (gsize) sysconf (_SC_PAGESIZE);
  guintptr start = ((guintptr) p + page - 1) & ~(guintptr) (page - 1);
  guintptr end = ((guintptr) p + n) & ~(guintptr) (page - 1);
  if (end > start)
    madvise ((void *) start, end - start, MADV_DONTNEED);
}

static int
cmp_by_offset (gconstpointer a, gconstpointer b)
{
  const PpxStTensor *x = *(const PpxStTensor *const *) a, *y = *(const PpxStTensor *const *) b;
  return (const uint8_t *) x->data < (const uint8_t *) y->data ? -1 : (const uint8_t *) x->data > (const uint8_t *) y->data;
}

static void
declare_outputs (PpxStWriter *w, GPtrArray *tensors, const Options *o)
{
  for (guint i = 0; i < tensors->len; i++) {
    const PpxStTensor *t = g_ptr_array_index (tensors, i);
    PpxQuantization fmt = target_format (t, o);
    if (fmt == PPX_QUANT_BF16) {
      ppx_st_writer_declare (w, t->name, t->dtype, t->ndim, t->shape);
      continue;
    }
    int64_t rows = t->shape[0], cols = t->shape[1];
    g_autofree char *q_name = g_strconcat (t->name, fmt == PPX_QUANT_INT8 ? PPX_QUANT_SUFFIX_Q8 : PPX_QUANT_SUFFIX_Q4, NULL);
    g_autofree char *s_name = g_strconcat (t->name, PPX_QUANT_SUFFIX_SCALE, NULL);
    if (fmt == PPX_QUANT_INT8) {
      ppx_st_writer_declare (w, q_name, PPX_DTYPE_I8, 2, (int64_t[]){rows, cols});
      ppx_st_writer_declare (w, s_name, PPX_DTYPE_F32, 1, (int64_t[]){rows});
    } else {
      ppx_st_writer_declare (w, q_name, PPX_DTYPE_U8, 2, (int64_t[]){rows, (int64_t) ppx_q4_row_bytes (cols)});
      ppx_st_writer_declare (w, s_name, PPX_DTYPE_F32, 2, (int64_t[]){rows, ppx_q4_n_groups (cols, o->group_size)});
    }
  }
}

/* Quantizes one tensor to `fmt` chunk by chunk: writes NAME.q* as it goes, then NAME.scale. */
static gboolean
write_quantized (PpxStWriter *w, const PpxStTensor *t, PpxQuantization fmt, const Options *o, Totals *tot,
                 GError **error)
{
  int64_t rows = t->shape[0], cols = t->shape[1];
  gsize elem = ppx_dtype_size (t->dtype);
  int64_t chunk_rows = MAX (1, (int64_t) (CHUNK_ELEMENTS / (gsize) cols));
  chunk_rows = MIN (chunk_rows, rows);
  gboolean int8 = fmt == PPX_QUANT_INT8;
  int64_t n_groups = int8 ? 1 : ppx_q4_n_groups (cols, o->group_size);
  gsize q_row_bytes = int8 ? (gsize) cols : ppx_q4_row_bytes (cols);

  g_autofree float *wf = g_try_new (float, (gsize) chunk_rows * cols);
  g_autofree uint8_t *q = g_try_malloc ((gsize) chunk_rows * q_row_bytes);
  g_autofree float *scales = g_try_new (float, (gsize) rows * n_groups);
  g_autofree float *deq = o->report ? g_try_new (float, cols) : NULL;
  if (!wf || !q || !scales || (o->report && !deq)) {
    g_set_error (error, PPX_ERROR, PPX_ERROR_NOMEM, "out of memory quantizing tensor '%s'", t->name);
    return FALSE;
  }
  PpxQuantError err = {0};
  for (int64_t r0 = 0; r0 < rows; r0 += chunk_rows) {
    int64_t n = MIN (chunk_rows, rows - r0);
    const uint8_t *src = (const uint8_t *) t->data + (gsize) r0 * cols * elem;
    ppx_convert_to_f32 (t->dtype, src, wf, (gsize) n * cols);
    float *chunk_scales = scales + r0 * n_groups;
    if (int8)
      ppx_q8_quantize (wf, n, cols, (int8_t *) q, chunk_scales);
    else
      ppx_q4_quantize (wf, n, cols, o->group_size, q, chunk_scales);
    if (o->report) {
      for (int64_t r = 0; r < n; r++) {
        if (int8)
          ppx_q8_dequantize_row ((const int8_t *) q + r * cols, chunk_scales[r], cols, deq);
        else
          ppx_q4_dequantize_row (q + r * q_row_bytes, chunk_scales + r * n_groups, o->group_size, cols, deq);
        ppx_quant_error_add (&err, wf + r * cols, deq, cols);
      }
    }
    if (!ppx_st_writer_write (w, q, (gsize) n * q_row_bytes, error))
      return FALSE;
    release_mapped (src, (gsize) n * cols * elem);
  }
  if (!ppx_st_writer_write (w, scales, (gsize) rows * n_groups * sizeof (float), error))
    return FALSE;

  int f = int8 ? 0 : 1;
  tot->n_quantized[f]++;
  tot->params[f] += (guint64) rows * cols;
  if (o->report) {
    PpxQuantError *te = &tot->error[f];
    te->ref_sq += err.ref_sq;
    te->err_sq += err.err_sq;
    te->max_abs_err = MAX (te->max_abs_err, err.max_abs_err);
    te->n += err.n;
    g_print ("%-52s [%6" G_GINT64_FORMAT ", %6" G_GINT64_FORMAT "]  %s  rel %.5f  SNR %6.2f dB  max|err| %.3g\n",
             t->name, rows, cols, ppx_quantization_name (fmt), ppx_quant_error_relative (&err),
             ppx_quant_error_snr_db (&err), err.max_abs_err);
  }
  return TRUE;
}

static gboolean
write_unchanged (PpxStWriter *w, const PpxStTensor *t, Totals *tot, GError **error)
{
  for (gsize off = 0; off < t->nbytes; off += COPY_BYTES) {
    gsize n = MIN (COPY_BYTES, t->nbytes - off);
    if (!ppx_st_writer_write (w, (const uint8_t *) t->data + off, n, error))
      return FALSE;
    release_mapped ((const uint8_t *) t->data + off, n);
  }
  tot->n_copied++;
  return TRUE;
}

static guint64
file_size (const char *path)
{
  GStatBuf sb;
  return g_stat (path, &sb) == 0 ? (guint64) sb.st_size : 0;
}

static gboolean
quantize_lm (const char *in_path, const char *out_path, const Options *o, Totals *tot, GError **error)
{
  PpxSafetensors *st = ppx_st_open (in_path, error);
  if (!st)
    return FALSE;
  PpxQuantization in_q;
  gboolean ok = ppx_quant_file_format (st, &in_q, NULL, error);
  if (ok && in_q != PPX_QUANT_BF16) {
    g_set_error (error, PPX_ERROR, PPX_ERROR_INVALID, "%s: already quantized (%s); quantize the original model instead",
                 in_path, ppx_quantization_name (in_q));
    ok = FALSE;
  }
  for (guint i = 0; ok && i < ppx_st_n_tensors (st); i++) {
    const char *name = ppx_st_tensor_at (st, i)->name;
    if (g_str_has_suffix (name, PPX_QUANT_SUFFIX_Q8) || g_str_has_suffix (name, PPX_QUANT_SUFFIX_Q4)) {
      g_set_error (error, PPX_ERROR, PPX_ERROR_INVALID, "%s: tensor '%s' is already quantized", in_path, name);
      ok = FALSE;
    }
  }
  if (!ok) {
    ppx_st_close (st);
    return FALSE;
  }

  /* Write in the input's data order, so the input is read front to back. */
  g_autoptr (GPtrArray) tensors = g_ptr_array_new ();
  for (guint i = 0; i < ppx_st_n_tensors (st); i++)
    g_ptr_array_add (tensors, (gpointer) ppx_st_tensor_at (st, i));
  g_ptr_array_sort (tensors, cmp_by_offset);

  g_autofree char *tmp_path = g_strconcat (out_path, ".partial", NULL);
  PpxStWriter *w = ppx_st_writer_new ();
  ppx_st_writer_set_metadata (w, PPX_QUANT_META_FORMAT, ppx_quantization_name (o->format));
  ppx_st_writer_set_metadata (w, PPX_QUANT_META_VERSION, PPX_QUANT_FORMAT_VERSION);
  if (o->format == PPX_QUANT_INT4) {
    g_autofree char *gs = g_strdup_printf ("%d", o->group_size);
    ppx_st_writer_set_metadata (w, PPX_QUANT_META_GROUP_SIZE, gs);
  }
  declare_outputs (w, tensors, o);
  /* tensor i of N and MB/s read, on a terminal (not with --report: it prints a line per tensor) */
  guint64 in_bytes = 0, done = 0;
  for (guint i = 0; i < tensors->len; i++)
    in_bytes += ((const PpxStTensor *) g_ptr_array_index (tensors, i))->nbytes;
  g_autofree char *base = g_path_get_basename (in_path);
  ToolProgress progress;
  tool_progress_start (&progress, PROG, base, in_bytes);
  progress.on &= !o->report;
  ok = ppx_st_writer_begin (w, tmp_path, error);
  for (guint i = 0; ok && i < tensors->len; i++) {
    const PpxStTensor *t = g_ptr_array_index (tensors, i);
    PpxQuantization fmt = target_format (t, o);
    ok = fmt != PPX_QUANT_BF16 ? write_quantized (w, t, fmt, o, tot, error) : write_unchanged (w, t, tot, error);
    done += t->nbytes;
    if (ok)
      tool_progress_update (&progress, i + 1, tensors->len, done);
  }
  tool_progress_end (&progress);
  ok = ok && ppx_st_writer_finish (w, error);
  ppx_st_writer_free (w);
  ppx_st_close (st);
  if (ok && g_rename (tmp_path, out_path) != 0) {
    g_set_error (error, PPX_ERROR, PPX_ERROR_IO, "%s: cannot rename to %s: %s", tmp_path, out_path, g_strerror (errno));
    ok = FALSE;
  }
  if (!ok) {
    g_unlink (tmp_path);
    return FALSE;
  }
  tot->in_bytes = file_size (in_path);
  tot->out_bytes = file_size (out_path);
  return TRUE;
}

/* ---- the other files of the directory ---- */

static gboolean
copy_file (const char *src, const char *dst, GError **error)
{
  g_autoptr (GFile) s = g_file_new_for_path (src);
  g_autoptr (GFile) d = g_file_new_for_path (dst);
  g_autoptr (GError) e = NULL;
  if (!g_file_copy (s, d, G_FILE_COPY_OVERWRITE, NULL, NULL, NULL, &e)) {
    g_set_error (error, PPX_ERROR, PPX_ERROR_IO, "cannot copy %s to %s: %s", src, dst, e->message);
    return FALSE;
  }
  return TRUE;
}

/* Hard-links (following symlinks) or, where that is impossible, copies src to dst. */
static gboolean
link_or_copy (const char *src, const char *dst, GError **error)
{
  if (g_unlink (dst) != 0 && errno != ENOENT) {
    g_set_error (error, PPX_ERROR, PPX_ERROR_IO, "%s: cannot replace: %s", dst, g_strerror (errno));
    return FALSE;
  }
  if (linkat (AT_FDCWD, src, AT_FDCWD, dst, AT_SYMLINK_FOLLOW) == 0)
    return TRUE;
  return copy_file (src, dst, error);
}

static gboolean
same_directory (const char *a, const char *b)
{
  GStatBuf sa, sb;
  return g_stat (a, &sa) == 0 && g_stat (b, &sb) == 0 && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

/* Mirrors every entry of src_dir into dst_dir, except `skip` (top level only), dot-files, and the
 * output directory itself (`out_root`, when it lies inside the model directory). */
static gboolean
mirror_dir (const char *src_dir, const char *dst_dir, const char *skip, const char *out_root, guint *n_files,
            GError **error)
{
  g_autoptr (GError) e = NULL;
  g_autoptr (GDir) dir = g_dir_open (src_dir, 0, &e);
  if (!dir) {
    g_set_error (error, PPX_ERROR, PPX_ERROR_IO, "%s: cannot read directory: %s", src_dir, e->message);
    return FALSE;
  }
  const char *entry;
  while ((entry = g_dir_read_name (dir))) {
    if (entry[0] == '.' || (skip && strcmp (entry, skip) == 0))
      continue;
    g_autofree char *src = g_build_filename (src_dir, entry, NULL);
    g_autofree char *dst = g_build_filename (dst_dir, entry, NULL);
    if (g_file_test (src, G_FILE_TEST_IS_DIR)) {
      if (same_directory (src, out_root))
        continue;
      if (g_mkdir_with_parents (dst, 0755) != 0) {
        g_set_error (error, PPX_ERROR, PPX_ERROR_IO, "%s: cannot create directory: %s", dst, g_strerror (errno));
        return FALSE;
      }
      if (!mirror_dir (src, dst, NULL, out_root, n_files, error))
        return FALSE;
    } else if (g_file_test (src, G_FILE_TEST_IS_REGULAR)) {
      if (!link_or_copy (src, dst, error))
        return FALSE;
      (*n_files)++;
    }
  }
  return TRUE;
}

/* --format: int8 or int4 (the library's names). */
static gboolean
parse_format (const char *s, PpxQuantization *out)
{
  return ppx_quantization_from_name (s, out) && (*out == PPX_QUANT_INT8 || *out == PPX_QUANT_INT4);
}

int
main (int argc, char **argv)
{
  g_autofree char *model_dir = NULL, *output_dir = NULL, *format = NULL;
  int group_size = 0;
  gboolean report = FALSE;
  GOptionEntry entries[] = {
    {"model-dir", 0, 0, G_OPTION_ARG_FILENAME, &model_dir, "Model directory (published layout, bf16)", "DIR"},
    {"format", 0, 0, G_OPTION_ARG_STRING, &format, "Quantized format: int8 or int4", "FMT"},
    {"output-dir", 0, 0, G_OPTION_ARG_FILENAME, &output_dir, "Directory to write the quantized model into", "OUT"},
    {"group-size", 0, 0, G_OPTION_ARG_INT, &group_size, "int4 group size (multiple of 8; default 64)", "N"},
    {"report", 0, 0, G_OPTION_ARG_NONE, &report, "Print each quantized tensor's error and the totals", NULL},
    {NULL},
  };
  g_autoptr (GOptionContext) ctx = g_option_context_new ("- quantize a PersonaPlex model directory once");
  g_option_context_add_main_entries (ctx, entries, NULL);
  g_autoptr (GError) error = NULL;
  if (!g_option_context_parse (ctx, &argc, &argv, &error))
    return tool_fail (PROG, error->message);
  if (!model_dir || !output_dir || !format)
    return tool_fail (PROG, "--model-dir, --format and --output-dir are required (see --help)");

  Options o = {.report = report};
  if (!parse_format (format, &o.format)) {
    g_autofree char *m = g_strdup_printf ("unknown --format '%s' (use int8 or int4)", format);
    return tool_fail (PROG, m);
  }
  if (o.format == PPX_QUANT_INT4) {
    o.group_size = group_size ? group_size : PPX_Q4_DEFAULT_GROUP_SIZE;
    if (!ppx_q4_group_size_valid (o.group_size)) {
      g_autofree char *m = g_strdup_printf ("--group-size %d: must be a multiple of 8 in [%d, %d]", group_size,
                                            PPX_Q4_MIN_GROUP_SIZE, PPX_Q4_MAX_GROUP_SIZE);
      return tool_fail (PROG, m);
    }
  } else if (group_size) {
    return tool_fail (PROG, "--group-size applies to --format int4 only (int8 has one scale per row)");
  }
  if (!g_file_test (model_dir, G_FILE_TEST_IS_DIR)) {
    g_autofree char *m = g_strdup_printf ("%s: not a directory", model_dir);
    return tool_fail (PROG, m);
  }
  g_autofree char *in_lm = g_build_filename (model_dir, LM_FILE, NULL);
  if (!g_file_test (in_lm, G_FILE_TEST_IS_REGULAR)) {
    g_autofree char *m = g_strdup_printf ("%s: missing (not a model directory?)", in_lm);
    return tool_fail (PROG, m);
  }
  if (g_mkdir_with_parents (output_dir, 0755) != 0) {
    g_autofree char *m = g_strdup_printf ("%s: cannot create directory: %s", output_dir, g_strerror (errno));
    return tool_fail (PROG, m);
  }
  if (same_directory (model_dir, output_dir))
    return tool_fail (PROG, "--output-dir must differ from --model-dir");

  g_autofree char *out_lm = g_build_filename (output_dir, LM_FILE, NULL);
  Totals tot = {0};
  guint n_files = 0;
  if (!quantize_lm (in_lm, out_lm, &o, &tot, &error) || !mirror_dir (model_dir, output_dir, LM_FILE, output_dir, &n_files, &error))
    return tool_fail (PROG, error->message);

  if (o.report) {
    g_print ("format %s", ppx_quantization_name (o.format));
    if (o.format == PPX_QUANT_INT4)
      g_print (", group size %d", o.group_size);
    g_print ("; %u tensors copied unchanged\n", tot.n_copied);
    for (int f = 0; f < 2; f++)
      if (tot.n_quantized[f])
        g_print ("%s: %u tensors, %" G_GUINT64_FORMAT " parameters, rel %.5f  SNR %.2f dB  max|err| %.3g\n",
                 ppx_quantization_name (f == 0 ? PPX_QUANT_INT8 : PPX_QUANT_INT4), tot.n_quantized[f], tot.params[f],
                 ppx_quant_error_relative (&tot.error[f]), ppx_quant_error_snr_db (&tot.error[f]),
                 tot.error[f].max_abs_err);
    g_print ("%s: %" G_GUINT64_FORMAT " bytes -> %s: %" G_GUINT64_FORMAT " bytes (%.1f%%)\n", in_lm, tot.in_bytes, out_lm,
             tot.out_bytes, tot.in_bytes ? 100.0 * (double) tot.out_bytes / (double) tot.in_bytes : 0.0);
    g_print ("linked or copied %u other files into %s\n", n_files, output_dir);
  }
  return 0;
}
