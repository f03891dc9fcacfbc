/* The error domain and the names of the public enums (ppx-types.h): the one place they are spelled. */
#include "ppx-types.h"

G_DEFINE_QUARK (ppx-error-quark, ppx_error)

static const char *const quantization_names[] = {
  [PPX_QUANT_AUTO] = "auto", [PPX_QUANT_BF16] = "bf16", [PPX_QUANT_INT8] = "int8", [PPX_QUANT_INT4] = "int4", NULL};
static const char *const backend_kind_names[] = {
  [PPX_BACKEND_AUTO] = "auto", [PPX_BACKEND_CPU] = "cpu", [PPX_BACKEND_CUDA] = "cuda", NULL};
static const char *const kv_format_names[] = {
  [PPX_KV_AUTO] = "auto", [PPX_KV_F32] = "f32", [PPX_KV_BF16] = "bf16", [PPX_KV_FP8] = "fp8", NULL};

/* names[v] for 0 <= v < n (n: the entries before the NULL), else "?". */
static const char *
name_of (const char *const *names, guint n, int v)
{
  return v >= 0 && (guint) v < n ? names[v] : "?";
}

/* The index of name in names, or -1. */
static int
index_of (const char *const *names, const char *name)
{
  for (int i = 0; name && names[i]; i++)
    if (g_str_equal (names[i], name))
      return i;
  return -1;
}

#define NAMES(type, prefix, table)                                                                                  \
  const char *prefix##_name (type v)                                                                                \
  {                                                                                                                 \
    return name_of (table, G_N_ELEMENTS (table) - 1, (int) v);                                                      \
  }                                                                                                                 \
  gboolean prefix##_from_name (const char *name, type *out)                                                         \
  {                                                                                                                 \
    const int i = index_of (table, name);                                                                           \
    if (i >= 0)                                                                                                     \
      *out = (type) i;                                                                                              \
    return i >= 0;                                                                                                  \
  }                                                                                                                 \
  const char *const *prefix##_names (void)                                                                          \
  {                                                                                                                 \
    return table;                                                                                                   \
  }

NAMES (PpxQuantization, ppx_quantization, quantization_names)
NAMES (PpxBackendKind, ppx_backend_kind, backend_kind_names)
NAMES (PpxKvFormat, ppx_kv_format, kv_format_names)

PpxKvFormat
ppx_kv_format_resolve (PpxKvFormat f)
{
  return f == PPX_KV_AUTO ? PPX_KV_DEFAULT : f;
}

char *
ppx_names_choice (const char *const *names)
{
  GString *s = g_string_new (NULL);
  for (int i = 0; names[i]; i++)
    g_string_append_printf (s, "%s%s", i == 0 ? "" : names[i + 1] ? ", " : " or ", names[i]);
  return g_string_free (s, FALSE);
}
