// SCTP over DTLS (RFC 8261) for WebRTC data channels, over Debian's libusrsctp (libusrsctp-dev) in
// its AF_CONN mode: SCTP packets are not sent on a socket but handed to the owner, which carries
// them in DTLS, and what DTLS decrypts is fed back in. usrsctp runs without threads of its own
// (usrsctp_init_nothreads): its timers are driven by rtc_sctp_handle_timers, called every 10 ms by
// one thread of the process. Every call into usrsctp goes through one process-wide (recursive)
// lock, so the timer thread and the transports' event loops never run usrsctp at once; callbacks
// run inside it and must not call back into this shim.
#ifndef RTC_SCTP_H
#define RTC_SCTP_H
#include <stddef.h>
#include <stdint.h>

typedef struct rtc_sctp rtc_sctp;

typedef struct {
    /// An SCTP packet to carry in DTLS to the peer.
    void (*output)(void *owner, const uint8_t *packet, size_t length);
    /// A whole message on `stream` with payload protocol id `ppid` (reassembled).
    void (*message)(void *owner, uint16_t stream, uint32_t ppid, const uint8_t *data, size_t length);
    /// The association came up (1) or went down (0).
    void (*state)(void *owner, int up);
    /// The peer reset `stream` (it closed the data channel on it).
    void (*stream_reset)(void *owner, uint16_t stream);
} rtc_sctp_callbacks;

/// Starts an association to the peer's SCTP port from `local_port` (both 5000 by default in SDP);
/// messages larger than `max_message_size` are refused by rtc_sctp_send and dropped when received.
/// Returns NULL with the reason in `error`.
rtc_sctp *rtc_sctp_create(void *owner, rtc_sctp_callbacks callbacks, uint16_t local_port, uint16_t remote_port,
                          size_t max_message_size, char *error, size_t error_size);

/// Sends INIT (both sides do, as browsers do; SCTP resolves the collision).
int rtc_sctp_connect(rtc_sctp *sctp);

/// One SCTP packet DTLS decrypted from the peer.
void rtc_sctp_input(rtc_sctp *sctp, const uint8_t *data, size_t length);

/// Queues a message: ordered or not, and partially reliable (policy 0 none, 1 max retransmits,
/// 2 lifetime in ms, as RFC 8831 §6.6). Returns 0, or -1 with errno-like `*code` (EMSGSIZE, ENOBUFS…).
int rtc_sctp_send(rtc_sctp *sctp, uint16_t stream, uint32_t ppid, const uint8_t *data, size_t length,
                  int unordered, int policy, uint32_t value, int *code);

/// Resets the outgoing `stream` (closing a data channel, RFC 8831 §6.7).
int rtc_sctp_reset_stream(rtc_sctp *sctp, uint16_t stream);

/// From now on no callback runs for this association (its owner is going away).
void rtc_sctp_silence(rtc_sctp *sctp);

/// Aborts the association (the ABORT goes through the output callback unless silenced) and frees
/// it; no callback runs for it afterwards.
void rtc_sctp_free(rtc_sctp *sctp);

/// Advances usrsctp's timers by `elapsed_ms` (retransmissions, heartbeats).
void rtc_sctp_handle_timers(uint32_t elapsed_ms);

/// Feeds arbitrary bytes to a throwaway association (fuzzing the shim's input path).
void rtc_sctp_fuzz_input(const uint8_t *data, size_t length);

#endif
