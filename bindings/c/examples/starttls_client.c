/* SPDX-License-Identifier: MIT */
/*
 * starttls_client.c - an SMTP client that upgrades to TLS with STARTTLS, on SocketKit.
 *
 *     starttls_client HOST PORT CA_FILE [PEER_NAME]
 *
 * Reads the server's greeting, says EHLO, and once the server has listed its extensions
 * queues the whole upgrade at once: the STARTTLS command, the read of the server's "220
 * ready", the TLS handshake (sk_socket_start_tls is a marker in the queues: what was queued
 * before it runs in plaintext, what comes after it encrypted), and the second EHLO. No
 * callback has to wait for the 220 before starting TLS. The server's certificate is
 * verified against CA_FILE and PEER_NAME (default: HOST). Then QUIT. Prints the dialogue;
 * exits 0 when the server said goodbye over TLS.
 *
 *     cc starttls_client.c $(pkg-config --cflags --libs socketkit) -o starttls_client
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <socketkit.h>

#define MAX_LINE 1000 /* RFC 5321's limit for a reply line */
#define TIMEOUT 10.0

/* What each read is for (its tag). */
enum { GREETING, FIRST_EHLO, READY, SECOND_EHLO, GOODBYE };

struct session {
    sk_tls_settings_t *settings; /* the client's: CA_FILE and PEER_NAME */
    pthread_mutex_t lock;
    pthread_cond_t done_changed;
    int done;
    int succeeded;
    int secure;
};

static void say(sk_socket_t *sock, const char *line) {
    printf("C: %s\n", line);
    char command[MAX_LINE];
    int length = snprintf(command, sizeof command, "%s\r\n", line);
    sk_socket_write(sock, command, (size_t)length, TIMEOUT, 0, NULL);
}

static void read_line(sk_socket_t *sock, long tag) {
    sk_socket_read_to_data(sock, SK_CRLF, 2, MAX_LINE, TIMEOUT, tag, NULL);
}

/* The first call decides: a disconnect that follows the goodbye changes nothing. */
static void finish(struct session *session, int succeeded) {
    pthread_mutex_lock(&session->lock);
    if (!session->done) {
        session->done = 1;
        session->succeeded = succeeded;
        pthread_cond_signal(&session->done_changed);
    }
    pthread_mutex_unlock(&session->lock);
}

static void did_connect(sk_socket_t *sock, const char *host, uint16_t port, void *userdata) {
    (void)userdata;
    fprintf(stderr, "connected to %s port %u\n", host, port);
    read_line(sock, GREETING);
}

/* A reply line: "250-..." is followed by more lines, "250 ..." is the last one. */
static void did_read(sk_socket_t *sock, const void *data, size_t length, long tag, void *userdata) {
    struct session *session = userdata;
    const char *line = data;
    int text_length = (int)length - 2; /* without CRLF */
    printf("S: %.*s\n", text_length, line);
    int last = length < 4 || line[3] != '-';
    if (!last) {
        read_line(sock, tag); /* more lines of the same reply */
        return;
    }
    switch (tag) {
    case GREETING:
        if (strncmp(line, "220", 3) != 0) break;
        say(sock, "EHLO client.example");
        read_line(sock, FIRST_EHLO);
        return;
    case FIRST_EHLO:
        if (strncmp(line, "250", 3) != 0) break;
        /* The upgrade, queued in one go. */
        say(sock, "STARTTLS");
        read_line(sock, READY);
        sk_error_t error;
        if (sk_socket_start_tls(sock, session->settings, &error) != SK_OK) {
            fprintf(stderr, "start_tls: %s\n", error.message);
            break;
        }
        return;
    case READY:
        /* Already on its way: the handshake follows this read (did_secure), then EHLO. */
        if (strncmp(line, "220", 3) != 0) break;
        return;
    case SECOND_EHLO:
        if (strncmp(line, "250", 3) != 0) break;
        say(sock, "QUIT");
        read_line(sock, GOODBYE);
        return;
    case GOODBYE:
        if (strncmp(line, "221", 3) != 0) break;
        sk_socket_disconnect(sock);
        finish(session, session->secure);
        return;
    }
    fprintf(stderr, "unexpected reply\n");
    sk_socket_disconnect(sock);
}

static void did_secure(sk_socket_t *sock, void *userdata) {
    struct session *session = userdata;
    session->secure = 1;
    sk_tls_info_t info;
    if (sk_socket_get_tls_info(sock, &info) == SK_OK) {
        printf("-- TLS: %s, %s, the certificate of %s verified\n", info.protocol_version, info.cipher, info.server_name);
    }
    say(sock, "EHLO client.example");
    read_line(sock, SECOND_EHLO);
}

static void did_disconnect(sk_socket_t *sock, const sk_error_t *error, void *userdata) {
    (void)sock;
    if (error) fprintf(stderr, "disconnected: %s (%s)\n", error->message, sk_error_name(error->code));
    finish(userdata, 0);
}

int main(int argc, char **argv) {
    if (argc != 4 && argc != 5) {
        fprintf(stderr, "usage: %s HOST PORT CA_FILE [PEER_NAME]\n", argv[0]);
        return 2;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    const char *host = argv[1];
    uint16_t port = (uint16_t)atoi(argv[2]);
    struct session session = {NULL, PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0, 0};
    sk_error_t error;
    /* Checked now, so a bad file is reported here rather than by the handshake. */
    if (sk_tls_settings_create(SK_TLS_CLIENT, &session.settings, &error) != SK_OK
        || sk_tls_settings_set_trust_file(session.settings, argv[3]) != SK_OK
        || sk_tls_settings_set_peer_name(session.settings, argc == 5 ? argv[4] : host) != SK_OK
        || sk_tls_settings_check(session.settings, &error) != SK_OK) {
        fprintf(stderr, "TLS settings: %s\n", error.message);
        return 1;
    }

    sk_socket_delegate_t delegate = {0};
    delegate.did_connect = did_connect;
    delegate.did_read = did_read;
    delegate.did_secure = did_secure;
    delegate.did_disconnect = did_disconnect;
    sk_socket_t *sock = NULL;
    if (sk_socket_create(&delegate, sizeof delegate, &session, NULL, NULL, &sock, &error) != SK_OK
        || sk_socket_connect_to_host(sock, host, port, NULL, TIMEOUT, &error) != SK_OK) {
        fprintf(stderr, "connect: %s\n", error.message);
        return 1;
    }

    pthread_mutex_lock(&session.lock);
    while (!session.done) pthread_cond_wait(&session.done_changed, &session.lock);
    pthread_mutex_unlock(&session.lock);
    sk_socket_release(sock);
    sk_tls_settings_release(session.settings);
    return session.succeeded ? 0 : 1;
}
