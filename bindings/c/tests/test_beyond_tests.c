/* SPDX-License-Identifier: MIT */
/* What SocketKit offers beyond CocoaAsyncSocket (issue 32): options set before connect and
 * listen, Unix-domain extras, adopted listeners, multi-loop listeners. */
#define _GNU_SOURCE
#include "test_support.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stddef.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

static int int_option(int fd, int level, int name) {
    int value = -1;
    socklen_t length = sizeof value;
    CHECK_EQ(getsockopt(fd, level, name, &value, &length), 0);
    return value;
}

/* sk_socket_set_user_timeout, sk_socket_set_fast_open and sk_socket_set_socket_option reach
 * the descriptor of a connect (the last before the connect: TCP_MAXSEG shapes the SYN). */
void test_user_timeout_fast_open_and_options_before_connect(void) {
    recorder_t recorder;
    recorder_init(&recorder);
    sk_socket_t *sock = recorded_socket(&recorder, NULL);
    sk_error_t error;
    double seconds = -1;
    CHECK_EQ(sk_socket_get_user_timeout(sock, &seconds), SK_OK);
    CHECK(seconds == 0);
    CHECK_EQ(sk_socket_set_user_timeout(sock, 1.5, &error), SK_OK);
    CHECK_EQ(sk_socket_get_user_timeout(sock, &seconds), SK_OK);
    CHECK(seconds == 1.5);
    CHECK_EQ(sk_socket_set_user_timeout(sock, NAN, &error), SK_ERR_BAD_PARAM);
    CHECK_EQ(sk_socket_set_user_timeout(sock, -1, &error), SK_ERR_BAD_PARAM);
    CHECK_EQ(sk_socket_set_user_timeout(sock, INFINITY, NULL), SK_ERR_BAD_PARAM);
    CHECK_EQ(sk_socket_get_user_timeout(sock, NULL), SK_OK);
    CHECK_EQ(sk_socket_get_fast_open(sock), 0);
    CHECK_EQ(sk_socket_set_fast_open(sock, 1), SK_OK);
    CHECK_EQ(sk_socket_get_fast_open(sock), 1);

    int mss = 1000;
    CHECK_EQ(sk_socket_set_socket_option(sock, IPPROTO_TCP, TCP_MAXSEG, &mss, sizeof mss, &error), SK_OK);
    CHECK_EQ(sk_socket_set_socket_option(sock, IPPROTO_TCP, TCP_MAXSEG, NULL, sizeof mss, &error), SK_ERR_BAD_PARAM);
    CHECK_EQ(sk_socket_set_socket_option(sock, IPPROTO_TCP, TCP_MAXSEG, &mss, 0, &error), SK_ERR_BAD_PARAM);
    static char big[1025];
    CHECK_EQ(sk_socket_set_socket_option(sock, IPPROTO_TCP, TCP_MAXSEG, big, sizeof big, &error), SK_ERR_BAD_PARAM);

    uint16_t port = 0;
    int listener = raw_listen("127.0.0.1", &port, 8);
    CHECK_EQ(sk_socket_connect_to_host(sock, "127.0.0.1", port, NULL, 10, &error), SK_OK);
    int peer = raw_accept(listener);
    recorder_expect(&recorder, EVENT_CONNECT, 1);
    sk_socket_descriptors_t descriptors = socket_descriptors(sock, NULL);
    CHECK_EQ(int_option(descriptors.primary, IPPROTO_TCP, TCP_USER_TIMEOUT), 1500);
    CHECK_EQ(int_option(descriptors.primary, IPPROTO_TCP, TCP_FASTOPEN_CONNECT), 1);
    int seen_mss = int_option(descriptors.primary, IPPROTO_TCP, TCP_MAXSEG);
    CHECK(seen_mss > 0 && seen_mss <= 1000);
    /* At once on a connected socket. */
    CHECK_EQ(sk_socket_set_user_timeout(sock, 0, &error), SK_OK);
    CHECK_EQ(int_option(descriptors.primary, IPPROTO_TCP, TCP_USER_TIMEOUT), 0);
    /* The first write goes out (with the SYN or after it, as the kernel decides). */
    CHECK_EQ(sk_socket_write(sock, "fast", 4, -1, 1, NULL), SK_OK);
    char received[4];
    raw_receive(peer, received, 4);
    CHECK_EQ(memcmp(received, "fast", 4), 0);

    CHECK_EQ(sk_socket_set_user_timeout(NULL, 1, NULL), SK_ERR_INVALID_HANDLE);
    CHECK_EQ(sk_socket_set_fast_open(NULL, 1), SK_ERR_INVALID_HANDLE);
    CHECK_EQ(sk_socket_set_socket_option(NULL, 1, 1, &mss, sizeof mss, NULL), SK_ERR_INVALID_HANDLE);
    CHECK_EQ(sk_socket_clear_socket_options(NULL), SK_ERR_INVALID_HANDLE);
    CHECK_EQ(sk_socket_release(sock), SK_OK);
    close(peer);
    close(listener);
    recorder_destroy(&recorder);
}

/* Options set before listen: fast open and the user's own reach the listener; one the
 * kernel refuses fails the accept call with its errno. */
void test_options_before_listen_and_a_refused_one(void) {
    recorder_t recorder;
    recorder_init(&recorder);
    sk_socket_t *listener = recorded_socket(&recorder, NULL);
    sk_error_t error;
    int unknown = 1;
    CHECK_EQ(sk_socket_set_socket_option(listener, IPPROTO_TCP, 9999, &unknown, sizeof unknown, &error), SK_OK);
    CHECK_EQ(sk_socket_accept_on_interface(listener, "127.0.0.1", 0, &error), SK_ERR_SYSTEM);
    CHECK_EQ(error.os_error, ENOPROTOOPT);
    CHECK_EQ(sk_socket_is_disconnected(listener), 1);
    CHECK_EQ(sk_socket_clear_socket_options(listener), SK_OK);

    int mss = 800;
    CHECK_EQ(sk_socket_set_socket_option(listener, IPPROTO_TCP, TCP_MAXSEG, &mss, sizeof mss, &error), SK_OK);
    CHECK_EQ(sk_socket_set_fast_open(listener, 1), SK_OK);
    CHECK_EQ(sk_socket_accept_on_interface(listener, "127.0.0.1", 0, &error), SK_OK);
    sk_socket_descriptors_t descriptors = socket_descriptors(listener, NULL);
    CHECK(int_option(descriptors.ipv4, IPPROTO_TCP, TCP_FASTOPEN) > 0);
    uint16_t port = 0;
    CHECK_EQ(sk_socket_get_local_port(listener, &port), SK_OK);
    int client = raw_connect("127.0.0.1", port);
    int seen_mss = int_option(client, IPPROTO_TCP, TCP_MAXSEG);
    CHECK(seen_mss > 0 && seen_mss <= 800); /* the listener's SYN-ACK announced it */
    close(client);
    CHECK_EQ(sk_socket_release(listener), SK_OK);
    recorder_destroy(&recorder);
}

/* An abstract address for `name` (length bytes, NULs allowed) and its length. */
static socklen_t abstract_address(struct sockaddr_un *address, const char *name, size_t length) {
    memset(address, 0, sizeof *address);
    address->sun_family = AF_UNIX;
    memcpy(address->sun_path + 1, name, length);
    return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + length);
}

/* Abstract names, descriptors both ways against a peer made with the system calls, and the
 * peer's credentials. */
void test_unix_abstract_names_passed_descriptors_and_credentials(void) {
    char name[64];
    int name_length = snprintf(name, sizeof name, "sk-c-%d-%ld", (int)getpid(), (long)now_seconds());
    name[3] = '\0'; /* abstract names are bytes: a NUL inside is part of the name */
    recorder_t recorder;
    recorder_init(&recorder);
    sk_socket_t *listener = recorded_socket(&recorder, NULL);
    sk_error_t error;
    CHECK_EQ(sk_socket_set_receives_descriptors(listener, 1), SK_OK);
    CHECK_EQ(sk_socket_get_receives_descriptors(listener), 1);
    CHECK_EQ(sk_socket_accept_on_abstract_unix_name(listener, name, (size_t)name_length, &error), SK_OK);
    CHECK_EQ(sk_socket_is_unix(listener), 1);

    struct sockaddr_un address;
    socklen_t length = abstract_address(&address, name, (size_t)name_length);
    int raw = socket(AF_UNIX, SOCK_STREAM, 0);
    CHECK_EQ(connect(raw, (struct sockaddr *)&address, length), 0);
    sk_socket_t *server = recorder_accepted(&recorder, 0);
    CHECK_EQ(sk_socket_get_receives_descriptors(server), 1); /* the listener's */

    int pipe_ends[2];
    CHECK_EQ(pipe(pipe_ends), 0);
    /* The raw peer passes the pipe's write end with one byte. */
    char byte = 'z';
    struct iovec vector = {&byte, 1};
    union { struct cmsghdr header; char space[CMSG_SPACE(sizeof(int))]; } control;
    memset(&control, 0, sizeof control);
    struct msghdr message = {0};
    message.msg_iov = &vector;
    message.msg_iovlen = 1;
    message.msg_control = control.space;
    message.msg_controllen = sizeof control.space;
    struct cmsghdr *header = CMSG_FIRSTHDR(&message);
    header->cmsg_level = SOL_SOCKET;
    header->cmsg_type = SCM_RIGHTS;
    header->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(header), &pipe_ends[1], sizeof(int));
    CHECK_EQ(sendmsg(raw, &message, 0), 1);
    CHECK_EQ(sk_socket_read_to_length(server, 1, -1, 1, NULL), SK_OK);
    recorder_expect(&recorder, EVENT_READ, 1);
    CHECK_EQ(sk_socket_take_received_descriptors(server, NULL, 0, &error), 1);
    int received[4] = {-1, -1, -1, -1};
    CHECK_EQ(sk_socket_take_received_descriptors(server, received, 4, &error), 1);
    CHECK_EQ(sk_socket_take_received_descriptors(server, received + 1, 3, &error), 0);
    CHECK_EQ(write(received[0], "via c", 5), 5);
    close(received[0]);
    char text[8];
    CHECK_EQ(read(pipe_ends[0], text, sizeof text), 5);
    CHECK_EQ(memcmp(text, "via c", 5), 0);

    /* SocketKit passes one back: the raw peer receives it with the byte. */
    CHECK_EQ(sk_socket_write_with_descriptors(server, "w", 1, &pipe_ends[1], 1, -1, 7, &error), SK_OK);
    recorder_expect(&recorder, EVENT_WRITE, 1);
    memset(&control, 0, sizeof control);
    message.msg_controllen = sizeof control.space;
    byte = 0;
    CHECK_EQ(recvmsg(raw, &message, 0), 1);
    CHECK_EQ(byte, 'w');
    header = CMSG_FIRSTHDR(&message);
    CHECK(header != NULL && header->cmsg_type == SCM_RIGHTS);
    int passed = -1;
    memcpy(&passed, CMSG_DATA(header), sizeof passed);
    CHECK_EQ(write(passed, "back", 4), 4);
    close(passed);
    CHECK_EQ(read(pipe_ends[0], text, sizeof text), 4);
    CHECK_EQ(memcmp(text, "back", 4), 0);

    pid_t pid = 0;
    uid_t uid = 1;
    gid_t gid = 1;
    CHECK_EQ(sk_socket_get_peer_credentials(server, &pid, &uid, &gid, &error), SK_OK);
    CHECK_EQ(pid, getpid());
    CHECK_EQ(uid, getuid());
    CHECK_EQ(gid, getgid());
    CHECK_EQ(sk_socket_get_peer_credentials(server, NULL, NULL, NULL, NULL), SK_OK);

    /* Bad input. */
    CHECK_EQ(sk_socket_write_with_descriptors(server, "w", 1, NULL, 1, -1, 0, &error), SK_ERR_BAD_PARAM);
    CHECK_EQ(sk_socket_write_with_descriptors(server, "w", 1, &pipe_ends[1], 0, -1, 0, &error), SK_ERR_BAD_PARAM);
    int closed_descriptor = 987654;
    CHECK_EQ(sk_socket_write_with_descriptors(server, "w", 1, &closed_descriptor, 1, -1, 0, &error), SK_ERR_BAD_PARAM);
    CHECK_EQ(sk_socket_write_with_descriptors(server, NULL, 1, &pipe_ends[1], 1, -1, 0, &error), SK_ERR_BAD_PARAM);
    CHECK_EQ(sk_socket_accept_on_abstract_unix_name(listener, name, 0, &error), SK_ERR_BAD_PARAM);
    sk_socket_t *client = recorded_socket(&recorder, NULL);
    static char long_name[108];
    memset(long_name, 'n', sizeof long_name);
    CHECK_EQ(sk_socket_connect_to_abstract_unix_name(client, long_name, sizeof long_name, -1, &error), SK_ERR_BAD_PARAM);
    CHECK_EQ(sk_socket_connect_to_abstract_unix_name(client, NULL, 3, -1, &error), SK_ERR_BAD_PARAM);
    CHECK_EQ(sk_socket_get_peer_credentials(client, &pid, &uid, &gid, &error), SK_ERR_BAD_CONFIG);
    /* A SocketKit client by the same name; its did_connect shows '@' and the name. */
    CHECK_EQ(sk_socket_connect_to_abstract_unix_name(client, name, (size_t)name_length, 10, &error), SK_OK);
    recorder_expect(&recorder, EVENT_CONNECT, 1);
    CHECK_EQ(recorder_event(&recorder, EVENT_CONNECT, 0).text[0], '@');
    CHECK_EQ(memcmp(recorder_event(&recorder, EVENT_CONNECT, 0).text + 1, name, 3), 0);
    CHECK_EQ(sk_socket_take_received_descriptors(NULL, NULL, 0, NULL), SK_ERR_INVALID_HANDLE);

    CHECK_EQ(sk_socket_release(client), SK_OK);
    CHECK_EQ(sk_socket_release(listener), SK_OK);
    close(raw);
    close(pipe_ends[0]);
    close(pipe_ends[1]);
    recorder_destroy(&recorder);
}

/* sk_socket_accept_on_fds: a listening descriptor and a bound one are adopted; bad ones are
 * refused and stay the caller's; systemd's activation hands over descriptor 3. */
void test_accept_on_fds_and_socket_activation(void) {
    /* Descriptor 3 as systemd would pass it: a listening socket, made before anything else
     * (the runner starts each test with only 0, 1 and 2 open). */
    int activated = fcntl(3, F_GETFD) < 0;
    uint16_t activated_port = 0;
    if (activated) {
        int made = raw_listen("127.0.0.1", &activated_port, 8);
        if (made != 3) {
            CHECK_EQ(dup2(made, 3), 3);
            close(made);
        }
    } else {
        fprintf(stderr, "note: descriptor 3 is in use: socket activation of a real descriptor not checked\n");
    }
    recorder_t recorder;
    recorder_init(&recorder);
    sk_error_t error;
    char pid_text[32];
    snprintf(pid_text, sizeof pid_text, "%d", (int)getpid() + 1);
    setenv("LISTEN_PID", pid_text, 1);
    setenv("LISTEN_FDS", "1", 1);
    CHECK_EQ(sk_socket_activation_fds(NULL, 0, 1, &error), 0); /* another process's */
    CHECK(getenv("LISTEN_PID") == NULL && getenv("LISTEN_FDS") == NULL);
    snprintf(pid_text, sizeof pid_text, "%d", (int)getpid());
    setenv("LISTEN_PID", pid_text, 1);
    setenv("LISTEN_FDS", "one", 1);
    CHECK_EQ(sk_socket_activation_fds(NULL, 0, 1, &error), SK_ERR_BAD_PARAM);

    if (activated) {
        setenv("LISTEN_PID", pid_text, 1);
        setenv("LISTEN_FDS", "1", 1);
        int fds[4] = {-1, -1, -1, -1};
        CHECK_EQ(sk_socket_activation_fds(fds, 4, 1, &error), 1);
        CHECK_EQ(fds[0], 3);
        CHECK(fcntl(3, F_GETFD) & FD_CLOEXEC);
        sk_socket_t *listener = recorded_socket(&recorder, NULL);
        CHECK_EQ(sk_socket_accept_on_fds(listener, fds, 1, &error), SK_OK);
        uint16_t port = 0;
        CHECK_EQ(sk_socket_get_local_port(listener, &port), SK_OK);
        CHECK_EQ(port, activated_port);
        int client = raw_connect("127.0.0.1", port);
        recorder_expect(&recorder, EVENT_ACCEPT, 1);
        close(client);
        CHECK_EQ(sk_socket_release(listener), SK_OK);
    }

    /* A bound socket that does not listen is made to. */
    int bound = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in address = {0};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    CHECK_EQ(bind(bound, (struct sockaddr *)&address, sizeof address), 0);
    socklen_t length = sizeof address;
    CHECK_EQ(getsockname(bound, (struct sockaddr *)&address, &length), 0);
    sk_socket_t *second = recorded_socket(&recorder, NULL);
    int unbound = socket(AF_INET, SOCK_STREAM, 0);
    CHECK_EQ(sk_socket_accept_on_fds(second, &unbound, 1, &error), SK_ERR_BAD_PARAM);
    CHECK(fcntl(unbound, F_GETFD) >= 0); /* still the caller's */
    close(unbound);
    CHECK_EQ(sk_socket_accept_on_fds(second, NULL, 1, &error), SK_ERR_BAD_PARAM);
    CHECK_EQ(sk_socket_accept_on_fds(second, &bound, 0, &error), SK_ERR_BAD_PARAM);
    int twice[2] = {bound, bound};
    CHECK_EQ(sk_socket_accept_on_fds(second, twice, 2, &error), SK_ERR_BAD_PARAM);
    CHECK_EQ(sk_socket_accept_on_fds(second, &bound, 1, &error), SK_OK);
    CHECK_EQ(sk_socket_is_accepting(second), 1);
    CHECK_EQ(sk_socket_accept_on_fds(second, &bound, 1, &error), SK_ERR_BAD_CONFIG);
    int client = raw_connect("127.0.0.1", ntohs(address.sin_port));
    recorder_expect(&recorder, EVENT_ACCEPT, activated ? 2 : 1);
    close(client);
    CHECK_EQ(sk_socket_accept_on_fds(NULL, &bound, 1, &error), SK_ERR_INVALID_HANDLE);
    CHECK_EQ(sk_socket_release(second), SK_OK);
    recorder_destroy(&recorder);
}

static int connect_refused(uint16_t port) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in address = {0};
    address.sin_family = AF_INET;
    address.sin_port = htons(port);
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int refused = connect(fd, (struct sockaddr *)&address, sizeof address) != 0 && errno == ECONNREFUSED;
    close(fd);
    return refused;
}

/* sk_socket_set_reuse_port, and a listener on every loop of a two-loop group: connections
 * spread over both loops' threads, each did_accept naming the one listener; its release
 * closes every loop's socket before it returns. */
void test_reuse_port_and_a_listener_on_every_loop(void) {
    recorder_t recorder;
    recorder_init(&recorder);
    sk_error_t error;
    sk_socket_t *first = recorded_socket(&recorder, NULL);
    CHECK_EQ(sk_socket_get_reuse_port(first), 0);
    CHECK_EQ(sk_socket_set_reuse_port(first, 1), SK_OK);
    CHECK_EQ(sk_socket_get_reuse_port(first), 1);
    CHECK_EQ(sk_socket_accept_on_interface(first, "127.0.0.1", 0, &error), SK_OK);
    uint16_t shared = 0;
    CHECK_EQ(sk_socket_get_local_port(first, &shared), SK_OK);
    sk_socket_t *second = recorded_socket(&recorder, NULL);
    CHECK_EQ(sk_socket_accept_on_interface(second, "127.0.0.1", shared, &error), SK_ERR_SYSTEM);
    CHECK_EQ(error.os_error, EADDRINUSE);
    CHECK_EQ(sk_socket_set_reuse_port(second, 1), SK_OK);
    CHECK_EQ(sk_socket_accept_on_interface(second, "127.0.0.1", shared, &error), SK_OK);
    CHECK_EQ(sk_socket_release(second), SK_OK);
    CHECK_EQ(sk_socket_release(first), SK_OK);

    sk_loop_group_t *group = NULL;
    CHECK_EQ(sk_loop_group_create(2, &group, &error), SK_OK);
    sk_socket_delegate_t delegate = recorder_delegate();
    sk_socket_t *listener = NULL;
    CHECK_EQ(sk_socket_create(&delegate, sizeof delegate, &recorder, NULL, group, &listener, &error), SK_OK);
    CHECK_EQ(sk_socket_set_accepts_on_every_loop(listener, 1), SK_OK);
    CHECK_EQ(sk_socket_get_accepts_on_every_loop(listener), 1);
    CHECK_EQ(sk_socket_accept_on_interface(listener, "127.0.0.1", 0, &error), SK_OK);
    uint16_t port = 0;
    CHECK_EQ(sk_socket_get_local_port(listener, &port), SK_OK);
    enum { CLIENTS = 32 };
    int clients[CLIENTS];
    for (int i = 0; i < CLIENTS; i++) clients[i] = raw_connect("127.0.0.1", port);
    recorder_expect(&recorder, EVENT_ACCEPT, CLIENTS);
    pthread_t threads[2];
    int thread_count = 0;
    for (size_t i = 0; i < CLIENTS; i++) {
        event_t accepted = recorder_event(&recorder, EVENT_ACCEPT, i);
        CHECK(accepted.sock == listener);
        int known = 0;
        for (int t = 0; t < thread_count; t++) known |= pthread_equal(threads[t], accepted.thread);
        if (!known) {
            CHECK(thread_count < 2);
            threads[thread_count++] = accepted.thread;
        }
    }
    CHECK_EQ(thread_count, 2); /* all 32 on one loop: 2^-31 */
    CHECK_EQ(sk_socket_release(listener), SK_OK);
    CHECK(connect_refused(port)); /* every loop's socket closed before the release returned */
    for (int i = 0; i < CLIENTS; i++) close(clients[i]);
    recorder_destroy(&recorder);
    CHECK_EQ(sk_loop_group_release(group), SK_OK);
}

/* sk_socket_write_file sends a file region in order with the other writes, and
 * sk_socket_read_to_file writes a read's bytes into a file, completing with data NULL. */
void test_write_file_and_read_to_file(void) {
    enum { SIZE = 300000 };
    unsigned char *contents = malloc(SIZE);
    fill_pattern(contents, SIZE, 4);
    char path[] = "/tmp/socketkit-c-file-XXXXXX";
    int file = mkstemp(path);
    CHECK(file >= 0);
    unlink(path);
    CHECK_EQ(write(file, contents, SIZE), SIZE);
    recorder_t recorder;
    recorder_init(&recorder);
    int listener = -1, peer = -1;
    sk_socket_t *sock = connected_recorded_socket(&recorder, NULL, &listener, &peer);
    sk_error_t error;
    CHECK_EQ(sk_socket_write(sock, "head", 4, -1, 1, &error), SK_OK);
    CHECK_EQ(sk_socket_write_file(sock, file, 100, 200000, -1, 2, &error), SK_OK);
    CHECK_EQ(sk_socket_write(sock, "tail", 4, -1, 3, &error), SK_OK);
    unsigned char *received = malloc(SIZE);
    raw_receive(peer, received, 200008);
    CHECK_EQ(memcmp(received, "head", 4), 0);
    CHECK_EQ(memcmp(received + 4, contents + 100, 200000), 0);
    CHECK_EQ(memcmp(received + 200004, "tail", 4), 0);
    recorder_expect(&recorder, EVENT_WRITE, 3);
    CHECK_EQ(recorder_event(&recorder, EVENT_WRITE, 1).tag, 2);
    CHECK_EQ(lseek(file, 0, SEEK_CUR), SIZE); /* untouched by the send */
    /* Bad regions and descriptors. */
    CHECK_EQ(sk_socket_write_file(sock, file, SIZE, 0, -1, 0, &error), SK_ERR_BAD_PARAM);
    CHECK_EQ(sk_socket_write_file(sock, file, -1, 10, -1, 0, &error), SK_ERR_BAD_PARAM);
    CHECK_EQ(sk_socket_write_file(sock, file, 10, SIZE, -1, 0, &error), SK_ERR_BAD_PARAM);
    CHECK_EQ(sk_socket_write_file(sock, peer, 0, 0, -1, 0, &error), SK_ERR_BAD_PARAM); /* a socket */
    CHECK_EQ(sk_socket_read_to_file(sock, 0, file, -1, 0, &error), SK_ERR_BAD_PARAM);
    CHECK_EQ(sk_socket_read_to_file(sock, 10, peer, -1, 0, &error), SK_ERR_BAD_PARAM);

    /* A read into the file (from its start, where the position now is). */
    CHECK_EQ(lseek(file, 0, SEEK_SET), 0);
    CHECK_EQ(ftruncate(file, 0), 0);
    CHECK_EQ(sk_socket_read_to_file(sock, SIZE, file, -1, 7, &error), SK_OK);
    raw_send(peer, contents, SIZE);
    recorder_expect(&recorder, EVENT_READ, 1);
    event_t done = recorder_event(&recorder, EVENT_READ, 0);
    CHECK_EQ(done.tag, 7);
    CHECK_EQ(done.length, 0);
    CHECK_EQ(lseek(file, 0, SEEK_CUR), SIZE);
    CHECK_EQ(pread(file, received, SIZE, 0), SIZE);
    CHECK_EQ(memcmp(received, contents, SIZE), 0);
    CHECK_EQ(sk_socket_write_file(NULL, file, 0, 0, -1, 0, NULL), SK_ERR_INVALID_HANDLE);
    CHECK_EQ(sk_socket_read_to_file(NULL, 1, file, -1, 0, NULL), SK_ERR_INVALID_HANDLE);
    CHECK_EQ(sk_socket_release(sock), SK_OK);
    close(peer);
    close(listener);
    close(file);
    free(received);
    free(contents);
    recorder_destroy(&recorder);
}

/* Happy Eyeballs v2: the resolution delay's setter and getter, a name answered by one
 * family (this machine's name, when /etc/hosts gives it 127.0.0.1 alone) and one no
 * family answers. */
void test_happy_eyeballs_v2_through_the_resolver(void) {
    recorder_t recorder;
    recorder_init(&recorder);
    sk_socket_t *sock = recorded_socket(&recorder, NULL);
    double seconds = -1;
    CHECK_EQ(sk_socket_get_resolution_delay(sock, &seconds), SK_OK);
    CHECK(seconds == 0.05);
    CHECK_EQ(sk_socket_set_resolution_delay(sock, NAN), SK_OK);
    CHECK_EQ(sk_socket_get_resolution_delay(sock, &seconds), SK_OK);
    CHECK(seconds == 0);
    CHECK_EQ(sk_socket_set_resolution_delay(sock, 0.2), SK_OK);
    CHECK_EQ(sk_socket_get_resolution_delay(NULL, &seconds), SK_ERR_INVALID_HANDLE);
    sk_error_t error;
    CHECK_EQ(sk_socket_connect_to_host(sock, "no-such-host.invalid", 80, NULL, 20, &error), SK_OK);
    recorder_expect(&recorder, EVENT_DISCONNECT, 1);
    CHECK_EQ(recorder_event(&recorder, EVENT_DISCONNECT, 0).error_code, SK_ERR_RESOLUTION);

    char name[256] = {0};
    CHECK_EQ(gethostname(name, sizeof name - 1), 0);
    sk_address_t found[4];
    int count = sk_lookup_host_addresses(name, 0, found, 4, &error);
    if (count == 1 && sk_address_is_ipv4((struct sockaddr *)&found[0].address, found[0].length)) {
        uint16_t port = 0;
        int listener = raw_listen("127.0.0.1", &port, 4);
        CHECK_EQ(sk_socket_set_ipv4_preferred_over_ipv6(sock, 0), SK_OK); /* the A answer waits, then goes */
        CHECK_EQ(sk_socket_connect_to_host(sock, name, port, NULL, 20, &error), SK_OK);
        int peer = raw_accept(listener);
        recorder_expect(&recorder, EVENT_CONNECT, 1);
        CHECK_STR(recorder_event(&recorder, EVENT_CONNECT, 0).text, "127.0.0.1");
        close(peer);
        close(listener);
    } else {
        fprintf(stderr, "note: %s does not resolve to one IPv4 address: a name through the resolver not checked\n", name);
    }
    CHECK_EQ(sk_socket_release(sock), SK_OK);
    recorder_destroy(&recorder);
}
