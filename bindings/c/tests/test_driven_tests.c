/* SPDX-License-Identifier: MIT */
/* A driven loop group (sk_loop_group_create_driven): no thread of its own; the thread that
 * created it runs it with poll() on sk_loop_group_get_fd() and sk_loop_group_run_once(), as a
 * host's own event loop would. */
#include "test_support.h"

#include <poll.h>

/* Runs `group` on this thread until `recorder` has `count` events of `kind` (bounded). */
static int drive_until(sk_loop_group_t *group, recorder_t *recorder, event_kind_t kind, size_t count, double seconds) {
    double limit = now_seconds() + seconds;
    int fd = sk_loop_group_get_fd(group);
    CHECK(fd >= 0);
    while (recorder_count(recorder, kind) < count) {
        if (now_seconds() > limit) return 0;
        struct pollfd poller = {.fd = fd, .events = POLLIN};
        poll(&poller, 1, 100);
        int more;
        do {
            more = sk_loop_group_run_once(group, NULL);
            CHECK(more >= 0);
        } while (more == 1);
    }
    return 1;
}

/* Waits for the descriptor alone, no iteration: 1 when it became readable. */
static int descriptor_becomes_readable(sk_loop_group_t *group, int milliseconds) {
    struct pollfd poller = {.fd = sk_loop_group_get_fd(group), .events = POLLIN};
    return poll(&poller, 1, milliseconds) == 1 && (poller.revents & POLLIN);
}

/* The accepted connection records into its own recorder (recorder->context): a recorder
 * follows one session at a time. */
static void serve_on_accept(recorder_t *recorder, sk_socket_t *listener, sk_socket_t *connection) {
    (void)listener;
    sk_socket_delegate_t delegate = recorder_delegate();
    CHECK_EQ(sk_socket_set_delegate(connection, &delegate, sizeof delegate, recorder->context), SK_OK);
    CHECK_EQ(sk_socket_read(connection, 0, -1, 77, NULL), SK_OK);
}

static void serve_on_read(recorder_t *recorder, sk_socket_t *sock, const void *data, size_t length, long tag) {
    (void)recorder;
    if (tag != 77) return;
    CHECK_EQ(sk_socket_write(sock, data, length, -1, 0, NULL), SK_OK);
    CHECK_EQ(sk_socket_read(sock, 0, -1, 77, NULL), SK_OK);
}

typedef struct intruder {
    sk_loop_group_t *group;
    int status;
} intruder_t;

static void *run_from_another_thread(void *argument) {
    intruder_t *intruder = argument;
    intruder->status = sk_loop_group_run_once(intruder->group, NULL);
    return NULL;
}

void test_driven_loop_group_runs_on_the_host_thread(void) {
    sk_loop_group_t *group = NULL;
    sk_error_t error;
    CHECK_EQ(sk_loop_group_create_driven(&group, &error), SK_OK);
    CHECK(sk_loop_group_get_fd(group) >= 0);
    CHECK_EQ(sk_loop_group_loop_count(group), 1);

    recorder_t server, connection, client;
    recorder_init(&server);
    recorder_init(&connection);
    recorder_init(&client);
    server.on_accept = serve_on_accept;
    server.context = &connection;
    connection.on_read = serve_on_read;
    sk_socket_delegate_t delegate = recorder_delegate();
    sk_socket_t *listener = NULL, *sock = NULL;
    CHECK_EQ(sk_socket_create(&delegate, sizeof delegate, &server, NULL, group, &listener, &error), SK_OK);
    CHECK_EQ(sk_socket_accept_on_interface(listener, "127.0.0.1", 0, &error), SK_OK);
    uint16_t port = 0;
    CHECK_EQ(sk_socket_get_local_port(listener, &port), SK_OK);
    CHECK_EQ(sk_socket_create(&delegate, sizeof delegate, &client, NULL, group, &sock, &error), SK_OK);
    CHECK_EQ(sk_socket_connect_to_host(sock, "127.0.0.1", port, NULL, 5, &error), SK_OK);
    CHECK(drive_until(group, &client, EVENT_CONNECT, 1, 10));

    /* A read queued between iterations makes the descriptor readable; then the echo. */
    const char message[] = "hello, driven loop";
    CHECK_EQ(sk_socket_write(sock, message, sizeof message, -1, 1, &error), SK_OK);
    CHECK_EQ(sk_socket_read_to_length(sock, sizeof message, -1, 2, &error), SK_OK);
    CHECK(descriptor_becomes_readable(group, 10000));
    CHECK(drive_until(group, &client, EVENT_READ, 1, 10));
    CHECK_EQ(client.byte_count, sizeof message);
    CHECK(memcmp(client.bytes, message, sizeof message) == 0);
    /* Every callback ran on this thread. */
    size_t count = 0;
    event_t *events = recorder_events(&client, &count);
    for (size_t i = 0; i < count; i++) CHECK(pthread_equal(events[i].thread, pthread_self()));
    free(events);

    /* Only this thread runs it. */
    intruder_t intruder = {.group = group, .status = 0};
    pthread_t thread;
    CHECK_EQ(pthread_create(&thread, NULL, run_from_another_thread, &intruder), 0);
    pthread_join(thread, NULL);
    CHECK_EQ(intruder.status, SK_ERR_BAD_CONFIG);

    /* A timer wakes the descriptor: a read that times out. */
    CHECK_EQ(sk_socket_read(sock, 0, 0.2, 3, &error), SK_OK);
    while (sk_loop_group_run_once(group, NULL) == 1) {
    }
    CHECK(descriptor_becomes_readable(group, 10000));
    CHECK(drive_until(group, &client, EVENT_DISCONNECT, 1, 10));
    CHECK_EQ(recorder_event(&client, EVENT_DISCONNECT, 0).error_code, SK_ERR_READ_TIMEOUT);

    /* Released on its own thread: every socket closes and is told at once. */
    CHECK_EQ(sk_loop_group_release(group), SK_OK);
    CHECK_EQ(recorder_count(&server, EVENT_DISCONNECT) >= 1, 1);
    CHECK_EQ(sk_loop_group_run_once(group, NULL), SK_ERR_INVALID_HANDLE);
    CHECK_EQ(sk_loop_group_get_fd(group), SK_ERR_INVALID_HANDLE);
    CHECK_EQ(server.overlaps + server.after_disconnect + client.overlaps + client.after_disconnect, 0);
    CHECK_EQ(connection.overlaps + connection.after_disconnect, 0);
    CHECK_EQ(sk_socket_release(sock), SK_OK);
    CHECK_EQ(sk_socket_release(listener), SK_OK);
    recorder_destroy(&server);
    recorder_destroy(&connection);
    recorder_destroy(&client);

    /* A group with threads is not driven. */
    sk_loop_group_t *threaded = NULL;
    CHECK_EQ(sk_loop_group_create(1, &threaded, &error), SK_OK);
    CHECK_EQ(sk_loop_group_get_fd(threaded), SK_ERR_BAD_CONFIG);
    CHECK_EQ(sk_loop_group_run_once(threaded, &error), SK_ERR_BAD_CONFIG);
    CHECK_EQ(error.code, SK_ERR_BAD_CONFIG);
    CHECK_EQ(sk_loop_group_release(threaded), SK_OK);
    CHECK_EQ(sk_loop_group_create_driven(NULL, &error), SK_ERR_BAD_PARAM);
}

static void *release_group(void *argument) {
    intruder_t *releaser = argument;
    releaser->status = sk_loop_group_release(releaser->group);
    return NULL;
}

/* Released from another thread, a driven group stops in its host's next run: the handle
 * stays valid for that run, the descriptor says so, the sockets hear of it, and then the
 * handle is gone. */
void test_driven_loop_group_released_elsewhere_stops_in_the_next_run(void) {
    sk_loop_group_t *group = NULL;
    sk_error_t error;
    CHECK_EQ(sk_loop_group_create_driven(&group, &error), SK_OK);
    recorder_t listener_log;
    recorder_init(&listener_log);
    sk_socket_delegate_t delegate = recorder_delegate();
    sk_socket_t *listener = NULL;
    CHECK_EQ(sk_socket_create(&delegate, sizeof delegate, &listener_log, NULL, group, &listener, &error), SK_OK);
    CHECK_EQ(sk_socket_accept_on_interface(listener, "127.0.0.1", 0, &error), SK_OK);
    while (sk_loop_group_run_once(group, NULL) == 1) {
    }

    intruder_t releaser = {.group = group, .status = -1};
    pthread_t thread;
    CHECK_EQ(pthread_create(&thread, NULL, release_group, &releaser), 0);
    pthread_join(thread, NULL);
    CHECK_EQ(releaser.status, SK_OK);
    CHECK_EQ(recorder_count(&listener_log, EVENT_DISCONNECT), 0);  /* nothing ran on that thread */
    CHECK(descriptor_becomes_readable(group, 10000));
    int status;
    do {
        status = sk_loop_group_run_once(group, NULL);
    } while (status == 1);
    CHECK_EQ(status, 0);
    CHECK_EQ(recorder_count(&listener_log, EVENT_DISCONNECT), 1);
    CHECK_EQ(recorder_event(&listener_log, EVENT_DISCONNECT, 0).error_code, SK_ERR_BAD_CONFIG);
    CHECK_EQ(sk_loop_group_run_once(group, NULL), SK_ERR_INVALID_HANDLE);
    /* Its sockets refuse work now. */
    CHECK(sk_socket_accept_on_interface(listener, "127.0.0.1", 0, &error) < 0);
    CHECK_EQ(sk_socket_release(listener), SK_OK);
    recorder_destroy(&listener_log);
}
