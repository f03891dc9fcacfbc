/* personaplexduplex: GEnum types of the element's properties. The values
 * are those of the library's enums, so they convert by a plain cast; the
 * nicks are the library's names (ppx-types.h), the descriptions the
 * element's. */
#include "gstppenums.h"

#include "ppx-types.h"

#define MAX_VALUES 8

/* The GEnum registered once in @type: value i has the nick nicks[i]
 * (NULL-terminated) and the description blurbs[i] (n_blurbs of them, one
 * per nick); @values has room for them and the terminator and lives as long
 * as the type. */
static GType
enum_type (gsize * type, const char *type_name, const char *const *nicks,
    const char *const *blurbs, guint n_blurbs, GEnumValue * values)
{
  if (g_once_init_enter (type)) {
    guint i;

    for (i = 0; nicks[i]; i++) {
      g_assert (i < n_blurbs && i < MAX_VALUES - 1);
      values[i].value = (gint) i;
      values[i].value_name = blurbs[i];
      values[i].value_nick = nicks[i];
    }
    g_assert (i == n_blurbs);
    g_once_init_leave (type, g_enum_register_static (type_name, values));
  }
  return *type;
}

GType
gst_personaplex_quantization_get_type (void)
{
  static gsize type = 0;
  static GEnumValue values[MAX_VALUES];
  static const char *const blurbs[] = {
    [PPX_QUANT_AUTO] = "Pre-quantized files as stored, otherwise bf16",
    [PPX_QUANT_BF16] = "bfloat16 weights (no quantization)",
    [PPX_QUANT_INT8] = "8-bit weights, one scale per output row",
    [PPX_QUANT_INT4] = "4-bit weights, one scale per group",
  };

  return enum_type (&type, "GstPersonaplexQuantization",
      ppx_quantization_names (), blurbs, G_N_ELEMENTS (blurbs), values);
}

GType
gst_personaplex_backend_get_type (void)
{
  static gsize type = 0;
  static GEnumValue values[MAX_VALUES];
  static const char *const blurbs[] = {
    [PPX_BACKEND_AUTO] = "CUDA when built and a GPU is present, else CPU",
    [PPX_BACKEND_CPU] = "CPU reference backend",
    [PPX_BACKEND_CUDA] = "CUDA backend (fails if unavailable)",
  };

  return enum_type (&type, "GstPersonaplexBackend",
      ppx_backend_kind_names (), blurbs, G_N_ELEMENTS (blurbs), values);
}

GType
gst_personaplex_kv_cache_format_get_type (void)
{
  static gsize type = 0;
  static GEnumValue values[MAX_VALUES];
  static const char *const blurbs[] = {
    [PPX_KV_AUTO] = "The library's default KV cache format",
    [PPX_KV_F32] = "32-bit float (exact reference numerics)",
    [PPX_KV_BF16] = "bfloat16 (half of f32's memory)",
    [PPX_KV_FP8] = "8-bit float e4m3 with one scale per position and head",
  };

  return enum_type (&type, "GstPersonaplexKvCacheFormat",
      ppx_kv_format_names (), blurbs, G_N_ELEMENTS (blurbs), values);
}
