/* Every element a test creates is gone when the test ends (element-harness.h: element_watch_start,
 * element_check_released, element_tcase_new, GST_END_TEST).
 *
 * A tracer hook sees every element made by a factory (gst_element_factory_make, gst_parse_launch,
 * gst_harness_new) and keeps a weak reference to it. At the end of each test (GST_END_TEST, and a
 * checked teardown, which check runs even when the test failed and CK_FORK=no jumped out of it before
 * its end and its own teardown), element_check_released looks at what is left: an element
 * still alive was leaked by the test or by the code under test, and fails the test naming it, its state
 * and its reference count. Left alive in PAUSED or PLAYING, such an element keeps its streaming
 * threads, and GST_END_TEST's gst_task_cleanup_all () of the next test would wait for them forever:
 * the teardown sets it (its top-level bin) to NULL first, so the run goes on and reports the failure
 * instead of hanging. */
#include "element-harness.h"

typedef struct
{
  GstTracer parent;
} ElementWatch;

typedef struct
{
  GstTracerClass parent_class;
} ElementWatchClass;

static GType element_watch_get_type (void);
G_DEFINE_TYPE (ElementWatch, element_watch, GST_TYPE_TRACER);

static GMutex watch_lock;
static GPtrArray *watched;      /* GWeakRef *, the elements made since the last teardown */

static void
watched_free (gpointer data)
{
  g_weak_ref_clear (data);
  g_free (data);
}

/* the "element-new" hook: (tracer, timestamp, element) */
static void
on_element_new (GObject * tracer, GstClockTime ts, GstElement * element)
{
  GWeakRef *ref = g_new0 (GWeakRef, 1);

  g_weak_ref_init (ref, element);
  g_mutex_lock (&watch_lock);
  g_ptr_array_add (watched, ref);
  g_mutex_unlock (&watch_lock);
}

static void
element_watch_init (ElementWatch * self)
{
}

static void
element_watch_class_init (ElementWatchClass * klass)
{
}

void
element_watch_start (void)
{
  GstTracer *tracer;

  watched = g_ptr_array_new_with_free_func (watched_free);
  /* the hook holds the tracer until gst_deinit () */
  tracer = g_object_new (element_watch_get_type (), NULL);
  gst_tracing_register_hook (tracer, "element-new", G_CALLBACK (on_element_new));
  gst_object_unref (tracer);
}

/* Its top-level bin, or itself (a reference). */
static GstElement *
top_level (GstElement * el)
{
  GstObject *top = gst_object_ref (GST_OBJECT (el)), *parent;

  while ((parent = gst_object_get_parent (top))) {
    gst_object_unref (top);
    top = parent;
  }
  return GST_ELEMENT (top);
}

void
element_check_released (void)
{
  GPtrArray *left;
  GString *leaks = NULL;
  guint i;

  g_mutex_lock (&watch_lock);
  left = watched;
  watched = g_ptr_array_new_with_free_func (watched_free);
  g_mutex_unlock (&watch_lock);

  for (i = 0; i < left->len; i++) {
    GstElement *el = g_weak_ref_get (g_ptr_array_index (left, i));
    GstElement *top;
    GstState state;

    if (el == NULL)
      continue;
    GST_OBJECT_LOCK (el);
    state = GST_STATE (el);
    GST_OBJECT_UNLOCK (el);
    if (leaks == NULL)
      leaks = g_string_new (NULL);
    g_string_append_printf (leaks, "%s%s (%s, %s, %d reference(s))",
        leaks->len ? ", " : "", GST_ELEMENT_NAME (el),
        G_OBJECT_TYPE_NAME (el), gst_element_state_get_name (state),
        GST_OBJECT_REFCOUNT_VALUE (el) - 1);
    /* its streaming threads end, so the next gst_task_cleanup_all () does
     * not wait for them */
    top = top_level (el);
    gst_element_set_state (top, GST_STATE_NULL);
    gst_object_unref (top);
    gst_object_unref (el);
  }
  g_ptr_array_unref (left);
  if (leaks != NULL) {
    gchar text[2048];

    /* copied: fail () does not return */
    g_strlcpy (text, leaks->str, sizeof text);
    g_string_free (leaks, TRUE);
    /* (after a failure of the test itself, check keeps that first message) */
    fail ("still alive after the test: %s", text);
  }
}

TCase *
element_tcase_new (const char *name, int timeout)
{
  TCase *tc = tcase_create (name);

  tcase_set_timeout (tc, timeout);
  tcase_add_checked_fixture (tc, NULL, element_check_released);
  return tc;
}
