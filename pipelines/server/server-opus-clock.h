/* personaplex-server: how much audio a client's Ogg Opus pages hold, by what their packets decode to (the Opus
 * durations of RFC 6716 3.1, read from each packet's TOC byte and frame count), not by their granule positions,
 * which a client writes as it likes (issue 25, defects 6 and 9). No libopus: two bytes of each packet suffice. */
#ifndef PPX_SERVER_OPUS_CLOCK_H
#define PPX_SERVER_OPUS_CLOCK_H

#include <glib.h>

#include "ogg-page.h"

G_BEGIN_DECLS

/* 48 kHz samples one Opus packet decodes to (at most 5760, 120 ms); 0 when its first bytes say nothing valid. */
guint ppx_opus_packet_samples (const guint8 *data, gsize len);
/* 48 kHz samples of the packets that start on `page` (a packet continued from the page before is counted there). */
guint64 ppx_opus_page_samples (const PpxOggPage *page);

G_END_DECLS
#endif
