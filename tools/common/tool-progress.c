/* Progress lines on a terminal (tool-progress.h). */
#include "tool-progress.h"

#include <stdio.h>
#include <unistd.h>

#define REDRAW_US (G_USEC_PER_SEC / 10)

void
tool_progress_start (ToolProgress *p, const char *prog, const char *what, guint64 total_bytes)
{
  p->prog = prog;
  p->what = what;
  p->on = isatty (STDERR_FILENO);
  p->total = total_bytes;
  p->t0 = g_get_monotonic_time ();
  p->shown = 0;
}

void
tool_progress_update (ToolProgress *p, guint i, guint n, guint64 bytes)
{
  if (!p->on)
    return;
  const gint64 now = g_get_monotonic_time ();
  if (i < n && i > 1 && now - p->shown < REDRAW_US)
    return;
  p->shown = now;
  const double seconds = MAX (now - p->t0, 1) / (double) G_USEC_PER_SEC;
  /* \033[K clears what a longer line left */
  fprintf (stderr, "\r%s: %s: tensor %u of %u, %.1f of %.1f MB, %.0f MB/s\033[K", p->prog, p->what, i, n, bytes / 1e6,
           p->total / 1e6, bytes / 1e6 / seconds);
  fflush (stderr);
}

void
tool_progress_end (ToolProgress *p)
{
  if (p->on)
    fputc ('\n', stderr);
}
