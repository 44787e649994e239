/* SPDX-License-Identifier: MIT */
/*
 * tls_fuzzer.c - a SocketKit TLS server fed mutated handshakes.
 *
 * The process runs a TLS echo server on SocketKit (the C API, as the examples do: start_tls
 * on accept, then read lines and write them back) with a short handshake timeout. Each input
 * is one raw TCP client: it sends the input's bytes (seeds are real ClientHellos from
 * OpenSSL; the mutations make truncated hellos, bad record and handshake lengths, odd record
 * types, garbage) in the chunks the input chooses, then closes, resets, half-closes, holds
 * the connection open saying nothing more, or floods it with the bytes repeated. Or it is a
 * real client (OpenSSL): a handshake, then the input's bytes as lines in one write, then a
 * reset or a close at once, so that the server's echo from did_read (as the examples do)
 * meets a peer that is gone while the rest of the lines wait in its prebuffer (issue 26.2).
 *
 * Oracles, checked by a monitor thread while the fuzzer goes on: the server accepts every
 * connection, and each one ends with an error (never did_secure: no client here finishes a
 * handshake) within the handshake timeout plus a slack; meanwhile a probe thread completes
 * a real TLS handshake and echo with the server (OpenSSL client) every 250 ms, each within
 * a bound. A violation aborts and prints the input that caused it (the input libFuzzer
 * reports then is a later one): it is also written to FUZZ_ARTIFACT_DIR (default ".").
 */
#include "fuzz_support.h"
#include "interpose.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#define HANDSHAKE_TIMEOUT 1.0     /* the server's */
#define END_SLACK 2.0             /* on top of it, for a loaded machine and ASan */
#define PROBE_BOUND 3.0           /* seconds for a probe's connect, handshake and echo */
#define MAX_PENDING 48

typedef struct pending {
    int used;
    int fd;                       /* the raw client, closed once the server side ended */
    int handed_over;              /* the input is done with fd: the monitor may close it */
    int real_client;              /* an OpenSSL client that completes its handshake */
    uint16_t port;                /* its local port: the server sees it as the peer's */
    double started;
    int accepted;
    int ended;
    int secured;
    int error_code;
    double ended_at;
    unsigned char *input;         /* a copy, to report a culprit */
    size_t input_size;
} pending_t;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t changed;
static pending_t pending[MAX_PENDING];
static sk_loop_group_t *group;
static sk_tls_settings_t *server_settings;
static sk_socket_t *listener;
static uint16_t server_port;
static sk_socket_delegate_t delegate;
static char cert_file[512], key_file[512];
static atomic_ulong probes, connections_ended, connections_with_errors[32];
static double worst_probe;

static void report_culprit(const pending_t *entry, const char *why) {
    fprintf(stderr, "\n==FUZZ ORACLE== %s\nthe input that caused it (%zu bytes):", why, entry->input_size);
    for (size_t i = 0; i < entry->input_size; i++) fprintf(stderr, "%s%02x", i % 32 ? "" : "\n", entry->input[i]);
    fprintf(stderr, "\n");
    const char *directory = getenv("FUZZ_ARTIFACT_DIR");
    char path[600];
    snprintf(path, sizeof path, "%s/tls-culprit-%d", directory ? directory : ".", (int)getpid());
    FILE *file = fopen(path, "wb");
    if (file) {
        fwrite(entry->input, 1, entry->input_size, file);
        fclose(file);
        fprintf(stderr, "written to %s\n", path);
    }
    abort();
}

/* ---- The server (SocketKit) ---------------------------------------------------------------- */

typedef struct connection {
    uint16_t peer_port;
    int secured;
} connection_t;

static pending_t *find(uint16_t port) {
    for (int i = 0; i < MAX_PENDING; i++) {
        if (pending[i].used && !pending[i].ended && pending[i].port == port) return &pending[i];
    }
    return NULL;
}

static void did_accept(sk_socket_t *server, sk_socket_t *sock, void *userdata) {
    (void)server;
    (void)userdata;
    connection_t *connection = calloc(1, sizeof *connection);
    sk_socket_get_connected_port(sock, &connection->peer_port);
    sk_socket_set_delegate(sock, &delegate, sizeof delegate, connection);
    pthread_mutex_lock(&lock);
    pending_t *entry = find(connection->peer_port);
    if (entry) entry->accepted = 1;
    pthread_mutex_unlock(&lock);
    /* Refused only when the connection already ended: its did_disconnect follows. */
    if (sk_socket_start_tls(sock, server_settings, NULL) == SK_OK) sk_socket_read_to_data(sock, SK_LF, 1, 4096, -1, 0, NULL);
}

static void did_secure(sk_socket_t *sock, void *userdata) {
    (void)sock;
    connection_t *connection = userdata;
    connection->secured = 1;
}

static void did_read(sk_socket_t *sock, const void *data, size_t length, long tag, void *userdata) {
    (void)tag;
    (void)userdata;
    sk_socket_write(sock, data, length, -1, 0, NULL);
    sk_socket_read_to_data(sock, SK_LF, 1, 4096, -1, 0, NULL);
}

static void did_disconnect(sk_socket_t *sock, const sk_error_t *error, void *userdata) {
    connection_t *connection = userdata;
    if (sock == listener || !connection) return;
    int code = error ? error->code : 0;
    atomic_fetch_add(&connections_ended, 1);
    atomic_fetch_add(&connections_with_errors[(-code) & 31], 1);
    pthread_mutex_lock(&lock);
    pending_t *entry = find(connection->peer_port);
    if (entry) {
        entry->ended = 1;
        entry->ended_at = fz_now();
        entry->error_code = code;
        entry->secured = connection->secured;
        pthread_cond_broadcast(&changed);
    }
    pthread_mutex_unlock(&lock);
    sk_socket_release(sock);
    free(connection);
}

/* ---- The monitor ------------------------------------------------------------------------------ */

/* The harness's own descriptors are canaries (interpose.c): the server must never close,
 * write or send to them. */
static void harness_close(int fd, int reset) {
    interpose_set_canary(fd, 0);
    interpose_harness_begin();
    if (reset) fz_close_with_reset(fd);
    else close(fd);
    interpose_harness_end();
}

static void settle(pending_t *entry) {
    if (entry->fd >= 0) harness_close(entry->fd, 0);
    entry->fd = -1;
    free(entry->input);
    entry->input = NULL;
    entry->used = 0;
}

/* Checks the finished entries and the overdue ones; the caller holds the lock. */
static void check_pending(int final) {
    double now = fz_now();
    for (int i = 0; i < MAX_PENDING; i++) {
        pending_t *entry = &pending[i];
        if (!entry->used) continue;
        double deadline = entry->started + HANDSHAKE_TIMEOUT + END_SLACK;
        if (entry->ended && entry->handed_over) {
            if (entry->real_client) {
                /* Any end, within the bound: a real client may finish its handshake. */
            } else if (entry->secured) report_culprit(entry, "a connection whose client never finished a handshake was secured");
            if (!entry->real_client && entry->error_code == 0) report_culprit(entry, "a connection ended without an error");
            if (entry->ended_at > deadline) {
                char why[160];
                snprintf(why, sizeof why, "a connection ended %.2f s after it started (bound %.1f s)",
                         entry->ended_at - entry->started, HANDSHAKE_TIMEOUT + END_SLACK);
                report_culprit(entry, why);
            }
            settle(entry);
        } else if (now > deadline || final) {
            char why[200];
            snprintf(why, sizeof why, "a connection %s not ended %.2f s after it started (bound %.1f s)",
                     entry->accepted ? "was accepted but" : "was never accepted and", now - entry->started,
                     HANDSHAKE_TIMEOUT + END_SLACK);
            if (!final || now > deadline) report_culprit(entry, why);
        }
    }
}

static void *monitor(void *argument) {
    (void)argument;
    pthread_mutex_lock(&lock);
    for (;;) {
        check_pending(0);
        fz_cond_wait_until(&changed, &lock, fz_now() + 0.05);
    }
    return NULL;
}

/* ---- The probe: a real client, served meanwhile ------------------------------------------------ */

static SSL_CTX *probe_context;

static char probe_failure[256];

static int probe_once(double *latency) {
    probe_failure[0] = 0;
    double began = fz_now();
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    interpose_set_canary(fd, 1);
    interpose_harness_begin();
    struct timeval limit = {(time_t)PROBE_BOUND, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &limit, sizeof limit);
    struct sockaddr_in address = {0};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    address.sin_port = htons(server_port);
    int ok = connect(fd, (struct sockaddr *)&address, sizeof address) == 0;
    if (!ok) snprintf(probe_failure, sizeof probe_failure, "connect: errno %d", errno);
    SSL *ssl = ok ? SSL_new(probe_context) : NULL;
    char reply[16] = {0};
    if (ssl) {
        SSL_set_fd(ssl, fd);
        SSL_set_tlsext_host_name(ssl, "localhost");
        SSL_set1_host(ssl, "localhost");
        int stage = SSL_connect(ssl);
        if (stage != 1) {
            snprintf(probe_failure, sizeof probe_failure, "handshake: SSL error %d, errno %d, %s", SSL_get_error(ssl, stage),
                     errno, ERR_error_string(ERR_get_error(), NULL));
            ok = 0;
        } else if (SSL_write(ssl, "probe\n", 6) != 6) {
            snprintf(probe_failure, sizeof probe_failure, "write, errno %d", errno);
            ok = 0;
        }
        size_t got = 0;
        while (ok && got < 6) {
            int count = SSL_read(ssl, reply + got, (int)(6 - got));
            if (count <= 0) {
                snprintf(probe_failure, sizeof probe_failure, "read: SSL error %d, errno %d, %s", SSL_get_error(ssl, count),
                         errno, ERR_error_string(ERR_get_error(), NULL));
                ok = 0;
            } else {
                got += (size_t)count;
            }
        }
        ok = ok && memcmp(reply, "probe\n", 6) == 0;
        SSL_shutdown(ssl);
        SSL_free(ssl);
    }
    interpose_harness_end();
    harness_close(fd, 0);
    *latency = fz_now() - began;
    return ok;
}

static void *prober(void *argument) {
    (void)argument;
    for (;;) {
        double latency = 0;
        int ok = probe_once(&latency);
        atomic_fetch_add(&probes, 1);
        if (latency > worst_probe) worst_probe = latency;
        if (!ok || latency > PROBE_BOUND) {
            pthread_mutex_lock(&lock);
            fprintf(stderr, "\n==FUZZ ORACLE== the probe client was not served: %s after %.2f s (bound %.1f s) %s\n",
                    ok ? "served" : "failed", latency, PROBE_BOUND, probe_failure);
            for (int i = 0; i < MAX_PENDING; i++) {
                if (pending[i].used && !pending[i].ended) report_culprit(&pending[i], "a pending connection meanwhile:");
            }
            abort();
        }
        struct timespec pause = {0, 250 * 1000 * 1000};
        nanosleep(&pause, NULL);
    }
    return NULL;
}

/* ---- Setup ------------------------------------------------------------------------------------- */

static void print_stats(void) {
    fprintf(stderr, "tls stats: %lu connections ended (", atomic_load(&connections_ended));
    for (int i = 0; i < 32; i++) {
        unsigned long count = atomic_load(&connections_with_errors[i]);
        if (count) fprintf(stderr, " %s %lu", fz_error_name(-i), count);
    }
    fprintf(stderr, " ), %lu probes, worst probe %.3f s\n", atomic_load(&probes), worst_probe);
}

static void finish(void) {
    /* The last inputs' connections: wait for them, then check them too. */
    pthread_mutex_lock(&lock);
    double deadline = fz_now() + HANDSHAKE_TIMEOUT + END_SLACK + 1;
    for (;;) {
        int open = 0;
        for (int i = 0; i < MAX_PENDING; i++) open += pending[i].used && !pending[i].ended;
        if (!open || !fz_cond_wait_until(&changed, &lock, deadline)) break;
    }
    check_pending(1);
    pthread_mutex_unlock(&lock);
    if (getenv("FUZZ_STATS")) print_stats();
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    fz_cond_init(&changed);
    /* The harness's own writes (OpenSSL clients) to a connection the server closed raise
     * SIGPIPE on the writing thread: blocked on the harness's threads only (threads made
     * from here inherit it; SocketKit's block it themselves), so a SIGPIPE from a library
     * send would still end the process. */
    sigset_t pipe_signal;
    sigemptyset(&pipe_signal);
    sigaddset(&pipe_signal, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_signal, NULL);
    fz_certificate_paths("tls_fuzzer", cert_file, key_file);
    sk_error_t error;
    delegate.did_accept = did_accept;
    delegate.did_secure = did_secure;
    delegate.did_read = did_read;
    delegate.did_disconnect = did_disconnect;
    if (sk_loop_group_create(1, &group, &error) != SK_OK || sk_tls_settings_create(SK_TLS_SERVER, &server_settings, &error) != SK_OK ||
        sk_tls_settings_set_certificate_chain_file(server_settings, cert_file) != SK_OK ||
        sk_tls_settings_set_private_key_file(server_settings, key_file, NULL) != SK_OK ||
        sk_tls_settings_set_handshake_timeout(server_settings, HANDSHAKE_TIMEOUT) != SK_OK ||
        sk_tls_settings_check(server_settings, &error) != SK_OK ||
        sk_socket_create(&delegate, sizeof delegate, NULL, NULL, group, &listener, &error) != SK_OK ||
        sk_socket_accept_on_interface(listener, "127.0.0.1", 0, &error) != SK_OK) {
        fprintf(stderr, "tls_fuzzer setup: %s\n", error.message);
        exit(2);
    }
    sk_socket_get_local_port(listener, &server_port);
    probe_context = SSL_CTX_new(TLS_client_method());
    SSL_CTX_load_verify_locations(probe_context, cert_file, NULL);
    SSL_CTX_set_verify(probe_context, SSL_VERIFY_PEER, NULL);
    pthread_t thread;
    pthread_create(&thread, NULL, monitor, NULL);
    pthread_detach(thread);
    pthread_create(&thread, NULL, prober, NULL);
    pthread_detach(thread);
    atexit(finish);
    return 0;
}

enum { END_CLOSE, END_RESET, END_HOLD, END_HALF_CLOSE, END_FLOOD, REAL_CLIENT };

/* A real client: handshake, the payload as lines in one write, then a reset (or a close). */
static void real_client(int fd, const uint8_t *payload, size_t length, int reset) {
    unsigned char lines[4096];
    if (length > sizeof lines) length = sizeof lines;
    for (size_t i = 0; i < length; i++) lines[i] = payload[i] % 16 == 0 ? '\n' : payload[i];
    struct timeval limit = {3, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &limit, sizeof limit);
    SSL *ssl = SSL_new(probe_context);
    SSL_set_fd(ssl, fd);
    SSL_set_tlsext_host_name(ssl, "localhost");
    if (SSL_connect(ssl) == 1 && length > 0) SSL_write(ssl, lines, (int)length);
    SSL_free(ssl);   /* no close_notify: the reset (or FIN) follows the data at once */
    if (reset) {
        struct linger linger = {.l_onoff = 1, .l_linger = 0};
        setsockopt(fd, SOL_SOCKET, SO_LINGER, &linger, sizeof linger);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    uint8_t mode = data[0] % 6;
    size_t chunk = data[0] >> 3 ? (size_t)(data[0] >> 3) * 7 : SIZE_MAX;
    const uint8_t *payload = data + 1;
    size_t length = size - 1;

    /* A free entry (at most MAX_PENDING connections wait for their end at a time). */
    pthread_mutex_lock(&lock);
    pending_t *entry = NULL;
    for (;;) {
        for (int i = 0; i < MAX_PENDING && !entry; i++) {
            if (!pending[i].used) entry = &pending[i];
        }
        if (entry) break;
        fz_cond_wait_until(&changed, &lock, fz_now() + 0.05);
    }
    memset(entry, 0, sizeof *entry);
    entry->used = 1;
    entry->fd = -1;
    entry->input = malloc(size);
    memcpy(entry->input, data, size);
    entry->input_size = size;
    entry->started = fz_now();
    entry->real_client = mode == REAL_CLIENT;
    pthread_mutex_unlock(&lock);

    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    interpose_set_canary(fd, 1);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    struct sockaddr_in address = {0};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    address.sin_port = htons(server_port);
    /* The entry knows the port before the server can accept the connection. */
    bind(fd, (struct sockaddr *)&(struct sockaddr_in){.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)},
         sizeof address);
    struct sockaddr_in local;
    socklen_t local_length = sizeof local;
    getsockname(fd, (struct sockaddr *)&local, &local_length);
    pthread_mutex_lock(&lock);
    entry->fd = fd;
    entry->port = ntohs(local.sin_port);
    entry->started = fz_now();
    pthread_mutex_unlock(&lock);
    FZ_CHECK(connect(fd, (struct sockaddr *)&address, sizeof address) == 0, "connect to the server: %s", strerror(errno));

    double deadline = fz_now() + 1;
    interpose_harness_begin();
    if (mode == REAL_CLIENT) {
        real_client(fd, payload, length, data[0] & 0x40);
        length = 0;
    }
    for (size_t sent = 0; sent < length;) {
        size_t piece = length - sent < chunk ? length - sent : chunk;
        size_t done = fz_send_all(fd, payload + sent, piece, deadline);
        if (done < piece) break;   /* the server ended it (or stopped reading: the monitor judges) */
        sent += piece;
    }
    if (mode == END_FLOOD && length > 0) {
        for (size_t total = 0; total < 256 * 1024;) {
            size_t done = fz_send_all(fd, payload, length, deadline);
            if (done < length) break;
            total += length;
        }
    }
    interpose_harness_end();
    pthread_mutex_lock(&lock);
    switch (mode) {
    case REAL_CLIENT:
        harness_close(fd, 0);   /* SO_LINGER 0 already set for a reset */
        entry->fd = -1;
        break;
    case END_CLOSE:
        harness_close(fd, 0);
        entry->fd = -1;
        break;
    case END_RESET:
        harness_close(fd, 1);
        entry->fd = -1;
        break;
    case END_HALF_CLOSE:
        interpose_harness_begin();
        shutdown(fd, SHUT_WR);
        interpose_harness_end();
        break;
    default:
        break;   /* held open (and unread) until the server ends it */
    }
    entry->handed_over = 1;
    pthread_cond_broadcast(&changed);
    pthread_mutex_unlock(&lock);
    return 0;
}
