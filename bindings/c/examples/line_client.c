/* SPDX-License-Identifier: MIT */
/*
 * line_client.c - a line-protocol client on SocketKit.
 *
 *     line_client HOST PORT
 *
 * Sends each line of standard input, prints each reply. Callbacks run on a host-driven
 * queue that the main thread drains from its own poll(2) loop, next to standard input: no
 * extra thread runs application code.
 *
 *     cc line_client.c $(pkg-config --cflags --libs socketkit) -o line_client
 */
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <socketkit.h>

struct client {
    int outstanding; /* lines sent and not yet answered */
    int input_done;
    int finished;
    int failed;
};

static void did_connect(sk_socket_t *sock, const char *host, uint16_t port, void *userdata) {
    (void)sock;
    (void)userdata;
    fprintf(stderr, "connected to %s port %u\n", host, port);
}

static void did_read(sk_socket_t *sock, const void *data, size_t length, long tag, void *userdata) {
    struct client *client = userdata;
    (void)tag;
    fwrite(data, 1, length, stdout);
    fflush(stdout);
    client->outstanding--;
    if (client->input_done && client->outstanding == 0) sk_socket_disconnect(sock);
}

static void did_disconnect(sk_socket_t *sock, const sk_error_t *error, void *userdata) {
    struct client *client = userdata;
    (void)sock;
    if (error) {
        fprintf(stderr, "disconnected: %s (%s)\n", error->message, sk_error_name(error->code));
        client->failed = 1;
    }
    client->finished = 1;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s HOST PORT\n", argv[0]);
        return 2;
    }
    struct client client = {0};
    sk_callback_queue_t *queue = NULL;
    sk_socket_t *sock = NULL;
    sk_error_t error;
    sk_socket_delegate_t delegate = {0};
    delegate.did_connect = did_connect;
    delegate.did_read = did_read;
    delegate.did_disconnect = did_disconnect;

    if (sk_callback_queue_create_host(&queue, &error) != SK_OK ||
        sk_socket_create(&delegate, sizeof delegate, &client, queue, NULL, &sock, &error) != SK_OK ||
        sk_socket_connect_to_host(sock, argv[1], (uint16_t)atoi(argv[2]), NULL, 10, &error) != SK_OK) {
        fprintf(stderr, "line_client: %s\n", error.message);
        return 1;
    }

    char line[65536];
    while (!client.finished) {
        struct pollfd fds[2] = {
            {.fd = sk_callback_queue_fd(queue), .events = POLLIN},
            {.fd = client.input_done ? -1 : STDIN_FILENO, .events = POLLIN},
        };
        if (poll(fds, 2, 30000) <= 0) {
            fprintf(stderr, "line_client: timed out\n");
            return 1;
        }
        if (fds[1].revents & (POLLIN | POLLHUP)) {
            if (fgets(line, sizeof line, stdin)) {
                /* Queued even while still connecting: reads and writes run in order. */
                sk_socket_write(sock, line, strlen(line), 10, 0, NULL);
                sk_socket_read_to_data(sock, SK_LF, 1, sizeof line, 10, 0, NULL);
                client.outstanding++;
            } else {
                client.input_done = 1;
                if (client.outstanding == 0) sk_socket_disconnect(sock);
            }
        }
        if (fds[0].revents & POLLIN) sk_callback_queue_drain(queue, 0);
    }
    sk_socket_release(sock);
    sk_callback_queue_release(queue);
    return client.failed;
}
