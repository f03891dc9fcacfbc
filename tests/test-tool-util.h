/* Helpers for the tests that go through the command-line programs: spawn a program and capture its exit
 * status and stderr, write and read float WAVs, make and remove scratch model directories. */
#ifndef PPX_TEST_TOOL_UTIL_H
#define PPX_TEST_TOOL_UTIL_H

#include <glib/gstdio.h>
#include <math.h>
#include <sndfile.h>
#include <sys/wait.h>

#include "test-util.h"

typedef struct {
  int exit_status; /* -1: did not exit normally */
  char *out, *err;
} ToolResult;

static inline void
tool_result_clear (ToolResult *r)
{
  g_free (r->out);
  g_free (r->err);
  memset (r, 0, sizeof *r);
}

/* Path of a built program: $ENV_VAR, else BUILD_ROOT/tools/NAME. */
static inline const char *
tool_path (const char *env_var, const char *name)
{
  const char *p = g_getenv (env_var);
  if (p && *p)
    return p;
  static GHashTable *paths;
  if (!paths)
    paths = g_hash_table_new (g_str_hash, g_str_equal);
  char *built = g_hash_table_lookup (paths, name);
  if (!built) {
    built = g_build_filename (PPX_BUILD_ROOT, "tools", name, NULL);
    g_hash_table_insert (paths, (gpointer) name, built);
  }
  return built;
}

/* Runs `program` with the NULL-terminated arguments and the environment `envp` (NULL: this one). */
static inline ToolResult
tool_run_envp_argv (const char *program, char **envp, const char *const *args)
{
  ToolResult r = {0};
  g_autoptr (GPtrArray) argv = g_ptr_array_new ();
  g_ptr_array_add (argv, (char *) program);
  for (const char *const *a = args; *a; a++)
    g_ptr_array_add (argv, (char *) *a);
  g_ptr_array_add (argv, NULL);
  int status = 0;
  g_autoptr (GError) error = NULL;
  g_assert_true (g_spawn_sync (NULL, (char **) argv->pdata, envp, G_SPAWN_DEFAULT, NULL, NULL, &r.out, &r.err,
                               &status, &error));
  g_assert_no_error (error);
  r.exit_status = WIFEXITED (status) ? WEXITSTATUS (status) : -1;
  return r;
}

/* Runs `program` with the NULL-terminated arguments. */
static inline ToolResult
tool_run_argv (const char *program, const char *const *args)
{
  return tool_run_envp_argv (program, NULL, args);
}

#define tool_run(program, ...) tool_run_argv ((program), (const char *const[]){__VA_ARGS__, NULL})

/* Asserts a run failed with exit status 1 and a message containing every NULL-terminated needle. */
static inline void
tool_assert_fails_naming (const ToolResult *r, const char *const *needles)
{
  if (r->exit_status != 1)
    g_error ("expected exit status 1, got %d; stderr:\n%s", r->exit_status, r->err);
  for (const char *const *n = needles; *n; n++)
    if (!strstr (r->err, *n))
      g_error ("the message does not name '%s':\n%s", *n, r->err);
  g_test_message ("error as expected: %s", r->err);
}

#define tool_assert_fails(r, ...) tool_assert_fails_naming ((r), (const char *const[]){__VA_ARGS__, NULL})

static inline void
tool_assert_ok (const ToolResult *r)
{
  if (r->exit_status != 0)
    g_error ("expected success, got exit status %d; stderr:\n%s", r->exit_status, r->err);
}

/* Writes mono float samples (NaN and Inf kept) as a WAV file with the given sample format. */
static inline void
wav_write (const char *path, const float *pcm, gsize n, int rate, int channels, int subformat)
{
  SF_INFO info = {.samplerate = rate, .channels = channels, .format = SF_FORMAT_WAV | subformat};
  SNDFILE *f = sf_open (path, SFM_WRITE, &info);
  g_assert_nonnull (f);
  g_autofree float *frames = g_new (float, MAX (n * channels, 1));
  for (gsize i = 0; i < n; i++)
    for (int c = 0; c < channels; c++)
      frames[i * channels + c] = pcm[i];
  g_assert_cmpint (sf_writef_float (f, frames, (sf_count_t) n), ==, (sf_count_t) n);
  g_assert_cmpint (sf_close (f), ==, 0);
}

/* Reads a mono WAV exactly as stored (no resampling, NaN kept); asserts the rate. */
static inline float *
wav_read (const char *path, int expected_rate, gsize *n)
{
  SF_INFO info = {0};
  SNDFILE *f = sf_open (path, SFM_READ, &info);
  if (!f)
    g_error ("%s: %s", path, sf_strerror (NULL));
  g_assert_cmpint (info.channels, ==, 1);
  g_assert_cmpint (info.samplerate, ==, expected_rate);
  g_assert_cmpint (info.format & SF_FORMAT_SUBMASK, ==, SF_FORMAT_FLOAT);
  float *pcm = g_new (float, MAX (info.frames, 1));
  g_assert_cmpint (sf_readf_float (f, pcm, info.frames), ==, info.frames);
  sf_close (f);
  *n = (gsize) info.frames;
  return pcm;
}

/* A test signal: a few sines and a little deterministic noise. */
static inline float *
test_signal (gsize n, int rate)
{
  float *pcm = g_new (float, MAX (n, 1));
  guint32 x = 12345;
  for (gsize i = 0; i < n; i++) {
    x = x * 1664525u + 1013904223u;
    double t = (double) i / rate;
    pcm[i] = (float) (0.3 * sin (2 * G_PI * 220 * t) + 0.2 * sin (2 * G_PI * 1375 * t) +
                      0.05 * ((x >> 8) / 16777216.0 - 0.5));
  }
  return pcm;
}

/* A deterministic random tiny model directory (personaplex-make-model --preset tiny) at DIR/name. */
static inline char *
make_tiny_model (const char *dir, const char *name)
{
  char *out = g_build_filename (dir, name, NULL);
  ToolResult r = tool_run (tool_path ("PPX_MAKE_MODEL", "personaplex-make-model"), "--output-dir", out,
                           "--preset", "tiny");
  tool_assert_ok (&r);
  tool_result_clear (&r);
  return out;
}

#endif
