/* The server's model of the caller's player (pipelines/server/server-player.c), against the port of the reference
 * web client's player (tools/loadgen/loadgen-playout.c): 40 ms pages whose latency moves up and down (calls joining
 * and leaving, a late tick, a delay that falls) are sent no earlier than the model says the player has room for,
 * and the port must drop nothing; sent as the latency says, without the model, the port drops audio (so the test
 * can fail). Deterministic (seeded), no server. */
#include <glib.h>
#include <math.h>

#include "loadgen-playout.h"
#include "server-player.h"

#define PAGE_US 40000
#define PAGES 750       /* 30 s */
#define MARGIN_US 5000  /* the pacer's (server-pacer.c) */

typedef struct {
  double missed_ms, dropped_ms;
  guint rebuffers, held;
} Run;

/* Page k's latency (us beyond its stream position): a walk of steps up and down, and a late page now and then. */
static gint64
latency (GRand *r, gint64 *level, guint k)
{
  if (k > 25 && k % 25 == 0) {
    /* the level steps: up (a join, the tick grew) or down (calls left, a late tick left the delay's window) */
    gint64 step = g_rand_int_range (r, -30, 31) * 1000;
    *level = CLAMP (*level + step, 40000, 200000);
  }
  gint64 jitter = g_rand_int_range (r, 0, 6000);
  if (g_rand_int_range (r, 0, 100) < 3)
    jitter += g_rand_int_range (r, 10000, 45000); /* a late tick: less than the player's 50 ms of slack */
  return *level + jitter;
}

static Run
run (guint32 seed, gboolean use_model)
{
  g_autoptr (GRand) r = g_rand_new_with_seed (seed);
  PpxPlayerModel m;
  ppx_player_model_init (&m);
  g_autoptr (GArray) chunks = g_array_new (FALSE, FALSE, sizeof (LoadgenChunk));
  const gint64 origin = 1000000;
  gint64 level = 80000, prev = 0;
  Run out = {0};
  for (guint k = 0; k < PAGES; k++) {
    gint64 pos = (gint64) k * PAGE_US;
    gint64 t = origin + pos + latency (r, &level, k);
    t = MAX (t, prev); /* in order */
    if (use_model) {
      gint64 earliest = ppx_player_model_earliest (&m, pos, PAGE_US, MARGIN_US);
      if (earliest > t) {
        t = earliest;
        out.held++;
      }
    }
    prev = t;
    ppx_player_model_push (&m, t, pos, PAGE_US);
    LoadgenChunk c = {(t - origin) / 1000.0, LOADGEN_PLAYOUT_CHUNK};
    g_array_append_val (chunks, c);
  }
  LoadgenPlayout po;
  loadgen_playout_replay ((const LoadgenChunk *) chunks->data, chunks->len, 0, NULL, &po);
  out.missed_ms = po.missed_ms;
  out.dropped_ms = po.dropped_ms;
  out.rebuffers = po.rebuffers;
  return out;
}

static void
test_no_drop (void)
{
  double dropped_without = 0, missed_with = 0, missed_without = 0;
  for (guint32 seed = 1; seed <= 40; seed++) {
    Run with = run (seed, TRUE), without = run (seed, FALSE);
    if (g_test_verbose ())
      g_printerr ("seed %2u: with the model missed %6.1f ms, dropped %5.1f ms, %u re-buffers, %u pages held; "
                  "without: missed %6.1f ms, dropped %6.1f ms\n", seed, with.missed_ms, with.dropped_ms,
                  with.rebuffers, with.held, without.missed_ms, without.dropped_ms);
    g_assert_cmpfloat (with.dropped_ms, ==, 0);
    dropped_without += without.dropped_ms;
    missed_with += with.missed_ms;
    missed_without += without.missed_ms;
  }
  g_printerr ("40 runs of 30 s: with the model 0 ms dropped, %.0f ms missed; without it %.0f ms dropped, %.0f ms "
              "missed\n", missed_with, dropped_without, missed_without);
  g_assert_cmpfloat (dropped_without, >, 1000); /* the test can fail: the walk moves the latency down */
}

/* The model's start matches the player's: paced pages (one every 40 ms, the first at 0) after the start may come
 * up to about 10 ms early before the player drops; the model's earliest time says so within its margin. */
static void
test_start (void)
{
  PpxPlayerModel m;
  ppx_player_model_init (&m);
  g_assert_cmpint (ppx_player_model_earliest (&m, 0, PAGE_US, 0), ==, G_MININT64);
  ppx_player_model_push (&m, 0, 0, PAGE_US);
  g_assert_false (m.started);
  ppx_player_model_push (&m, PAGE_US, PAGE_US, PAGE_US);
  g_assert_true (m.started); /* 80 ms queued */
  /* the third page: the player plays from 40 + 10 ms (and part of a quantum) on, so at t it holds 120 - (t - 52.7)
   * ms with the page, and drops from 100 ms on: the page may come about 7 ms early, no more */
  gint64 earliest = ppx_player_model_earliest (&m, 2 * PAGE_US, PAGE_US, 0);
  g_assert_cmpint (earliest, >=, 2 * PAGE_US - 10000);
  g_assert_cmpint (earliest, <=, 2 * PAGE_US - 6000);
  /* a page 60 ms late: the player ran dry (a re-buffer) */
  ppx_player_model_push (&m, 2 * PAGE_US, 2 * PAGE_US, PAGE_US);
  ppx_player_model_push (&m, 3 * PAGE_US + 60000, 3 * PAGE_US, PAGE_US);
  g_assert_cmpuint (m.rebuffers, ==, 1);
  g_assert_false (m.started);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/server-player/start", test_start);
  g_test_add_func ("/server-player/no-drop", test_no_drop);
  return g_test_run ();
}
