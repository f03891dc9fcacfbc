/* The per-row parameters of ppx_op_sample (backend.h): PPX_SAMPLE_PARAMS 32-bit words per row, written by
 * the host and read by every backend's sampler. Plain C, header-only, so a CUDA kernel can include it. */
#ifndef PPX_SAMPLE_PARAMS_H
#define PPX_SAMPLE_PARAMS_H

#include <stdint.h>
#include <string.h>

enum {
  PPX_SAMPLE_SEED_LO,    /* the row's 64-bit Philox key */
  PPX_SAMPLE_SEED_HI,
  PPX_SAMPLE_FRAME_LO,   /* the row's frame (LMGen call index) */
  PPX_SAMPLE_FRAME_HI,
  PPX_SAMPLE_TEMP_TEXT,  /* f32 bits: stream 0's temperature; <= 0: greedy */
  PPX_SAMPLE_TOPK_TEXT,  /* stream 0's top-k: 1 greedy, 0 (or > V) the whole vocabulary */
  PPX_SAMPLE_TEMP_AUDIO, /* f32 bits: the temperature of every other stream */
  PPX_SAMPLE_TOPK_AUDIO,
  PPX_SAMPLE_PARAMS      /* words per row */
};

/* Fills one row: a greedy row has temperatures 0. */
static inline void
ppx_sample_params_set (uint32_t row[PPX_SAMPLE_PARAMS], uint64_t seed, uint64_t frame, float temp_text,
                       int topk_text, float temp_audio, int topk_audio)
{
  row[PPX_SAMPLE_SEED_LO] = (uint32_t) seed;
  row[PPX_SAMPLE_SEED_HI] = (uint32_t) (seed >> 32);
  row[PPX_SAMPLE_FRAME_LO] = (uint32_t) frame;
  row[PPX_SAMPLE_FRAME_HI] = (uint32_t) (frame >> 32);
  memcpy (&row[PPX_SAMPLE_TEMP_TEXT], &temp_text, 4);
  row[PPX_SAMPLE_TOPK_TEXT] = (uint32_t) topk_text;
  memcpy (&row[PPX_SAMPLE_TEMP_AUDIO], &temp_audio, 4);
  row[PPX_SAMPLE_TOPK_AUDIO] = (uint32_t) topk_audio;
}

#endif
