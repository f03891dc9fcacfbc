/* Percentiles of the tools' reports (tool-stats.h). */
#include "tool-stats.h"

#include <math.h>
#include <stdlib.h>

static int
compare_doubles (const void *a, const void *b)
{
  const double x = *(const double *) a, y = *(const double *) b;
  return (x > y) - (x < y);
}

void
tool_sort_doubles (double *v, guint n)
{
  if (n > 1)
    qsort (v, n, sizeof *v, compare_doubles);
}

double
tool_percentile (const double *sorted, guint n, double p)
{
  if (n == 0)
    return NAN;
  const double rank = ceil (p * n - 1e-9);
  return sorted[rank < 1 ? 0 : rank > n ? n - 1 : (guint) rank - 1];
}
