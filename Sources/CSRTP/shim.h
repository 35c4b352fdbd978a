// libsrtp2, linked by the tests alone: an independent SRTP implementation (Debian's, on NSS)
// that the SDK's own SRTP over OpenSSL is checked against, packet for packet.
#ifndef RTC_CSRTP_SHIM_H
#define RTC_CSRTP_SHIM_H
#include <string.h>
#include <srtp2/srtp.h>

/// SRTP protection profile ids of RFC 5764 §4.1.2 and RFC 7714 §14.2.
enum {
    RTC_SRTP_AES128_CM_SHA1_80 = 1, RTC_SRTP_AES128_CM_SHA1_32 = 2,
    RTC_SRTP_AEAD_AES_128_GCM = 7, RTC_SRTP_AEAD_AES_256_GCM = 8
};

/// A session for one direction: `inbound` for what the peer sends (any SSRC), outbound for what
/// this side sends. `key` is the master key followed by the master salt.
static inline srtp_err_status_t rtc_srtp_oracle_create(srtp_t *session, int profile, const unsigned char *key,
                                                       int inbound, unsigned long window) {
    srtp_policy_t policy;
    memset(&policy, 0, sizeof policy);
    switch (profile) {
    case RTC_SRTP_AES128_CM_SHA1_32:
        srtp_crypto_policy_set_aes_cm_128_hmac_sha1_32(&policy.rtp);
        srtp_crypto_policy_set_rtcp_default(&policy.rtcp);
        break;
    case RTC_SRTP_AEAD_AES_128_GCM:
        srtp_crypto_policy_set_aes_gcm_128_16_auth(&policy.rtp);
        srtp_crypto_policy_set_aes_gcm_128_16_auth(&policy.rtcp);
        break;
    case RTC_SRTP_AEAD_AES_256_GCM:
        srtp_crypto_policy_set_aes_gcm_256_16_auth(&policy.rtp);
        srtp_crypto_policy_set_aes_gcm_256_16_auth(&policy.rtcp);
        break;
    default:
        srtp_crypto_policy_set_rtp_default(&policy.rtp);
        srtp_crypto_policy_set_rtcp_default(&policy.rtcp);
    }
    policy.ssrc.type = inbound ? ssrc_any_inbound : ssrc_any_outbound;
    policy.key = (unsigned char *)key;
    policy.window_size = window;
    policy.allow_repeat_tx = 1;
    return srtp_create(session, &policy);
}
#endif
