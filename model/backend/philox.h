/* Philox4x32-10 counter-based RNG (Salmon et al., SC'11): the same draws on CPU and GPU, no state
 * beyond (key, counter). Used by sampling: see docs/sampling.md. Header-only so a CUDA kernel can
 * include it (functions are static inline, host/device-neutral C). */
#ifndef PPX_PHILOX_H
#define PPX_PHILOX_H

#include <stdint.h>

#ifdef __CUDACC__
#define PPX_HD __host__ __device__
#else
#define PPX_HD
#endif

static inline PPX_HD void
ppx_philox4x32 (const uint32_t ctr_in[4], const uint32_t key_in[2], uint32_t out[4])
{
  uint32_t c0 = ctr_in[0], c1 = ctr_in[1], c2 = ctr_in[2], c3 = ctr_in[3];
  uint32_t k0 = key_in[0], k1 = key_in[1];
  for (int r = 0; r < 10; r++) {
    uint64_t p0 = (uint64_t) 0xD2511F53u * c0;
    uint64_t p1 = (uint64_t) 0xCD9E8D57u * c2;
    uint32_t n0 = (uint32_t) (p1 >> 32) ^ c1 ^ k0;
    uint32_t n2 = (uint32_t) (p0 >> 32) ^ c3 ^ k1;
    c0 = n0;
    c1 = (uint32_t) p1;
    c2 = n2;
    c3 = (uint32_t) p0;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  out[0] = c0;
  out[1] = c1;
  out[2] = c2;
  out[3] = c3;
}

/* Uniform in (0, 1] for element `i` of draw `draw` with a 64-bit seed. */
static inline PPX_HD float
ppx_philox_uniform (uint64_t seed, uint64_t draw, uint32_t i)
{
  uint32_t ctr[4] = {(uint32_t) draw, (uint32_t) (draw >> 32), i, 0x50505850u};
  uint32_t key[2] = {(uint32_t) seed, (uint32_t) (seed >> 32)};
  uint32_t out[4];
  ppx_philox4x32 (ctr, key, out);
  /* 24 random bits -> (0, 1] */
  return ((float) (out[0] >> 8) + 1.0f) * (1.0f / 16777216.0f);
}

#endif
