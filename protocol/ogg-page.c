/* Ogg pages from a byte stream (see ogg-page.h). */
#include "ogg-page.h"

#include <string.h>

struct _PpxOggReader {
  GByteArray *buf;
  gsize taken;    /* bytes of buf already handed out as pages */
  gboolean broken;
};

static GQuark
ogg_error_quark (void)
{
  return g_quark_from_static_string ("ppx-ogg");
}

/* CRC-32, polynomial 0x04c11db7, not reflected, initial value 0, no final xor (RFC 3533). */
static guint32 crc_table[256];

static gpointer
make_crc_table (gpointer unused)
{
  for (guint32 i = 0; i < 256; i++) {
    guint32 r = i << 24;
    for (int k = 0; k < 8; k++)
      r = (r & 0x80000000u) ? (r << 1) ^ 0x04c11db7u : r << 1;
    crc_table[i] = r;
  }
  return NULL;
}

static guint32
crc_update (guint32 crc, const guint8 *data, gsize len)
{
  static GOnce once = G_ONCE_INIT;
  g_once (&once, make_crc_table, NULL);
  for (gsize i = 0; i < len; i++)
    crc = (crc << 8) ^ crc_table[((crc >> 24) & 0xff) ^ data[i]];
  return crc;
}

guint32
ppx_ogg_crc (const guint8 *data, gsize len)
{
  return crc_update (0, data, len);
}

static guint32
read_le32 (const guint8 *p)
{
  return (guint32) p[0] | ((guint32) p[1] << 8) | ((guint32) p[2] << 16) | ((guint32) p[3] << 24);
}

static void
write_le32 (guint8 *p, guint32 v)
{
  for (int i = 0; i < 4; i++)
    p[i] = (guint8) (v >> (8 * i));
}

/* The checksum over a page (len >= 27) with its own field (bytes 22..25) taken as zero. */
static guint32
page_crc (const guint8 *page, gsize len)
{
  guint8 head[27];
  memcpy (head, page, sizeof head);
  memset (head + 22, 0, 4);
  return crc_update (crc_update (0, head, sizeof head), page + sizeof head, len - sizeof head);
}

void
ppx_ogg_page_update_crc (guint8 *page, gsize len)
{
  write_le32 (page + 22, page_crc (page, len));
}

GBytes *
ppx_ogg_page_build (guint32 serial, guint32 sequence, guint8 flags, gint64 granule, const GBytes *const *packets,
                    guint n)
{
  GByteArray *page = g_byte_array_sized_new (27 + 255 + 4096);
  guint8 head[27] = {'O', 'g', 'g', 'S', 0, flags};
  for (int i = 0; i < 8; i++)
    head[6 + i] = (guint8) ((guint64) granule >> (8 * i));
  write_le32 (head + 14, serial);
  write_le32 (head + 18, sequence);
  g_byte_array_append (page, head, sizeof head);
  guint segments = 0;
  for (guint i = 0; i < n; i++) {
    gsize len = g_bytes_get_size ((GBytes *) packets[i]);
    for (; len >= 255; len -= 255, segments++)
      g_byte_array_append (page, (const guint8 *) "\xff", 1);
    guint8 last = (guint8) len;
    g_byte_array_append (page, &last, 1);
    segments++;
  }
  page->data[26] = (guint8) MIN (segments, 255);
  for (guint i = 0; i < n; i++) {
    gsize len;
    const guint8 *data = g_bytes_get_data ((GBytes *) packets[i], &len);
    g_byte_array_append (page, data, (guint) len);
  }
  ppx_ogg_page_update_crc (page->data, page->len);
  return g_byte_array_free_to_bytes (page);
}

PpxOggReader *
ppx_ogg_reader_new (void)
{
  PpxOggReader *r = g_new0 (PpxOggReader, 1);
  r->buf = g_byte_array_new ();
  return r;
}

void
ppx_ogg_reader_free (PpxOggReader *r)
{
  if (!r)
    return;
  g_byte_array_unref (r->buf);
  g_free (r);
}

void
ppx_ogg_reader_push (PpxOggReader *r, const guint8 *data, gsize len)
{
  /* Drop what was handed out before growing, so the buffer holds at most one page plus `len`. */
  if (r->taken) {
    g_byte_array_remove_range (r->buf, 0, (guint) r->taken);
    r->taken = 0;
  }
  g_byte_array_append (r->buf, data, (guint) len);
}

gsize
ppx_ogg_reader_pending (const PpxOggReader *r)
{
  return r->buf->len - r->taken;
}

static gboolean
fail (PpxOggReader *r, GError **error, const char *what, gsize offset)
{
  r->broken = TRUE;
  g_set_error (error, ogg_error_quark (), 0, "not an Ogg stream: %s (page at byte %" G_GSIZE_FORMAT " of what "
               "is pending)", what, offset);
  return FALSE;
}

gboolean
ppx_ogg_reader_next (PpxOggReader *r, PpxOggPage *page, GError **error)
{
  if (r->broken)
    return fail (r, error, "an earlier page was malformed", 0);
  const guint8 *p = r->buf->data + r->taken;
  gsize len = r->buf->len - r->taken;
  if (len < 27)
    return len >= 4 && memcmp (p, "OggS", 4) != 0 ? fail (r, error, "no 'OggS' capture pattern", 0) : FALSE;
  if (memcmp (p, "OggS", 4) != 0)
    return fail (r, error, "no 'OggS' capture pattern", 0);
  if (p[4] != 0)
    return fail (r, error, "stream structure version is not 0", 0);
  if (p[5] & ~0x07)
    return fail (r, error, "unknown header flags", 0);
  guint n_segments = p[26];
  if (len < 27 + (gsize) n_segments)
    return FALSE;
  gsize body = 0;
  guint packets = 0;
  for (guint i = 0; i < n_segments; i++) {
    body += p[27 + i];
    if (p[27 + i] < 255)
      packets++;
  }
  gsize total = 27 + n_segments + body;
  if (len < total)
    return FALSE;
  if (page_crc (p, total) != read_le32 (p + 22))
    return fail (r, error, "page checksum mismatch", 0);
  memset (page, 0, sizeof *page);
  page->flags = p[5];
  guint64 granule = 0;
  for (int i = 7; i >= 0; i--)
    granule = (granule << 8) | p[6 + i];
  page->granule = (gint64) granule;
  page->serial = read_le32 (p + 14);
  page->sequence = read_le32 (p + 18);
  page->header_len = 27 + n_segments;
  page->body_len = body;
  page->n_packets = packets;
  page->body = p + page->header_len;
  r->taken += total;
  return TRUE;
}

gboolean
ppx_ogg_opus_head (const guint8 *packet, gsize len, guint *channels, guint *pre_skip)
{
  if (len < 19 || memcmp (packet, "OpusHead", 8) != 0 || (packet[8] & 0xf0) != 0)
    return FALSE;
  if (channels)
    *channels = packet[9];
  if (pre_skip)
    *pre_skip = (guint) packet[10] | ((guint) packet[11] << 8);
  return TRUE;
}
