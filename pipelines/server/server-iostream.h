/* personaplex-server: a GIOStream over another (a connection stolen from libsoup after a WebSocket upgrade)
 * that counts the bytes read and written, remembers when the peer last sent anything and when the socket last took
 * bytes, lets its owner refuse
 * what was just read, can pause reading, and can be cut: reads then end and writes fail, and a reader or writer
 * waiting on the stream wakes up at once. Its streams are pollable, as SoupWebsocketConnection requires. Main thread only. */
#ifndef PPX_SERVER_IOSTREAM_H
#define PPX_SERVER_IOSTREAM_H

#include <gio/gio.h>

G_BEGIN_DECLS

#define PPX_TYPE_COUNTING_STREAM (ppx_counting_stream_get_type ())
G_DECLARE_FINAL_TYPE (PpxCountingStream, ppx_counting_stream, PPX, COUNTING_STREAM, GIOStream)

PpxCountingStream *ppx_counting_stream_new (GIOStream *base);

/* Called after every read of n > 0 bytes; returning FALSE cuts the stream, and the read returns the end of the
 * stream instead of those bytes. */
typedef gboolean (*PpxCountingReadHook) (gsize n, gpointer user_data);
void ppx_counting_stream_set_read_hook (PpxCountingStream *s, PpxCountingReadHook hook, gpointer user_data);

guint64 ppx_counting_stream_bytes_read (PpxCountingStream *s);
guint64 ppx_counting_stream_bytes_written (PpxCountingStream *s);
/* g_get_monotonic_time () of the last read that returned data (the stream's creation before any). */
gint64 ppx_counting_stream_last_read_us (PpxCountingStream *s);
/* g_get_monotonic_time () of the last write that the socket took bytes of (the stream's creation before any). */
gint64 ppx_counting_stream_last_write_us (PpxCountingStream *s);
/* While paused, reads would block and the stream never polls readable: the peer's bytes wait in the kernel, and TCP
 * flow control slows the peer down. Resuming wakes a reader waiting on the stream. */
void ppx_counting_stream_pause_input (PpxCountingStream *s, gboolean paused);
gboolean ppx_counting_stream_input_paused (PpxCountingStream *s);
/* From now on reads return the end of the stream and writes fail with G_IO_ERROR_BROKEN_PIPE. */
void ppx_counting_stream_cut (PpxCountingStream *s);
gboolean ppx_counting_stream_is_cut (PpxCountingStream *s);

G_END_DECLS
#endif
