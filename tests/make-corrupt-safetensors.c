/* Writes the catalogue of corrupt-safetensors.c to a directory (the fuzzer's seed corpus), or with --check
 * verifies that a directory holds exactly those files (so the committed corpus stays in step).
 *
 *   make-corrupt-safetensors DIR            write DIR/<case>.safetensors for every case
 *   make-corrupt-safetensors --check DIR    exit 1 if any file is missing or differs */
#include "corrupt-safetensors.h"

#include <glib/gstdio.h>
#include <string.h>

int
main (int argc, char **argv)
{
  gboolean check = argc == 3 && strcmp (argv[1], "--check") == 0;
  if (argc != 2 && !check) {
    g_printerr ("usage: %s [--check] DIR\n", argv[0]);
    return 2;
  }
  const char *dir = argv[argc - 1];
  if (!check && g_mkdir_with_parents (dir, 0755) != 0) {
    g_printerr ("%s: cannot create directory\n", dir);
    return 1;
  }
  g_autoptr (GPtrArray) cases = ppx_corrupt_safetensors_cases ();
  int bad = 0;
  for (guint i = 0; i < cases->len; i++) {
    const PpxCorruptCase *c = g_ptr_array_index (cases, i);
    g_autofree char *file = g_strconcat (c->name, ".safetensors", NULL);
    g_autofree char *path = g_build_filename (dir, file, NULL);
    gsize len;
    const char *bytes = g_bytes_get_data (c->bytes, &len);
    g_autoptr (GError) error = NULL;
    if (check) {
      g_autofree char *have = NULL;
      gsize have_len;
      if (!g_file_get_contents (path, &have, &have_len, &error) || have_len != len ||
          (len && memcmp (have, bytes, len) != 0)) {
        g_printerr ("%s: missing or out of date (regenerate with make-corrupt-safetensors %s)\n", path, dir);
        bad++;
      }
    } else if (!g_file_set_contents (path, bytes ? bytes : "", (gssize) len, &error)) {
      g_printerr ("%s\n", error->message);
      return 1;
    }
  }
  if (!check)
    g_print ("wrote %u files to %s\n", cases->len, dir);
  return bad ? 1 : 0;
}
