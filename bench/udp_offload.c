/* SPDX-License-Identifier: MIT */
/* udp_offload - UDP segmentation and receive offload (UDP_SEGMENT, UDP_GRO) against
 * today's sendmmsg/recvmmsg batches, side by side in one run, through the C API.
 *
 *   bin/udp_offload [-d SECONDS] [-s DATAGRAM_BYTES] [-n SEGMENTS] [-r REPS]
 *
 * One process, two SocketKit UDP sockets on loopback (each on its own loop of the default
 * group): the main thread sends, keeping a window of sends in the queue (a did_send gives
 * back a credit), so that the loop takes them in sendmmsg batches; the receiver counts
 * datagrams in did_receive. Modes, each a fresh pair of sockets:
 *   mmsg     datagrams of DATAGRAM_BYTES, one per send: the engine batches them into
 *            sendmmsg, the receiver reads with recvmmsg (what SocketKit did before);
 *   gso      sends of SEGMENTS x DATAGRAM_BYTES with the segment size set: the kernel cuts
 *            them; the receiver reads the datagrams with recvmmsg;
 *   gso+gro  the same, and the receiver with receive offload: the kernel hands over the
 *            datagrams of one send in one buffer, which SocketKit cuts apart.
 * Each prints datagrams delivered per second and process CPU (user + system, both loops)
 * per datagram delivered; the summary gives them as ratios to mmsg. Loopback drops what the
 * receiver cannot keep up with: the CPU per delivered datagram is the figure to compare. */
#define _GNU_SOURCE 1
#include <socketkit.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

typedef struct run {
    atomic_ulong datagrams;
    atomic_ulong bytes;
    atomic_ulong sent;        /* datagrams the kernel took (sends x segments) */
    sem_t credits;            /* sends the window has room for */
    unsigned long per_send;
    struct sockaddr_in target;
    unsigned char *payload;
    size_t send_length;
} run_t;

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static double cpu_seconds(void) {
    struct rusage usage;
    getrusage(RUSAGE_SELF, &usage);
    return (double)usage.ru_utime.tv_sec + (double)usage.ru_utime.tv_usec / 1e6 + (double)usage.ru_stime.tv_sec +
           (double)usage.ru_stime.tv_usec / 1e6;
}

static void on_receive(sk_udp_socket_t *sock, const void *data, size_t length, const struct sockaddr *address,
                       socklen_t address_length, void *context, void *userdata) {
    (void)sock, (void)data, (void)address, (void)address_length, (void)context;
    run_t *run = userdata;
    atomic_fetch_add_explicit(&run->datagrams, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&run->bytes, length, memory_order_relaxed);
}

static void send_one(sk_udp_socket_t *sock, run_t *run) {
    sk_error_t error;
    if (sk_udp_socket_send_to_address(sock, run->payload, run->send_length, (struct sockaddr *)&run->target,
                                      sizeof run->target, -1, 0, &error) != SK_OK) {
        fprintf(stderr, "send: %s\n", error.message);
        exit(1);
    }
}

/* The window: each completed send makes room for the next. */
static void on_send(sk_udp_socket_t *sock, long tag, void *userdata) {
    (void)sock, (void)tag;
    run_t *run = userdata;
    atomic_fetch_add_explicit(&run->sent, run->per_send, memory_order_relaxed);
    sem_post(&run->credits);
}

/* Sends from this thread while the window has room, until `until`. */
static void send_until(sk_udp_socket_t *sender, run_t *run, double until) {
    while (now() < until) {
        struct timespec limit;
        clock_gettime(CLOCK_REALTIME, &limit);
        limit.tv_nsec += 20 * 1000 * 1000;
        if (limit.tv_nsec >= 1000000000L) {
            limit.tv_sec += 1;
            limit.tv_nsec -= 1000000000L;
        }
        if (sem_timedwait(&run->credits, &limit) == 0) send_one(sender, run);
    }
}

static void on_not_send(sk_udp_socket_t *sock, long tag, const sk_error_t *error, void *userdata) {
    (void)sock, (void)tag, (void)userdata;
    fprintf(stderr, "not sent: %s\n", error->message);
    exit(1);
}

static void check(int status, const sk_error_t *error, const char *what) {
    if (status < 0) {
        fprintf(stderr, "%s: %s\n", what, error->message);
        exit(1);
    }
}

/* One mode for `seconds`: datagrams per second and CPU µs per datagram. */
static void measure(const char *mode, size_t datagram, size_t segments, double seconds, double *out_rate,
                    double *out_cpu_us) {
    int gso = strcmp(mode, "mmsg") != 0, gro = strcmp(mode, "gso+gro") == 0;
    run_t run;
    memset(&run, 0, sizeof run);
    run.send_length = gso ? datagram * segments : datagram;
    run.per_send = gso ? segments : 1;
    run.payload = calloc(1, run.send_length);
    sk_error_t error;
    sk_udp_socket_delegate_t receiving = {.did_receive = on_receive};
    sk_udp_socket_delegate_t sending = {.did_send = on_send, .did_not_send = on_not_send};
    sk_udp_socket_t *receiver = NULL, *sender = NULL;
    check(sk_udp_socket_create(&receiving, sizeof receiving, &run, NULL, NULL, &receiver, &error), &error, "create");
    check(sk_udp_socket_create(&sending, sizeof sending, &run, NULL, NULL, &sender, &error), &error, "create");
    check(sk_udp_socket_set_ipv6_enabled(receiver, 0), &error, "families");
    check(sk_udp_socket_set_ipv6_enabled(sender, 0), &error, "families");
    check(sk_udp_socket_set_buffer_sizes(receiver, 0, 8 << 20, &error), &error, "SO_RCVBUF");
    check(sk_udp_socket_set_buffer_sizes(sender, 8 << 20, 0, &error), &error, "SO_SNDBUF");
    if (gro) check(sk_udp_socket_set_receive_offload(receiver, 1, &error), &error, "receive offload");
    if (gso) check(sk_udp_socket_set_send_segment_size(sender, datagram, &error), &error, "segment size");
    check(sk_udp_socket_bind_to_port(receiver, "127.0.0.1", 0, &error), &error, "bind");
    uint16_t port = 0;
    sk_udp_socket_get_local_port(receiver, AF_INET, &port);
    run.target.sin_family = AF_INET;
    run.target.sin_port = htons(port);
    run.target.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    check(sk_udp_socket_begin_receiving(receiver, &error), &error, "receive");

    /* The same bytes in flight either way: 256 datagrams' worth of sends. */
    sem_init(&run.credits, 0, (unsigned)(256 / (gso ? segments : 1)));
    send_until(sender, &run, now() + 0.5); /* warm-up */
    unsigned long first = atomic_load(&run.datagrams), first_sent = atomic_load(&run.sent);
    double cpu = cpu_seconds(), start = now();
    send_until(sender, &run, start + seconds);
    unsigned long last = atomic_load(&run.datagrams), last_sent = atomic_load(&run.sent);
    double elapsed = now() - start, used = cpu_seconds() - cpu;
    sk_udp_socket_release(sender);
    sem_destroy(&run.credits);
    sk_udp_socket_release(receiver);
    free(run.payload);
    unsigned long delivered = last - first;
    *out_rate = (double)delivered / elapsed;
    *out_cpu_us = delivered ? used * 1e6 / (double)delivered : 0;
    unsigned long sent = last_sent - first_sent;
    printf("RESULT mode=%s datagram=%zu segments=%zu datagrams_per_s=%.0f cpu_us_per_datagram=%.3f delivered=%.2f\n",
           mode, datagram, gso ? segments : 1, *out_rate, *out_cpu_us, sent ? (double)delivered / (double)sent : 0);
    fflush(stdout);
}

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    double seconds = 3;
    size_t datagram = 1200, segments = 32;
    int reps = 3, option;
    while ((option = getopt(argc, argv, "d:s:n:r:")) != -1) {
        switch (option) {
        case 'd': seconds = atof(optarg); break;
        case 's': datagram = (size_t)atol(optarg); break;
        case 'n': segments = (size_t)atol(optarg); break;
        case 'r': reps = atoi(optarg); break;
        default:
            fprintf(stderr, "usage: %s [-d SECONDS] [-s DATAGRAM_BYTES] [-n SEGMENTS] [-r REPS]\n", argv[0]);
            return 2;
        }
    }
    if (reps < 1 || reps > 64 || segments < 1 || segments > 64 || datagram * segments > 65507) {
        fprintf(stderr, "out of range (segments 1...64, datagram x segments <= 65507, reps 1...64)\n");
        return 2;
    }
    const char *modes[] = {"mmsg", "gso", "gso+gro"};
    double rate[3][64], cpu[3][64];
    /* Interleaved, so that the machine's other load falls on every mode alike. */
    for (int rep = 0; rep < reps; rep++) {
        for (int m = 0; m < 3; m++) measure(modes[m], datagram, segments, seconds, &rate[m][rep], &cpu[m][rep]);
    }
    double median_rate[3], median_cpu[3];
    for (int m = 0; m < 3; m++) {
        qsort(rate[m], (size_t)reps, sizeof(double), by_value);
        qsort(cpu[m], (size_t)reps, sizeof(double), by_value);
        median_rate[m] = rate[m][reps / 2];
        median_cpu[m] = cpu[m][reps / 2];
    }
    printf("\n| mode | datagrams/s (median of %d) | vs mmsg | CPU µs per datagram | vs mmsg |\n|---|---|---|---|---|\n",
           reps);
    for (int m = 0; m < 3; m++) {
        printf("| %s | %.0f | %.2fx | %.3f | %.2fx |\n", modes[m], median_rate[m], median_rate[m] / median_rate[0],
               median_cpu[m], median_cpu[m] / median_cpu[0]);
    }
    return 0;
}
