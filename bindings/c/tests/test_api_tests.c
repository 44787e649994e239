/* SPDX-License-Identifier: MIT */
/* The C surface itself: version, errors, handles, arguments, configuration, utilities. */
#include "test_support.h"

#include <arpa/inet.h>
#include <errno.h>
#include <math.h>
#include <netdb.h>
#include <unistd.h>
#include <netinet/in.h>
#include <stdint.h>

void test_version_matches_the_header(void) {
    CHECK_STR(sk_version(), SK_VERSION_STRING);
    CHECK_EQ(sk_version_number(), SK_VERSION_NUMBER);
    CHECK_EQ(SK_VERSION_NUMBER, SK_VERSION_MAJOR * 10000 + SK_VERSION_MINOR * 100 + SK_VERSION_PATCH);
}

/* The caller's view of the error table (docs/EVENTS_AND_ERRORS.md, which Tests/check_tables.py
 * holds the header and the library to): the codes run from SK_OK down without a gap, each
 * with a name and a sentence of its own, and nothing beyond them has either. */
void test_every_error_code_has_a_name(void) {
    int last = 0;
    while (strcmp(sk_error_name(last - 1), "SK_ERR_UNKNOWN") != 0 && last > -1000) last--;
    CHECK(last <= SK_ERR_PROXY_AUTH);
    for (int code = 0; code >= last; code--) {
        CHECK(strncmp(sk_error_name(code), code == 0 ? "SK_OK" : "SK_ERR_", code == 0 ? 6 : 7) == 0);
        CHECK(strcmp(sk_strerror(code), "unknown error") != 0);
        for (int other = 0; other > code; other--) {
            CHECK(strcmp(sk_error_name(code), sk_error_name(other)) != 0);
            CHECK(strcmp(sk_strerror(code), sk_strerror(other)) != 0);
        }
    }
    CHECK_STR(sk_error_name(SK_ERR_READ_TIMEOUT), "SK_ERR_READ_TIMEOUT");
    CHECK_STR(sk_error_name(SK_ERR_TLS_FAILED), "SK_ERR_TLS_FAILED");
    CHECK_STR(sk_error_name(SK_ERR_TLS_SETTINGS), "SK_ERR_TLS_SETTINGS");
    CHECK_STR(sk_error_name(last - 1), "SK_ERR_UNKNOWN");
    CHECK_STR(sk_error_name(1), "SK_ERR_UNKNOWN");
    CHECK_STR(sk_strerror(last - 1), "unknown error");
    CHECK_STR(sk_strerror(42), "unknown error");
}

static void noop_perform(const sk_socket_descriptors_t *descriptors, void *context) {
    (void)descriptors;
    (void)context;
}

/* Every function taking a socket refuses NULL, garbage, released and wrong-kind handles. */
static void check_socket_functions_refuse(sk_socket_t *bad) {
    const int invalid = SK_ERR_INVALID_HANDLE;
    sk_socket_delegate_t delegate = recorder_delegate();
    char text[64];
    double seconds;
    size_t size, other;
    long tag;
    int a, b, c, d;
    uint16_t port;
    struct sockaddr_storage storage;
    socklen_t length = sizeof storage;
    void *userdata;
    sk_error_t error;
    unsigned char buffer[16];

    CHECK_EQ(sk_socket_release(bad), invalid);
    CHECK_EQ(sk_socket_set_delegate(bad, &delegate, sizeof delegate, NULL), invalid);
    CHECK_EQ(sk_socket_set_callback_queue(bad, NULL), invalid);
    CHECK_EQ(sk_socket_get_userdata(bad, &userdata), invalid);
    CHECK_EQ(sk_socket_set_ipv4_enabled(bad, 1), invalid);
    CHECK_EQ(sk_socket_is_ipv4_enabled(bad), invalid);
    CHECK_EQ(sk_socket_set_ipv6_enabled(bad, 1), invalid);
    CHECK_EQ(sk_socket_is_ipv6_enabled(bad), invalid);
    CHECK_EQ(sk_socket_set_ipv4_preferred_over_ipv6(bad, 1), invalid);
    CHECK_EQ(sk_socket_is_ipv4_preferred_over_ipv6(bad), invalid);
    CHECK_EQ(sk_socket_set_alternate_address_delay(bad, 1), invalid);
    CHECK_EQ(sk_socket_get_alternate_address_delay(bad, &seconds), invalid);
    CHECK_EQ(sk_socket_set_auto_disconnect_on_closed_read_stream(bad, 1), invalid);
    CHECK_EQ(sk_socket_get_auto_disconnect_on_closed_read_stream(bad), invalid);
    CHECK_EQ(sk_socket_set_maximum_read_length(bad, 10), invalid);
    CHECK_EQ(sk_socket_get_maximum_read_length(bad, &size), invalid);
    CHECK_EQ(sk_socket_set_write_watermarks(bad, 1, 2, &error), invalid);
    CHECK_EQ(error.code, invalid);
    CHECK(strlen(error.message) > 0);
    CHECK_EQ(sk_socket_get_write_watermarks(bad, &size, &other), invalid);
    CHECK_EQ(sk_socket_set_no_delay(bad, 1), invalid);
    CHECK_EQ(sk_socket_get_no_delay(bad), invalid);
    CHECK_EQ(sk_socket_set_keep_alive(bad, 1, 1, 1, 1, NULL), invalid);
    CHECK_EQ(sk_socket_get_keep_alive(bad, &a, &b, &c, &d), invalid);
    CHECK_EQ(sk_socket_set_buffer_sizes(bad, 0, 0, NULL), invalid);
    CHECK_EQ(sk_socket_get_buffer_sizes(bad, &a, &b), invalid);
    CHECK_EQ(sk_socket_accept_on_port(bad, 0, NULL), invalid);
    CHECK_EQ(sk_socket_accept_on_interface(bad, NULL, 0, NULL), invalid);
    CHECK_EQ(sk_socket_accept_on_unix_path(bad, "/tmp/x", NULL), invalid);
    CHECK_EQ(sk_socket_connect_to_host(bad, "127.0.0.1", 1, NULL, 1, NULL), invalid);
    CHECK_EQ(sk_socket_connect_to_address(bad, (struct sockaddr *)&storage, length, NULL, 1, NULL), invalid);
    CHECK_EQ(sk_socket_connect_to_unix_path(bad, "/tmp/x", 1, NULL), invalid);
    CHECK_EQ(sk_socket_read(bad, 0, -1, 0, NULL), invalid);
    CHECK_EQ(sk_socket_read_into(bad, buffer, sizeof buffer, 0, 0, -1, 0, NULL), invalid);
    CHECK_EQ(sk_socket_read_to_length(bad, 1, -1, 0, NULL), invalid);
    CHECK_EQ(sk_socket_read_to_length_into(bad, 1, buffer, sizeof buffer, 0, -1, 0, NULL), invalid);
    CHECK_EQ(sk_socket_read_to_data(bad, SK_LF, 1, 0, -1, 0, NULL), invalid);
    CHECK_EQ(sk_socket_read_to_data_into(bad, SK_LF, 1, buffer, sizeof buffer, 0, 0, -1, 0, NULL), invalid);
    CHECK_EQ(sk_socket_read_progress(bad, &tag, &size, &other), invalid);
    CHECK_EQ(sk_socket_write(bad, "x", 1, -1, 0, NULL), invalid);
    CHECK_EQ(sk_socket_write_no_copy(bad, "x", 1, NULL, NULL, -1, 0, NULL), invalid);
    CHECK_EQ(sk_socket_write_progress(bad, &tag, &size, &other), invalid);
    CHECK_EQ(sk_socket_get_queued_write_bytes(bad, &size), invalid);
    CHECK_EQ(sk_socket_disconnect(bad), invalid);
    CHECK_EQ(sk_socket_disconnect_after_reading(bad), invalid);
    CHECK_EQ(sk_socket_disconnect_after_writing(bad), invalid);
    CHECK_EQ(sk_socket_disconnect_after_reading_and_writing(bad), invalid);
    CHECK_EQ(sk_socket_is_connected(bad), invalid);
    CHECK_EQ(sk_socket_is_disconnected(bad), invalid);
    CHECK_EQ(sk_socket_is_accepting(bad), invalid);
    CHECK_EQ(sk_socket_is_ipv4(bad), invalid);
    CHECK_EQ(sk_socket_is_ipv6(bad), invalid);
    CHECK_EQ(sk_socket_is_unix(bad), invalid);
    CHECK_EQ(sk_socket_get_connected_host(bad, text, sizeof text), invalid);
    CHECK_EQ(sk_socket_get_connected_port(bad, &port), invalid);
    CHECK_EQ(sk_socket_get_connected_address(bad, (struct sockaddr *)&storage, &length), invalid);
    CHECK_EQ(sk_socket_get_connected_unix_path(bad, text, sizeof text), invalid);
    CHECK_EQ(sk_socket_get_local_host(bad, text, sizeof text), invalid);
    CHECK_EQ(sk_socket_get_local_port(bad, &port), invalid);
    CHECK_EQ(sk_socket_get_local_address(bad, (struct sockaddr *)&storage, &length), invalid);
    CHECK_EQ(sk_socket_perform(bad, noop_perform, NULL), invalid);
}

void test_invalid_handles_are_errors(void) {
    /* NULL and a value that was never a handle. */
    check_socket_functions_refuse(NULL);
    check_socket_functions_refuse((sk_socket_t *)(uintptr_t)0x1234560);

    /* A released handle, and a double release. */
    recorder_t recorder;
    recorder_init(&recorder);
    sk_socket_t *released = recorded_socket(&recorder, NULL);
    CHECK_EQ(sk_socket_release(released), SK_OK);
    check_socket_functions_refuse(released);

    /* Handles of another kind. */
    sk_callback_queue_t *queue = NULL;
    sk_loop_group_t *group = NULL;
    CHECK_EQ(sk_callback_queue_create_host(&queue, NULL), SK_OK);
    CHECK_EQ(sk_loop_group_create(1, &group, NULL), SK_OK);
    check_socket_functions_refuse((sk_socket_t *)queue);
    check_socket_functions_refuse((sk_socket_t *)group);
    CHECK_EQ(sk_callback_queue_fd((sk_callback_queue_t *)group), SK_ERR_INVALID_HANDLE);
    CHECK_EQ(sk_callback_queue_drain((sk_callback_queue_t *)released, 1), SK_ERR_INVALID_HANDLE);
    CHECK_EQ(sk_loop_group_loop_count((sk_loop_group_t *)queue), SK_ERR_INVALID_HANDLE);
    CHECK_EQ(sk_loop_group_release((sk_loop_group_t *)queue), SK_ERR_INVALID_HANDLE);
    CHECK_EQ(sk_callback_queue_release((sk_callback_queue_t *)group), SK_ERR_INVALID_HANDLE);

    /* Queue and group handles are checked where sockets take them. */
    sk_socket_delegate_t delegate = recorder_delegate();
    sk_socket_t *sock = NULL;
    sk_error_t error;
    CHECK_EQ(sk_socket_create(&delegate, sizeof delegate, &recorder, (sk_callback_queue_t *)group, NULL, &sock, &error),
             SK_ERR_INVALID_HANDLE);
    CHECK_EQ(sk_socket_create(&delegate, sizeof delegate, &recorder, NULL, (sk_loop_group_t *)queue, &sock, &error),
             SK_ERR_INVALID_HANDLE);
    CHECK(sock == NULL);

    CHECK_EQ(sk_callback_queue_release(queue), SK_OK);
    CHECK_EQ(sk_callback_queue_release(queue), SK_ERR_INVALID_HANDLE);
    CHECK_EQ(sk_callback_queue_fd(queue), SK_ERR_INVALID_HANDLE);
    CHECK_EQ(sk_loop_group_release(group), SK_OK);
    CHECK_EQ(sk_loop_group_release(group), SK_ERR_INVALID_HANDLE);
    CHECK_EQ(sk_loop_group_loop_count(group), SK_ERR_INVALID_HANDLE);
    recorder_destroy(&recorder);
}

void test_bad_arguments_are_errors(void) {
    const int bad = SK_ERR_BAD_PARAM;
    recorder_t recorder;
    recorder_init(&recorder);
    sk_error_t error;
    sk_socket_delegate_t delegate = recorder_delegate();
    sk_socket_t *sock = NULL;

    /* Creation. */
    CHECK_EQ(sk_socket_create(&delegate, sizeof delegate, &recorder, NULL, NULL, NULL, &error), bad);
    CHECK_EQ(error.code, bad);
    CHECK_EQ(sk_socket_create(&delegate, 0, &recorder, NULL, NULL, &sock, NULL), bad);
    CHECK_EQ(sk_socket_create(&delegate, 3, &recorder, NULL, NULL, &sock, NULL), bad);
    CHECK_EQ(sk_loop_group_create(0, NULL, NULL), bad);
    sk_loop_group_t *group = NULL;
    CHECK_EQ(sk_loop_group_create(0, &group, &error), bad);
    CHECK_EQ(sk_loop_group_create(100000, &group, &error), bad);
    CHECK_EQ(sk_callback_queue_create_host(NULL, &error), bad);
    CHECK_EQ(sk_callback_queue_create_serial("x", NULL, &error), bad);
    CHECK_EQ(sk_socket_create_from_fd(-1, &delegate, sizeof delegate, &recorder, NULL, NULL, &sock, &error), bad);
    CHECK_EQ(sk_socket_create_from_fd(0, &delegate, sizeof delegate, &recorder, NULL, NULL, NULL, &error), bad);

    /* A socket that is not connected: reads and writes are refused, not dropped. */
    sock = recorded_socket(&recorder, NULL);
    CHECK_EQ(sk_socket_read(sock, 0, -1, 0, &error), SK_ERR_BAD_CONFIG);
    CHECK(strstr(error.message, "not connected") != NULL);
    CHECK_EQ(sk_socket_write(sock, "x", 1, -1, 0, &error), SK_ERR_BAD_CONFIG);

    /* Connect and accept arguments. */
    CHECK_EQ(sk_socket_connect_to_host(sock, NULL, 80, NULL, 1, &error), bad);
    CHECK_EQ(sk_socket_connect_to_host(sock, "", 80, NULL, 1, &error), bad);
    CHECK_EQ(sk_socket_connect_to_host(sock, "127.0.0.1", 80, NULL, NAN, &error), bad);
    CHECK_EQ(sk_socket_connect_to_host(sock, "127.0.0.1", 80, "no-such-if0", 1, &error), bad);
    CHECK_EQ(sk_socket_connect_to_address(sock, NULL, 16, NULL, 1, &error), bad);
    struct sockaddr_in short_address = {0};
    short_address.sin_family = AF_INET;
    CHECK_EQ(sk_socket_connect_to_address(sock, (struct sockaddr *)&short_address, 3, NULL, 1, &error), bad);
    CHECK_EQ(sk_socket_connect_to_address(sock, (struct sockaddr *)&short_address, 100000, NULL, 1, &error), bad);
    CHECK_EQ(sk_socket_connect_to_unix_path(sock, NULL, 1, &error), bad);
    char long_path[300];
    memset(long_path, 'x', sizeof long_path - 1);
    long_path[0] = '/';
    long_path[sizeof long_path - 1] = 0;
    CHECK_EQ(sk_socket_connect_to_unix_path(sock, long_path, 1, &error), bad);
    CHECK_EQ(sk_socket_accept_on_unix_path(sock, long_path, &error), bad);
    CHECK_EQ(sk_socket_accept_on_unix_path(sock, NULL, &error), bad);
    CHECK_EQ(sk_socket_accept_on_interface(sock, "no-such-if0", 0, &error), bad);
    CHECK_EQ(sk_socket_is_disconnected(sock), 1);

    /* Read and write arguments, on a socket that is connecting (reads may be queued). */
    uint16_t port = 0;
    int raw = raw_listen("127.0.0.1", &port, 8);
    CHECK_EQ(sk_socket_connect_to_host(sock, "127.0.0.1", port, NULL, 5, &error), SK_OK);
    unsigned char buffer[8];
    CHECK_EQ(sk_socket_read(sock, SIZE_MAX, -1, 0, &error), bad);
    CHECK_EQ(sk_socket_read(sock, 0, NAN, 0, &error), bad);
    CHECK_EQ(sk_socket_read_to_length(sock, 0, -1, 0, &error), bad);
    CHECK_EQ(sk_socket_read_to_length(sock, SIZE_MAX, -1, 0, &error), bad);
    CHECK_EQ(sk_socket_read_into(sock, NULL, 8, 0, 0, -1, 0, &error), bad);
    CHECK_EQ(sk_socket_read_into(sock, buffer, 0, 0, 0, -1, 0, &error), bad);
    CHECK_EQ(sk_socket_read_into(sock, buffer, sizeof buffer, 8, 0, -1, 0, &error), bad);
    CHECK_EQ(sk_socket_read_into(sock, buffer, sizeof buffer, SIZE_MAX, 0, -1, 0, &error), bad);
    CHECK_EQ(sk_socket_read_to_length_into(sock, 6, buffer, sizeof buffer, 3, -1, 0, &error), bad);
    CHECK_EQ(sk_socket_read_to_data(sock, NULL, 1, 0, -1, 0, &error), bad);
    CHECK_EQ(sk_socket_read_to_data(sock, SK_CRLF, 0, 0, -1, 0, &error), bad);
    CHECK_EQ(sk_socket_read_to_data(sock, SK_CRLF, 2, 1, -1, 0, &error), bad);
    CHECK_EQ(sk_socket_read_to_data_into(sock, SK_CRLF, 2, buffer, sizeof buffer, 7, 0, -1, 0, &error), bad);
    CHECK_EQ(sk_socket_write(sock, NULL, 1, -1, 0, &error), bad);
    CHECK_EQ(sk_socket_write(sock, "x", 0, -1, 0, &error), bad);
    CHECK_EQ(sk_socket_write(sock, "x", SIZE_MAX, -1, 0, &error), bad);
    CHECK_EQ(sk_socket_write_no_copy(sock, "x", 0, NULL, NULL, -1, 0, &error), bad);
    CHECK_EQ(sk_socket_write(sock, "x", 1, NAN, 0, &error), bad);
    CHECK_EQ(sk_socket_perform(sock, NULL, NULL), bad);

    /* Out-pointers may be NULL (tcp_getters_follow_the_one_rule); a capacity passed by
     * pointer may not. */
    CHECK_EQ(sk_socket_get_connected_address(sock, NULL, NULL), bad);

    /* Option values. */
    CHECK_EQ(sk_socket_set_keep_alive(sock, 1, 0, 1, 1, &error), bad);
    CHECK_EQ(sk_socket_set_keep_alive(sock, 1, 1, 1, 1000, &error), bad);
    CHECK_EQ(sk_socket_set_buffer_sizes(sock, -1, 0, &error), bad);
    CHECK_EQ(sk_socket_set_write_watermarks(sock, 10, 5, &error), bad);
    CHECK_EQ(sk_socket_set_write_watermarks(sock, SIZE_MAX, SIZE_MAX, &error), bad);
    CHECK_EQ(sk_socket_set_maximum_read_length(sock, SIZE_MAX), bad);

    /* Utilities. */
    size_t count = 0;
    struct sockaddr_storage addresses[4];
    CHECK_EQ(sk_lookup_host(NULL, 80, addresses, 4, &count, &error), bad);
    CHECK_EQ(sk_lookup_host("localhost", 80, NULL, 4, &count, &error), bad);
    CHECK_EQ(sk_lookup_host("localhost", 0, addresses, 4, NULL, &error), SK_OK); /* out_count may be NULL */
    CHECK_EQ(sk_address_get_port(NULL, 16, NULL), bad);
    CHECK_EQ(sk_address_is_ipv4(NULL, 16), 0);

    /* None of that disturbed the connection attempt. */
    int server = raw_accept(raw);
    recorder_expect(&recorder, EVENT_CONNECT, 1);
    CHECK_EQ(sk_socket_is_connected(sock), 1);
    CHECK_EQ(sk_socket_release(sock), SK_OK);
    close(server);
    close(raw);
    recorder_destroy(&recorder);
}

void test_configuration_round_trips(void) {
    recorder_t recorder;
    recorder_init(&recorder);
    sk_socket_t *sock = recorded_socket(&recorder, NULL);
    void *userdata = NULL;
    CHECK_EQ(sk_socket_get_userdata(sock, &userdata), SK_OK);
    CHECK(userdata == &recorder);

    CHECK_EQ(sk_socket_is_ipv4_enabled(sock), 1);
    CHECK_EQ(sk_socket_is_ipv6_enabled(sock), 1);
    CHECK_EQ(sk_socket_is_ipv4_preferred_over_ipv6(sock), 1);
    CHECK_EQ(sk_socket_set_ipv4_enabled(sock, 0), SK_OK);
    CHECK_EQ(sk_socket_set_ipv6_enabled(sock, 0), SK_OK);
    CHECK_EQ(sk_socket_set_ipv4_preferred_over_ipv6(sock, 0), SK_OK);
    CHECK_EQ(sk_socket_is_ipv4_enabled(sock), 0);
    CHECK_EQ(sk_socket_is_ipv6_enabled(sock), 0);
    CHECK_EQ(sk_socket_is_ipv4_preferred_over_ipv6(sock), 0);
    sk_error_t error;
    CHECK_EQ(sk_socket_connect_to_host(sock, "localhost", 1, NULL, 1, &error), SK_ERR_BAD_CONFIG);
    CHECK_EQ(sk_socket_accept_on_port(sock, 0, &error), SK_ERR_BAD_CONFIG);

    double seconds = 0;
    CHECK_EQ(sk_socket_get_alternate_address_delay(sock, &seconds), SK_OK);
    CHECK(fabs(seconds - 0.3) < 1e-9);
    CHECK_EQ(sk_socket_set_alternate_address_delay(sock, 1.5), SK_OK);
    CHECK_EQ(sk_socket_get_alternate_address_delay(sock, &seconds), SK_OK);
    CHECK(fabs(seconds - 1.5) < 1e-9);
    CHECK_EQ(sk_socket_set_alternate_address_delay(sock, -4), SK_OK);
    CHECK_EQ(sk_socket_get_alternate_address_delay(sock, &seconds), SK_OK);
    CHECK(seconds == 0);

    CHECK_EQ(sk_socket_get_auto_disconnect_on_closed_read_stream(sock), 1);
    CHECK_EQ(sk_socket_set_auto_disconnect_on_closed_read_stream(sock, 0), SK_OK);
    CHECK_EQ(sk_socket_get_auto_disconnect_on_closed_read_stream(sock), 0);

    size_t length = 0, low = 0, high = 0;
    CHECK_EQ(sk_socket_get_maximum_read_length(sock, &length), SK_OK);
    CHECK_EQ(length, 16 * 1024 * 1024);
    CHECK_EQ(sk_socket_set_maximum_read_length(sock, 4096), SK_OK);
    CHECK_EQ(sk_socket_get_maximum_read_length(sock, &length), SK_OK);
    CHECK_EQ(length, 4096);

    CHECK_EQ(sk_socket_get_write_watermarks(sock, &low, &high), SK_OK);
    CHECK_EQ(low, 32 * 1024);
    CHECK_EQ(high, 64 * 1024);
    CHECK_EQ(sk_socket_set_write_watermarks(sock, 100, 200, &error), SK_OK);
    CHECK_EQ(error.code, SK_OK);
    CHECK_EQ(sk_socket_get_write_watermarks(sock, &low, &high), SK_OK);
    CHECK_EQ(low, 100);
    CHECK_EQ(high, 200);

    CHECK_EQ(sk_socket_get_no_delay(sock), 1); /* on by default */
    CHECK_EQ(sk_socket_set_no_delay(sock, 0), SK_OK);
    CHECK_EQ(sk_socket_get_no_delay(sock), 0);
    CHECK_EQ(sk_socket_set_no_delay(sock, 1), SK_OK);
    CHECK_EQ(sk_socket_get_no_delay(sock), 1);

    int enabled = -1, idle = -1, interval = -1, count = -1;
    CHECK_EQ(sk_socket_get_keep_alive(sock, &enabled, &idle, &interval, &count), SK_OK);
    CHECK_EQ(enabled, 0);
    CHECK_EQ(sk_socket_set_keep_alive(sock, 1, 60, 10, 5, &error), SK_OK);
    CHECK_EQ(sk_socket_get_keep_alive(sock, &enabled, &idle, &interval, &count), SK_OK);
    CHECK(enabled == 1 && idle == 60 && interval == 10 && count == 5);
    CHECK_EQ(sk_socket_set_keep_alive(sock, 0, 0, 0, 0, &error), SK_OK);
    CHECK_EQ(sk_socket_get_keep_alive(sock, &enabled, NULL, NULL, NULL), SK_OK);
    CHECK_EQ(enabled, 0);

    int send_size = -1, receive_size = -1;
    CHECK_EQ(sk_socket_get_buffer_sizes(sock, &send_size, &receive_size), SK_OK);
    CHECK(send_size == 0 && receive_size == 0);
    CHECK_EQ(sk_socket_set_buffer_sizes(sock, 65536, 32768, &error), SK_OK);
    CHECK_EQ(sk_socket_get_buffer_sizes(sock, &send_size, &receive_size), SK_OK);
    CHECK(send_size == 65536 && receive_size == 32768);

    CHECK_EQ(sk_loop_group_loop_count(NULL) >= 1, 1);
    CHECK_EQ(sk_socket_release(sock), SK_OK);
    recorder_destroy(&recorder);
}

void test_lookup_host_and_address_helpers(void) {
    struct sockaddr_storage addresses[4];
    size_t count = 0;
    sk_error_t error;
    CHECK_EQ(sk_lookup_host("localhost", 8080, addresses, 4, &count, &error), SK_OK);
    CHECK_EQ(count, 2);
    char host[INET6_ADDRSTRLEN];
    uint16_t port = 0;
    CHECK_EQ(sk_address_get_host((struct sockaddr *)&addresses[0], sizeof(struct sockaddr_in), host, sizeof host), 9);
    CHECK_STR(host, "127.0.0.1");
    CHECK_EQ(sk_address_get_port((struct sockaddr *)&addresses[0], sizeof(struct sockaddr_in), &port), SK_OK);
    CHECK_EQ(port, 8080);
    CHECK_EQ(sk_address_is_ipv4((struct sockaddr *)&addresses[0], sizeof(struct sockaddr_in)), 1);
    CHECK_EQ(sk_address_is_ipv6((struct sockaddr *)&addresses[0], sizeof(struct sockaddr_in)), 0);
    CHECK_EQ(sk_address_get_host((struct sockaddr *)&addresses[1], sizeof(struct sockaddr_in6), host, sizeof host), 3);
    CHECK_STR(host, "::1");
    CHECK_EQ(sk_address_is_ipv6((struct sockaddr *)&addresses[1], sizeof(struct sockaddr_in6)), 1);
    /* The wrong length for the family is refused. */
    CHECK_EQ(sk_address_is_ipv4((struct sockaddr *)&addresses[1], sizeof(struct sockaddr_in)), 0);
    CHECK_EQ(sk_address_get_host((struct sockaddr *)&addresses[0], 5, host, sizeof host), SK_ERR_BAD_PARAM);
    /* As snprintf: a cut text stays NUL-terminated, and the whole length comes back. */
    char tiny[4];
    CHECK_EQ(sk_address_get_host((struct sockaddr *)&addresses[0], sizeof(struct sockaddr_in), tiny, sizeof tiny), 9);
    CHECK_STR(tiny, "127");
    /* Capacity smaller than the result count. */
    CHECK_EQ(sk_lookup_host("localhost", 1, addresses, 1, &count, &error), SK_OK);
    CHECK_EQ(count, 1);
    CHECK_EQ(sk_lookup_host("::1", 1, addresses, 4, &count, &error), SK_OK);
    CHECK_EQ(count, 1);
    CHECK_EQ(sk_lookup_host("no-such-host.invalid", 1, addresses, 4, &count, &error), SK_ERR_RESOLUTION);
    CHECK_EQ(error.code, SK_ERR_RESOLUTION);
    CHECK(error.os_error != 0);
    CHECK(strlen(error.message) > 0);
}

/* Each entry of a lookup carries its length; the address helpers take an entry with its
 * own length or with sizeof(struct sockaddr_storage), as getnameinfo does. */
void test_lookup_results_carry_their_lengths(void) {
    sk_address_t entries[4];
    sk_error_t error;
    memset(entries, 0xAB, sizeof entries);
    CHECK_EQ(sk_lookup_host_addresses("localhost", 443, entries, 4, &error), 2);
    CHECK_EQ(error.code, SK_OK);
    CHECK_EQ(entries[0].address.ss_family, AF_INET);
    CHECK_EQ(entries[0].length, sizeof(struct sockaddr_in));
    CHECK_EQ(entries[1].address.ss_family, AF_INET6);
    CHECK_EQ(entries[1].length, sizeof(struct sockaddr_in6));
    static const char *const hosts[] = {"127.0.0.1", "::1"};
    for (int i = 0; i < 2; i++) {
        const struct sockaddr *address = (const struct sockaddr *)&entries[i].address;
        char host[INET6_ADDRSTRLEN];
        uint16_t port = 0;
        socklen_t lengths[] = {entries[i].length, sizeof(struct sockaddr_storage)};
        for (int j = 0; j < 2; j++) {
            CHECK_EQ(sk_address_get_host(address, lengths[j], host, sizeof host), (int)strlen(hosts[i]));
            CHECK_STR(host, hosts[i]);
            CHECK_EQ(sk_address_get_port(address, lengths[j], &port), SK_OK);
            CHECK_EQ(port, 443);
            CHECK_EQ(sk_address_is_ipv4(address, lengths[j]), i == 0);
            CHECK_EQ(sk_address_is_ipv6(address, lengths[j]), i == 1);
        }
        /* Shorter than the family's struct, or longer than a sockaddr_storage: refused. */
        CHECK_EQ(sk_address_get_host(address, entries[i].length - 1, host, sizeof host), SK_ERR_BAD_PARAM);
        CHECK_EQ(sk_address_get_port(address, sizeof(struct sockaddr_storage) + 1, &port), SK_ERR_BAD_PARAM);
        CHECK_EQ(sk_address_is_ipv4(address, entries[i].length - 1) + sk_address_is_ipv6(address, entries[i].length - 1), 0);
    }
    /* As snprintf: the count found, whatever fitted; NULL asks for the count only. */
    memset(entries, 0xAB, sizeof entries);
    CHECK_EQ(sk_lookup_host_addresses("localhost", 1, entries, 1, &error), 2);
    CHECK_EQ(entries[0].length, sizeof(struct sockaddr_in));
    CHECK_EQ(entries[1].address.ss_family, 0xABAB); /* not written */
    CHECK_EQ(sk_lookup_host_addresses("loopback", 1, NULL, 0, &error), 2);
    CHECK_EQ(sk_lookup_host_addresses("192.0.2.200", 8080, entries, 4, NULL), 1);
    CHECK_EQ(entries[0].length, sizeof(struct sockaddr_in));
    CHECK_EQ(sk_lookup_host_addresses("fd00::2", 65535, entries, 4, NULL), 1);
    CHECK_EQ(entries[0].length, sizeof(struct sockaddr_in6));
    char host[INET6_ADDRSTRLEN];
    CHECK_EQ(sk_address_get_host((struct sockaddr *)&entries[0].address, sizeof entries[0].address, host, sizeof host), 7);
    CHECK_STR(host, "fd00::2");
    /* Names under .invalid (RFC 6761) fail at once, without asking the nameserver (whose
     * answer, with none reachable, would be EAI_AGAIN after its retries). */
    const char *reserved[] = {"no-such-host.invalid", "INVALID", "a.b.Invalid."};
    for (size_t i = 0; i < sizeof reserved / sizeof reserved[0]; i++) {
        CHECK_EQ(sk_lookup_host_addresses(reserved[i], 1, entries, 4, &error), SK_ERR_RESOLUTION);
        CHECK_EQ(error.code, SK_ERR_RESOLUTION);
        CHECK_EQ(error.os_error, EAI_NONAME);
        CHECK(strstr(error.message, "RFC 6761") != NULL);
    }
    CHECK_EQ(sk_lookup_host_addresses(NULL, 1, entries, 4, &error), SK_ERR_BAD_PARAM);
    CHECK_EQ(sk_lookup_host_addresses("", 1, entries, 4, &error), SK_ERR_BAD_PARAM);
}

/* A lookup's sockaddr_storage, passed whole (sizeof(struct sockaddr_storage)), connects. */
void test_connect_to_an_address_given_with_the_storage_length(void) {
    uint16_t port = 0;
    int listener = raw_listen("127.0.0.1", &port, 8);
    struct sockaddr_storage addresses[2];
    size_t count = 0;
    sk_error_t error;
    CHECK_EQ(sk_lookup_host("127.0.0.1", port, addresses, 2, &count, &error), SK_OK);
    CHECK_EQ(count, 1);
    recorder_t recorder;
    recorder_init(&recorder);
    sk_socket_t *sock = recorded_socket(&recorder, NULL);
    CHECK_EQ(sk_socket_connect_to_address(sock, (struct sockaddr *)&addresses[0], sizeof addresses[0], NULL, 5, &error),
             SK_OK);
    int peer = raw_accept(listener);
    recorder_expect(&recorder, EVENT_CONNECT, 1);
    CHECK_STR(recorder_event(&recorder, EVENT_CONNECT, 0).text, "127.0.0.1");
    uint16_t connected_port = 0;
    CHECK_EQ(sk_socket_get_connected_port(sock, &connected_port), SK_OK);
    CHECK_EQ(connected_port, port);
    CHECK_EQ(sk_socket_release(sock), SK_OK);
    close(peer);
    close(listener);
    recorder_destroy(&recorder);
}
