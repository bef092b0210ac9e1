// echo_load: a WebSocket echo load generator that is not the bottleneck (one thread, epoll,
// no allocation per message). N connections keep D messages of S bytes in flight each; every
// echo is checked byte for byte against what was sent; round trips go into a histogram.
//
//   gcc -O2 -o /tmp/echo_load Benchmarks/echo_load.c
//   /tmp/echo_load PORT N D S SECONDS [PATH]
//
// Prints one line: msgs/s, p50 and p99 round trip in microseconds, errors. The frames that
// answer one read's echoes go out in one write, so the generator spends few system calls.
//
// Over TLS (wss://, OpenSSL, certificates not verified: a load generator):
//   gcc -O2 -DWITH_TLS -o /tmp/echo_load_tls Benchmarks/echo_load.c -lssl -lcrypto
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#ifdef WITH_TLS
#include <openssl/ssl.h>
static SSL_CTX *tls_context;
#endif

#define MAXC 20000
#define BUCKETS 200000 /* 1 us buckets up to 200 ms */

typedef struct {
    int fd;
#ifdef WITH_TLS
    SSL *ssl;
#endif
    int upgraded;
    unsigned char *in; /* at least a whole echo and a read more: 64 KiB + S + 14 */
    size_t inlen, incap;
    uint64_t sent, received;
    uint64_t stamps[256]; /* send time of each message in flight, by sequence mod 256 */
    unsigned char *out; /* 1 MiB, or one frame when S is larger */
    size_t outlen, outcap; /* frames built, written in one call per read event */
} conn;

static conn *conns;
static uint64_t hist[BUCKETS + 1];
static uint64_t total, errors;
static int S, D;
static unsigned char *pattern; /* 'a'..'z' repeated over 26 + S bytes: message n is pattern + n % 26 */

static uint64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000ull + t.tv_nsec;
}

static void fill(unsigned char *p, uint64_t seq, int n) {
    memcpy(p, pattern + seq % 26, n);
}

/* Writes what send_one built, in one system call; blocking is fine at these sizes. */
static void flush_out(conn *c) {
    size_t off = 0;
    while (off < c->outlen) {
#ifdef WITH_TLS
        ssize_t w = SSL_write(c->ssl, c->out + off, (int)(c->outlen - off));
        if (w <= 0) { fprintf(stderr, "SSL_write failed\n"); exit(1); }
#else
        ssize_t w = write(c->fd, c->out + off, c->outlen - off);
#endif
        if (w < 0) { if (errno == EAGAIN || errno == EINTR) continue; perror("write"); exit(1); }
        off += w;
    }
    c->outlen = 0;
}

/* Builds one masked binary frame into the connection's output buffer. */
static void send_one(conn *c) {
    if (c->outlen + 14 + S > c->outcap) flush_out(c);
    unsigned char *frame = c->out + c->outlen;
    int h = 0;
    frame[h++] = 0x82;
    if (S < 126) frame[h++] = 0x80 | S;
    else if (S < 65536) { frame[h++] = 0x80 | 126; frame[h++] = S >> 8; frame[h++] = S & 0xff; }
    else { frame[h++] = 0x80 | 127; for (int b = 7; b >= 0; b--) frame[h++] = (unsigned char)((uint64_t)S >> (8 * b)); }
    unsigned char mask[4] = {1, 2, 3, 4};
    memcpy(frame + h, mask, 4); h += 4;
    fill(frame + h, c->sent, S);
    /* Masked a word at a time: at 1 MiB a byte loop would make the generator the bottleneck. */
    uint64_t word;
    memcpy(&word, (unsigned char[8]){1, 2, 3, 4, 1, 2, 3, 4}, 8);
    int i = 0;
    for (; i + 8 <= S; i += 8) {
        uint64_t v;
        memcpy(&v, frame + h + i, 8);
        v ^= word;
        memcpy(frame + h + i, &v, 8);
    }
    for (; i < S; i++) frame[h + i] ^= mask[i & 3];
    c->stamps[c->sent & 255] = now_ns();
    c->sent++;
    c->outlen += h + S;
}

static void consume(conn *c, uint64_t measure_from) {
    size_t pos = 0;
    if (!c->upgraded) {
        unsigned char *end = memmem(c->in, c->inlen, "\r\n\r\n", 4);
        if (!end) return;
        if (memcmp(c->in, "HTTP/1.1 101", 12) != 0) { fprintf(stderr, "handshake refused\n"); exit(1); }
        c->upgraded = 1;
        pos = end - c->in + 4;
        for (int i = 0; i < D; i++) send_one(c);
        flush_out(c);
    }
    for (;;) {
        if (c->inlen - pos < 2) break;
        unsigned char *f = c->in + pos;
        size_t len = f[1] & 0x7f, h = 2;
        if (len == 126) { if (c->inlen - pos < 4) break; len = (f[2] << 8) | f[3]; h = 4; }
        else if (len == 127) {
            if (c->inlen - pos < 10) break;
            len = 0;
            for (int b = 2; b < 10; b++) len = (len << 8) | f[b];
            h = 10;
        }
        if (c->inlen - pos < h + len) break;
        if ((f[0] & 0x0f) != 2 || len != (size_t)S || memcmp(f + h, pattern + c->received % 26, S) != 0) errors++;
        uint64_t t = now_ns();
        if (t >= measure_from) {
            uint64_t us = (t - c->stamps[c->received & 255]) / 1000;
            hist[us > BUCKETS ? BUCKETS : us]++;
            total++;
        }
        c->received++;
        pos += h + len;
        send_one(c);
    }
    flush_out(c);
    memmove(c->in, c->in + pos, c->inlen - pos);
    c->inlen -= pos;
}

static uint64_t percentile(double p) {
    uint64_t want = (uint64_t)(total * p), seen = 0;
    for (int i = 0; i <= BUCKETS; i++) { seen += hist[i]; if (seen > want) return i; }
    return BUCKETS;
}

int main(int argc, char **argv) {
    if (argc < 6) { fprintf(stderr, "usage: echo_load PORT N D S SECONDS [PATH]\n"); return 64; }
    int port = atoi(argv[1]), n = atoi(argv[2]);
    D = atoi(argv[3]); S = atoi(argv[4]);
    double seconds = atof(argv[5]);
    const char *path = argc > 6 ? argv[6] : "/echo";
    if (n > MAXC || D > 200 || S > (16 << 20)) { fprintf(stderr, "limits: N<=20000 D<=200 S<=16777216\n"); return 64; }
    /* Past 64 KiB, a connection writes its frames while its echoes wait unread: keep one in
       flight, or both ends can block writing. */
    if (S > 65535 && D > 1) { fprintf(stderr, "S above 65535 takes D=1\n"); return 64; }
    conns = calloc(n, sizeof(conn));
    pattern = malloc(26 + (size_t)S);
    for (int i = 0; i < 26 + S; i++) pattern[i] = (unsigned char)('a' + i % 26);
    for (int i = 0; i < n; i++) {
        conns[i].incap = (1 << 16) + (size_t)S + 14;
        conns[i].in = malloc(conns[i].incap);
        size_t batch = 200 * (14 + 65536) > (1 << 20) ? (1 << 20) : 200 * (14 + 65536);
        conns[i].outcap = (size_t)S + 14 > batch ? (size_t)S + 14 : batch;
        conns[i].out = malloc(conns[i].outcap);
        if (!conns[i].in || !conns[i].out || !pattern) { fprintf(stderr, "out of memory\n"); return 1; }
    }
    int ep = epoll_create1(0);
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons(port)};
    inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
    char req[512];
    int rl = snprintf(req, sizeof req,
        "GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n", path);
    for (int i = 0; i < n; i++) {
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        if (connect(fd, (struct sockaddr *)&addr, sizeof addr) < 0) { perror("connect"); return 1; }
        conns[i].fd = fd;
#ifdef WITH_TLS
        if (!tls_context) {
            tls_context = SSL_CTX_new(TLS_client_method());
            SSL_CTX_set_verify(tls_context, SSL_VERIFY_NONE, NULL);
        }
        conns[i].ssl = SSL_new(tls_context);
        SSL_set_fd(conns[i].ssl, fd);
        if (SSL_connect(conns[i].ssl) != 1) { fprintf(stderr, "TLS handshake failed\n"); return 1; }
        if (SSL_write(conns[i].ssl, req, rl) != rl) { fprintf(stderr, "SSL_write failed\n"); return 1; }
#else
        if (write(fd, req, rl) != rl) { perror("write"); return 1; }
#endif
        struct epoll_event ev = {.events = EPOLLIN, .data.u32 = i};
        epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);
    }
    uint64_t start = now_ns(), warm = start + 1000000000ull, stop = warm + (uint64_t)(seconds * 1e9);
    struct epoll_event events[256];
    while (now_ns() < stop) {
        int k = epoll_wait(ep, events, 256, 100);
        for (int e = 0; e < k; e++) {
            conn *c = &conns[events[e].data.u32];
#ifdef WITH_TLS
            /* Every record OpenSSL holds is read before going back to epoll, which sees only
               the socket. */
            do {
                int r = SSL_read(c->ssl, c->in + c->inlen, (int)(c->incap - c->inlen));
                if (r <= 0) { fprintf(stderr, "connection %u closed\n", events[e].data.u32); return 1; }
                c->inlen += r;
                consume(c, warm);
            } while (SSL_pending(c->ssl) > 0);
#else
            ssize_t r = read(c->fd, c->in + c->inlen, c->incap - c->inlen);
            if (r <= 0) { fprintf(stderr, "connection %u closed\n", events[e].data.u32); return 1; }
            c->inlen += r;
            consume(c, warm);
#endif
        }
    }
    double elapsed = (now_ns() - warm) / 1e9;
    printf("msgs/s %.0f p50_us %lu p99_us %lu errors %lu\n", total / elapsed,
           (unsigned long)percentile(0.50), (unsigned long)percentile(0.99), (unsigned long)errors);
    return errors ? 1 : 0;
}
