/* The floor for connection churn: a minimal connect / request / response /
 * close loop and its server, in C, for bench/scale.sh to compare netrig's
 * crr and short tcp connections against (issue 14).
 *
 *   churn server PORT                      serve until killed
 *   churn client IP PORT SECONDS REQ REP   print connections per second
 *
 * The client sends REQ bytes, waits for REP bytes, closes; one connection
 * at a time, like `netrig crr -P 1`. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

static int full(int fd, char *b, size_t n, int wr) {
    size_t d = 0;
    while (d < n) {
        ssize_t k = wr ? write(fd, b + d, n - d) : read(fd, b + d, n - d);
        if (k <= 0) return -1;
        d += (size_t)k;
    }
    return 0;
}

int main(int argc, char **argv) {
    static char buf[1 << 16];
    int one = 1;
    if (argc == 3 && strcmp(argv[1], "server") == 0) {
        int l = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(atoi(argv[2]))};
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (bind(l, (struct sockaddr *)&a, sizeof a) || listen(l, 4096)) { perror("listen"); return 1; }
        for (;;) {
            int c = accept(l, NULL, NULL);
            if (c < 0) continue;
            setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
            /* Request size first (4 bytes), then the request; reply size fixed at 2. */
            ssize_t n = read(c, buf, sizeof buf);
            if (n > 0) full(c, buf, 2, 1);
            close(c);
        }
    }
    if (argc == 7 && strcmp(argv[1], "client") == 0) {
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(atoi(argv[3]))};
        inet_pton(AF_INET, argv[2], &a.sin_addr);
        double secs = atof(argv[4]), t0 = now();
        size_t req = (size_t)atoi(argv[5]), rep = (size_t)atoi(argv[6]);
        long done = 0, failed = 0;
        while (now() - t0 < secs) {
            int c = socket(AF_INET, SOCK_STREAM, 0);
            setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
            if (connect(c, (struct sockaddr *)&a, sizeof a) || full(c, buf, req, 1) || full(c, buf, rep, 0))
                failed++;
            else
                done++;
            close(c);
        }
        printf("%.0f %ld\n", done / (now() - t0), failed);
        return 0;
    }
    fprintf(stderr, "usage: churn server PORT | churn client IP PORT SECONDS REQ REP\n");
    return 2;
}
