/* SPDX-License-Identifier: MIT */
/*
 * test_support.h - the C test suite's helpers: checks that abort with a location, a
 * delegate that records every callback and lets a test wait for what it expects (a
 * condition variable with a deadline: no sleeps), and plain blocking peers made with the
 * system calls directly.
 *
 * Each test is a function `void test_NAME(void)` listed in test_list.h; the runner starts
 * every test in a process of its own, with a timeout, under valgrind and sanitizers.
 */
#ifndef TEST_SUPPORT_H
#define TEST_SUPPORT_H

#include <pthread.h>
#include <sys/types.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <socketkit.h>

#define CHECK(condition)                                                                     \
    do {                                                                                     \
        if (!(condition)) {                                                                  \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #condition);   \
            abort();                                                                         \
        }                                                                                    \
    } while (0)

#define CHECK_EQ(actual, expected)                                                           \
    do {                                                                                     \
        long long check_actual_ = (long long)(actual);                                       \
        long long check_expected_ = (long long)(expected);                                   \
        if (check_actual_ != check_expected_) {                                              \
            fprintf(stderr, "%s:%d: %s is %lld, expected %s (%lld)\n", __FILE__, __LINE__,  \
                    #actual, check_actual_, #expected, check_expected_);                     \
            abort();                                                                         \
        }                                                                                    \
    } while (0)

#define CHECK_STR(actual, expected)                                                          \
    do {                                                                                     \
        const char *check_actual_ = (actual);                                                \
        const char *check_expected_ = (expected);                                            \
        if (strcmp(check_actual_, check_expected_) != 0) {                                   \
            fprintf(stderr, "%s:%d: %s is \"%s\", expected \"%s\"\n", __FILE__, __LINE__,    \
                    #actual, check_actual_, check_expected_);                                \
            abort();                                                                         \
        }                                                                                    \
    } while (0)

/* Checks a text getter (the header's Getters rule: snprintf) against `expected`, whole and
 * cut: CALL is an expression using
 * `target` (the buffer, or NULL) and `capacity`. */
#define CHECK_SNPRINTF(expected, CALL)                                                         \
    do {                                                                                       \
        const char *want_ = (expected);                                                        \
        const int length_ = (int)strlen(want_);                                                \
        char space_[256];                                                                      \
        char *target = space_;                                                                 \
        size_t capacity = sizeof space_;                                                       \
        CHECK(length_ >= 2);                                                                   \
        memset(space_, 'X', sizeof space_);                                                    \
        CHECK_EQ((CALL), length_);                                                             \
        CHECK_STR(space_, want_);                                                              \
        /* Room for all but the NUL: cut by one, NUL-terminated, the whole length back. */    \
        memset(space_, 'X', sizeof space_);                                                    \
        capacity = (size_t)length_;                                                            \
        CHECK_EQ((CALL), length_);                                                             \
        CHECK_EQ(strlen(space_), (size_t)length_ - 1);                                         \
        CHECK_EQ(strncmp(space_, want_, (size_t)length_ - 1), 0);                              \
        CHECK_EQ(space_[length_], 'X');                                                        \
        /* Room for the NUL alone. */                                                         \
        memset(space_, 'X', sizeof space_);                                                    \
        capacity = 1;                                                                          \
        CHECK_EQ((CALL), length_);                                                             \
        CHECK(space_[0] == 0 && space_[1] == 'X');                                             \
        /* No room: nothing written. */                                                       \
        memset(space_, 'X', sizeof space_);                                                    \
        capacity = 0;                                                                          \
        CHECK_EQ((CALL), length_);                                                             \
        CHECK_EQ(space_[0], 'X');                                                              \
        /* NULL: the length alone, whatever the capacity. */                                  \
        target = NULL;                                                                         \
        capacity = 0;                                                                          \
        CHECK_EQ((CALL), length_);                                                             \
        capacity = 64;                                                                         \
        CHECK_EQ((CALL), length_);                                                             \
    } while (0)

/* Checks an address getter (the Getters rule: getsockname) against `expected` of `expected_length` bytes: CALL uses
 * `target` (a struct sockaddr *, or NULL) and `length` (a socklen_t *). */
#define CHECK_GETSOCKNAME(expected, expected_length, CALL)                                     \
    do {                                                                                       \
        const void *want_ = (expected);                                                        \
        const socklen_t want_length_ = (expected_length);                                      \
        struct sockaddr_storage space_;                                                        \
        struct sockaddr *target = (struct sockaddr *)&space_;                                  \
        socklen_t length_value_ = sizeof space_;                                               \
        socklen_t *length = &length_value_;                                                    \
        memset(&space_, 0xEE, sizeof space_);                                                  \
        CHECK_EQ((CALL), (int)want_length_);                                                   \
        CHECK_EQ(length_value_, want_length_);                                                 \
        CHECK_EQ(memcmp(&space_, want_, want_length_), 0);                                     \
        /* Too small: what fits, and the whole length in both answers. */                     \
        memset(&space_, 0xEE, sizeof space_);                                                  \
        length_value_ = 6;                                                                     \
        CHECK_EQ((CALL), (int)want_length_);                                                   \
        CHECK_EQ(length_value_, want_length_);                                                 \
        CHECK_EQ(memcmp(&space_, want_, 6), 0);                                                \
        CHECK_EQ(((unsigned char *)&space_)[6], 0xEE);                                         \
        memset(&space_, 0xEE, sizeof space_);                                                  \
        length_value_ = 0;                                                                     \
        CHECK_EQ((CALL), (int)want_length_);                                                   \
        CHECK_EQ(((unsigned char *)&space_)[0], 0xEE);                                         \
        /* NULL address: the length alone. NULL length: the capacity is missing. */           \
        target = NULL;                                                                         \
        length_value_ = 99;                                                                    \
        CHECK_EQ((CALL), (int)want_length_);                                                   \
        CHECK_EQ(length_value_, want_length_);                                                 \
        length = NULL;                                                                         \
        CHECK_EQ((CALL), SK_ERR_BAD_PARAM);                                                    \
    } while (0)

/* Seconds every wait allows before the test fails: only a failing test waits this long.
 * Under valgrind, on a loaded 2-core machine, TLS handshakes took more than 20 s (a clean-clone
 * CI run failed two TLS tests so while the same tests passed in 5 s unloaded). */
#define WAIT_SECONDS (getenv("SOCKETKIT_TEST_UNDER_VALGRIND") ? 60.0 : 20.0)

typedef enum event_kind {
    EVENT_ACCEPT,
    EVENT_PAUSE_ACCEPTING,
    EVENT_CONNECT,
    EVENT_READ,
    EVENT_READ_PARTIAL,
    EVENT_READ_TIMEOUT,
    EVENT_WRITE,
    EVENT_WRITE_PARTIAL,
    EVENT_WRITE_TIMEOUT,
    EVENT_CLOSE_READ_STREAM,
    EVENT_HIGH_WATERMARK,
    EVENT_LOW_WATERMARK,
    EVENT_DISCONNECT,
    EVENT_SECURE,
    EVENT_TRUST,
    EVENT_CANCEL_READ
} event_kind_t;

typedef struct event {
    event_kind_t kind;
    sk_socket_t *sock;
    long tag;
    size_t length;          /* bytes read/written, queued bytes, done (timeouts), unread (cancel) */
    double elapsed;         /* timeouts */
    int error_code;         /* disconnect: 0 for a clean close; pause: the code; trust:
                             * the verification error's code (0: it verified) */
    int os_error;
    char text[SK_ERROR_MESSAGE_CAPACITY]; /* connect: host; read: first bytes; errors: message */
    pthread_t thread;       /* the thread the callback ran on */
} event_t;

typedef struct recorder recorder_t;

struct recorder {
    pthread_mutex_t lock;
    pthread_cond_t changed;
    event_t *events;
    size_t count;
    size_t capacity;
    unsigned char *bytes;   /* every byte read, in order */
    size_t byte_count;
    size_t byte_capacity;
    sk_socket_t *accepted[256];
    size_t accepted_count;
    int running;            /* callbacks currently running */
    int overlaps;           /* callbacks that ran while another did */
    int after_disconnect;   /* callbacks after did_disconnect of the same session */
    int disconnected;
    /* Behaviour: extensions granted to timed-out reads/writes (consumed in order). */
    double read_extensions[8];
    int read_extension_count;
    double write_extensions[8];
    int write_extension_count;
    int loop_index_for_connections; /* returned by new_socket_loop_for_connection */
    /* Hooks, run inside the callback after it is recorded. */
    void (*on_accept)(recorder_t *recorder, sk_socket_t *listener, sk_socket_t *new_socket);
    void (*on_connect)(recorder_t *recorder, sk_socket_t *sock);
    void (*on_read)(recorder_t *recorder, sk_socket_t *sock, const void *data, size_t length, long tag);
    void (*on_disconnect)(recorder_t *recorder, sk_socket_t *sock, const sk_error_t *error);
    /* Manual trust: called inside did_receive_trust (NULL: answer 1 at once). */
    void (*on_trust)(recorder_t *recorder, sk_socket_t *sock, const sk_tls_trust_t *trust);
    void *context;
};

void recorder_init(recorder_t *recorder);
/* Releases every accepted socket still held, then frees the recorder's memory. */
void recorder_destroy(recorder_t *recorder);
/* A delegate whose every member records into the recorder given as userdata. */
sk_socket_delegate_t recorder_delegate(void);

size_t recorder_count(recorder_t *recorder, event_kind_t kind);
/* Waits until at least `count` events of `kind` were recorded; fails the test otherwise. */
void recorder_expect(recorder_t *recorder, event_kind_t kind, size_t count);
/* As recorder_expect, but returns 0 instead of failing (for "nothing happens" checks). */
int recorder_wait(recorder_t *recorder, event_kind_t kind, size_t count, double seconds);
/* Waits until `count` bytes have been read. */
void recorder_expect_bytes(recorder_t *recorder, size_t count);
/* The n-th event of `kind` (0-based); fails the test if there is none. */
event_t recorder_event(recorder_t *recorder, event_kind_t kind, size_t index);
/* A copy of the events (free() it) and their count. */
event_t *recorder_events(recorder_t *recorder, size_t *count);
/* The first accepted socket, waiting for it; the recorder keeps (and releases) it. */
sk_socket_t *recorder_accepted(recorder_t *recorder, size_t index);
/* Wakes waiters (for hooks that change what they look at). */
void recorder_notify(recorder_t *recorder);

/* A socket with the recorder as delegate and `queue` (NULL: the event loop). */
sk_socket_t *recorded_socket(recorder_t *recorder, sk_callback_queue_t *queue);
/* A listener on 127.0.0.1, kernel-picked port written to *port. */
sk_socket_t *recorded_listener(recorder_t *recorder, uint16_t *port);
/* A recorded socket connected to a raw listener on 127.0.0.1; the listener and the peer's
 * accepted descriptor come back in *listener and *peer (the caller closes both). */
sk_socket_t *connected_recorded_socket(recorder_t *recorder, sk_callback_queue_t *queue,
                                       int *listener, int *peer);

/* A socket's descriptors as sk_socket_perform / sk_udp_socket_perform show them on its
 * loop (waits for it); *out_thread (may be NULL) is the thread the function ran on. */
sk_socket_descriptors_t socket_descriptors(sk_socket_t *sock, pthread_t *out_thread);
sk_socket_descriptors_t udp_socket_descriptors(sk_udp_socket_t *sock);

/* Plain blocking sockets (every wait bounded). */
int raw_listen(const char *address, uint16_t *port, int backlog);
int raw_connect(const char *address, uint16_t port);
int raw_accept(int listener);
void raw_send(int fd, const void *data, size_t length);
void raw_receive(int fd, void *data, size_t length);   /* exactly length bytes */
size_t raw_receive_until_eof(int fd, void *data, size_t capacity);
/* Waits until the peer closed: EOF, or a reset (closing with unread input sends RST). */
void raw_wait_closed(int fd);

/* A program nobody here wrote, run as a helper (a proxy): a loopback port free right now
 * (bound to 0, read, closed), whether a program is installed, and `command` run with sh -c
 * until something listens on `port` (bounded; its output goes to /dev/null, and it dies
 * with the test). */
uint16_t free_loopback_port(void);
int program_installed(const char *path);
pid_t helper_process_start(const char *command, uint16_t port);
void helper_process_stop(pid_t child);

/* Holds a socket's event loop: loop_hold_begin() returns once a function of the socket runs
 * on the loop (sk_socket_perform) and blocks it, until loop_hold_end() (what earlier calls
 * gave the loop to do has run by then: reads queued before have had their first pass). Then, with
 * `until_hang_up`, the function also waits (bounded) until the kernel has the peer's close
 * or reset for the socket, and it runs `then` (if set) on the loop before letting it go on.
 * What the peer sent meanwhile then reaches the loop in one readiness event. */
typedef struct loop_hold {
    int until_hang_up;
    void (*then)(struct loop_hold *hold);
    void *context;
    pthread_mutex_t lock;
    pthread_cond_t changed;
    int held;
    int released;
} loop_hold_t;
void loop_hold_begin(loop_hold_t *hold, sk_socket_t *sock);
void loop_hold_end(loop_hold_t *hold);

/* A listener whose accept queue is full: a connect to `port` stays
 * in progress until stalled_listener_admit() makes room and returns that connection. */
typedef struct stalled_listener stalled_listener_t;
struct stalled_listener {
    int listener;
    int filler;
    uint16_t port;
};
void stalled_listener_open(stalled_listener_t *stalled);
int stalled_listener_admit(stalled_listener_t *stalled);
void stalled_listener_close(stalled_listener_t *stalled);
/* Opens `stalled` and a recorded socket connecting to it (in progress until admitted). */
sk_socket_t *stalled_connection(stalled_listener_t *stalled, recorder_t *recorder);

/* Writes `length` pattern bytes (seed `seed`), then sk_socket_disconnect_after_writing();
 * returns the bytes (free() them). */
unsigned char *write_then_disconnect_after_writing(sk_socket_t *sock, size_t length, unsigned seed);

/* Fills a buffer with a checkable pattern. */
void fill_pattern(unsigned char *data, size_t length, unsigned seed);

/* Monotonic seconds. */
double now_seconds(void);

/* The engine's log, captured (sk_log_set_callback): log_capture_start(level) sets a
 * callback that keeps every record of `level` and more serious; log_capture_find returns
 * the number of records of that level and subsystem whose message holds every given needle
 * (a NULL-terminated list); log_capture_wait waits (at most `seconds`) for one;
 * log_capture_stop turns logging off and forgets the records. */
void log_capture_start(int level);
size_t log_capture_find(int level, const char *subsystem, const char *const *needles);
int log_capture_wait(int level, const char *subsystem, const char *const *needles, double seconds);
size_t log_capture_count(void);
void log_capture_print(void);
void log_capture_stop(void);

#endif
