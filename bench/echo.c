/* The cheapest servers sockperf's ping-pong client can measure, for
 * bench/rr_floor.sh: each answers one client on one socket, echoing every
 * message with sockperf's "from the client" bit (bit 0 of byte 9) cleared.
 *   block   blocking recvfrom then send: what sockperf's own server does
 *           with one socket;
 *   epoll   a non-blocking socket in an edge-triggered epoll set, read until
 *           it would block: the least any event-loop server does a round
 *           trip, which a server with a fixed set of threads for any number
 *           of clients cannot do without.
 * Usage: echo udp|tcp block|epoll PORT   (127.0.0.1 only) */
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

static char buf[65536];

/* Answers one message of n bytes from `from`; 0 when the peer has gone. */
static int answer(int fd, int tcp, ssize_t n, struct sockaddr_in *from, socklen_t fl) {
    if (n <= 0)
        return !tcp; /* a UDP error (ICMP) is not the end */
    if (n > 9)
        buf[9] &= ~1;
    if (tcp)
        return send(fd, buf, n, MSG_NOSIGNAL) >= 0;
    sendto(fd, buf, n, 0, (struct sockaddr *)from, fl);
    return 1;
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: echo udp|tcp block|epoll PORT\n");
        return 2;
    }
    int tcp = strcmp(argv[1], "tcp") == 0, epoll = strcmp(argv[2], "epoll") == 0, one = 1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(atoi(argv[3]))};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int s = socket(AF_INET, tcp ? SOCK_STREAM : SOCK_DGRAM, 0);
    setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(s, (struct sockaddr *)&a, sizeof a) != 0 || (tcp && listen(s, 4) != 0)) {
        perror("echo: bind");
        return 1;
    }
    for (;;) {
        int fd = tcp ? accept(s, NULL, NULL) : s;
        if (fd < 0)
            continue;
        if (tcp)
            setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        struct sockaddr_in from;
        socklen_t fl;
        if (!epoll) {
            do {
                fl = sizeof from;
            } while (answer(fd, tcp, recvfrom(fd, buf, sizeof buf, 0, (struct sockaddr *)&from, &fl), &from, fl));
            close(fd);
            continue;
        }
        fcntl(fd, F_SETFL, O_NONBLOCK);
        int ep = epoll_create1(0);
        struct epoll_event ev = {.events = EPOLLIN | EPOLLET, .data.fd = fd}, got[8];
        epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);
        for (int live = 1; live;) {
            if (epoll_wait(ep, got, 8, -1) <= 0)
                continue;
            for (;;) {
                fl = sizeof from;
                ssize_t n = recvfrom(fd, buf, sizeof buf, 0, (struct sockaddr *)&from, &fl);
                if (n < 0)
                    break; /* would block: wait for the next readiness */
                if (!(live = answer(fd, tcp, n, &from, fl)))
                    break;
                /* A TCP read shorter than the buffer took all that was queued. */
                if (tcp && n < (ssize_t)sizeof buf)
                    break;
            }
        }
        close(ep);
        close(fd);
    }
}
