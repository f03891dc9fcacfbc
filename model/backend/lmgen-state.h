/* LMGen on the device: the per-session state of PersonaPlex's streaming token machine (model/lm/lmgen.c,
 * spec §5.1-5.4) as PPX_LMGEN_STATE 32-bit words, and the two halves of one conversation call (the user's
 * codes given, no agent codes, no text, no embedding) as plain C that the CPU backend and a CUDA kernel
 * both run (ppx_op_lmgen_prepare / ppx_op_lmgen_finish in backend.h). model/lm/lmgen.c keeps the host
 * implementation (every kind of call: prompts, embeddings, capture) and packs/unpacks this layout; the
 * tests hold the two against each other. Header-only, no GLib, so nvcc can include it. */
#ifndef PPX_LMGEN_STATE_H
#define PPX_LMGEN_STATE_H

#include <stdint.h>

#ifdef __CUDACC__
#define PPX_LMGEN_FN static __host__ __device__ inline
#else
#define PPX_LMGEN_FN static inline
#endif

#define PPX_LMGEN_MAX_STREAMS 17 /* == PPX_MAX_STREAMS (config.h): the row stride of ids/forced/tokens */
#define PPX_LMGEN_NCOLS 4        /* == PPX_LMGEN_COLS (lmgen.h): columns of the token cache */

/* Word offsets in one session's state. */
enum {
  PPX_LMGEN_S_OFFSET_LO, /* the LMGen offset (calls since the reset), 64 bits */
  PPX_LMGEN_S_OFFSET_HI,
  PPX_LMGEN_S_FLAGS,     /* PPX_LMGEN_FLAG_* */
  PPX_LMGEN_S_STEPS,     /* set by prepare: the depformer steps the call needs, -1 when it samples nothing */
  PPX_LMGEN_S_PROVIDED,  /* [PPX_LMGEN_MAX_STREAMS]: bit c set when column c of the stream is provided */
  PPX_LMGEN_S_CACHE = PPX_LMGEN_S_PROVIDED + PPX_LMGEN_MAX_STREAMS, /* [stream][column] token cache */
  PPX_LMGEN_STATE = PPX_LMGEN_S_CACHE + PPX_LMGEN_MAX_STREAMS * PPX_LMGEN_NCOLS /* words per session */
};

enum { PPX_LMGEN_FLAG_FULL_DEPFORMER = 1 }; /* every depformer step runs (lmgen.h: full_depformer) */

/* The model's stream layout, the same for every session (from PpxLmConfig). */
typedef struct {
  int n_streams;    /* 1 + n_q: text, agent audio, user audio */
  int n_user;       /* n_q / 2: user codes per call, streams 1 + n_user .. 2 * n_user */
  int dep_q;        /* depformer steps (streams 1..dep_q are sampled) */
  int max_delay;    /* the output lag: a call at offset <= max_delay yields no frame */
  int text_start;   /* start tokens: text_card for the text stream, card for audio */
  int audio_start;
  int delays[PPX_LMGEN_MAX_STREAMS];
} PpxLmgenDims;

PPX_LMGEN_FN int64_t
ppx_lmgen_offset (const int32_t *st)
{
  return (int64_t) ((uint64_t) (uint32_t) st[PPX_LMGEN_S_OFFSET_LO] |
                    ((uint64_t) (uint32_t) st[PPX_LMGEN_S_OFFSET_HI] << 32));
}

PPX_LMGEN_FN void
ppx_lmgen_set_offset (int32_t *st, int64_t o)
{
  st[PPX_LMGEN_S_OFFSET_LO] = (int32_t) (uint32_t) (uint64_t) o;
  st[PPX_LMGEN_S_OFFSET_HI] = (int32_t) (uint32_t) ((uint64_t) o >> 32);
}

PPX_LMGEN_FN int
ppx_lmgen_col (int64_t n)
{
  return (int) (n % PPX_LMGEN_NCOLS);
}

PPX_LMGEN_FN void
ppx_lmgen_provide (int32_t *st, int k, int64_t at, int token)
{
  const int c = ppx_lmgen_col (at);
  st[PPX_LMGEN_S_CACHE + k * PPX_LMGEN_NCOLS + c] = token;
  st[PPX_LMGEN_S_PROVIDED + k] |= 1 << c;
}

PPX_LMGEN_FN int
ppx_lmgen_is_provided (const int32_t *st, int k, int c)
{
  return (st[PPX_LMGEN_S_PROVIDED + k] >> c) & 1;
}

/* The first half of a conversation call of a session whose offset is >= 1 (after its prompts): the user's
 * codes user[q * user_stride], q < n_user, go into the cache at their delays (start tokens where the offset
 * is still within a delay); then the model inputs: ids[k] (k < W) = the column of offset - 1 for k <
 * n_streams, else -1; forced[k] = the provided token of the column of offset for k <= dep_q, else -1;
 * *pos = offset - 1 (the temporal position); *frame = offset (the sampling frame); the state's STEPS word =
 * the depformer steps the call needs (the last stream <= dep_q that is not provided; dep_q with the full
 * depformer flag), or -1 when nothing is sampled (no step and the text provided). */
PPX_LMGEN_FN void
ppx_lmgen_prepare_row (const PpxLmgenDims *d, int32_t *st, const int32_t *user, int user_stride, int32_t *ids,
                       int32_t *forced, int32_t *pos, uint64_t *frame)
{
  const int64_t o = ppx_lmgen_offset (st);
  for (int q = 0; q < d->n_user; q++) {
    const int k = 1 + d->n_user + q;
    ppx_lmgen_provide (st, k, o + d->delays[k], user[q * user_stride]);
  }
  for (int k = 0; k < d->n_streams; k++)
    if (o <= d->delays[k])
      ppx_lmgen_provide (st, k, o, k == 0 ? d->text_start : d->audio_start);
  const int in = ppx_lmgen_col (o - 1), tg = ppx_lmgen_col (o);
  int n_steps = 0;
  for (int k = 0; k < PPX_LMGEN_MAX_STREAMS; k++) {
    ids[k] = k < d->n_streams ? st[PPX_LMGEN_S_CACHE + k * PPX_LMGEN_NCOLS + in] : -1;
    const int f = k <= d->dep_q && k < d->n_streams && ppx_lmgen_is_provided (st, k, tg)
                    ? st[PPX_LMGEN_S_CACHE + k * PPX_LMGEN_NCOLS + tg]
                    : -1;
    forced[k] = k <= d->dep_q ? f : -1;
    if (k > 0 && k <= d->dep_q && f < 0)
      n_steps = k;
  }
  if (st[PPX_LMGEN_S_FLAGS] & PPX_LMGEN_FLAG_FULL_DEPFORMER)
    n_steps = d->dep_q;
  st[PPX_LMGEN_S_STEPS] = n_steps > 0 || forced[0] < 0 ? n_steps : -1;
  *pos = (int32_t) (o - 1);
  *frame = (uint64_t) o;
}

/* The second half, after the model step: sampled[k] (k <= the prepared steps) fills the columns of offset
 * that were not provided; the column of offset - 1 is released; out[k] (k < W) = the frame the call yields
 * (stream k at its delay; -1 for k >= n_streams, and every out[k] = -1 when offset <= max_delay: no frame
 * yet); the offset advances. Returns 1 when the call yields a frame. */
PPX_LMGEN_FN int
ppx_lmgen_finish_row (const PpxLmgenDims *d, int32_t *st, const int32_t *sampled, int32_t *out)
{
  const int64_t o = ppx_lmgen_offset (st);
  const int in = ppx_lmgen_col (o - 1), tg = ppx_lmgen_col (o);
  const int n_steps = st[PPX_LMGEN_S_STEPS];
  for (int k = 0; k < d->n_streams; k++)
    st[PPX_LMGEN_S_PROVIDED + k] &= ~(1 << in);
  for (int k = 0; k <= n_steps && k < d->n_streams; k++)
    if (!ppx_lmgen_is_provided (st, k, tg))
      st[PPX_LMGEN_S_CACHE + k * PPX_LMGEN_NCOLS + tg] = sampled[k];
  const int framed = o > d->max_delay;
  for (int k = 0; k < PPX_LMGEN_MAX_STREAMS; k++)
    out[k] = framed && k < d->n_streams
               ? st[PPX_LMGEN_S_CACHE + k * PPX_LMGEN_NCOLS + ppx_lmgen_col (o - 1 + d->delays[k])]
               : -1;
  ppx_lmgen_set_offset (st, o + 1);
  return framed;
}

#endif
