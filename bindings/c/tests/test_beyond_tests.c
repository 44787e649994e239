/* What SocketKit offers beyond CocoaAsyncSocket (issue 32): options set before connect and
 * listen, Unix-domain extras, adopted listeners, multi-loop listeners. */
#define _GNU_SOURCE
#include "test_support.h"

#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

static int int_option(int fd, int level, int name) {
    int value = -1;
    socklen_t length = sizeof value;
    CHECK_EQ(getsockopt(fd, level, name, &value, &length), 0);
    return value;
}

/* sk_socket_set_user_timeout, sk_socket_set_fast_open and sk_socket_set_socket_option reach
 * the descriptor of a connect (the last before the connect: TCP_MAXSEG shapes the SYN). */
void test_user_timeout_fast_open_and_options_before_connect(void) {
    recorder_t recorder;
    recorder_init(&recorder);
    sk_socket_t *sock = recorded_socket(&recorder, NULL);
    sk_error_t error;
    double seconds = -1;
    CHECK_EQ(sk_socket_get_user_timeout(sock, &seconds), SK_OK);
    CHECK(seconds == 0);
    CHECK_EQ(sk_socket_set_user_timeout(sock, 1.5, &error), SK_OK);
    CHECK_EQ(sk_socket_get_user_timeout(sock, &seconds), SK_OK);
    CHECK(seconds == 1.5);
    CHECK_EQ(sk_socket_set_user_timeout(sock, NAN, &error), SK_ERR_BAD_PARAM);
    CHECK_EQ(sk_socket_set_user_timeout(sock, -1, &error), SK_ERR_BAD_PARAM);
    CHECK_EQ(sk_socket_set_user_timeout(sock, INFINITY, NULL), SK_ERR_BAD_PARAM);
    CHECK_EQ(sk_socket_get_user_timeout(sock, NULL), SK_OK);
    CHECK_EQ(sk_socket_get_fast_open(sock), 0);
    CHECK_EQ(sk_socket_set_fast_open(sock, 1), SK_OK);
    CHECK_EQ(sk_socket_get_fast_open(sock), 1);

    int mss = 1000;
    CHECK_EQ(sk_socket_set_socket_option(sock, IPPROTO_TCP, TCP_MAXSEG, &mss, sizeof mss, &error), SK_OK);
    CHECK_EQ(sk_socket_set_socket_option(sock, IPPROTO_TCP, TCP_MAXSEG, NULL, sizeof mss, &error), SK_ERR_BAD_PARAM);
    CHECK_EQ(sk_socket_set_socket_option(sock, IPPROTO_TCP, TCP_MAXSEG, &mss, 0, &error), SK_ERR_BAD_PARAM);
    static char big[1025];
    CHECK_EQ(sk_socket_set_socket_option(sock, IPPROTO_TCP, TCP_MAXSEG, big, sizeof big, &error), SK_ERR_BAD_PARAM);

    uint16_t port = 0;
    int listener = raw_listen("127.0.0.1", &port, 8);
    CHECK_EQ(sk_socket_connect_to_host(sock, "127.0.0.1", port, NULL, 10, &error), SK_OK);
    int peer = raw_accept(listener);
    recorder_expect(&recorder, EVENT_CONNECT, 1);
    sk_socket_descriptors_t descriptors = socket_descriptors(sock, NULL);
    CHECK_EQ(int_option(descriptors.primary, IPPROTO_TCP, TCP_USER_TIMEOUT), 1500);
    CHECK_EQ(int_option(descriptors.primary, IPPROTO_TCP, TCP_FASTOPEN_CONNECT), 1);
    int seen_mss = int_option(descriptors.primary, IPPROTO_TCP, TCP_MAXSEG);
    CHECK(seen_mss > 0 && seen_mss <= 1000);
    /* At once on a connected socket. */
    CHECK_EQ(sk_socket_set_user_timeout(sock, 0, &error), SK_OK);
    CHECK_EQ(int_option(descriptors.primary, IPPROTO_TCP, TCP_USER_TIMEOUT), 0);
    /* The first write goes out (with the SYN or after it, as the kernel decides). */
    CHECK_EQ(sk_socket_write(sock, "fast", 4, -1, 1, NULL), SK_OK);
    char received[4];
    raw_receive(peer, received, 4);
    CHECK_EQ(memcmp(received, "fast", 4), 0);

    CHECK_EQ(sk_socket_set_user_timeout(NULL, 1, NULL), SK_ERR_INVALID_HANDLE);
    CHECK_EQ(sk_socket_set_fast_open(NULL, 1), SK_ERR_INVALID_HANDLE);
    CHECK_EQ(sk_socket_set_socket_option(NULL, 1, 1, &mss, sizeof mss, NULL), SK_ERR_INVALID_HANDLE);
    CHECK_EQ(sk_socket_clear_socket_options(NULL), SK_ERR_INVALID_HANDLE);
    CHECK_EQ(sk_socket_release(sock), SK_OK);
    close(peer);
    close(listener);
    recorder_destroy(&recorder);
}

/* Options set before listen: fast open and the user's own reach the listener; one the
 * kernel refuses fails the accept call with its errno. */
void test_options_before_listen_and_a_refused_one(void) {
    recorder_t recorder;
    recorder_init(&recorder);
    sk_socket_t *listener = recorded_socket(&recorder, NULL);
    sk_error_t error;
    int unknown = 1;
    CHECK_EQ(sk_socket_set_socket_option(listener, IPPROTO_TCP, 9999, &unknown, sizeof unknown, &error), SK_OK);
    CHECK_EQ(sk_socket_accept_on_interface(listener, "127.0.0.1", 0, &error), SK_ERR_SYSTEM);
    CHECK_EQ(error.os_error, ENOPROTOOPT);
    CHECK_EQ(sk_socket_is_disconnected(listener), 1);
    CHECK_EQ(sk_socket_clear_socket_options(listener), SK_OK);

    int mss = 800;
    CHECK_EQ(sk_socket_set_socket_option(listener, IPPROTO_TCP, TCP_MAXSEG, &mss, sizeof mss, &error), SK_OK);
    CHECK_EQ(sk_socket_set_fast_open(listener, 1), SK_OK);
    CHECK_EQ(sk_socket_accept_on_interface(listener, "127.0.0.1", 0, &error), SK_OK);
    sk_socket_descriptors_t descriptors = socket_descriptors(listener, NULL);
    CHECK(int_option(descriptors.ipv4, IPPROTO_TCP, TCP_FASTOPEN) > 0);
    uint16_t port = 0;
    CHECK_EQ(sk_socket_get_local_port(listener, &port), SK_OK);
    int client = raw_connect("127.0.0.1", port);
    int seen_mss = int_option(client, IPPROTO_TCP, TCP_MAXSEG);
    CHECK(seen_mss > 0 && seen_mss <= 800); /* the listener's SYN-ACK announced it */
    close(client);
    CHECK_EQ(sk_socket_release(listener), SK_OK);
    recorder_destroy(&recorder);
}
