// OpenSSL 3.0 for DTLS 1.2, with wrappers for the macros Swift cannot import.
#ifndef RTC_COPENSSL_SHIM_H
#define RTC_COPENSSL_SHIM_H
#include <openssl/ssl.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/x509.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

static inline long rtc_ssl_ctx_set_min_dtls12(SSL_CTX *ctx) { return SSL_CTX_set_min_proto_version(ctx, DTLS1_2_VERSION); }
static inline long rtc_ssl_ctx_set_read_ahead(SSL_CTX *ctx, int on) { return SSL_CTX_set_read_ahead(ctx, on); }
static inline long rtc_ssl_set_mtu(SSL *ssl, long mtu) {
    SSL_set_options(ssl, SSL_OP_NO_QUERY_MTU);
    return SSL_set_mtu(ssl, mtu);
}
static inline long rtc_dtls_get_timeout(SSL *ssl, struct timeval *tv) { return DTLSv1_get_timeout(ssl, tv); }
static inline long rtc_dtls_handle_timeout(SSL *ssl) { return DTLSv1_handle_timeout(ssl); }
static inline size_t rtc_bio_pending(BIO *bio) { return BIO_ctrl_pending(bio); }
static inline void rtc_openssl_free(void *p) { OPENSSL_free(p); }
static inline EVP_PKEY *rtc_ec_p256_key(void) { return EVP_EC_gen("P-256"); }
static inline int rtc_ssl_is_init_finished(SSL *ssl) { return SSL_is_init_finished(ssl); }
static inline int rtc_ssl_received_shutdown(SSL *ssl) { return (SSL_get_shutdown(ssl) & SSL_RECEIVED_SHUTDOWN) != 0; }
static inline int rtc_verify_peer_flags(void) { return SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT; }
#endif
