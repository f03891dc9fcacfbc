/* personaplex-server: what a call's player holds, modelled from the pages sent (docs/server.md, "Joins and leaves").
 *
 * The reference web client (NVIDIA/personaplex client/src/audio-processor.ts; tools/loadgen/loadgen-playout.c is a
 * faithful port, docs/tools.md "The reference player") starts playing once 80 ms are queued and 10 ms more have
 * passed; a page that brings its queue to 80 ms + that wait + its max buffer (10 ms) or more makes it drop the
 * oldest audio down to 80 ms + the wait, and its max buffer grows by 5 ms (to 80); a queue that runs dry re-buffers
 * (the wait grows by 5 ms, to 80, and it starts again at 80 ms). Paced pages keep 50-90 ms in it: a page up to
 * about 50 ms later than those before it is played in time, one about 10 ms earlier is dropped audio.
 *
 * This model follows that player from the send times of a call's audio pages (the network taken as a constant
 * delay), so that the pacer can tell how early a page may leave without being dropped (ppx_player_model_earliest):
 * the latency may come down (calls left, a late tick left the delay's window) as far as the player has room, and
 * no further. Times are monotonic microseconds; positions are the stream's, as the player counts them (a page's
 * duration rounded up to whole 20 ms Opus frames for the first page, whose pre-skip the player plays). */
#ifndef PPX_SERVER_PLAYER_H
#define PPX_SERVER_PLAYER_H

#include <glib.h>

G_BEGIN_DECLS

typedef struct {
  gboolean have_audio;   /* a page came */
  gboolean started;      /* it plays (or waits out its start-up wait) */
  gint64 play_us;        /* while started: the time minus the stream position it plays */
  gint64 head_us;        /* while not started: the stream position of the first audio it holds */
  gint64 end_us;         /* the stream position of the end of what it received */
  gint64 partial_us, max_buffer_us;
  guint rebuffers, drops; /* what the model saw (a drop: a page it had no room for) */
} PpxPlayerModel;

void ppx_player_model_init (PpxPlayerModel *m);
/* A page of `duration_us` at stream position `pos_us` reached the player at `now_us`. */
void ppx_player_model_push (PpxPlayerModel *m, gint64 now_us, gint64 pos_us, gint64 duration_us);
/* The earliest time the page at `pos_us` of `duration_us` may reach the player without it dropping audio, less
 * `margin_us` of room kept; G_MININT64 when any time will do (the player is not started: it has room). */
gint64 ppx_player_model_earliest (const PpxPlayerModel *m, gint64 pos_us, gint64 duration_us, gint64 margin_us);

G_END_DECLS
#endif
