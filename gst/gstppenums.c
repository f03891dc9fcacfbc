/* personaplexduplex: GEnum types of the element's properties. The values
 * are those of the library's enums, so they convert by a plain cast; the
 * nicks are the library's names (ppx-types.h), the descriptions the
 * element's. */
#include "gstppenums.h"

#include "ppx-types.h"

#define MAX_VALUES 8

enum
{ QUANTIZATION, BACKEND, KV_CACHE_FORMAT, N_ENUMS };

/* Each type: its name, the library's names of its values (in value order,
 * NULL-terminated) and a description of each value. */
static const struct
{
  const char *type_name;
  const char *const *(*nicks) (void);
  const char *blurbs[MAX_VALUES];
} enums[N_ENUMS] = {
  [QUANTIZATION] = {"GstPersonaplexQuantization", ppx_quantization_names, {
          [PPX_QUANT_AUTO] = "Pre-quantized files as stored, otherwise bf16",
          [PPX_QUANT_BF16] = "bfloat16 weights (no quantization)",
          [PPX_QUANT_INT8] = "8-bit weights, one scale per output row",
          [PPX_QUANT_INT4] = "4-bit weights, one scale per group"}},
  [BACKEND] = {"GstPersonaplexBackend", ppx_backend_kind_names, {
          [PPX_BACKEND_AUTO] = "CUDA when built and a GPU is present, else CPU",
          [PPX_BACKEND_CPU] = "CPU reference backend",
          [PPX_BACKEND_CUDA] = "CUDA backend (fails if unavailable)"}},
  [KV_CACHE_FORMAT] = {"GstPersonaplexKvCacheFormat", ppx_kv_format_names, {
          [PPX_KV_AUTO] = "The library's default KV cache format",
          [PPX_KV_F32] = "32-bit float (exact reference numerics)",
          [PPX_KV_BF16] = "bfloat16 (half of f32's memory)",
          [PPX_KV_FP8] =
          "8-bit float e4m3 with one scale per position and head"}},
};

/* The GEnum `which`, registered the first time it is asked for: value i
 * has the nick nicks[i] and the description blurbs[i]. */
static GType
enum_type (guint which)
{
  static gsize types[N_ENUMS];
  static GEnumValue values[N_ENUMS][MAX_VALUES];

  if (g_once_init_enter (&types[which])) {
    const char *const *nicks = enums[which].nicks ();
    guint i;

    for (i = 0; nicks[i]; i++) {
      g_assert (i < MAX_VALUES - 1 && enums[which].blurbs[i] != NULL);
      values[which][i].value = (gint) i;
      values[which][i].value_name = enums[which].blurbs[i];
      values[which][i].value_nick = nicks[i];
    }
    g_assert (i == MAX_VALUES - 1 || enums[which].blurbs[i] == NULL);
    g_once_init_leave (&types[which],
        g_enum_register_static (enums[which].type_name, values[which]));
  }
  return types[which];
}

GType
gst_personaplex_quantization_get_type (void)
{
  return enum_type (QUANTIZATION);
}

GType
gst_personaplex_backend_get_type (void)
{
  return enum_type (BACKEND);
}

GType
gst_personaplex_kv_cache_format_get_type (void)
{
  return enum_type (KV_CACHE_FORMAT);
}
