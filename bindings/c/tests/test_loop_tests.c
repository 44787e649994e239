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

