/* How the small tools end on an error: "PROG: MESSAGE" on stderr and exit status 1. */
#ifndef PPX_TOOL_FAIL_H
#define PPX_TOOL_FAIL_H

#include <glib.h>

static inline int
tool_fail (const char *prog, const char *msg)
{
  g_printerr ("%s: %s\n", prog, msg);
  return 1;
}

#endif
