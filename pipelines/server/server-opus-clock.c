/* personaplex-server: Opus durations (server-opus-clock.h). */
#include "server-opus-clock.h"

guint
ppx_opus_packet_samples (const guint8 *data, gsize len)
{
  if (len < 1)
    return 0;
  guint config = data[0] >> 3, frame;
  if (config < 12) /* SILK: 10, 20, 40, 60 ms */
    frame = (const guint[]){480, 960, 1920, 2880}[config % 4];
  else if (config < 16) /* hybrid: 10, 20 ms */
    frame = config % 2 ? 960 : 480;
  else /* CELT: 2.5, 5, 10, 20 ms */
    frame = (const guint[]){120, 240, 480, 960}[config % 4];
  guint frames;
  switch (data[0] & 3) {
    case 0:
      frames = 1;
      break;
    case 1:
    case 2:
      frames = 2;
      break;
    default:
      if (len < 2)
        return 0;
      frames = data[1] & 0x3f;
  }
  guint samples = frames * frame;
  return samples <= 5760 ? samples : 0;
}

guint64
ppx_opus_page_samples (const PpxOggPage *page)
{
  const guint8 *lacing = page->body - (page->header_len - 27);
  guint n = (guint) (page->header_len - 27);
  gsize at = 0, start = 0;
  gboolean continued = (page->flags & PPX_OGG_FLAG_CONTINUED) != 0;
  guint64 samples = 0;
  for (guint i = 0; i < n; i++) {
    at += lacing[i];
    if (lacing[i] == 255 && i + 1 < n)
      continue;
    /* a packet ends here (or the page ends inside it): it starts at `start` */
    if (!continued)
      samples += ppx_opus_packet_samples (page->body + start, at - start);
    continued = FALSE;
    start = at;
  }
  return samples;
}
