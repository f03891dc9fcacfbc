/* The harness the personaplexduplex tests on gst-check share (test-element.c and its element-test-*.c
 * files, test-element-engine.c): the tiny random model made once in main() before the fork per test,
 * elements and harnesses on it, the signal they are fed and what they answer, the error a failed start
 * posts. element-harness.c implements it. */
#ifndef PPX_ELEMENT_HARNESS_H
#define PPX_ELEMENT_HARNESS_H

#include "test-element-util.h"

extern char *model_dir;        /* the tiny random model */
extern char *golden_model_dir; /* a model directory over the golden files, or NULL */

/* An element with default settings. */
GstElement *new_bare_element (void);
/* An element on the tiny model, greedy, with this model-instance-id (NULL: a model of its own). */
GstElement *new_element (const char *instance_id);
/* A harness on sink/src, playing, with caps set (the stream has started). */
GstHarness *new_harness_for (GstElement * el, const char *caps);
/* The same on new_element (NULL). */
GstHarness *new_harness (const char *caps);

/* Pushes the test signal in buffers of the given sizes (cycled until @total samples are pushed),
 * timestamped from the sample counter. */
void push_signal (GstHarness * h, guint64 start, guint64 total, const guint * sizes, guint n_sizes);
/* Pulls every queued output buffer; returns the F32 samples appended in order and checks each buffer's
 * PTS/duration against the sample counter starting at @start_pts. */
GArray *pull_all_checked (GstHarness * h, GstClockTime start_pts, guint * n_buffers);
void assert_same_samples (GArray * a, GArray * b);
/* Every sample finite, and not all zero. */
gboolean has_energy (GArray * a);

/* Fails the test with the first error message on @pipeline's bus, if any. */
void assert_no_bus_error (GstElement * pipeline);

/* Brings a bare element (with its own bus) to PAUSED, expecting failure; returns the error it posted
 * (g_error_free it), or its message (g_free it). */
GError *expect_start_error (GstElement * el);
gchar *expect_start_failure (GstElement * el);

/* Every element a test makes (by any factory) must be gone when it ends (element-watch.c): a test that
 * leaves one alive fails naming it, instead of hanging in gst_task_cleanup_all () on its streaming
 * threads. element_watch_start () (element_test_main calls it) starts watching; element_tcase_new makes
 * a TCase whose checked teardown checks, which check runs even after a failed test (CK_FORK=no jumps out
 * of the test before its own teardown); GST_END_TEST checks before gst_task_cleanup_all (). */
void element_watch_start (void);
void element_check_released (void);
TCase *element_tcase_new (const char *name, int timeout);

#undef GST_END_TEST
#define GST_END_TEST element_check_released (); \
                     GST_LOG ("cleaning up tasks"); \
                     gst_task_cleanup_all (); \
                     END_TEST

/* main(): gst-check, the tiny model (with a small tokenizer when asked; with `golden`, a model directory
 * over the golden files when they are there), the suite, and the cleanup. */
int element_test_main (int argc, char **argv, Suite * (*make_suite) (void), const char *name,
    gboolean tokenizer, gboolean golden);

#endif
