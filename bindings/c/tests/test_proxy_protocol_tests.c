/* SPDX-License-Identifier: MIT */
/* PROXY protocol v1 and v2 on listeners (issue 33, item 6), with headers made here the way
 * a proxy writes them (tests/test_proxy_haproxy.py in the Python suite uses HAProxy). */
#define _GNU_SOURCE
#include "test_support.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static const unsigned char v2_signature[12] = {0x0D, 0x0A, 0x0D, 0x0A, 0x00, 0x0D, 0x0A, 0x51, 0x55, 0x49, 0x54, 0x0A};

/* A v2 header: `command` 0x21 PROXY or 0x20 LOCAL, `family` 0x11 TCP4 / 0x21 TCP6. */
static size_t v2_header(unsigned char *out, unsigned char command, unsigned char family,
                        const unsigned char *block, size_t block_length) {
    memcpy(out, v2_signature, sizeof v2_signature);
    out[12] = command;
    out[13] = family;
    out[14] = (unsigned char)(block_length >> 8);
    out[15] = (unsigned char)(block_length & 0xFF);
    memcpy(out + 16, block, block_length);
    return 16 + block_length;
}

static size_t v2_ipv6(unsigned char *out, const char *source, uint16_t source_port,
                      const char *destination, uint16_t destination_port) {
    unsigned char block[36];
    CHECK_EQ(inet_pton(AF_INET6, source, block), 1);
    CHECK_EQ(inet_pton(AF_INET6, destination, block + 16), 1);
    block[32] = (unsigned char)(source_port >> 8);
    block[33] = (unsigned char)(source_port & 0xFF);
    block[34] = (unsigned char)(destination_port >> 8);
    block[35] = (unsigned char)(destination_port & 0xFF);
    return v2_header(out, 0x21, 0x21, block, sizeof block);
}

void test_proxy_protocol_headers_give_the_clients_address(void) {
    recorder_t recorder;
    recorder_init(&recorder);
    sk_error_t error;
    double seconds = 0;
    sk_socket_t *listener = recorded_socket(&recorder, NULL);
    CHECK_EQ(sk_socket_get_proxy_protocol(listener), SK_PROXY_PROTOCOL_NONE);
    CHECK_EQ(sk_socket_set_proxy_protocol(listener, 4), SK_ERR_BAD_PARAM);
    CHECK_EQ(sk_socket_set_proxy_protocol(listener, -1), SK_ERR_BAD_PARAM);
    CHECK_EQ(sk_socket_set_proxy_protocol(listener, SK_PROXY_PROTOCOL_EITHER), SK_OK);
    CHECK_EQ(sk_socket_get_proxy_protocol(listener), SK_PROXY_PROTOCOL_EITHER);
    CHECK_EQ(sk_socket_get_proxy_header_timeout(listener, &seconds), SK_OK);
    CHECK(seconds == 5.0);
    CHECK_EQ(sk_socket_set_proxy_header_timeout(listener, 0, &error), SK_ERR_BAD_PARAM);
    CHECK_EQ(sk_socket_set_proxy_header_timeout(listener, 1.0 / 0.0, &error), SK_ERR_BAD_PARAM);
    /* Short: the silent client below is closed by it. Long enough for valgrind's slowness,
     * since the other clients' headers must arrive within it. */
    CHECK_EQ(sk_socket_set_proxy_header_timeout(listener, 3, &error), SK_OK);
    CHECK_EQ(sk_socket_get_proxy_header_timeout(listener, &seconds), SK_OK);
    CHECK(seconds == 3.0);
    CHECK_EQ(sk_socket_accept_on_interface(listener, "127.0.0.1", 0, &error), SK_OK);
    uint16_t port = 0;
    CHECK_EQ(sk_socket_get_local_port(listener, &port), SK_OK);

    /* A v2 header over IPv6, split: its first part, then a LOCAL connection accepted while
     * the first still lacks bytes. */
    unsigned char header[64];
    size_t header_length = v2_ipv6(header, "2001:db8::5", 40001, "2001:db8::6", 443);
    int proxied = raw_connect("127.0.0.1", port);
    raw_send(proxied, header, 7);
    int health = raw_connect("127.0.0.1", port);
    unsigned char local[32];
    unsigned char unused[12] = {0};
    size_t local_length = v2_header(local, 0x20, 0x11, unused, sizeof unused);
    raw_send(health, local, local_length);
    recorder_expect(&recorder, EVENT_ACCEPT, 1);
    sk_socket_t *checked = recorder_accepted(&recorder, 0);
    CHECK_SNPRINTF("127.0.0.1", sk_socket_get_connected_host(checked, target, capacity));
    struct sockaddr_storage address;
    socklen_t length = sizeof address;
    CHECK_EQ(sk_socket_get_proxy_address(checked, (struct sockaddr *)&address, &length), SK_ERR_BAD_CONFIG);
    CHECK_EQ(sk_socket_get_proxy_protocol_version(checked), 0);

    /* The rest of the header and the first request, in one segment. */
    unsigned char rest[80];
    memcpy(rest, header + 7, header_length - 7);
    memcpy(rest + header_length - 7, "ping", 4);
    raw_send(proxied, rest, header_length - 7 + 4);
    recorder_expect(&recorder, EVENT_ACCEPT, 2);
    sk_socket_t *client = recorder_accepted(&recorder, 1);
    CHECK_SNPRINTF("2001:db8::5", sk_socket_get_connected_host(client, target, capacity));
    uint16_t client_port = 0;
    CHECK_EQ(sk_socket_get_connected_port(client, &client_port), SK_OK);
    CHECK_EQ(client_port, 40001);
    CHECK_SNPRINTF("2001:db8::6", sk_socket_get_local_host(client, target, capacity));
    CHECK_EQ(sk_socket_get_proxy_protocol_version(client), 2);
    length = sizeof address;
    CHECK_EQ(sk_socket_get_proxy_address(client, (struct sockaddr *)&address, &length), (int)sizeof(struct sockaddr_in));
    CHECK_EQ(address.ss_family, AF_INET);
    CHECK_EQ(((struct sockaddr_in *)&address)->sin_addr.s_addr, htonl(INADDR_LOOPBACK));
    CHECK_EQ(sk_socket_read_to_length(client, 4, 10, 5, &error), SK_OK);
    recorder_expect(&recorder, EVENT_READ, 1);
    event_t read = recorder_event(&recorder, EVENT_READ, 0);
    CHECK_EQ(read.length, 4);
    CHECK_EQ(memcmp(read.text, "ping", 4), 0);

    /* Bad starts close their connection alone, with a warning; the silent one by the
     * timeout. The listener goes on. */
    log_capture_start(SK_LOG_WARNING);
    int garbage = raw_connect("127.0.0.1", port);
    raw_send(garbage, "GET / HTTP/1.1\r\n\r\n", 18);
    raw_wait_closed(garbage);
    const char *const malformed[] = {"PROXY protocol", "closed", NULL};
    CHECK(log_capture_wait(SK_LOG_WARNING, "accept", malformed, 30));
    /* A CRC32C TLV that does not match the header (damaged, or forged): refused too. */
    unsigned char crc_block[12 + 7] = {0};
    memcpy(crc_block + 12, "\x03\x00\x04\x00\x00\x00\x00", 7);
    unsigned char crc_header[16 + sizeof crc_block];
    size_t crc_length = v2_header(crc_header, 0x21, 0x11, crc_block, sizeof crc_block);
    int damaged = raw_connect("127.0.0.1", port);
    raw_send(damaged, crc_header, crc_length);
    raw_wait_closed(damaged);
    const char *const crc[] = {"CRC32C does not match", NULL};
    CHECK(log_capture_wait(SK_LOG_WARNING, "accept", crc, 30));
    close(damaged);
    int silent = raw_connect("127.0.0.1", port);
    raw_wait_closed(silent);
    const char *const late[] = {"no complete PROXY protocol header within", NULL};
    CHECK(log_capture_wait(SK_LOG_WARNING, "accept", late, 30));
    log_capture_stop();
    const char v1[] = "PROXY TCP4 192.0.2.44 192.0.2.45 1000 2000\r\n";
    int third = raw_connect("127.0.0.1", port);
    raw_send(third, v1, sizeof v1 - 1);
    recorder_expect(&recorder, EVENT_ACCEPT, 3);
    CHECK_SNPRINTF("192.0.2.44", sk_socket_get_connected_host(recorder_accepted(&recorder, 2), target, capacity));
    CHECK_EQ(sk_socket_get_proxy_protocol_version(recorder_accepted(&recorder, 2)), 1);
    CHECK_EQ(sk_socket_get_proxy_address(NULL, NULL, &length), SK_ERR_INVALID_HANDLE);
    CHECK_EQ(sk_socket_get_proxy_protocol_version(NULL), SK_ERR_INVALID_HANDLE);

    close(proxied);
    close(health);
    close(garbage);
    close(silent);
    close(third);
    for (size_t i = 0; i < 3; i++) CHECK_EQ(sk_socket_release(recorder_accepted(&recorder, i)), SK_OK);
    CHECK_EQ(sk_socket_release(listener), SK_OK);
    recorder_destroy(&recorder);
}
