// rtc-relay: the floor for `rtc-cli bench sfu`. A minimal UDP fan-out relay with recvmmsg and
// sendmmsg: every datagram received on the listen port is sent to each destination port on
// 127.0.0.1, with no parsing, no encryption and no copies. A 1-byte datagram 0xFF stops it; it then
// prints "packets_in packets_out cpu_us" (its own user + system time) on stdout.
//
// usage: rtc-relay LISTEN_PORT DEST_PORT...
//
// rtc-relay sink PORT...: the cheapest receiver, for `rtc-cli bench sfu --rooms`. Binds each port
// on 127.0.0.1 and counts the RTP datagrams that arrive (RTCP is not counted), with epoll and
// recvmmsg. A 1-byte datagram 0xFF to any of them stops it; it then prints "rtp 0 cpu_us".
// rtc-relay hole PORT...: binds the ports with the smallest receive buffer and never reads, so the
// kernel drops what arrives as it arrives (receivers on other machines, costing this one nothing);
// SIGTERM stops it and it prints "0 0 cpu_us".
// Every mode that waits ends by itself (status 3) once the process that started it is gone.
// rtc-relay blast SECONDS COUNT: the machine's control for `rtc-cli bench sfu --rooms`: binds COUNT
// loopback ports that are never read (as `hole`), then sends them 1200-byte RTP-shaped datagrams
// (round robin, sendmmsg batches) as fast as it can for SECONDS, and prints "packets 0 cpu_us". One
// blaster next to two at once tells how far this machine's cores scale the kernel send path the
// SFU's threads use.
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

enum { BATCH = 64, MAX_DESTS = 512, MTU = 2048 };

// The process that started this one: when it is gone (a bench killed or crashed before it could
// stop us), so are we. Checked at least twice a second by every mode that waits.
static pid_t starter;
static void exit_if_orphaned(void) {
    if (getppid() != starter) _exit(3);
}

static long long cpu_microseconds(void) {
    struct rusage usage;
    getrusage(RUSAGE_SELF, &usage);
    return (usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) * 1000000LL + usage.ru_utime.tv_usec + usage.ru_stime.tv_usec;
}

// A UDP socket on 127.0.0.1:port with a receive buffer of `size` bytes; -1 (and why) if it cannot bind.
static int bind_loopback(const char *port, int flags, int size) {
    int fd = socket(AF_INET, SOCK_DGRAM | flags, 0);
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, sizeof size);
    struct sockaddr_in local = {.sin_family = AF_INET, .sin_port = htons((unsigned short)atoi(port)),
                                .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (bind(fd, (struct sockaddr *)&local, sizeof local) != 0) {
        perror("bind");
        return -1;
    }
    return fd;
}

static int sink(int count, char **ports) {
    int epoll = epoll_create1(0);
    for (int p = 0; p < count; p++) {
        int fd = bind_loopback(ports[p], SOCK_NONBLOCK, 4 << 20);
        if (fd < 0) return 1;
        struct epoll_event event = {.events = EPOLLIN, .data.fd = fd};
        epoll_ctl(epoll, EPOLL_CTL_ADD, fd, &event);
    }
    static char buffers[BATCH][MTU];
    struct iovec iov[BATCH];
    struct mmsghdr msgs[BATCH];
    struct epoll_event events[64];
    long long rtp = 0;
    printf("ready\n");
    fflush(stdout);
    for (;;) {
        int ready = epoll_wait(epoll, events, 64, 500);
        exit_if_orphaned();
        for (int e = 0; e < ready; e++) {
            for (;;) {
                for (int i = 0; i < BATCH; i++) {
                    iov[i] = (struct iovec){buffers[i], MTU};
                    msgs[i] = (struct mmsghdr){.msg_hdr = {.msg_iov = &iov[i], .msg_iovlen = 1}};
                }
                int got = recvmmsg(events[e].data.fd, msgs, BATCH, MSG_DONTWAIT, NULL);
                if (got <= 0) break;
                for (int i = 0; i < got; i++) {
                    unsigned char *b = (unsigned char *)buffers[i];
                    if (msgs[i].msg_len == 1 && b[0] == 0xFF) {
                        printf("%lld 0 %lld\n", rtp, cpu_microseconds());
                        return 0;
                    }
                    // RTP (RFC 7983: first byte 128-191), not RTCP (RFC 5761: packet types 192-223).
                    if (msgs[i].msg_len >= 12 && b[0] >= 128 && b[0] <= 191 && !((b[1] & 0x7F) >= 64 && (b[1] & 0x7F) <= 95)) rtp++;
                }
            }
        }
    }
}

static volatile sig_atomic_t hole_stop = 0;
static void hole_signal(int number) { (void)number; hole_stop = 1; }

static int hole(int count, char **ports) {
    for (int p = 0; p < count; p++) {
        if (bind_loopback(ports[p], 0, 1) < 0) return 1;
    }
    // The spawning thread's mask is inherited: SIGTERM may arrive blocked.
    signal(SIGTERM, hole_signal);
    sigset_t unblock;
    sigemptyset(&unblock);
    sigaddset(&unblock, SIGTERM);
    sigprocmask(SIG_UNBLOCK, &unblock, NULL);
    printf("ready\n");
    fflush(stdout);
    while (!hole_stop) {
        usleep(500000);  // a signal cuts it short
        exit_if_orphaned();
    }
    printf("0 0 %lld\n", cpu_microseconds());
    return 0;
}

static long long monotonic_microseconds(void) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return now.tv_sec * 1000000LL + now.tv_nsec / 1000;
}

static int blast(double seconds, int count) {
    if (count < 1 || count > MAX_DESTS) count = count < 1 ? 1 : MAX_DESTS;
    int fd = socket(AF_INET, SOCK_DGRAM, 0);
    static struct sockaddr_in targets[MAX_DESTS];
    for (int d = 0; d < count; d++) {
        int hole = bind_loopback("0", 0, 1);
        socklen_t length = sizeof targets[d];
        if (hole < 0 || getsockname(hole, (struct sockaddr *)&targets[d], &length) != 0) return 1;
    }
    static unsigned char payload[1200];
    payload[0] = 0x80;  // RTP version 2
    payload[1] = 96;
    struct iovec iov[BATCH];
    struct mmsghdr msgs[BATCH];
    long long packets = 0, end = monotonic_microseconds() + (long long)(seconds * 1e6);
    int next = 0;
    printf("ready\n");
    fflush(stdout);
    while (monotonic_microseconds() < end) {
        for (int i = 0; i < BATCH; i++) {
            iov[i] = (struct iovec){payload, sizeof payload};
            msgs[i] = (struct mmsghdr){.msg_hdr = {.msg_name = &targets[next], .msg_namelen = sizeof targets[next],
                                                   .msg_iov = &iov[i], .msg_iovlen = 1}};
            next = (next + 1) % count;
        }
        int sent = sendmmsg(fd, msgs, BATCH, 0);
        if (sent > 0) packets += sent;
    }
    printf("%lld 0 %lld\n", packets, cpu_microseconds());
    return 0;
}

int main(int argc, char **argv) {
    starter = getppid();
    if (argc == 4 && strcmp(argv[1], "blast") == 0) return blast(atof(argv[2]), atoi(argv[3]));
    if (argc >= 3 && strcmp(argv[1], "sink") == 0) return sink(argc - 2, argv + 2);
    if (argc >= 3 && strcmp(argv[1], "hole") == 0) return hole(argc - 2, argv + 2);
    if (argc < 3) {
        fprintf(stderr, "usage: rtc-relay LISTEN_PORT DEST_PORT...\n");
        return 2;
    }
    int dests = argc - 2;
    if (dests > MAX_DESTS) dests = MAX_DESTS;
    int fd = socket(AF_INET, SOCK_DGRAM, 0);
    int size = 8 << 20;
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, sizeof size);
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &size, sizeof size);
    struct timeval wait = {.tv_sec = 0, .tv_usec = 500000};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &wait, sizeof wait);
    struct sockaddr_in local = {.sin_family = AF_INET, .sin_port = htons((unsigned short)atoi(argv[1])),
                                .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (bind(fd, (struct sockaddr *)&local, sizeof local) != 0) {
        perror("bind");
        return 1;
    }
    static struct sockaddr_in targets[MAX_DESTS];
    for (int d = 0; d < dests; d++) {
        targets[d] = (struct sockaddr_in){.sin_family = AF_INET, .sin_port = htons((unsigned short)atoi(argv[2 + d])),
                                          .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    }
    static char buffers[BATCH][MTU];
    struct iovec in_iov[BATCH];
    struct mmsghdr in_msgs[BATCH];
    static struct iovec out_iov[BATCH * 8];
    static struct mmsghdr out_msgs[BATCH * 8];
    long long packets_in = 0, packets_out = 0;
    printf("ready\n");
    fflush(stdout);
    for (;;) {
        for (int i = 0; i < BATCH; i++) {
            in_iov[i] = (struct iovec){buffers[i], MTU};
            in_msgs[i] = (struct mmsghdr){.msg_hdr = {.msg_iov = &in_iov[i], .msg_iovlen = 1}};
        }
        int got = recvmmsg(fd, in_msgs, BATCH, MSG_WAITFORONE, NULL);
        if (got <= 0) {
            exit_if_orphaned();  // the receive timeout: nothing for 500 ms
            continue;
        }
        for (int i = 0; i < got; i++) {
            if (in_msgs[i].msg_len == 1 && (unsigned char)buffers[i][0] == 0xFF) {
                printf("%lld %lld %lld\n", packets_in, packets_out, cpu_microseconds());
                return 0;
            }
        }
        packets_in += got;
        // Fan out in chunks of at most BATCH*8 messages per sendmmsg.
        int pending = 0;
        for (int i = 0; i < got; i++) {
            for (int d = 0; d < dests; d++) {
                out_iov[pending] = (struct iovec){buffers[i], in_msgs[i].msg_len};
                out_msgs[pending] = (struct mmsghdr){.msg_hdr = {.msg_name = &targets[d], .msg_namelen = sizeof targets[d],
                                                                 .msg_iov = &out_iov[pending], .msg_iovlen = 1}};
                if (++pending == BATCH * 8) {
                    int sent = sendmmsg(fd, out_msgs, pending, 0);
                    if (sent > 0) packets_out += sent;
                    pending = 0;
                }
            }
        }
        if (pending) {
            int sent = sendmmsg(fd, out_msgs, pending, 0);
            if (sent > 0) packets_out += sent;
        }
    }
}
