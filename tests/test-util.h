/* Helpers shared by the test programs. */
#ifndef PPX_TEST_UTIL_H
#define PPX_TEST_UTIL_H

#include <glib.h>
#include <glib/gstdio.h>
#include <stdio.h>
#include <stdlib.h>

#define PPX_TEST_SKIP 77

/* $PPX_GOLDEN_DIR, else ../shared/golden/tiny beside the checkout; NULL when absent (then skip). */
static inline const char *
ppx_test_golden_dir (void)
{
  static char *dir = NULL;
  if (!dir) {
    const char *env = g_getenv ("PPX_GOLDEN_DIR");
    dir = g_strdup (env && *env ? env : PPX_SOURCE_ROOT "/../shared/golden/tiny");
  }
  g_autofree char *probe = g_build_filename (dir, "golden.safetensors", NULL);
  return g_file_test (probe, G_FILE_TEST_EXISTS) ? dir : NULL;
}

static inline const char *
ppx_test_golden_or_skip (void)
{
  const char *d = ppx_test_golden_dir ();
  if (!d) {
    g_printerr ("golden data not found (set PPX_GOLDEN_DIR); skipping\n");
    exit (PPX_TEST_SKIP);
  }
  return d;
}

/* Removes a file, or a directory and everything below it (symbolic links are removed, not followed). */
static inline void
ppx_test_remove_tree (const char *path)
{
  if (g_file_test (path, G_FILE_TEST_IS_DIR) && !g_file_test (path, G_FILE_TEST_IS_SYMLINK)) {
    GDir *d = g_dir_open (path, 0, NULL);
    const char *name;
    while (d && (name = g_dir_read_name (d))) {
      g_autofree char *p = g_build_filename (path, name, NULL);
      ppx_test_remove_tree (p);
    }
    if (d)
      g_dir_close (d);
    g_rmdir (path);
  } else {
    g_unlink (path);
  }
}

/* ../shared/data beside the checkout (real speech WAVs), or NULL. */
static inline const char *
ppx_test_data_dir (void)
{
  const char *env = g_getenv ("PPX_DATA_DIR");
  const char *dir = env && *env ? env : PPX_SOURCE_ROOT "/../shared/data";
  return g_file_test (dir, G_FILE_TEST_IS_DIR) ? dir : NULL;
}

#endif
