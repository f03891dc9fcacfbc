/* The format readers' catalogues of malformed files (format-cases.h). */
#include "format-cases.h"

static void
case_free (gpointer p)
{
  FormatCase *c = p;
  g_free (c->name);
  g_bytes_unref (c->bytes);
  g_free (c);
}

GPtrArray *
format_cases_new (void)
{
  return g_ptr_array_new_with_free_func (case_free);
}

FormatCase *
format_case_add (GPtrArray *cases, const char *name, GBytes *bytes, const char *expect)
{
  FormatCase *c = g_new0 (FormatCase, 1);
  c->name = g_strdup (name);
  c->bytes = bytes;
  c->expect = expect;
  g_ptr_array_add (cases, c);
  return c;
}
