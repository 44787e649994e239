/* SPDX-License-Identifier: MIT */
/* Reading and writing over loopback, and the callback contract around them. */
#include "test_support.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* A SocketKit client connected to a raw peer. */
typedef struct {
    recorder_t recorder;
    sk_socket_t *sock;
    int listener;
    int peer;
    uint16_t port;
} raw_pair_t;

static void raw_pair_open(raw_pair_t *pair, void (*configure)(sk_socket_t *sock)) {
    recorder_init(&pair->recorder);
    pair->port = 0;
    pair->listener = raw_listen("127.0.0.1", &pair->port, 8);
    pair->sock = recorded_socket(&pair->recorder, NULL);
    if (configure) configure(pair->sock);
    sk_error_t error;
    /* No timeout (negative): the connect just completes. */
    CHECK_EQ(sk_socket_connect_to_host(pair->sock, "127.0.0.1", pair->port, NULL, -1, &error), SK_OK);
    pair->peer = raw_accept(pair->listener);
    recorder_expect(&pair->recorder, EVENT_CONNECT, 1);
}

static void raw_pair_close(raw_pair_t *pair) {
    CHECK_EQ(sk_socket_release(pair->sock), SK_OK);
    close(pair->peer);
    close(pair->listener);
    recorder_destroy(&pair->recorder);
}

/* An echo server made of SocketKit sockets: every accepted connection echoes. */
static void echo_accept(recorder_t *recorder, sk_socket_t *listener, sk_socket_t *connection) {
    (void)recorder;
    (void)listener;
    CHECK_EQ(sk_socket_read(connection, 0, -1, 0, NULL), SK_OK);
}

static void echo_read(recorder_t *recorder, sk_socket_t *sock, const void *data, size_t length, long tag) {
    (void)recorder;
    (void)tag;
    sk_socket_write(sock, data, length, -1, 0, NULL);
    sk_socket_read(sock, 0, -1, 0, NULL);
}

void test_echo_with_every_read_variant(void) {
    recorder_t server;
    recorder_init(&server);
    server.on_accept = echo_accept;
    server.on_read = echo_read;
    uint16_t port = 0;
    sk_socket_t *listener = recorded_listener(&server, &port);

    recorder_t client;
    recorder_init(&client);
    sk_socket_t *sock = recorded_socket(&client, NULL);
    sk_error_t error;
    CHECK_EQ(sk_socket_connect_to_host(sock, "127.0.0.1", port, NULL, 10, &error), SK_OK);

    unsigned char into[64];
    memset(into, 0xEE, sizeof into);
    const char *message = "line one\r\nline two\nexactly12345tail-into!!available";
    CHECK_EQ(sk_socket_write(sock, message, strlen(message), 5, 100, &error), SK_OK);
    CHECK_EQ(sk_socket_read_to_data(sock, SK_CRLF, 2, 0, 5, 1, &error), SK_OK);           /* "line one\r\n" */
    CHECK_EQ(sk_socket_read_to_data(sock, SK_LF, 1, 64, 5, 2, &error), SK_OK);            /* "line two\n" */
    CHECK_EQ(sk_socket_read_to_length(sock, 12, 5, 3, &error), SK_OK);                   /* "exactly12345" */
    CHECK_EQ(sk_socket_read_to_length_into(sock, 4, into, sizeof into, 2, 5, 4, &error), SK_OK); /* "tail" at 2 */
    CHECK_EQ(sk_socket_read_to_data_into(sock, "!!", 2, into, sizeof into, 10, 0, 5, 5, &error), SK_OK); /* "-into!!" at 10 */
    CHECK_EQ(sk_socket_read_into(sock, into, sizeof into, 30, 4, 5, 6, &error), SK_OK);  /* "avai" at 30 */
    CHECK_EQ(sk_socket_read(sock, 0, 5, 7, &error), SK_OK);                              /* "lable" */

    recorder_expect(&client, EVENT_READ, 7);
    const char *expected[] = {"line one\r\n", "line two\n", "exactly12345", "tail", "-into!!", "avai"};
    for (size_t i = 0; i < 6; i++) {
        event_t event = recorder_event(&client, EVENT_READ, i);
        CHECK_EQ(event.tag, (long)i + 1);
        CHECK_EQ(event.length, strlen(expected[i]));
        CHECK_STR(event.text, expected[i]);
    }
    /* The last read returns what is available: all of the rest, as long as it arrived. */
    event_t last = recorder_event(&client, EVENT_READ, 6);
    CHECK_EQ(last.tag, 7);
    CHECK(last.length >= 1 && last.length <= 5);
    CHECK(memcmp(into + 2, "tail", 4) == 0);
    CHECK(memcmp(into + 10, "-into!!", 7) == 0);
    CHECK(memcmp(into + 30, "avai", 4) == 0);
    CHECK(into[0] == 0xEE && into[1] == 0xEE && into[6] == 0xEE && into[17] == 0xEE && into[34] == 0xEE);
    CHECK_EQ(recorder_event(&client, EVENT_WRITE, 0).tag, 100);
    CHECK_EQ(client.overlaps, 0);

    CHECK_EQ(sk_socket_release(sock), SK_OK);
    CHECK_EQ(sk_socket_release(listener), SK_OK);
    recorder_destroy(&client);
    recorder_destroy(&server);
}

void test_callbacks_arrive_in_order_and_end_with_one_disconnect(void) {
    raw_pair_t pair;
    raw_pair_open(&pair, NULL);
    for (long tag = 0; tag < 5; tag++) {
        CHECK_EQ(sk_socket_read_to_length(pair.sock, 3, 5, tag, NULL), SK_OK);
        CHECK_EQ(sk_socket_write(pair.sock, "abc", 3, 5, 10 + tag, NULL), SK_OK);
    }
    raw_send(pair.peer, "111222333444555", 15);
    recorder_expect(&pair.recorder, EVENT_READ, 5);
    recorder_expect(&pair.recorder, EVENT_WRITE, 5);
    CHECK_EQ(sk_socket_read_to_length(pair.sock, 100, -1, 99, NULL), SK_OK);
    CHECK_EQ(sk_socket_disconnect(pair.sock), SK_OK);
    CHECK_EQ(sk_socket_is_disconnected(pair.sock), 1);
    recorder_expect(&pair.recorder, EVENT_DISCONNECT, 1);
    CHECK_EQ(sk_socket_disconnect(pair.sock), SK_OK); /* nothing to do */
    CHECK(!recorder_wait(&pair.recorder, EVENT_DISCONNECT, 2, 0.2));

    size_t count = 0;
    event_t *events = recorder_events(&pair.recorder, &count);
    CHECK_EQ(events[0].kind, EVENT_CONNECT);
    CHECK_STR(events[0].text, "127.0.0.1");
    CHECK_EQ(events[0].length, pair.port);
    long next_read = 0, next_write = 10;
    for (size_t i = 1; i + 1 < count; i++) {
        if (events[i].kind == EVENT_READ) CHECK_EQ(events[i].tag, next_read++);
        else if (events[i].kind == EVENT_WRITE) CHECK_EQ(events[i].tag, next_write++);
        else CHECK(0);
    }
    CHECK_EQ(events[count - 1].kind, EVENT_DISCONNECT);
    CHECK_EQ(events[count - 1].error_code, 0);
    free(events);
    CHECK_EQ(pair.recorder.after_disconnect, 0);
    CHECK_EQ(pair.recorder.overlaps, 0);
    raw_pair_close(&pair);
}

void test_read_limits(void) {
    /* An available read with a maximum takes at most that much; the rest waits. */
    raw_pair_t pair;
    raw_pair_open(&pair, NULL);
    raw_send(pair.peer, "abcdefgh", 8);
    CHECK_EQ(sk_socket_read(pair.sock, 3, -1, 1, NULL), SK_OK);
    recorder_expect(&pair.recorder, EVENT_READ, 1);
    CHECK_EQ(recorder_event(&pair.recorder, EVENT_READ, 0).length, 3);
    CHECK_STR(recorder_event(&pair.recorder, EVENT_READ, 0).text, "abc");
    CHECK_EQ(sk_socket_read(pair.sock, 0, -1, 2, NULL), SK_OK);
    recorder_expect(&pair.recorder, EVENT_READ, 2);
    CHECK_STR(recorder_event(&pair.recorder, EVENT_READ, 1).text, "defgh");
    /* A separator past its maximum ends the connection with SK_ERR_READ_MAXED_OUT. */
    CHECK_EQ(sk_socket_read_to_data(pair.sock, SK_CRLF, 2, 6, -1, 3, NULL), SK_OK);
    raw_send(pair.peer, "1234567\r\n", 9);
    recorder_expect(&pair.recorder, EVENT_DISCONNECT, 1);
    CHECK_EQ(recorder_event(&pair.recorder, EVENT_DISCONNECT, 0).error_code, SK_ERR_READ_MAXED_OUT);
    /* A length above the socket's maximum read length is refused at once; at the limit it
     * is taken, and a read into the caller's buffer is bounded by the buffer alone. */
    raw_pair_t limited;
    raw_pair_open(&limited, NULL);
    CHECK_EQ(sk_socket_set_maximum_read_length(limited.sock, 100), SK_OK);
    sk_error_t error;
    CHECK_EQ(sk_socket_read_to_length(limited.sock, 101, -1, 1, &error), SK_ERR_BAD_PARAM);
    CHECK(strstr(error.message, "maximumReadLength") != NULL);
    CHECK_EQ(sk_socket_read_to_length(limited.sock, 100, -1, 2, &error), SK_OK);
    unsigned char room[200];
    CHECK_EQ(sk_socket_read_to_length_into(limited.sock, 150, room, sizeof room, 0, -1, 3, NULL), SK_OK);
    /* A maximum of 0 is refused (it used to become 1 and fail every separator read after
     * one byte); the limit stays as it was. */
    CHECK_EQ(sk_socket_set_maximum_read_length(limited.sock, 0), SK_ERR_BAD_PARAM);
    size_t limit = 0;
    CHECK_EQ(sk_socket_get_maximum_read_length(limited.sock, &limit), SK_OK);
    CHECK_EQ(limit, 100);
    CHECK_EQ(sk_socket_read_to_data(limited.sock, SK_LF, 1, 0, -1, 4, NULL), SK_OK);
    unsigned char payload[260];
    fill_pattern(payload, 250, 5);
    memcpy(payload + 250, "123456789\n", 10);
    for (size_t i = 0; i < 250; i++) if (payload[i] == '\n') payload[i] = 'n';
    raw_send(limited.peer, payload, sizeof payload);
    recorder_expect(&limited.recorder, EVENT_READ, 3);
    CHECK_EQ(recorder_event(&limited.recorder, EVENT_READ, 0).length, 100);
    CHECK_EQ(recorder_event(&limited.recorder, EVENT_READ, 1).length, 150);
    CHECK_EQ(memcmp(room, payload + 100, 150), 0);
    CHECK_EQ(recorder_event(&limited.recorder, EVENT_READ, 2).length, 10);
    CHECK_EQ(sk_socket_is_connected(limited.sock), 1);
    raw_pair_close(&limited);
    raw_pair_close(&pair);
}

/* A separator read into a caller's buffer with a maximum below the room left: within it,
 * delivered as usual; past it, SK_ERR_READ_MAXED_OUT with nothing written beyond it. */
void test_read_to_data_into_honours_an_explicit_maximum(void) {
    raw_pair_t pair;
    raw_pair_open(&pair, NULL);
    unsigned char buffer[32];
    memset(buffer, 0xEE, sizeof buffer);
    CHECK_EQ(sk_socket_read_to_data_into(pair.sock, SK_LF, 1, buffer, sizeof buffer, 2, 5, -1, 1, NULL), SK_OK);
    raw_send(pair.peer, "abc\n", 4);
    recorder_expect(&pair.recorder, EVENT_READ, 1);
    CHECK_EQ(recorder_event(&pair.recorder, EVENT_READ, 0).length, 4);
    CHECK(memcmp(buffer + 2, "abc\n", 4) == 0);
    CHECK_EQ(sk_socket_read_to_data_into(pair.sock, SK_LF, 1, buffer, sizeof buffer, 10, 5, -1, 2, NULL), SK_OK);
    raw_send(pair.peer, "0123456789\n", 11);
    recorder_expect(&pair.recorder, EVENT_DISCONNECT, 1);
    CHECK_EQ(recorder_event(&pair.recorder, EVENT_DISCONNECT, 0).error_code, SK_ERR_READ_MAXED_OUT);
    CHECK_EQ(recorder_count(&pair.recorder, EVENT_READ), 1);
    CHECK(memcmp(buffer + 10, "01234", 5) == 0);
    CHECK_EQ(buffer[15], 0xEE);
    raw_pair_close(&pair);
}

static int descriptor_option(sk_socket_t *sock, int level, int name) {
    int value = -1;
    socklen_t length = sizeof value;
    CHECK_EQ(getsockopt(socket_descriptors(sock, NULL).primary, level, name, &value, &length), 0);
    return value;
}

static void no_delay_and_keep_alive(sk_socket_t *sock) {
    CHECK_EQ(sk_socket_set_no_delay(sock, 1), SK_OK);
    CHECK_EQ(sk_socket_set_keep_alive(sock, 1, 30, 5, 3, NULL), SK_OK);
}

/* TCP options set before connecting are applied on connect; changed while connected, at
 * once (read back from the descriptor, not from the getters). */
void test_tcp_options_reach_the_descriptor(void) {
    raw_pair_t pair;
    raw_pair_open(&pair, no_delay_and_keep_alive);
    CHECK_EQ(descriptor_option(pair.sock, IPPROTO_TCP, TCP_NODELAY), 1);
    CHECK_EQ(descriptor_option(pair.sock, SOL_SOCKET, SO_KEEPALIVE), 1);
    CHECK_EQ(descriptor_option(pair.sock, IPPROTO_TCP, TCP_KEEPIDLE), 30);
    CHECK_EQ(descriptor_option(pair.sock, IPPROTO_TCP, TCP_KEEPINTVL), 5);
    CHECK_EQ(descriptor_option(pair.sock, IPPROTO_TCP, TCP_KEEPCNT), 3);
    CHECK_EQ(sk_socket_set_no_delay(pair.sock, 0), SK_OK);
    CHECK_EQ(sk_socket_set_keep_alive(pair.sock, 1, 77, 7, 2, NULL), SK_OK);
    CHECK_EQ(descriptor_option(pair.sock, IPPROTO_TCP, TCP_NODELAY), 0);
    CHECK_EQ(descriptor_option(pair.sock, IPPROTO_TCP, TCP_KEEPIDLE), 77);
    CHECK_EQ(descriptor_option(pair.sock, IPPROTO_TCP, TCP_KEEPINTVL), 7);
    CHECK_EQ(descriptor_option(pair.sock, IPPROTO_TCP, TCP_KEEPCNT), 2);
    CHECK_EQ(sk_socket_set_keep_alive(pair.sock, 0, 0, 0, 0, NULL), SK_OK);
    CHECK_EQ(descriptor_option(pair.sock, SOL_SOCKET, SO_KEEPALIVE), 0);
    raw_pair_close(&pair);
}

void test_reads_and_writes_queued_before_connect(void) {
    recorder_t recorder;
    recorder_init(&recorder);
    uint16_t port = 0;
    int listener = raw_listen("127.0.0.1", &port, 8);
    sk_socket_t *sock = recorded_socket(&recorder, NULL);
    CHECK_EQ(sk_socket_read(sock, 0, -1, 0, NULL), SK_ERR_BAD_CONFIG);
    CHECK_EQ(sk_socket_connect_to_host(sock, "127.0.0.1", port, NULL, 5, NULL), SK_OK);
    CHECK_EQ(sk_socket_is_disconnected(sock), 0);
    CHECK_EQ(sk_socket_write(sock, "ping 1\n", 7, 5, 1, NULL), SK_OK);
    CHECK_EQ(sk_socket_read_to_data(sock, SK_LF, 1, 0, 5, 1, NULL), SK_OK);
    CHECK_EQ(sk_socket_write(sock, "ping 2\n", 7, 5, 2, NULL), SK_OK);
    CHECK_EQ(sk_socket_read_to_data(sock, SK_LF, 1, 0, 5, 2, NULL), SK_OK);
    int peer = raw_accept(listener);
    char request[14];
    raw_receive(peer, request, sizeof request);
    CHECK(memcmp(request, "ping 1\nping 2\n", 14) == 0);
    raw_send(peer, "pong 1\npong 2\n", 14);
    recorder_expect(&recorder, EVENT_READ, 2);
    CHECK_EQ(recorder_event(&recorder, EVENT_READ, 0).tag, 1);
    CHECK_STR(recorder_event(&recorder, EVENT_READ, 1).text, "pong 2\n");
    size_t count = 0;
    event_t *events = recorder_events(&recorder, &count);
    CHECK_EQ(events[0].kind, EVENT_CONNECT);
    free(events);
    CHECK_EQ(sk_socket_release(sock), SK_OK);
    close(peer);
    close(listener);
    recorder_destroy(&recorder);
}

typedef struct {
    pthread_mutex_t lock;
    pthread_cond_t changed;
    int releases;
    void *last_data;
} release_counter_t;

static void count_release(void *data, void *context) {
    release_counter_t *counter = context;
    pthread_mutex_lock(&counter->lock);
    counter->releases++;
    counter->last_data = data;
    pthread_cond_broadcast(&counter->changed);
    pthread_mutex_unlock(&counter->lock);
}

static int releases(release_counter_t *counter) {
    pthread_mutex_lock(&counter->lock);
    int value = counter->releases;
    pthread_mutex_unlock(&counter->lock);
    return value;
}

/* Waits (bounded) until `count` releases happened. */
static void expect_releases(release_counter_t *counter, int count) {
    struct timespec limit;
    clock_gettime(CLOCK_REALTIME, &limit);
    limit.tv_sec += (time_t)WAIT_SECONDS;
    pthread_mutex_lock(&counter->lock);
    while (counter->releases < count) {
        if (pthread_cond_timedwait(&counter->changed, &counter->lock, &limit) != 0) break;
    }
    int have = counter->releases;
    pthread_mutex_unlock(&counter->lock);
    CHECK_EQ(have, count);
}

void test_write_no_copy_releases_exactly_once(void) {
    raw_pair_t pair;
    raw_pair_open(&pair, NULL);
    release_counter_t counter = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, NULL};
    static char message[] = "borrowed bytes";
    CHECK_EQ(sk_socket_write_no_copy(pair.sock, message, strlen(message), count_release, &counter, 5, 1, NULL), SK_OK);
    char received[14];
    raw_receive(pair.peer, received, sizeof received);
    CHECK(memcmp(received, message, 14) == 0);
    recorder_expect(&pair.recorder, EVENT_WRITE, 1);
    /* The release runs once the bytes are no longer needed. */
    expect_releases(&counter, 1);
    CHECK(counter.last_data == message);

    /* Bytes still queued when the socket disconnects are released too, once. */
    size_t big_length = 64 * 1024 * 1024;
    unsigned char *big = malloc(big_length);
    CHECK(big != NULL);
    fill_pattern(big, big_length, 1);
    CHECK_EQ(sk_socket_write_no_copy(pair.sock, big, big_length, count_release, &counter, -1, 2, NULL), SK_OK);
    CHECK_EQ(sk_socket_disconnect(pair.sock), SK_OK);
    recorder_expect(&pair.recorder, EVENT_DISCONNECT, 1);
    expect_releases(&counter, 2);
    CHECK(counter.last_data == big);
    free(big);

    /* A refused write is not released: the bytes stay the caller's. */
    CHECK_EQ(sk_socket_write_no_copy(pair.sock, message, 3, count_release, &counter, -1, 3, NULL), SK_ERR_BAD_CONFIG);
    CHECK_EQ(releases(&counter), 2);
    raw_pair_close(&pair);
}

void test_progress_and_queued_bytes(void) {
    raw_pair_t pair;
    raw_pair_open(&pair, NULL);
    long tag = -1;
    size_t done = 99, total = 99, queued = 99;
    CHECK_EQ(sk_socket_read_progress(pair.sock, &tag, &done, &total), 0);
    CHECK_EQ(sk_socket_write_progress(pair.sock, &tag, &done, &total), 0);
    CHECK_EQ(sk_socket_read_to_length(pair.sock, 100, -1, 42, NULL), SK_OK);
    raw_send(pair.peer, "0123456789", 10);
    recorder_expect(&pair.recorder, EVENT_READ_PARTIAL, 1);
    CHECK_EQ(sk_socket_read_progress(pair.sock, &tag, &done, &total), 1);
    CHECK(tag == 42 && done == 10 && total == 100);
    CHECK_EQ(sk_socket_read_progress(pair.sock, NULL, NULL, NULL), 1);

    size_t length = 32 * 1024 * 1024;
    unsigned char *data = malloc(length);
    CHECK(data != NULL);
    fill_pattern(data, length, 7);
    CHECK_EQ(sk_socket_write(pair.sock, data, length, -1, 77, NULL), SK_OK);
    recorder_expect(&pair.recorder, EVENT_WRITE_PARTIAL, 1);
    CHECK_EQ(sk_socket_write_progress(pair.sock, &tag, &done, &total), 1);
    CHECK(tag == 77 && done > 0 && done < length && total == length);
    CHECK_EQ(sk_socket_get_queued_write_bytes(pair.sock, &queued), SK_OK);
    CHECK(queued > 0 && queued <= length - done);
    unsigned char *received = malloc(length);
    CHECK(received != NULL);
    raw_receive(pair.peer, received, length);
    CHECK(memcmp(received, data, length) == 0);
    recorder_expect(&pair.recorder, EVENT_WRITE, 1);
    CHECK_EQ(sk_socket_get_queued_write_bytes(pair.sock, &queued), SK_OK);
    CHECK_EQ(queued, 0);
    free(data);
    free(received);
    raw_pair_close(&pair);
}

/* A write from the socket's own callback goes to the kernel at once; the part the kernel
 * does not take is copied, so the caller may scribble over and free its buffer as soon as
 * sk_socket_write returns. */
enum { CALLBACK_WRITE_LENGTH = 16 * 1024 * 1024 };

static void write_then_scribble(recorder_t *recorder, sk_socket_t *sock, const void *data, size_t length, long tag) {
    (void)recorder;
    (void)data;
    (void)length;
    (void)tag;
    unsigned char *buffer = malloc(CALLBACK_WRITE_LENGTH);
    CHECK(buffer != NULL);
    fill_pattern(buffer, CALLBACK_WRITE_LENGTH, 11);
    CHECK_EQ(sk_socket_write(sock, buffer, CALLBACK_WRITE_LENGTH, -1, 5, NULL), SK_OK);
    memset(buffer, 0, CALLBACK_WRITE_LENGTH);
    free(buffer);
}

void test_write_from_a_callback_copies_what_the_kernel_did_not_take(void) {
    raw_pair_t pair;
    raw_pair_open(&pair, NULL);
    pair.recorder.on_read = write_then_scribble;
    CHECK_EQ(sk_socket_read_to_length(pair.sock, 1, -1, 1, NULL), SK_OK);
    raw_send(pair.peer, "x", 1);
    unsigned char *expected = malloc(CALLBACK_WRITE_LENGTH);
    unsigned char *received = malloc(CALLBACK_WRITE_LENGTH);
    CHECK(expected != NULL && received != NULL);
    fill_pattern(expected, CALLBACK_WRITE_LENGTH, 11);
    raw_receive(pair.peer, received, CALLBACK_WRITE_LENGTH);
    CHECK(memcmp(received, expected, CALLBACK_WRITE_LENGTH) == 0);
    recorder_expect(&pair.recorder, EVENT_WRITE, 1);
    CHECK_EQ(recorder_event(&pair.recorder, EVENT_WRITE, 0).tag, 5);
    size_t queued = 99;
    CHECK_EQ(sk_socket_get_queued_write_bytes(pair.sock, &queued), SK_OK);
    CHECK_EQ(queued, 0);
    free(expected);
    free(received);
    raw_pair_close(&pair);
}

/* The same for a no-copy write: sent at once from the callback, a small one is released
 * before sk_socket_write_no_copy returns; of a large one only the part the kernel did not
 * take stays borrowed, released once written. */
static release_counter_t callback_releases = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, NULL};
static unsigned char *callback_lent;
static int released_before_return[2] = {-1, -1};

static void write_no_copy_twice(recorder_t *recorder, sk_socket_t *sock, const void *data, size_t length, long tag) {
    (void)recorder;
    (void)data;
    (void)length;
    (void)tag;
    static char small[] = "at once";
    CHECK_EQ(sk_socket_write_no_copy(sock, small, 7, count_release, &callback_releases, -1, 6, NULL), SK_OK);
    released_before_return[0] = releases(&callback_releases);
    CHECK_EQ(sk_socket_write_no_copy(sock, callback_lent, CALLBACK_WRITE_LENGTH, count_release, &callback_releases,
                                     -1, 7, NULL),
             SK_OK);
    released_before_return[1] = releases(&callback_releases);
}

void test_no_copy_write_from_a_callback_goes_out_at_once_and_lends_only_the_rest(void) {
    raw_pair_t pair;
    raw_pair_open(&pair, NULL);
    callback_lent = malloc(CALLBACK_WRITE_LENGTH);
    unsigned char *received = malloc(7 + CALLBACK_WRITE_LENGTH);
    CHECK(callback_lent != NULL && received != NULL);
    fill_pattern(callback_lent, CALLBACK_WRITE_LENGTH, 13);
    pair.recorder.on_read = write_no_copy_twice;
    CHECK_EQ(sk_socket_read_to_length(pair.sock, 1, -1, 1, NULL), SK_OK);
    raw_send(pair.peer, "x", 1);
    raw_receive(pair.peer, received, 7 + CALLBACK_WRITE_LENGTH);
    CHECK(memcmp(received, "at once", 7) == 0);
    CHECK(memcmp(received + 7, callback_lent, CALLBACK_WRITE_LENGTH) == 0);
    recorder_expect(&pair.recorder, EVENT_WRITE, 2);
    CHECK_EQ(recorder_event(&pair.recorder, EVENT_WRITE, 0).tag, 6);
    CHECK_EQ(recorder_event(&pair.recorder, EVENT_WRITE, 1).tag, 7);
    expect_releases(&callback_releases, 2);
    CHECK_EQ(released_before_return[0], 1); /* the kernel took the small write whole */
    CHECK_EQ(released_before_return[1], 1); /* 16 MiB did not fit: the rest stayed lent */
    CHECK(callback_releases.last_data == callback_lent);
    free(callback_lent);
    free(received);
    raw_pair_close(&pair);
}

void test_disconnect_after_writing_delivers_everything(void) {
    raw_pair_t pair;
    raw_pair_open(&pair, NULL);
    size_t length = 8 * 1024 * 1024;
    unsigned char *data = malloc(length);
    unsigned char *received = malloc(length + 1);
    CHECK(data != NULL && received != NULL);
    fill_pattern(data, length, 3);
    size_t offset = 0;
    long tag = 0;
    size_t sizes[] = {1, 4095, 65536, 1000003, 17};
    while (offset < length) {
        size_t chunk = sizes[tag % 5];
        if (chunk > length - offset) chunk = length - offset;
        CHECK_EQ(sk_socket_write(pair.sock, data + offset, chunk, -1, tag++, NULL), SK_OK);
        offset += chunk;
    }
    CHECK_EQ(sk_socket_disconnect_after_writing(pair.sock), SK_OK);
    CHECK_EQ(sk_socket_write(pair.sock, "x", 1, -1, 0, NULL), SK_ERR_BAD_CONFIG);
    size_t got = raw_receive_until_eof(pair.peer, received, length + 1);
    CHECK_EQ(got, length);
    CHECK(memcmp(received, data, length) == 0);
    recorder_expect(&pair.recorder, EVENT_DISCONNECT, 1);
    CHECK_EQ(recorder_event(&pair.recorder, EVENT_DISCONNECT, 0).error_code, 0);
    CHECK_EQ(recorder_count(&pair.recorder, EVENT_WRITE), (size_t)tag);
    free(data);
    free(received);
    raw_pair_close(&pair);
}

void test_disconnect_after_reading_waits_for_reads(void) {
    raw_pair_t pair;
    raw_pair_open(&pair, NULL);
    CHECK_EQ(sk_socket_read_to_data(pair.sock, SK_LF, 1, 0, -1, 1, NULL), SK_OK);
    CHECK_EQ(sk_socket_read_to_data(pair.sock, SK_LF, 1, 0, -1, 2, NULL), SK_OK);
    CHECK_EQ(sk_socket_disconnect_after_reading(pair.sock), SK_OK);
    CHECK_EQ(sk_socket_read(pair.sock, 0, -1, 3, NULL), SK_ERR_BAD_CONFIG);
    CHECK(!recorder_wait(&pair.recorder, EVENT_DISCONNECT, 1, 0.2));
    raw_send(pair.peer, "a\nb\n", 4);
    recorder_expect(&pair.recorder, EVENT_DISCONNECT, 1);
    CHECK_EQ(recorder_count(&pair.recorder, EVENT_READ), 2);
    char nothing[4];
    CHECK_EQ(raw_receive_until_eof(pair.peer, nothing, sizeof nothing), 0);

    /* And both: the write and the read must finish first. */
    raw_pair_t both;
    raw_pair_open(&both, NULL);
    CHECK_EQ(sk_socket_read_to_length(both.sock, 2, -1, 1, NULL), SK_OK);
    CHECK_EQ(sk_socket_write(both.sock, "reply", 5, -1, 2, NULL), SK_OK);
    CHECK_EQ(sk_socket_disconnect_after_reading_and_writing(both.sock), SK_OK);
    char reply[5];
    raw_receive(both.peer, reply, 5);
    CHECK(!recorder_wait(&both.recorder, EVENT_DISCONNECT, 1, 0.2));
    raw_send(both.peer, "ok", 2);
    recorder_expect(&both.recorder, EVENT_DISCONNECT, 1);
    CHECK_EQ(recorder_event(&both.recorder, EVENT_DISCONNECT, 0).error_code, 0);
    raw_pair_close(&both);
    raw_pair_close(&pair);
}

void test_read_timeout_extends_then_fails(void) {
    raw_pair_t pair;
    raw_pair_open(&pair, NULL);
    pair.recorder.read_extensions[0] = 0.1;
    pair.recorder.read_extension_count = 1;
    CHECK_EQ(sk_socket_read_to_length(pair.sock, 10, 0.1, 5, NULL), SK_OK);
    raw_send(pair.peer, "abc", 3);
    recorder_expect(&pair.recorder, EVENT_DISCONNECT, 1);
    CHECK_EQ(recorder_count(&pair.recorder, EVENT_READ_TIMEOUT), 2);
    event_t first = recorder_event(&pair.recorder, EVENT_READ_TIMEOUT, 0);
    event_t second = recorder_event(&pair.recorder, EVENT_READ_TIMEOUT, 1);
    CHECK(first.tag == 5 && first.elapsed > 0.09 && first.elapsed < 0.11);
    CHECK(second.elapsed > 0.19 && second.elapsed < 0.21);
    CHECK_EQ(second.length, 3);
    event_t end = recorder_event(&pair.recorder, EVENT_DISCONNECT, 0);
    CHECK_EQ(end.error_code, SK_ERR_READ_TIMEOUT);
    CHECK_EQ(recorder_count(&pair.recorder, EVENT_READ), 0);

    /* A zero timeout fails at once without data. */
    raw_pair_t zero;
    raw_pair_open(&zero, NULL);
    CHECK_EQ(sk_socket_read(zero.sock, 0, 0, 1, NULL), SK_OK);
    recorder_expect(&zero.recorder, EVENT_DISCONNECT, 1);
    CHECK_EQ(recorder_event(&zero.recorder, EVENT_DISCONNECT, 0).error_code, SK_ERR_READ_TIMEOUT);
    raw_pair_close(&zero);

    /* Write timeouts: a peer that never reads. */
    raw_pair_t stalled;
    raw_pair_open(&stalled, NULL);
    size_t length = 64 * 1024 * 1024;
    unsigned char *data = calloc(1, length);
    CHECK(data != NULL);
    CHECK_EQ(sk_socket_write(stalled.sock, data, length, 0.3, 9, NULL), SK_OK);
    recorder_expect(&stalled.recorder, EVENT_DISCONNECT, 1);
    CHECK_EQ(recorder_event(&stalled.recorder, EVENT_WRITE_TIMEOUT, 0).tag, 9);
    CHECK_EQ(recorder_event(&stalled.recorder, EVENT_DISCONNECT, 0).error_code, SK_ERR_WRITE_TIMEOUT);
    free(data);
    raw_pair_close(&stalled);
    raw_pair_close(&pair);
}

void test_watermarks_follow_a_slow_peer(void) {
    raw_pair_t pair;
    raw_pair_open(&pair, NULL);
    CHECK_EQ(sk_socket_set_write_watermarks(pair.sock, 64 * 1024, 1024 * 1024, NULL), SK_OK);
    size_t chunk = 256 * 1024;
    unsigned char *data = calloc(1, chunk);
    CHECK(data != NULL);
    size_t written = 0;
    for (int i = 0; i < 400 && recorder_count(&pair.recorder, EVENT_HIGH_WATERMARK) == 0; i++) {
        CHECK_EQ(sk_socket_write(pair.sock, data, chunk, -1, i, NULL), SK_OK);
        written += chunk;
        recorder_wait(&pair.recorder, EVENT_HIGH_WATERMARK, 1, 0.005);
    }
    recorder_expect(&pair.recorder, EVENT_HIGH_WATERMARK, 1);
    CHECK(recorder_event(&pair.recorder, EVENT_HIGH_WATERMARK, 0).length >= 1024 * 1024);
    CHECK_EQ(recorder_count(&pair.recorder, EVENT_LOW_WATERMARK), 0);
    unsigned char *sink = malloc(written);
    CHECK(sink != NULL);
    raw_receive(pair.peer, sink, written);
    recorder_expect(&pair.recorder, EVENT_LOW_WATERMARK, 1);
    CHECK(recorder_event(&pair.recorder, EVENT_LOW_WATERMARK, 0).length <= 64 * 1024);
    free(sink);
    free(data);
    raw_pair_close(&pair);
}

static void half_duplex(sk_socket_t *sock) {
    CHECK_EQ(sk_socket_set_auto_disconnect_on_closed_read_stream(sock, 0), SK_OK);
}

void test_half_close_keeps_writing_open(void) {
    raw_pair_t pair;
    raw_pair_open(&pair, half_duplex);
    raw_send(pair.peer, "last", 4);
    shutdown(pair.peer, SHUT_WR);
    CHECK_EQ(sk_socket_read_to_length(pair.sock, 4, -1, 1, NULL), SK_OK);
    CHECK_EQ(sk_socket_read(pair.sock, 0, -1, 2, NULL), SK_OK);
    recorder_expect(&pair.recorder, EVENT_CLOSE_READ_STREAM, 1);
    CHECK_EQ(sk_socket_is_connected(pair.sock), 1);
    CHECK_EQ(sk_socket_write(pair.sock, "bye", 3, -1, 3, NULL), SK_OK);
    char reply[3];
    raw_receive(pair.peer, reply, 3);
    CHECK(memcmp(reply, "bye", 3) == 0);
    CHECK_EQ(sk_socket_disconnect_after_writing(pair.sock), SK_OK);
    recorder_expect(&pair.recorder, EVENT_DISCONNECT, 1);
    CHECK_EQ(recorder_count(&pair.recorder, EVENT_CLOSE_READ_STREAM), 1);

    /* With auto-disconnect (the default) the same close ends the connection (at once: no
     * read is queued and nothing is unread). */
    raw_pair_t automatic;
    raw_pair_open(&automatic, NULL);
    shutdown(automatic.peer, SHUT_WR);
    recorder_expect(&automatic.recorder, EVENT_DISCONNECT, 1);
    CHECK_EQ(recorder_event(&automatic.recorder, EVENT_DISCONNECT, 0).error_code, SK_ERR_CLOSED);
    raw_pair_close(&automatic);
    raw_pair_close(&pair);
}

void test_peer_reset_is_an_error_not_a_signal(void) {
    /* SIGPIPE keeps its default action (terminate): the test only survives if SocketKit
     * never raises it. */
    raw_pair_t pair;
    raw_pair_open(&pair, NULL);
    size_t length = 32 * 1024 * 1024;
    unsigned char *data = calloc(1, length);
    CHECK(data != NULL);
    CHECK_EQ(sk_socket_write(pair.sock, data, length, -1, 1, NULL), SK_OK);
    recorder_expect(&pair.recorder, EVENT_WRITE_PARTIAL, 1);
    struct linger reset = {1, 0};
    setsockopt(pair.peer, SOL_SOCKET, SO_LINGER, &reset, sizeof reset);
    close(pair.peer);
    pair.peer = -1;
    recorder_expect(&pair.recorder, EVENT_DISCONNECT, 1);
    event_t end = recorder_event(&pair.recorder, EVENT_DISCONNECT, 0);
    CHECK_EQ(end.error_code, SK_ERR_SYSTEM);
    CHECK(end.os_error == ECONNRESET || end.os_error == EPIPE);
    free(data);
    raw_pair_close(&pair);
}

/* The end of the peer's stream, a FIN or a reset, is read like data: what arrived before it
 * is delivered first, and an idle socket with nothing unread reports it at once. */
void test_peer_close_on_an_idle_socket_is_reported_at_once(void) {
    raw_pair_t pair;
    raw_pair_open(&pair, NULL);
    shutdown(pair.peer, SHUT_WR); /* no read is queued */
    recorder_expect(&pair.recorder, EVENT_DISCONNECT, 1);
    CHECK_EQ(recorder_event(&pair.recorder, EVENT_DISCONNECT, 0).error_code, SK_ERR_CLOSED);
    CHECK_EQ(recorder_count(&pair.recorder, EVENT_READ), 0);
    raw_pair_close(&pair);

    /* Without auto-disconnect: did_close_read_stream at once, and writing goes on. */
    raw_pair_t half;
    raw_pair_open(&half, half_duplex);
    shutdown(half.peer, SHUT_WR);
    recorder_expect(&half.recorder, EVENT_CLOSE_READ_STREAM, 1);
    CHECK_EQ(sk_socket_is_connected(half.sock), 1);
    CHECK_EQ(sk_socket_write(half.sock, "still here", 10, -1, 1, NULL), SK_OK);
    char reply[10];
    raw_receive(half.peer, reply, sizeof reply);
    CHECK(memcmp(reply, "still here", sizeof reply) == 0);
    CHECK_EQ(recorder_count(&half.recorder, EVENT_DISCONNECT), 0);
    raw_pair_close(&half);
}

void test_bytes_before_a_peer_close_are_read_before_it_is_reported(void) {
    raw_pair_t pair;
    raw_pair_open(&pair, NULL);
    raw_send(pair.peer, "last words", 10);
    shutdown(pair.peer, SHUT_WR);
    /* Unread bytes hold the report back (they are never dropped)... */
    CHECK_EQ(recorder_wait(&pair.recorder, EVENT_DISCONNECT, 1, 0.3), 0);
    /* ...until reads have taken them: then the close, with no further read queued. */
    CHECK_EQ(sk_socket_read_to_length(pair.sock, 4, -1, 1, NULL), SK_OK);
    CHECK_EQ(sk_socket_read_to_length(pair.sock, 6, -1, 2, NULL), SK_OK);
    recorder_expect(&pair.recorder, EVENT_DISCONNECT, 1);
    CHECK_EQ(recorder_event(&pair.recorder, EVENT_DISCONNECT, 0).error_code, SK_ERR_CLOSED);
    CHECK_EQ(pair.recorder.byte_count, 10);
    CHECK(memcmp(pair.recorder.bytes, "last words", 10) == 0);
    raw_pair_close(&pair);
}

static void reset_now(int fd) {
    struct linger reset = {1, 0};
    CHECK_EQ(setsockopt(fd, SOL_SOCKET, SO_LINGER, &reset, sizeof reset), 0);
    close(fd);
}

/* The peer sends `data` and resets while the loop is held (`then`, if set, runs on the
 * loop once the reset is there); the read queued for `data` gets it, then the reset ends
 * the connection. */
static void expect_read_then_reset(const char *data, size_t length, void (*then)(loop_hold_t *hold)) {
    raw_pair_t pair;
    raw_pair_open(&pair, NULL);
    CHECK_EQ(sk_socket_read_to_length(pair.sock, length, -1, 1, NULL), SK_OK);
    /* The data and the reset reach the loop in one readiness event. */
    loop_hold_t hold = {.until_hang_up = 1, .then = then, .context = pair.sock};
    loop_hold_begin(&hold, pair.sock);
    raw_send(pair.peer, data, length);
    reset_now(pair.peer);
    pair.peer = -1;
    loop_hold_end(&hold);
    recorder_expect(&pair.recorder, EVENT_DISCONNECT, 1);
    CHECK_EQ(recorder_count(&pair.recorder, EVENT_READ), 1);
    CHECK(memcmp(pair.recorder.bytes, data, length) == 0);
    event_t end = recorder_event(&pair.recorder, EVENT_DISCONNECT, 0);
    CHECK_EQ(end.error_code, SK_ERR_SYSTEM);
    /* A send that met the reset first may have taken ECONNRESET: EPIPE after it. */
    CHECK(end.os_error == ECONNRESET || (then != NULL && end.os_error == EPIPE));
    raw_pair_close(&pair);
}

void test_bytes_before_a_reset_are_delivered_before_the_error(void) {
    expect_read_then_reset("0123456789", 10, NULL);
}

/* On the loop, once the reset is there and before the loop has looked at the socket. */
static void write_into_the_reset(loop_hold_t *hold) {
    CHECK_EQ(sk_socket_write((sk_socket_t *)hold->context, "pong", 4, -1, 9, NULL), SK_OK);
}

void test_a_write_that_meets_a_reset_first_still_lets_the_reads_have_their_bytes(void) {
    expect_read_then_reset("ping", 4, write_into_the_reset);
}

/* No read queued (a server that stopped reading, waiting for its writes to drain): a send
 * that fails because the peer reset ends the session, unread bytes and all, where it waited
 * for a read for good (the hostile-peer report of issue 34). */
void test_a_failed_send_ends_an_idle_session_with_bytes_still_unread(void) {
    raw_pair_t pair;
    raw_pair_open(&pair, NULL);
    loop_hold_t hold = {.until_hang_up = 1, .then = write_into_the_reset, .context = pair.sock};
    loop_hold_begin(&hold, pair.sock);
    raw_send(pair.peer, "never read", 10);
    reset_now(pair.peer);
    pair.peer = -1;
    loop_hold_end(&hold);
    recorder_expect(&pair.recorder, EVENT_DISCONNECT, 1);
    CHECK_EQ(recorder_count(&pair.recorder, EVENT_READ), 0);
    event_t end = recorder_event(&pair.recorder, EVENT_DISCONNECT, 0);
    CHECK_EQ(end.error_code, SK_ERR_SYSTEM);
    CHECK(end.os_error == ECONNRESET || end.os_error == EPIPE);
    raw_pair_close(&pair);
}

/* A peer that never reads: past the socket's maximum of queued bytes, a write fails with
 * SK_ERR_WRITE_QUEUE_FULL and queues nothing, so the memory held stays bounded. */
void test_write_queue_maximum_refuses_what_would_pass_it(void) {
    raw_pair_t pair;
    raw_pair_open(&pair, NULL);
    size_t maximum = 0;
    CHECK_EQ(sk_socket_get_maximum_queued_write_bytes(pair.sock, &maximum), SK_OK);
    CHECK_EQ(maximum, 64 * 1024 * 1024); /* on by default */
    CHECK_EQ(sk_socket_get_maximum_queued_write_bytes(pair.sock, NULL), SK_OK); /* the one getter rule */
    CHECK_EQ(sk_socket_set_maximum_queued_write_bytes(pair.sock, (size_t)-1), SK_ERR_BAD_PARAM);
    CHECK_EQ(sk_socket_set_maximum_queued_write_bytes(pair.sock, 1024 * 1024), SK_OK);
    CHECK_EQ(sk_socket_get_maximum_queued_write_bytes(pair.sock, &maximum), SK_OK);
    CHECK_EQ(maximum, 1024 * 1024);

    size_t chunk = 256 * 1024, accepted = 0;
    unsigned char *data = malloc(chunk);
    CHECK(data != NULL);
    sk_error_t error;
    int status = SK_OK;
    for (int i = 0; i < 1000 && status == SK_OK; i++) { /* bounded: 250 MiB at most */
        fill_pattern(data, chunk, (unsigned)i);
        status = sk_socket_write(pair.sock, data, chunk, -1, i, &error);
        if (status == SK_OK) accepted += chunk;
    }
    CHECK_EQ(status, SK_ERR_WRITE_QUEUE_FULL);
    CHECK_EQ(error.code, SK_ERR_WRITE_QUEUE_FULL);
    CHECK(strlen(error.message) > 0);
    size_t queued = 0;
    CHECK_EQ(sk_socket_get_queued_write_bytes(pair.sock, &queued), SK_OK);
    CHECK(queued <= 1024 * 1024);
    CHECK_EQ(sk_socket_is_connected(pair.sock), 1); /* refused, not disconnected */

    /* Every accepted write arrives, intact, and nothing of the refused one. */
    unsigned char *received = malloc(accepted + 2 * 1024 * 1024);
    unsigned char *expected = malloc(chunk);
    CHECK(received != NULL && expected != NULL);
    raw_receive(pair.peer, received, accepted);
    for (size_t offset = 0; offset < accepted; offset += chunk) {
        fill_pattern(expected, chunk, (unsigned)(offset / chunk));
        CHECK(memcmp(received + offset, expected, chunk) == 0);
    }
    /* Drained: writes go through again; a single write above the maximum never does. */
    recorder_expect(&pair.recorder, EVENT_WRITE, accepted / chunk);
    CHECK_EQ(sk_socket_write(pair.sock, "after", 5, -1, 0, NULL), SK_OK);
    raw_receive(pair.peer, received, 5);
    CHECK(memcmp(received, "after", 5) == 0);
    unsigned char *large = calloc(1, 1024 * 1024 + 1);
    CHECK(large != NULL);
    CHECK_EQ(sk_socket_write(pair.sock, large, 1024 * 1024 + 1, -1, 0, NULL), SK_ERR_WRITE_QUEUE_FULL);
    CHECK_EQ(sk_socket_set_maximum_queued_write_bytes(pair.sock, 0), SK_OK); /* 0: no limit */
    CHECK_EQ(sk_socket_write(pair.sock, large, 1024 * 1024 + 1, -1, 0, NULL), SK_OK);
    raw_receive(pair.peer, received, 1024 * 1024 + 1);
    free(large);
    free(expected);
    free(received);
    free(data);
    raw_pair_close(&pair);
}

/* sk_socket_cancel_read withdraws a read and gives its bytes to the next one; the answer
 * says how many bytes SocketKit holds. */
void test_cancel_read_gives_the_bytes_to_the_next_read(void) {
    raw_pair_t pair;
    raw_pair_open(&pair, NULL);
    CHECK_EQ(sk_socket_read_to_length(pair.sock, 10, -1, 1, NULL), SK_OK);
    raw_send(pair.peer, "12345", 5);
    recorder_expect(&pair.recorder, EVENT_READ_PARTIAL, 1);
    CHECK_EQ(sk_socket_cancel_read(pair.sock, 1, NULL), SK_OK);
    recorder_expect(&pair.recorder, EVENT_CANCEL_READ, 1);
    CHECK_EQ(recorder_event(&pair.recorder, EVENT_CANCEL_READ, 0).tag, 1);
    CHECK_EQ(recorder_event(&pair.recorder, EVENT_CANCEL_READ, 0).length, 5);
    CHECK_EQ(sk_socket_read_to_data(pair.sock, SK_LF, 1, 0, -1, 2, NULL), SK_OK);
    raw_send(pair.peer, "67\n", 3);
    recorder_expect(&pair.recorder, EVENT_READ, 1);
    CHECK_EQ(recorder_event(&pair.recorder, EVENT_READ, 0).tag, 2);
    CHECK_STR(recorder_event(&pair.recorder, EVENT_READ, 0).text, "1234567\n");
    /* A read that had completed: its did_read comes first, then the answer. */
    CHECK_EQ(sk_socket_cancel_read(pair.sock, 2, NULL), SK_OK);
    recorder_expect(&pair.recorder, EVENT_CANCEL_READ, 2);
    CHECK_EQ(recorder_event(&pair.recorder, EVENT_CANCEL_READ, 1).length, 0);
    /* Bad input. */
    sk_error_t error;
    CHECK_EQ(sk_socket_unread(pair.sock, NULL, 3, &error), SK_ERR_BAD_PARAM);
    CHECK_EQ(sk_socket_unread(pair.sock, "x", 0, &error), SK_ERR_BAD_PARAM);
    CHECK_EQ(sk_socket_unread(NULL, "x", 1, &error), SK_ERR_INVALID_HANDLE);
    CHECK_EQ(sk_socket_cancel_read(NULL, 1, &error), SK_ERR_INVALID_HANDLE);
    recorder_t idle_recorder;
    recorder_init(&idle_recorder);
    sk_socket_t *idle = recorded_socket(&idle_recorder, NULL);
    CHECK_EQ(sk_socket_cancel_read(idle, 1, &error), SK_ERR_BAD_CONFIG);
    CHECK_EQ(sk_socket_unread(idle, "x", 1, &error), SK_ERR_BAD_CONFIG);
    CHECK_EQ(sk_socket_release(idle), SK_OK);
    recorder_destroy(&idle_recorder);
    raw_pair_close(&pair);
}

/* Bytes given back from did_read come before what followed that read, also when it was
 * served from SocketKit's buffer (whose bytes did_read borrows). */
static void unread_in_did_read(recorder_t *recorder, sk_socket_t *sock, const void *data, size_t length, long tag) {
    (void)recorder;
    (void)data;
    (void)length;
    if (tag == 0) CHECK_EQ(sk_socket_read_to_data(sock, SK_LF, 1, 0, -1, 1, NULL), SK_OK);
    if (tag == 1) {
        CHECK_EQ(sk_socket_unread(sock, "XY", 2, NULL), SK_OK);
        CHECK_EQ(sk_socket_read_to_length(sock, 5, -1, 2, NULL), SK_OK);
    }
}

void test_unread_from_did_read_comes_before_what_followed(void) {
    raw_pair_t pair;
    raw_pair_open(&pair, NULL);
    pair.recorder.on_read = unread_in_did_read;
    raw_send(pair.peer, "a\nbb\ncc\n", 8);
    CHECK_EQ(sk_socket_read_to_data(pair.sock, SK_LF, 1, 0, -1, 0, NULL), SK_OK);
    recorder_expect(&pair.recorder, EVENT_READ, 3);
    CHECK_STR(recorder_event(&pair.recorder, EVENT_READ, 0).text, "a\n");
    CHECK_STR(recorder_event(&pair.recorder, EVENT_READ, 1).text, "bb\n");
    CHECK_STR(recorder_event(&pair.recorder, EVENT_READ, 2).text, "XYcc\n");
    raw_pair_close(&pair);
}

/* sk_socket_close_write_stream: FIN after the queued writes, writes refused, reads go on;
 * the peer's close afterwards ends the connection cleanly. */
void test_close_write_stream_half_closes_and_keeps_reading(void) {
    raw_pair_t pair;
    raw_pair_open(&pair, NULL);
    CHECK_EQ(sk_socket_write(pair.sock, "hello", 5, -1, 1, NULL), SK_OK);
    CHECK_EQ(sk_socket_close_write_stream(pair.sock), SK_OK);
    sk_error_t error;
    CHECK_EQ(sk_socket_write(pair.sock, "late", 4, -1, 2, &error), SK_ERR_BAD_CONFIG);
    char received[16];
    CHECK_EQ(raw_receive_until_eof(pair.peer, received, sizeof received), 5);
    CHECK_EQ(memcmp(received, "hello", 5), 0);
    CHECK_EQ(sk_socket_read_to_length(pair.sock, 5, -1, 3, NULL), SK_OK);
    raw_send(pair.peer, "reply", 5);
    recorder_expect(&pair.recorder, EVENT_READ, 1);
    CHECK_STR(recorder_event(&pair.recorder, EVENT_READ, 0).text, "reply");
    CHECK_EQ(sk_socket_is_connected(pair.sock), 1);
    close(pair.peer);
    pair.peer = -1;
    recorder_expect(&pair.recorder, EVENT_DISCONNECT, 1);
    CHECK_EQ(recorder_event(&pair.recorder, EVENT_DISCONNECT, 0).error_code, 0);
    CHECK_EQ(sk_socket_close_write_stream(NULL), SK_ERR_INVALID_HANDLE);
    raw_pair_close(&pair);
}

/* sk_socket_disconnect_with_reset: the peer sees a reset, not an end of stream. */
void test_disconnect_with_reset_sends_a_reset(void) {
    raw_pair_t pair;
    raw_pair_open(&pair, NULL);
    CHECK_EQ(sk_socket_disconnect_with_reset(pair.sock), SK_OK);
    recorder_expect(&pair.recorder, EVENT_DISCONNECT, 1);
    CHECK_EQ(recorder_event(&pair.recorder, EVENT_DISCONNECT, 0).error_code, 0);
    struct pollfd readable = {.fd = pair.peer, .events = POLLIN};
    CHECK_EQ(poll(&readable, 1, (int)(WAIT_SECONDS * 1000)), 1);
    char byte;
    CHECK_EQ(recv(pair.peer, &byte, 1, 0), -1);
    CHECK_EQ(errno, ECONNRESET);
    CHECK_EQ(sk_socket_disconnect_with_reset(NULL), SK_ERR_INVALID_HANDLE);
    raw_pair_close(&pair);
}
