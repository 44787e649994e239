/* SPDX-License-Identifier: MIT */
/* Event loops: stopping while other threads use them (wake-ups, bounded stops, teardown:
 * issue 26.3-26.5), calls that wait for them from callbacks without deadlocking (27.4), and
 * a listener's disconnect or release returning with its descriptors closed (27.5). */
#include "test_support.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

/* A flag set once, that other threads wait for with a deadline. */
typedef struct {
    pthread_mutex_t lock;
    pthread_cond_t changed;
    int set;
} flag_t;

#define FLAG_INIT {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0}

static void flag_set(flag_t *flag) {
    pthread_mutex_lock(&flag->lock);
    flag->set = 1;
    pthread_cond_broadcast(&flag->changed);
    pthread_mutex_unlock(&flag->lock);
}

static int flag_is_set(flag_t *flag) {
    pthread_mutex_lock(&flag->lock);
    int set = flag->set;
    pthread_mutex_unlock(&flag->lock);
    return set;
}

/* Waits up to `seconds` (draining `host` meanwhile when it is not NULL); 1 when set. */
static int flag_wait(flag_t *flag, double seconds, sk_callback_queue_t *host) {
    double deadline = now_seconds() + seconds;
    while (!flag_is_set(flag)) {
        if (now_seconds() > deadline) return 0;
        if (host) {
            struct pollfd descriptor = {.fd = sk_callback_queue_fd(host), .events = POLLIN};
            poll(&descriptor, 1, 10);
            sk_callback_queue_drain(host, 0);
            continue;
        }
        pthread_mutex_lock(&flag->lock);
        struct timespec limit;
        clock_gettime(CLOCK_REALTIME, &limit);
        limit.tv_nsec += 10 * 1000 * 1000;
        if (limit.tv_nsec >= 1000000000) {
            limit.tv_sec += 1;
            limit.tv_nsec -= 1000000000;
        }
        if (!flag->set) pthread_cond_timedwait(&flag->changed, &flag->lock, &limit);
        pthread_mutex_unlock(&flag->lock);
    }
    return 1;
}

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

/* The waits yield, so that callers waiting for the loop leave it the processor (two cores
 * here, four threads). */
static void *hammer_perform(void *argument) {
    hammer_t *hammer = argument;
    for (long call = 0; call < hammer->budget && !atomic_load(&hammer->stop); call++) {
        while (atomic_load(&hammer->accepted) - atomic_load(&hammer->ran) > hammer->backlog && !atomic_load(&hammer->stop)) {
            sched_yield();
        }
        if (sk_socket_perform(hammer->sock, hammer->work, hammer) == SK_OK) {
            atomic_fetch_add(&hammer->accepted, 1);
        } else {
            sched_yield();
        }
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

/* Ends the hammer's calls once they have had `calls` accepted since `from`, or after
 * `seconds` at the latest, unless `done` is set first. */
typedef struct {
    hammer_t *hammer;
    long from;
    long calls;
    double seconds;
    flag_t done;
} watchdog_t;

static void *stop_the_callers(void *argument) {
    watchdog_t *watchdog = argument;
    double until = now_seconds() + watchdog->seconds;
    while (!flag_wait(&watchdog->done, 0.01, NULL) && now_seconds() < until &&
           atomic_load(&watchdog->hammer->accepted) - watchdog->from < watchdog->calls) {
    }
    atomic_store(&watchdog->hammer->stop, 1);
    return NULL;
}

/* 26.4: a group's release is not held off by threads that keep queueing work on its socket:
 * calls made after the stop was requested are refused, not run, so the release returns while
 * the callers are still calling. The oracle is a count, not a duration (under valgrind on a
 * loaded machine draining what was queued before the request takes from seconds to a
 * minute): the callers wait while 20,000 of their calls are queued, so a release that refuses
 * new calls returns after at most those 20,000 and a few in flight, and one that goes on
 * accepting sees the callers have 100,000 more accepted, at which point a watchdog stops them
 * and the check below fails. The watchdog's 300 s only keeps a hang from outliving the test.
 *
 * Not under valgrind: it runs one thread at a time, so three callers cannot keep the loop's
 * queue from running empty, and the test passed there with the bound taken out (and took
 * over a minute with it when the callers spun without yielding). It fails without the bound
 * plainly and under sanitizers, where it runs, as does the C API fuzzer's release-under-fire
 * operation. */
void test_loop_group_release_is_not_held_off_by_callers(void) {
    if (getenv("SOCKETKIT_TEST_UNDER_VALGRIND")) {
        printf("SKIP: valgrind runs one thread at a time, so callers cannot keep the loop busy; "
               "it runs in the sanitizer pass\n");
        return;
    }
    sk_loop_group_t *group = NULL;
    CHECK_EQ(sk_loop_group_create(1, &group, NULL), SK_OK);
    sk_socket_t *sock = NULL;
    CHECK_EQ(sk_socket_create(NULL, 0, NULL, NULL, group, &sock, NULL), SK_OK);
    hammer_t hammer;
    hammer_start(&hammer, sock, count_run, 1L << 40, 20000);
    while (atomic_load(&hammer.accepted) < 1000) sched_yield();
    watchdog_t watchdog = {&hammer, atomic_load(&hammer.accepted), 100000, 300, FLAG_INIT};
    pthread_t watcher;
    CHECK(pthread_create(&watcher, NULL, stop_the_callers, &watchdog) == 0);
    CHECK_EQ(sk_loop_group_release(group), SK_OK);
    int callers_were_stopped = atomic_load(&hammer.stop);
    flag_set(&watchdog.done);
    pthread_join(watcher, NULL);
    hammer_stop(&hammer);
    if (callers_were_stopped) {
        fprintf(stderr, "the release returned only once the watchdog stopped the callers (%ld calls accepted meanwhile)\n",
                atomic_load(&hammer.accepted) - watchdog.from);
    }
    CHECK(!callers_were_stopped);
    CHECK_EQ(sk_socket_perform(sock, nothing, NULL), SK_ERR_BAD_CONFIG);
    CHECK_EQ(sk_socket_release(sock), SK_OK);
}

/* A read callback that says it is running, then waits until the test lets it return. */
typedef struct {
    flag_t inside;
    flag_t proceed;
} gate_t;

static void hold_in_read(recorder_t *recorder, sk_socket_t *sock, const void *data, size_t length, long tag) {
    (void)sock;
    (void)data;
    (void)length;
    (void)tag;
    gate_t *gate = recorder->context;
    flag_set(&gate->inside);
    CHECK(flag_wait(&gate->proceed, WAIT_SECONDS, NULL));
}

/* Refused tasks lose nothing: a socket whose callbacks moved from a serial queue to its
 * loop while one ran there still gets the events that arrived meanwhile, did_disconnect
 * among them, although its loop stopped in between (the serial queue hands them to the
 * stopped loop, which refuses them: they run on the serial queue's thread instead). */
void test_events_handed_to_a_stopped_loop_still_arrive(void) {
    recorder_t recorder;
    recorder_init(&recorder);
    gate_t gate = {FLAG_INIT, FLAG_INIT};
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
    CHECK(flag_wait(&gate.inside, WAIT_SECONDS, NULL));
    CHECK_EQ(sk_socket_set_callback_queue(sock, NULL), SK_OK);
    CHECK_EQ(sk_loop_group_release(group), SK_OK); /* did_disconnect waits behind the read */
    flag_set(&gate.proceed);
    recorder_expect(&recorder, EVENT_DISCONNECT, 1);
    CHECK_EQ(recorder_event(&recorder, EVENT_DISCONNECT, 0).error_code, SK_ERR_BAD_CONFIG);
    CHECK_EQ(sk_socket_release(sock), SK_OK);
    CHECK_EQ(sk_callback_queue_release(queue), SK_OK);
    close(peer);
    close(listener);
    recorder_destroy(&recorder);
}

/* A UDP socket's did_send and did_close, as flags. */
typedef struct {
    flag_t sent;
    flag_t closed;
    int close_code;
} udp_ends_t;

static void note_send(sk_udp_socket_t *sock, long tag, void *userdata) {
    (void)sock;
    (void)tag;
    udp_ends_t *ends = userdata;
    flag_set(&ends->sent);
}

static void note_close(sk_udp_socket_t *sock, const sk_error_t *error, void *userdata) {
    (void)sock;
    udp_ends_t *ends = userdata;
    ends->close_code = error ? error->code : 0;
    flag_set(&ends->closed);
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
    udp_ends_t ends = {FLAG_INIT, FLAG_INIT, 0};
    sk_udp_socket_delegate_t delegate = {0};
    delegate.did_send = note_send;
    delegate.did_close = note_close;
    sk_udp_socket_t *sock = NULL;
    CHECK_EQ(sk_udp_socket_create(&delegate, sizeof delegate, &ends, NULL, group, &sock, NULL), SK_OK);
    /* Sent from this thread, the datagram is queued and its timeout arms the socket's timer. */
    CHECK_EQ(sk_udp_socket_send_to_address(sock, "abc", 3, (struct sockaddr *)&address, sizeof address, 5, 7, NULL),
             SK_OK);
    CHECK(flag_wait(&ends.sent, WAIT_SECONDS, NULL));
    CHECK_EQ(sk_loop_group_release(group), SK_OK);
    CHECK(flag_wait(&ends.closed, WAIT_SECONDS, NULL));
    CHECK_EQ(ends.close_code, SK_ERR_CLOSED);
    CHECK_EQ(sk_udp_socket_release(sock), SK_OK);
    char received[8];
    CHECK_EQ(recv(peer, received, sizeof received, 0), 3);
    close(peer);
}

/* Busy for `seconds`: lets the other thread of a race get ahead (not a synchronisation). */
static void spin(double seconds) {
    double until = now_seconds() + seconds;
    while (now_seconds() < until) sched_yield();
}

/* Whether a plain listener can take 127.0.0.1:`port` now. */
static int port_is_free(uint16_t port) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    CHECK(fd >= 0);
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in address = {.sin_family = AF_INET, .sin_port = htons(port),
                                  .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    int free = bind(fd, (struct sockaddr *)&address, sizeof address) == 0 && listen(fd, 1) == 0;
    close(fd);
    return free;
}

static void send_datagram(uint16_t port) {
    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    CHECK(fd >= 0);
    struct sockaddr_in address = {.sin_family = AF_INET, .sin_port = htons(port),
                                  .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    CHECK_EQ(sendto(fd, "d", 1, 0, (struct sockaddr *)&address, sizeof address), 1);
    close(fd);
}

static uint16_t udp_port(sk_udp_socket_t *sock) {
    uint16_t port = 0;
    CHECK_EQ(sk_udp_socket_get_local_port(sock, 0, &port), SK_OK);
    return port;
}

static sk_udp_socket_t *udp_socket(const sk_udp_socket_delegate_t *delegate, void *userdata,
                                   sk_callback_queue_t *queue, sk_loop_group_t *group) {
    sk_udp_socket_t *sock = NULL;
    CHECK_EQ(sk_udp_socket_create(delegate, delegate ? sizeof *delegate : 0, userdata, queue, group, &sock, NULL),
             SK_OK);
    return sock;
}

static sk_socket_t *listener_in(sk_loop_group_t *group, recorder_t *recorder, sk_callback_queue_t *queue,
                                uint16_t *port) {
    sk_socket_delegate_t delegate = recorder_delegate();
    sk_socket_t *listener = NULL;
    CHECK_EQ(sk_socket_create(&delegate, sizeof delegate, recorder, queue, group, &listener, NULL), SK_OK);
    CHECK_EQ(sk_socket_accept_on_interface(listener, "127.0.0.1", 0, NULL), SK_OK);
    CHECK_EQ(sk_socket_get_local_port(listener, port), SK_OK);
    return listener;
}

/* ---- 27.4: the deadlock ----------------------------------------------------------------- */

typedef struct {
    sk_udp_socket_t *udp;
    int loop_goes_second;     /* which side lets the other get ahead */
    flag_t serial_inside, loop_inside, serial_returned, loop_returned;
    int pause_status, set_delegate_status;
} crossing_t;

static void pause_from_serial(sk_udp_socket_t *sock, const void *data, size_t length, const struct sockaddr *address,
                              socklen_t address_length, void *context, void *userdata) {
    (void)data;
    (void)length;
    (void)address;
    (void)address_length;
    (void)context;
    crossing_t *crossing = userdata;
    if (flag_is_set(&crossing->serial_inside)) return;
    flag_set(&crossing->serial_inside);
    CHECK(flag_wait(&crossing->loop_inside, WAIT_SECONDS, NULL));
    if (crossing->loop_goes_second) spin(0.002);
    crossing->pause_status = sk_udp_socket_pause_receiving(sock); /* waits for the loop */
    flag_set(&crossing->serial_returned);
}

static void set_delegate_from_loop(recorder_t *recorder, sk_socket_t *sock, const void *data, size_t length, long tag) {
    (void)sock;
    (void)data;
    (void)length;
    (void)tag;
    crossing_t *crossing = recorder->context;
    flag_set(&crossing->loop_inside);
    if (!crossing->loop_goes_second) spin(0.002);
    sk_udp_socket_delegate_t nobody = {0};
    /* Waits for the UDP callback running on the serial queue. */
    crossing->set_delegate_status = sk_udp_socket_set_delegate(crossing->udp, &nobody, sizeof nobody, NULL);
    flag_set(&crossing->loop_returned);
}

/* A UDP socket's did_receive on a serial queue calls sk_udp_socket_pause_receiving (which
 * waits for the loop) while a TCP did_read on that loop calls sk_udp_socket_set_delegate on
 * the UDP socket (which waits for the running UDP callback): both return, in either order. */
void test_udp_pause_in_a_serial_callback_while_the_loop_sets_its_delegate(void) {
    for (int round = 0; round < 10; round++) {
        sk_loop_group_t *group = NULL;
        CHECK_EQ(sk_loop_group_create(1, &group, NULL), SK_OK);
        sk_callback_queue_t *serial = NULL;
        CHECK_EQ(sk_callback_queue_create_serial("udp-callbacks", &serial, NULL), SK_OK);
        crossing_t crossing = {NULL, round % 2, FLAG_INIT, FLAG_INIT, FLAG_INIT, FLAG_INIT, -1, -1};
        sk_udp_socket_delegate_t delegate = {0};
        delegate.did_receive = pause_from_serial;
        crossing.udp = udp_socket(&delegate, &crossing, serial, group);
        CHECK_EQ(sk_udp_socket_bind_to_port(crossing.udp, "127.0.0.1", 0, NULL), SK_OK);
        CHECK_EQ(sk_udp_socket_begin_receiving(crossing.udp, NULL), SK_OK);

        recorder_t recorder;
        recorder_init(&recorder);
        recorder.context = &crossing;
        recorder.on_read = set_delegate_from_loop;
        sk_socket_delegate_t tcp_delegate = recorder_delegate();
        sk_socket_t *tcp = NULL;
        CHECK_EQ(sk_socket_create(&tcp_delegate, sizeof tcp_delegate, &recorder, NULL, group, &tcp, NULL), SK_OK);
        uint16_t port = 0;
        int listener = raw_listen("127.0.0.1", &port, 8);
        CHECK_EQ(sk_socket_connect_to_host(tcp, "127.0.0.1", port, NULL, 5, NULL), SK_OK);
        int peer = raw_accept(listener);
        CHECK_EQ(sk_socket_read(tcp, 0, -1, 1, NULL), SK_OK);

        /* The datagram first: its callback must be running before the loop thread enters
         * the TCP callback (the loop receives the datagram). */
        send_datagram(udp_port(crossing.udp));
        CHECK(flag_wait(&crossing.serial_inside, WAIT_SECONDS, NULL));
        raw_send(peer, "x", 1);
        int returned = flag_wait(&crossing.serial_returned, 10, NULL) && flag_wait(&crossing.loop_returned, 10, NULL);
        if (!returned) {
            /* Deadlocked: nothing here can be released without hanging. */
            fprintf(stderr, "round %d: the two callbacks deadlocked\n", round);
            abort();
        }
        CHECK_EQ(crossing.pause_status, SK_OK);
        CHECK_EQ(crossing.set_delegate_status, SK_OK);
        CHECK_EQ(sk_socket_release(tcp), SK_OK);
        CHECK_EQ(sk_udp_socket_release(crossing.udp), SK_OK);
        CHECK_EQ(sk_loop_group_release(group), SK_OK);
        CHECK_EQ(sk_callback_queue_release(serial), SK_OK);
        close(peer);
        close(listener);
        recorder_destroy(&recorder);
    }
}

/* ---- 27.4 and 28.1: the matrix ---------------------------------------------------------- */

/* The targets of every waiting call on one loop (the callback's own, or another group's). */
typedef struct {
    sk_loop_group_t *group;
    sk_udp_socket_t *udp;        /* bound */
    sk_socket_t *listener;       /* disconnected */
    uint16_t listener_port;
    sk_socket_t *fresh;          /* made to accept */
    sk_socket_t *connecting;     /* made to connect */
    sk_socket_t *connected;      /* disconnected */
    sk_socket_t *draining;       /* disconnected after writing */
    sk_socket_t *configured;     /* a setter */
    sk_socket_t *delegated;      /* given a delegate */
    sk_socket_t *adopted;        /* made from `pair[0]` */
    int pair[2];
} targets_t;

/* What the callbacks of the matrix call, and what did not have its effect. */
typedef struct {
    targets_t targets[2];        /* the callback's socket's loop, another group's */
    int peer;                    /* a plain listener the connects reach */
    uint16_t peer_port;
    recorder_t *unused;
    uint16_t self_port;
    char failures[2048];
    flag_t done;
} matrix_t;

static void failed(matrix_t *matrix, const char *what, const char *where) {
    size_t used = strlen(matrix->failures);
    snprintf(matrix->failures + used, sizeof matrix->failures - used, "%s (%s); ", what, where);
}

static sk_socket_t *target_socket(targets_t *targets, recorder_t *recorder) {
    sk_socket_delegate_t delegate = recorder_delegate();
    sk_socket_t *sock = NULL;
    CHECK_EQ(sk_socket_create(&delegate, sizeof delegate, recorder, NULL, targets->group, &sock, NULL), SK_OK);
    return sock;
}

static void targets_make(targets_t *targets, sk_loop_group_t *group, matrix_t *matrix) {
    memset(targets, 0, sizeof *targets);
    targets->group = group;
    targets->udp = udp_socket(NULL, NULL, NULL, group);
    targets->listener = listener_in(group, matrix->unused, NULL, &targets->listener_port);
    targets->fresh = target_socket(targets, matrix->unused);
    targets->connecting = target_socket(targets, matrix->unused);
    targets->connected = target_socket(targets, matrix->unused);
    CHECK_EQ(sk_socket_connect_to_host(targets->connected, "127.0.0.1", matrix->peer_port, NULL, 10, NULL), SK_OK);
    targets->draining = target_socket(targets, matrix->unused);
    CHECK_EQ(sk_socket_connect_to_host(targets->draining, "127.0.0.1", matrix->peer_port, NULL, 10, NULL), SK_OK);
    targets->configured = target_socket(targets, matrix->unused);
    targets->delegated = target_socket(targets, matrix->unused);
    CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, targets->pair), 0);
}

static void targets_release(targets_t *targets) {
    sk_socket_t *sockets[] = {targets->listener, targets->fresh, targets->connecting, targets->connected,
                              targets->draining, targets->configured, targets->delegated, targets->adopted};
    for (size_t i = 0; i < sizeof sockets / sizeof *sockets; i++) {
        if (sockets[i]) CHECK_EQ(sk_socket_release(sockets[i]), SK_OK);
    }
    if (!targets->adopted) close(targets->pair[0]);
    close(targets->pair[1]);
    CHECK_EQ(sk_udp_socket_release(targets->udp), SK_OK);
}

/* Every call that waits for a loop (or for a callback, set_delegate), on sockets of the
 * callback's loop and of another group: each returns with its effect. */
static void call_the_others(matrix_t *matrix) {
    for (int index = 0; index < 2; index++) {
        targets_t *t = &matrix->targets[index];
        const char *where = index == 0 ? "same loop" : "other loop";
        uint16_t port = 0;
        if (sk_udp_socket_bind_to_port(t->udp, "127.0.0.1", 0, NULL) != SK_OK ||
            sk_udp_socket_get_local_port(t->udp, 0, &port) != SK_OK || port == 0) {
            failed(matrix, "UDP bind", where);
        }
        CHECK_EQ(sk_socket_disconnect(t->listener), SK_OK);
        if (!port_is_free(t->listener_port)) failed(matrix, "disconnect a listener", where);
        if (sk_socket_accept_on_interface(t->fresh, "127.0.0.1", 0, NULL) != SK_OK || sk_socket_is_accepting(t->fresh) != 1) {
            failed(matrix, "accept", where);
        }
        if (sk_socket_connect_to_host(t->connecting, "127.0.0.1", matrix->peer_port, NULL, 10, NULL) != SK_OK ||
            sk_socket_read(t->connecting, 0, -1, 1, NULL) != SK_OK) { /* taken: published on return */
            failed(matrix, "connect", where);
        }
        CHECK_EQ(sk_socket_disconnect(t->connected), SK_OK);
        if (sk_socket_is_disconnected(t->connected) != 1 || sk_socket_read(t->connected, 0, -1, 1, NULL) != SK_ERR_BAD_CONFIG) {
            failed(matrix, "disconnect a connection", where);
        }
        CHECK_EQ(sk_socket_disconnect_after_writing(t->draining), SK_OK);
        if (sk_socket_write(t->draining, "x", 1, -1, 1, NULL) != SK_ERR_BAD_CONFIG) {
            failed(matrix, "disconnect after writing", where);
        }
        if (sk_socket_set_no_delay(t->configured, 0) != SK_OK || sk_socket_get_no_delay(t->configured) != 0) {
            failed(matrix, "a setter", where);
        }
        sk_socket_delegate_t delegate = recorder_delegate();
        if (sk_socket_set_delegate(t->delegated, &delegate, sizeof delegate, matrix->unused) != SK_OK) {
            failed(matrix, "set the delegate", where);
        }
        if (sk_socket_create_from_fd(t->pair[0], &delegate, sizeof delegate, matrix->unused, NULL, t->group, &t->adopted,
                                     NULL) != SK_OK || sk_socket_is_connected(t->adopted) != 1) {
            failed(matrix, "adopt a descriptor", where);
        }
    }
}

/* The waiting calls a TCP socket makes on itself from its own callback, one after the
 * other (each leaves the state the next one needs). */
static void call_itself(matrix_t *matrix, sk_socket_t *sock) {
    if (sk_socket_is_accepting(sock) == 1) {
        CHECK_EQ(sk_socket_disconnect(sock), SK_OK);
        if (!port_is_free(matrix->self_port)) failed(matrix, "disconnect a listener", "same socket");
    } else {
        if (sk_socket_set_no_delay(sock, 0) != SK_OK || sk_socket_get_no_delay(sock) != 0) {
            failed(matrix, "a setter", "same socket");
        }
        CHECK_EQ(sk_socket_disconnect_after_writing(sock), SK_OK);
        if (sk_socket_write(sock, "x", 1, -1, 1, NULL) != SK_ERR_BAD_CONFIG) {
            failed(matrix, "disconnect after writing", "same socket");
        }
        CHECK_EQ(sk_socket_disconnect(sock), SK_OK);
        if (sk_socket_is_disconnected(sock) != 1) failed(matrix, "disconnect a connection", "same socket");
    }
    if (sk_socket_connect_to_host(sock, "127.0.0.1", matrix->peer_port, NULL, 10, NULL) != SK_OK ||
        sk_socket_read(sock, 0, -1, 1, NULL) != SK_OK) {
        failed(matrix, "connect", "same socket");
    }
    CHECK_EQ(sk_socket_disconnect(sock), SK_OK);
    uint16_t port = 0;
    if (sk_socket_accept_on_interface(sock, "127.0.0.1", 0, NULL) != SK_OK ||
        sk_socket_get_local_port(sock, &port) != SK_OK || port_is_free(port)) {
        failed(matrix, "accept", "same socket");
    }
    CHECK_EQ(sk_socket_disconnect(sock), SK_OK);
    if (!port_is_free(port)) failed(matrix, "disconnect a listener begun in the callback", "same socket");
}

static void matrix_receive(sk_udp_socket_t *sock, const void *data, size_t length, const struct sockaddr *address,
                           socklen_t address_length, void *context, void *userdata) {
    (void)data;
    (void)length;
    (void)address;
    (void)address_length;
    (void)context;
    matrix_t *matrix = userdata;
    if (flag_is_set(&matrix->done)) return;
    if (sk_udp_socket_set_multicast_ttl(sock, 7, NULL) != SK_OK) failed(matrix, "UDP option", "same socket");
    CHECK_EQ(sk_udp_socket_close(sock), SK_OK);
    if (sk_udp_socket_is_closed(sock) != 1) failed(matrix, "UDP close", "same socket");
    if (sk_udp_socket_bind_to_port(sock, "127.0.0.1", 0, NULL) != SK_OK) failed(matrix, "UDP bind", "same socket");
    call_the_others(matrix);
    flag_set(&matrix->done);
}

static void matrix_accept(recorder_t *recorder, sk_socket_t *listener, sk_socket_t *new_socket) {
    (void)new_socket;
    matrix_t *matrix = recorder->context;
    if (flag_is_set(&matrix->done)) return;
    call_itself(matrix, listener);
    call_the_others(matrix);
    flag_set(&matrix->done);
}

static void matrix_read(recorder_t *recorder, sk_socket_t *sock, const void *data, size_t length, long tag) {
    (void)data;
    (void)length;
    (void)tag;
    matrix_t *matrix = recorder->context;
    if (flag_is_set(&matrix->done)) return;
    call_itself(matrix, sock);
    call_the_others(matrix);
    flag_set(&matrix->done);
}

enum { FROM_UDP, FROM_LISTENER, FROM_CONNECTION };

static void matrix_round(sk_callback_queue_t *queue, int source_kind) {
    sk_loop_group_t *group = NULL; /* the callback's socket's loop */
    CHECK_EQ(sk_loop_group_create(1, &group, NULL), SK_OK);
    sk_loop_group_t *other = NULL;
    CHECK_EQ(sk_loop_group_create(1, &other, NULL), SK_OK);
    recorder_t unused;
    recorder_init(&unused);
    matrix_t matrix;
    memset(&matrix, 0, sizeof matrix);
    pthread_mutex_init(&matrix.done.lock, NULL);
    pthread_cond_init(&matrix.done.changed, NULL);
    matrix.unused = &unused;
    matrix.peer = raw_listen("127.0.0.1", &matrix.peer_port, 64);
    targets_make(&matrix.targets[0], group, &matrix);
    targets_make(&matrix.targets[1], other, &matrix);
    recorder_t recorder;
    recorder_init(&recorder);
    recorder.context = &matrix;
    sk_udp_socket_t *udp_source = NULL;
    sk_socket_t *tcp_source = NULL;
    int client = -1, source_listener = -1;
    sk_callback_queue_t *host = queue && sk_callback_queue_fd(queue) >= 0 ? queue : NULL;
    if (source_kind == FROM_UDP) {
        sk_udp_socket_delegate_t delegate = {0};
        delegate.did_receive = matrix_receive;
        udp_source = udp_socket(&delegate, &matrix, queue, group);
        CHECK_EQ(sk_udp_socket_bind_to_port(udp_source, "127.0.0.1", 0, NULL), SK_OK);
        CHECK_EQ(sk_udp_socket_begin_receiving(udp_source, NULL), SK_OK);
        send_datagram(udp_port(udp_source));
    } else if (source_kind == FROM_LISTENER) {
        recorder.on_accept = matrix_accept;
        tcp_source = listener_in(group, &recorder, queue, &matrix.self_port);
        client = raw_connect("127.0.0.1", matrix.self_port);
    } else {
        recorder.on_read = matrix_read;
        uint16_t port = 0;
        source_listener = raw_listen("127.0.0.1", &port, 8); /* the targets' connections wait at the peer */
        sk_socket_delegate_t delegate = recorder_delegate();
        CHECK_EQ(sk_socket_create(&delegate, sizeof delegate, &recorder, queue, group, &tcp_source, NULL), SK_OK);
        CHECK_EQ(sk_socket_connect_to_host(tcp_source, "127.0.0.1", port, NULL, 10, NULL), SK_OK);
        CHECK_EQ(sk_socket_read(tcp_source, 0, -1, 1, NULL), SK_OK);
        client = raw_accept(source_listener);
        CHECK_EQ(write(client, "x", 1), 1);
    }
    CHECK(flag_wait(&matrix.done, WAIT_SECONDS, host));
    if (matrix.failures[0]) fprintf(stderr, "queue %p, source %d: %s\n", (void *)queue, source_kind, matrix.failures);
    CHECK_EQ(matrix.failures[0], 0);
    if (udp_source) CHECK_EQ(sk_udp_socket_release(udp_source), SK_OK);
    if (tcp_source) CHECK_EQ(sk_socket_release(tcp_source), SK_OK);
    if (client >= 0) close(client);
    if (source_listener >= 0) close(source_listener);
    targets_release(&matrix.targets[0]);
    targets_release(&matrix.targets[1]);
    close(matrix.peer);
    CHECK_EQ(sk_loop_group_release(group), SK_OK);
    CHECK_EQ(sk_loop_group_release(other), SK_OK);
    recorder_destroy(&recorder);
    recorder_destroy(&unused);
}

/* Every waiting call (UDP bind, options and close; TCP accept, connect, adoption, the
 * disconnects, a setter; the delegate setter) made from a UDP callback, a listener's
 * callback and a connection's callback, on each kind of callback queue, against the
 * calling socket, sockets on its loop and sockets of another group: each returns with its
 * effect done. */
void test_waiting_calls_from_callbacks_on_each_queue_kind(void) {
    sk_callback_queue_t *serial = NULL;
    CHECK_EQ(sk_callback_queue_create_serial("matrix", &serial, NULL), SK_OK);
    sk_callback_queue_t *host = NULL;
    CHECK_EQ(sk_callback_queue_create_host(&host, NULL), SK_OK);
    sk_callback_queue_t *queues[3] = {NULL, serial, host};
    for (int kind = 0; kind < 3; kind++) {
        matrix_round(queues[kind], FROM_UDP);
        matrix_round(queues[kind], FROM_LISTENER);
        matrix_round(queues[kind], FROM_CONNECTION);
    }
    CHECK_EQ(sk_callback_queue_release(serial), SK_OK);
    CHECK_EQ(sk_callback_queue_release(host), SK_OK);
}

/* ---- 27.5: a listener's disconnect or release returns with its descriptors closed ------- */

/* Listening again on the port right after sk_socket_disconnect(), or sk_socket_release(),
 * never finds it in use (IPv4 and IPv6: "localhost"). */
void test_listener_port_is_free_when_disconnect_returns(void) {
    recorder_t recorder;
    recorder_init(&recorder);
    sk_socket_t *again = recorded_socket(&recorder, NULL);
    uint16_t port = 0;
    for (int round = 0; round < 200; round++) {
        sk_socket_t *listener = recorded_socket(&recorder, NULL);
        sk_error_t error;
        CHECK_EQ(sk_socket_accept_on_interface(listener, "localhost", port, &error), SK_OK);
        CHECK_EQ(sk_socket_get_local_port(listener, &port), SK_OK);
        if (round % 2) {
            CHECK_EQ(sk_socket_disconnect(listener), SK_OK);
            CHECK_EQ(sk_socket_release(listener), SK_OK);
        } else {
            CHECK_EQ(sk_socket_release(listener), SK_OK);
        }
        int status = sk_socket_accept_on_interface(again, "localhost", port, &error);
        if (status != SK_OK) fprintf(stderr, "round %d: %s\n", round, error.message);
        CHECK_EQ(status, SK_OK);
        CHECK_EQ(sk_socket_disconnect(again), SK_OK);
    }
    CHECK_EQ(sk_socket_release(again), SK_OK);
    recorder_destroy(&recorder);
}

static int connect_unix(const char *path) {
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    CHECK(fd >= 0);
    struct sockaddr_un address = {.sun_family = AF_UNIX};
    strncpy(address.sun_path, path, sizeof address.sun_path - 1);
    if (connect(fd, (struct sockaddr *)&address, sizeof address) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

static void unix_path(char *path, size_t capacity, const char *name) {
    snprintf(path, capacity, "/tmp/sk-c-%d-%s.sock", (int)getpid(), name);
    unlink(path);
}

/* The same for a Unix-domain path: the socket file is gone when disconnect (or release)
 * returns, and a new listener at the path stays reachable. */
void test_listener_unix_path_is_free_when_disconnect_returns(void) {
    char path[96];
    unix_path(path, sizeof path, "relisten");
    recorder_t recorder;
    recorder_init(&recorder);
    for (int round = 0; round < 200; round++) {
        sk_socket_t *old = recorded_socket(&recorder, NULL);
        CHECK_EQ(sk_socket_accept_on_unix_path(old, path, NULL), SK_OK);
        if (round % 2) {
            CHECK_EQ(sk_socket_disconnect(old), SK_OK);
        }
        CHECK_EQ(sk_socket_release(old), SK_OK);
        struct stat status;
        CHECK(lstat(path, &status) != 0);
        sk_socket_t *new_listener = recorded_socket(&recorder, NULL);
        CHECK_EQ(sk_socket_accept_on_unix_path(new_listener, path, NULL), SK_OK);
        int client = connect_unix(path);
        if (client < 0) fprintf(stderr, "round %d: the new listener is not reachable\n", round);
        CHECK(client >= 0);
        close(client);
        CHECK_EQ(sk_socket_release(new_listener), SK_OK);
    }
    recorder_destroy(&recorder);
}

/* A listener removes its socket file only while it is still the one its bind made: a newer
 * listener that replaced it at the same path keeps its file when the older one closes. */
void test_listener_leaves_a_newer_listeners_file_alone(void) {
    char path[96];
    unix_path(path, sizeof path, "replaced");
    recorder_t old_recorder, recorder;
    recorder_init(&old_recorder);
    recorder_init(&recorder);
    sk_socket_t *old = recorded_socket(&old_recorder, NULL);
    CHECK_EQ(sk_socket_accept_on_unix_path(old, path, NULL), SK_OK);
    sk_socket_t *new_listener = recorded_socket(&recorder, NULL);
    CHECK_EQ(sk_socket_accept_on_unix_path(new_listener, path, NULL), SK_OK); /* replaces the file */
    CHECK_EQ(sk_socket_disconnect(old), SK_OK);
    recorder_expect(&old_recorder, EVENT_DISCONNECT, 1); /* its close (and unlink) are done */
    int client = connect_unix(path);
    CHECK(client >= 0);
    recorder_expect(&recorder, EVENT_ACCEPT, 1);
    close(client);
    CHECK_EQ(sk_socket_release(old), SK_OK);
    CHECK_EQ(sk_socket_release(new_listener), SK_OK);
    struct stat status;
    CHECK(lstat(path, &status) != 0);
    recorder_destroy(&old_recorder);
    recorder_destroy(&recorder);
}

static int disconnect_in_hook(sk_socket_t *listener, const struct sockaddr *address, socklen_t length,
                              void *userdata) {
    (void)address;
    (void)length;
    (void)userdata;
    CHECK_EQ(sk_socket_disconnect(listener), SK_OK);
    return -1;
}

/* The new-connection hook may disconnect its listener (it used to hang: the disconnect
 * waited for the callback gate its own thread held): the connection asked about is closed
 * unserved, and no did_accept follows the listener's did_disconnect. */
void test_listener_disconnected_in_its_new_connection_hook(void) {
    recorder_t recorder;
    recorder_init(&recorder);
    sk_loop_group_t *group = NULL; /* never released on failure: its loop may be stuck */
    CHECK_EQ(sk_loop_group_create(1, &group, NULL), SK_OK);
    sk_socket_delegate_t delegate = recorder_delegate();
    delegate.new_socket_loop_for_connection = disconnect_in_hook;
    sk_socket_t *listener = NULL;
    CHECK_EQ(sk_socket_create(&delegate, sizeof delegate, &recorder, NULL, group, &listener, NULL), SK_OK);
    CHECK_EQ(sk_socket_accept_on_interface(listener, "127.0.0.1", 0, NULL), SK_OK);
    uint16_t port = 0;
    CHECK_EQ(sk_socket_get_local_port(listener, &port), SK_OK);
    int client = raw_connect("127.0.0.1", port);
    if (!recorder_wait(&recorder, EVENT_DISCONNECT, 1, 10)) {
        fprintf(stderr, "the disconnect made in the hook did not finish\n");
        abort();
    }
    char nothing[4];
    CHECK_EQ(raw_receive_until_eof(client, nothing, sizeof nothing), 0);
    CHECK_EQ(recorder_count(&recorder, EVENT_ACCEPT), 0);
    close(client);
    CHECK_EQ(sk_socket_release(listener), SK_OK);
    CHECK_EQ(sk_loop_group_release(group), SK_OK);
    recorder_destroy(&recorder);
}
