/* personaplex-server: the page and --static files (server-static.h). */
#include "server-static.h"

#include <stdlib.h>
#include <string.h>

#define RESOURCE_PREFIX "/org/personaplex/webrtc/"
#define PAGE_PATH "/webrtc/"
#define MAX_STATIC_FILE (256 * 1024 * 1024)

static const struct {
  const char *name, *content_type;
} page_files[] = {
  {"index.html", "text/html; charset=utf-8"},
  {"app.js", "text/javascript; charset=utf-8"},
  {"style.css", "text/css; charset=utf-8"},
};

static const struct {
  const char *suffix, *content_type;
} types[] = {
  {".html", "text/html; charset=utf-8"},   {".htm", "text/html; charset=utf-8"},
  {".js", "text/javascript; charset=utf-8"}, {".mjs", "text/javascript; charset=utf-8"},
  {".css", "text/css; charset=utf-8"},     {".json", "application/json"},
  {".map", "application/json"},            {".webmanifest", "application/manifest+json"},
  {".wasm", "application/wasm"},           {".svg", "image/svg+xml"},
  {".png", "image/png"},                   {".jpg", "image/jpeg"},
  {".jpeg", "image/jpeg"},                 {".gif", "image/gif"},
  {".webp", "image/webp"},                 {".ico", "image/x-icon"},
  {".woff", "font/woff"},                  {".woff2", "font/woff2"},
  {".ttf", "font/ttf"},                    {".txt", "text/plain; charset=utf-8"},
  {".wav", "audio/wav"},                   {".mp3", "audio/mpeg"},
  {".ogg", "audio/ogg"},                   {".webm", "video/webm"},
};

static const char *
content_type_of (const char *path)
{
  g_autofree char *lower = g_ascii_strdown (path, -1);
  for (guint i = 0; i < G_N_ELEMENTS (types); i++)
    if (g_str_has_suffix (lower, types[i].suffix))
      return types[i].content_type;
  return "application/octet-stream";
}

static void
respond (SoupServerMessage *msg, const char *content_type, GBytes *bytes)
{
  SoupMessageHeaders *headers = soup_server_message_get_response_headers (msg);
  soup_message_headers_replace (headers, "X-Content-Type-Options", "nosniff");
  soup_message_headers_replace (headers, "Cache-Control", "no-cache");
  soup_message_headers_set_content_type (headers, content_type, NULL);
  if (g_bytes_get_size (bytes)) /* libsoup refuses an empty chunk; an empty file is an empty body */
    soup_message_body_append_bytes (soup_server_message_get_response_body (msg), bytes);
  soup_server_message_set_status (msg, SOUP_STATUS_OK, NULL);
}

static gboolean
serve_page (SoupServerMessage *msg, const char *name)
{
  if (!*name)
    name = "index.html";
  for (guint i = 0; i < G_N_ELEMENTS (page_files); i++) {
    if (!g_str_equal (name, page_files[i].name))
      continue;
    g_autofree char *resource = g_strconcat (RESOURCE_PREFIX, name, NULL);
    g_autoptr (GBytes) bytes = g_resources_lookup_data (resource, G_RESOURCE_LOOKUP_FLAGS_NONE, NULL);
    if (!bytes)
      return FALSE;
    /* Everything comes from this server: no other script, style, image or connection. */
    soup_message_headers_replace (soup_server_message_get_response_headers (msg), "Content-Security-Policy",
                                  "default-src 'self'; connect-src 'self'");
    respond (msg, page_files[i].content_type, bytes);
    return TRUE;
  }
  return FALSE;
}

/* DIR/path when it names a regular file inside DIR (after resolving links), else NULL. */
static char *
static_file (const char *dir, const char *path)
{
  g_auto (GStrv) parts = g_strsplit (path, "/", -1);
  for (guint i = 0; parts[i]; i++)
    if (parts[i][0] == '.' || strchr (parts[i], '\\'))
      return NULL; /* "..", hidden files */
  const char *rel = path[0] == '/' ? path + 1 : path;
  g_autofree char *file = g_build_filename (dir, *rel ? rel : "index.html", NULL);
  g_autofree char *real_dir = g_canonicalize_filename (dir, NULL);
  g_autofree char *real = realpath (file, NULL);
  g_autofree char *real_root = realpath (real_dir, NULL);
  if (!real || !real_root || !g_str_has_prefix (real, real_root) || real[strlen (real_root)] != '/')
    return NULL;
  if (!g_file_test (real, G_FILE_TEST_IS_REGULAR))
    return NULL;
  return g_steal_pointer (&file);
}

static gboolean
serve_static (SoupServerMessage *msg, const char *path, const char *dir)
{
  g_autofree char *file = static_file (dir, path);
  if (!file)
    return FALSE;
  g_autoptr (GMappedFile) mapped = g_mapped_file_new (file, FALSE, NULL);
  if (!mapped || g_mapped_file_get_length (mapped) > MAX_STATIC_FILE)
    return FALSE;
  g_autoptr (GBytes) bytes = g_mapped_file_get_bytes (mapped);
  respond (msg, content_type_of (file), bytes);
  return TRUE;
}

void
ppx_server_static_serve (SoupServerMessage *msg, const char *path, const char *static_dir)
{
  const char *method = soup_server_message_get_method (msg);
  if (method != SOUP_METHOD_GET && method != SOUP_METHOD_HEAD) {
    soup_server_message_set_status (msg, SOUP_STATUS_METHOD_NOT_ALLOWED, NULL);
    return;
  }
  gboolean served;
  if (g_str_equal (path, "/webrtc")) {
    soup_server_message_set_redirect (msg, SOUP_STATUS_MOVED_PERMANENTLY, PAGE_PATH);
    return;
  }
  if (g_str_has_prefix (path, PAGE_PATH))
    served = serve_page (msg, path + strlen (PAGE_PATH));
  else if (static_dir)
    served = serve_static (msg, path, static_dir);
  else
    served = g_str_equal (path, "/") ? serve_page (msg, "") : serve_page (msg, path + 1);
  if (!served)
    soup_server_message_set_status (msg, SOUP_STATUS_NOT_FOUND, NULL);
}
