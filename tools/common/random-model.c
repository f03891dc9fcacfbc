#define _GNU_SOURCE
#include "random-model.h"

#include "manifest.h"
#include "quant-load.h"
#include "quant-policy.h"
#include "quant.h"
#include "safetensors.h"
#include "tool-progress.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>

#define CHUNK_ELEMS ((gsize) 1 << 20)

/* ---- sizes ---- */

/* The hyperparameters of ../shared/golden/tiny/golden.json (personaplex-make-model's tiny preset). */
static const char tiny_json[] =
  "{\"lm\": {\"dim\": 64, \"num_heads\": 4, \"num_layers\": 2, \"hidden_scale\": 4.125, \"context\": 20,"
  " \"text_card\": 2048, \"card\": 2048, \"n_q\": 16, \"dep_q\": 16, \"existing_text_padding_id\": 3,"
  " \"max_period\": 10000, \"depformer_dim\": 32, \"depformer_dim_feedforward\": 132,"
  " \"depformer_num_heads\": 2, \"depformer_num_layers\": 2,"
  " \"delays\": [0, 0, 1, 1, 1, 1, 1, 1, 1, 0, 1, 1, 1, 1, 1, 1, 1]},"
  " \"mimi\": {\"seanet\": {\"channels\": 1, \"dimension\": 32, \"n_filters\": 4, \"n_residual_layers\": 1,"
  " \"compress\": 2, \"dilation_base\": 2, \"kernel_size\": 7, \"residual_kernel_size\": 3,"
  " \"last_kernel_size\": 3, \"ratios\": [8, 6, 5, 4]},"
  " \"quantizer\": {\"dimension\": 16, \"n_q\": 32, \"bins\": 2048, \"input_dimension\": 32,"
  " \"output_dimension\": 32},"
  " \"transformer\": {\"d_model\": 32, \"num_heads\": 2, \"num_layers\": 2, \"context\": 30,"
  " \"dim_feedforward\": 64, \"max_period\": 10000},"
  " \"num_codebooks\": 8}}";

/* A mid-size LM between tiny and 7B with the 7B's head sizes (temporal 128, depformer 64), context,
 * vocabularies and stream layout; the Mimi codec is the full-size one. 362 M LM parameters (724 MB bf16). */
static const char mid_json[] =
  "{\"lm\": {\"dim\": 1024, \"num_heads\": 8, \"num_layers\": 8,"
  " \"depformer_dim\": 512, \"depformer_dim_feedforward\": 2112, \"depformer_num_heads\": 8,"
  " \"depformer_num_layers\": 2}}";

gboolean
random_model_config (const char *size, PpxConfig *cfg, GError **error)
{
  ppx_config_default (cfg);
  if (g_strcmp0 (size, "tiny") == 0)
    return ppx_config_apply_json (cfg, tiny_json, -1, "built-in tiny size", error);
  if (g_strcmp0 (size, "mid") == 0)
    return ppx_config_apply_json (cfg, mid_json, -1, "built-in mid size", error);
  if (g_strcmp0 (size, "full") == 0)
    return ppx_config_finish (cfg, "built-in full size", error);
  g_set_error (error, PPX_ERROR, PPX_ERROR_INVALID, "unknown random model size '%s' (expected tiny, mid or full)",
               size);
  return FALSE;
}

static guint64
entry_numel (const PpxManifestEntry *e)
{
  guint64 n = 1;
  for (int d = 0; d < e->ndim; d++)
    n *= (guint64) e->shape[d];
  return n;
}

/* How the policy stores an entry in a model quantized as `format`: BF16 (as published), INT8 or INT4
 * (an int4 model keeps some linears at int8, see quant-policy.h). */
static PpxQuantization
entry_format (const PpxManifestEntry *e, PpxQuantization format)
{
  return e->ndim == 2 ? ppx_quant_policy_format (e->name, format) : PPX_QUANT_BF16;
}

/* Bytes of the packed data and of the scales of a quantized [rows, cols] entry. */
static void
quantized_sizes (int64_t rows, int64_t cols, PpxQuantization format, guint64 *data, guint64 *scales)
{
  if (format == PPX_QUANT_INT8) {
    *data = (guint64) rows * cols;
    *scales = (guint64) rows * sizeof (float);
  } else {
    *data = ppx_q4_packed_bytes (rows, cols);
    *scales = (guint64) rows * ppx_q4_n_groups (cols, RANDOM_MODEL_INT4_GROUP_SIZE) * sizeof (float);
  }
}

guint64
random_model_lm_bytes (const PpxLmConfig *cfg, PpxQuantization format)
{
  g_autoptr (GPtrArray) manifest = ppx_manifest_lm (cfg);
  guint64 total = 0;
  for (guint t = 0; t < manifest->len; t++) {
    const PpxManifestEntry *e = g_ptr_array_index (manifest, t);
    PpxQuantization q = entry_format (e, format);
    if (q != PPX_QUANT_BF16) {
      guint64 data, scales;
      quantized_sizes (e->shape[0], e->shape[1], q, &data, &scales);
      total += data + scales;
    } else {
      total += entry_numel (e) * 2;
    }
  }
  return total;
}

guint64
random_model_mimi_bytes (const PpxMimiConfig *cfg)
{
  g_autoptr (GPtrArray) manifest = ppx_manifest_mimi (cfg);
  guint64 total = 0;
  for (guint t = 0; t < manifest->len; t++)
    total += entry_numel (g_ptr_array_index (manifest, t)) * sizeof (float);
  return total;
}

/* ---- memory files ---- */

MemFile *
mem_file_new (const char *label, GError **error)
{
  int fd = memfd_create (label, MFD_CLOEXEC);
  if (fd < 0) {
    g_set_error (error, PPX_ERROR, PPX_ERROR_IO, "cannot create the in-memory file '%s': %s", label,
                 g_strerror (errno));
    return NULL;
  }
  MemFile *f = g_new0 (MemFile, 1);
  f->fd = fd;
  f->path = g_strdup_printf ("/proc/self/fd/%d", fd);
  return f;
}

void
mem_file_free (MemFile *f)
{
  if (!f)
    return;
  close (f->fd);
  g_free (f->path);
  g_free (f);
}

/* ---- values ---- */

/* splitmix64 at a counter: every element is independent of the others. */
static inline guint64
splitmix64_at (guint64 key, guint64 i)
{
  guint64 z = key + (i + 1) * 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* Uniform in [-1, 1). */
static inline float
uniform_at (guint64 key, guint64 i)
{
  return (float) ((double) (splitmix64_at (key, i) >> 40) * (2.0 / 16777216.0) - 1.0);
}

static guint64
tensor_key (guint64 seed, const char *name)
{
  guint64 h = 0xcbf29ce484222325ull; /* FNV-1a */
  for (const char *p = name; *p; p++)
    h = (h ^ (guint8) *p) * 0x100000001b3ull;
  return splitmix64_at (seed, h);
}

/* value = offset + scale * uniform. */
typedef struct {
  float scale, offset;
} Fill;

/* A distribution from the tensor's role, so that a forward pass stays finite and non-degenerate. */
static Fill
fill_for (const PpxManifestEntry *e)
{
  const char *n = e->name;
  if (g_str_has_suffix (n, "._initialized") || g_str_has_suffix (n, ".cluster_usage"))
    return (Fill){0.0f, 1.0f};
  if (g_str_has_suffix (n, ".embedding_sum"))
    return (Fill){1.7f, 0.0f}; /* variance about 1 */
  if (g_str_has_suffix (n, ".alpha") || g_str_has_suffix (n, "norm1.weight") || g_str_has_suffix (n, "norm2.weight"))
    return (Fill){0.05f, 1.0f};
  if (strstr (n, "layer_scale_"))
    return (Fill){0.045f, 0.055f};
  if (g_str_has_suffix (n, ".bias"))
    return (Fill){0.01f, 0.0f};
  if (g_str_has_prefix (n, "emb.") || g_str_has_prefix (n, "text_emb.") || g_str_has_prefix (n, "depformer_emb.") ||
      g_str_has_prefix (n, "depformer_text_emb."))
    return (Fill){1.0f, 0.0f};
  double fan_in;
  if (strstr (n, "upsample.convtr"))
    fan_in = 2.0; /* depthwise, stride 2 */
  else if (strstr (n, ".convtr."))
    fan_in = 2.0 * (double) e->shape[0]; /* kernel = 2 * stride */
  else if (e->ndim == 3)
    fan_in = (double) e->shape[1] * (double) e->shape[2];
  else
    fan_in = e->ndim >= 2 ? (double) e->shape[1] : 1.0;
  return (Fill){(float) (1.0 / sqrt (MAX (fan_in, 1.0))), 0.0f};
}

/* ---- writing ---- */

static gboolean
write_float (PpxStWriter *w, const PpxManifestEntry *e, PpxDType dtype, guint64 seed, float *vals, guint16 *half,
             GError **error)
{
  Fill f = fill_for (e);
  guint64 key = tensor_key (seed, e->name), numel = entry_numel (e);
  for (guint64 start = 0; start < numel; start += CHUNK_ELEMS) {
    gint64 n = (gint64) MIN ((guint64) CHUNK_ELEMS, numel - start);
#pragma omp parallel for schedule(static) if (n > 65536)
    for (gint64 i = 0; i < n; i++)
      vals[i] = f.offset + f.scale * uniform_at (key, start + (guint64) i);
    gboolean ok;
    if (dtype == PPX_DTYPE_BF16) {
      for (gint64 i = 0; i < n; i++)
        half[i] = ppx_f32_to_bf16 (vals[i]);
      ok = ppx_st_writer_write (w, half, (gsize) n * sizeof *half, error);
    } else {
      ok = ppx_st_writer_write (w, vals, (gsize) n * sizeof *vals, error);
    }
    if (!ok)
      return FALSE;
  }
  return TRUE;
}

/* Random codes (uniform over the code range) and scales that give weights within the tensor's bound. */
static gboolean
write_quantized (PpxStWriter *w, const PpxManifestEntry *e, PpxQuantization format, guint64 seed, guint8 *buf,
                 GError **error)
{
  const int64_t rows = e->shape[0], cols = e->shape[1];
  guint64 data_bytes, scale_bytes;
  quantized_sizes (rows, cols, format, &data_bytes, &scale_bytes);
  guint64 key = tensor_key (seed, e->name);
  const gsize chunk = CHUNK_ELEMS * sizeof (float);
  for (guint64 start = 0; start < data_bytes; start += chunk) {
    gint64 n = (gint64) MIN ((guint64) chunk, data_bytes - start);
#pragma omp parallel for schedule(static) if (n > 65536)
    for (gint64 i = 0; i < n; i++) {
      guint8 b = (guint8) (splitmix64_at (key, start + (guint64) i) >> 56);
      if (format == PPX_QUANT_INT8 && b == 0x80)
        b = 0x81; /* int8 codes stay in [-127, 127] */
      buf[i] = b;
    }
    if (format == PPX_QUANT_INT4 && (cols & 1)) {
      gsize row_bytes = ppx_q4_row_bytes (cols);
      for (guint64 i = start; i < start + (guint64) n; i++)
        if (i % row_bytes == row_bytes - 1) /* an odd last column leaves the high nibble at the zero code */
          buf[i - start] = (guint8) ((buf[i - start] & 0x0f) | (PPX_Q4_ZERO_CODE << 4));
    }
    if (!ppx_st_writer_write (w, buf, (gsize) n, error))
      return FALSE;
  }
  float bound = fill_for (e).scale;
  float scale = format == PPX_QUANT_INT8 ? bound / 127.0f : bound / 8.0f;
  float *scales = (float *) buf;
  for (guint64 done = 0; done < scale_bytes;) {
    gsize n = (gsize) MIN ((guint64) chunk, scale_bytes - done) / sizeof (float);
    for (gsize i = 0; i < n; i++)
      scales[i] = scale;
    if (!ppx_st_writer_write (w, scales, n * sizeof (float), error))
      return FALSE;
    done += n * sizeof (float);
  }
  return TRUE;
}

static void
declare (PpxStWriter *w, const PpxManifestEntry *e, PpxDType float_dtype, PpxQuantization model_format)
{
  PpxQuantization format = entry_format (e, model_format);
  if (format == PPX_QUANT_BF16) {
    ppx_st_writer_declare (w, e->name, float_dtype, e->ndim, e->shape);
    return;
  }
  const int64_t rows = e->shape[0], cols = e->shape[1];
  g_autofree char *q_name = g_strconcat (e->name, format == PPX_QUANT_INT8 ? PPX_QUANT_SUFFIX_Q8 : PPX_QUANT_SUFFIX_Q4,
                                         NULL);
  g_autofree char *s_name = g_strconcat (e->name, PPX_QUANT_SUFFIX_SCALE, NULL);
  if (format == PPX_QUANT_INT8) {
    ppx_st_writer_declare (w, q_name, PPX_DTYPE_I8, 2, (int64_t[]){rows, cols});
    ppx_st_writer_declare (w, s_name, PPX_DTYPE_F32, 1, (int64_t[]){rows});
  } else {
    ppx_st_writer_declare (w, q_name, PPX_DTYPE_U8, 2, (int64_t[]){rows, (int64_t) ppx_q4_row_bytes (cols)});
    ppx_st_writer_declare (w, s_name, PPX_DTYPE_F32, 2, (int64_t[]){rows, ppx_q4_n_groups (cols, RANDOM_MODEL_INT4_GROUP_SIZE)});
  }
}

static gboolean
write_checkpoint (GPtrArray *manifest, PpxDType float_dtype, PpxQuantization format, guint64 seed, const char *path,
                  const char *progress_prog, GError **error)
{
  PpxStWriter *w = ppx_st_writer_new ();
  ppx_st_writer_set_metadata (w, "format", "pt");
  ppx_st_writer_set_metadata (w, "generator", g_get_prgname () ? g_get_prgname () : "personaplex");
  if (format == PPX_QUANT_INT8 || format == PPX_QUANT_INT4) {
    ppx_st_writer_set_metadata (w, PPX_QUANT_META_FORMAT, ppx_quantization_name (format));
    ppx_st_writer_set_metadata (w, PPX_QUANT_META_VERSION, PPX_QUANT_FORMAT_VERSION);
    if (format == PPX_QUANT_INT4) {
      g_autofree char *gs = g_strdup_printf ("%d", RANDOM_MODEL_INT4_GROUP_SIZE);
      ppx_st_writer_set_metadata (w, PPX_QUANT_META_GROUP_SIZE, gs);
    }
  }
  for (guint t = 0; t < manifest->len; t++)
    declare (w, g_ptr_array_index (manifest, t), float_dtype, format);
  gboolean ok = ppx_st_writer_begin (w, path, error);
  float *vals = g_new (float, CHUNK_ELEMS);
  guint16 *half = g_new (guint16, CHUNK_ELEMS);
  g_autofree char *base = g_path_get_basename (path);
  ToolProgress progress;
  tool_progress_start (&progress, progress_prog, base, ppx_st_writer_data_bytes (w, NULL));
  progress.on &= progress_prog != NULL;
  for (guint t = 0; ok && t < manifest->len; t++) {
    const PpxManifestEntry *e = g_ptr_array_index (manifest, t);
    PpxQuantization q = entry_format (e, format);
    ok = q != PPX_QUANT_BF16 ? write_quantized (w, e, q, seed, (guint8 *) vals, error)
                             : write_float (w, e, float_dtype, seed, vals, half, error);
    guint64 written;
    ppx_st_writer_data_bytes (w, &written);
    if (ok)
      tool_progress_update (&progress, t + 1, manifest->len, written);
  }
  tool_progress_end (&progress);
  ok = ok && ppx_st_writer_finish (w, error);
  g_free (vals);
  g_free (half);
  ppx_st_writer_free (w);
  return ok;
}

gboolean
random_model_write_lm (const PpxLmConfig *cfg, PpxQuantization format, guint64 seed, const char *path,
                       const char *progress, GError **error)
{
  g_autoptr (GPtrArray) manifest = ppx_manifest_lm (cfg);
  return write_checkpoint (manifest, PPX_DTYPE_BF16, format, seed, path, progress, error);
}

gboolean
random_model_write_mimi (const PpxMimiConfig *cfg, guint64 seed, const char *path, const char *progress,
                         GError **error)
{
  g_autoptr (GPtrArray) manifest = ppx_manifest_mimi (cfg);
  return write_checkpoint (manifest, PPX_DTYPE_F32, PPX_QUANT_BF16, seed ^ 0x6d696d69ull, path, progress, error);
}

gboolean
random_model_write_config (const PpxConfig *cfg, const char *path, GError **error)
{
  /* Not g_file_set_contents: it replaces the file by renaming, which /proc/self/fd paths do not allow. */
  g_autofree char *json = ppx_config_to_json (cfg);
  FILE *f = fopen (path, "wb");
  gboolean ok = f && fputs (json, f) >= 0;
  if (f && fclose (f) != 0)
    ok = FALSE;
  if (!ok)
    g_set_error (error, PPX_ERROR, PPX_ERROR_IO, "%s: cannot write the config: %s", path, g_strerror (errno));
  return ok;
}
