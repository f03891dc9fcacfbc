/* personaplex-server: the counting GIOStream (server-iostream.h). */
#include "server-iostream.h"

/* While input is paused, a reader waiting on the stream is woken this often to try again. */
#define PAUSED_POLL_MS 50

/* ---- the input side ---- */

#define PPX_TYPE_COUNTING_INPUT (ppx_counting_input_get_type ())
G_DECLARE_FINAL_TYPE (PpxCountingInput, ppx_counting_input, PPX, COUNTING_INPUT, GInputStream)

struct _PpxCountingInput {
  GInputStream parent;
  PpxCountingStream *owner; /* not a reference: the owner holds this stream */
  GInputStream *base;
};

/* ---- the output side ---- */

#define PPX_TYPE_COUNTING_OUTPUT (ppx_counting_output_get_type ())
G_DECLARE_FINAL_TYPE (PpxCountingOutput, ppx_counting_output, PPX, COUNTING_OUTPUT, GOutputStream)

struct _PpxCountingOutput {
  GOutputStream parent;
  PpxCountingStream *owner;
  GOutputStream *base;
};

struct _PpxCountingStream {
  GIOStream parent;
  GIOStream *base;
  PpxCountingInput *input;
  PpxCountingOutput *output;
  GCancellable *cut; /* cancelled when the stream is cut: wakes the pollable sources */
  GCancellable *resume; /* non-NULL while input is paused */
  guint64 bytes_read, bytes_written;
  gint64 last_read_us, last_write_us;
  PpxCountingReadHook hook;
  gpointer hook_data;
};

static void
account_write (PpxCountingStream *s, gssize n)
{
  if (n <= 0)
    return;
  s->bytes_written += (guint64) n;
  s->last_write_us = g_get_monotonic_time ();
}

/* Accounts n bytes just read; FALSE when they are refused (the stream is then cut). */
static gboolean
account_read (PpxCountingStream *s, gssize n)
{
  if (n <= 0)
    return TRUE;
  s->bytes_read += (guint64) n;
  s->last_read_us = g_get_monotonic_time ();
  if (s->hook && !s->hook ((gsize) n, s->hook_data)) {
    ppx_counting_stream_cut (s);
    return FALSE;
  }
  return TRUE;
}

static void ppx_counting_input_pollable_init (GPollableInputStreamInterface *iface);
G_DEFINE_TYPE_WITH_CODE (PpxCountingInput, ppx_counting_input, G_TYPE_INPUT_STREAM,
                         G_IMPLEMENT_INTERFACE (G_TYPE_POLLABLE_INPUT_STREAM, ppx_counting_input_pollable_init))

static gboolean
paused (PpxCountingInput *in, GError **error)
{
  if (!in->owner->resume || g_cancellable_is_cancelled (in->owner->cut))
    return FALSE;
  g_set_error_literal (error, G_IO_ERROR, G_IO_ERROR_WOULD_BLOCK, "reading is paused");
  return TRUE;
}

static gssize
input_read (GInputStream *stream, void *buffer, gsize count, GCancellable *cancellable, GError **error)
{
  PpxCountingInput *in = PPX_COUNTING_INPUT (stream);
  if (g_cancellable_is_cancelled (in->owner->cut))
    return 0;
  if (paused (in, error))
    return -1;
  gssize n = g_input_stream_read (in->base, buffer, count, cancellable, error);
  return account_read (in->owner, n) ? n : 0;
}

static gboolean
input_close (GInputStream *stream, GCancellable *cancellable, GError **error)
{
  return TRUE; /* the io stream closes the base */
}

static gboolean
input_can_poll (GPollableInputStream *stream)
{
  return g_pollable_input_stream_can_poll (G_POLLABLE_INPUT_STREAM (PPX_COUNTING_INPUT (stream)->base));
}

static gboolean
input_is_readable (GPollableInputStream *stream)
{
  PpxCountingInput *in = PPX_COUNTING_INPUT (stream);
  return g_cancellable_is_cancelled (in->owner->cut) ||
         (!in->owner->resume && g_pollable_input_stream_is_readable (G_POLLABLE_INPUT_STREAM (in->base)));
}

static GSource *
input_create_source (GPollableInputStream *stream, GCancellable *cancellable)
{
  PpxCountingInput *in = PPX_COUNTING_INPUT (stream);
  /* ready when the base is (or, paused, when reading resumes), or at once when the stream is cut */
  g_autoptr (GSource) child = in->owner->resume
                                  ? g_timeout_source_new (PAUSED_POLL_MS)
                                  : g_pollable_input_stream_create_source (G_POLLABLE_INPUT_STREAM (in->base),
                                                                           cancellable);
  return g_pollable_source_new_full (stream, child, in->owner->cut);
}

static gssize
input_read_nonblocking (GPollableInputStream *stream, void *buffer, gsize count, GError **error)
{
  PpxCountingInput *in = PPX_COUNTING_INPUT (stream);
  if (g_cancellable_is_cancelled (in->owner->cut))
    return 0;
  if (paused (in, error))
    return -1;
  gssize n = g_pollable_input_stream_read_nonblocking (G_POLLABLE_INPUT_STREAM (in->base), buffer, count, NULL,
                                                       error);
  return account_read (in->owner, n) ? n : 0;
}

static void
ppx_counting_input_pollable_init (GPollableInputStreamInterface *iface)
{
  iface->can_poll = input_can_poll;
  iface->is_readable = input_is_readable;
  iface->create_source = input_create_source;
  iface->read_nonblocking = input_read_nonblocking;
}

static void
ppx_counting_input_class_init (PpxCountingInputClass *klass)
{
  G_INPUT_STREAM_CLASS (klass)->read_fn = input_read;
  G_INPUT_STREAM_CLASS (klass)->close_fn = input_close;
}

static void
ppx_counting_input_init (PpxCountingInput *in)
{
}

static void ppx_counting_output_pollable_init (GPollableOutputStreamInterface *iface);
G_DEFINE_TYPE_WITH_CODE (PpxCountingOutput, ppx_counting_output, G_TYPE_OUTPUT_STREAM,
                         G_IMPLEMENT_INTERFACE (G_TYPE_POLLABLE_OUTPUT_STREAM, ppx_counting_output_pollable_init))

static gboolean
refuse_write (PpxCountingOutput *out, GError **error)
{
  if (!g_cancellable_is_cancelled (out->owner->cut))
    return FALSE;
  g_set_error_literal (error, G_IO_ERROR, G_IO_ERROR_BROKEN_PIPE, "the connection was cut");
  return TRUE;
}

static gssize
output_write (GOutputStream *stream, const void *buffer, gsize count, GCancellable *cancellable, GError **error)
{
  PpxCountingOutput *out = PPX_COUNTING_OUTPUT (stream);
  if (refuse_write (out, error))
    return -1;
  gssize n = g_output_stream_write (out->base, buffer, count, cancellable, error);
  account_write (out->owner, n);
  return n;
}

static gboolean
output_flush (GOutputStream *stream, GCancellable *cancellable, GError **error)
{
  return g_output_stream_flush (PPX_COUNTING_OUTPUT (stream)->base, cancellable, error);
}

static gboolean
output_close (GOutputStream *stream, GCancellable *cancellable, GError **error)
{
  return TRUE;
}

static gboolean
output_can_poll (GPollableOutputStream *stream)
{
  return g_pollable_output_stream_can_poll (G_POLLABLE_OUTPUT_STREAM (PPX_COUNTING_OUTPUT (stream)->base));
}

static gboolean
output_is_writable (GPollableOutputStream *stream)
{
  PpxCountingOutput *out = PPX_COUNTING_OUTPUT (stream);
  return g_cancellable_is_cancelled (out->owner->cut) ||
         g_pollable_output_stream_is_writable (G_POLLABLE_OUTPUT_STREAM (out->base));
}

static GSource *
output_create_source (GPollableOutputStream *stream, GCancellable *cancellable)
{
  PpxCountingOutput *out = PPX_COUNTING_OUTPUT (stream);
  g_autoptr (GSource) child = g_pollable_output_stream_create_source (G_POLLABLE_OUTPUT_STREAM (out->base),
                                                                      cancellable);
  return g_pollable_source_new_full (stream, child, out->owner->cut);
}

static gssize
output_write_nonblocking (GPollableOutputStream *stream, const void *buffer, gsize count, GError **error)
{
  PpxCountingOutput *out = PPX_COUNTING_OUTPUT (stream);
  if (refuse_write (out, error))
    return -1;
  gssize n = g_pollable_output_stream_write_nonblocking (G_POLLABLE_OUTPUT_STREAM (out->base), buffer, count, NULL,
                                                         error);
  account_write (out->owner, n);
  return n;
}

static void
ppx_counting_output_pollable_init (GPollableOutputStreamInterface *iface)
{
  iface->can_poll = output_can_poll;
  iface->is_writable = output_is_writable;
  iface->create_source = output_create_source;
  iface->write_nonblocking = output_write_nonblocking;
}

static void
ppx_counting_output_class_init (PpxCountingOutputClass *klass)
{
  G_OUTPUT_STREAM_CLASS (klass)->write_fn = output_write;
  G_OUTPUT_STREAM_CLASS (klass)->flush = output_flush;
  G_OUTPUT_STREAM_CLASS (klass)->close_fn = output_close;
}

static void
ppx_counting_output_init (PpxCountingOutput *out)
{
}

/* ---- the io stream ---- */

G_DEFINE_TYPE (PpxCountingStream, ppx_counting_stream, G_TYPE_IO_STREAM)

static GInputStream *
stream_get_input (GIOStream *stream)
{
  return G_INPUT_STREAM (PPX_COUNTING_STREAM (stream)->input);
}

static GOutputStream *
stream_get_output (GIOStream *stream)
{
  return G_OUTPUT_STREAM (PPX_COUNTING_STREAM (stream)->output);
}

static gboolean
stream_close (GIOStream *stream, GCancellable *cancellable, GError **error)
{
  return g_io_stream_close (PPX_COUNTING_STREAM (stream)->base, cancellable, error);
}

static void
on_base_closed (GObject *base, GAsyncResult *result, gpointer user_data)
{
  GTask *task = user_data;
  GError *error = NULL;
  if (g_io_stream_close_finish (G_IO_STREAM (base), result, &error))
    g_task_return_boolean (task, TRUE);
  else
    g_task_return_error (task, error);
  g_object_unref (task);
}

/* Closes the base the base's own way (a TLS connection sends its close notification), not in a thread. */
static void
stream_close_async (GIOStream *stream, int priority, GCancellable *cancellable, GAsyncReadyCallback callback,
                    gpointer user_data)
{
  GTask *task = g_task_new (stream, cancellable, callback, user_data);
  g_io_stream_close_async (PPX_COUNTING_STREAM (stream)->base, priority, cancellable, on_base_closed, task);
}

static gboolean
stream_close_finish (GIOStream *stream, GAsyncResult *result, GError **error)
{
  return g_task_propagate_boolean (G_TASK (result), error);
}

static void
stream_dispose (GObject *object)
{
  PpxCountingStream *s = PPX_COUNTING_STREAM (object);
  g_clear_object (&s->input);
  g_clear_object (&s->output);
  G_OBJECT_CLASS (ppx_counting_stream_parent_class)->dispose (object);
}

static void
stream_finalize (GObject *object)
{
  PpxCountingStream *s = PPX_COUNTING_STREAM (object);
  g_object_unref (s->base);
  g_object_unref (s->cut);
  g_clear_object (&s->resume);
  G_OBJECT_CLASS (ppx_counting_stream_parent_class)->finalize (object);
}

static void
ppx_counting_stream_class_init (PpxCountingStreamClass *klass)
{
  G_OBJECT_CLASS (klass)->dispose = stream_dispose;
  G_OBJECT_CLASS (klass)->finalize = stream_finalize;
  G_IO_STREAM_CLASS (klass)->get_input_stream = stream_get_input;
  G_IO_STREAM_CLASS (klass)->get_output_stream = stream_get_output;
  G_IO_STREAM_CLASS (klass)->close_fn = stream_close;
  G_IO_STREAM_CLASS (klass)->close_async = stream_close_async;
  G_IO_STREAM_CLASS (klass)->close_finish = stream_close_finish;
}

static void
ppx_counting_stream_init (PpxCountingStream *s)
{
}

PpxCountingStream *
ppx_counting_stream_new (GIOStream *base)
{
  PpxCountingStream *s = g_object_new (PPX_TYPE_COUNTING_STREAM, NULL);
  s->base = g_object_ref (base);
  s->cut = g_cancellable_new ();
  s->last_read_us = s->last_write_us = g_get_monotonic_time ();
  s->input = g_object_new (PPX_TYPE_COUNTING_INPUT, NULL);
  s->input->owner = s;
  s->input->base = g_io_stream_get_input_stream (base);
  s->output = g_object_new (PPX_TYPE_COUNTING_OUTPUT, NULL);
  s->output->owner = s;
  s->output->base = g_io_stream_get_output_stream (base);
  return s;
}

void
ppx_counting_stream_set_read_hook (PpxCountingStream *s, PpxCountingReadHook hook, gpointer user_data)
{
  s->hook = hook;
  s->hook_data = user_data;
}

guint64
ppx_counting_stream_bytes_read (PpxCountingStream *s)
{
  return s->bytes_read;
}

guint64
ppx_counting_stream_bytes_written (PpxCountingStream *s)
{
  return s->bytes_written;
}

gint64
ppx_counting_stream_last_read_us (PpxCountingStream *s)
{
  return s->last_read_us;
}

gint64
ppx_counting_stream_last_write_us (PpxCountingStream *s)
{
  return s->last_write_us;
}

void
ppx_counting_stream_pause_input (PpxCountingStream *s, gboolean pause)
{
  if (pause && !s->resume) {
    s->resume = g_cancellable_new ();
  } else if (!pause && s->resume) {
    g_clear_object (&s->resume); /* a reader waiting on the stream tries again within PAUSED_POLL_MS */
  }
}

gboolean
ppx_counting_stream_input_paused (PpxCountingStream *s)
{
  return s->resume != NULL;
}

void
ppx_counting_stream_cut (PpxCountingStream *s)
{
  g_cancellable_cancel (s->cut);
}

gboolean
ppx_counting_stream_is_cut (PpxCountingStream *s)
{
  return g_cancellable_is_cancelled (s->cut);
}
