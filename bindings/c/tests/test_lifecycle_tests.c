/* SPDX-License-Identifier: MIT */
/* Lifetimes and threads: release, delegates, callback queues, loop groups, perform. */
#include "test_support.h"

#include <errno.h>
#include <stddef.h>
#include <poll.h>
#include <time.h>
#include <unistd.h>

/* A thread that keeps sending to a socket until told to stop or the peer goes away. */
typedef struct {
    int fd;
    volatile int stop;
    pthread_t thread;
} sender_t;

static void *send_forever(void *argument) {
    sender_t *sender = argument;
    char chunk[1024];
    memset(chunk, 'z', sizeof chunk);
    while (!sender->stop) {
        struct pollfd descriptor = {.fd = sender->fd, .events = POLLOUT};
        if (poll(&descriptor, 1, 100) <= 0) continue;
        if (send(sender->fd, chunk, sizeof chunk, MSG_NOSIGNAL) < 0) break;
    }
    return NULL;
}

static void read_again(recorder_t *recorder, sk_socket_t *sock, const void *data, size_t length, long tag) {
    (void)data;
    (void)length;
    /* Make each callback take a little while, so a release is likely to meet one running. */
    double until = now_seconds() + 0.001;
    while (now_seconds() < until) {
    }
    sk_socket_read(sock, 0, -1, tag + 1, NULL);
    (void)recorder;
}

void test_no_callback_after_release(void) {
    recorder_t *recorder = malloc(sizeof *recorder);
    CHECK(recorder != NULL);
    recorder_init(recorder);
    recorder->on_read = read_again;
    sk_callback_queue_t *queue = NULL;
    CHECK_EQ(sk_callback_queue_create_serial("release-test", &queue, NULL), SK_OK);
    uint16_t port = 0;
    int listener = raw_listen("127.0.0.1", &port, 8);
    sk_socket_t *sock = recorded_socket(recorder, queue);
    CHECK_EQ(sk_socket_connect_to_host(sock, "127.0.0.1", port, NULL, 5, NULL), SK_OK);
    sender_t sender = {.fd = raw_accept(listener)};
    CHECK(pthread_create(&sender.thread, NULL, send_forever, &sender) == 0);
    CHECK_EQ(sk_socket_read(sock, 0, -1, 0, NULL), SK_OK);
    recorder_expect(recorder, EVENT_READ, 20);

    CHECK_EQ(sk_socket_release(sock), SK_OK);
    /* Once release returned, no callback runs or starts: the userdata can go at once. */
    pthread_mutex_lock(&recorder->lock);
    int running = recorder->running;
    size_t frozen = recorder->count;
    pthread_mutex_unlock(&recorder->lock);
    CHECK_EQ(running, 0);
    recorder_destroy(recorder);
    memset(recorder, 0xAB, sizeof *recorder);
    free(recorder);
    (void)frozen;

    sender.stop = 1;
    pthread_join(sender.thread, NULL);
    close(sender.fd);
    close(listener);
    CHECK_EQ(sk_callback_queue_release(queue), SK_OK);
}

/* sk_thread_set_wait_hook: a one-shot hook run by the thread that is about to block. */
typedef struct {
    pthread_mutex_t lock;
    pthread_cond_t changed;
    int in_callback;
    int go;
    int callback_saw_go;
    int hook_calls;
    pthread_t hook_thread;
} wait_hook_state_t;

static wait_hook_state_t wait_hook_state = {.lock = PTHREAD_MUTEX_INITIALIZER, .changed = PTHREAD_COND_INITIALIZER};

static void wait_for_flag(wait_hook_state_t *state, int *flag, double seconds) {
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += (time_t)seconds;
    while (!*flag && pthread_cond_timedwait(&state->changed, &state->lock, &deadline) != ETIMEDOUT) {
    }
}

/* Runs on the serial queue's thread and holds the socket's callback until the hook says go
 * (or ten seconds pass: then the test fails instead of hanging). */
static void hold_until_go(recorder_t *recorder, sk_socket_t *sock, const void *data, size_t length, long tag) {
    (void)recorder;
    (void)sock;
    (void)data;
    (void)length;
    (void)tag;
    wait_hook_state_t *state = &wait_hook_state;
    pthread_mutex_lock(&state->lock);
    state->in_callback = 1;
    pthread_cond_broadcast(&state->changed);
    wait_for_flag(state, &state->go, 10);
    state->callback_saw_go = state->go;
    pthread_mutex_unlock(&state->lock);
}

static void count_wait_hook(void *context) {
    wait_hook_state_t *state = context;
    pthread_mutex_lock(&state->lock);
    state->hook_calls++;
    state->hook_thread = pthread_self();
    state->go = 1;
    pthread_cond_broadcast(&state->changed);
    pthread_mutex_unlock(&state->lock);
}

void test_wait_hook_runs_once_on_the_thread_about_to_block(void) {
    wait_hook_state_t *state = &wait_hook_state;
    recorder_t recorder;
    recorder_init(&recorder);
    recorder.on_read = hold_until_go;
    sk_callback_queue_t *queue = NULL;
    CHECK_EQ(sk_callback_queue_create_serial("wait-hook", &queue, NULL), SK_OK);
    int listener, peer;
    sk_socket_t *sock = connected_recorded_socket(&recorder, queue, &listener, &peer);
    CHECK_EQ(sk_socket_read(sock, 0, -1, 0, NULL), SK_OK);
    raw_send(peer, "x", 1);
    pthread_mutex_lock(&state->lock);
    wait_for_flag(state, &state->in_callback, 10);
    CHECK_EQ(state->in_callback, 1);
    pthread_mutex_unlock(&state->lock);

    /* The read callback runs on the queue's thread, so release waits for it: the hook runs
     * on this thread first, and only it lets the callback end. */
    CHECK_EQ(sk_thread_set_wait_hook(count_wait_hook, state), SK_OK);
    CHECK_EQ(sk_socket_release(sock), SK_OK);
    pthread_mutex_lock(&state->lock);
    CHECK_EQ(state->hook_calls, 1);
    CHECK(pthread_equal(state->hook_thread, pthread_self()));
    CHECK_EQ(state->callback_saw_go, 1);
    pthread_mutex_unlock(&state->lock);

    /* One-shot: this thread waits again (the queue's thread ends and is joined; the loop
     * group's thread too), without calling it. A hook cleared with NULL never runs either. */
    CHECK_EQ(sk_callback_queue_release(queue), SK_OK);
    sk_loop_group_t *group = NULL;
    CHECK_EQ(sk_loop_group_create(1, &group, NULL), SK_OK);
    CHECK_EQ(sk_thread_set_wait_hook(count_wait_hook, state), SK_OK);
    CHECK_EQ(sk_thread_set_wait_hook(NULL, NULL), SK_OK);
    CHECK_EQ(sk_loop_group_release(group), SK_OK);
    pthread_mutex_lock(&state->lock);
    CHECK_EQ(state->hook_calls, 1);
    pthread_mutex_unlock(&state->lock);
    close(peer);
    close(listener);
    recorder_destroy(&recorder);
}

static void release_self(recorder_t *recorder, sk_socket_t *sock, const void *data, size_t length, long tag) {
    (void)data;
    (void)length;
    (void)tag;
    (void)recorder;
    /* Calls from inside a socket's own callback skip the handle table (CallbackScope.swift):
     * after the release they must still see the handle as released. */
    CHECK_EQ(sk_socket_write(sock, "z", 1, -1, 0, NULL), SK_OK);
    CHECK_EQ(sk_udp_socket_send((sk_udp_socket_t *)sock, "k", 1, -1, 0, NULL), SK_ERR_INVALID_HANDLE);
    CHECK_EQ(sk_socket_release(sock), SK_OK);
    CHECK_EQ(sk_socket_is_connected(sock), SK_ERR_INVALID_HANDLE);
    sk_error_t error;
    CHECK_EQ(sk_socket_write(sock, "z", 1, -1, 0, &error), SK_ERR_INVALID_HANDLE);
    CHECK_EQ(error.code, SK_ERR_INVALID_HANDLE);
    CHECK_EQ(sk_socket_read(sock, 1, -1, 3, NULL), SK_ERR_INVALID_HANDLE);
    CHECK_EQ(sk_socket_release(sock), SK_ERR_INVALID_HANDLE);
}

void test_release_inside_own_callback(void) {
    recorder_t recorder;
    recorder_init(&recorder);
    recorder.on_read = release_self;
    int listener, peer;
    sk_socket_t *sock = connected_recorded_socket(&recorder, NULL, &listener, &peer);
    CHECK_EQ(sk_socket_read(sock, 1, -1, 1, NULL), SK_OK);
    CHECK_EQ(sk_socket_read(sock, 1, -1, 2, NULL), SK_OK);
    raw_send(peer, "xy", 2);
    char echoed[8];
    /* The write made inside the callback before the release went out; nothing after it. */
    CHECK_EQ(raw_receive_until_eof(peer, echoed, sizeof echoed), 1);
    CHECK_EQ(echoed[0], 'z');
    CHECK_EQ(recorder_count(&recorder, EVENT_READ), 1);
    CHECK_EQ(recorder_count(&recorder, EVENT_DISCONNECT), 0);
    close(peer);
    close(listener);
    recorder_destroy(&recorder);
}

void test_set_delegate_and_callback_queue(void) {
    recorder_t first, second;
    recorder_init(&first);
    recorder_init(&second);
    int listener, peer;
    sk_socket_t *sock = connected_recorded_socket(&first, NULL, &listener, &peer);
    recorder_expect(&first, EVENT_CONNECT, 1);

    sk_socket_delegate_t delegate = recorder_delegate();
    CHECK_EQ(sk_socket_set_delegate(sock, &delegate, sizeof delegate, &second), SK_OK);
    void *userdata = NULL;
    CHECK_EQ(sk_socket_get_userdata(sock, &userdata), SK_OK);
    CHECK(userdata == &second);
    CHECK_EQ(sk_socket_read_to_length(sock, 1, -1, 1, NULL), SK_OK);
    raw_send(peer, "a", 1);
    recorder_expect(&second, EVENT_READ, 1);
    pthread_t loop_thread = recorder_event(&second, EVENT_READ, 0).thread;
    CHECK(!pthread_equal(loop_thread, pthread_self()));

    sk_callback_queue_t *queue = NULL;
    CHECK_EQ(sk_callback_queue_create_serial(NULL, &queue, NULL), SK_OK);
    CHECK_EQ(sk_socket_set_callback_queue(sock, queue), SK_OK);
    CHECK_EQ(sk_callback_queue_release(queue), SK_OK); /* the socket keeps it alive */
    CHECK_EQ(sk_socket_read_to_length(sock, 1, -1, 2, NULL), SK_OK);
    raw_send(peer, "b", 1);
    recorder_expect(&second, EVENT_READ, 2);
    pthread_t queue_thread = recorder_event(&second, EVENT_READ, 1).thread;
    CHECK(!pthread_equal(queue_thread, loop_thread));
    CHECK(!pthread_equal(queue_thread, pthread_self()));

    /* A NULL delegate: no callbacks at all. */
    CHECK_EQ(sk_socket_set_delegate(sock, NULL, 0, NULL), SK_OK);
    CHECK_EQ(sk_socket_read_to_length(sock, 1, -1, 3, NULL), SK_OK);
    raw_send(peer, "c", 1);
    CHECK_EQ(sk_socket_disconnect_after_reading(sock), SK_OK);
    char nothing[4];
    CHECK_EQ(raw_receive_until_eof(peer, nothing, sizeof nothing), 0);
    CHECK_EQ(recorder_count(&first, EVENT_READ), 0);
    CHECK_EQ(recorder_count(&second, EVENT_READ), 2);
    CHECK_EQ(recorder_count(&second, EVENT_DISCONNECT), 0);
    CHECK_EQ(sk_socket_set_callback_queue(sock, (sk_callback_queue_t *)sock), SK_ERR_INVALID_HANDLE);
    CHECK_EQ(sk_socket_release(sock), SK_OK);
    close(peer);
    close(listener);
    recorder_destroy(&first);
    recorder_destroy(&second);
}

static int readable(int fd, int milliseconds) {
    struct pollfd descriptor = {.fd = fd, .events = POLLIN};
    return poll(&descriptor, 1, milliseconds) == 1;
}

void test_host_queue_runs_callbacks_when_drained(void) {
    recorder_t recorder;
    recorder_init(&recorder);
    sk_callback_queue_t *queue = NULL;
    CHECK_EQ(sk_callback_queue_create_host(&queue, NULL), SK_OK);
    int fd = sk_callback_queue_fd(queue);
    CHECK(fd >= 0);
    CHECK(!readable(fd, 0));
    int listener, peer;
    sk_socket_t *sock = connected_recorded_socket(&recorder, queue, &listener, &peer);
    CHECK_EQ(sk_socket_read_to_length(sock, 3, -1, 1, NULL), SK_OK);
    CHECK_EQ(sk_socket_read_to_length(sock, 3, -1, 2, NULL), SK_OK);
    raw_send(peer, "abcdef", 6);

    /* Nothing runs until drained; the descriptor says work is waiting. */
    CHECK(readable(fd, (int)(WAIT_SECONDS * 1000)));
    CHECK_EQ(recorder_count(&recorder, EVENT_CONNECT), 0);
    int ran = 0;
    while (ran < 3) {
        CHECK(readable(fd, (int)(WAIT_SECONDS * 1000)));
        int drained = sk_callback_queue_drain(queue, 1);
        CHECK(drained == 0 || drained == 1);
        ran += drained;
    }
    CHECK(!readable(fd, 0));
    size_t count = 0;
    event_t *events = recorder_events(&recorder, &count);
    CHECK_EQ(count, 3);
    CHECK_EQ(events[0].kind, EVENT_CONNECT);
    CHECK_EQ(events[1].tag, 1);
    CHECK_EQ(events[2].tag, 2);
    for (size_t i = 0; i < count; i++) CHECK(pthread_equal(events[i].thread, pthread_self()));
    free(events);

    CHECK_EQ(sk_socket_disconnect(sock), SK_OK);
    CHECK(readable(fd, (int)(WAIT_SECONDS * 1000)));
    CHECK_EQ(sk_callback_queue_drain(queue, 0), 1);
    CHECK_EQ(recorder_count(&recorder, EVENT_DISCONNECT), 1);
    CHECK_EQ(sk_callback_queue_drain(queue, 0), 0);

    sk_callback_queue_t *serial = NULL;
    CHECK_EQ(sk_callback_queue_create_serial("s", &serial, NULL), SK_OK);
    CHECK_EQ(sk_callback_queue_fd(serial), SK_ERR_BAD_CONFIG);
    CHECK_EQ(sk_callback_queue_drain(serial, 0), SK_ERR_BAD_CONFIG);
    CHECK_EQ(sk_callback_queue_release(serial), SK_OK);
    CHECK_EQ(sk_socket_release(sock), SK_OK);
    CHECK_EQ(sk_callback_queue_release(queue), SK_OK);
    close(peer);
    close(listener);
    recorder_destroy(&recorder);
}

void test_serial_queue_runs_callbacks_on_its_thread(void) {
    recorder_t recorder; /* shared by both sockets: callbacks must still never overlap */
    recorder_init(&recorder);
    sk_callback_queue_t *queue = NULL;
    CHECK_EQ(sk_callback_queue_create_serial("shared", &queue, NULL), SK_OK);
    uint16_t port = 0;
    int listener = raw_listen("127.0.0.1", &port, 8);
    sk_socket_t *a = recorded_socket(&recorder, queue);
    sk_socket_t *b = recorded_socket(&recorder, queue);
    CHECK_EQ(sk_socket_connect_to_host(a, "127.0.0.1", port, NULL, 5, NULL), SK_OK);
    int peer_a = raw_accept(listener);
    CHECK_EQ(sk_socket_connect_to_host(b, "127.0.0.1", port, NULL, 5, NULL), SK_OK);
    int peer_b = raw_accept(listener);
    for (long tag = 0; tag < 50; tag++) {
        CHECK_EQ(sk_socket_read_to_length(a, 1, -1, tag, NULL), SK_OK);
        CHECK_EQ(sk_socket_read_to_length(b, 1, -1, tag, NULL), SK_OK);
    }
    char fifty[50];
    memset(fifty, 'q', sizeof fifty);
    raw_send(peer_a, fifty, sizeof fifty);
    raw_send(peer_b, fifty, sizeof fifty);
    recorder_expect(&recorder, EVENT_READ, 100);
    size_t count = 0;
    event_t *events = recorder_events(&recorder, &count);
    pthread_t thread = events[0].thread;
    long next_a = 0, next_b = 0;
    for (size_t i = 0; i < count; i++) {
        CHECK(pthread_equal(events[i].thread, thread));
        CHECK(!pthread_equal(events[i].thread, pthread_self()));
        if (events[i].kind != EVENT_READ) continue;
        if (events[i].sock == a) CHECK_EQ(events[i].tag, next_a++);
        else CHECK_EQ(events[i].tag, next_b++);
    }
    free(events);
    CHECK_EQ(recorder.overlaps, 0);
    CHECK_EQ(sk_socket_release(a), SK_OK);
    CHECK_EQ(sk_socket_release(b), SK_OK);
    CHECK_EQ(sk_callback_queue_release(queue), SK_OK);
    close(peer_a);
    close(peer_b);
    close(listener);
    recorder_destroy(&recorder);
}

void test_loop_group_release_closes_its_sockets(void) {
    recorder_t recorder;
    recorder_init(&recorder);
    sk_loop_group_t *group = NULL;
    sk_error_t error;
    CHECK_EQ(sk_loop_group_create(2, &group, &error), SK_OK);
    CHECK_EQ(sk_loop_group_loop_count(group), 2);
    sk_socket_delegate_t delegate = recorder_delegate();
    sk_socket_t *sock = NULL;
    CHECK_EQ(sk_socket_create(&delegate, sizeof delegate, &recorder, NULL, group, &sock, &error), SK_OK);
    uint16_t port = 0;
    int listener = raw_listen("127.0.0.1", &port, 8);
    CHECK_EQ(sk_socket_connect_to_host(sock, "127.0.0.1", port, NULL, 5, NULL), SK_OK);
    int peer = raw_accept(listener);
    recorder_expect(&recorder, EVENT_CONNECT, 1);
    CHECK_EQ(sk_loop_group_release(group), SK_OK);
    recorder_expect(&recorder, EVENT_DISCONNECT, 1);
    CHECK_EQ(recorder_event(&recorder, EVENT_DISCONNECT, 0).error_code, SK_ERR_BAD_CONFIG);
    char nothing[4];
    CHECK_EQ(raw_receive_until_eof(peer, nothing, sizeof nothing), 0);
    CHECK_EQ(sk_socket_connect_to_host(sock, "127.0.0.1", port, NULL, 5, &error), SK_ERR_BAD_CONFIG);
    CHECK_EQ(sk_socket_release(sock), SK_OK);
    close(peer);
    close(listener);
    recorder_destroy(&recorder);
}

/* Polls `queue` until at least one record arrives (or the wait runs out); returns the count. */
static int poll_records(sk_callback_queue_t *queue, sk_event_t *events, int capacity) {
    int fd = sk_callback_queue_fd(queue);
    double deadline = now_seconds() + WAIT_SECONDS;
    while (now_seconds() < deadline) {
        if (!readable(fd, 100)) continue;
        int count = sk_callback_queue_poll_events(queue, events, capacity);
        CHECK(count >= 0);
        if (count > 0) return count;
    }
    return 0;
}

void test_host_queue_hands_events_over_as_records(void) {
    /* The layout the Python binding unpacks (bindings/python/socketkit/_ffi.py). */
    CHECK_EQ(sizeof(sk_event_t), 128);
    CHECK_EQ(offsetof(sk_event_t, kind), 16);
    CHECK_EQ(offsetof(sk_event_t, tag), 24);
    CHECK_EQ(offsetof(sk_event_t, token), 80);
    CHECK_EQ(offsetof(sk_event_t, udp_sock), 88);
    CHECK_EQ(offsetof(sk_event_t, address), 96);
    CHECK_EQ(offsetof(sk_event_t, address_length), 104);
    CHECK_EQ(offsetof(sk_event_t, context), 112);
    CHECK_EQ(offsetof(sk_event_t, trust), 120);
    recorder_t recorder; /* its delegate members say which events to record */
    recorder_init(&recorder);
    sk_callback_queue_t *queue = NULL;
    CHECK_EQ(sk_callback_queue_create_host(&queue, NULL), SK_OK);
    uint16_t port = 0;
    int listener = raw_listen("127.0.0.1", &port, 8);
    sk_socket_t *sock = recorded_socket(&recorder, queue);
    CHECK_EQ(sk_socket_connect_to_host(sock, "127.0.0.1", port, NULL, 5, NULL), SK_OK);
    int peer = raw_accept(listener);

    sk_event_t events[64];
    CHECK_EQ(poll_records(queue, events, 64), 1);
    CHECK_EQ(events[0].kind, SK_EVENT_CONNECT);
    CHECK(events[0].sock == sock);
    CHECK_EQ(strcmp(events[0].host, "127.0.0.1"), 0);
    CHECK_EQ(events[0].port, port);
    CHECK(events[0].userdata == &recorder);
    CHECK_EQ(recorder_count(&recorder, EVENT_CONNECT), 0); /* recorded, not called */

    /* 100 one-byte reads complete at once: records come in order, 64 then 36, and every
     * record's bytes stay readable until the next poll. */
    for (long tag = 0; tag < 100; tag++) CHECK_EQ(sk_socket_read_to_length(sock, 1, -1, tag, NULL), SK_OK);
    unsigned char payload[100];
    fill_pattern(payload, sizeof payload, 3);
    raw_send(peer, payload, sizeof payload);
    int seen = 0;
    while (seen < 100) {
        int count = poll_records(queue, events, 64);
        CHECK(count > 0 && count <= 64);
        for (int i = 0; i < count; i++, seen++) {
            CHECK_EQ(events[i].kind, SK_EVENT_READ);
            CHECK_EQ(events[i].tag, seen);
            CHECK_EQ(events[i].length, 1);
            CHECK_EQ(((const unsigned char *)events[i].data)[0], payload[seen]);
        }
    }

    /* A cancelled read's answer: its tag, and the bytes held for the next read. */
    CHECK_EQ(sk_socket_read_to_length(sock, 4, -1, 5, NULL), SK_OK);
    CHECK_EQ(sk_socket_unread(sock, "ab", 2, NULL), SK_OK);
    CHECK_EQ(sk_socket_cancel_read(sock, 5, NULL), SK_OK);
    /* The read may or may not have taken the two bytes (a partial record) before the cancel
     * reached the loop; either way they are back. */
    int got = poll_records(queue, events, 64);
    if (events[0].kind == SK_EVENT_READ_PARTIAL) {
        CHECK_EQ(events[0].length, 2);
        if (got == 1) got += poll_records(queue, events + 1, 63);
        CHECK_EQ(got, 2);
        events[0] = events[1];
    } else {
        CHECK_EQ(got, 1);
    }
    CHECK_EQ(events[0].kind, SK_EVENT_CANCEL_READ);
    CHECK_EQ(events[0].tag, 5);
    CHECK_EQ(events[0].length, 2);
    CHECK_EQ(sk_socket_read_to_length(sock, 2, -1, 6, NULL), SK_OK); /* the next read gets them */
    CHECK_EQ(poll_records(queue, events, 64), 1);
    CHECK_EQ(events[0].kind, SK_EVENT_READ);
    CHECK_EQ(memcmp(events[0].data, "ab", 2), 0);

    CHECK_EQ(sk_socket_write(sock, "hi", 2, -1, 7, NULL), SK_OK);
    CHECK_EQ(poll_records(queue, events, 64), 1);
    CHECK_EQ(events[0].kind, SK_EVENT_WRITE);
    CHECK_EQ(events[0].tag, 7);
    char echoed[2];
    raw_receive(peer, echoed, 2);

    /* A timeout record waits for its answer: extend once, then let it fail. */
    CHECK_EQ(sk_socket_answer_timeout(NULL, 1), SK_ERR_BAD_PARAM);
    CHECK_EQ(sk_socket_answer_timeout(&events[0], 1), SK_ERR_BAD_PARAM); /* not a timeout */
    CHECK_EQ(sk_socket_read_to_length(sock, 5, 0.1, 9, NULL), SK_OK);
    CHECK_EQ(poll_records(queue, events, 64), 1);
    CHECK_EQ(events[0].kind, SK_EVENT_READ_TIMEOUT);
    CHECK_EQ(events[0].tag, 9);
    CHECK(events[0].elapsed > 0.099 && events[0].elapsed < 0.101); /* the timeout so far */
    sk_event_t question = events[0]; /* a copy answers as well as the record */
    CHECK_EQ(sk_socket_answer_timeout(&question, 0.1), SK_OK);
    CHECK_EQ(sk_socket_answer_timeout(&question, 100), SK_OK); /* only the first answer counts */
    CHECK_EQ(poll_records(queue, events, 64), 1);
    CHECK_EQ(events[0].kind, SK_EVENT_READ_TIMEOUT);
    CHECK(events[0].elapsed > 0.199 && events[0].elapsed < 0.201);
    CHECK_EQ(sk_socket_answer_timeout(&events[0], 0), SK_OK);
    CHECK_EQ(poll_records(queue, events, 64), 1);
    CHECK_EQ(events[0].kind, SK_EVENT_DISCONNECT);
    CHECK(events[0].error != NULL);
    CHECK_EQ(events[0].error->code, SK_ERR_READ_TIMEOUT);
    CHECK_EQ(recorder_count(&recorder, EVENT_DISCONNECT), 0);
    /* Nothing pending: 0 records, and bad arguments are still refused on an empty queue. */
    CHECK_EQ(sk_callback_queue_poll_events(queue, events, 64), 0);

    /* Bad input. */
    CHECK_EQ(sk_callback_queue_poll_events(queue, NULL, 4), SK_ERR_BAD_PARAM);
    CHECK_EQ(sk_callback_queue_poll_events(queue, events, 0), SK_ERR_BAD_PARAM);
    CHECK_EQ(sk_callback_queue_poll_events(NULL, events, 4), SK_ERR_INVALID_HANDLE);
    sk_callback_queue_t *serial = NULL;
    CHECK_EQ(sk_callback_queue_create_serial("s", &serial, NULL), SK_OK);
    CHECK_EQ(sk_callback_queue_poll_events(serial, events, 4), SK_ERR_BAD_CONFIG);
    CHECK_EQ(sk_callback_queue_release(serial), SK_OK);
    sk_event_t stale = question;
    CHECK_EQ(sk_socket_release(sock), SK_OK);
    CHECK_EQ(sk_socket_answer_timeout(&stale, 1), SK_ERR_INVALID_HANDLE);

    CHECK_EQ(sk_callback_queue_release(queue), SK_OK);
    close(peer);
    close(listener);
    recorder_destroy(&recorder);
}

static sk_loop_group_t *group_to_release;

static void release_group_inside(recorder_t *recorder, sk_socket_t *sock) {
    (void)sock;
    CHECK_EQ(sk_loop_group_release(group_to_release), SK_OK);
    recorder_notify(recorder);
}

void test_loop_group_release_from_its_own_loop(void) {
    recorder_t recorder;
    recorder_init(&recorder);
    recorder.on_connect = release_group_inside;
    CHECK_EQ(sk_loop_group_create(1, &group_to_release, NULL), SK_OK);
    sk_socket_delegate_t delegate = recorder_delegate();
    sk_socket_t *sock = NULL;
    CHECK_EQ(sk_socket_create(&delegate, sizeof delegate, &recorder, NULL, group_to_release, &sock, NULL), SK_OK);
    uint16_t port = 0;
    int listener = raw_listen("127.0.0.1", &port, 8);
    CHECK_EQ(sk_socket_connect_to_host(sock, "127.0.0.1", port, NULL, 5, NULL), SK_OK);
    int peer = raw_accept(listener);
    /* The release inside did_connect cannot join its own thread: it finishes in the
     * background, and the socket is closed like any other. */
    recorder_expect(&recorder, EVENT_DISCONNECT, 1);
    CHECK_EQ(recorder_event(&recorder, EVENT_DISCONNECT, 0).error_code, SK_ERR_BAD_CONFIG);
    CHECK_EQ(sk_loop_group_release(group_to_release), SK_ERR_INVALID_HANDLE);
    CHECK_EQ(sk_socket_release(sock), SK_OK);
    close(peer);
    close(listener);
    recorder_destroy(&recorder);
}

void test_perform_runs_on_the_loop(void) {
    recorder_t recorder;
    recorder_init(&recorder);
    sk_socket_t *listener = recorded_socket(&recorder, NULL);
    CHECK_EQ(sk_socket_accept_on_port(listener, 0, NULL), SK_OK);
    CHECK_EQ(sk_socket_is_accepting(listener), 1);
    CHECK_EQ(sk_socket_is_ipv4(listener), 1);
    CHECK_EQ(sk_socket_is_ipv6(listener), 1);
    pthread_t thread = pthread_self();
    sk_socket_descriptors_t seen = socket_descriptors(listener, &thread);
    CHECK(!pthread_equal(thread, pthread_self()));
    CHECK(seen.ipv4 >= 0 && seen.ipv6 >= 0);
    CHECK_EQ(seen.primary, seen.ipv4);
    CHECK_EQ(seen.unix_domain, -1);
    CHECK_EQ(sk_socket_release(listener), SK_OK);
    recorder_destroy(&recorder);
}

static void read_one_byte(recorder_t *recorder, sk_socket_t *listener, sk_socket_t *connection) {
    (void)recorder;
    (void)listener;
    CHECK_EQ(sk_socket_read_to_length(connection, 1, -1, 0, NULL), SK_OK);
}

/* Accepts three connections on a listener in a 3-loop group and returns how many
 * different threads ran their did_read. */
static int threads_used(int loop_index) {
    recorder_t recorder;
    recorder_init(&recorder);
    recorder.on_accept = read_one_byte;
    recorder.loop_index_for_connections = loop_index;
    sk_loop_group_t *group = NULL;
    CHECK_EQ(sk_loop_group_create(3, &group, NULL), SK_OK);
    sk_socket_delegate_t delegate = recorder_delegate();
    sk_socket_t *listener = NULL;
    CHECK_EQ(sk_socket_create(&delegate, sizeof delegate, &recorder, NULL, group, &listener, NULL), SK_OK);
    CHECK_EQ(sk_socket_accept_on_interface(listener, "127.0.0.1", 0, NULL), SK_OK);
    uint16_t port = 0;
    CHECK_EQ(sk_socket_get_local_port(listener, &port), SK_OK);
    int clients[3];
    for (int i = 0; i < 3; i++) {
        clients[i] = raw_connect("127.0.0.1", port);
        raw_send(clients[i], "x", 1);
    }
    recorder_expect(&recorder, EVENT_READ, 3);
    pthread_t threads[3];
    for (int i = 0; i < 3; i++) threads[i] = recorder_event(&recorder, EVENT_READ, (size_t)i).thread;
    int distinct = 1 + !pthread_equal(threads[1], threads[0]) +
                   (!pthread_equal(threads[2], threads[0]) && !pthread_equal(threads[2], threads[1]));
    for (int i = 0; i < 3; i++) close(clients[i]);
    recorder_destroy(&recorder);
    CHECK_EQ(sk_socket_release(listener), SK_OK);
    CHECK_EQ(sk_loop_group_release(group), SK_OK);
    return distinct;
}

void test_new_socket_loop_hook_places_connections(void) {
    CHECK_EQ(threads_used(-1), 3); /* spread over the group */
    CHECK_EQ(threads_used(2), 1);  /* all on loop 2 */
}

void test_accept_without_did_accept_closes(void) {
    recorder_t recorder;
    recorder_init(&recorder);
    sk_socket_delegate_t delegate = recorder_delegate();
    delegate.did_accept = NULL;
    sk_socket_t *listener = NULL;
    CHECK_EQ(sk_socket_create(&delegate, sizeof delegate, &recorder, NULL, NULL, &listener, NULL), SK_OK);
    CHECK_EQ(sk_socket_accept_on_interface(listener, "127.0.0.1", 0, NULL), SK_OK);
    uint16_t port = 0;
    CHECK_EQ(sk_socket_get_local_port(listener, &port), SK_OK);
    int client = raw_connect("127.0.0.1", port);
    char nothing[4];
    CHECK_EQ(raw_receive_until_eof(client, nothing, sizeof nothing), 0);
    close(client);
    CHECK_EQ(sk_socket_release(listener), SK_OK);
    recorder_destroy(&recorder);
}

void test_release_stops_writes_into_caller_buffers(void) {
    recorder_t recorder;
    recorder_init(&recorder);
    int listener, peer;
    sk_socket_t *sock = connected_recorded_socket(&recorder, NULL, &listener, &peer);
    recorder_expect(&recorder, EVENT_CONNECT, 1);

    unsigned char *buffer = malloc(64);
    CHECK(buffer != NULL);
    memset(buffer, 0xEE, 64);
    CHECK_EQ(sk_socket_read_to_length_into(sock, 64, buffer, 64, 0, -1, 1, NULL), SK_OK);

    /* Hold the loop, let the data arrive, release, then let the loop go: it sees the data
     * before it runs the close, and must not copy it into the released caller's buffer. */
    loop_hold_t hold = {0};
    loop_hold_begin(&hold, sock);
    unsigned char payload[64];
    memset(payload, 'x', sizeof payload);
    raw_send(peer, payload, sizeof payload);
    CHECK_EQ(sk_socket_release(sock), SK_OK);
    loop_hold_end(&hold);

    raw_wait_closed(peer);
    for (int i = 0; i < 64; i++) CHECK_EQ(buffer[i], 0xEE);
    free(buffer);
    CHECK_EQ(recorder_count(&recorder, EVENT_READ), 0);
    close(peer);
    close(listener);
    recorder_destroy(&recorder);
}

void test_release_after_disconnect_after_writing_still_delivers(void) {
    recorder_t recorder;
    recorder_init(&recorder);
    int listener, peer;
    sk_socket_t *sock = connected_recorded_socket(&recorder, NULL, &listener, &peer);
    recorder_expect(&recorder, EVENT_CONNECT, 1);

    /* More than the kernel buffers hold while the peer is not reading: most of it is still
     * queued in SocketKit when the handle goes away. */
    size_t length = 16 * 1024 * 1024;
    unsigned char *data = write_then_disconnect_after_writing(sock, length, 5);
    unsigned char *received = malloc(length + 1);
    CHECK(received != NULL);
    CHECK_EQ(sk_socket_release(sock), SK_OK);
    CHECK_EQ(raw_receive_until_eof(peer, received, length + 1), length);
    CHECK(memcmp(received, data, length) == 0);
    /* Released: no callbacks, not even did_disconnect. */
    CHECK_EQ(recorder_count(&recorder, EVENT_DISCONNECT), 0);
    free(data);
    free(received);
    close(peer);
    close(listener);
    recorder_destroy(&recorder);
}

static void close_other_then_check(recorder_t *recorder, sk_socket_t *sock, const void *data, size_t length, long tag) {
    (void)sock;
    (void)tag;
    unsigned char copy[64];
    CHECK(length <= sizeof copy);
    memcpy(copy, data, length);
    /* The other socket, on the same loop, has unread input: closing it gracefully discards
     * that input, and must not do so through the buffer `data` points into. */
    CHECK_EQ(sk_socket_disconnect_after_writing((sk_socket_t *)recorder->context), SK_OK);
    CHECK(memcmp(copy, data, length) == 0);
}

void test_graceful_close_in_a_callback_keeps_its_data(void) {
    sk_loop_group_t *group = NULL;
    CHECK_EQ(sk_loop_group_create(1, &group, NULL), SK_OK);
    recorder_t first, second;
    recorder_init(&first);
    recorder_init(&second);
    sk_socket_delegate_t delegate = recorder_delegate();
    sk_socket_t *a = NULL, *b = NULL;
    CHECK_EQ(sk_socket_create(&delegate, sizeof delegate, &first, NULL, group, &a, NULL), SK_OK);
    CHECK_EQ(sk_socket_create(&delegate, sizeof delegate, &second, NULL, group, &b, NULL), SK_OK);
    uint16_t port = 0;
    int listener = raw_listen("127.0.0.1", &port, 8);
    CHECK_EQ(sk_socket_connect_to_host(a, "127.0.0.1", port, NULL, 5, NULL), SK_OK);
    int peer_a = raw_accept(listener);
    CHECK_EQ(sk_socket_connect_to_host(b, "127.0.0.1", port, NULL, 5, NULL), SK_OK);
    int peer_b = raw_accept(listener);
    recorder_expect(&first, EVENT_CONNECT, 1);
    recorder_expect(&second, EVENT_CONNECT, 1);

    raw_send(peer_b, "BBBBBBBBBBBBBBBB", 16); /* nobody reads it */
    first.context = b;
    first.on_read = close_other_then_check;
    CHECK_EQ(sk_socket_read_to_length(a, 16, -1, 1, NULL), SK_OK);
    raw_send(peer_a, "AAAAAAAAAAAAAAAA", 16);
    recorder_expect(&first, EVENT_READ, 1);
    CHECK_STR(recorder_event(&first, EVENT_READ, 0).text, "AAAAAAAAAAAAAAAA");
    recorder_expect(&second, EVENT_DISCONNECT, 1);

    CHECK_EQ(sk_socket_release(a), SK_OK);
    CHECK_EQ(sk_socket_release(b), SK_OK);
    CHECK_EQ(sk_loop_group_release(group), SK_OK);
    close(peer_a);
    close(peer_b);
    close(listener);
    recorder_destroy(&first);
    recorder_destroy(&second);
}

void test_release_while_connecting_after_disconnect_after_writing_still_delivers(void) {
    stalled_listener_t stalled;
    recorder_t recorder;
    recorder_init(&recorder);
    sk_socket_t *sock = stalled_connection(&stalled, &recorder);
    size_t length = 256 * 1024;
    unsigned char *data = write_then_disconnect_after_writing(sock, length, 9);
    unsigned char *received = malloc(length + 1);
    CHECK(received != NULL);
    CHECK_EQ(sk_socket_is_connected(sock), 0); /* still connecting */
    CHECK_EQ(sk_socket_release(sock), SK_OK);

    int peer = stalled_listener_admit(&stalled);
    CHECK_EQ(raw_receive_until_eof(peer, received, length + 1), length);
    CHECK(memcmp(received, data, length) == 0);
    /* Released: no callbacks (a watermark may have come before the release). */
    CHECK_EQ(recorder_count(&recorder, EVENT_CONNECT) + recorder_count(&recorder, EVENT_DISCONNECT), 0);
    close(peer);
    free(data);
    free(received);
    stalled_listener_close(&stalled);
    recorder_destroy(&recorder);
}
