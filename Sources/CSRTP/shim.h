// libsrtp2, for SRTP/SRTCP protection of media (RFC 3711, keyed by DTLS-SRTP, RFC 5764).
#ifndef RTC_CSRTP_SHIM_H
#define RTC_CSRTP_SHIM_H
#include <srtp2/srtp.h>
#endif
