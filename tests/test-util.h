/* Helpers shared by the test programs. */
#ifndef PPX_TEST_UTIL_H
#define PPX_TEST_UTIL_H

#include <errno.h>
#include <fcntl.h>
#include <glib.h>
#include <glib/gstdio.h>
#include <pty.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

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

/* Runs the NULL-terminated argv (argv[0] a path) with its stdout and stderr on a new pseudo-terminal and its
 * stdin on /dev/null, as from a user's terminal; returns the exit status (-1: it did not exit normally) and
 * everything it wrote (g_free). */
static inline int
ppx_test_run_on_terminal (const char *const *argv, char **output)
{
  int master = -1, slave = -1;
  g_assert_cmpint (openpty (&master, &slave, NULL, NULL, NULL), ==, 0);
  pid_t pid = fork ();
  g_assert_cmpint (pid, >=, 0);
  if (pid == 0) {
    int null = open ("/dev/null", O_RDONLY);
    setsid ();
    if (null < 0 || dup2 (null, 0) < 0 || dup2 (slave, 1) < 0 || dup2 (slave, 2) < 0)
      _exit (127);
    close (master);
    execv (argv[0], (char *const *) argv);
    _exit (127);
  }
  close (slave);
  GString *out = g_string_new (NULL);
  char buf[4096];
  for (;;) {
    ssize_t n = read (master, buf, sizeof buf);
    if (n > 0)
      g_string_append_len (out, buf, n);
    else if (n < 0 && errno == EINTR)
      continue;
    else
      break; /* EIO: the child's side is closed */
  }
  int status = 0;
  g_assert_cmpint (waitpid (pid, &status, 0), ==, pid);
  close (master);
  *output = g_string_free (out, FALSE);
  return WIFEXITED (status) ? WEXITSTATUS (status) : -1;
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
