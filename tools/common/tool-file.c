#include "tool-file.h"

#include <errno.h>
#include <stdio.h>

#include "ppx-common.h"

gboolean
tool_write_file (const char *path, const char *data, gsize len, GError **error)
{
  FILE *f = fopen (path, "wb");
  if (!f) {
    g_set_error (error, PPX_ERROR, PPX_ERROR_IO, "%s: cannot write: %s", path, g_strerror (errno));
    return FALSE;
  }
  gboolean ok = fwrite (data, 1, len, f) == len;
  int saved = errno;
  if (fclose (f) != 0 && ok) {
    ok = FALSE;
    saved = errno;
  }
  if (!ok)
    g_set_error (error, PPX_ERROR, PPX_ERROR_IO, "%s: cannot write: %s", path, g_strerror (saved));
  return ok;
}
