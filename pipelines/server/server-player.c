/* personaplex-server: what a call's player holds (server-player.h). */
#include "server-player.h"

#define START_US 80000          /* queued before it starts (the reference's initialBufferSamples) */
#define PARTIAL_US 10000        /* the wait after that (partialBufferSamples), at first */
#define PARTIAL_STEP_US 5000
#define PARTIAL_MAX_US 80000
#define MAX_BUFFER_US 10000     /* maxBufferSamples, at first */
#define MAX_BUFFER_STEP_US 5000
#define MAX_BUFFER_MAX_US 80000
#define QUANTUM_US 2667         /* it renders 128 samples at 48 kHz at a time: its wait ends on a quantum */

void
ppx_player_model_init (PpxPlayerModel *m)
{
  *m = (PpxPlayerModel) {.partial_us = PARTIAL_US, .max_buffer_us = MAX_BUFFER_US};
}

/* The queue that makes it drop: 80 ms + its wait + its max buffer. */
static gint64
cap_of (const PpxPlayerModel *m)
{
  return START_US + m->partial_us + m->max_buffer_us;
}

/* What it holds at `now_us`, the page not counted. */
static gint64
queued (const PpxPlayerModel *m, gint64 now_us)
{
  if (!m->started)
    return m->end_us - m->head_us;
  return m->end_us - MAX (m->head_us, now_us - m->play_us);
}

void
ppx_player_model_push (PpxPlayerModel *m, gint64 now_us, gint64 pos_us, gint64 duration_us)
{
  if (!m->have_audio) {
    m->have_audio = TRUE;
    m->head_us = m->end_us = pos_us;
  }
  if (m->started && now_us - m->play_us > m->end_us) {
    /* it ran dry before this page came: a re-buffer */
    m->started = FALSE;
    m->partial_us = MIN (m->partial_us + PARTIAL_STEP_US, PARTIAL_MAX_US);
    m->head_us = m->end_us;
    m->rebuffers++;
  }
  if (m->started && now_us - m->play_us > m->head_us)
    m->head_us = now_us - m->play_us; /* played up to here */
  m->end_us = MAX (m->end_us, pos_us + duration_us);
  if (!m->started && m->end_us - m->head_us >= START_US) {
    m->started = TRUE;
    m->play_us = now_us + m->partial_us + QUANTUM_US - m->head_us;
  }
  if (queued (m, now_us) >= cap_of (m)) {
    /* it drops the oldest down to START_US + the wait, and allows 5 ms more from then on */
    gint64 head = m->end_us - (START_US + m->partial_us);
    if (m->started)
      m->play_us += MAX (m->head_us, now_us - m->play_us) - head;
    m->head_us = head;
    m->max_buffer_us = MIN (m->max_buffer_us + MAX_BUFFER_STEP_US, MAX_BUFFER_MAX_US);
    m->drops++;
  }
}

gint64
ppx_player_model_earliest (const PpxPlayerModel *m, gint64 pos_us, gint64 duration_us, gint64 margin_us)
{
  if (!m->started)
    return G_MININT64;
  /* what it holds once the page is in: end - (t - play), below the cap less the margin */
  gint64 end = MAX (m->end_us, pos_us + duration_us);
  return end + m->play_us - cap_of (m) + margin_us;
}
