// OpenSSL 3.0 for DTLS 1.2, with wrappers for the macros Swift cannot import.
#ifndef RTC_COPENSSL_SHIM_H
#define RTC_COPENSSL_SHIM_H
#include <openssl/ssl.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/x509.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <openssl/crypto.h>
#include <openssl/sha.h>
#include <openssl/core_names.h>
#include <openssl/params.h>
#include <string.h>

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
// TLS over streams (TLSStream): version floor, SNI and the memory BIO's "empty is retry".
static inline long rtc_ssl_ctx_set_min_tls12(SSL_CTX *ctx) { return SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION); }
static inline long rtc_ssl_set_sni(SSL *ssl, const char *name) { return SSL_set_tlsext_host_name(ssl, name); }
static inline long rtc_bio_set_mem_retry(BIO *bio) { return BIO_set_mem_eof_return(bio, -1); }
static inline void rtc_ssl_ctx_harden(SSL_CTX *ctx) {
    SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION);
    SSL_CTX_set_mode(ctx, SSL_MODE_RELEASE_BUFFERS);
}

/// HMAC-SHA1 (RFC 2104) for SRTP authentication (RFC 3711 §4.2.1), keyed once: the inner and
/// outer SHA-1 states after the padded key are kept by value, so a packet's tag costs a copy of
/// two small structs and the hashing, with no allocation. (EVP's HMAC duplicates a provider
/// context per message, which allocates; the SHA1_* functions run the same assembly.)
typedef struct rtc_hmac_sha1_key { SHA_CTX inner; SHA_CTX outer; } rtc_hmac_sha1_key;

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
static inline void rtc_hmac_sha1_init(rtc_hmac_sha1_key *state, const unsigned char *key, size_t key_length) {
    unsigned char block[SHA_CBLOCK];
    unsigned char hashed[SHA_DIGEST_LENGTH];
    if (key_length > SHA_CBLOCK) {
        SHA1(key, key_length, hashed);
        key = hashed;
        key_length = SHA_DIGEST_LENGTH;
    }
    memset(block, 0x36, sizeof block);
    for (size_t i = 0; i < key_length; i++) block[i] ^= key[i];
    SHA1_Init(&state->inner);
    SHA1_Update(&state->inner, block, sizeof block);
    memset(block, 0x5c, sizeof block);
    for (size_t i = 0; i < key_length; i++) block[i] ^= key[i];
    SHA1_Init(&state->outer);
    SHA1_Update(&state->outer, block, sizeof block);
    OPENSSL_cleanse(block, sizeof block);
}

/// The 20-byte HMAC of `data` followed by `trailer` (SRTP's ROC; may be empty).
static inline void rtc_hmac_sha1(const rtc_hmac_sha1_key *state, const void *data, size_t length,
                                 const void *trailer, size_t trailer_length, unsigned char out[SHA_DIGEST_LENGTH]) {
    SHA_CTX context = state->inner;
    unsigned char inner[SHA_DIGEST_LENGTH];
    SHA1_Update(&context, data, length);
    if (trailer_length > 0) SHA1_Update(&context, trailer, trailer_length);
    SHA1_Final(inner, &context);
    context = state->outer;
    SHA1_Update(&context, inner, sizeof inner);
    SHA1_Final(out, &context);
}
#pragma GCC diagnostic pop

/// The GCM tag, read after `EVP_CipherFinal_ex` (encrypting) or given before it (decrypting), as
/// the cipher's "tag" parameter: what `EVP_CIPHER_CTX_ctrl(EVP_CTRL_GCM_GET_TAG)` does in OpenSSL 3,
/// without building the parameter list from the control code first (about half its cost per packet).
static inline int rtc_gcm_get_tag(EVP_CIPHER_CTX *ctx, unsigned char *tag, int length) {
    OSSL_PARAM params[2] = {
        OSSL_PARAM_construct_octet_string(OSSL_CIPHER_PARAM_AEAD_TAG, tag, (size_t)length), OSSL_PARAM_construct_end()
    };
    return EVP_CIPHER_CTX_get_params(ctx, params);
}
static inline int rtc_gcm_set_tag(EVP_CIPHER_CTX *ctx, unsigned char *tag, int length) {
    OSSL_PARAM params[2] = {
        OSSL_PARAM_construct_octet_string(OSSL_CIPHER_PARAM_AEAD_TAG, tag, (size_t)length), OSSL_PARAM_construct_end()
    };
    return EVP_CIPHER_CTX_set_params(ctx, params);
}
#endif
