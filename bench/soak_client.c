/* SPDX-License-Identifier: MIT */
/*
 * soak_client.c - the soak's load: N connections to an echo server, each sending messages
 * of random sizes and checking every byte of the echo, for a while.
 *
 *     soak_client --port P [--connections 1000] [--seconds 60] [--max-size 65536]
 *                 [--churn 50] [--seed 1]
 *
 * One thread, epoll, non-blocking sockets. Each connection sends a message of 1..max-size
 * bytes (a pattern that depends on the connection and the byte's offset in its stream), reads
 * the echo back and compares each byte as it arrives, then sends the next. After a message
 * a connection is closed and replaced by a new one with probability 1/churn (0: never), so
 * descriptors and per-connection memory come and go in the server. Every second it prints
 * "PROGRESS bytes=... messages=... connections=..." and at the end one line
 * "RESULT bytes=... messages=... reconnects=... mismatches=... errors=... stalled=...": any
 * mismatch (a wrong byte), error (a reset, an early close, a refused connect) or connection
 * that made no progress for 10 s is counted, and the exit status is 1 if any is nonzero.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
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

typedef struct connection {
    int fd;
    uint64_t id;            /* changes with each reconnect: the pattern's key */
    uint64_t random;
    size_t message;         /* this message's size */
    size_t sent;            /* of this message */
    size_t received;        /* of this message's echo */
    uint64_t stream_offset; /* bytes of this connection's stream before this message */
    double last_progress;
    int connecting;
} connection_t;

static uint16_t port;
static size_t max_size = 65536;
static int churn = 50;
static unsigned long long total_bytes, messages, reconnects, mismatches, errors, stalled;
static int epoll_fd;
static uint64_t next_id = 1;

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static uint64_t step(uint64_t *state) {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    return *state;
}

/* The byte at `offset` of connection `id`'s stream. */
static inline unsigned char pattern(uint64_t id, uint64_t offset) {
    uint64_t x = id * 0x9E3779B97F4A7C15ull + (offset >> 3) * 0xBF58476D1CE4E5B9ull;
    x ^= x >> 31;
    return (unsigned char)(x >> ((offset & 7) * 8));
}

static void start_message(connection_t *c) {
    c->message = 1 + (size_t)(step(&c->random) % max_size);
    c->sent = 0;
    c->received = 0;
}

static int open_connection(connection_t *c, uint64_t seed) {
    c->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (c->fd < 0) return -1;
    int one = 1;
    setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    struct sockaddr_in address = {0};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    address.sin_port = htons(port);
    if (connect(c->fd, (struct sockaddr *)&address, sizeof address) != 0 && errno != EINPROGRESS) {
        close(c->fd);
        c->fd = -1;
        return -1;
    }
    c->id = next_id++;
    c->random = seed ^ (c->id * 0xD1B54A32D192ED03ull) ^ 1;
    c->stream_offset = 0;
    c->connecting = 1;
    c->last_progress = now();
    start_message(c);
    struct epoll_event event = {.events = EPOLLIN | EPOLLOUT, .data.ptr = c};
    epoll_ctl(epoll_fd, EPOLL_CTL_ADD, c->fd, &event);
    return 0;
}

static void close_connection(connection_t *c) {
    if (c->fd >= 0) {
        epoll_ctl(epoll_fd, EPOLL_CTL_DEL, c->fd, NULL);
        close(c->fd);
    }
    c->fd = -1;
}

/* Fails the connection (counted) and replaces it. */
static void fail(connection_t *c, uint64_t seed, const char *why) {
    errors++;
    if (errors <= 10) fprintf(stderr, "soak_client: connection %llu: %s\n", (unsigned long long)c->id, why);
    close_connection(c);
    if (open_connection(c, seed) != 0) errors++;
}

static void update_interest(connection_t *c) {
    struct epoll_event event = {.events = EPOLLIN | (c->sent < c->message ? EPOLLOUT : 0), .data.ptr = c};
    epoll_ctl(epoll_fd, EPOLL_CTL_MOD, c->fd, &event);
}

static void service(connection_t *c, uint32_t events, uint64_t seed) {
    static unsigned char buffer[256 * 1024];
    if (c->connecting) {
        int error = 0;
        socklen_t length = sizeof error;
        getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &error, &length);
        if (error) {
            fail(c, seed, strerror(error));
            return;
        }
        c->connecting = 0;
    }
    if ((events & EPOLLOUT) && c->sent < c->message) {
        size_t want = c->message - c->sent;
        if (want > sizeof buffer) want = sizeof buffer;
        for (size_t i = 0; i < want; i++) buffer[i] = pattern(c->id, c->stream_offset + c->sent + i);
        ssize_t count = send(c->fd, buffer, want, MSG_NOSIGNAL);
        if (count > 0) {
            c->sent += (size_t)count;
            c->last_progress = now();
        } else if (count < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
            fail(c, seed, strerror(errno));
            return;
        }
    }
    if (events & (EPOLLIN | EPOLLHUP | EPOLLERR)) {
        for (;;) {
            ssize_t count = recv(c->fd, buffer, sizeof buffer, 0);
            if (count > 0) {
                if (c->received + (size_t)count > c->sent) {
                    fail(c, seed, "more echoed than sent");
                    mismatches++;
                    return;
                }
                for (ssize_t i = 0; i < count; i++) {
                    if (buffer[i] != pattern(c->id, c->stream_offset + c->received + (size_t)i)) {
                        mismatches++;
                        fail(c, seed, "a byte of the echo differs from what was sent");
                        return;
                    }
                }
                c->received += (size_t)count;
                total_bytes += (size_t)count;
                c->last_progress = now();
                if (c->received == c->message) {
                    messages++;
                    c->stream_offset += c->message;
                    if (churn > 0 && step(&c->random) % (uint64_t)churn == 0) {
                        reconnects++;
                        close_connection(c);
                        if (open_connection(c, seed) != 0) errors++;
                        return;
                    }
                    start_message(c);
                }
                continue;
            }
            if (count == 0) {
                fail(c, seed, "the server closed the connection");
                return;
            }
            if (errno == EAGAIN || errno == EWOULDBLOCK) break;
            if (errno != EINTR) {
                fail(c, seed, strerror(errno));
                return;
            }
        }
    }
    update_interest(c);
}

int main(int argc, char **argv) {
    int count = 1000;
    double seconds = 60;
    uint64_t seed = 1;
    static struct option options[] = {{"port", 1, 0, 'p'}, {"connections", 1, 0, 'n'}, {"seconds", 1, 0, 's'},
                                      {"max-size", 1, 0, 'm'}, {"churn", 1, 0, 'c'}, {"seed", 1, 0, 'r'}, {0, 0, 0, 0}};
    for (int option; (option = getopt_long(argc, argv, "", options, NULL)) != -1;) {
        switch (option) {
        case 'p': port = (uint16_t)atoi(optarg); break;
        case 'n': count = atoi(optarg); break;
        case 's': seconds = atof(optarg); break;
        case 'm': max_size = (size_t)atol(optarg); break;
        case 'c': churn = atoi(optarg); break;
        case 'r': seed = (uint64_t)atoll(optarg); break;
        default: fprintf(stderr, "usage: see the top of soak_client.c\n"); return 2;
        }
    }
    if (!port || count < 1 || max_size < 1) {
        fprintf(stderr, "soak_client: --port is required\n");
        return 2;
    }
    struct rlimit limit;
    getrlimit(RLIMIT_NOFILE, &limit);
    if (limit.rlim_cur < (rlim_t)count + 64 && limit.rlim_max >= (rlim_t)count + 64) {
        limit.rlim_cur = (rlim_t)count + 64;
        setrlimit(RLIMIT_NOFILE, &limit);
    }
    epoll_fd = epoll_create1(EPOLL_CLOEXEC);
    connection_t *connections = calloc((size_t)count, sizeof *connections);
    for (int i = 0; i < count; i++) {
        if (open_connection(&connections[i], seed) != 0) {
            fprintf(stderr, "soak_client: connect: %s\n", strerror(errno));
            return 1;
        }
    }
    double began = now(), next_report = began + 1;
    struct epoll_event events[256];
    while (now() - began < seconds) {
        int ready = epoll_wait(epoll_fd, events, 256, 100);
        for (int i = 0; i < ready; i++) service(events[i].data.ptr, events[i].events, seed);
        double t = now();
        if (t >= next_report) {
            next_report = t + 1;
            int live = 0;
            for (int i = 0; i < count; i++) {
                if (connections[i].fd < 0) continue;
                live++;
                if (t - connections[i].last_progress > 10) {
                    stalled++;
                    fprintf(stderr, "soak_client: connection %llu made no progress for 10 s (message %zu: %zu sent, "
                            "%zu echoed)\n", (unsigned long long)connections[i].id, connections[i].message,
                            connections[i].sent, connections[i].received);
                    connections[i].last_progress = t;
                }
            }
            printf("PROGRESS bytes=%llu messages=%llu connections=%d\n", total_bytes, messages, live);
            fflush(stdout);
        }
    }
    for (int i = 0; i < count; i++) close_connection(&connections[i]);
    printf("RESULT bytes=%llu messages=%llu reconnects=%llu mismatches=%llu errors=%llu stalled=%llu\n", total_bytes,
           messages, reconnects, mismatches, errors, stalled);
    return mismatches || errors || stalled ? 1 : 0;
}
