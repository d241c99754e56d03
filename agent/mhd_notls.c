#include <stdlib.h>

#include "log.h"

/*
 * The agent serves plain HTTP only (a unix socket or the pod network;
 * TLS ends at nginx), but Debian's libmicrohttpd is built with HTTPS
 * support: the shared library pulls in GnuTLS and its eight dependencies
 * (p11-kit, nettle, hogweed, gmp, tasn1, unistring, idn2, ffi), about
 * 2.3 MiB of resident memory in every agent, from relocations and from
 * the gnutls_global_init that libmicrohttpd's own constructor calls.
 *
 * So the agent links libmicrohttpd statically (Makefile) and resolves its
 * GnuTLS references here: global init and deinit succeed and do nothing;
 * everything else belongs to an MHD_USE_TLS daemon, which the agent never
 * starts (server.c), and aborts loudly if it is ever reached. The list is
 * exactly the undefined gnutls_* symbols of libmicrohttpd.a (nm -u): a new
 * one shows up as a link error. The stubs are hidden, so no library the
 * agent loads later can bind to them instead of the real GnuTLS.
 */

#define NOTLS_HIDDEN __attribute__((visibility("hidden")))

static void __attribute__((noreturn)) notls(const char *fn)
{
	orc_log(ORC_LOG_ERROR, "TLS called in an agent built without it", "function", fn, NULL);
	abort();
}

/* Arguments and results are ignored: none of these ever returns. */
#define NOTLS(fn) \
	NOTLS_HIDDEN int fn(void); \
	NOTLS_HIDDEN int fn(void) { notls(#fn); }

NOTLS_HIDDEN int gnutls_global_init(void);
NOTLS_HIDDEN int gnutls_global_init(void)
{
	return 0;
}

NOTLS_HIDDEN void gnutls_global_deinit(void);
NOTLS_HIDDEN void gnutls_global_deinit(void)
{
}

/* A variable in GnuTLS (gnutls_alloc_function), called by MHD's PSK code. */
NOTLS_HIDDEN void *(*gnutls_malloc)(size_t) = malloc;

NOTLS(gnutls_alpn_set_protocols)
NOTLS(gnutls_bye)
NOTLS(gnutls_certificate_allocate_credentials)
NOTLS(gnutls_certificate_free_credentials)
NOTLS(gnutls_certificate_server_set_request)
NOTLS(gnutls_certificate_set_dh_params)
NOTLS(gnutls_certificate_set_retrieve_function2)
NOTLS(gnutls_certificate_set_retrieve_function3)
NOTLS(gnutls_certificate_set_x509_key_mem)
NOTLS(gnutls_certificate_set_x509_key_mem2)
NOTLS(gnutls_certificate_set_x509_trust_mem)
NOTLS(gnutls_cipher_get)
NOTLS(gnutls_credentials_set)
NOTLS(gnutls_deinit)
NOTLS(gnutls_dh_params_deinit)
NOTLS(gnutls_dh_params_import_pkcs3)
NOTLS(gnutls_dh_params_init)
NOTLS(gnutls_handshake)
NOTLS(gnutls_init)
NOTLS(gnutls_priority_deinit)
NOTLS(gnutls_priority_init)
NOTLS(gnutls_priority_set)
NOTLS(gnutls_protocol_get_version)
NOTLS(gnutls_psk_allocate_server_credentials)
NOTLS(gnutls_psk_free_server_credentials)
NOTLS(gnutls_psk_set_server_credentials_function)
NOTLS(gnutls_record_check_pending)
NOTLS(gnutls_record_get_direction)
NOTLS(gnutls_record_recv)
NOTLS(gnutls_record_send)
NOTLS(gnutls_session_get_ptr)
NOTLS(gnutls_session_set_ptr)
NOTLS(gnutls_strerror)
NOTLS(gnutls_transport_set_int2)
