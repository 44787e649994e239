/* SPDX-License-Identifier: MIT */
/* Connecting and accepting across the address families, and the failures to report. */
#include "test_support.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <stddef.h>
#include <sys/un.h>
#include <unistd.h>

static void expect_only_disconnect(recorder_t *recorder, int code, int os_error) {
    recorder_expect(recorder, EVENT_DISCONNECT, 1);
    event_t end = recorder_event(recorder, EVENT_DISCONNECT, 0);
    CHECK_EQ(end.error_code, code);
    if (os_error) CHECK_EQ(end.os_error, os_error);
    size_t count = 0;
    free(recorder_events(recorder, &count));
    CHECK_EQ(count, 1);
}

void test_connection_refused(void) {
    uint16_t port = 0;
    close(raw_listen("127.0.0.1", &port, 1));
    recorder_t recorder;
    recorder_init(&recorder);
    sk_socket_t *sock = recorded_socket(&recorder, NULL);
    CHECK_EQ(sk_socket_connect_to_host(sock, "127.0.0.1", port, NULL, 5, NULL), SK_OK);
    expect_only_disconnect(&recorder, SK_ERR_SYSTEM, ECONNREFUSED);
    CHECK_EQ(sk_socket_is_disconnected(sock), 1);
    CHECK_EQ(sk_socket_release(sock), SK_OK);
    recorder_destroy(&recorder);
}

void test_unresolvable_name(void) {
    recorder_t recorder;
    recorder_init(&recorder);
    sk_socket_t *sock = recorded_socket(&recorder, NULL);
    CHECK_EQ(sk_socket_connect_to_host(sock, "no-such-host.invalid", 80, NULL, 15, NULL), SK_OK);
    expect_only_disconnect(&recorder, SK_ERR_RESOLUTION, 0);
    CHECK(recorder_event(&recorder, EVENT_DISCONNECT, 0).os_error != 0);
    CHECK_EQ(sk_socket_release(sock), SK_OK);
    recorder_destroy(&recorder);
}

void test_connect_timeout(void) {
    /* A listener whose accept queue is full drops further SYNs. */
    uint16_t port = 0;
    int blackhole = raw_listen("127.0.0.1", &port, 0);
    int fillers[4];
    for (int i = 0; i < 4; i++) {
        fillers[i] = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
        struct sockaddr_in address = {.sin_family = AF_INET, .sin_port = htons(port)};
        inet_pton(AF_INET, "127.0.0.1", &address.sin_addr);
        connect(fillers[i], (struct sockaddr *)&address, sizeof address);
    }
    recorder_t recorder;
    recorder_init(&recorder);
    sk_socket_t *sock = recorded_socket(&recorder, NULL);
    double started = now_seconds();
    CHECK_EQ(sk_socket_connect_to_host(sock, "127.0.0.1", port, NULL, 0.3, NULL), SK_OK);
    expect_only_disconnect(&recorder, SK_ERR_CONNECT_TIMEOUT, 0);
    CHECK(now_seconds() - started >= 0.29);
    CHECK_EQ(sk_socket_release(sock), SK_OK);
    for (int i = 0; i < 4; i++) close(fillers[i]);
    close(blackhole);
    recorder_destroy(&recorder);
}

/* A zero timeout: connected by the time the loop next polls, or SK_ERR_CONNECT_TIMEOUT. A
 * name is resolved off the loop, so it never makes it; a Unix-domain connect completes in
 * connect(2) itself, also when started from a callback on the socket's own loop thread. */
typedef struct zero_timeout_connect {
    sk_socket_t *sock;
    const char *path;
} zero_timeout_connect_t;

static void connect_at_once(recorder_t *recorder, sk_socket_t *trigger) {
    (void)trigger;
    zero_timeout_connect_t *request = recorder->context;
    CHECK_EQ(sk_socket_connect_to_unix_path(request->sock, request->path, 0, NULL), SK_OK);
}

static sk_socket_t *socket_in_group(recorder_t *recorder, sk_loop_group_t *group) {
    sk_socket_delegate_t delegate = recorder_delegate();
    sk_socket_t *sock = NULL;
    CHECK_EQ(sk_socket_create(&delegate, sizeof delegate, recorder, NULL, group, &sock, NULL), SK_OK);
    return sock;
}

void test_zero_connect_timeout(void) {
    recorder_t resolving;
    recorder_init(&resolving);
    sk_socket_t *unresolved = recorded_socket(&resolving, NULL);
    CHECK_EQ(sk_socket_connect_to_host(unresolved, "no-such-host.invalid", 80, NULL, 0, NULL), SK_OK);
    expect_only_disconnect(&resolving, SK_ERR_CONNECT_TIMEOUT, 0);
    CHECK_EQ(sk_socket_release(unresolved), SK_OK);
    recorder_destroy(&resolving);

    char path[108];
    snprintf(path, sizeof path, "/tmp/sk-c-zero-%d.sock", (int)getpid());
    recorder_t server;
    recorder_init(&server);
    sk_socket_t *listener = recorded_socket(&server, NULL);
    CHECK_EQ(sk_socket_accept_on_unix_path(listener, path, NULL), SK_OK);
    recorder_t client;
    recorder_init(&client);
    sk_socket_t *sock = recorded_socket(&client, NULL);
    CHECK_EQ(sk_socket_connect_to_unix_path(sock, path, 0, NULL), SK_OK);
    recorder_expect(&client, EVENT_CONNECT, 1);
    CHECK_STR(recorder_event(&client, EVENT_CONNECT, 0).text, path);
    CHECK_EQ(recorder_count(&client, EVENT_DISCONNECT), 0);
    CHECK_EQ(sk_socket_release(sock), SK_OK);

    /* From a callback on the loop thread, whose iteration has already polled. */
    sk_loop_group_t *group = NULL;
    CHECK_EQ(sk_loop_group_create(1, &group, NULL), SK_OK);
    recorder_t inner, trigger_log;
    recorder_init(&inner);
    recorder_init(&trigger_log);
    zero_timeout_connect_t request = {.sock = socket_in_group(&inner, group), .path = path};
    trigger_log.context = &request;
    trigger_log.on_connect = connect_at_once;
    sk_socket_t *trigger = socket_in_group(&trigger_log, group);
    uint16_t port = 0;
    int raw = raw_listen("127.0.0.1", &port, 4);
    CHECK_EQ(sk_socket_connect_to_host(trigger, "127.0.0.1", port, NULL, 5, NULL), SK_OK);
    recorder_expect(&inner, EVENT_CONNECT, 1);
    CHECK_STR(recorder_event(&inner, EVENT_CONNECT, 0).text, path);
    CHECK_EQ(recorder_count(&inner, EVENT_DISCONNECT), 0);
    CHECK_EQ(sk_socket_release(request.sock), SK_OK);
    CHECK_EQ(sk_socket_release(trigger), SK_OK);
    CHECK_EQ(sk_loop_group_release(group), SK_OK);
    close(raw);
    CHECK_EQ(sk_socket_release(listener), SK_OK);
    recorder_destroy(&inner);
    recorder_destroy(&trigger_log);
    recorder_destroy(&client);
    recorder_destroy(&server);
}

/* As upstream ("IPv4 has been disabled and DNS lookup found no IPv6 address"): reported
 * through did_disconnect as SK_ERR_OTHER. */
void test_host_without_an_address_of_an_enabled_family(void) {
    uint16_t port = 0;
    int listener = raw_listen("127.0.0.1", &port, 4);
    recorder_t recorder;
    recorder_init(&recorder);
    sk_socket_t *sock = recorded_socket(&recorder, NULL);
    CHECK_EQ(sk_socket_set_ipv4_enabled(sock, 0), SK_OK);
    CHECK_EQ(sk_socket_connect_to_host(sock, "127.0.0.1", port, NULL, 5, NULL), SK_OK);
    expect_only_disconnect(&recorder, SK_ERR_OTHER, 0);
    CHECK_EQ(recorder_event(&recorder, EVENT_DISCONNECT, 0).os_error, 0);
    CHECK(strlen(recorder_event(&recorder, EVENT_DISCONNECT, 0).text) > 0);
    CHECK_EQ(sk_socket_release(sock), SK_OK);
    close(listener);
    recorder_destroy(&recorder);
}

/* The local end bound to the interface given: 127.0.0.2 is on lo, but is not the address
 * the kernel picks on its own for 127.0.0.1. An interface without an address of the
 * target's family ends the attempt with SK_ERR_BAD_PARAM. */
void test_connect_to_address_via_an_interface(void) {
    uint16_t port = 0;
    int listener = raw_listen("127.0.0.1", &port, 4);
    recorder_t recorder;
    recorder_init(&recorder);
    sk_socket_t *sock = recorded_socket(&recorder, NULL);
    struct sockaddr_in target = {.sin_family = AF_INET, .sin_port = htons(port)};
    inet_pton(AF_INET, "127.0.0.1", &target.sin_addr);
    CHECK_EQ(sk_socket_connect_to_address(sock, (struct sockaddr *)&target, sizeof target, "127.0.0.2", 5, NULL), SK_OK);
    int server = raw_accept(listener);
    recorder_expect(&recorder, EVENT_CONNECT, 1);
    struct sockaddr_in peer;
    socklen_t peer_length = sizeof peer;
    CHECK_EQ(getpeername(server, (struct sockaddr *)&peer, &peer_length), 0);
    CHECK_EQ(ntohl(peer.sin_addr.s_addr), 0x7f000002);
    uint16_t local_port = 0;
    CHECK_EQ(sk_socket_get_local_port(sock, &local_port), SK_OK);
    CHECK_EQ(ntohs(peer.sin_port), local_port);
    char host[64];
    CHECK(sk_socket_get_local_host(sock, host, sizeof host) > 0);
    CHECK_STR(host, "127.0.0.2");
    CHECK_EQ(sk_socket_release(sock), SK_OK);
    close(server);

    recorder_t mismatched;
    recorder_init(&mismatched);
    sk_socket_t *other = recorded_socket(&mismatched, NULL);
    struct sockaddr_in6 target6 = {.sin6_family = AF_INET6, .sin6_port = htons(port)};
    inet_pton(AF_INET6, "::1", &target6.sin6_addr);
    CHECK_EQ(sk_socket_connect_to_address(other, (struct sockaddr *)&target6, sizeof target6, "127.0.0.2", 5, NULL),
             SK_OK);
    expect_only_disconnect(&mismatched, SK_ERR_BAD_PARAM, 0);
    CHECK_EQ(sk_socket_connect_to_address(other, (struct sockaddr *)&target, sizeof target, "no-such-if0", 5, NULL),
             SK_ERR_BAD_PARAM);
    CHECK_EQ(sk_socket_release(other), SK_OK);
    close(listener);
    recorder_destroy(&mismatched);
    recorder_destroy(&recorder);
}

void test_port_in_use(void) {
    recorder_t recorder;
    recorder_init(&recorder);
    uint16_t port = 0;
    sk_socket_t *first = recorded_listener(&recorder, &port);
    sk_socket_t *second = recorded_socket(&recorder, NULL);
    sk_error_t error;
    CHECK_EQ(sk_socket_accept_on_interface(second, "127.0.0.1", port, &error), SK_ERR_SYSTEM);
    CHECK_EQ(error.code, SK_ERR_SYSTEM);
    CHECK_EQ(error.os_error, EADDRINUSE);
    CHECK(strlen(error.message) > 0);
    CHECK_EQ(sk_socket_is_disconnected(second), 1);
    CHECK_EQ(sk_socket_accept_on_interface(first, "127.0.0.1", 0, &error), SK_ERR_BAD_CONFIG);
    CHECK_EQ(sk_socket_release(first), SK_OK);
    CHECK_EQ(sk_socket_release(second), SK_OK);
    recorder_destroy(&recorder);
}

void test_ipv6_loopback(void) {
    recorder_t server;
    recorder_init(&server);
    sk_socket_t *listener = recorded_socket(&server, NULL);
    CHECK_EQ(sk_socket_accept_on_interface(listener, "::1", 0, NULL), SK_OK);
    CHECK_EQ(sk_socket_is_ipv6(listener), 1);
    CHECK_EQ(sk_socket_is_ipv4(listener), 0);
    uint16_t port = 0;
    CHECK_EQ(sk_socket_get_local_port(listener, &port), SK_OK);
    char host[64];
    CHECK_EQ(sk_socket_get_local_host(listener, host, sizeof host), 3);
    CHECK_STR(host, "::1");

    recorder_t client;
    recorder_init(&client);
    sk_socket_t *sock = recorded_socket(&client, NULL);
    CHECK_EQ(sk_socket_connect_to_host(sock, "::1", port, NULL, 5, NULL), SK_OK);
    recorder_expect(&client, EVENT_CONNECT, 1);
    CHECK_STR(recorder_event(&client, EVENT_CONNECT, 0).text, "::1");
    CHECK_EQ(recorder_event(&client, EVENT_CONNECT, 0).length, port);
    CHECK_EQ(sk_socket_is_ipv6(sock), 1);
    CHECK_EQ(sk_socket_get_connected_host(sock, host, sizeof host), 3);
    CHECK_STR(host, "::1");
    uint16_t peer_port = 0;
    CHECK_EQ(sk_socket_get_connected_port(sock, &peer_port), SK_OK);
    CHECK_EQ(peer_port, port);
    struct sockaddr_storage address;
    socklen_t length = sizeof address;
    CHECK_EQ(sk_socket_get_connected_address(sock, (struct sockaddr *)&address, &length), sizeof(struct sockaddr_in6));
    CHECK_EQ(length, sizeof(struct sockaddr_in6));
    CHECK_EQ(address.ss_family, AF_INET6);
    length = sizeof address;
    CHECK_EQ(sk_socket_get_local_address(sock, (struct sockaddr *)&address, &length), sizeof(struct sockaddr_in6));
    CHECK_EQ(address.ss_family, AF_INET6);
    /* A too-small buffer gets the first bytes and the full length. */
    length = 4;
    CHECK_EQ(sk_socket_get_connected_address(sock, (struct sockaddr *)&address, &length), sizeof(struct sockaddr_in6));
    CHECK_EQ(length, sizeof(struct sockaddr_in6));
    CHECK_EQ(sk_socket_get_connected_unix_path(sock, host, sizeof host), SK_ERR_BAD_CONFIG);

    /* Raw address connect, IPv6. */
    recorder_t raw_client;
    recorder_init(&raw_client);
    sk_socket_t *by_address = recorded_socket(&raw_client, NULL);
    struct sockaddr_in6 target = {.sin6_family = AF_INET6, .sin6_port = htons(port)};
    inet_pton(AF_INET6, "::1", &target.sin6_addr);
    CHECK_EQ(sk_socket_connect_to_address(by_address, (struct sockaddr *)&target, sizeof target, NULL, 5, NULL), SK_OK);
    recorder_expect(&raw_client, EVENT_CONNECT, 1);
    CHECK_EQ(sk_socket_release(by_address), SK_OK);

    CHECK_EQ(sk_socket_release(sock), SK_OK);
    CHECK_EQ(sk_socket_release(listener), SK_OK);
    /* Not connected: the getters say so. */
    CHECK_EQ(sk_socket_get_connected_host(sock, host, sizeof host), SK_ERR_INVALID_HANDLE);
    recorder_destroy(&raw_client);
    recorder_destroy(&client);
    recorder_destroy(&server);
}

static void echo_accept(recorder_t *recorder, sk_socket_t *listener, sk_socket_t *connection) {
    (void)recorder;
    (void)listener;
    CHECK_EQ(sk_socket_read_to_length(connection, 16, -1, 0, NULL), SK_OK);
}

static void echo_read(recorder_t *recorder, sk_socket_t *sock, const void *data, size_t length, long tag) {
    (void)recorder;
    (void)tag;
    sk_socket_write(sock, data, length, -1, 0, NULL);
}

void test_unix_domain_sockets(void) {
    char path[108];
    snprintf(path, sizeof path, "/tmp/sk-c-%d.sock", (int)getpid());
    recorder_t server;
    recorder_init(&server);
    server.on_accept = echo_accept;
    server.on_read = echo_read;
    sk_socket_t *listener = recorded_socket(&server, NULL);
    CHECK_EQ(sk_socket_accept_on_unix_path(listener, path, NULL), SK_OK);
    CHECK_EQ(sk_socket_is_unix(listener), 1);
    struct stat status;
    CHECK(stat(path, &status) == 0 && S_ISSOCK(status.st_mode));

    recorder_t client;
    recorder_init(&client);
    sk_socket_t *sock = recorded_socket(&client, NULL);
    CHECK_EQ(sk_socket_connect_to_unix_path(sock, path, 5, NULL), SK_OK);
    recorder_expect(&client, EVENT_CONNECT, 1);
    CHECK_STR(recorder_event(&client, EVENT_CONNECT, 0).text, path);
    CHECK_EQ(recorder_event(&client, EVENT_CONNECT, 0).length, 0);
    char text[128];
    CHECK_EQ(sk_socket_get_connected_unix_path(sock, text, sizeof text), (int)strlen(path));
    CHECK_STR(text, path);
    CHECK_EQ(sk_socket_get_connected_host(sock, text, sizeof text), SK_ERR_BAD_CONFIG);
    CHECK_EQ(sk_socket_is_unix(sock), 1);
    CHECK_EQ(sk_socket_write(sock, "ThisTestRocks!!!", 16, 5, 1, NULL), SK_OK);
    CHECK_EQ(sk_socket_read_to_length(sock, 16, 5, 2, NULL), SK_OK);
    recorder_expect(&client, EVENT_READ, 1);
    CHECK_STR(recorder_event(&client, EVENT_READ, 0).text, "ThisTestRocks!!!");
    /* Upstream's socketFD is -1 for Unix-domain sockets; here unix_domain and primary hold
     * it, for the listener and both ends. */
    sk_socket_t *ends[3] = {listener, sock, recorder_accepted(&server, 0)};
    for (int i = 0; i < 3; i++) {
        sk_socket_descriptors_t found = socket_descriptors(ends[i], NULL);
        CHECK(found.unix_domain >= 0);
        CHECK_EQ(found.primary, found.unix_domain);
        CHECK_EQ(found.ipv4, -1);
        CHECK_EQ(found.ipv6, -1);
        struct sockaddr_storage local;
        socklen_t local_length = sizeof local;
        CHECK_EQ(getsockname(found.unix_domain, (struct sockaddr *)&local, &local_length), 0);
        CHECK_EQ(local.ss_family, AF_UNIX);
    }

    CHECK_EQ(sk_socket_release(sock), SK_OK);
    /* The accepted connection reports its client's close (idle: at once). */
    recorder_expect(&server, EVENT_DISCONNECT, 1);
    CHECK(recorder_event(&server, EVENT_DISCONNECT, 0).sock != listener);
    CHECK_EQ(sk_socket_disconnect(listener), SK_OK);
    recorder_expect(&server, EVENT_DISCONNECT, 2);
    CHECK(stat(path, &status) != 0);
    CHECK_EQ(sk_socket_release(listener), SK_OK);

    /* Connecting to a path nobody listens on. */
    recorder_t lonely;
    recorder_init(&lonely);
    sk_socket_t *nobody = recorded_socket(&lonely, NULL);
    CHECK_EQ(sk_socket_connect_to_unix_path(nobody, path, 5, NULL), SK_OK);
    expect_only_disconnect(&lonely, SK_ERR_SYSTEM, ENOENT);
    CHECK_EQ(sk_socket_release(nobody), SK_OK);
    recorder_destroy(&lonely);
    recorder_destroy(&client);
    recorder_destroy(&server);
}

/* A raw sockaddr_un comes with its length, so a NUL can sit inside its path; the kernel
 * would end the path there and connect to another socket. Refused; padding and abstract
 * names (first byte NUL) are not. */
void test_unix_address_with_an_embedded_nul(void) {
    char path[108];
    snprintf(path, sizeof path, "/tmp/sk-c-nul-%d.sock", (int)getpid());
    recorder_t server;
    recorder_init(&server);
    server.on_accept = echo_accept;
    sk_socket_t *listener = recorded_socket(&server, NULL);
    CHECK_EQ(sk_socket_accept_on_unix_path(listener, path, NULL), SK_OK);

    struct sockaddr_un address;
    memset(&address, 0, sizeof address);
    address.sun_family = AF_UNIX;
    size_t length = strlen(path);
    memcpy(address.sun_path, path, length);
    memcpy(address.sun_path + length + 1, ".evil", 5); /* "<path>\0.evil" */
    socklen_t with_tail = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + length + 1 + 5 + 1);
    recorder_t client;
    recorder_init(&client);
    sk_socket_t *sock = recorded_socket(&client, NULL);
    sk_error_t error;
    CHECK_EQ(sk_socket_connect_to_address(sock, (struct sockaddr *)&address, with_tail, NULL, 5, &error),
             SK_ERR_BAD_PARAM);
    CHECK(strstr(error.message, "NUL") != NULL);
    /* The same address with the tail as padding (NULs only) connects. */
    memset(address.sun_path + length + 1, 0, 5);
    CHECK_EQ(sk_socket_connect_to_address(sock, (struct sockaddr *)&address, with_tail, NULL, 5, &error), SK_OK);
    recorder_expect(&client, EVENT_CONNECT, 1);
    CHECK_EQ(sk_socket_release(sock), SK_OK);
    CHECK_EQ(sk_socket_release(listener), SK_OK);
    recorder_destroy(&client);
    recorder_destroy(&server);
}

void test_create_from_fd(void) {
    recorder_t recorder;
    recorder_init(&recorder);
    sk_socket_delegate_t delegate = recorder_delegate();
    sk_error_t error;

    /* A connected Unix pair. */
    int pair[2];
    CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, pair) == 0);
    sk_socket_t *sock = NULL;
    CHECK_EQ(sk_socket_create_from_fd(pair[0], &delegate, sizeof delegate, &recorder, NULL, NULL, &sock, &error), SK_OK);
    recorder_expect(&recorder, EVENT_CONNECT, 1);
    CHECK(recorder_event(&recorder, EVENT_CONNECT, 0).sock == sock);
    CHECK_EQ(sk_socket_is_connected(sock), 1);
    CHECK_EQ(sk_socket_is_unix(sock), 1);
    CHECK_EQ(sk_socket_write(sock, "abc", 3, 5, 1, NULL), SK_OK);
    char got[3];
    raw_receive(pair[1], got, 3);
    CHECK(memcmp(got, "abc", 3) == 0);
    CHECK_EQ(sk_socket_release(sock), SK_OK);
    close(pair[1]);

    /* A connected TCP socket. */
    uint16_t port = 0;
    int listener = raw_listen("127.0.0.1", &port, 8);
    int fd = raw_connect("127.0.0.1", port);
    int peer = raw_accept(listener);
    CHECK_EQ(sk_socket_create_from_fd(fd, &delegate, sizeof delegate, &recorder, NULL, NULL, &sock, &error), SK_OK);
    recorder_expect(&recorder, EVENT_CONNECT, 2);
    CHECK_STR(recorder_event(&recorder, EVENT_CONNECT, 1).text, "127.0.0.1");
    CHECK_EQ(recorder_event(&recorder, EVENT_CONNECT, 1).length, port);
    CHECK(fcntl(fd, F_GETFL) & O_NONBLOCK);
    CHECK_EQ(sk_socket_release(sock), SK_OK);
    close(peer);

    /* Failures leave the descriptor with the caller. */
    int unconnected = socket(AF_INET, SOCK_STREAM, 0);
    CHECK_EQ(sk_socket_create_from_fd(unconnected, &delegate, sizeof delegate, &recorder, NULL, NULL, &sock, &error),
             SK_ERR_SYSTEM);
    CHECK_EQ(error.os_error, ENOTCONN);
    CHECK(fcntl(unconnected, F_GETFD) >= 0);
    close(unconnected);
    int datagram = socket(AF_INET, SOCK_DGRAM, 0);
    CHECK_EQ(sk_socket_create_from_fd(datagram, &delegate, sizeof delegate, &recorder, NULL, NULL, &sock, &error),
             SK_ERR_BAD_PARAM);
    close(datagram);
    CHECK_EQ(sk_socket_create_from_fd(1000000, &delegate, sizeof delegate, &recorder, NULL, NULL, &sock, &error),
             SK_ERR_SYSTEM);
    CHECK_EQ(error.os_error, EBADF);
    close(listener);
    recorder_destroy(&recorder);
}

static void keep_and_read(recorder_t *recorder, sk_socket_t *listener, sk_socket_t *connection) {
    (void)recorder;
    (void)listener;
    sk_socket_read_to_length(connection, 1, -1, 0, NULL);
}

void test_pause_accepting_when_out_of_descriptors(void) {
    if (getenv("SOCKETKIT_TEST_UNDER_VALGRIND")) {
        printf("SKIP: valgrind virtualizes RLIMIT_NOFILE; this test runs without it and under sanitizers\n");
        return;
    }
    recorder_t recorder;
    recorder_init(&recorder);
    recorder.on_accept = keep_and_read;
    uint16_t port = 0;
    sk_socket_t *listener = recorded_listener(&recorder, &port);
    log_capture_start(SK_LOG_INFO);

    /* Make the client sockets first, then leave the process room for four more. */
    enum { CLIENTS = 12 };
    int clients[CLIENTS];
    for (int i = 0; i < CLIENTS; i++) clients[i] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int highest = dup(0);
    CHECK(highest >= 0);
    close(highest);
    struct rlimit original, limited;
    CHECK(getrlimit(RLIMIT_NOFILE, &original) == 0);
    limited = original;
    limited.rlim_cur = (rlim_t)highest + 4;
    CHECK(setrlimit(RLIMIT_NOFILE, &limited) == 0);

    struct sockaddr_in address = {.sin_family = AF_INET, .sin_port = htons(port)};
    inet_pton(AF_INET, "127.0.0.1", &address.sin_addr);
    for (int i = 0; i < CLIENTS; i++) {
        CHECK(connect(clients[i], (struct sockaddr *)&address, sizeof address) == 0);
        raw_send(clients[i], "x", 1);
    }
    recorder_expect(&recorder, EVENT_PAUSE_ACCEPTING, 1);
    event_t pause = recorder_event(&recorder, EVENT_PAUSE_ACCEPTING, 0);
    CHECK_EQ(pause.error_code, SK_ERR_SYSTEM);
    CHECK_EQ(pause.os_error, EMFILE);
    size_t accepted = recorder_count(&recorder, EVENT_ACCEPT);
    CHECK(accepted < CLIENTS);

    /* Free the descriptors: the listener resumes by itself and serves everyone. */
    CHECK(setrlimit(RLIMIT_NOFILE, &original) == 0);
    recorder_expect(&recorder, EVENT_ACCEPT, CLIENTS);
    recorder_expect(&recorder, EVENT_READ, CLIENTS);
    CHECK_EQ(recorder_count(&recorder, EVENT_PAUSE_ACCEPTING), 1);
    /* The log says so too: a warning when the listener stops, once, and when it resumes. */
    const char *stopped[] = {"stopped accepting", "Too many open files", "retrying in 50 ms", NULL};
    const char *resumed[] = {"accepts again", NULL};
    if (log_capture_find(SK_LOG_WARNING, "accept", stopped) != 1) log_capture_print();
    CHECK_EQ(log_capture_find(SK_LOG_WARNING, "accept", stopped), 1);
    CHECK_EQ(log_capture_find(SK_LOG_INFO, "accept", resumed), 1);
    log_capture_stop();
    for (int i = 0; i < CLIENTS; i++) close(clients[i]);
    CHECK_EQ(sk_socket_release(listener), SK_OK);
    recorder_destroy(&recorder);
}
