/* The set-up and teardown the tests of the command-line programs share (test-tool-mimi.c,
 * test-tool-run.c): a scratch folder, and the model the tests run on: a deterministic random tiny model
 * (personaplex-make-model) or, with `golden` as the first argument, the golden one (exit 77 without the
 * golden data). One test program includes it once. */
#ifndef PPX_TEST_TOOL_HARNESS_H
#define PPX_TEST_TOOL_HARNESS_H

#include "golden-model.h"
#include "test-tool-util.h"

static char *tmp;       /* the scratch folder */
static char *model_dir; /* the tiny random model, or the golden one */
static GoldenModel G;   /* the golden data, with `golden` */

/* A path in the scratch folder (g_free). */
static inline char *
tmp_path (const char *name)
{
  return g_build_filename (tmp, name, NULL);
}

static inline void
write_text (const char *path, const char *text)
{
  g_autoptr (GError) err = NULL;
  g_assert_true (g_file_set_contents (path, text, -1, &err));
}

/* main(): with `golden` as the first argument, add_golden's tests on the golden model, else add_tiny's on a
 * tiny random one; `name` names the scratch folder. */
static inline int
tool_test_main (int argc, char **argv, const char *name, void (*add_golden) (void), void (*add_tiny) (void))
{
  g_test_init (&argc, &argv, NULL);
  gboolean golden = argc > 1 && strcmp (argv[1], "golden") == 0;
  if (golden)
    ppx_test_golden_or_skip (); /* before anything is made on disk */
  g_autoptr (GError) err = NULL;
  g_autofree char *template = g_strdup_printf ("ppx-%s-XXXXXX", name);
  tmp = g_dir_make_tmp (template, &err);
  g_assert_no_error (err);
  if (golden) {
    golden_model_setup (&G); /* exits 77 without the golden data */
    model_dir = g_strdup (G.dir);
    add_golden ();
  } else {
    model_dir = make_tiny_model (tmp, "tiny");
    add_tiny ();
  }
  int rc = g_test_run ();
  if (golden)
    golden_model_teardown (&G);
  ppx_test_remove_tree (tmp);
  g_free (tmp);
  g_free (model_dir);
  return rc;
}

#endif
