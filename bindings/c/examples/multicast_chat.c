/* SPDX-License-Identifier: MIT */
/*
 * multicast_chat.c - a chat over UDP multicast, on SocketKit.
 *
 *     multicast_chat NAME [PORT [GROUP [INTERFACE]]]
 *
 * Every chat on the same GROUP (default 239.255.42.42, an organisation-local address) and
 * PORT (default 4242) hears every other: each line of standard input goes to the group as
 * "NAME: line", and every line from the others is printed. INTERFACE (default "lo", the
 * loopback interface: the chats of one machine) carries the group both ways; a TTL of 1
 * keeps it off routers. Several chats share the port (SO_REUSEPORT); each hears its own
 * lines too (multicast loopback), and skips them. Prints "joined GROUP:PORT on INTERFACE
 * as NAME" once it listens; ends at the end of its input, once its last line is sent.
 *
 *     cc multicast_chat.c $(pkg-config --cflags --libs socketkit) -o multicast_chat
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <socketkit.h>

#define MAX_MESSAGE 1024

struct chat {
    const char *name;
    pthread_mutex_t lock;
    pthread_cond_t closed_changed;
    int closed;
};

static void did_receive(sk_udp_socket_t *sock, const void *data, size_t length, const struct sockaddr *address,
                        socklen_t address_length, void *context, void *userdata) {
    (void)sock;
    (void)address;
    (void)address_length;
    (void)context;
    struct chat *chat = userdata;
    size_t own = strlen(chat->name);
    if (length > own + 1 && memcmp(data, chat->name, own) == 0 && ((const char *)data)[own] == ':') return;
    printf("%.*s\n", (int)length, (const char *)data);
}

static void did_not_send(sk_udp_socket_t *sock, long tag, const sk_error_t *error, void *userdata) {
    (void)sock;
    (void)userdata;
    fprintf(stderr, "line %ld not sent: %s\n", tag, error->message);
}

static void did_close(sk_udp_socket_t *sock, const sk_error_t *error, void *userdata) {
    (void)sock;
    (void)error;
    struct chat *chat = userdata;
    pthread_mutex_lock(&chat->lock);
    chat->closed = 1;
    pthread_cond_signal(&chat->closed_changed);
    pthread_mutex_unlock(&chat->lock);
}

int main(int argc, char **argv) {
    if (argc < 2 || argc > 5) {
        fprintf(stderr, "usage: %s NAME [PORT [GROUP [INTERFACE]]]\n", argv[0]);
        return 2;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    struct chat chat = {argv[1], PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0};
    uint16_t port = (uint16_t)(argc > 2 ? atoi(argv[2]) : 4242);
    const char *group = argc > 3 ? argv[3] : "239.255.42.42";
    const char *interface = argc > 4 ? argv[4] : "lo";
    struct sockaddr_in destination = {.sin_family = AF_INET, .sin_port = htons(port)};
    if (inet_pton(AF_INET, group, &destination.sin_addr) != 1) {
        fprintf(stderr, "%s is not an IPv4 address\n", group);
        return 2;
    }

    sk_udp_socket_delegate_t delegate = {0};
    delegate.did_receive = did_receive;
    delegate.did_not_send = did_not_send;
    delegate.did_close = did_close;
    sk_udp_socket_t *sock = NULL;
    sk_error_t error = {0};
    /* The port is shared with the other chats (set before bind); the group is joined, and
     * sent to, on INTERFACE. */
    if (sk_udp_socket_create(&delegate, sizeof delegate, &chat, NULL, NULL, &sock, &error) != SK_OK
        || sk_udp_socket_set_ipv6_enabled(sock, 0) != SK_OK
        || sk_udp_socket_enable_reuse_port(sock, 1, &error) != SK_OK
        || sk_udp_socket_bind_to_port(sock, NULL, port, &error) != SK_OK
        || sk_udp_socket_join_multicast_group(sock, group, interface, &error) != SK_OK
        || sk_udp_socket_send_ipv4_multicast_on_interface(sock, interface, &error) != SK_OK
        || sk_udp_socket_set_multicast_ttl(sock, 1, &error) != SK_OK
        || sk_udp_socket_set_multicast_loopback(sock, 1, &error) != SK_OK
        || sk_udp_socket_begin_receiving(sock, &error) != SK_OK) {
        fprintf(stderr, "cannot join %s:%u on %s: %s\n", group, port, interface, error.message);
        if (sock) sk_udp_socket_release(sock);
        return 1;
    }
    printf("joined %s:%u on %s as %s\n", group, port, interface, chat.name);

    /* The main thread reads the input; SocketKit's loop sends and receives. */
    char line[MAX_MESSAGE];
    char message[MAX_MESSAGE + 64];
    long tag = 0;
    while (fgets(line, sizeof line, stdin)) {
        line[strcspn(line, "\r\n")] = '\0';
        int length = snprintf(message, sizeof message, "%s: %s", chat.name, line);
        if (length >= (int)sizeof message) length = (int)sizeof message - 1;
        sk_udp_socket_send_to_address(sock, message, (size_t)length, (const struct sockaddr *)&destination,
                                      sizeof destination, 5, ++tag, NULL);
    }

    /* The end of the input: close once the queued lines are sent. */
    sk_udp_socket_close_after_sending(sock);
    pthread_mutex_lock(&chat.lock);
    while (!chat.closed) pthread_cond_wait(&chat.closed_changed, &chat.lock);
    pthread_mutex_unlock(&chat.lock);
    sk_udp_socket_release(sock);
    return 0;
}
