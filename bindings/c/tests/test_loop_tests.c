/* Event loops stopping while other threads use them: wake-ups, bounded stops, teardown. */
#include "test_support.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static void nothing(const sk_socket_descriptors_t *descriptors, void *context) {
    (void)descriptors;
    (void)context;
}


/* Threads that call sk_socket_perform on one socket as fast as they can. */
typedef struct {
    sk_socket_t *sock;
    void (*work)(const sk_socket_descriptors_t *descriptors, void *context);
    long budget;  /* calls per thread */
    long backlog; /* calls queued and not yet run, at most */
    atomic_int stop;
    atomic_long accepted;
    atomic_long ran;
    pthread_t threads[3];
} hammer_t;

static void *hammer_perform(void *argument) {
    hammer_t *hammer = argument;
    for (long call = 0; call < hammer->budget && !atomic_load(&hammer->stop); call++) {
        while (atomic_load(&hammer->accepted) - atomic_load(&hammer->ran) > hammer->backlog && !atomic_load(&hammer->stop)) {
        }
        if (sk_socket_perform(hammer->sock, hammer->work, hammer) == SK_OK) atomic_fetch_add(&hammer->accepted, 1);
    }
    return NULL;
}

static void hammer_start(hammer_t *hammer, sk_socket_t *sock, void (*work)(const sk_socket_descriptors_t *, void *),
                         long budget, long backlog) {
    hammer->sock = sock;
    hammer->work = work;
    hammer->budget = budget;
    hammer->backlog = backlog;
    atomic_init(&hammer->stop, 0);
    atomic_init(&hammer->accepted, 0);
    atomic_init(&hammer->ran, 0);
    for (int i = 0; i < 3; i++) CHECK(pthread_create(&hammer->threads[i], NULL, hammer_perform, hammer) == 0);
}

static void hammer_stop(hammer_t *hammer) {
    atomic_store(&hammer->stop, 1);
    for (int i = 0; i < 3; i++) pthread_join(hammer->threads[i], NULL);
}

/* A thread that keeps taking fresh descriptor numbers (socket pairs) and checks that nothing
 * it did not write arrives on them: a wake-up written to a closed loop's eventfd number
 * would land in one of them. */
typedef struct {
    atomic_int stop;
    atomic_long stray_bytes;
    pthread_t thread;
} reuser_t;

static void *reuse_descriptors(void *argument) {
    reuser_t *reuser = argument;
    while (!atomic_load(&reuser->stop)) {
        int pairs[8][2];
        int made = 0;
        for (; made < 8; made++) {
            if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, pairs[made]) != 0) break;
        }
        for (int i = 0; i < made; i++) {
            for (int side = 0; side < 2; side++) {
                char scratch[64];
                ssize_t count = recv(pairs[i][side], scratch, sizeof scratch, MSG_DONTWAIT);
                if (count > 0) atomic_fetch_add(&reuser->stray_bytes, count);
            }
            close(pairs[i][0]);
            close(pairs[i][1]);
        }
    }
    return NULL;
}

/* 26.3: a thread that decided to wake a loop must never write to a descriptor the loop has
 * closed meanwhile (the number may belong to someone else by then: stray bytes there, or
 * SIGPIPE for a pipe). Groups are released while three threads queue work on one of their
 * sockets and a fourth keeps reusing descriptor numbers. */
void test_wake_up_never_writes_to_a_closed_loop_descriptor(void) {
    reuser_t reuser;
    atomic_init(&reuser.stop, 0);
    atomic_init(&reuser.stray_bytes, 0);
    CHECK(pthread_create(&reuser.thread, NULL, reuse_descriptors, &reuser) == 0);
    double until = now_seconds() + 4;
    int rounds = 0;
    while (now_seconds() < until && atomic_load(&reuser.stray_bytes) == 0) {
        sk_loop_group_t *group = NULL;
        CHECK_EQ(sk_loop_group_create(1, &group, NULL), SK_OK);
        sk_socket_t *sock = NULL;
        CHECK_EQ(sk_socket_create(NULL, 0, NULL, NULL, group, &sock, NULL), SK_OK);
        hammer_t hammer;
        hammer_start(&hammer, sock, nothing, 2000, 1L << 40);
        CHECK_EQ(sk_loop_group_release(group), SK_OK);
        hammer_stop(&hammer);
        CHECK_EQ(sk_socket_release(sock), SK_OK);
        rounds++;
    }
    atomic_store(&reuser.stop, 1);
    pthread_join(reuser.thread, NULL);
    if (atomic_load(&reuser.stray_bytes) != 0) {
        fprintf(stderr, "%ld stray bytes after %d rounds\n", atomic_load(&reuser.stray_bytes), rounds);
    }
    CHECK_EQ(atomic_load(&reuser.stray_bytes), 0);
}

/* Work that takes the loop a little longer than queueing it takes a caller, so that three
 * callers keep its task queue from running empty. */
static void count_run(const sk_socket_descriptors_t *descriptors, void *context) {
    (void)descriptors;
    hammer_t *hammer = context;
    double until = now_seconds() + 0.000002;
    while (now_seconds() < until) {
    }
    atomic_fetch_add(&hammer->ran, 1);
}

/* Ends the hammer's calls once `deadline` passes, unless the test said it is done first. */
typedef struct {
    hammer_t *hammer;
    double deadline;
    pthread_mutex_t lock;
    pthread_cond_t changed;
    int done;
} watchdog_t;

static void *stop_at_deadline(void *argument) {
    watchdog_t *watchdog = argument;
    pthread_mutex_lock(&watchdog->lock);
    while (!watchdog->done && now_seconds() < watchdog->deadline) {
        struct timespec limit;
        clock_gettime(CLOCK_REALTIME, &limit);
        limit.tv_nsec += 10 * 1000 * 1000;
        if (limit.tv_nsec >= 1000000000) {
            limit.tv_sec += 1;
            limit.tv_nsec -= 1000000000;
        }
        pthread_cond_timedwait(&watchdog->changed, &watchdog->lock, &limit);
    }
    pthread_mutex_unlock(&watchdog->lock);
    atomic_store(&watchdog->hammer->stop, 1);
    return NULL;
}

/* 26.4: a group's release finishes in bounded time although threads keep queueing work on
 * its socket: calls made after the stop was requested are refused, not run. The callers
 * wait while 20,000 of their calls are queued, so that the queue does not grow unbounded. */
void test_loop_group_release_is_not_held_off_by_callers(void) {
    sk_loop_group_t *group = NULL;
    CHECK_EQ(sk_loop_group_create(1, &group, NULL), SK_OK);
    sk_socket_t *sock = NULL;
    CHECK_EQ(sk_socket_create(NULL, 0, NULL, NULL, group, &sock, NULL), SK_OK);
    hammer_t hammer;
    hammer_start(&hammer, sock, count_run, 1L << 40, 20000);
    while (atomic_load(&hammer.accepted) < 1000) {
    }
    /* Without a bound the release would wait as long as the calls go on: a watchdog ends
     * them after 4 s, so the check below fails instead of the test hanging. */
    double began = now_seconds();
    watchdog_t watchdog = {&hammer, began + 4, PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0};
    pthread_t watcher;
    CHECK(pthread_create(&watcher, NULL, stop_at_deadline, &watchdog) == 0);
    CHECK_EQ(sk_loop_group_release(group), SK_OK);
    double elapsed = now_seconds() - began;
    pthread_mutex_lock(&watchdog.lock);
    watchdog.done = 1;
    pthread_cond_signal(&watchdog.changed);
    pthread_mutex_unlock(&watchdog.lock);
    pthread_join(watcher, NULL);
    hammer_stop(&hammer);
    if (elapsed >= 3) fprintf(stderr, "the release took %.1f s\n", elapsed);
    CHECK(elapsed < 3);
    CHECK_EQ(sk_socket_perform(sock, nothing, NULL), SK_ERR_BAD_CONFIG);
    CHECK_EQ(sk_socket_release(sock), SK_OK);
}

/* A read callback that says it is running, then waits until the test lets it return. */
typedef struct {
    pthread_mutex_t lock;
    pthread_cond_t changed;
    int inside;
    int proceed;
} gate_t;

static void hold_in_read(recorder_t *recorder, sk_socket_t *sock, const void *data, size_t length, long tag) {
    (void)sock;
    (void)data;
    (void)length;
    (void)tag;
    gate_t *gate = recorder->context;
    pthread_mutex_lock(&gate->lock);
    gate->inside = 1;
    pthread_cond_broadcast(&gate->changed);
    while (!gate->proceed) pthread_cond_wait(&gate->changed, &gate->lock);
    pthread_mutex_unlock(&gate->lock);
}

/* Refused tasks lose nothing: a socket whose callbacks moved from a serial queue to its
 * loop while one ran there still gets the events that arrived meanwhile, did_disconnect
 * among them, although its loop stopped in between (the serial queue hands them to the
 * stopped loop, which refuses them: they run on the serial queue's thread instead). */
void test_events_handed_to_a_stopped_loop_still_arrive(void) {
    recorder_t recorder;
    recorder_init(&recorder);
    gate_t gate = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0};
    recorder.context = &gate;
    recorder.on_read = hold_in_read;
    sk_loop_group_t *group = NULL;
    CHECK_EQ(sk_loop_group_create(1, &group, NULL), SK_OK);
    sk_callback_queue_t *queue = NULL;
    CHECK_EQ(sk_callback_queue_create_serial("moving-away", &queue, NULL), SK_OK);
    sk_socket_delegate_t delegate = recorder_delegate();
    sk_socket_t *sock = NULL;
    CHECK_EQ(sk_socket_create(&delegate, sizeof delegate, &recorder, queue, group, &sock, NULL), SK_OK);
    uint16_t port = 0;
    int listener = raw_listen("127.0.0.1", &port, 8);
    CHECK_EQ(sk_socket_connect_to_host(sock, "127.0.0.1", port, NULL, 5, NULL), SK_OK);
    int peer = raw_accept(listener);
    CHECK_EQ(sk_socket_read(sock, 0, -1, 1, NULL), SK_OK);
    raw_send(peer, "x", 1);
    pthread_mutex_lock(&gate.lock);
    while (!gate.inside) pthread_cond_wait(&gate.changed, &gate.lock);
    pthread_mutex_unlock(&gate.lock);
    CHECK_EQ(sk_socket_set_callback_queue(sock, NULL), SK_OK);
    CHECK_EQ(sk_loop_group_release(group), SK_OK); /* did_disconnect waits behind the read */
    pthread_mutex_lock(&gate.lock);
    gate.proceed = 1;
    pthread_cond_broadcast(&gate.changed);
    pthread_mutex_unlock(&gate.lock);
    recorder_expect(&recorder, EVENT_DISCONNECT, 1);
    CHECK_EQ(recorder_event(&recorder, EVENT_DISCONNECT, 0).error_code, SK_ERR_BAD_CONFIG);
    CHECK_EQ(sk_socket_release(sock), SK_OK);
    CHECK_EQ(sk_callback_queue_release(queue), SK_OK);
    close(peer);
    close(listener);
    recorder_destroy(&recorder);
}

/* Counts a UDP socket's did_send and did_close callbacks. */
typedef struct {
    pthread_mutex_t lock;
    pthread_cond_t changed;
    int sent;
    int closed;
    int close_code;
} udp_counts_t;

static void count_send(sk_udp_socket_t *sock, long tag, void *userdata) {
    (void)sock;
    (void)tag;
    udp_counts_t *counts = userdata;
    pthread_mutex_lock(&counts->lock);
    counts->sent++;
    pthread_cond_broadcast(&counts->changed);
    pthread_mutex_unlock(&counts->lock);
}

static void count_close(sk_udp_socket_t *sock, const sk_error_t *error, void *userdata) {
    (void)sock;
    udp_counts_t *counts = userdata;
    pthread_mutex_lock(&counts->lock);
    counts->closed++;
    counts->close_code = error ? error->code : 0;
    pthread_cond_broadcast(&counts->changed);
    pthread_mutex_unlock(&counts->lock);
}

/* Waits until *field reaches `value` (WAIT_SECONDS at most). */
static int wait_count(udp_counts_t *counts, const int *field, int value) {
    double deadline = now_seconds() + WAIT_SECONDS;
    pthread_mutex_lock(&counts->lock);
    while (*field < value && now_seconds() < deadline) {
        struct timespec limit;
        clock_gettime(CLOCK_REALTIME, &limit);
        limit.tv_nsec += 50 * 1000 * 1000;
        if (limit.tv_nsec >= 1000000000) {
            limit.tv_sec += 1;
            limit.tv_nsec -= 1000000000;
        }
        pthread_cond_timedwait(&counts->changed, &counts->lock, &limit);
    }
    int reached = *field >= value;
    pthread_mutex_unlock(&counts->lock);
    return reached;
}

/* 26.5: a UDP socket that had a send timer, released after its loop group, cancelled the
 * timer in the stopped loop's timer heap from the releasing thread (a trap in debug and
 * sanitizer builds of the library). Its release now touches nothing of the loop. */
void test_udp_socket_with_a_send_timer_released_after_its_group(void) {
    int peer = socket(AF_INET, SOCK_DGRAM, 0);
    CHECK(peer >= 0);
    struct sockaddr_in address = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    CHECK_EQ(bind(peer, (struct sockaddr *)&address, sizeof address), 0);
    socklen_t length = sizeof address;
    CHECK_EQ(getsockname(peer, (struct sockaddr *)&address, &length), 0);

    sk_loop_group_t *group = NULL;
    CHECK_EQ(sk_loop_group_create(1, &group, NULL), SK_OK);
    udp_counts_t counts = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0, 0};
    sk_udp_socket_delegate_t delegate = {0};
    delegate.did_send = count_send;
    delegate.did_close = count_close;
    sk_udp_socket_t *sock = NULL;
    CHECK_EQ(sk_udp_socket_create(&delegate, sizeof delegate, &counts, NULL, group, &sock, NULL), SK_OK);
    /* Sent from this thread, the datagram is queued and its timeout arms the socket's timer. */
    CHECK_EQ(sk_udp_socket_send_to_address(sock, "abc", 3, (struct sockaddr *)&address, sizeof address, 5, 7, NULL),
             SK_OK);
    CHECK(wait_count(&counts, &counts.sent, 1));
    CHECK_EQ(sk_loop_group_release(group), SK_OK);
    CHECK(wait_count(&counts, &counts.closed, 1));
    CHECK_EQ(counts.close_code, SK_ERR_CLOSED);
    CHECK_EQ(sk_udp_socket_release(sock), SK_OK);
    char received[8];
    CHECK_EQ(recv(peer, received, sizeof received, 0), 3);
    close(peer);
}
