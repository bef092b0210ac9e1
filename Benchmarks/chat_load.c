// Chat fan-out load in C: MEMBERS members join one room of a chat server (duplex-server, or the
// Node peer Benchmarks/node_chat_server.js), then SENDERS of them each say RATE messages a second
// for SECONDS. Every member records, for each message, the time from its send to its arrival (one
// clock: one process) and checks it gets each message exactly once. One thread and epoll, so that
// a delivery costs the generator a few microseconds: it must not be what is measured (the Node
// generator, Benchmarks/chat_load.js, spends more CPU per delivery than the servers do).
//
//   gcc -O2 -o chat_load Benchmarks/chat_load.c
//   SERVER_PIDS=PID ./chat_load PORT MEMBERS SENDERS RATE SECONDS
//
// Prints one JSON object: deliveries, what was lost or duplicated, latency p50/p99 (ms), the
// server's CPU time (from /proc, SERVER_PIDS comma-separated) in the joins and in the steady phase
// after, and the generator's own CPU time in the steady phase. Connects to 127.0.0.1 only.
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

typedef struct {
    int fd;
    unsigned char *buf;
    size_t len, cap;
    int handshaken, welcomed;
    unsigned char *seen; // one byte per message index
    int seen_count;
} member;

static int port, members, senders, rate, seconds, per_sender, expected;
static member *all;
static int epfd;
static long welcomed_count, complete, duplicates, deliveries;
static double *latencies;
static char room[64];

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static void die(const char *what) {
    fprintf(stderr, "chat_load: %s: %s\n", what, strerror(errno));
    exit(1);
}

// The servers' CPU seconds so far (user + system), from /proc/PID/stat.
static double server_cpu(void) {
    const char *pids = getenv("SERVER_PIDS");
    if (!pids) return 0;
    double total = 0;
    char copy[256];
    snprintf(copy, sizeof copy, "%s", pids);
    for (char *pid = strtok(copy, ","); pid; pid = strtok(NULL, ",")) {
        char path[64], text[1024];
        snprintf(path, sizeof path, "/proc/%s/stat", pid);
        FILE *f = fopen(path, "r");
        if (!f) continue;
        size_t n = fread(text, 1, sizeof text - 1, f);
        fclose(f);
        text[n] = 0;
        char *p = strrchr(text, ')');
        if (!p) continue;
        unsigned long utime = 0, stime = 0;
        // After ") ": state, then fields 4..13, then utime (14) and stime (15).
        sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &utime, &stime);
        total += (double)(utime + stime) / sysconf(_SC_CLK_TCK);
    }
    return total;
}

static double own_cpu(void) {
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return u.ru_utime.tv_sec + u.ru_utime.tv_usec / 1e6 + u.ru_stime.tv_sec + u.ru_stime.tv_usec / 1e6;
}

static void write_all(int fd, const void *data, size_t len) {
    const char *p = data;
    while (len > 0) {
        ssize_t n = write(fd, p, len);
        if (n < 0) {
            if (errno == EAGAIN || errno == EINTR) continue;
            die("write");
        }
        p += n;
        len -= (size_t)n;
    }
}

// A masked client text frame (mask key 0: the payload goes as it is).
static void send_text(int fd, const char *text) {
    size_t len = strlen(text);
    unsigned char frame[512];
    if (len > sizeof frame - 8 || len > 65535) { fprintf(stderr, "chat_load: say too long\n"); exit(1); }
    size_t h = 0;
    frame[h++] = 0x81;
    if (len < 126) {
        frame[h++] = 0x80 | (unsigned char)len;
    } else {
        frame[h++] = 0x80 | 126;
        frame[h++] = (unsigned char)(len >> 8);
        frame[h++] = (unsigned char)len;
    }
    memset(frame + h, 0, 4);
    h += 4;
    memcpy(frame + h, text, len);
    write_all(fd, frame, h + len);
}

static void on_text(member *m, const char *text, size_t len) {
    if (!m->welcomed) {
        if (memmem(text, len, "\"type\":\"welcome\"", 16)) {
            m->welcomed = 1;
            welcomed_count++;
        }
        return;
    }
    if (!memmem(text, len, "\"type\":\"message\"", 16)) return;
    double arrived = now_ms();
    const char *t = memmem(text, len, "\"text\":\"", 8);
    if (!t) { fprintf(stderr, "chat_load: a message without text\n"); exit(1); }
    // The text, at most 63 bytes of it, as a C string: the frame is not NUL-terminated.
    char field[64];
    size_t from = (size_t)(t + 8 - text), n = len - from < sizeof field - 1 ? len - from : sizeof field - 1;
    memcpy(field, t + 8, n);
    field[n] = 0;
    double sent_at;
    int node, s, k;
    if (sscanf(field, "%lf %d s%d-%d", &sent_at, &node, &s, &k) != 4 || s < 0 || s >= senders || k < 0 || k >= per_sender) {
        fprintf(stderr, "chat_load: a message not from this run\n");
        exit(1);
    }
    int index = s * per_sender + k;
    if (m->seen[index]) { duplicates++; return; }
    m->seen[index] = 1;
    latencies[deliveries++] = arrived - sent_at;
    if (++m->seen_count == expected) complete++;
}

// Parses what a member has read: the 101, then server frames (unmasked, unfragmented).
static void parse(member *m) {
    size_t at = 0;
    if (!m->handshaken) {
        unsigned char *end = memmem(m->buf, m->len, "\r\n\r\n", 4);
        if (!end) return;
        if (m->len < 12 || memcmp(m->buf + 9, "101", 3) != 0) { fprintf(stderr, "chat_load: the upgrade was refused: %.*s\n", (int)m->len, m->buf); exit(1); }
        m->handshaken = 1;
        at = (size_t)(end - m->buf) + 4;
    }
    while (m->len - at >= 2) {
        unsigned char *f = m->buf + at;
        size_t avail = m->len - at;
        uint64_t plen = f[1] & 0x7F;
        size_t h = 2;
        if (plen == 126) {
            if (avail < 4) break;
            plen = ((uint64_t)f[2] << 8) | f[3];
            h = 4;
        } else if (plen == 127) {
            if (avail < 10) break;
            plen = 0;
            for (int i = 0; i < 8; i++) plen = (plen << 8) | f[2 + i];
            h = 10;
        }
        // A chat frame is small: anything past 16 MiB is not from a chat server.
        if (plen > (16u << 20)) { fprintf(stderr, "chat_load: a frame of %llu bytes\n", (unsigned long long)plen); exit(1); }
        if (avail < h + plen) break;
        int opcode = f[0] & 0x0F;
        if (opcode == 0x1) {
            on_text(m, (const char *)f + h, (size_t)plen);
        } else if (opcode == 0x8) {
            unsigned code = plen >= 2 ? (f[h] << 8 | f[h + 1]) : 0;
            fprintf(stderr, "chat_load: the server closed member %ld with %u\n", (long)(m - all), code);
            exit(1);
        } else if (opcode == 0x9) {
            // Pong with the same payload, masked with key 0.
            unsigned char pong[2 + 4 + 125];
            size_t n = plen > 125 ? 125 : (size_t)plen;
            pong[0] = 0x8A;
            pong[1] = 0x80 | (unsigned char)n;
            memset(pong + 2, 0, 4);
            memcpy(pong + 6, f + h, n);
            write_all(m->fd, pong, 6 + n);
        }
        at += h + (size_t)plen;
    }
    memmove(m->buf, m->buf + at, m->len - at);
    m->len -= at;
}

static void on_readable(member *m) {
    for (;;) {
        if (m->cap - m->len < 65536) {
            m->cap *= 2;
            m->buf = realloc(m->buf, m->cap);
            if (!m->buf) die("realloc");
        }
        size_t room = m->cap - m->len;
        ssize_t n = read(m->fd, m->buf + m->len, room);
        if (n > 0) {
            m->len += (size_t)n;
            // Less than asked for: nothing more is waiting (epoll, level-triggered, says when
            // there is), so no second read only to hear EAGAIN.
            if ((size_t)n < room) break;
            continue;
        }
        if (n == 0) { fprintf(stderr, "chat_load: the server closed member %ld\n", (long)(m - all)); exit(1); }
        if (errno == EAGAIN) break;
        if (errno == EINTR) continue;
        die("read");
    }
    parse(m);
}

// Handles what arrives for up to `timeout` ms (0: what is ready now).
static void pump(int timeout) {
    struct epoll_event events[256];
    int n = epoll_wait(epfd, events, 256, timeout);
    if (n < 0 && errno != EINTR) die("epoll_wait");
    for (int i = 0; i < n; i++) on_readable(&all[events[i].data.u32]);
}

static void join(int i) {
    member *m = &all[i];
    m->fd = socket(AF_INET, SOCK_STREAM, 0);
    if (m->fd < 0) die("socket");
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    if (connect(m->fd, (struct sockaddr *)&a, sizeof a) < 0) die("connect");
    int one = 1;
    setsockopt(m->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    char request[512];
    int n = snprintf(request, sizeof request,
        "GET /chat/%s?name=m%d HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n",
        room, i, port);
    write_all(m->fd, request, (size_t)n);
    fcntl(m->fd, F_SETFL, fcntl(m->fd, F_GETFL) | O_NONBLOCK);
    m->cap = 131072;
    m->buf = malloc(m->cap);
    m->seen = calloc((size_t)expected, 1);
    struct epoll_event e = {.events = EPOLLIN, .data.u32 = (uint32_t)i};
    if (epoll_ctl(epfd, EPOLL_CTL_ADD, m->fd, &e) < 0) die("epoll_ctl");
}

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double percentile(double p) {
    if (deliveries == 0) return -1;
    long i = (long)(deliveries * p / 100);
    if (i > deliveries - 1) i = deliveries - 1;
    return latencies[i];
}

int main(int argc, char **argv) {
    if (argc != 6) {
        fprintf(stderr, "usage: SERVER_PIDS=PID chat_load PORT MEMBERS SENDERS RATE SECONDS\n");
        return 2;
    }
    port = atoi(argv[1]);
    members = atoi(argv[2]);
    senders = atoi(argv[3]);
    rate = atoi(argv[4]);
    seconds = atoi(argv[5]);
    if (senders > members) senders = members;
    per_sender = rate * seconds;
    expected = senders * per_sender;
    if (members <= 0 || senders <= 0 || per_sender <= 0) { fprintf(stderr, "chat_load: nothing to do\n"); return 2; }
    struct rlimit files;
    getrlimit(RLIMIT_NOFILE, &files);
    files.rlim_cur = files.rlim_max;
    setrlimit(RLIMIT_NOFILE, &files);
    snprintf(room, sizeof room, "bench%d", (int)getpid());
    all = calloc((size_t)members, sizeof *all);
    latencies = malloc(sizeof(double) * (size_t)expected * (size_t)members);
    epfd = epoll_create1(0);
    if (epfd < 0) die("epoll_create1");

    double cpu_start = server_cpu();
    // Join 100 at a time, each batch welcomed before the next, as chat_load.js does.
    for (int first = 0; first < members; first += 100) {
        int last = first + 100 < members ? first + 100 : members;
        for (int i = first; i < last; i++) join(i);
        double deadline = now_ms() + 60000;
        while (welcomed_count < last) {
            if (now_ms() > deadline) { fprintf(stderr, "chat_load: members not welcomed in 60 s\n"); return 1; }
            pump(100);
        }
    }
    // Presence frames for the last joins may still be on their way: let them settle.
    double settle = now_ms() + 500;
    while (now_ms() < settle) pump((int)(settle - now_ms()) + 1);
    double cpu_joined = server_cpu();
    double load_joined = own_cpu();

    double begin = now_ms() + 1000;
    long total = (long)senders * per_sender, sent = 0;
    double deadline = begin + seconds * 1000.0 + 20000;
    while (complete < members && now_ms() < deadline) {
        // The says are sent in time order: message k of sender s at begin + (k + s/senders)/rate.
        while (sent < total) {
            int k = (int)(sent / senders), s = (int)(sent % senders);
            double at = begin + (k + (double)s / senders) * 1000.0 / rate;
            if (at > now_ms()) break;
            char say[256];
            snprintf(say, sizeof say, "{\"type\":\"say\",\"v\":1,\"clientMessageId\":\"s%d-%d\",\"text\":\"%.4f 0 s%d-%d\"}", s, k, now_ms(), s, k);
            send_text(all[s].fd, say);
            sent++;
        }
        int wait = 100;
        if (sent < total) {
            int k = (int)(sent / senders), s = (int)(sent % senders);
            double at = begin + (k + (double)s / senders) * 1000.0 / rate;
            double left = at - now_ms();
            wait = left < 0 ? 0 : (int)left;
        }
        pump(wait);
    }
    double cpu_end = server_cpu();
    double load_steady = own_cpu() - load_joined;
    long short_members = 0;
    for (int i = 0; i < members; i++) if (all[i].seen_count < expected) short_members++;
    qsort(latencies, (size_t)deliveries, sizeof(double), by_value);
    printf("{\"server_cpu_join_s\": %.3f, \"server_cpu_steady_s\": %.3f, \"load_cpu_steady_s\": %.3f, "
           "\"mode\": \"latency\", \"generator\": \"chat_load.c\", \"members\": %d, \"messages\": %d, \"deliveries\": %ld, "
           "\"expected_deliveries\": %ld, \"members_short\": %ld, \"duplicates\": %ld, "
           "\"all_p50_ms\": %.2f, \"all_p99_ms\": %.2f}\n",
        cpu_joined - cpu_start, cpu_end - cpu_joined, load_steady, members, expected, deliveries,
        (long)expected * members, short_members, duplicates, percentile(50), percentile(99));
    for (int i = 0; i < members; i++) close(all[i].fd);
    return 0;
}
