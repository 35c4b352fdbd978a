#include "rtc_sctp.h"

#include <arpa/inet.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <usrsctp.h>

struct rtc_sctp {
    void *owner;
    rtc_sctp_callbacks callbacks;
    struct socket *socket;
    uint16_t local_port, remote_port;
    size_t max_message_size;
    /// A message arriving in pieces (partial delivery), until MSG_EOR.
    uint8_t *pending;
    size_t pending_size, pending_capacity;
    int pending_too_large;
};

static pthread_mutex_t lock;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static int conn_output(void *addr, void *buffer, size_t length, uint8_t tos, uint8_t set_df) {
    (void)tos;
    (void)set_df;
    rtc_sctp *sctp = addr;
    if (sctp && sctp->callbacks.output) sctp->callbacks.output(sctp->owner, buffer, length);
    return 0;
}

static void initialize(void) {
    pthread_mutexattr_t attributes;
    pthread_mutexattr_init(&attributes);
    pthread_mutexattr_settype(&attributes, PTHREAD_MUTEX_RECURSIVE);
    pthread_mutex_init(&lock, &attributes);
    pthread_mutexattr_destroy(&attributes);
    usrsctp_init_nothreads(0, conn_output, NULL);
    // As browsers run it: no ECN, no ASCONF (streams: SCTP_INITMSG per socket).
    usrsctp_sysctl_set_sctp_ecn_enable(0);
    usrsctp_sysctl_set_sctp_asconf_enable(0);
    // Retransmission timers as libwebrtc's SCTP runs them: the backoff stops at 3 s (RFC 4960's
    // 60 s let a lossy path stall a reliable channel for minutes after a few lost retransmissions),
    // and an association survives 20 timeouts in a row rather than 10, so a long outage of the
    // path is still the media transport's to declare.
    usrsctp_sysctl_set_sctp_rto_initial_default(1000);
    usrsctp_sysctl_set_sctp_rto_min_default(400);
    usrsctp_sysctl_set_sctp_rto_max_default(3000);
    usrsctp_sysctl_set_sctp_assoc_rtx_max_default(20);
    usrsctp_sysctl_set_sctp_path_rtx_max_default(20);
}

static void notification(rtc_sctp *sctp, const union sctp_notification *note, size_t length) {
    if (length < sizeof(struct sctp_tlv)) return;
    switch (note->sn_header.sn_type) {
    case SCTP_ASSOC_CHANGE:
        if (length < sizeof(struct sctp_assoc_change)) return;
        switch (note->sn_assoc_change.sac_state) {
        case SCTP_COMM_UP:
        case SCTP_RESTART:
            if (sctp->callbacks.state) sctp->callbacks.state(sctp->owner, 1);
            break;
        case SCTP_COMM_LOST:
        case SCTP_SHUTDOWN_COMP:
        case SCTP_CANT_STR_ASSOC:
            if (sctp->callbacks.state) sctp->callbacks.state(sctp->owner, 0);
            break;
        default:
            break;
        }
        break;
    case SCTP_STREAM_RESET_EVENT: {
        const struct sctp_stream_reset_event *reset = &note->sn_strreset_event;
        if (length < sizeof *reset || !(reset->strreset_flags & SCTP_STREAM_RESET_INCOMING_SSN)) return;
        size_t count = (reset->strreset_length - sizeof *reset) / sizeof(uint16_t);
        if (reset->strreset_length > length) return;
        for (size_t i = 0; i < count; i++)
            if (sctp->callbacks.stream_reset) sctp->callbacks.stream_reset(sctp->owner, reset->strreset_stream_list[i]);
        break;
    }
    default:
        break;
    }
}

static int receive(struct socket *socket, union sctp_sockstore address, void *data, size_t length,
                   struct sctp_rcvinfo info, int flags, void *ulp_info) {
    (void)socket;
    (void)address;
    rtc_sctp *sctp = ulp_info;
    if (!data) return 1;
    if (!sctp) {
        free(data);
        return 1;
    }
    if (flags & MSG_NOTIFICATION) {
        notification(sctp, data, length);
        free(data);
        return 1;
    }
    if (!sctp->pending_too_large) {
        size_t needed = sctp->pending_size + length;
        if (needed > sctp->max_message_size) {
            sctp->pending_too_large = 1;
        } else {
            if (needed > sctp->pending_capacity) {
                size_t capacity = sctp->pending_capacity ? sctp->pending_capacity : 4096;
                while (capacity < needed) capacity *= 2;
                uint8_t *grown = realloc(sctp->pending, capacity);
                if (!grown) {
                    sctp->pending_too_large = 1;
                } else {
                    sctp->pending = grown;
                    sctp->pending_capacity = capacity;
                }
            }
            if (!sctp->pending_too_large) {
                memcpy(sctp->pending + sctp->pending_size, data, length);
                sctp->pending_size = needed;
            }
        }
    }
    free(data);
    if (flags & MSG_EOR) {
        if (!sctp->pending_too_large && sctp->callbacks.message)
            sctp->callbacks.message(sctp->owner, info.rcv_sid, ntohl(info.rcv_ppid), sctp->pending, sctp->pending_size);
        sctp->pending_size = 0;
        sctp->pending_too_large = 0;
    }
    return 1;
}

static int option(struct socket *socket, int level, int name, const void *value, socklen_t length, const char *what,
                  char *error, size_t error_size) {
    if (usrsctp_setsockopt(socket, level, name, value, length) == 0) return 0;
    snprintf(error, error_size, "usrsctp: %s failed (errno %d)", what, errno);
    return -1;
}

rtc_sctp *rtc_sctp_create(void *owner, rtc_sctp_callbacks callbacks, uint16_t local_port, uint16_t remote_port,
                          size_t max_message_size, char *error, size_t error_size) {
    pthread_once(&once, initialize);
    rtc_sctp *sctp = calloc(1, sizeof *sctp);
    if (!sctp) {
        snprintf(error, error_size, "out of memory");
        return NULL;
    }
    sctp->owner = owner;
    sctp->callbacks = callbacks;
    sctp->local_port = local_port;
    sctp->remote_port = remote_port;
    sctp->max_message_size = max_message_size;
    pthread_mutex_lock(&lock);
    usrsctp_register_address(sctp);
    sctp->socket = usrsctp_socket(AF_CONN, SOCK_STREAM, IPPROTO_SCTP, receive, NULL, 0, sctp);
    int failed = sctp->socket == NULL;
    if (failed) snprintf(error, error_size, "usrsctp_socket failed (errno %d)", errno);
    if (!failed) failed = usrsctp_set_non_blocking(sctp->socket, 1) != 0;
    // Closing aborts at once (no lingering shutdown on a transport that is going away).
    struct linger linger = {1, 0};
    if (!failed) failed = option(sctp->socket, SOL_SOCKET, SO_LINGER, &linger, sizeof linger, "SO_LINGER", error, error_size);
    struct sctp_assoc_value reset = {SCTP_ALL_ASSOC, SCTP_ENABLE_RESET_STREAM_REQ};
    if (!failed) failed = option(sctp->socket, IPPROTO_SCTP, SCTP_ENABLE_STREAM_RESET, &reset, sizeof reset, "stream reset", error, error_size);
    int on = 1;
    if (!failed) failed = option(sctp->socket, IPPROTO_SCTP, SCTP_NODELAY, &on, sizeof on, "SCTP_NODELAY", error, error_size);
    if (!failed) failed = option(sctp->socket, IPPROTO_SCTP, SCTP_RECVRCVINFO, &on, sizeof on, "SCTP_RECVRCVINFO", error, error_size);
    struct sctp_initmsg init;
    memset(&init, 0, sizeof init);
    init.sinit_num_ostreams = 1024;
    init.sinit_max_instreams = 1024;
    if (!failed) failed = option(sctp->socket, IPPROTO_SCTP, SCTP_INITMSG, &init, sizeof init, "SCTP_INITMSG", error, error_size);
    // Limits, not allocations (usrsctp takes buffers as it needs them): what a slow or lossy
    // receiver may have queued towards it (a server relaying to it has no other backpressure).
    int send_buffer = 4 * 1024 * 1024, receive_buffer = 1024 * 1024;
    if (!failed) failed = option(sctp->socket, SOL_SOCKET, SO_SNDBUF, &send_buffer, sizeof send_buffer, "SO_SNDBUF", error, error_size);
    if (!failed) failed = option(sctp->socket, SOL_SOCKET, SO_RCVBUF, &receive_buffer, sizeof receive_buffer, "SO_RCVBUF", error, error_size);
    uint16_t events[] = {SCTP_ASSOC_CHANGE, SCTP_STREAM_RESET_EVENT};
    for (size_t i = 0; !failed && i < sizeof events / sizeof events[0]; i++) {
        struct sctp_event event;
        memset(&event, 0, sizeof event);
        event.se_assoc_id = SCTP_ALL_ASSOC;
        event.se_on = 1;
        event.se_type = events[i];
        failed = option(sctp->socket, IPPROTO_SCTP, SCTP_EVENT, &event, sizeof event, "SCTP_EVENT", error, error_size);
    }
    if (!failed) {
        struct sockaddr_conn local;
        memset(&local, 0, sizeof local);
        local.sconn_family = AF_CONN;
        local.sconn_port = htons(local_port);
        local.sconn_addr = sctp;
        if (usrsctp_bind(sctp->socket, (struct sockaddr *)&local, sizeof local) != 0) {
            snprintf(error, error_size, "usrsctp_bind failed (errno %d)", errno);
            failed = 1;
        }
    }
    pthread_mutex_unlock(&lock);
    if (failed) {
        rtc_sctp_free(sctp);
        return NULL;
    }
    return sctp;
}

int rtc_sctp_connect(rtc_sctp *sctp) {
    struct sockaddr_conn remote;
    memset(&remote, 0, sizeof remote);
    remote.sconn_family = AF_CONN;
    remote.sconn_port = htons(sctp->remote_port);
    remote.sconn_addr = sctp;
    pthread_mutex_lock(&lock);
    int result = usrsctp_connect(sctp->socket, (struct sockaddr *)&remote, sizeof remote);
    int code = errno;
    pthread_mutex_unlock(&lock);
    return result == 0 || code == EINPROGRESS ? 0 : -1;
}

void rtc_sctp_input(rtc_sctp *sctp, const uint8_t *data, size_t length) {
    pthread_mutex_lock(&lock);
    usrsctp_conninput(sctp, data, length, 0);
    pthread_mutex_unlock(&lock);
}

int rtc_sctp_send(rtc_sctp *sctp, uint16_t stream, uint32_t ppid, const uint8_t *data, size_t length,
                  int unordered, int policy, uint32_t value, int *code) {
    if (length > sctp->max_message_size) {
        *code = EMSGSIZE;
        return -1;
    }
    struct sctp_sendv_spa spa;
    memset(&spa, 0, sizeof spa);
    spa.sendv_flags = SCTP_SEND_SNDINFO_VALID;
    spa.sendv_sndinfo.snd_sid = stream;
    spa.sendv_sndinfo.snd_ppid = htonl(ppid);
    spa.sendv_sndinfo.snd_flags = SCTP_EOR | (unordered ? SCTP_UNORDERED : 0);
    if (policy == 1 || policy == 2) {
        spa.sendv_flags |= SCTP_SEND_PRINFO_VALID;
        spa.sendv_prinfo.pr_policy = policy == 1 ? SCTP_PR_SCTP_RTX : SCTP_PR_SCTP_TTL;
        spa.sendv_prinfo.pr_value = value;
    }
    pthread_mutex_lock(&lock);
    ssize_t sent = usrsctp_sendv(sctp->socket, data, length, NULL, 0, &spa, sizeof spa, SCTP_SENDV_SPA, 0);
    *code = errno;
    pthread_mutex_unlock(&lock);
    return sent < 0 ? -1 : 0;
}

int rtc_sctp_reset_stream(rtc_sctp *sctp, uint16_t stream) {
    size_t length = sizeof(struct sctp_reset_streams) + sizeof(uint16_t);
    struct sctp_reset_streams *reset = calloc(1, length);
    if (!reset) return -1;
    reset->srs_assoc_id = SCTP_ALL_ASSOC;
    reset->srs_flags = SCTP_STREAM_RESET_OUTGOING;
    reset->srs_number_streams = 1;
    reset->srs_stream_list[0] = stream;
    pthread_mutex_lock(&lock);
    int result = usrsctp_setsockopt(sctp->socket, IPPROTO_SCTP, SCTP_RESET_STREAMS, reset, (socklen_t)length);
    pthread_mutex_unlock(&lock);
    free(reset);
    return result;
}

void rtc_sctp_silence(rtc_sctp *sctp) {
    pthread_mutex_lock(&lock);
    memset(&sctp->callbacks, 0, sizeof sctp->callbacks);
    pthread_mutex_unlock(&lock);
}

void rtc_sctp_free(rtc_sctp *sctp) {
    if (!sctp) return;
    pthread_mutex_lock(&lock);
    if (sctp->socket) {
        usrsctp_set_ulpinfo(sctp->socket, NULL);
        usrsctp_close(sctp->socket);
    }
    usrsctp_deregister_address(sctp);
    pthread_mutex_unlock(&lock);
    free(sctp->pending);
    free(sctp);
}

void rtc_sctp_handle_timers(uint32_t elapsed_ms) {
    pthread_once(&once, initialize);
    pthread_mutex_lock(&lock);
    usrsctp_handle_timers(elapsed_ms);
    pthread_mutex_unlock(&lock);
}

static void ignore_output(void *owner, const uint8_t *packet, size_t length) {
    (void)owner;
    (void)packet;
    (void)length;
}

void rtc_sctp_fuzz_input(const uint8_t *data, size_t length) {
    char error[128];
    rtc_sctp_callbacks callbacks = {ignore_output, NULL, NULL, NULL};
    rtc_sctp *sctp = rtc_sctp_create(NULL, callbacks, 5000, 5000, 262144, error, sizeof error);
    if (!sctp) return;
    rtc_sctp_connect(sctp);
    rtc_sctp_input(sctp, data, length);
    rtc_sctp_free(sctp);
}
