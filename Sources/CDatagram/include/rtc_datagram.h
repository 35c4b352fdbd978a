// A batch of UDP datagrams handed to the kernel with sendmmsg (RTCTransport's DatagramBatch).
#ifndef RTC_DATAGRAM_H
#define RTC_DATAGRAM_H
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

/// The datagrams one batch holds at most: a fan-out of more is sent in several calls.
#define RTC_DATAGRAM_BATCH_CAPACITY 64

typedef struct rtc_datagram_batch rtc_datagram_batch;

/// What one send did: datagrams the kernel took, refused one by one (EPERM from a firewall, no
/// route, too big: each skipped and the rest sent), and dropped: the rest of the batch when the
/// socket's send buffer was full (EAGAIN), one datagram when its device's queue was (ENOBUFS).
typedef struct {
    int sent;
    int refused;
    int dropped;
    /// The errno of the last refusal (0 when none).
    int last_error;
} rtc_datagram_result;

/// A batch for a socket of `family` (AF_INET or AF_INET6; an AF_INET6 socket is dual-stack: IPv4
/// destinations go out as IPv4-mapped addresses). NULL when out of memory.
rtc_datagram_batch *rtc_datagram_batch_create(int family);
void rtc_datagram_batch_destroy(rtc_datagram_batch *batch);

/// Datagrams queued and not yet sent.
int rtc_datagram_batch_count(const rtc_datagram_batch *batch);

/// Queues `length` bytes at `bytes` (they must stay valid and unchanged until the next send) to
/// `address`. Returns 0, or -1 when the batch is full (send first) or the address is of a family
/// the socket cannot send to (nothing queued).
int rtc_datagram_batch_add(rtc_datagram_batch *batch, const void *bytes, size_t length,
                           const struct sockaddr *address, socklen_t address_length);

struct sockaddr_in;
struct sockaddr_in6;
/// `v4` as a dual-stack IPv6 socket reaches it: `::ffff:a.b.c.d` (RFC 4291 §2.5.5.2), same port.
/// The one implementation of the mapping (the batch's sends and RTCTransport's `DualStack.mapped`).
void rtc_datagram_map_v4(const struct sockaddr_in *v4, struct sockaddr_in6 *v6);

/// Forgets what is queued (nothing is sent).
void rtc_datagram_batch_clear(rtc_datagram_batch *batch);

/// Sends what is queued on `fd` and empties the batch, whatever the outcome.
rtc_datagram_result rtc_datagram_batch_send(rtc_datagram_batch *batch, int fd);

#endif
