/* SPDX-License-Identifier: MIT */
/* Getters, as the header's CONVENTIONS state them once for all: out-pointers may be NULL;
 * text and bytes work as snprintf (what fits is copied, the whole length returned, a NULL
 * buffer asks for the length); addresses as getsockname. Every getter of TCP sockets and
 * of the address helpers, over real loopback connections (UDP: udp_getters_follow_the_one_rule;
 * TLS and certificates: tls_info_and_certificate_helpers). Also the delegate_size rule and
 * the timeout rule. */
#include "test_support.h"

#include <arpa/inet.h>
#include <float.h>
#include <math.h>
#include <netinet/in.h>
#include <stddef.h>
#include <sys/un.h>
#include <unistd.h>

/* The IPv4 address the kernel gives for `fd` (getsockname or getpeername). */
static struct sockaddr_in kernel_address(int fd, int (*query)(int, struct sockaddr *, socklen_t *)) {
    struct sockaddr_in address;
    socklen_t length = sizeof address;
    CHECK_EQ(query(fd, (struct sockaddr *)&address, &length), 0);
    CHECK_EQ(length, sizeof address);
    return address;
}

void test_tcp_getters_follow_the_one_rule(void) {
    recorder_t recorder;
    recorder_init(&recorder);

    /* Without a connection the addresses do not exist, NULL outputs or not. */
    sk_socket_t *idle = recorded_socket(&recorder, NULL);
    CHECK_EQ(sk_socket_get_connected_port(idle, NULL), SK_ERR_BAD_CONFIG);
    CHECK_EQ(sk_socket_get_connected_host(idle, NULL, 0), SK_ERR_BAD_CONFIG);
    socklen_t length = 0;
    CHECK_EQ(sk_socket_get_local_address(idle, NULL, &length), SK_ERR_BAD_CONFIG);
    CHECK_EQ(sk_socket_release(idle), SK_OK);

    int listener = -1, peer = -1;
    sk_socket_t *sock = connected_recorded_socket(&recorder, NULL, &listener, &peer);
    recorder_expect(&recorder, EVENT_CONNECT, 1);

    /* Every out-pointer may be NULL. */
    CHECK_EQ(sk_socket_get_userdata(sock, NULL), SK_OK);
    CHECK_EQ(sk_socket_get_alternate_address_delay(sock, NULL), SK_OK);
    CHECK_EQ(sk_socket_get_maximum_read_length(sock, NULL), SK_OK);
    CHECK_EQ(sk_socket_get_write_watermarks(sock, NULL, NULL), SK_OK);
    CHECK_EQ(sk_socket_get_maximum_queued_write_bytes(sock, NULL), SK_OK);
    CHECK_EQ(sk_socket_get_keep_alive(sock, NULL, NULL, NULL, NULL), SK_OK);
    CHECK_EQ(sk_socket_get_buffer_sizes(sock, NULL, NULL), SK_OK);
    CHECK_EQ(sk_socket_read_progress(sock, NULL, NULL, NULL), 0);
    CHECK_EQ(sk_socket_write_progress(sock, NULL, NULL, NULL), 0);
    CHECK_EQ(sk_socket_get_queued_write_bytes(sock, NULL), SK_OK);
    CHECK_EQ(sk_socket_get_connected_port(sock, NULL), SK_OK);
    CHECK_EQ(sk_socket_get_local_port(sock, NULL), SK_OK);
    /* ...and the others are still stored. */
    size_t low = 0, high = 0;
    CHECK_EQ(sk_socket_get_write_watermarks(sock, NULL, &high), SK_OK);
    CHECK_EQ(high, 64 * 1024);
    CHECK_EQ(sk_socket_get_write_watermarks(sock, &low, NULL), SK_OK);
    CHECK_EQ(low, 32 * 1024);
    void *userdata = NULL;
    CHECK_EQ(sk_socket_get_userdata(sock, &userdata), SK_OK);
    CHECK(userdata == &recorder);

    /* Hosts as snprintf, addresses as getsockname, against what the kernel says. */
    /* The raw peer's own address is the socket's remote one, and the other way round. */
    struct sockaddr_in remote = kernel_address(peer, getsockname), local = kernel_address(peer, getpeername);
    CHECK_SNPRINTF("127.0.0.1", sk_socket_get_connected_host(sock, target, capacity));
    CHECK_SNPRINTF("127.0.0.1", sk_socket_get_local_host(sock, target, capacity));
    CHECK_GETSOCKNAME(&remote, sizeof remote, sk_socket_get_connected_address(sock, target, length));
    CHECK_GETSOCKNAME(&local, sizeof local, sk_socket_get_local_address(sock, target, length));
    CHECK_SNPRINTF("127.0.0.1", sk_address_get_host((struct sockaddr *)&remote, sizeof remote, target, capacity));
    CHECK_EQ(sk_address_get_port((struct sockaddr *)&remote, sizeof remote, NULL), SK_OK);
    CHECK_EQ(sk_socket_get_connected_unix_path(sock, NULL, 0), SK_ERR_BAD_CONFIG);

    CHECK_EQ(sk_socket_release(sock), SK_OK);
    close(peer);
    close(listener);
    recorder_destroy(&recorder);
}

void test_unix_path_getters_follow_the_one_rule(void) {
    char path[108];
    snprintf(path, sizeof path, "/tmp/socketkit-getters-%d.sock", (int)getpid());
    unlink(path);
    recorder_t server, client;
    recorder_init(&server);
    recorder_init(&client);
    sk_socket_t *listener = recorded_socket(&server, NULL);
    CHECK_EQ(sk_socket_accept_on_unix_path(listener, path, NULL), SK_OK);
    sk_socket_t *sock = recorded_socket(&client, NULL);
    CHECK_EQ(sk_socket_connect_to_unix_path(sock, path, 5, NULL), SK_OK);
    recorder_expect(&client, EVENT_CONNECT, 1);
    CHECK_SNPRINTF(path, sk_socket_get_connected_unix_path(sock, target, capacity));
    struct sockaddr_un expected;
    memset(&expected, 0, sizeof expected);
    expected.sun_family = AF_UNIX;
    memcpy(expected.sun_path, path, strlen(path) + 1);
    CHECK_GETSOCKNAME(&expected, (socklen_t)(offsetof(struct sockaddr_un, sun_path) + strlen(path) + 1),
                      sk_socket_get_connected_address(sock, target, length));
    CHECK_EQ(sk_socket_get_connected_host(sock, NULL, 0), SK_ERR_BAD_CONFIG);
    CHECK_EQ(sk_socket_release(sock), SK_OK);
    CHECK_EQ(sk_socket_release(listener), SK_OK);
    recorder_destroy(&client);
    recorder_destroy(&server);
    unlink(path);
}

void test_lookup_and_address_helpers_follow_the_one_rule(void) {
    struct sockaddr_storage addresses[2];
    CHECK_EQ(sk_lookup_host("localhost", 7, addresses, 2, NULL, NULL), SK_OK); /* out_count may be NULL */
    CHECK_EQ(sk_address_get_port((struct sockaddr *)&addresses[1], sizeof addresses[1], NULL), SK_OK);
    CHECK_SNPRINTF("::1", sk_address_get_host((struct sockaddr *)&addresses[1], sizeof addresses[1], target, capacity));
    CHECK_EQ(sk_address_get_host((struct sockaddr *)&addresses[1], 3, NULL, 0), SK_ERR_BAD_PARAM);
}

/* delegate_size follows the kernel's extensible-struct rule (socketkit.h, ABI). */
void test_delegate_sizes_follow_the_extensible_struct_rule(void) {
    recorder_t recorder;
    recorder_init(&recorder);
    struct {
        sk_socket_delegate_t known;
        void (*newer[2])(void);   /* members of a newer header */
    } grown;
    memset(&grown, 0, sizeof grown);
    grown.known = recorder_delegate();
    const size_t first = offsetof(sk_socket_delegate_t, did_secure); /* the first published struct */
    const size_t sizes_taken[] = {first, first + sizeof(void *), sizeof(sk_socket_delegate_t), sizeof grown};
    const size_t sizes_refused[] = {0, 3, sizeof(void *), first - sizeof(void *), first + 1,
                                    sizeof(sk_socket_delegate_t) + 4, 64 * 1024 + sizeof(void *), (size_t)-8};
    sk_error_t error;
    for (size_t i = 0; i < sizeof sizes_taken / sizeof sizes_taken[0]; i++) {
        sk_socket_t *sock = NULL;
        CHECK_EQ(sk_socket_create(&grown.known, sizes_taken[i], &recorder, NULL, NULL, &sock, &error), SK_OK);
        CHECK_EQ(sk_socket_set_delegate(sock, &grown.known, sizes_taken[i], &recorder), SK_OK);
        CHECK_EQ(sk_socket_release(sock), SK_OK);
    }
    sk_socket_t *sock = recorded_socket(&recorder, NULL);
    for (size_t i = 0; i < sizeof sizes_refused / sizeof sizes_refused[0]; i++) {
        sk_socket_t *refused = NULL;
        CHECK_EQ(sk_socket_create(&grown.known, sizes_refused[i], &recorder, NULL, NULL, &refused, &error),
                 SK_ERR_BAD_PARAM);
        CHECK(refused == NULL);
        CHECK(strstr(error.message, "delegate_size") != NULL);
        CHECK_EQ(sk_socket_set_delegate(sock, &grown.known, sizes_refused[i], &recorder), SK_ERR_BAD_PARAM);
    }
    /* A member this library does not know, set: it would never be called. */
    grown.newer[1] = (void (*)(void))test_delegate_sizes_follow_the_extensible_struct_rule;
    sk_socket_t *refused = NULL;
    CHECK_EQ(sk_socket_create(&grown.known, sizeof grown, &recorder, NULL, NULL, &refused, &error), SK_ERR_BAD_PARAM);
    CHECK(strstr(error.message, "member 18") != NULL);
    CHECK_EQ(sk_socket_set_delegate(sock, &grown.known, sizeof grown, &recorder), SK_ERR_BAD_PARAM);
    /* The refused delegates changed nothing: the recorder still hears the socket. */
    void *userdata = NULL;
    CHECK_EQ(sk_socket_get_userdata(sock, &userdata), SK_OK);
    CHECK(userdata == &recorder);
    /* A NULL delegate's size is not read. */
    CHECK_EQ(sk_socket_set_delegate(sock, NULL, 12345, NULL), SK_OK);
    CHECK_EQ(sk_socket_release(sock), SK_OK);

    /* UDP: the first published version ends with did_close; did_receive_with_packet_info
     * came later, so a struct without it is taken, and nothing smaller. */
    struct {
        sk_udp_socket_delegate_t known;
        void (*newer)(void);
    } udp;
    memset(&udp, 0, sizeof udp);
    sk_udp_socket_t *datagrams = NULL;
    CHECK_EQ(sk_udp_socket_create(&udp.known, sizeof udp.known, NULL, NULL, NULL, &datagrams, NULL), SK_OK);
    CHECK_EQ(sk_udp_socket_set_delegate(datagrams, &udp.known, sizeof udp, NULL), SK_OK);
    size_t first_published = offsetof(sk_udp_socket_delegate_t, did_receive_with_packet_info);
    CHECK_EQ(sk_udp_socket_set_delegate(datagrams, &udp.known, first_published, NULL), SK_OK);
    CHECK_EQ(sk_udp_socket_set_delegate(datagrams, &udp.known, first_published - sizeof(void *), NULL), SK_ERR_BAD_PARAM);
    udp.newer = (void (*)(void))test_delegate_sizes_follow_the_extensible_struct_rule;
    CHECK_EQ(sk_udp_socket_set_delegate(datagrams, &udp.known, sizeof udp, NULL), SK_ERR_BAD_PARAM);
    CHECK_EQ(sk_udp_socket_release(datagrams), SK_OK);
    sk_udp_socket_t *none = NULL;
    CHECK_EQ(sk_udp_socket_create(&udp.known, sizeof udp, NULL, NULL, NULL, &none, &error), SK_ERR_BAD_PARAM);
    CHECK(none == NULL);
    recorder_destroy(&recorder);
}

/* Timeouts: negative or +INFINITY = none (DBL_MAX is beyond the clock: the same); NaN is
 * refused; an extension of +INFINITY keeps the read for good instead of ending it. */
void test_infinite_timeouts_and_extensions_never_expire(void) {
    recorder_t recorder;
    recorder_init(&recorder);
    int listener = -1, peer = -1;
    sk_socket_t *sock = connected_recorded_socket(&recorder, NULL, &listener, &peer);
    recorder_expect(&recorder, EVENT_CONNECT, 1);
    /* A connect with no timeout, INFINITY, completes as one with -1 does. */
    struct sockaddr_in where = kernel_address(listener, getsockname);
    sk_socket_t *second = recorded_socket(&recorder, NULL);
    CHECK_EQ(sk_socket_connect_to_address(second, (struct sockaddr *)&where, sizeof where, NULL, INFINITY, NULL), SK_OK);
    int second_peer = raw_accept(listener);
    recorder_expect(&recorder, EVENT_CONNECT, 2);
    CHECK_EQ(sk_socket_release(second), SK_OK);
    close(second_peer);
    sk_error_t error;
    CHECK_EQ(sk_socket_read_to_length(sock, 2, NAN, 1, &error), SK_ERR_BAD_PARAM);
    CHECK_EQ(sk_socket_write(sock, "x", 1, NAN, 1, &error), SK_ERR_BAD_PARAM);
    CHECK_EQ(sk_socket_read_to_length(sock, 2, INFINITY, 1, &error), SK_OK);
    CHECK_EQ(sk_socket_read_to_length(sock, 2, DBL_MAX, 2, &error), SK_OK);
    CHECK_EQ(sk_socket_write(sock, "ab", 2, INFINITY, 3, &error), SK_OK);
    CHECK_EQ(sk_socket_write(sock, "cd", 2, DBL_MAX, 4, &error), SK_OK);
    char echoed[4];
    raw_receive(peer, echoed, sizeof echoed);
    CHECK_EQ(memcmp(echoed, "abcd", 4), 0);
    raw_send(peer, "wxyz", 4);
    recorder_expect(&recorder, EVENT_READ, 2);
    recorder_expect(&recorder, EVENT_WRITE, 2);

    /* A short timeout extended by +INFINITY: the read waits for its bytes. */
    recorder.read_extensions[0] = INFINITY;
    recorder.read_extension_count = 1;
    CHECK_EQ(sk_socket_read_to_length(sock, 3, 0.05, 5, NULL), SK_OK);
    recorder_expect(&recorder, EVENT_READ_TIMEOUT, 1);
    CHECK(recorder_event(&recorder, EVENT_READ_TIMEOUT, 0).elapsed < 0.06);
    CHECK_EQ(recorder_wait(&recorder, EVENT_DISCONNECT, 1, 0.2), 0);
    raw_send(peer, "end", 3);
    recorder_expect(&recorder, EVENT_READ, 3);
    CHECK_STR(recorder_event(&recorder, EVENT_READ, 2).text, "end");
    CHECK_EQ(recorder_count(&recorder, EVENT_READ_TIMEOUT), 1);
    CHECK_EQ(recorder_count(&recorder, EVENT_DISCONNECT), 0);
    CHECK_EQ(sk_socket_is_connected(sock), 1);
    CHECK_EQ(sk_socket_release(sock), SK_OK);
    close(peer);
    close(listener);
    recorder_destroy(&recorder);
}
