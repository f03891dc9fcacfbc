/* personaplex-server: TLS certificates (server-tls.h). */
#include "server-tls.h"

#include <errno.h>
#include <glib/gstdio.h>
#include <gnutls/gnutls.h>
#include <gnutls/x509.h>
#include <string.h>
#include <time.h>

#define VALID_DAYS 365

static GQuark
tls_error_quark (void)
{
  return g_quark_from_static_string ("ppx-server-tls");
}

GTlsCertificate *
ppx_server_tls_load (const char *cert, const char *key, GError **error)
{
  g_autoptr (GError) e = NULL;
  GTlsCertificate *c = g_tls_certificate_new_from_files (cert, key, &e);
  if (!c)
    g_set_error (error, tls_error_quark (), 0, "TLS certificate %s with key %s: %s", cert, key, e->message);
  return c;
}

static gboolean
gnutls_ok (int rc, const char *what, GError **error)
{
  if (rc >= 0)
    return TRUE;
  g_set_error (error, tls_error_quark (), 0, "making a self-signed certificate: %s: %s", what, gnutls_strerror (rc));
  return FALSE;
}

static gboolean
export_pem (int rc, gnutls_datum_t *pem, const char *path, int mode, GError **error)
{
  if (!gnutls_ok (rc, path, error))
    return FALSE;
  gboolean ok = g_file_set_contents_full (path, (const char *) pem->data, pem->size, G_FILE_SET_CONTENTS_CONSISTENT,
                                          mode, error);
  gnutls_free (pem->data);
  return ok;
}

/* A self-signed ECDSA P-256 certificate for localhost, the loopback addresses and `address`. */
static gboolean
make_pair (const char *cert_path, const char *key_path, const char *address, GError **error)
{
  gnutls_x509_privkey_t key = NULL;
  gnutls_x509_crt_t crt = NULL;
  gnutls_datum_t pem = {NULL, 0};
  guint8 serial[16];
  for (guint i = 0; i < sizeof serial; i++)
    serial[i] = (guint8) g_random_int_range (0, 256);
  serial[0] &= 0x7f; /* a positive serial number */
  time_t now = time (NULL);
  gboolean ok = gnutls_ok (gnutls_x509_privkey_init (&key), "key", error) &&
                gnutls_ok (gnutls_x509_privkey_generate (key, GNUTLS_PK_ECDSA,
                                                         GNUTLS_CURVE_TO_BITS (GNUTLS_ECC_CURVE_SECP256R1), 0),
                           "key generation", error) &&
                gnutls_ok (gnutls_x509_crt_init (&crt), "certificate", error) &&
                gnutls_ok (gnutls_x509_crt_set_version (crt, 3), "version", error) &&
                gnutls_ok (gnutls_x509_crt_set_serial (crt, serial, sizeof serial), "serial", error) &&
                gnutls_ok (gnutls_x509_crt_set_activation_time (crt, now - 3600), "activation", error) &&
                gnutls_ok (gnutls_x509_crt_set_expiration_time (crt, now + VALID_DAYS * 86400), "expiration", error) &&
                gnutls_ok (gnutls_x509_crt_set_dn_by_oid (crt, GNUTLS_OID_X520_COMMON_NAME, 0, "localhost",
                                                          strlen ("localhost")), "name", error) &&
                gnutls_ok (gnutls_x509_crt_set_subject_alt_name (crt, GNUTLS_SAN_DNSNAME, "localhost",
                                                                 strlen ("localhost"), GNUTLS_FSAN_APPEND),
                           "DNS name", error) &&
                gnutls_ok (gnutls_x509_crt_set_key (crt, key), "public key", error) &&
                gnutls_ok (gnutls_x509_crt_set_basic_constraints (crt, 0, -1), "constraints", error) &&
                gnutls_ok (gnutls_x509_crt_set_key_usage (crt, GNUTLS_KEY_DIGITAL_SIGNATURE), "key usage", error) &&
                gnutls_ok (gnutls_x509_crt_set_key_purpose_oid (crt, GNUTLS_KP_TLS_WWW_SERVER, 0), "purpose", error);
  const char *ips[] = {"127.0.0.1", "::1", address};
  for (guint i = 0; ok && i < G_N_ELEMENTS (ips); i++) {
    g_autoptr (GInetAddress) inet = ips[i] ? g_inet_address_new_from_string (ips[i]) : NULL;
    if (!inet || g_inet_address_get_is_any (inet) || (i == 2 && g_inet_address_get_is_loopback (inet)))
      continue;
    ok = gnutls_ok (gnutls_x509_crt_set_subject_alt_name (crt, GNUTLS_SAN_IPADDRESS,
                                                          g_inet_address_to_bytes (inet),
                                                          (unsigned) g_inet_address_get_native_size (inet),
                                                          GNUTLS_FSAN_APPEND), "address", error);
  }
  ok = ok && gnutls_ok (gnutls_x509_crt_sign2 (crt, crt, key, GNUTLS_DIG_SHA256, 0), "signing", error) &&
       export_pem (gnutls_x509_privkey_export2 (key, GNUTLS_X509_FMT_PEM, &pem), &pem, key_path, 0600, error) &&
       export_pem (gnutls_x509_crt_export2 (crt, GNUTLS_X509_FMT_PEM, &pem), &pem, cert_path, 0644, error);
  if (crt)
    gnutls_x509_crt_deinit (crt);
  if (key)
    gnutls_x509_privkey_deinit (key);
  return ok;
}

GTlsCertificate *
ppx_server_tls_from_dir (const char *dir, const char *address, gboolean *made, GError **error)
{
  g_autofree char *cert = g_build_filename (dir, "cert.pem", NULL);
  g_autofree char *key = g_build_filename (dir, "key.pem", NULL);
  *made = FALSE;
  if (!g_file_test (cert, G_FILE_TEST_EXISTS) && !g_file_test (key, G_FILE_TEST_EXISTS)) {
    if (g_mkdir_with_parents (dir, 0700) != 0) {
      g_set_error (error, tls_error_quark (), 0, "--ssl-dir %s: cannot create it: %s", dir, g_strerror (errno));
      return NULL;
    }
    if (!make_pair (cert, key, address, error))
      return NULL;
    *made = TRUE;
  }
  return ppx_server_tls_load (cert, key, error);
}
