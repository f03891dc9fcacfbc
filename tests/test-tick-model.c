/* personaplex-server's prediction rule (pipelines/server/server-tick-model.h): what a tick of n calls costs and
 * how many calls the tick holds within the budget, from start-up measurements and live ticks. */
#include <glib.h>

#include "server-tick-model.h"

#include <math.h>

#define CLOSE(a, b) (fabs ((a) - (b)) < 1e-6)
/* the live ticks' time, and the predictions' (monotonic us) */
#define T0 ((gint64) 1000 * G_USEC_PER_SEC)

/* The emulated device of the CPU test (PPX_TICK_EMULATE=40,2) measured at 1, 7, 15, 22 and 30 calls: 40 + 2 n. */
static PpxTickModel *
emulated (void)
{
  PpxTickModel *m = ppx_tick_model_new (31, FALSE);
  const guint rows[] = {1, 7, 15, 22, 30};
  for (guint i = 0; i < G_N_ELEMENTS (rows); i++)
    ppx_tick_model_add_measured (m, rows[i], 40 + 2.0 * rows[i]);
  return m;
}

static void
test_measured_line (void)
{
  PpxTickModel *m = emulated ();
  g_assert_cmpuint (ppx_tick_model_known (m), ==, 5);
  /* between the measured counts: the straight line; at them, the measurement */
  g_assert_true (CLOSE (ppx_tick_model_predict (m, 15), 70));
  g_assert_true (CLOSE (ppx_tick_model_predict (m, 10), 60));
  g_assert_true (CLOSE (ppx_tick_model_predict (m, 16), 72));
  /* below the smallest: its cost; beyond the largest: the least-squares slope (2 ms a row) */
  g_assert_true (CLOSE (ppx_tick_model_predict (m, 1), 42));
  g_assert_true (CLOSE (ppx_tick_model_predict (m, 31), 102));
  /* 70 ms holds 15 calls (40 + 2 x 15), 69.9 ms 14, 1000 ms every call memory allows */
  g_assert_cmpuint (ppx_tick_model_calls_within (m, 70, 30), ==, 15);
  g_assert_cmpuint (ppx_tick_model_calls_within (m, 69.9, 30), ==, 14);
  g_assert_cmpuint (ppx_tick_model_calls_within (m, 1000, 30), ==, 30);
  /* a budget below the one-call tick: none */
  g_assert_cmpuint (ppx_tick_model_calls_within (m, 41, 30), ==, 0);
  ppx_tick_model_free (m);
}

/* Nothing measured: no compute bound (memory decides), no prediction. */
static void
test_unknown (void)
{
  PpxTickModel *m = ppx_tick_model_new (8, FALSE);
  g_assert_cmpuint (ppx_tick_model_calls_within (m, 70, 8), ==, 8);
  g_assert_true (CLOSE (ppx_tick_model_predict (m, 3), 0));
  /* one point: all of its cost taken as per-row (the cautious guess) */
  ppx_tick_model_add_measured (m, 2, 30);
  g_assert_true (CLOSE (ppx_tick_model_predict (m, 4), 60));
  g_assert_cmpuint (ppx_tick_model_calls_within (m, 70, 8), ==, 4);
  ppx_tick_model_free (m);
}

/* Live ticks replace the measurement at their row count once there are enough of them: a GPU that slowed down
 * (another process on it) lowers the compute bound; a few slow ticks do not. */
static void
test_live_learning (void)
{
  PpxTickModel *m = emulated ();
  ppx_tick_model_set_now (m, T0 + G_USEC_PER_SEC);
  for (guint i = 0; i < PPX_TICK_MODEL_LIVE_MIN - 1; i++)
    ppx_tick_model_add_live (m, 10, 90, T0);
  g_assert_true (CLOSE (ppx_tick_model_predict (m, 10), 60)); /* not yet */
  g_assert_cmpuint (ppx_tick_model_calls_within (m, 70, 30), ==, 15);
  ppx_tick_model_add_live (m, 10, 90, T0);
  g_assert_true (CLOSE (ppx_tick_model_predict (m, 10), 90));
  /* the prediction never falls below a smaller count's cost: 10 calls cost 90, so 11 to 15 cost 90 at least */
  g_assert_true (ppx_tick_model_predict (m, 12) >= 90);
  /* and the line from 7 (54 ms) to 10 (90 ms) crosses 70 ms after 8 (66 ms; 9: 78 ms) */
  g_assert_true (CLOSE (ppx_tick_model_predict (m, 8), 66));
  g_assert_cmpuint (ppx_tick_model_calls_within (m, 70, 30), ==, 8);
  /* the p99 of the last 32: one outlier among them is not the p99 (the second largest of 2 to 99 is) */
  for (guint i = 0; i < PPX_TICK_MODEL_LIVE_KEEP; i++)
    ppx_tick_model_add_live (m, 10, i == 5 ? 500 : 58, T0);
  /* the GPU is back: the live cost, 58 ms, but never under the measurement's 60 */
  g_assert_true (CLOSE (ppx_tick_model_predict (m, 10), 60));
  g_assert_cmpuint (ppx_tick_model_calls_within (m, 70, 30), ==, 15);
  ppx_tick_model_free (m);
}

/* Live ticks of calls that joined recently run at a short context, faster than the full-context measurement: they
 * never raise the compute bound (on an H200, 116 measured, live ticks of young calls admitted 128 that then fell
 * behind real time). */
static void
test_live_short_context (void)
{
  PpxTickModel *m = emulated ();
  ppx_tick_model_set_now (m, T0 + G_USEC_PER_SEC);
  const guint before = ppx_tick_model_calls_within (m, 70, 30);
  for (guint n = 1; n <= 30; n++)
    for (guint i = 0; i < PPX_TICK_MODEL_LIVE_KEEP; i++)
      ppx_tick_model_add_live (m, n, 2.0 * n, T0); /* young calls: 2 ms a row */
  g_assert_true (ppx_tick_model_predict (m, 20) >= 60);
  g_assert_cmpuint (ppx_tick_model_calls_within (m, 70, 30), ==, before);
  ppx_tick_model_free (m);
}

/* The rise a joining call waits for: the prediction at the capacity less the tick now, the live ticks' p99 where
 * it is below the prediction with the calls open (young calls: short contexts), else that prediction; 0 at the
 * capacity. */
static void
test_rise (void)
{
  PpxTickModel *m = emulated ();
  const double cap = ppx_tick_model_predict (m, 15), at5 = ppx_tick_model_predict (m, 5);
  g_assert_true (cap > at5);
  g_assert_true (CLOSE (ppx_tick_model_rise (m, 5, 15, 0), cap - at5));        /* no live ticks */
  g_assert_true (CLOSE (ppx_tick_model_rise (m, 5, 15, at5 / 2), cap - at5 / 2)); /* young calls */
  g_assert_true (CLOSE (ppx_tick_model_rise (m, 5, 15, at5 * 2), cap - at5));   /* a slow spell: the prediction */
  g_assert_true (CLOSE (ppx_tick_model_rise (m, 0, 15, 0), cap - ppx_tick_model_predict (m, 1)));
  g_assert_true (CLOSE (ppx_tick_model_rise (m, 15, 15, 1), 0));
  g_assert_true (CLOSE (ppx_tick_model_rise (m, 20, 15, 1), 0));
  ppx_tick_model_free (m);
}

/* A slow spell is forgotten once its live ticks are older than PPX_TICK_MODEL_LIVE_TTL_S: a server that stopped
 * admitting (compute 0) and went idle, with no live tick to learn from, admits again. */
static void
test_live_expiry (void)
{
  PpxTickModel *m = emulated ();
  for (guint i = 0; i < PPX_TICK_MODEL_LIVE_KEEP; i++)
    ppx_tick_model_add_live (m, 1, 90, T0);
  ppx_tick_model_set_now (m, T0 + (gint64) (PPX_TICK_MODEL_LIVE_TTL_S - 1) * G_USEC_PER_SEC);
  g_assert_cmpuint (ppx_tick_model_calls_within (m, 70, 30), ==, 0);
  ppx_tick_model_set_now (m, T0 + (gint64) (PPX_TICK_MODEL_LIVE_TTL_S + 1) * G_USEC_PER_SEC);
  g_assert_true (CLOSE (ppx_tick_model_predict (m, 1), 42));
  g_assert_cmpuint (ppx_tick_model_calls_within (m, 70, 30), ==, 15);
  ppx_tick_model_free (m);
}

/* An engine that pads its ticks to buckets (CUDA graphs; the engine's rule, ppx_engine_bucket_rows: powers of two
 * to 32 rows, then multiples of 8): a tick of 65 calls runs 72 rows and costs that. */
static void
test_buckets (void)
{
  PpxTickModel *m = ppx_tick_model_new (154, TRUE);
  g_assert_cmpuint (ppx_tick_model_rows (m, 3), ==, 4);
  g_assert_cmpuint (ppx_tick_model_rows (m, 20), ==, 32);
  g_assert_cmpuint (ppx_tick_model_rows (m, 33), ==, 40);
  g_assert_cmpuint (ppx_tick_model_rows (m, 64), ==, 64);
  g_assert_cmpuint (ppx_tick_model_rows (m, 65), ==, 72);
  g_assert_cmpuint (ppx_tick_model_rows (m, 129), ==, 136);
  g_assert_cmpuint (ppx_tick_model_rows (m, 150), ==, 152);
  g_assert_cmpuint (ppx_tick_model_rows (m, 153), ==, 154); /* at most every slot */
  ppx_tick_model_add_measured (m, 64, 50);
  ppx_tick_model_add_measured (m, 128, 80);
  ppx_tick_model_add_measured (m, 154, 90);
  g_assert_true (CLOSE (ppx_tick_model_predict (m, 65), 53.75)); /* 72 rows: on the line between 64 and 128 */
  g_assert_cmpuint (ppx_tick_model_calls_within (m, 70, 153), ==, 104); /* 104 rows: 68.75 ms; 105 runs 112: 72.5 */
  ppx_tick_model_set_bucketed (m, FALSE); /* unpadded: the line between 64 and 128 */
  g_assert_cmpuint (ppx_tick_model_calls_within (m, 70, 153), ==, 106);
  ppx_tick_model_free (m);
}

static void
test_p99 (void)
{
  double v[] = {5, 1, 9, 3};
  g_assert_true (CLOSE (ppx_tick_p99 (v, 4), 5)); /* never the largest of 2 to 99 */
  double one[] = {7};
  g_assert_true (CLOSE (ppx_tick_p99 (one, 1), 7));
  g_assert_true (CLOSE (ppx_tick_p99 (NULL, 0), 0));
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/tick-model/measured-line", test_measured_line);
  g_test_add_func ("/tick-model/unknown", test_unknown);
  g_test_add_func ("/tick-model/live-learning", test_live_learning);
  g_test_add_func ("/tick-model/live-expiry", test_live_expiry);
  g_test_add_func ("/tick-model/live-short-context", test_live_short_context);
  g_test_add_func ("/tick-model/buckets", test_buckets);
  g_test_add_func ("/tick-model/p99", test_p99);
  g_test_add_func ("/tick-model/rise", test_rise);
  return g_test_run ();
}
