/* Writes the .pt fixture catalogue of pt-fixtures.c to a directory: the fuzzer's seed corpus.
 * Nothing is committed; the build runs this (see tests/fuzz/meson.build).
 *
 *   make-corrupt-pt DIR    write DIR/<case>.pt for every case, and DIR/<case>.pkl for the pickle-level
 *                          ones (fuzz-torch-pt wraps an input that does not start with "PK" as data.pkl) */
#include "pt-fixtures.h"

#include <glib/gstdio.h>

static gboolean
write_bytes (const char *dir, const char *name, const char *ext, GBytes *b)
{
  g_autofree char *file = g_strconcat (name, ext, NULL);
  g_autofree char *path = g_build_filename (dir, file, NULL);
  g_autoptr (GError) error = NULL;
  gsize len;
  const char *data = g_bytes_get_data (b, &len);
  if (!g_file_set_contents (path, data ? data : "", (gssize) len, &error)) {
    g_printerr ("%s\n", error->message);
    return FALSE;
  }
  return TRUE;
}

int
main (int argc, char **argv)
{
  if (argc != 2) {
    g_printerr ("usage: %s DIR\n", argv[0]);
    return 2;
  }
  const char *dir = argv[1];
  if (g_mkdir_with_parents (dir, 0755) != 0) {
    g_printerr ("%s: cannot create directory\n", dir);
    return 1;
  }
  g_autoptr (GPtrArray) cases = pt_fixture_cases ();
  guint n = 0;
  for (guint i = 0; i < cases->len; i++) {
    const PtFixtureCase *c = g_ptr_array_index (cases, i);
    if (!c->is_pickle) {
      if (!write_bytes (dir, c->name, ".pt", c->bytes))
        return 1;
      n++;
      continue;
    }
    gsize len;
    const guint8 *pkl = g_bytes_get_data (c->bytes, &len);
    g_autoptr (GBytes) file = pt_fixture_wrap_pickle (pkl, len);
    if (!write_bytes (dir, c->name, ".pkl", c->bytes) || !write_bytes (dir, c->name, ".pt", file))
      return 1;
    n += 2;
  }
  g_print ("wrote %u files to %s\n", n, dir);
  return 0;
}
