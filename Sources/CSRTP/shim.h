// libsrtp2, for SRTP/SRTCP protection of media (RFC 3711, keyed by DTLS-SRTP, RFC 5764).
#ifndef RTC_CSRTP_SHIM_H
#define RTC_CSRTP_SHIM_H
#include <string.h>
#include <srtp2/srtp.h>

/// SRTP protection profile IDs of RFC 5764 §4.1.2 and RFC 7714 §14.2.
enum { RTC_SRTP_AES128_CM_SHA1_80 = 1, RTC_SRTP_AEAD_AES_128_GCM = 7 };

/// Creates a session for every inbound (or outbound) SSRC with one master key and salt.
/// Streams for new SSRCs are added on the fly from this template.
static inline srtp_err_status_t rtc_srtp_create(srtp_t *session, int profile, const unsigned char *key_and_salt,
                                                int inbound, unsigned long window) {
    srtp_policy_t policy;
    memset(&policy, 0, sizeof policy);
    if (profile == RTC_SRTP_AEAD_AES_128_GCM) {
        srtp_crypto_policy_set_aes_gcm_128_16_auth(&policy.rtp);
        srtp_crypto_policy_set_aes_gcm_128_16_auth(&policy.rtcp);
    } else {
        srtp_crypto_policy_set_rtp_default(&policy.rtp);
        srtp_crypto_policy_set_rtcp_default(&policy.rtcp);
    }
    policy.ssrc.type = inbound ? ssrc_any_inbound : ssrc_any_outbound;
    policy.key = (unsigned char *)key_and_salt;
    policy.window_size = window;
    policy.allow_repeat_tx = 1;  /* retransmissions from a NACK cache re-send the same index */
    policy.next = NULL;
    return srtp_create(session, &policy);
}
#endif
