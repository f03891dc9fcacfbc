/* personaplexduplex element tests (GstHarness / gst-check) on a tiny random model made by
 * personaplex-make-model, one binary of several files by concern: framing and timestamps
 * (element-test-framing.c), latency and events (element-test-events.c), messages and stats
 * (element-test-messages.c), properties, errors, state changes and model sharing
 * (element-test-properties.c); the harness they share is element-harness.[ch]. */
#include "element-harness.h"

void element_test_add_framing (TCase * tc);
void element_test_add_events (TCase * tc);
void element_test_add_messages (TCase * tc);
void element_test_add_properties (TCase * tc);

static Suite *
personaplexduplex_suite (void)
{
  Suite *s = suite_create ("personaplexduplex");
  TCase *tc = element_tcase_new ("general", 120);

  suite_add_tcase (s, tc);
  element_test_add_framing (tc);
  element_test_add_events (tc);
  element_test_add_messages (tc);
  element_test_add_properties (tc);
  return s;
}

int
main (int argc, char **argv)
{
  return element_test_main (argc, argv, personaplexduplex_suite,
      "personaplexduplex", TRUE, FALSE);
}
