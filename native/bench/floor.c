/*
 * bench/floor.c -- the answer-only server of `nsqmp bench floor` and of the
 * floor rows of `make bench` (nsqmp/bench/floor.py compiles it with cc on
 * first use; it is a program, not part of any extension: nothing ships it).
 *
 * It is the least a server can do per publish on this machine: no broker, no
 * file, no ID, no event loop.  One thread per connection blocks in read(2),
 * frames whatever whole commands the bytes hold and answers OK to each one
 * that carries a body (IDENTIFY without feature negotiation, PUB, MPUB, DPUB:
 * all a bench_writer or nsqmp's bench writer sends), with one write(2) for
 * all of them.  Bodiless commands (NOP, ...) get no answer, as in nsqd.
 *
 * With a polling time, each thread first looks for the next bytes without
 * blocking for up to that long after its last answer, and blocks only then:
 * the wake-up a blocked thread pays on every round trip is what nsqmp's
 * acceptors (--busy-poll) and Go's runtime (its spinning) avoid, so on one
 * connection a blocking server is no floor for them; a polling one is.  On more
 * connections than cores the polling threads take the CPUs from the client.
 *
 *   stream:  "  V2" then commands:  LINE "\n" [size:u32be body]
 *   answer:  [size=6:u32be][FRAME_RESPONSE=0:u32be]["OK"]
 *
 * A connection that subscribes (SUB, answered OK) is fed once it sends RDY n:
 * the floor of the readers of the mixed row.  It writes messages of
 * body_size bytes (IDs counting up, the same body each time) while fewer than
 * n are in flight, and each FIN lets one more go; nothing is kept, timed out
 * or delivered again.  Its readers meet no broker's cost, only their own and
 * the publishers' on the same cores.
 *
 *   message: [size:u32be][FRAME_MESSAGE=2:u32be][ts:i64be][attempts:u16be]
 *            [id:16 hex digits][body]
 *
 * Usage: floor [port [poll_us [body_size]]]  (port 0 or none: any free port;
 * poll_us 0 or none: block at once; body_size 200 by default).  Prints
 * "port N\n" on stdout once it listens on 127.0.0.1; runs until killed.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAGIC_LEN 4
#define BUF_SIZE (1 << 20)
#define OK_LEN 10

static const char OK_FRAME[OK_LEN] = {0, 0, 0, 6, 0, 0, 0, 0, 'O', 'K'};
static long long poll_ns;  /* how long a thread looks for more before it blocks (0: never) */
static size_t body_size = 200;
#define MSG_HEAD 34  /* size, frame type, ts, attempts, id */
#define FEED_MAX 64  /* messages written at most per write(2) */

static long long
now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}

/* read(2), after polling for up to poll_ns without blocking */
static ssize_t
read_some(int fd, char *p, size_t n)
{
    if (poll_ns > 0) {
        long long until = now_ns() + poll_ns;
        do {
            ssize_t r = recv(fd, p, n, MSG_DONTWAIT);
            if (r >= 0 || (errno != EAGAIN && errno != EWOULDBLOCK))
                return r;
        } while (now_ns() < until);
    }
    return read(fd, p, n);
}

/* Commands whose line is followed by a size and a body. */
static int
has_body(const char *line, size_t len)
{
    static const char *const with_body[] = {"IDENTIFY", "PUB ", "MPUB ", "DPUB ", "AUTH"};
    for (size_t i = 0; i < sizeof with_body / sizeof *with_body; i++) {
        size_t n = strlen(with_body[i]);
        if (len >= n && memcmp(line, with_body[i], n) == 0)
            return 1;
    }
    return 0;
}

/* The decimal number at p (n bytes, digits only), or -1. */
static long
number(const char *p, size_t n)
{
    long v = 0;
    if (n == 0 || n > 9)
        return -1;
    for (size_t i = 0; i < n; i++) {
        if (p[i] < '0' || p[i] > '9')
            return -1;
        v = v * 10 + (p[i] - '0');
    }
    return v;
}

/* FEED_MAX message frames into feed, once per connection: everything but the
 * timestamp and the ID, which messages() writes */
static void
frame_feed(char *feed)
{
    size_t frame = MSG_HEAD + body_size;
    uint32_t size = (uint32_t)(frame - 4);
    for (size_t i = 0; i < FEED_MAX; i++) {
        unsigned char *m = (unsigned char *)feed + i * frame;
        m[0] = (unsigned char)(size >> 24); m[1] = (unsigned char)(size >> 16);
        m[2] = (unsigned char)(size >> 8); m[3] = (unsigned char)size;
        m[4] = 0; m[5] = 0; m[6] = 0; m[7] = 2;
        m[16] = 0; m[17] = 1;
        memset(m + MSG_HEAD, 'm', body_size);
    }
}

/* The first k frames of feed (frame_feed) stamped, IDs from *next on; their bytes */
static size_t
messages(char *feed, size_t k, unsigned long long *next)
{
    static const char hex[] = "0123456789abcdef";
    size_t frame = MSG_HEAD + body_size;
    long long ts = (long long)time(NULL) * 1000000000LL;
    for (size_t i = 0; i < k; i++) {
        unsigned char *m = (unsigned char *)feed + i * frame;
        for (int b = 0; b < 8; b++)
            m[8 + b] = (unsigned char)(ts >> (56 - 8 * b));
        unsigned long long id = (*next)++;
        for (int d = 15; d >= 0; d--, id >>= 4)
            m[18 + d] = (unsigned char)hex[id & 15];
    }
    return k * frame;
}

static int
write_all(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w <= 0)
            return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

static void *
serve(void *arg)
{
    int fd = (int)(intptr_t)arg;
    char *buf = malloc(BUF_SIZE);
    char *out = malloc(BUF_SIZE / 8 * OK_LEN);
    char *feed = malloc(FEED_MAX * (MSG_HEAD + body_size));
    size_t have = 0, skip = MAGIC_LEN;
    long rdy = 0, inflight = 0;
    int subscribed = 0;
    unsigned long long next_id = 0;
    if (buf == NULL || out == NULL || feed == NULL)
        goto done;
    frame_feed(feed);
    for (;;) {
        ssize_t r;
        if (subscribed && inflight < rdy) {  /* a reader with room: feed it, then look for FINs */
            size_t k = (size_t)(rdy - inflight) < FEED_MAX ? (size_t)(rdy - inflight) : FEED_MAX;
            if (write_all(fd, feed, messages(feed, k, &next_id)) < 0)
                break;
            inflight += (long)k;
            r = recv(fd, buf + have, BUF_SIZE - have, MSG_DONTWAIT);
            if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
                continue;
        } else {
            r = read_some(fd, buf + have, BUF_SIZE - have);
        }
        if (r <= 0)
            break;
        have += (size_t)r;
        size_t pos = 0, oks = 0;
        if (skip) {
            size_t s = have < skip ? have : skip;
            pos += s;
            skip -= s;
        }
        for (;;) {
            char *nl = memchr(buf + pos, '\n', have - pos);
            if (nl == NULL)
                break;
            size_t line = (size_t)(nl - (buf + pos)), end = pos + line + 1;
            if (has_body(buf + pos, line)) {
                if (have - end < 4)
                    break;
                const unsigned char *s = (const unsigned char *)buf + end;
                uint32_t size = (uint32_t)s[0] << 24 | (uint32_t)s[1] << 16 | (uint32_t)s[2] << 8 | s[3];
                if (size > BUF_SIZE - 64)
                    goto done;  /* more than one read buffer: not a bench's command */
                if (have - end - 4 < size)
                    break;
                end += 4 + size;
                memcpy(out + oks * OK_LEN, OK_FRAME, OK_LEN);
                oks++;
            } else if (line >= 4 && memcmp(buf + pos, "FIN ", 4) == 0) {
                if (inflight > 0)
                    inflight--;
            } else if (line >= 4 && memcmp(buf + pos, "RDY ", 4) == 0) {
                long n = number(buf + pos + 4, line - 4);
                if (n >= 0)
                    rdy = n;
            } else if (line >= 4 && memcmp(buf + pos, "SUB ", 4) == 0) {
                subscribed = 1;
                memcpy(out + oks * OK_LEN, OK_FRAME, OK_LEN);
                oks++;
            }
            pos = end;
        }
        if (oks && write_all(fd, out, oks * OK_LEN) < 0)
            break;
        memmove(buf, buf + pos, have - pos);
        have -= pos;
    }
done:
    free(buf);
    free(out);
    free(feed);
    close(fd);
    return NULL;
}

int
main(int argc, char **argv)
{
    int port = argc > 1 ? atoi(argv[1]) : 0, one = 1;
    /* a reader closes at the end of its run while it is still fed: a write to it must
     * fail, not kill the server (and with it the other connections' runs) */
    signal(SIGPIPE, SIG_IGN);
    poll_ns = argc > 2 ? atoll(argv[2]) * 1000LL : 0;
    if (argc > 3 && atoi(argv[3]) > 0)
        body_size = (size_t)atoi(argv[3]);
    int ls = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(ls, (struct sockaddr *)&addr, sizeof addr) < 0 || listen(ls, 128) < 0) {
        perror("floor: listen");
        return 1;
    }
    socklen_t len = sizeof addr;
    getsockname(ls, (struct sockaddr *)&addr, &len);
    printf("port %d\n", ntohs(addr.sin_port));
    fflush(stdout);
    for (;;) {
        int fd = accept(ls, NULL, NULL);
        if (fd < 0)
            continue;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        pthread_t t;
        if (pthread_create(&t, NULL, serve, (void *)(intptr_t)fd) != 0) {
            close(fd);
            continue;
        }
        pthread_detach(t);
    }
}
