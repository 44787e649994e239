/* SPDX-License-Identifier: MIT */
/*
 * loadgen.c - single-threaded epoll load generator for echo servers.
 *
 * Modes:
 *   pingpong  N TCP(/TLS) connections, each sends SIZE bytes and waits for the
 *             full echo before sending again.  -> rps, p50/p99/p999 latency (us)
 *   stream    N connections write CHUNK-byte chunks as fast as the in-flight
 *             window allows and read the echo back. -> MB/s echoed (1 MB = 1e6 B)
 *   connect   C concurrent slots: connect, [TLS handshake], send SIZE bytes,
 *             read echo, close, repeat. -> connections/s, p50/p99 per-connection
 *   udp       N connected UDP sockets ping-pong SIZE-byte datagrams. -> rps
 *   idle      open N connections, one echo each, print "IDLE_READY", hold for
 *             --hold seconds, close.  (The runner samples server RSS meanwhile.)
 *
 * Every run prints exactly one line starting with "RESULT " (key=value pairs).
 * Only the window [warmup, warmup+duration] is measured.
 *
 * Build: gcc -O2 -o loadgen loadgen.c -lssl -lcrypto
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/ssl.h>

enum { M_PINGPONG, M_STREAM, M_CONNECT, M_UDP, M_IDLE };
static const char *mode_names[] = {"pingpong", "stream", "connect", "udp", "idle"};

static struct {
    int mode;
    const char *host;
    int port;
    int conns;
    int size;
    double duration;
    double warmup;
    int tls;
    size_t chunk;
    size_t window;
    double hold;
    int conc;        /* concurrent connection attempts (connect, idle) */
    double timeout;  /* idle: max seconds to establish all connections */
    const char *label;
    int sources;     /* TCP to IPv4: spread connections over source addresses 127.0.0.1..N */
} opt = {
    .mode = M_PINGPONG, .host = "127.0.0.1", .port = 0, .conns = 1, .size = 64,
    .duration = 5.0, .warmup = 1.0, .tls = 0, .chunk = 65536, .window = 4u << 20,
    .hold = 3.0, .conc = 64, .timeout = 30.0, .label = "", .sources = 1,
};

/* ---------------------------------------------------------------- time */
static inline uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* ------------------------------------------- log-linear latency histogram
 * values < 256 ns exact, above: 128 sub-buckets per power of two (<0.8% error) */
#define HBUCKETS (128 * 40)
static uint64_t hist[HBUCKETS];
static uint64_t hist_n;

static inline int hbucket(uint64_t ns) {
    if (ns < 256) return (int)ns;
    int e = 63 - __builtin_clzll(ns);
    int shift = e - 7;
    int b = 128 * (shift + 1) + (int)((ns >> shift) - 128);
    return b < HBUCKETS ? b : HBUCKETS - 1;
}
static inline uint64_t hvalue(int b) {
    if (b < 256) return (uint64_t)b;
    int shift = b / 128 - 1;
    uint64_t lo = (uint64_t)(128 + b % 128) << shift;
    return lo + ((1ull << shift) >> 1); /* bucket midpoint */
}
static inline void hrecord(uint64_t ns) { hist[hbucket(ns)]++; hist_n++; }
static double hpct_us(double p) {
    if (hist_n == 0) return 0;
    uint64_t target = (uint64_t)(p * (double)hist_n);
    if (target >= hist_n) target = hist_n - 1;
    uint64_t acc = 0;
    for (int b = 0; b < HBUCKETS; b++) {
        acc += hist[b];
        if (acc > target) return (double)hvalue(b) / 1000.0;
    }
    return 0;
}

/* ---------------------------------------------------------------- address */
static struct sockaddr_storage g_addr;
static socklen_t g_addrlen;

static void resolve(int socktype) {
    struct addrinfo hints = {0}, *res;
    char ps[16];
    snprintf(ps, sizeof ps, "%d", opt.port);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = socktype;
    hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV;
    int rc = getaddrinfo(opt.host, ps, &hints, &res);
    if (rc != 0) {
        fprintf(stderr, "loadgen: bad address %s: %s\n", opt.host, gai_strerror(rc));
        exit(2);
    }
    memcpy(&g_addr, res->ai_addr, res->ai_addrlen);
    g_addrlen = res->ai_addrlen;
    freeaddrinfo(res);
}

/* ---------------------------------------------------------------- TLS */
static SSL_CTX *g_ctx;
static char g_cipher[64] = "-";

static void tls_init(void) {
    g_ctx = SSL_CTX_new(TLS_client_method());
    if (!g_ctx) { ERR_print_errors_fp(stderr); exit(2); }
    SSL_CTX_set_verify(g_ctx, SSL_VERIFY_NONE, NULL);
    SSL_CTX_set_min_proto_version(g_ctx, TLS1_3_VERSION);
    /* Same suite for every server so the record cost is comparable. */
    SSL_CTX_set_ciphersuites(g_ctx, "TLS_AES_128_GCM_SHA256");
    SSL_CTX_set_mode(g_ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER |
                                SSL_MODE_RELEASE_BUFFERS);
    SSL_CTX_set_session_cache_mode(g_ctx, SSL_SESS_CACHE_OFF); /* full handshake each time */
}

/* ---------------------------------------------------------------- conns */
enum { S_FREE, S_CONNECTING, S_HANDSHAKE, S_RUN, S_DONE };

typedef struct conn {
    int fd;
    int state;
    SSL *ssl;
    uint32_t interest;
    int want;          /* EPOLLIN/EPOLLOUT wanted by the last would-block */
    size_t wpos, rpos; /* pingpong/connect message progress */
    uint64_t t_send;   /* start of current round trip (or connection) */
    uint64_t written, readb;
    uint64_t seq;      /* udp */
} conn_t;

static int g_ep;
static conn_t *g_conns;
static unsigned char *g_msg;     /* SIZE-byte message */
static unsigned char *g_chunk;   /* CHUNK-byte stream chunk */
static unsigned char g_rbuf[1 << 20]; /* reads, and the largest --chunk */

static uint64_t t_start, t_mstart, t_mend;
static uint64_t cnt_ops;       /* round trips / connections completed in window */
static uint64_t cnt_bytes;     /* bytes echoed in window (stream) */
static uint64_t cnt_all_ops;   /* round trips / connections completed, warm-up included */
static uint64_t cnt_errors, cnt_timeouts, cnt_established;
static int g_idle_alive;       /* idle: connections still open at the end of the hold */
static volatile sig_atomic_t g_stop;

static void on_signal(int s) { (void)s; g_stop = 1; }

static void set_interest(conn_t *c, uint32_t ev) {
    if (ev == c->interest) return;
    struct epoll_event e = {.events = ev, .data.ptr = c};
    if (epoll_ctl(g_ep, EPOLL_CTL_MOD, c->fd, &e) < 0) perror("epoll_ctl mod");
    c->interest = ev;
}

/* >0 bytes, 0 EOF, -1 would block (c->want set), -2 error */
static ssize_t cio_read(conn_t *c, void *buf, size_t n) {
    if (c->ssl) {
        int r = SSL_read(c->ssl, buf, (int)n);
        if (r > 0) return r;
        int e = SSL_get_error(c->ssl, r);
        if (e == SSL_ERROR_WANT_READ) { c->want = EPOLLIN; return -1; }
        if (e == SSL_ERROR_WANT_WRITE) { c->want = EPOLLOUT; return -1; }
        if (e == SSL_ERROR_ZERO_RETURN) return 0;
        return -2;
    }
    ssize_t r = read(c->fd, buf, n);
    if (r >= 0) return r;
    if (errno == EAGAIN || errno == EWOULDBLOCK) { c->want = EPOLLIN; return -1; }
    if (errno == EINTR) { c->want = EPOLLIN; return -1; }
    return -2;
}

static ssize_t cio_write(conn_t *c, const void *buf, size_t n) {
    if (c->ssl) {
        int r = SSL_write(c->ssl, buf, (int)n);
        if (r > 0) return r;
        int e = SSL_get_error(c->ssl, r);
        if (e == SSL_ERROR_WANT_WRITE) { c->want = EPOLLOUT; return -1; }
        if (e == SSL_ERROR_WANT_READ) { c->want = EPOLLIN; return -1; }
        return -2;
    }
    ssize_t r = send(c->fd, buf, n, MSG_NOSIGNAL);
    if (r >= 0) return r;
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) { c->want = EPOLLOUT; return -1; }
    return -2;
}

static void conn_close(conn_t *c) {
    if (c->ssl) {
        SSL_shutdown(c->ssl); /* best-effort close_notify, never waits */
        ERR_clear_error();
        SSL_free(c->ssl);
        c->ssl = NULL;
    }
    if (c->fd >= 0) close(c->fd);
    c->fd = -1;
    c->state = S_FREE;
    c->interest = 0;
}

/* start a non-blocking TCP connect; returns 0 ok, -1 error */
static int conn_open(conn_t *c) {
    int fd = socket(g_addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) { perror("socket"); return -1; }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (opt.sources > 1 && g_addr.ss_family == AF_INET) {
        /* more than one loopback source address: more than ~28,000 connections to one port */
        static unsigned next_source;
        struct sockaddr_in source = {.sin_family = AF_INET, .sin_port = 0};
        source.sin_addr.s_addr = htonl(0x7f000001u + next_source++ % (unsigned)opt.sources);
#ifdef IP_BIND_ADDRESS_NO_PORT
        setsockopt(fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof one);
#endif
        if (bind(fd, (struct sockaddr *)&source, sizeof source) < 0) { perror("bind source"); close(fd); return -1; }
    }
    c->fd = fd;
    c->ssl = NULL;
    c->wpos = c->rpos = 0;
    c->written = c->readb = 0;
    c->t_send = now_ns();
    int r = connect(fd, (struct sockaddr *)&g_addr, g_addrlen);
    if (r < 0 && errno != EINPROGRESS) {
        close(fd);
        c->fd = -1;
        return -1;
    }
    c->state = S_CONNECTING;
    c->interest = EPOLLOUT;
    struct epoll_event e = {.events = EPOLLOUT, .data.ptr = c};
    if (epoll_ctl(g_ep, EPOLL_CTL_ADD, fd, &e) < 0) { perror("epoll_ctl add"); close(fd); c->fd = -1; return -1; }
    return 0;
}

static inline int in_window(uint64_t t) { return t >= t_mstart && t < t_mend; }

static void conn_fail(conn_t *c) {
    cnt_errors++;
    if (c->ssl) ERR_clear_error();
    conn_close(c);
    c->state = S_DONE;
}

/* advance a connection that is connected + (TLS) handshaken.  Mode specific. */
static void drive(conn_t *c);

static void on_connected(conn_t *c) {
    cnt_established++;
    if (opt.tls) {
        c->ssl = SSL_new(g_ctx);
        SSL_set_fd(c->ssl, c->fd);
        SSL_set_connect_state(c->ssl);
        c->state = S_HANDSHAKE;
    } else {
        c->state = S_RUN;
    }
}

static void handshake(conn_t *c) {
    int r = SSL_do_handshake(c->ssl);
    if (r == 1) {
        if (g_cipher[0] == '-') snprintf(g_cipher, sizeof g_cipher, "%s", SSL_get_cipher_name(c->ssl));
        c->state = S_RUN;
        return;
    }
    int e = SSL_get_error(c->ssl, r);
    if (e == SSL_ERROR_WANT_READ) set_interest(c, EPOLLIN);
    else if (e == SSL_ERROR_WANT_WRITE) set_interest(c, EPOLLOUT);
    else { ERR_clear_error(); conn_fail(c); }
}

static void handle(conn_t *c, uint32_t ev) {
    if (c->state == S_CONNECTING) {
        int err = 0;
        socklen_t l = sizeof err;
        getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &l);
        if (err != 0 || (ev & (EPOLLERR | EPOLLHUP) && !(ev & EPOLLOUT))) {
            conn_fail(c);
            return;
        }
        on_connected(c);
    }
    if (c->state == S_HANDSHAKE) {
        handshake(c);
        if (c->state != S_RUN) return;
    }
    if (c->state == S_RUN) drive(c);
}

/* ---------------------------------------------------------------- pingpong
 * also used for connect (one exchange then close) and idle (one exchange). */
static void start_next_connect(conn_t *c);

static void drive_pingpong(conn_t *c) {
    for (;;) {
        if (c->wpos < (size_t)opt.size) {
            if (c->wpos == 0 && opt.mode == M_PINGPONG) c->t_send = now_ns();
            ssize_t n = cio_write(c, g_msg + c->wpos, (size_t)opt.size - c->wpos);
            if (n > 0) {
                c->wpos += (size_t)n;
                if (c->wpos < (size_t)opt.size) continue;
                /* message sent: the echo cannot be there yet, wait for EPOLLIN
                 * instead of a speculative read() that would return EAGAIN */
                set_interest(c, EPOLLIN);
                return;
            }
            if (n == -1) { set_interest(c, (uint32_t)c->want); return; }
            conn_fail(c);
            return;
        }
        ssize_t n = cio_read(c, g_rbuf, (size_t)opt.size - c->rpos);
        if (n > 0) {
            c->rpos += (size_t)n;
            if (c->rpos < (size_t)opt.size) continue;
            uint64_t t = now_ns();
            cnt_all_ops++;
            if (in_window(t)) {
                cnt_ops++;
                hrecord(t - c->t_send);
            }
            c->rpos = 0;
            c->wpos = 0;
            if (opt.mode == M_CONNECT) {
                conn_close(c);
                start_next_connect(c);
                return;
            }
            if (opt.mode == M_IDLE) {
                c->state = S_DONE; /* stays open, nothing more to do */
                c->wpos = (size_t)opt.size;
                set_interest(c, EPOLLIN);
                return;
            }
            if (g_stop) return;
            continue;
        }
        if (n == -1) { set_interest(c, (uint32_t)c->want); return; }
        conn_fail(c);
        return;
    }
}

static void start_next_connect(conn_t *c) {
    if (g_stop || now_ns() >= t_mend) { c->state = S_DONE; return; }
    if (conn_open(c) < 0) {
        cnt_errors++;
        c->state = S_DONE; /* slot is retried by the main loop */
    }
}

/* ---------------------------------------------------------------- stream */
static void drive_stream(conn_t *c) {
    uint32_t ev = EPOLLIN;
    /* drain reads until would-block (also empties TLS internal buffers) */
    for (;;) {
        ssize_t n = cio_read(c, g_rbuf, sizeof g_rbuf);
        if (n > 0) {
            c->readb += (uint64_t)n;
            if (in_window(now_ns())) cnt_bytes += (uint64_t)n;
            continue;
        }
        if (n == -1) { ev |= (uint32_t)c->want; break; }
        conn_fail(c);
        return;
    }
    /* fill writes until would-block or the in-flight window is full */
    while (c->written - c->readb < opt.window) {
        size_t off = (size_t)(c->written % opt.chunk);
        size_t len = opt.chunk - off;
        size_t room = opt.window - (size_t)(c->written - c->readb);
        if (len > room) len = room;
        ssize_t n = cio_write(c, g_chunk + off, len);
        if (n > 0) { c->written += (uint64_t)n; continue; }
        if (n == -1) { ev |= (uint32_t)c->want; break; }
        conn_fail(c);
        return;
    }
    set_interest(c, ev);
}

static void drive(conn_t *c) {
    if (opt.mode == M_STREAM) drive_stream(c);
    else drive_pingpong(c);
}

/* ---------------------------------------------------------------- UDP */
static int run_udp(void) {
    resolve(SOCK_DGRAM);
    for (int i = 0; i < opt.conns; i++) {
        conn_t *c = &g_conns[i];
        c->fd = socket(g_addr.ss_family, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (c->fd < 0 || connect(c->fd, (struct sockaddr *)&g_addr, g_addrlen) < 0) {
            perror("udp socket/connect");
            return 1;
        }
        struct epoll_event e = {.events = EPOLLIN, .data.ptr = c};
        epoll_ctl(g_ep, EPOLL_CTL_ADD, c->fd, &e);
        c->state = S_RUN;
    }
    unsigned char *buf = g_msg;
    const uint64_t rto = 200000000ull; /* 200 ms retransmit timeout */
    for (int i = 0; i < opt.conns; i++) {
        conn_t *c = &g_conns[i];
        c->seq = ((uint64_t)i << 40) | 1;
        memcpy(buf, &c->seq, 8);
        c->t_send = now_ns();
        send(c->fd, buf, (size_t)opt.size, 0);
    }
    struct epoll_event evs[1024];
    uint64_t last_scan = now_ns();
    for (;;) {
        uint64_t t = now_ns();
        if (t >= t_mend || g_stop) break;
        int n = epoll_wait(g_ep, evs, 1024, 10);
        for (int k = 0; k < n; k++) {
            conn_t *c = evs[k].data.ptr;
            for (;;) {
                ssize_t r = recv(c->fd, g_rbuf, sizeof g_rbuf, 0);
                if (r < 0) {
                    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) cnt_errors++;
                    break;
                }
                uint64_t seq;
                if (r < 8) continue;
                memcpy(&seq, g_rbuf, 8);
                if (seq != c->seq || r != opt.size) continue; /* stale (retransmitted) */
                uint64_t tr = now_ns();
                cnt_all_ops++;
                if (in_window(tr)) { cnt_ops++; hrecord(tr - c->t_send); }
                c->seq++;
                memcpy(buf, &c->seq, 8);
                c->t_send = now_ns();
                if (send(c->fd, buf, (size_t)opt.size, 0) < 0) cnt_errors++;
            }
        }
        t = now_ns();
        if (t - last_scan > 10000000ull) {
            last_scan = t;
            for (int i = 0; i < opt.conns; i++) {
                conn_t *c = &g_conns[i];
                if (t - c->t_send > rto) {
                    cnt_timeouts++;
                    c->seq++;
                    memcpy(buf, &c->seq, 8);
                    c->t_send = t;
                    send(c->fd, buf, (size_t)opt.size, 0);
                }
            }
        }
    }
    for (int i = 0; i < opt.conns; i++) close(g_conns[i].fd);
    return 0;
}

/* ---------------------------------------------------------------- TCP runs */
static int run_tcp(void) {
    resolve(SOCK_STREAM);
    if (opt.tls) tls_init();
    int nslots = opt.mode == M_CONNECT ? opt.conc : opt.conns;
    int inflight_limit = opt.conc; /* for idle: max concurrent connection attempts */
    int next_to_open = 0;
    struct epoll_event evs[1024];

    if (opt.mode == M_CONNECT) {
        for (int i = 0; i < nslots; i++) start_next_connect(&g_conns[i]);
    } else if (opt.mode == M_IDLE) {
        /* opened progressively below */
    } else {
        for (int i = 0; i < nslots; i++) {
            if (conn_open(&g_conns[i]) < 0) { fprintf(stderr, "loadgen: connect failed\n"); cnt_errors++; g_conns[i].state = S_DONE; }
        }
    }

    int idle_ready = 0;
    uint64_t idle_ready_t = 0;
    uint64_t idle_deadline = t_start + (uint64_t)(opt.timeout * 1e9);
    for (;;) {
        uint64_t t = now_ns();
        if (g_stop) break;
        if (opt.mode == M_IDLE) {
            if (!idle_ready) {
                /* count connections that are mid-setup, open more up to the limit */
                int pending = 0, done = 0;
                for (int i = 0; i < next_to_open; i++) {
                    conn_t *c = &g_conns[i];
                    if (c->state == S_DONE) done++;
                    else pending++;
                }
                while (pending < inflight_limit && next_to_open < nslots) {
                    conn_t *c = &g_conns[next_to_open++];
                    if (conn_open(c) < 0) { cnt_errors++; c->state = S_DONE; done++; }
                    else pending++;
                }
                if (done == nslots || t >= idle_deadline) {
                    idle_ready = 1;
                    idle_ready_t = t;
                    int ok = 0;
                    for (int i = 0; i < nslots; i++) ok += g_conns[i].fd >= 0 && g_conns[i].state == S_DONE;
                    printf("IDLE_READY established=%d\n", ok);
                    fflush(stdout);
                }
            } else if (t - idle_ready_t >= (uint64_t)(opt.hold * 1e9)) {
                break;
            }
        } else if (t >= t_mend) {
            break;
        }
        if (opt.mode == M_CONNECT) {
            /* restart slots that failed to open (e.g. transient EADDRNOTAVAIL) */
            for (int i = 0; i < nslots; i++)
                if (g_conns[i].state == S_DONE && t < t_mend) start_next_connect(&g_conns[i]);
        }
        int n = epoll_wait(g_ep, evs, 1024, 10);
        for (int k = 0; k < n; k++) {
            conn_t *c = evs[k].data.ptr;
            if (c->fd < 0) continue;
            if (opt.mode == M_IDLE && c->state == S_DONE) {
                /* an idle connection became readable: EOF/error from server */
                ssize_t r = read(c->fd, g_rbuf, sizeof g_rbuf);
                if (r == 0 || (r < 0 && errno != EAGAIN)) { cnt_errors++; conn_close(c); c->state = S_DONE; }
                continue;
            }
            handle(c, evs[k].events);
        }
    }
    if (opt.mode == M_IDLE)
        for (int i = 0; i < nslots; i++) g_idle_alive += g_conns[i].fd >= 0 && g_conns[i].state == S_DONE;
    for (int i = 0; i < nslots; i++)
        if (g_conns[i].fd >= 0) conn_close(&g_conns[i]);
    return 0;
}

/* ---------------------------------------------------------------- main */
static void usage(void) {
    fprintf(stderr,
            "usage: loadgen --mode pingpong|stream|connect|udp|idle --port P [options]\n"
            "  --host ADDR       numeric IPv4/IPv6 address (default 127.0.0.1)\n"
            "  --conns N         connections / UDP clients / idle connections (default 1)\n"
            "  --size B          message size for pingpong/connect/udp/idle (default 64)\n"
            "  --duration S      measured seconds (default 5)\n"
            "  --warmup S        unmeasured seconds before the window (default 1)\n"
            "  --tls             TLS 1.3 client (no verification) for TCP modes\n"
            "  --chunk B         stream write chunk (default 65536)\n"
            "  --window B        stream max un-echoed bytes per connection (default 4 MiB)\n"
            "  --conc N          connect: concurrent slots; idle: concurrent opens (default 64)\n"
            "  --hold S          idle: seconds to hold the connections (default 3)\n"
            "  --timeout S       idle: max seconds to establish all (default 30)\n"
            "  --sources N       TCP over IPv4: use source addresses 127.0.0.1 .. 127.0.0.N\n"
            "  --label TEXT      copied into the RESULT line as server=TEXT\n");
    exit(2);
}

int main(int argc, char **argv) {
    static struct option lo[] = {
        {"mode", 1, 0, 'm'},   {"host", 1, 0, 'h'},   {"port", 1, 0, 'p'},    {"conns", 1, 0, 'n'},
        {"size", 1, 0, 's'},   {"duration", 1, 0, 'd'}, {"warmup", 1, 0, 'w'}, {"tls", 0, 0, 't'},
        {"chunk", 1, 0, 'c'},  {"window", 1, 0, 'W'}, {"hold", 1, 0, 'H'},    {"conc", 1, 0, 'C'},
        {"timeout", 1, 0, 'T'}, {"label", 1, 0, 'l'}, {"sources", 1, 0, 'S'}, {0, 0, 0, 0}};
    int ch;
    while ((ch = getopt_long(argc, argv, "", lo, NULL)) != -1) {
        switch (ch) {
        case 'm': {
            int found = 0;
            for (int i = 0; i < 5; i++)
                if (!strcmp(optarg, mode_names[i])) { opt.mode = i; found = 1; }
            if (!found) usage();
            break;
        }
        case 'h': opt.host = optarg; break;
        case 'p': opt.port = atoi(optarg); break;
        case 'n': opt.conns = atoi(optarg); break;
        case 's': opt.size = atoi(optarg); break;
        case 'd': opt.duration = atof(optarg); break;
        case 'w': opt.warmup = atof(optarg); break;
        case 't': opt.tls = 1; break;
        case 'c': opt.chunk = (size_t)atol(optarg); break;
        case 'W': opt.window = (size_t)atol(optarg); break;
        case 'H': opt.hold = atof(optarg); break;
        case 'C': opt.conc = atoi(optarg); break;
        case 'T': opt.timeout = atof(optarg); break;
        case 'l': opt.label = optarg; break;
        case 'S': opt.sources = atoi(optarg) > 0 ? atoi(optarg) : 1; break;
        default: usage();
        }
    }
    if (opt.port <= 0 || opt.conns <= 0 || opt.size < 8 || opt.size > 65536 || opt.conc <= 0 ||
        opt.chunk == 0 || opt.chunk > sizeof g_rbuf || opt.duration <= 0)
        usage();
    if (opt.mode == M_UDP && opt.tls) { fprintf(stderr, "loadgen: --tls is not supported for udp\n"); return 2; }

    signal(SIGPIPE, SIG_IGN);
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);

    /* raise the fd limit to the hard limit */
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }

    int nslots = opt.mode == M_CONNECT ? opt.conc : opt.conns;
    g_conns = calloc((size_t)nslots, sizeof(conn_t));
    for (int i = 0; i < nslots; i++) g_conns[i].fd = -1;
    g_msg = malloc((size_t)opt.size);
    g_chunk = malloc(opt.chunk);
    for (int i = 0; i < opt.size; i++) g_msg[i] = (unsigned char)('a' + i % 26);
    for (size_t i = 0; i < opt.chunk; i++) g_chunk[i] = (unsigned char)('A' + i % 26);
    g_ep = epoll_create1(EPOLL_CLOEXEC);

    t_start = now_ns();
    t_mstart = t_start + (uint64_t)(opt.warmup * 1e9);
    t_mend = t_mstart + (uint64_t)(opt.duration * 1e9);

    int rc = opt.mode == M_UDP ? run_udp() : run_tcp();
    double secs = opt.duration;
    double rate = (double)cnt_ops / secs;

    printf("RESULT mode=%s server=%s host=%s port=%d tls=%d conns=%d size=%d duration_s=%.2f",
           mode_names[opt.mode], opt.label[0] ? opt.label : "-", opt.host, opt.port, opt.tls,
           opt.mode == M_CONNECT ? opt.conc : opt.conns, opt.size, secs);
    switch (opt.mode) {
    case M_PINGPONG:
    case M_UDP:
        printf(" rps=%.0f p50_us=%.1f p99_us=%.1f p999_us=%.1f", rate, hpct_us(0.5), hpct_us(0.99), hpct_us(0.999));
        break;
    case M_CONNECT:
        printf(" cps=%.0f p50_us=%.1f p99_us=%.1f p999_us=%.1f", rate, hpct_us(0.5), hpct_us(0.99), hpct_us(0.999));
        break;
    case M_STREAM:
        printf(" chunk=%zu window=%zu mbps=%.1f", opt.chunk, opt.window, (double)cnt_bytes / secs / 1e6);
        break;
    case M_IDLE:
        printf(" established=%d hold_s=%.1f", g_idle_alive, opt.hold);
        break;
    }
    if (opt.tls) printf(" cipher=%s", g_cipher);
    {
        /* loadgen's own CPU use over its whole run: ~1.0 means the load
         * generator itself was saturated (result is a lower bound) */
        struct rusage ru;
        getrusage(RUSAGE_SELF, &ru);
        double cpu = (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + (double)ru.ru_stime.tv_sec +
                     ru.ru_stime.tv_usec / 1e6;
        double wall = (double)(now_ns() - t_start) / 1e9;
        printf(" lg_cpu=%.2f", wall > 0 ? cpu / wall : 0.0);
    }
    printf(" total_ops=%llu", (unsigned long long)cnt_all_ops);
    printf(" errors=%llu timeouts=%llu\n", (unsigned long long)cnt_errors, (unsigned long long)cnt_timeouts);
    fflush(stdout);
    return rc;
}
