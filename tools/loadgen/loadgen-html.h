/* personaplex-loadgen --report FILE.html: a picture of a run, one self-contained page of inline SVG (no script,
 * no style sheet, font or image fetched), a chart a figure, by second of the run:
 *   - frame latency p50 and p99 of the frames answered in that second;
 *   - audio missed and dropped by the reference web client's player (loadgen-playout.h), summed over the calls;
 *   - calls joined (handshakes so far) and open (joined, not yet ended);
 *   - each server's tick p99, from its /health polled during the run (--health); a note when none was. */
#ifndef LOADGEN_HTML_H
#define LOADGEN_HTML_H

#include "loadgen-report.h"

G_BEGIN_DECLS

char *loadgen_report_to_html (const LoadgenReport *r);
gboolean loadgen_report_write_html (const LoadgenReport *r, const char *path, GError **error);

G_END_DECLS
#endif
