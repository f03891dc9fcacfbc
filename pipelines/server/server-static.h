/* personaplex-server: files over HTTP. The built-in WebRTC page (compiled in as a GResource) at /webrtc/, and at
 * / unless --static DIR is given: then DIR (a built web client such as the reference client's Vite dist/) is
 * served at /, index.html for / and every file below DIR by its path, with the content type of its extension.
 * Only GET and HEAD; nothing outside DIR (no "..", no hidden files, symbolic links only to files inside DIR). */
#ifndef PPX_SERVER_STATIC_H
#define PPX_SERVER_STATIC_H

#include <libsoup/soup.h>

G_BEGIN_DECLS

/* Answers `msg` for `path` from the built-in page or from `static_dir` (NULL: none): 200, 404 or 405. */
void ppx_server_static_serve (SoupServerMessage *msg, const char *path, const char *static_dir);

G_END_DECLS
#endif
