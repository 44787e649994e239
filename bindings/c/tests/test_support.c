/* SPDX-License-Identifier: MIT */
#include "test_support.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <time.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

double now_seconds(void) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (double)now.tv_sec + (double)now.tv_nsec / 1e9;
}

void recorder_init(recorder_t *recorder) {
    memset(recorder, 0, sizeof *recorder);
    pthread_mutex_init(&recorder->lock, NULL);
    pthread_condattr_t attributes;
    pthread_condattr_init(&attributes);
    pthread_condattr_setclock(&attributes, CLOCK_MONOTONIC);
    pthread_cond_init(&recorder->changed, &attributes);
    pthread_condattr_destroy(&attributes);
    recorder->loop_index_for_connections = -1;
}

void recorder_destroy(recorder_t *recorder) {
    pthread_mutex_lock(&recorder->lock);
    size_t accepted = recorder->accepted_count;
    recorder->accepted_count = 0;
    pthread_mutex_unlock(&recorder->lock);
    for (size_t i = 0; i < accepted; i++) sk_socket_release(recorder->accepted[i]);
    free(recorder->events);
    free(recorder->bytes);
    pthread_cond_destroy(&recorder->changed);
    pthread_mutex_destroy(&recorder->lock);
}

static void begin(recorder_t *recorder) {
    pthread_mutex_lock(&recorder->lock);
    if (recorder->running > 0) recorder->overlaps++;
    recorder->running++;
    pthread_mutex_unlock(&recorder->lock);
}

static void end(recorder_t *recorder) {
    pthread_mutex_lock(&recorder->lock);
    recorder->running--;
    pthread_mutex_unlock(&recorder->lock);
}

/* Appends `event`; the caller holds the lock. */
static void record_locked(recorder_t *recorder, event_t event) {
    event.thread = pthread_self();
    if (event.kind == EVENT_CONNECT || event.kind == EVENT_ACCEPT) recorder->disconnected = 0;
    else if (recorder->disconnected && event.sock != NULL) recorder->after_disconnect++;
    if (recorder->count == recorder->capacity) {
        recorder->capacity = recorder->capacity ? recorder->capacity * 2 : 64;
        recorder->events = realloc(recorder->events, recorder->capacity * sizeof(event_t));
        CHECK(recorder->events != NULL);
    }
    recorder->events[recorder->count++] = event;
    pthread_cond_broadcast(&recorder->changed);
}

static void record(recorder_t *recorder, event_t event) {
    pthread_mutex_lock(&recorder->lock);
    record_locked(recorder, event);
    pthread_mutex_unlock(&recorder->lock);
}

static void on_accept(sk_socket_t *listener, sk_socket_t *new_socket, void *userdata) {
    recorder_t *recorder = userdata;
    begin(recorder);
    pthread_mutex_lock(&recorder->lock);
    CHECK(recorder->accepted_count < sizeof recorder->accepted / sizeof recorder->accepted[0]);
    recorder->accepted[recorder->accepted_count++] = new_socket;
    pthread_mutex_unlock(&recorder->lock);
    if (recorder->on_accept) recorder->on_accept(recorder, listener, new_socket);
    event_t event = {.kind = EVENT_ACCEPT, .sock = listener};
    record(recorder, event);
    end(recorder);
}

static int on_new_socket_loop(sk_socket_t *listener, const struct sockaddr *address, socklen_t length, void *userdata) {
    recorder_t *recorder = userdata;
    (void)listener;
    CHECK(address != NULL && length > 0);
    return recorder->loop_index_for_connections;
}

static void on_pause_accepting(sk_socket_t *listener, const sk_error_t *error, void *userdata) {
    recorder_t *recorder = userdata;
    begin(recorder);
    event_t event = {.kind = EVENT_PAUSE_ACCEPTING, .sock = listener, .error_code = error->code, .os_error = error->os_error};
    snprintf(event.text, sizeof event.text, "%s", error->message);
    record(recorder, event);
    end(recorder);
}

static void on_connect(sk_socket_t *sock, const char *host, uint16_t port, void *userdata) {
    recorder_t *recorder = userdata;
    begin(recorder);
    event_t event = {.kind = EVENT_CONNECT, .sock = sock, .length = port};
    snprintf(event.text, sizeof event.text, "%s", host);
    record(recorder, event);
    if (recorder->on_connect) recorder->on_connect(recorder, sock);
    end(recorder);
}

static void on_read(sk_socket_t *sock, const void *data, size_t length, long tag, void *userdata) {
    recorder_t *recorder = userdata;
    begin(recorder);
    /* Every read completes with bytes, but a read to a file: data NULL, length 0. */
    CHECK((data != NULL && length > 0) || (data == NULL && length == 0));
    pthread_mutex_lock(&recorder->lock);
    if (recorder->byte_count + length > recorder->byte_capacity) {
        while (recorder->byte_count + length > recorder->byte_capacity) {
            recorder->byte_capacity = recorder->byte_capacity ? recorder->byte_capacity * 2 : 4096;
        }
        recorder->bytes = realloc(recorder->bytes, recorder->byte_capacity);
        CHECK(recorder->bytes != NULL);
    }
    if (length > 0) memcpy(recorder->bytes + recorder->byte_count, data, length);
    recorder->byte_count += length;
    /* The bytes and their event in one step: a test that waited for the bytes finds the
     * event too. */
    event_t event = {.kind = EVENT_READ, .sock = sock, .tag = tag, .length = length};
    if (length > 0) memcpy(event.text, data, length < sizeof event.text - 1 ? length : sizeof event.text - 1);
    record_locked(recorder, event);
    pthread_mutex_unlock(&recorder->lock);
    if (recorder->on_read) recorder->on_read(recorder, sock, data, length, tag);
    end(recorder);
}

static void on_read_partial(sk_socket_t *sock, size_t length, long tag, void *userdata) {
    recorder_t *recorder = userdata;
    begin(recorder);
    event_t event = {.kind = EVENT_READ_PARTIAL, .sock = sock, .tag = tag, .length = length};
    record(recorder, event);
    end(recorder);
}

static double on_read_timeout(sk_socket_t *sock, long tag, double elapsed, size_t done, void *userdata) {
    recorder_t *recorder = userdata;
    begin(recorder);
    event_t event = {.kind = EVENT_READ_TIMEOUT, .sock = sock, .tag = tag, .length = done, .elapsed = elapsed};
    record(recorder, event);
    double extension = 0;
    pthread_mutex_lock(&recorder->lock);
    if (recorder->read_extension_count > 0) {
        extension = recorder->read_extensions[0];
        memmove(recorder->read_extensions, recorder->read_extensions + 1, sizeof(double) * 7);
        recorder->read_extension_count--;
    }
    pthread_mutex_unlock(&recorder->lock);
    end(recorder);
    return extension;
}

static void on_write(sk_socket_t *sock, long tag, void *userdata) {
    recorder_t *recorder = userdata;
    begin(recorder);
    event_t event = {.kind = EVENT_WRITE, .sock = sock, .tag = tag};
    record(recorder, event);
    end(recorder);
}

static void on_write_partial(sk_socket_t *sock, size_t length, long tag, void *userdata) {
    recorder_t *recorder = userdata;
    begin(recorder);
    event_t event = {.kind = EVENT_WRITE_PARTIAL, .sock = sock, .tag = tag, .length = length};
    record(recorder, event);
    end(recorder);
}

static double on_write_timeout(sk_socket_t *sock, long tag, double elapsed, size_t done, void *userdata) {
    recorder_t *recorder = userdata;
    begin(recorder);
    event_t event = {.kind = EVENT_WRITE_TIMEOUT, .sock = sock, .tag = tag, .length = done, .elapsed = elapsed};
    record(recorder, event);
    double extension = 0;
    pthread_mutex_lock(&recorder->lock);
    if (recorder->write_extension_count > 0) {
        extension = recorder->write_extensions[0];
        memmove(recorder->write_extensions, recorder->write_extensions + 1, sizeof(double) * 7);
        recorder->write_extension_count--;
    }
    pthread_mutex_unlock(&recorder->lock);
    end(recorder);
    return extension;
}

static void on_close_read_stream(sk_socket_t *sock, void *userdata) {
    recorder_t *recorder = userdata;
    begin(recorder);
    event_t event = {.kind = EVENT_CLOSE_READ_STREAM, .sock = sock};
    record(recorder, event);
    end(recorder);
}

static void on_high_watermark(sk_socket_t *sock, size_t queued, void *userdata) {
    recorder_t *recorder = userdata;
    begin(recorder);
    event_t event = {.kind = EVENT_HIGH_WATERMARK, .sock = sock, .length = queued};
    record(recorder, event);
    end(recorder);
}

static void on_low_watermark(sk_socket_t *sock, size_t queued, void *userdata) {
    recorder_t *recorder = userdata;
    begin(recorder);
    event_t event = {.kind = EVENT_LOW_WATERMARK, .sock = sock, .length = queued};
    record(recorder, event);
    end(recorder);
}

static void on_disconnect(sk_socket_t *sock, const sk_error_t *error, void *userdata) {
    recorder_t *recorder = userdata;
    begin(recorder);
    event_t event = {.kind = EVENT_DISCONNECT, .sock = sock};
    if (error) {
        event.error_code = error->code;
        event.os_error = error->os_error;
        CHECK(error->code < 0);
        CHECK(strlen(error->message) > 0);
        snprintf(event.text, sizeof event.text, "%s", error->message);
    }
    record(recorder, event);
    pthread_mutex_lock(&recorder->lock);
    recorder->disconnected = 1;
    pthread_mutex_unlock(&recorder->lock);
    if (recorder->on_disconnect) recorder->on_disconnect(recorder, sock, error);
    end(recorder);
}

static void on_secure(sk_socket_t *sock, void *userdata) {
    recorder_t *recorder = userdata;
    begin(recorder);
    event_t event = {.kind = EVENT_SECURE, .sock = sock};
    record(recorder, event);
    end(recorder);
}

static void on_trust(sk_socket_t *sock, const sk_tls_trust_t *trust, void *userdata) {
    recorder_t *recorder = userdata;
    begin(recorder);
    event_t event = {.kind = EVENT_TRUST, .sock = sock, .length = trust->chain_count,
                     .error_code = trust->verification_error ? trust->verification_error->code : 0};
    record(recorder, event);
    if (recorder->on_trust) recorder->on_trust(recorder, sock, trust);
    else sk_socket_answer_trust(sock, trust->token, 1);
    end(recorder);
}

static void on_cancel_read(sk_socket_t *sock, long tag, size_t unread_bytes, void *userdata) {
    recorder_t *recorder = userdata;
    begin(recorder);
    event_t event = {.kind = EVENT_CANCEL_READ, .sock = sock, .tag = tag, .length = unread_bytes};
    record(recorder, event);
    end(recorder);
}

sk_socket_delegate_t recorder_delegate(void) {
    sk_socket_delegate_t delegate;
    memset(&delegate, 0, sizeof delegate);
    delegate.did_accept = on_accept;
    delegate.new_socket_loop_for_connection = on_new_socket_loop;
    delegate.did_pause_accepting = on_pause_accepting;
    delegate.did_connect = on_connect;
    delegate.did_read = on_read;
    delegate.did_read_partial = on_read_partial;
    delegate.should_timeout_read = on_read_timeout;
    delegate.did_write = on_write;
    delegate.did_write_partial = on_write_partial;
    delegate.should_timeout_write = on_write_timeout;
    delegate.did_close_read_stream = on_close_read_stream;
    delegate.did_reach_high_watermark = on_high_watermark;
    delegate.did_drain_to_low_watermark = on_low_watermark;
    delegate.did_disconnect = on_disconnect;
    delegate.did_secure = on_secure;
    delegate.did_receive_trust = on_trust;
    delegate.did_cancel_read = on_cancel_read;
    return delegate;
}

static size_t count_locked(recorder_t *recorder, event_kind_t kind) {
    size_t found = 0;
    for (size_t i = 0; i < recorder->count; i++) {
        if (recorder->events[i].kind == kind) found++;
    }
    return found;
}

size_t recorder_count(recorder_t *recorder, event_kind_t kind) {
    pthread_mutex_lock(&recorder->lock);
    size_t found = count_locked(recorder, kind);
    pthread_mutex_unlock(&recorder->lock);
    return found;
}

static struct timespec deadline_after(double seconds) {
    struct timespec limit;
    clock_gettime(CLOCK_MONOTONIC, &limit);
    long long nanoseconds = (long long)(seconds * 1e9) + limit.tv_nsec;
    limit.tv_sec += (time_t)(nanoseconds / 1000000000LL);
    limit.tv_nsec = (long)(nanoseconds % 1000000000LL);
    return limit;
}

int recorder_wait(recorder_t *recorder, event_kind_t kind, size_t count, double seconds) {
    struct timespec limit = deadline_after(seconds);
    pthread_mutex_lock(&recorder->lock);
    int ok = 1;
    while (count_locked(recorder, kind) < count) {
        if (pthread_cond_timedwait(&recorder->changed, &recorder->lock, &limit) == ETIMEDOUT) {
            ok = count_locked(recorder, kind) >= count;
            break;
        }
    }
    pthread_mutex_unlock(&recorder->lock);
    return ok;
}

void recorder_expect(recorder_t *recorder, event_kind_t kind, size_t count) {
    if (!recorder_wait(recorder, kind, count, WAIT_SECONDS)) {
        fprintf(stderr, "timed out waiting for %zu events of kind %d (have %zu)\n", count, (int)kind,
                recorder_count(recorder, kind));
        abort();
    }
}

void recorder_expect_bytes(recorder_t *recorder, size_t count) {
    struct timespec limit = deadline_after(WAIT_SECONDS);
    pthread_mutex_lock(&recorder->lock);
    while (recorder->byte_count < count) {
        if (pthread_cond_timedwait(&recorder->changed, &recorder->lock, &limit) == ETIMEDOUT) break;
    }
    size_t have = recorder->byte_count;
    pthread_mutex_unlock(&recorder->lock);
    if (have < count) {
        fprintf(stderr, "timed out waiting for %zu bytes (have %zu)\n", count, have);
        abort();
    }
}

event_t recorder_event(recorder_t *recorder, event_kind_t kind, size_t index) {
    pthread_mutex_lock(&recorder->lock);
    size_t seen = 0;
    for (size_t i = 0; i < recorder->count; i++) {
        if (recorder->events[i].kind != kind) continue;
        if (seen++ == index) {
            event_t event = recorder->events[i];
            pthread_mutex_unlock(&recorder->lock);
            return event;
        }
    }
    pthread_mutex_unlock(&recorder->lock);
    fprintf(stderr, "no event %zu of kind %d\n", index, (int)kind);
    abort();
}

event_t *recorder_events(recorder_t *recorder, size_t *count) {
    pthread_mutex_lock(&recorder->lock);
    *count = recorder->count;
    event_t *copy = malloc((recorder->count + 1) * sizeof(event_t));
    CHECK(copy != NULL);
    memcpy(copy, recorder->events, recorder->count * sizeof(event_t));
    pthread_mutex_unlock(&recorder->lock);
    return copy;
}

sk_socket_t *recorder_accepted(recorder_t *recorder, size_t index) {
    recorder_expect(recorder, EVENT_ACCEPT, index + 1);
    pthread_mutex_lock(&recorder->lock);
    sk_socket_t *sock = recorder->accepted[index];
    pthread_mutex_unlock(&recorder->lock);
    return sock;
}

void recorder_notify(recorder_t *recorder) {
    pthread_mutex_lock(&recorder->lock);
    pthread_cond_broadcast(&recorder->changed);
    pthread_mutex_unlock(&recorder->lock);
}

sk_socket_t *recorded_socket(recorder_t *recorder, sk_callback_queue_t *queue) {
    sk_socket_delegate_t delegate = recorder_delegate();
    sk_socket_t *sock = NULL;
    sk_error_t error;
    int status = sk_socket_create(&delegate, sizeof delegate, recorder, queue, NULL, &sock, &error);
    if (status != SK_OK) fprintf(stderr, "sk_socket_create: %s\n", error.message);
    CHECK_EQ(status, SK_OK);
    CHECK(sock != NULL);
    return sock;
}

typedef struct descriptors_probe {
    pthread_mutex_t lock;
    pthread_cond_t changed;
    int done;
    sk_socket_descriptors_t seen;
    pthread_t thread;
} descriptors_probe_t;

static void record_descriptors(const sk_socket_descriptors_t *descriptors, void *context) {
    descriptors_probe_t *probe = context;
    pthread_mutex_lock(&probe->lock);
    probe->seen = *descriptors;
    probe->thread = pthread_self();
    probe->done = 1;
    pthread_cond_broadcast(&probe->changed);
    pthread_mutex_unlock(&probe->lock);
}

/* Waits for the probe that `status` (the perform call's result) started. */
static sk_socket_descriptors_t wait_for_descriptors(descriptors_probe_t *probe, int status, pthread_t *out_thread) {
    CHECK_EQ(status, SK_OK);
    pthread_mutex_lock(&probe->lock);
    while (!probe->done) pthread_cond_wait(&probe->changed, &probe->lock);
    pthread_mutex_unlock(&probe->lock);
    pthread_mutex_destroy(&probe->lock);
    pthread_cond_destroy(&probe->changed);
    if (out_thread) *out_thread = probe->thread;
    return probe->seen;
}

sk_socket_descriptors_t socket_descriptors(sk_socket_t *sock, pthread_t *out_thread) {
    descriptors_probe_t probe = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, {-1, -1, -1, -1}, pthread_self()};
    return wait_for_descriptors(&probe, sk_socket_perform(sock, record_descriptors, &probe), out_thread);
}

sk_socket_descriptors_t udp_socket_descriptors(sk_udp_socket_t *sock) {
    descriptors_probe_t probe = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, {-1, -1, -1, -1}, pthread_self()};
    return wait_for_descriptors(&probe, sk_udp_socket_perform(sock, record_descriptors, &probe), NULL);
}

sk_socket_t *recorded_listener(recorder_t *recorder, uint16_t *port) {
    sk_socket_t *listener = recorded_socket(recorder, NULL);
    sk_error_t error;
    int status = sk_socket_accept_on_interface(listener, "127.0.0.1", 0, &error);
    if (status != SK_OK) fprintf(stderr, "accept: %s\n", error.message);
    CHECK_EQ(status, SK_OK);
    CHECK_EQ(sk_socket_get_local_port(listener, port), SK_OK);
    CHECK(*port != 0);
    return listener;
}

static int wait_for(int fd, short events) {
    struct pollfd descriptor = {.fd = fd, .events = events};
    return poll(&descriptor, 1, (int)(WAIT_SECONDS * 1000)) == 1;
}

static socklen_t make_address(const char *text, uint16_t port, struct sockaddr_storage *storage) {
    memset(storage, 0, sizeof *storage);
    struct sockaddr_in *ipv4 = (struct sockaddr_in *)storage;
    struct sockaddr_in6 *ipv6 = (struct sockaddr_in6 *)storage;
    if (inet_pton(AF_INET, text, &ipv4->sin_addr) == 1) {
        ipv4->sin_family = AF_INET;
        ipv4->sin_port = htons(port);
        return sizeof *ipv4;
    }
    CHECK(inet_pton(AF_INET6, text, &ipv6->sin6_addr) == 1);
    ipv6->sin6_family = AF_INET6;
    ipv6->sin6_port = htons(port);
    return sizeof *ipv6;
}

int raw_listen(const char *address, uint16_t *port, int backlog) {
    struct sockaddr_storage storage;
    socklen_t length = make_address(address, *port, &storage);
    int fd = socket(storage.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    CHECK(fd >= 0);
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    CHECK(bind(fd, (struct sockaddr *)&storage, length) == 0);
    CHECK(listen(fd, backlog) == 0);
    length = sizeof storage;
    CHECK(getsockname(fd, (struct sockaddr *)&storage, &length) == 0);
    *port = ntohs(storage.ss_family == AF_INET ? ((struct sockaddr_in *)&storage)->sin_port
                                               : ((struct sockaddr_in6 *)&storage)->sin6_port);
    return fd;
}

int raw_connect(const char *address, uint16_t port) {
    struct sockaddr_storage storage;
    socklen_t length = make_address(address, port, &storage);
    int fd = socket(storage.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    CHECK(fd >= 0);
    CHECK(connect(fd, (struct sockaddr *)&storage, length) == 0);
    return fd;
}

int raw_accept(int listener) {
    CHECK(wait_for(listener, POLLIN));
    int fd = accept(listener, NULL, NULL);
    CHECK(fd >= 0);
    return fd;
}

sk_socket_t *connected_recorded_socket(recorder_t *recorder, sk_callback_queue_t *queue,
                                       int *listener, int *peer) {
    uint16_t port = 0;
    *listener = raw_listen("127.0.0.1", &port, 8);
    sk_socket_t *sock = recorded_socket(recorder, queue);
    CHECK_EQ(sk_socket_connect_to_host(sock, "127.0.0.1", port, NULL, 5, NULL), SK_OK);
    *peer = raw_accept(*listener);
    return sock;
}

void raw_send(int fd, const void *data, size_t length) {
    const unsigned char *bytes = data;
    while (length > 0) {
        CHECK(wait_for(fd, POLLOUT));
        ssize_t sent = send(fd, bytes, length, MSG_NOSIGNAL);
        CHECK(sent > 0);
        bytes += sent;
        length -= (size_t)sent;
    }
}

void raw_receive(int fd, void *data, size_t length) {
    unsigned char *bytes = data;
    while (length > 0) {
        CHECK(wait_for(fd, POLLIN));
        ssize_t got = recv(fd, bytes, length, 0);
        CHECK(got > 0);
        bytes += got;
        length -= (size_t)got;
    }
}

size_t raw_receive_until_eof(int fd, void *data, size_t capacity) {
    unsigned char *bytes = data;
    size_t total = 0;
    for (;;) {
        CHECK(wait_for(fd, POLLIN));
        ssize_t got = recv(fd, bytes + total, capacity - total, 0);
        CHECK(got >= 0);
        if (got == 0) return total;
        total += (size_t)got;
        CHECK(total < capacity);
    }
}

void fill_pattern(unsigned char *data, size_t length, unsigned seed) {
    for (size_t i = 0; i < length; i++) data[i] = (unsigned char)((i * 31u + seed) % 251u);
}

void raw_wait_closed(int fd) {
    char scratch[4096];
    for (;;) {
        CHECK(wait_for(fd, POLLIN));
        ssize_t got = recv(fd, scratch, sizeof scratch, 0);
        if (got == 0) return;
        if (got < 0) {
            CHECK(errno == ECONNRESET);
            return;
        }
    }
}

static void hold_until_released(const sk_socket_descriptors_t *descriptors, void *context) {
    loop_hold_t *hold = context;
    pthread_mutex_lock(&hold->lock);
    hold->held = 1;
    pthread_cond_broadcast(&hold->changed);
    struct timespec limit = deadline_after(WAIT_SECONDS);
    while (!hold->released) {
        if (pthread_cond_timedwait(&hold->changed, &hold->lock, &limit) != 0) break;
    }
    pthread_mutex_unlock(&hold->lock);
    struct pollfd entry = {descriptors->primary, 0, 0};
    double end = now_seconds() + WAIT_SECONDS;
    while (hold->until_hang_up && now_seconds() < end) {
        if (poll(&entry, 1, 100) > 0 && (entry.revents & (POLLHUP | POLLERR))) break;
    }
    if (hold->then) hold->then(hold);
}

static void signal_hold(const sk_socket_descriptors_t *descriptors, void *context) {
    (void)descriptors;
    loop_hold_t *hold = context;
    pthread_mutex_lock(&hold->lock);
    hold->held = 1;
    pthread_cond_broadcast(&hold->changed);
    pthread_mutex_unlock(&hold->lock);
}

/* Waits until a function given to sk_socket_perform has set `held`, then clears it. */
static void wait_held(loop_hold_t *hold) {
    pthread_mutex_lock(&hold->lock);
    struct timespec limit = deadline_after(WAIT_SECONDS);
    while (!hold->held) CHECK(pthread_cond_timedwait(&hold->changed, &hold->lock, &limit) == 0);
    hold->held = 0;
    pthread_mutex_unlock(&hold->lock);
}

void loop_hold_begin(loop_hold_t *hold, sk_socket_t *sock) {
    pthread_mutex_init(&hold->lock, NULL);
    pthread_condattr_t attributes;
    pthread_condattr_init(&attributes);
    pthread_condattr_setclock(&attributes, CLOCK_MONOTONIC); /* deadline_after's clock */
    pthread_cond_init(&hold->changed, &attributes);
    pthread_condattr_destroy(&attributes);
    hold->held = 0;
    hold->released = 0;
    /* A first round trip: the work earlier calls left for the loop's current iteration
     * (a read's first pass over the socket) has run before the hold begins. */
    CHECK_EQ(sk_socket_perform(sock, signal_hold, hold), SK_OK);
    wait_held(hold);
    CHECK_EQ(sk_socket_perform(sock, hold_until_released, hold), SK_OK);
    wait_held(hold);
}

void loop_hold_end(loop_hold_t *hold) {
    pthread_mutex_lock(&hold->lock);
    hold->released = 1;
    pthread_cond_broadcast(&hold->changed);
    pthread_mutex_unlock(&hold->lock);
}

/* A listener whose accept queue is full (backlog 0, one connection waiting): the kernel
 * drops the next SYN, so a connect to it stays in progress until the queue has room and the
 * SYN comes again (a second later). */
void stalled_listener_open(stalled_listener_t *stalled) {
    stalled->port = 0;
    stalled->listener = raw_listen("127.0.0.1", &stalled->port, 0);
    stalled->filler = raw_connect("127.0.0.1", stalled->port);
    /* Until the filler is in the queue: a SYN that came before would still get in. */
    CHECK(wait_for(stalled->listener, POLLIN));
}

/* Makes room; returns the next connection, once its SYN has come again. */
int stalled_listener_admit(stalled_listener_t *stalled) {
    close(raw_accept(stalled->listener));
    close(stalled->filler);
    stalled->filler = -1;
    return raw_accept(stalled->listener);
}

void stalled_listener_close(stalled_listener_t *stalled) {
    if (stalled->filler >= 0) close(stalled->filler);
    close(stalled->listener);
}

sk_socket_t *stalled_connection(stalled_listener_t *stalled, recorder_t *recorder) {
    stalled_listener_open(stalled);
    sk_socket_t *sock = recorded_socket(recorder, NULL);
    CHECK_EQ(sk_socket_connect_to_host(sock, "127.0.0.1", stalled->port, NULL, -1, NULL), SK_OK);
    return sock;
}

unsigned char *write_then_disconnect_after_writing(sk_socket_t *sock, size_t length, unsigned seed) {
    unsigned char *data = malloc(length);
    CHECK(data != NULL);
    fill_pattern(data, length, seed);
    CHECK_EQ(sk_socket_write(sock, data, length, -1, 1, NULL), SK_OK);
    CHECK_EQ(sk_socket_disconnect_after_writing(sock), SK_OK);
    return data;
}

/* ---- The engine's log, captured --------------------------------------------------------- */

enum { LOG_CAPTURE_MAX = 512 };

typedef struct {
    int level;
    char subsystem[32];
    char message[512];
} log_record_t;

static struct {
    pthread_mutex_t lock;
    pthread_cond_t changed;
    log_record_t records[LOG_CAPTURE_MAX];
    size_t count;
} log_capture = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, {{0, {0}, {0}}}, 0};

static void log_capture_callback(int level, const char *subsystem, const char *message, void *userdata) {
    CHECK(userdata == &log_capture);
    pthread_mutex_lock(&log_capture.lock);
    if (log_capture.count < LOG_CAPTURE_MAX) {
        log_record_t *record = &log_capture.records[log_capture.count++];
        record->level = level;
        snprintf(record->subsystem, sizeof record->subsystem, "%s", subsystem);
        snprintf(record->message, sizeof record->message, "%s", message);
    }
    pthread_cond_broadcast(&log_capture.changed);
    pthread_mutex_unlock(&log_capture.lock);
}

void log_capture_start(int level) {
    CHECK_EQ(sk_log_set_callback(log_capture_callback, level, &log_capture), SK_OK);
}

void log_capture_stop(void) {
    CHECK_EQ(sk_log_set_callback(NULL, SK_LOG_OFF, NULL), SK_OK);
    pthread_mutex_lock(&log_capture.lock);
    log_capture.count = 0;
    pthread_mutex_unlock(&log_capture.lock);
}

static size_t log_capture_find_locked(int level, const char *subsystem, const char *const *needles) {
    size_t found = 0;
    for (size_t i = 0; i < log_capture.count; i++) {
        const log_record_t *record = &log_capture.records[i];
        if (record->level != level || strcmp(record->subsystem, subsystem) != 0) continue;
        int all = 1;
        for (const char *const *needle = needles; needle && *needle; needle++) {
            if (!strstr(record->message, *needle)) all = 0;
        }
        found += (size_t)all;
    }
    return found;
}

size_t log_capture_find(int level, const char *subsystem, const char *const *needles) {
    pthread_mutex_lock(&log_capture.lock);
    size_t found = log_capture_find_locked(level, subsystem, needles);
    pthread_mutex_unlock(&log_capture.lock);
    return found;
}

int log_capture_wait(int level, const char *subsystem, const char *const *needles, double seconds) {
    double deadline = now_seconds() + seconds;
    pthread_mutex_lock(&log_capture.lock);
    while (log_capture_find_locked(level, subsystem, needles) == 0) {
        double left = deadline - now_seconds();
        if (left <= 0) break;
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);  /* the condition's clock (PTHREAD_COND_INITIALIZER) */
        until.tv_sec += (time_t)left;
        until.tv_nsec += (long)((left - (double)(time_t)left) * 1e9);
        if (until.tv_nsec >= 1000000000L) {
            until.tv_sec += 1;
            until.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&log_capture.changed, &log_capture.lock, &until);
    }
    int found = log_capture_find_locked(level, subsystem, needles) > 0;
    pthread_mutex_unlock(&log_capture.lock);
    return found;
}

size_t log_capture_count(void) {
    pthread_mutex_lock(&log_capture.lock);
    size_t count = log_capture.count;
    pthread_mutex_unlock(&log_capture.lock);
    return count;
}

void log_capture_print(void) {
    pthread_mutex_lock(&log_capture.lock);
    for (size_t i = 0; i < log_capture.count; i++) {
        fprintf(stderr, "  log %d %s: %s\n", log_capture.records[i].level, log_capture.records[i].subsystem,
                log_capture.records[i].message);
    }
    pthread_mutex_unlock(&log_capture.lock);
}

uint16_t free_loopback_port(void) {
    uint16_t port = 0;
    int probe = raw_listen("127.0.0.1", &port, 1);
    close(probe);
    return port;
}

int program_installed(const char *path) { return access(path, X_OK) == 0; }

pid_t helper_process_start(const char *command, uint16_t port) {
    pid_t child = fork();
    CHECK(child >= 0);
    if (child == 0) {
        /* A failed check aborts the test: the helper must not outlive it (nor hold its
         * output open for whoever reads it). */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        int quiet = open("/dev/null", O_WRONLY);
        dup2(quiet, 1);
        dup2(quiet, 2);
        execl("/bin/sh", "sh", "-c", command, (char *)NULL);
        _exit(127);
    }
    struct sockaddr_in address = {.sin_family = AF_INET, .sin_port = htons(port)};
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    for (int attempt = 0; attempt < 500; attempt++) {
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        CHECK(fd >= 0);
        int connected = connect(fd, (struct sockaddr *)&address, sizeof address) == 0;
        close(fd);
        if (connected) return child;
        poll(NULL, 0, 20); /* the helper's start-up: nothing to wait on but its port */
    }
    fprintf(stderr, "the helper (%s) did not listen\n", command);
    abort();
}

void helper_process_stop(pid_t child) {
    kill(child, SIGTERM);
    int status;
    waitpid(child, &status, 0);
}
