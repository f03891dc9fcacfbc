#include "ppx-common.h"

#include <errno.h>
#include <glib/gstdio.h>
#include <math.h>

static const struct {
  const char *name;
  gsize size;
} dtype_info[PPX_DTYPE_COUNT] = {
  [PPX_DTYPE_F32] = {"F32", 4},  [PPX_DTYPE_F16] = {"F16", 2}, [PPX_DTYPE_BF16] = {"BF16", 2},
  [PPX_DTYPE_I64] = {"I64", 8},  [PPX_DTYPE_I32] = {"I32", 4}, [PPX_DTYPE_I8] = {"I8", 1},
  [PPX_DTYPE_U8] = {"U8", 1},    [PPX_DTYPE_BOOL] = {"BOOL", 1}, [PPX_DTYPE_F64] = {"F64", 8},
  [PPX_DTYPE_I16] = {"I16", 2},
};

gboolean
ppx_dtype_from_name (const char *name, PpxDType *out)
{
  for (int i = 0; i < PPX_DTYPE_COUNT; i++) {
    if (g_strcmp0 (name, dtype_info[i].name) == 0) {
      *out = (PpxDType) i;
      return TRUE;
    }
  }
  return FALSE;
}

const char *
ppx_dtype_name (PpxDType dt)
{
  return dt < PPX_DTYPE_COUNT ? dtype_info[dt].name : "?";
}

gsize
ppx_dtype_size (PpxDType dt)
{
  return dt < PPX_DTYPE_COUNT ? dtype_info[dt].size : 0;
}

float
ppx_f16_to_f32 (uint16_t h)
{
  uint32_t sign = (uint32_t) (h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1f;
  uint32_t man = h & 0x3ffu;
  float f;
  if (exp == 0) {
    f = ldexpf ((float) man, -24);
  } else if (exp == 31) {
    f = man ? NAN : INFINITY;
  } else {
    f = ldexpf ((float) (man | 0x400u), (int) exp - 25);
  }
  uint32_t u;
  memcpy (&u, &f, 4);
  u |= sign;
  memcpy (&f, &u, 4);
  return f;
}

uint16_t
ppx_f32_to_f16 (float f)
{
  uint32_t u;
  memcpy (&u, &f, 4);
  uint16_t sign = (uint16_t) ((u >> 16) & 0x8000u);
  float a = fabsf (f);
  if (isnan (f))
    return sign | 0x7e00u;
  if (a >= 65520.0f)
    return sign | 0x7c00u;
  if (a < 6.103515625e-05f) { /* subnormal: units of 2^-24, round to nearest even */
    float m = a * 16777216.0f;
    return sign | (uint16_t) lrintf (m);
  }
  int e;
  float m = frexpf (a, &e); /* a = m * 2^e, m in [0.5,1) */
  int man = (int) lrintf ((m * 2.0f - 1.0f) * 1024.0f);
  int exp = e - 1 + 15;
  if (man == 1024) {
    man = 0;
    exp++;
  }
  if (exp >= 31)
    return sign | 0x7c00u;
  return sign | (uint16_t) (exp << 10) | (uint16_t) man;
}

/* The i-th 16-bit value of src, which may be unaligned. */
static inline uint16_t
u16_at (const void *src, gsize i)
{
  uint16_t h;
  memcpy (&h, (const uint8_t *) src + 2 * i, 2);
  return h;
}

gboolean
ppx_convert_to_f32 (PpxDType dt, const void *src, float *dst, gsize n)
{
  switch (dt) {
    case PPX_DTYPE_F32:
      memcpy (dst, src, n * 4);
      return TRUE;
    case PPX_DTYPE_BF16:
      for (gsize i = 0; i < n; i++)
        dst[i] = ppx_bf16_to_f32 (u16_at (src, i));
      return TRUE;
    case PPX_DTYPE_F16:
      for (gsize i = 0; i < n; i++)
        dst[i] = ppx_f16_to_f32 (u16_at (src, i));
      return TRUE;
    default:
      return FALSE;
  }
}

const char *
ppx_file_problem (const char *path)
{
  GStatBuf st;
  if (g_stat (path, &st) != 0)
    return errno == ENOENT || errno == ENOTDIR ? "no such file" : g_strerror (errno);
  if (S_ISDIR (st.st_mode))
    return "is a directory";
  if (!S_ISREG (st.st_mode))
    return "not a regular file (a device, pipe or socket)";
  return NULL;
}
