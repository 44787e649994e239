/* SPDX-License-Identifier: MIT */
/*
 * echo_server.c - a line echo server on SocketKit.
 *
 *     echo_server [--port PORT] [--udp-port PORT] [--host ADDRESS] [--raw] [--tls CERT KEY]
 *                 [--handshake-timeout SECONDS]
 *
 * Accepts on ADDRESS (default 127.0.0.1) and PORT (default 0: the kernel picks one), prints
 * "listening on PORT", and echoes every line each client sends (with --raw: every byte, as
 * soon as it arrives). With --udp-port it also sends every UDP datagram back to its sender.
 * With --tls, every connection starts TLS (server side) with the PEM certificate chain
 * CERT and key KEY before anything is read; a client that has not finished its handshake after
 * --handshake-timeout seconds (default 30, SocketKit's) is dropped. Callbacks run on the event loop thread (no callback queue), the
 * fastest arrangement. Stops on SIGINT or SIGTERM.
 *
 * Backpressure: a client that sends but does not read its echo would make the server queue
 * the echo without bound. So the server stops reading from a client while that client's
 * write queue is above its high watermark, and reads again once the queue has drained to
 * the low one: the client's own sends then wait in TCP (flow control) instead of piling up
 * here. Copy this into any server that writes what it reads.
 *
 *     cc echo_server.c $(pkg-config --cflags --libs socketkit) -o echo_server
 */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <socketkit.h>

#define MAX_LINE 65536

static int raw_mode = 0;
static sk_tls_settings_t *tls_settings = NULL;
static sk_socket_t *listener = NULL;
static sk_socket_delegate_t delegate;

/* Each client's state, its socket's userdata. */
typedef struct connection {
    int read_queued;            /* one read at a time */
    int above_high_watermark;   /* from did_reach_high_watermark to did_drain_to_low_watermark */
} connection_t;

/* Queues the next read: a line, or (raw) whatever arrives. */
static void read_next(sk_socket_t *sock, connection_t *connection) {
    connection->read_queued = 1;
    if (raw_mode) sk_socket_read(sock, 0, -1, 0, NULL);
    else sk_socket_read_to_data(sock, SK_LF, 1, MAX_LINE, -1, 0, NULL);
}

static void did_accept(sk_socket_t *listening, sk_socket_t *sock, void *userdata) {
    (void)listening;
    (void)userdata;
    /* The new socket is ours; it has the listener's delegate, which we keep, with this
     * client's state as userdata. With TLS, the handshake is queued first: the read below
     * waits for it and runs encrypted. */
    connection_t *connection = calloc(1, sizeof *connection);
    if (!connection) {
        sk_socket_release(sock);
        return;
    }
    sk_socket_set_delegate(sock, &delegate, sizeof delegate, connection);
    if (tls_settings) {
        sk_error_t error;
        if (sk_socket_start_tls(sock, tls_settings, &error) != SK_OK) {
            fprintf(stderr, "start_tls: %s\n", error.message);
            sk_socket_release(sock);
            free(connection);
            return;
        }
    }
    read_next(sock, connection);
}

static void did_read(sk_socket_t *sock, const void *data, size_t length, long tag, void *userdata) {
    connection_t *connection = userdata;
    (void)tag;
    connection->read_queued = 0;
    sk_socket_write(sock, data, length, -1, 0, NULL);
    /* Above the high watermark the client is not reading: read no more from it for now. */
    if (!connection->above_high_watermark) read_next(sock, connection);
}

static void did_reach_high_watermark(sk_socket_t *sock, size_t queued_bytes, void *userdata) {
    connection_t *connection = userdata;
    (void)sock;
    (void)queued_bytes;
    connection->above_high_watermark = 1;
}

static void did_drain_to_low_watermark(sk_socket_t *sock, size_t queued_bytes, void *userdata) {
    connection_t *connection = userdata;
    (void)queued_bytes;
    connection->above_high_watermark = 0;
    if (!connection->read_queued) read_next(sock, connection);
}

/* UDP: every datagram goes straight back to where it came from. */
static void udp_did_receive(sk_udp_socket_t *sock, const void *data, size_t length, const struct sockaddr *address,
                            socklen_t address_length, void *context, void *userdata) {
    (void)context;
    (void)userdata;
    sk_udp_socket_send_to_address(sock, data, length, address, address_length, -1, 0, NULL);
}

static void did_disconnect(sk_socket_t *sock, const sk_error_t *error, void *userdata) {
    if (sock == listener) {
        if (error) fprintf(stderr, "listener stopped: %s\n", error->message);
        return;
    }
    /* A client went away (error NULL: it closed cleanly): release its socket (no callback
     * of it follows), then its state. */
    sk_socket_release(sock);
    free(userdata);
}

int main(int argc, char **argv) {
    const char *host = "127.0.0.1";
    unsigned port = 0;
    int udp_port = -1;
    const char *tls_certificate = NULL, *tls_key = NULL;
    double handshake_timeout = 30;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--port") == 0 && i + 1 < argc) port = (unsigned)atoi(argv[++i]);
        else if (strcmp(argv[i], "--host") == 0 && i + 1 < argc) host = argv[++i];
        else if (strcmp(argv[i], "--raw") == 0) raw_mode = 1;
        else if (strcmp(argv[i], "--udp-port") == 0 && i + 1 < argc) udp_port = atoi(argv[++i]);
        else if (strcmp(argv[i], "--handshake-timeout") == 0 && i + 1 < argc) handshake_timeout = atof(argv[++i]);
        else if (strcmp(argv[i], "--tls") == 0 && i + 2 < argc) {
            tls_certificate = argv[++i];
            tls_key = argv[++i];
        } else {
            fprintf(stderr, "usage: %s [--port PORT] [--udp-port PORT] [--host ADDRESS] [--raw] [--tls CERT KEY] "
                    "[--handshake-timeout SECONDS]\n", argv[0]);
            return 2;
        }
    }

    /* Take SIGINT and SIGTERM with sigwait below (block them before any thread exists). */
    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGINT);
    sigaddset(&stop, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stop, NULL);

    delegate.did_accept = did_accept;
    delegate.did_read = did_read;
    delegate.did_reach_high_watermark = did_reach_high_watermark;
    delegate.did_drain_to_low_watermark = did_drain_to_low_watermark;
    delegate.did_disconnect = did_disconnect;

    sk_error_t error = {0};
    /* One event-loop thread serves everything (the benchmark rule; the default group would
     * have one loop per CPU). */
    sk_loop_group_t *group = NULL;
    if (sk_loop_group_create(1, &group, &error) != SK_OK) {
        fprintf(stderr, "sk_loop_group_create: %s\n", error.message);
        return 1;
    }
    if (tls_certificate) {
        /* Checked now, so a bad file is reported at start-up, not per connection. */
        if (sk_tls_settings_create(SK_TLS_SERVER, &tls_settings, &error) != SK_OK ||
            sk_tls_settings_set_certificate_chain_file(tls_settings, tls_certificate) != SK_OK ||
            sk_tls_settings_set_private_key_file(tls_settings, tls_key, NULL) != SK_OK ||
            sk_tls_settings_set_handshake_timeout(tls_settings, handshake_timeout) != SK_OK ||
            sk_tls_settings_check(tls_settings, &error) != SK_OK) {
            fprintf(stderr, "TLS settings: %s\n", error.message);
            return 1;
        }
    }
    sk_udp_socket_t *udp = NULL;
    if (udp_port >= 0) {
        /* Bound before the TCP listener, so a client that sees "listening" finds both. */
        sk_udp_socket_delegate_t udp_delegate = {0};
        udp_delegate.did_receive = udp_did_receive;
        if (sk_udp_socket_create(&udp_delegate, sizeof udp_delegate, NULL, NULL, group, &udp, &error) != SK_OK ||
            sk_udp_socket_bind_to_port(udp, host, (uint16_t)udp_port, &error) != SK_OK ||
            sk_udp_socket_begin_receiving(udp, &error) != SK_OK) {
            fprintf(stderr, "cannot serve UDP on %s port %d: %s\n", host, udp_port, error.message);
            if (udp) sk_udp_socket_release(udp);
            return 1;
        }
    }

    if (sk_socket_create(&delegate, sizeof delegate, NULL, NULL, group, &listener, &error) != SK_OK) {
        fprintf(stderr, "sk_socket_create: %s\n", error.message);
        return 1;
    }
    /* Accepted connections inherit the listener's settings: no Nagle delay for echoes. */
    sk_socket_set_no_delay(listener, 1);
    if (sk_socket_accept_on_interface(listener, host, (uint16_t)port, &error) != SK_OK) {
        fprintf(stderr, "cannot listen on %s port %u: %s\n", host, port, error.message);
        sk_socket_release(listener);
        return 1;
    }
    uint16_t bound = 0;
    sk_socket_get_local_port(listener, &bound);
    printf("listening on %u\n", bound);
    fflush(stdout);

    int signal_number = 0;
    sigwait(&stop, &signal_number);
    sk_socket_release(listener);
    if (udp) sk_udp_socket_release(udp);
    sk_loop_group_release(group);
    if (tls_settings) sk_tls_settings_release(tls_settings);
    return 0;
}
