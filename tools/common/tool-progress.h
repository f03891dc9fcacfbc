/* Progress of a tool that writes a file tensor by tensor, shown only when stderr is a terminal, as users
 * of such tools expect: "PROG: FILE: tensor i of N, X of Y MB, Z MB/s" on one line, redrawn in place.
 * Nothing is printed otherwise (pipes, logs, tests). */
#ifndef PPX_TOOL_PROGRESS_H
#define PPX_TOOL_PROGRESS_H

#include <glib.h>

G_BEGIN_DECLS

typedef struct {
  const char *prog, *what;
  gboolean on;      /* stderr is a terminal */
  guint64 total;    /* bytes of the whole job */
  gint64 t0, shown; /* microseconds: the start, the last redraw */
} ToolProgress;

/* A job of `total_bytes` named `what` (e.g. the file's name). */
void tool_progress_start (ToolProgress *p, const char *prog, const char *what, guint64 total_bytes);
/* Tensor `i` (1-based) of `n` is done, `bytes` of the total with it. Redraws at most ten times a second,
 * and always for the last tensor. */
void tool_progress_update (ToolProgress *p, guint i, guint n, guint64 bytes);
/* Ends the line. */
void tool_progress_end (ToolProgress *p);

G_END_DECLS
#endif
