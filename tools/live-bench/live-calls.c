/* personaplex-live-bench's other calls (live-calls.h). */
#include "live-calls.h"

struct LiveCalls {
  GPtrArray *pipelines; /* GstElement*, PLAYING */
  char *error;
};

static gboolean
on_bus (GstBus *bus, GstMessage *msg, gpointer data)
{
  LiveCalls *c = data;
  (void) bus;
  if (GST_MESSAGE_TYPE (msg) == GST_MESSAGE_LATENCY) {
    GstObject *p = GST_MESSAGE_SRC (msg);
    while (p && GST_OBJECT_PARENT (p))
      p = GST_OBJECT_PARENT (p);
    if (GST_IS_BIN (p))
      gst_bin_recalculate_latency (GST_BIN (p));
  } else if (GST_MESSAGE_TYPE (msg) == GST_MESSAGE_ERROR && !c->error) {
    g_autoptr (GError) err = NULL;
    gst_message_parse_error (msg, &err, NULL);
    c->error = g_strdup_printf ("another call: %s: %s", GST_OBJECT_NAME (GST_MESSAGE_SRC (msg)), err->message);
  }
  return G_SOURCE_CONTINUE;
}

static void
stop (GstElement *pipeline)
{
  GstBus *bus = gst_element_get_bus (pipeline);
  gst_bus_remove_watch (bus);
  gst_object_unref (bus);
  gst_element_set_state (pipeline, GST_STATE_NULL);
  gst_object_unref (pipeline);
}

/* One call: built, configured, watched and PLAYING (added to @c even when it fails, to be stopped with it). */
static gboolean
start_one (LiveCalls *c, const char *desc, LiveCallsConfigure configure, gpointer data, GError **error)
{
  GstElement *pipeline = gst_parse_launch (desc, error);
  if (!pipeline)
    return FALSE;
  g_ptr_array_add (c->pipelines, pipeline);
  GstElement *pp = gst_bin_get_by_name (GST_BIN (pipeline), "pp");
  gboolean ok = configure (pp, data, error);
  gst_object_unref (pp);
  g_autoptr (GstBus) bus = gst_element_get_bus (pipeline);
  gst_bus_add_watch (bus, on_bus, c);
  if (!ok)
    return FALSE;
  if (gst_element_set_state (pipeline, GST_STATE_PLAYING) != GST_STATE_CHANGE_FAILURE)
    return TRUE;
  GstMessage *m = gst_bus_pop_filtered (bus, GST_MESSAGE_ERROR); /* the element posted the reason */
  if (m) {
    on_bus (bus, m, c);
    gst_message_unref (m);
  }
  g_set_error (error, GST_CORE_ERROR, GST_CORE_ERROR_STATE_CHANGE, "it did not start%s%s", c->error ? ": " : "",
               c->error ? c->error : "");
  return FALSE;
}

LiveCalls *
live_calls_start (guint n, const char *source, const char *format, LiveCallsConfigure configure, gpointer data,
                  GError **error)
{
  LiveCalls *c = g_new0 (LiveCalls, 1);
  c->pipelines = g_ptr_array_new_with_free_func ((GDestroyNotify) stop);
  g_autofree char *desc = g_strdup_printf (
    "%s ! audioconvert ! audioresample ! audio/x-raw,format=%s,rate=24000,channels=1 ! queue ! "
    "personaplexduplex name=pp ! fakesink sync=true pp.text_src ! queue ! fakesink sync=false async=false",
    source, format);
  for (guint i = 0; i < n; i++)
    if (!start_one (c, desc, configure, data, error)) {
      g_prefix_error (error, "another call (%u of %u): ", i + 1, n);
      live_calls_free (c);
      return NULL;
    }
  return c;
}

const char *
live_calls_error (LiveCalls *c)
{
  return c->error;
}

void
live_calls_free (LiveCalls *c)
{
  if (!c)
    return;
  g_ptr_array_unref (c->pipelines);
  g_free (c->error);
  g_free (c);
}
