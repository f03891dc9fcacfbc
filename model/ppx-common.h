/* personaplex-gst: shared basics of the inference library (errors, dtypes, bf16). */
#ifndef PPX_COMMON_H
#define PPX_COMMON_H

#include <glib.h>

#include "ppx-types.h"
#include <stdint.h>
#include <string.h>

G_BEGIN_DECLS

/* The error domain and codes, and the public enums with their names: ppx-types.h. */

typedef enum {
  PPX_DTYPE_F32,
  PPX_DTYPE_F16,
  PPX_DTYPE_BF16,
  PPX_DTYPE_I64,
  PPX_DTYPE_I32,
  PPX_DTYPE_I8,
  PPX_DTYPE_U8,
  PPX_DTYPE_BOOL,
  PPX_DTYPE_F64,
  PPX_DTYPE_I16,
  PPX_DTYPE_COUNT
} PpxDType;

/* Safetensors' dtype name ("F32", "BF16", ...) <-> enum. Returns FALSE for an unknown name. */
gboolean ppx_dtype_from_name (const char *name, PpxDType *out);
const char *ppx_dtype_name (PpxDType dt);
gsize ppx_dtype_size (PpxDType dt);

static inline float
ppx_bf16_to_f32 (uint16_t h)
{
  uint32_t u = (uint32_t) h << 16;
  float f;
  memcpy (&f, &u, 4);
  return f;
}

/* Round to nearest even, NaN kept quiet. */
static inline uint16_t
ppx_f32_to_bf16 (float f)
{
  uint32_t u;
  memcpy (&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u)
    return (uint16_t) ((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t) (u >> 16);
}

float ppx_f16_to_f32 (uint16_t h);
uint16_t ppx_f32_to_f16 (float f);

/* Why `path` is not a regular file: "no such file", "is a directory", "not a regular file (a device, pipe
 * or socket)", or the system's reason when it cannot be examined; NULL when it is a regular file. For
 * messages that say what the problem is ("PATH: is a directory"). */
const char *ppx_file_problem (const char *path);

/* Converts n elements of a stored tensor (F32, BF16 or F16) to f32. */
gboolean ppx_convert_to_f32 (PpxDType dt, const void *src, float *dst, gsize n);

G_END_DECLS
#endif
