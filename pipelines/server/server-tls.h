/* personaplex-server: TLS (HTTPS and WSS through libsoup's tls-certificate). --tls-cert/--tls-key load a PEM
 * pair; --ssl-dir DIR loads DIR/cert.pem and DIR/key.pem (the reference server's --ssl layout) and makes a
 * self-signed pair there first when they are missing (GnuTLS: ECDSA P-256, SHA-256, valid one year, for
 * localhost, 127.0.0.1, ::1 and the listening address). */
#ifndef PPX_SERVER_TLS_H
#define PPX_SERVER_TLS_H

#include <gio/gio.h>

G_BEGIN_DECLS

/* The certificate to serve with, or NULL with an error naming the file and the problem. */
GTlsCertificate *ppx_server_tls_load (const char *cert, const char *key, GError **error);
/* DIR/cert.pem + DIR/key.pem, made when missing (DIR created, the key readable by the owner only). */
GTlsCertificate *ppx_server_tls_from_dir (const char *dir, const char *address, gboolean *made, GError **error);

G_END_DECLS
#endif
