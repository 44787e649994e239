/* SPDX-License-Identifier: MIT */
#include "fuzz_support.h"

#include <arpa/inet.h>
#include <errno.h>
#include <float.h>
#include <limits.h>
#include <linux/sockios.h>
#include <math.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

void (*fz_context_printer)(void) = NULL;

void fz_dump_context(void) {
    if (fz_context_printer) fz_context_printer();
    fflush(stderr);
}

void fz_input_init(fz_input_t *input, const uint8_t *data, size_t size) {
    input->data = data;
    input->size = size;
    input->position = 0;
}

int fz_input_empty(const fz_input_t *input) {
    return input->position >= input->size;
}

uint8_t fz_u8(fz_input_t *input) {
    return input->position < input->size ? input->data[input->position++] : 0;
}

uint16_t fz_u16(fz_input_t *input) {
    uint16_t high = fz_u8(input);
    return (uint16_t)(high << 8 | fz_u8(input));
}

uint32_t fz_u32(fz_input_t *input) {
    uint32_t high = fz_u16(input);
    return high << 16 | fz_u16(input);
}

size_t fz_range(fz_input_t *input, size_t low, size_t high) {
    if (high <= low) return low;
    size_t span = high - low + 1;
    size_t value = span <= 256 ? fz_u8(input) : span <= 65536 ? fz_u16(input) : fz_u32(input);
    return low + value % span;
}

double fz_timeout(fz_input_t *input) {
    switch (fz_u8(input) % 12) {
    case 0: return -1;
    case 1: return 0;
    case 2: return NAN;
    case 3: return INFINITY;
    case 4: return -INFINITY;
    case 5: return DBL_MAX;
    case 6: return 1e-9;
    case 7: return 1e300;
    case 8: return -0.0;
    case 9: return (double)fz_u8(input) / 1000.0; /* up to a quarter of a second */
    case 10: return DBL_MIN;
    default: return -1;
    }
}

size_t fz_size(fz_input_t *input) {
    switch (fz_u8(input) % 10) {
    case 0: return 0;
    case 1: return 1;
    case 2: return SIZE_MAX;
    case 3: return (size_t)SSIZE_MAX;
    case 4: return (size_t)SSIZE_MAX + 1;
    case 5: return (size_t)1 << 31;
    case 6: return ((size_t)1 << 32) + 1;
    case 7: return 16u << 20;
    default: return fz_u16(input);
    }
}

double fz_now(void) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (double)now.tv_sec + (double)now.tv_nsec / 1e9;
}

void fz_cond_init(pthread_cond_t *condition) {
    pthread_condattr_t attributes;
    pthread_condattr_init(&attributes);
    pthread_condattr_setclock(&attributes, CLOCK_MONOTONIC);
    pthread_cond_init(condition, &attributes);
    pthread_condattr_destroy(&attributes);
}

int fz_cond_wait_until(pthread_cond_t *condition, pthread_mutex_t *lock, double deadline) {
    if (fz_now() >= deadline) return 0;
    struct timespec until;
    until.tv_sec = (time_t)deadline;
    until.tv_nsec = (long)((deadline - (double)until.tv_sec) * 1e9);
    pthread_cond_timedwait(condition, lock, &until);
    return fz_now() < deadline;
}

static pthread_once_t listener_once = PTHREAD_ONCE_INIT;
static int shared_listener = -1;
static uint16_t shared_port = 0;

static void make_listener(void) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in address = {0};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0 || bind(fd, (struct sockaddr *)&address, sizeof address) != 0 || listen(fd, 128) != 0) {
        perror("fuzz listener");
        abort();
    }
    socklen_t length = sizeof address;
    getsockname(fd, (struct sockaddr *)&address, &length);
    shared_listener = fd;
    shared_port = ntohs(address.sin_port);
}

int fz_tcp_connect_to(uint16_t port, int *out) {
    int client = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (client < 0) return -1;
    struct sockaddr_in address = {0};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    address.sin_port = htons(port);
    if (connect(client, (struct sockaddr *)&address, sizeof address) != 0) {
        close(client);
        return -1;
    }
    *out = client;
    return 0;
}

int fz_tcp_pair(int *a, int *b) {
    pthread_once(&listener_once, make_listener);
    int client = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (client < 0) return -1;
    struct sockaddr_in address = {0};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    address.sin_port = htons(shared_port);
    if (connect(client, (struct sockaddr *)&address, sizeof address) != 0) {
        close(client);
        return -1;
    }
    int server = accept4(shared_listener, NULL, NULL, SOCK_CLOEXEC);
    if (server < 0) {
        close(client);
        return -1;
    }
    int one = 1;
    setsockopt(client, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    *a = client;
    *b = server;
    return 0;
}

size_t fz_send_all(int fd, const void *data, size_t length, double deadline) {
    size_t sent = 0;
    while (sent < length) {
        ssize_t count = send(fd, (const char *)data + sent, length - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (count > 0) {
            sent += (size_t)count;
            continue;
        }
        if (count < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) break;
        double left = deadline - fz_now();
        if (left <= 0) break;
        struct pollfd poller = {.fd = fd, .events = POLLOUT};
        poll(&poller, 1, (int)(left * 1000) + 1);
    }
    return sent;
}

int fz_wait_sent(int fd, double deadline) {
    for (;;) {
        int queued = 0;
        if (ioctl(fd, SIOCOUTQ, &queued) != 0 || queued == 0) return 1;
        /* A connection the other end reset keeps its count: nothing more will go. */
        struct tcp_info info;
        socklen_t length = sizeof info;
        if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &length) == 0 && info.tcpi_state == TCP_CLOSE) return 1;
        if (fz_now() >= deadline) return 0;
        /* No event says "acknowledged": poll for it briefly (a peer, not the library). */
        struct timespec pause = {0, 200 * 1000};
        nanosleep(&pause, NULL);
    }
}

void fz_close_with_reset(int fd) {
    struct linger linger = {.l_onoff = 1, .l_linger = 0};
    setsockopt(fd, SOL_SOCKET, SO_LINGER, &linger, sizeof linger);
    close(fd);
}

void fz_certificate_paths(const char *fuzzer, char cert[512], char key[512]) {
    const char *directory = getenv("FUZZ_CERT_DIR");
    if (!directory) {
        fprintf(stderr, "%s: set FUZZ_CERT_DIR to a directory with cert.pem and key.pem (fuzz/run.py does)\n", fuzzer);
        exit(2);
    }
    snprintf(cert, 512, "%s/cert.pem", directory);
    snprintf(key, 512, "%s/key.pem", directory);
}

const char *fz_error_name(int code) {
    return code == 0 ? "SK_OK" : sk_error_name(code);
}
