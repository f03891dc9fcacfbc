/* KV cache storage formats: the conversions every backend uses to write and read cache rows, so the CPU
 * and CUDA caches hold the same bits. Header-only so a CUDA kernel can include it (static inline,
 * host/device-neutral C, integer arithmetic and single IEEE f32 operations only).
 *
 * Formats (docs/quantization.md, "KV cache"):
 *  - bf16: round to nearest even (NaN stays NaN).
 *  - fp8 e4m3 ("e4m3fn": bias 7, no infinities, max 448, 0x7f/0xff NaN): one f32 scale per (position,
 *    head) = amax / 448 over that head's Dh values; each value is stored as e4m3(v * (448 / amax)),
 *    rounded to nearest even and saturated to +-448 (an all-zero head gets scale 0 and codes 0); it reads
 *    back as e4m3 value * scale. Non-finite inputs give NaN codes. */
#ifndef PPX_KV_FORMAT_H
#define PPX_KV_FORMAT_H

#include <stdint.h>

#ifdef __CUDACC__
#define PPX_KV_HD __host__ __device__
#else
#define PPX_KV_HD
#endif

#define PPX_E4M3_MAX 448.0f

static inline PPX_KV_HD uint32_t
ppx_kv_f32_bits (float f)
{
#ifdef __CUDA_ARCH__
  return __float_as_uint (f);
#else
  union { float f; uint32_t u; } c;
  c.f = f;
  return c.u;
#endif
}

static inline PPX_KV_HD float
ppx_kv_bits_f32 (uint32_t u)
{
#ifdef __CUDA_ARCH__
  return __uint_as_float (u);
#else
  union { float f; uint32_t u; } c;
  c.u = u;
  return c.f;
#endif
}

/* f32 -> bf16, round to nearest even, NaN kept quiet (the same as ppx_f32_to_bf16). */
static inline PPX_KV_HD uint16_t
ppx_kv_to_bf16 (float f)
{
  uint32_t u = ppx_kv_f32_bits (f);
  if ((u & 0x7fffffffu) > 0x7f800000u)
    return (uint16_t) ((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t) (u >> 16);
}

static inline PPX_KV_HD float
ppx_kv_from_bf16 (uint16_t h)
{
  return ppx_kv_bits_f32 ((uint32_t) h << 16);
}

/* f32 -> e4m3fn, round to nearest even, saturating to +-448 (infinities included); NaN -> 0x7f|sign. */
static inline PPX_KV_HD uint8_t
ppx_kv_to_e4m3 (float f)
{
  const uint32_t u = ppx_kv_f32_bits (f);
  const uint8_t sign = (uint8_t) ((u >> 24) & 0x80u);
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u)
    return (uint8_t) (sign | 0x7fu);
  const int e = (int) (a >> 23) - 127;
  if (e < -6) { /* below the smallest normal 2^-6: a multiple of 2^-9 (8 of them round up to 2^-6) */
    if (e < -10)
      return sign; /* < 2^-10: rounds to 0 */
    const uint32_t mant = (a & 0x7fffffu) | 0x800000u; /* value = mant * 2^(e - 23) */
    const int shift = 14 - e;                            /* value * 2^9 = mant >> shift, 21..24 */
    uint32_t m = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1u), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (m & 1u)))
      m++;
    return (uint8_t) (sign | m);
  }
  /* round the 23-bit mantissa to 3 bits (a carry moves into the exponent, as it should) */
  const uint32_t r = (a + 0x7ffffu + ((a >> 20) & 1u)) & ~0xfffffu;
  const int re = (int) (r >> 23) - 127;
  const uint32_t m3 = (r >> 20) & 7u;
  if (re > 8 || (re == 8 && m3 == 7u))
    return (uint8_t) (sign | 0x7eu); /* 448 */
  return (uint8_t) (sign | (uint32_t) ((re + 7) << 3) | m3);
}

/* e4m3fn -> f32, exact. */
static inline PPX_KV_HD float
ppx_kv_from_e4m3 (uint8_t c)
{
  const uint32_t sign = (uint32_t) (c & 0x80u) << 24;
  const uint32_t e = (c >> 3) & 15u, m = c & 7u;
  if (e == 15u && m == 7u)
    return ppx_kv_bits_f32 (sign | 0x7fc00000u);
  if (e == 0u) /* m * 2^-9 */
    return ppx_kv_bits_f32 (sign | ppx_kv_f32_bits ((float) m * 0.001953125f));
  return ppx_kv_bits_f32 (sign | ((e + 120u) << 23) | (m << 20));
}

/* The scale of a head whose largest |value| is amax, and the factor its values are multiplied by
 * before rounding (0 for an all-zero head). */
static inline PPX_KV_HD float
ppx_kv_e4m3_scale (float amax)
{
  return amax / PPX_E4M3_MAX;
}

static inline PPX_KV_HD float
ppx_kv_e4m3_inv_scale (float amax)
{
  return amax > 0.0f ? PPX_E4M3_MAX / amax : 0.0f;
}

#endif
