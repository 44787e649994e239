/* SPDX-License-Identifier: MIT */
/* Connecting through proxies (issue 33): sk_socket_set_proxy against Debian's microsocks
 * (SOCKS5) and tinyproxy (HTTP CONNECT), which nobody here wrote, and a scripted proxy for
 * the failures. */
#define _GNU_SOURCE
#include "test_support.h"

#include <sys/socket.h>
#include <unistd.h>

/* Connects a recorded socket through the proxy set on it to `target`:`listener`'s port,
 * with a write and a read queued before the proxy answers, and checks they cross. */
static void exchange_through_proxy(sk_socket_t *sock, recorder_t *recorder, const char *target, int listener,
                                   uint16_t target_port) {
    sk_error_t error;
    CHECK_EQ(sk_socket_connect_to_host(sock, target, target_port, NULL, 20, &error), SK_OK);
    CHECK_EQ(sk_socket_write(sock, "ping", 4, -1, 1, &error), SK_OK);
    CHECK_EQ(sk_socket_read_to_length(sock, 4, -1, 2, &error), SK_OK);
    int peer = raw_accept(listener);
    char buffer[4];
    raw_receive(peer, buffer, 4);
    CHECK_EQ(memcmp(buffer, "ping", 4), 0);
    raw_send(peer, "pong", 4);
    recorder_expect_bytes(recorder, 4);
    event_t connected = recorder_event(recorder, EVENT_CONNECT, 0);
    CHECK_STR(connected.text, target);
    CHECK_EQ(connected.length, target_port);
    char host[300];
    CHECK_EQ(sk_socket_get_connected_host(sock, host, sizeof host), (int)strlen(target));
    CHECK_STR(host, target);
    uint16_t port = 0;
    CHECK_EQ(sk_socket_get_connected_port(sock, &port), SK_OK);
    CHECK_EQ(port, target_port);
    CHECK_EQ(sk_socket_disconnect(sock), SK_OK);
    recorder_expect(recorder, EVENT_DISCONNECT, 1);
    close(peer);
}

/* microsocks with -u/-P: the right credentials connect (the target's name sent
 * unresolved), wrong ones end in SK_ERR_PROXY_AUTH; the getter gives the proxy back. */
void test_proxy_socks5_through_microsocks(void) {
    if (!program_installed("/usr/bin/microsocks")) {
        printf("SKIP: microsocks is not installed (make test-tools)\n");
        return;
    }
    uint16_t proxy_port = free_loopback_port();
    char command[256];
    snprintf(command, sizeof command, "exec /usr/bin/microsocks -i 127.0.0.1 -p %u -u alice -P s3cret", proxy_port);
    pid_t proxy = helper_process_start(command, proxy_port);
    uint16_t target_port = 0;
    int listener = raw_listen("127.0.0.1", &target_port, 8);

    recorder_t recorder;
    recorder_init(&recorder);
    sk_socket_t *sock = recorded_socket(&recorder, NULL);
    sk_error_t error;
    int kind = -1;
    uint16_t port = 1;
    CHECK_EQ(sk_socket_get_proxy(sock, &kind, NULL, 0, &port), 0);
    CHECK_EQ(kind, SK_PROXY_NONE);
    CHECK_EQ(port, 0);
    CHECK_EQ(sk_socket_set_proxy(sock, SK_PROXY_SOCKS5, "127.0.0.1", proxy_port, "alice", "s3cret", &error), SK_OK);
    CHECK_SNPRINTF("127.0.0.1", sk_socket_get_proxy(sock, NULL, target, capacity, NULL));
    CHECK_EQ(sk_socket_get_proxy(sock, &kind, NULL, 0, &port), 9);
    CHECK_EQ(kind, SK_PROXY_SOCKS5);
    CHECK_EQ(port, proxy_port);
    exchange_through_proxy(sock, &recorder, "localhost", listener, target_port);
    sk_socket_release(sock);
    recorder_destroy(&recorder);

    recorder_init(&recorder);
    sock = recorded_socket(&recorder, NULL);
    CHECK_EQ(sk_socket_set_proxy(sock, SK_PROXY_SOCKS5, "localhost", proxy_port, "alice", "wrong", &error), SK_OK);
    CHECK_EQ(sk_socket_connect_to_host(sock, "localhost", target_port, NULL, 20, &error), SK_OK);
    recorder_expect(&recorder, EVENT_DISCONNECT, 1);
    event_t ended = recorder_event(&recorder, EVENT_DISCONNECT, 0);
    CHECK_EQ(ended.error_code, SK_ERR_PROXY_AUTH);
    CHECK_EQ(recorder_count(&recorder, EVENT_CONNECT), 0);
    sk_socket_release(sock);
    recorder_destroy(&recorder);
    close(listener);
    helper_process_stop(proxy);
}

/* tinyproxy from a generated configuration: CONNECT to an IP literal and to a name. */
void test_proxy_http_connect_through_tinyproxy(void) {
    if (!program_installed("/usr/bin/tinyproxy")) {
        printf("SKIP: tinyproxy is not installed (make test-tools)\n");
        return;
    }
    uint16_t proxy_port = free_loopback_port();
    char path[128];
    snprintf(path, sizeof path, "/tmp/socketkit-c-tinyproxy-%d.conf", (int)getpid());
    FILE *file = fopen(path, "w");
    CHECK(file != NULL);
    fprintf(file, "Port %u\nListen 127.0.0.1\nTimeout 30\nMaxClients 20\nAllow 127.0.0.1\nLogLevel Error\n", proxy_port);
    fclose(file);
    char command[256];
    snprintf(command, sizeof command, "exec /usr/bin/tinyproxy -d -c %s", path);
    pid_t proxy = helper_process_start(command, proxy_port);
    uint16_t target_port = 0;
    int listener = raw_listen("127.0.0.1", &target_port, 8);
    const char *targets[] = {"127.0.0.1", "localhost"};
    for (size_t index = 0; index < 2; index++) {
        recorder_t recorder;
        recorder_init(&recorder);
        sk_socket_t *sock = recorded_socket(&recorder, NULL);
        sk_error_t error;
        CHECK_EQ(sk_socket_set_proxy(sock, SK_PROXY_HTTP_CONNECT, "127.0.0.1", proxy_port, NULL, NULL, &error), SK_OK);
        exchange_through_proxy(sock, &recorder, targets[index], listener, target_port);
        sk_socket_release(sock);
        recorder_destroy(&recorder);
    }
    close(listener);
    helper_process_stop(proxy);
    unlink(path);
}

/* A scripted proxy: a SOCKS5 reply code and an HTTP status become SK_ERR_PROXY with the
 * code in os_error; bytes behind a 200 are the target's first; bad arguments. */
void test_proxy_errors_and_arguments(void) {
    recorder_t recorder;
    recorder_init(&recorder);
    sk_socket_t *sock = recorded_socket(&recorder, NULL);
    sk_error_t error;
    CHECK_EQ(sk_socket_set_proxy(NULL, SK_PROXY_SOCKS5, "127.0.0.1", 1080, NULL, NULL, &error), SK_ERR_INVALID_HANDLE);
    CHECK_EQ(sk_socket_set_proxy(sock, 9, "127.0.0.1", 1080, NULL, NULL, &error), SK_ERR_BAD_PARAM);
    CHECK_EQ(sk_socket_set_proxy(sock, SK_PROXY_SOCKS5, NULL, 1080, NULL, NULL, &error), SK_ERR_BAD_PARAM);
    CHECK_EQ(sk_socket_set_proxy(sock, SK_PROXY_SOCKS5, "127.0.0.1", 0, NULL, NULL, &error), SK_ERR_BAD_PARAM);
    CHECK_EQ(sk_socket_set_proxy(sock, SK_PROXY_SOCKS5, "127.0.0.1", 1080, "user", NULL, &error), SK_ERR_BAD_PARAM);
    CHECK_EQ(sk_socket_set_proxy(sock, SK_PROXY_HTTP_CONNECT, "127.0.0.1", 1080, "a:b", "c", &error), SK_ERR_BAD_PARAM);
    CHECK_EQ(sk_socket_get_proxy(NULL, NULL, NULL, 0, NULL), SK_ERR_INVALID_HANDLE);

    uint16_t proxy_port = 0;
    int proxy = raw_listen("127.0.0.1", &proxy_port, 8);
    CHECK_EQ(sk_socket_set_proxy(sock, SK_PROXY_SOCKS5, "127.0.0.1", proxy_port, NULL, NULL, &error), SK_OK);
    CHECK_EQ(sk_socket_connect_to_host(sock, "example.test", 443, NULL, 20, &error), SK_OK);
    CHECK_EQ(sk_socket_set_proxy(sock, SK_PROXY_NONE, NULL, 0, NULL, NULL, &error), SK_ERR_BAD_CONFIG);
    int peer = raw_accept(proxy);
    unsigned char greeting[3];
    raw_receive(peer, greeting, 3);
    CHECK(greeting[0] == 5 && greeting[1] == 1 && greeting[2] == 0);
    raw_send(peer, "\x05\x00", 2);
    unsigned char request[5 + 12 + 2];
    raw_receive(peer, request, sizeof request);
    CHECK(request[3] == 3 && request[4] == 12 && memcmp(request + 5, "example.test", 12) == 0);
    raw_send(peer, "\x05\x05\x00\x01\x00\x00\x00\x00\x00\x00", 10);
    recorder_expect(&recorder, EVENT_DISCONNECT, 1);
    event_t ended = recorder_event(&recorder, EVENT_DISCONNECT, 0);
    CHECK_EQ(ended.error_code, SK_ERR_PROXY);
    CHECK_EQ(ended.os_error, 5);
    CHECK(strstr(ended.text, "connection refused") != NULL);
    close(peer);

    CHECK_EQ(sk_socket_set_proxy(sock, SK_PROXY_HTTP_CONNECT, "127.0.0.1", proxy_port, NULL, NULL, &error), SK_OK);
    CHECK_EQ(sk_socket_connect_to_host(sock, "example.test", 443, NULL, 20, &error), SK_OK);
    peer = raw_accept(proxy);
    const char *expected = "CONNECT example.test:443 HTTP/1.1\r\nHost: example.test:443\r\n\r\n";
    char head[128];
    raw_receive(peer, head, strlen(expected));
    CHECK_EQ(memcmp(head, expected, strlen(expected)), 0);
    const char *refusal = "HTTP/1.1 403 Forbidden\r\n\r\n";
    raw_send(peer, refusal, strlen(refusal));
    recorder_expect(&recorder, EVENT_DISCONNECT, 2);
    ended = recorder_event(&recorder, EVENT_DISCONNECT, 1);
    CHECK_EQ(ended.error_code, SK_ERR_PROXY);
    CHECK_EQ(ended.os_error, 403);
    close(peer);

    CHECK_EQ(sk_socket_connect_to_host(sock, "example.test", 443, NULL, 20, &error), SK_OK);
    peer = raw_accept(proxy);
    raw_receive(peer, head, strlen(expected));
    const char *yes = "HTTP/1.1 200 OK\r\n\r\nhello";
    raw_send(peer, yes, strlen(yes));
    recorder_expect(&recorder, EVENT_CONNECT, 1);
    CHECK_STR(recorder_event(&recorder, EVENT_CONNECT, 0).text, "example.test");
    CHECK_EQ(sk_socket_read_to_length(sock, 5, -1, 1, &error), SK_OK);
    recorder_expect_bytes(&recorder, 5);
    CHECK_EQ(memcmp(recorder.bytes, "hello", 5), 0);
    CHECK_EQ(sk_socket_disconnect(sock), SK_OK);
    close(peer);
    close(proxy);
    sk_socket_release(sock);
    recorder_destroy(&recorder);
}
