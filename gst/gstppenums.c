/* personaplexduplex: GEnum types of the element's properties. The values
 * are those of the library's enums, so they convert by a plain cast. */
#include "gstppenums.h"

#include "personaplex.h"

GType
gst_personaplex_quantization_get_type (void)
{
  static gsize type = 0;
  static const GEnumValue values[] = {
    {PPX_QUANT_AUTO, "Pre-quantized files as stored, otherwise bf16",
        "auto"},
    {PPX_QUANT_BF16, "bfloat16 weights (no quantization)", "bf16"},
    {PPX_QUANT_INT8, "8-bit weights, one scale per output row", "int8"},
    {PPX_QUANT_INT4, "4-bit weights, one scale per group", "int4"},
    {0, NULL, NULL},
  };

  if (g_once_init_enter (&type)) {
    GType t = g_enum_register_static ("GstPersonaplexQuantization", values);
    g_once_init_leave (&type, t);
  }
  return type;
}

GType
gst_personaplex_backend_get_type (void)
{
  static gsize type = 0;
  static const GEnumValue values[] = {
    {PPX_BACKEND_AUTO, "CUDA when built and a GPU is present, else CPU",
        "auto"},
    {PPX_BACKEND_CPU, "CPU reference backend", "cpu"},
    {PPX_BACKEND_CUDA, "CUDA backend (fails if unavailable)", "cuda"},
    {0, NULL, NULL},
  };

  if (g_once_init_enter (&type)) {
    GType t = g_enum_register_static ("GstPersonaplexBackend", values);
    g_once_init_leave (&type, t);
  }
  return type;
}

GType
gst_personaplex_kv_cache_format_get_type (void)
{
  static gsize type = 0;
  static const GEnumValue values[] = {
    {PPX_KV_AUTO, "The library's default KV cache format", "auto"},
    {PPX_KV_F32, "32-bit float (exact reference numerics)", "f32"},
    {PPX_KV_BF16, "bfloat16 (half of f32's memory)", "bf16"},
    {PPX_KV_FP8, "8-bit float e4m3 with one scale per position and head",
        "fp8"},
    {0, NULL, NULL},
  };

  if (g_once_init_enter (&type)) {
    GType t = g_enum_register_static ("GstPersonaplexKvCacheFormat", values);
    g_once_init_leave (&type, t);
  }
  return type;
}
