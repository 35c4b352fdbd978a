#define _GNU_SOURCE
#include "rtc_datagram.h"
#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>

struct rtc_datagram_batch {
    int family;
    int count;
    struct mmsghdr messages[RTC_DATAGRAM_BATCH_CAPACITY];
    struct iovec vectors[RTC_DATAGRAM_BATCH_CAPACITY];
    struct sockaddr_storage addresses[RTC_DATAGRAM_BATCH_CAPACITY];
};

rtc_datagram_batch *rtc_datagram_batch_create(int family) {
    if (family != AF_INET && family != AF_INET6) return NULL;
    rtc_datagram_batch *batch = calloc(1, sizeof(*batch));
    if (batch == NULL) return NULL;
    batch->family = family;
    for (int i = 0; i < RTC_DATAGRAM_BATCH_CAPACITY; i++) {
        batch->messages[i].msg_hdr.msg_iov = &batch->vectors[i];
        batch->messages[i].msg_hdr.msg_iovlen = 1;
        batch->messages[i].msg_hdr.msg_name = &batch->addresses[i];
    }
    return batch;
}

void rtc_datagram_batch_destroy(rtc_datagram_batch *batch) { free(batch); }

int rtc_datagram_batch_count(const rtc_datagram_batch *batch) { return batch->count; }

int rtc_datagram_batch_add(rtc_datagram_batch *batch, const void *bytes, size_t length,
                           const struct sockaddr *address, socklen_t address_length) {
    if (batch->count >= RTC_DATAGRAM_BATCH_CAPACITY) return -1;
    int i = batch->count;
    struct sockaddr_storage *slot = &batch->addresses[i];
    socklen_t slot_length;
    if (address->sa_family == batch->family) {
        if (address_length > sizeof(*slot)) return -1;
        memcpy(slot, address, address_length);
        slot_length = address_length;
    } else if (address->sa_family == AF_INET && batch->family == AF_INET6 && address_length >= sizeof(struct sockaddr_in)) {
        // A dual-stack socket reaches an IPv4 peer at ::ffff:a.b.c.d.
        rtc_datagram_map_v4((const struct sockaddr_in *)address, (struct sockaddr_in6 *)slot);
        slot_length = sizeof(struct sockaddr_in6);
    } else {
        return -1;
    }
    batch->vectors[i].iov_base = (void *)bytes;
    batch->vectors[i].iov_len = length;
    batch->messages[i].msg_hdr.msg_namelen = slot_length;
    batch->count = i + 1;
    return 0;
}

void rtc_datagram_map_v4(const struct sockaddr_in *v4, struct sockaddr_in6 *v6) {
    memset(v6, 0, sizeof(*v6));
    v6->sin6_family = AF_INET6;
    v6->sin6_port = v4->sin_port;
    v6->sin6_addr.s6_addr[10] = 0xff;
    v6->sin6_addr.s6_addr[11] = 0xff;
    memcpy(&v6->sin6_addr.s6_addr[12], &v4->sin_addr, 4);
}

void rtc_datagram_batch_clear(rtc_datagram_batch *batch) { batch->count = 0; }

rtc_datagram_result rtc_datagram_batch_send(rtc_datagram_batch *batch, int fd) {
    rtc_datagram_result result = {0, 0, 0, 0};
    int next = 0;
    while (next < batch->count) {
        int done = sendmmsg(fd, &batch->messages[next], (unsigned int)(batch->count - next), 0);
        if (done > 0) {
            result.sent += done;
            next += done;
            continue;
        }
        if (done < 0 && errno == EINTR) continue;
        if (done < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            // The socket's send buffer is full: what is left of this batch is lost, as on a wire.
            result.dropped += batch->count - next;
            break;
        }
        if (done < 0 && errno == ENOBUFS) {
            // The queue of the device this one datagram goes out on is full (a rate-limited
            // link): lost; the others, for other devices, still go.
            result.dropped += 1;
            next += 1;
            continue;
        }
        if (done < 0 && (errno == EBADF || errno == ENOTSOCK)) {
            result.dropped += batch->count - next;
            result.last_error = errno;
            break;
        }
        // This one datagram is refused (EPERM, EACCES, EHOSTUNREACH, EMSGSIZE, ...): skip it.
        result.refused += 1;
        result.last_error = done < 0 ? errno : 0;
        next += 1;
    }
    batch->count = 0;
    return result;
}
