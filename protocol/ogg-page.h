/* Ogg pages (RFC 3533) read from a byte stream that arrives in pieces, as the PersonaPlex WebSocket
 * protocol carries Ogg Opus: each 0x01 message holds some bytes of the stream, not necessarily whole
 * pages. Used by the server (to check what a client sends and to see its end-of-stream page) and by the
 * chat client (to time what it sends and receives by granule position). No GStreamer, no libogg. */
#ifndef PPX_OGG_PAGE_H
#define PPX_OGG_PAGE_H

#include <glib.h>

G_BEGIN_DECLS

#define PPX_OGG_FLAG_CONTINUED 0x01
#define PPX_OGG_FLAG_BOS 0x02
#define PPX_OGG_FLAG_EOS 0x04
/* 27 header bytes, 255 lacing values, 255 x 255 body bytes */
#define PPX_OGG_MAX_PAGE (27 + 255 + 255 * 255)

typedef struct {
  guint8 flags;       /* PPX_OGG_FLAG_* */
  gint64 granule;     /* -1: no packet ends on this page */
  guint32 serial, sequence;
  gsize header_len;   /* 27 + lacing values */
  gsize body_len;
  guint n_packets;    /* packets that end on this page */
  const guint8 *body; /* into the reader's buffer: valid until the next call on the reader */
} PpxOggPage;

/* Collects the stream's bytes and hands out complete pages, checking each one (capture pattern,
 * version, flags, checksum). */
typedef struct _PpxOggReader PpxOggReader;

PpxOggReader *ppx_ogg_reader_new (void);
void ppx_ogg_reader_free (PpxOggReader *r);
/* Appends bytes; nothing is parsed yet. */
void ppx_ogg_reader_push (PpxOggReader *r, const guint8 *data, gsize len);
/* The next complete page: TRUE and `page` filled; FALSE with no error when more bytes are needed; FALSE
 * with an error naming the problem when the bytes are not an Ogg page (the reader is then unusable). */
gboolean ppx_ogg_reader_next (PpxOggReader *r, PpxOggPage *page, GError **error);
/* Bytes held: an incomplete page (at most PPX_OGG_MAX_PAGE once pages were taken out). */
gsize ppx_ogg_reader_pending (const PpxOggReader *r);

/* One page holding `n` whole packets (each at most 255 x 255 bytes in all), checksum included. */
GBytes *ppx_ogg_page_build (guint32 serial, guint32 sequence, guint8 flags, gint64 granule,
                            const GBytes *const *packets, guint n);

/* The Ogg checksum of `len` bytes (the page with its checksum field zeroed). */
guint32 ppx_ogg_crc (const guint8 *data, gsize len);
/* Writes the checksum of a complete page into its header (after its flags or granule were changed). */
void ppx_ogg_page_update_crc (guint8 *page, gsize len);

/* An OpusHead packet (RFC 7845): its channel count and pre-skip (48 kHz samples). */
gboolean ppx_ogg_opus_head (const guint8 *packet, gsize len, guint *channels, guint *pre_skip);

G_END_DECLS
#endif
