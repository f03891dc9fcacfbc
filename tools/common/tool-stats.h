/* Percentiles as the tools' reports give them (the bench's, the loadgen's, the live bench's): nearest rank over
 * sorted samples. */
#ifndef PPX_TOOL_STATS_H
#define PPX_TOOL_STATS_H

#include <glib.h>

G_BEGIN_DECLS

/* Sorts `v` (`n` doubles, no NaN) ascending, in place. */
void tool_sort_doubles (double *v, guint n);
/* Nearest rank: the smallest of the `n` sorted values with at least the share `p` (0-1) of them at or below it
 * (p * n is taken as an integer when within 1e-9 of one: 0.07 * 100 is the 7th of 100, not the 8th); NaN when `n`
 * is 0. */
double tool_percentile (const double *sorted, guint n, double p);

G_END_DECLS
#endif
