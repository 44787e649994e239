/* SPDX-License-Identifier: MIT */
/*
 * SocketKitC: the few things Swift cannot reach directly from Glibc.
 *
 * Only shims live here, no logic: headers Glibc's module does not export
 * (epoll, eventfd, timerfd), GNU-only functions that need _GNU_SOURCE (which
 * must never be defined for the Swift importer, see BUILDING.md §9), and
 * macros that do not import.
 */
#ifndef SOCKETKIT_C_H
#define SOCKETKIT_C_H

#include <stdint.h>
#include <unistd.h>
#include <sys/syscall.h>
#include <stddef.h>
#include <sys/types.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/timerfd.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#include <netdb.h>
#include <net/if.h>
#include <ifaddrs.h>
#include <pthread.h>
#include <openssl/ssl.h>
#include <openssl/err.h>
#include <openssl/x509v3.h>
#include <openssl/pem.h>
#include <openssl/pkcs12.h>
#include <openssl/ocsp.h>

/* The public C API's types (delegate struct, error struct, descriptors), so that the
 * @_cdecl implementations in Sources/SocketKit/CAPI use exactly what users compile
 * against. */
#include "../../../include/socketkit.h"

/* SK_VERSION_STRING as a C string with static storage, for sk_version(): the header's
 * version block is the one place the version is written (Swift imports the string macro as
 * a String, which has no stable address). */
static inline const char *skc_version_string(void) {
    return SK_VERSION_STRING;
}

/* accept4(2) with SOCK_NONBLOCK | SOCK_CLOEXEC. */
int skc_accept_nonblocking(int fd, struct sockaddr *address, socklen_t *length);

/* pthread_setname_np(3) for the calling thread (names are cut to 15 bytes). */
void skc_set_current_thread_name(const char *name);

/* The kernel thread id of the calling thread (gettid(2)). */
int skc_current_thread_id(void);

/* The number of CPUs this thread may run on (sched_getaffinity(2) and CPU_COUNT, which is
 * a macro), or 0 if the kernel does not say. */
int skc_available_cpus(void);

/* sizeof(((struct sockaddr_un *)0)->sun_path). */
static inline size_t skc_unix_path_capacity(void) {
    return sizeof(((struct sockaddr_un *)0)->sun_path);
}

/* Speed trick: initial-exec thread-locals (SKC_THREAD_LOCAL). The per-thread slots below are
 * read for every event or call (the callback scope, the event sink) and before every wait
 * (the wait hook), so they use the initial-exec model: one %fs-relative access, where the
 * model a shared library gets by default (global-dynamic) calls __tls_get_addr each time.
 * Safe for a library loaded with dlopen (Python's ctypes) because its whole TLS block is a
 * few dozen bytes, well within the surplus glibc keeps for such libraries. What it saves:
 * bench/README.md, "Speed tricks". Switching it off: build with
 * -Xcc -DSOCKETKIT_NO_INITIAL_EXEC_TLS (the default model then). */
#ifdef SOCKETKIT_NO_INITIAL_EXEC_TLS
#define SKC_THREAD_LOCAL __thread
#else
#define SKC_THREAD_LOCAL __thread __attribute__((tls_model("initial-exec")))
#endif

/* The handle and object of the socket whose C callback runs on this thread, for the C API's
 * fast path (Sources/SocketKit/CAPI/CallbackScope.swift): a call made from inside a callback
 * about that callback's own socket skips the handle table. */
typedef struct {
    uintptr_t handle;
    void *object;
    uintptr_t kind;
} skc_callback_scope_t;
extern SKC_THREAD_LOCAL skc_callback_scope_t skc_callback_scope;

static inline skc_callback_scope_t skc_callback_scope_enter(uintptr_t handle, void *object, uintptr_t kind) {
    skc_callback_scope_t saved = skc_callback_scope;
    skc_callback_scope.handle = handle;
    skc_callback_scope.object = object;
    skc_callback_scope.kind = kind;
    return saved;
}

static inline void skc_callback_scope_leave(skc_callback_scope_t saved) {
    skc_callback_scope = saved;
}

/* The object of the running callback if `handle` (non-zero) is its socket's, else NULL. */
static inline void *skc_callback_scope_object(uintptr_t handle, uintptr_t kind) {
    return handle != 0 && skc_callback_scope.handle == handle && skc_callback_scope.kind == kind
        ? skc_callback_scope.object : NULL;
}

/* Speed trick: direct system calls (skc_read, skc_send, skc_sendto, skc_sendmsg, skc_recv,
 * skc_epoll_wait, and skc_recv_datagrams / skc_send_datagrams in shim.c). The event loop's
 * per-message system calls are made with syscall(2) rather than through glibc's wrappers:
 * those are cancellation points, and in a process with more than one thread each call
 * enables and disables asynchronous cancellation around the system call. SocketKit never
 * cancels its threads, and the calls are otherwise the same (-1 with errno on failure).
 * epoll_pwait with no signal mask is epoll_wait on every architecture (arm64 has no
 * epoll_wait). What it saves: bench/README.md, "Speed tricks". Switching it off: build with
 * -Xcc -DSOCKETKIT_NO_DIRECT_SYSCALLS (glibc's wrappers then). */
static inline ssize_t skc_read(int fd, void *buffer, size_t count) {
#ifdef SOCKETKIT_NO_DIRECT_SYSCALLS
    return read(fd, buffer, count);
#else
    return (ssize_t)syscall(SYS_read, fd, buffer, count);
#endif
}

static inline ssize_t skc_sendto(int fd, const void *buffer, size_t count, int flags, const struct sockaddr *to,
                                 socklen_t to_length) {
#ifdef SOCKETKIT_NO_DIRECT_SYSCALLS
    return sendto(fd, buffer, count, flags, to, to_length);
#else
    return (ssize_t)syscall(SYS_sendto, fd, buffer, count, flags, to, to_length);
#endif
}

static inline ssize_t skc_sendmsg(int fd, const struct msghdr *message, int flags) {
#ifdef SOCKETKIT_NO_DIRECT_SYSCALLS
    return sendmsg(fd, message, flags);
#else
    return (ssize_t)syscall(SYS_sendmsg, fd, message, flags);
#endif
}

static inline ssize_t skc_recv(int fd, void *buffer, size_t count, int flags) {
#ifdef SOCKETKIT_NO_DIRECT_SYSCALLS
    return recv(fd, buffer, count, flags);
#else
    return (ssize_t)syscall(SYS_recvfrom, fd, buffer, count, flags, NULL, NULL);
#endif
}

static inline int skc_epoll_wait(int epoll_fd, struct epoll_event *events, int capacity, int timeout) {
#ifdef SOCKETKIT_NO_DIRECT_SYSCALLS
    return epoll_wait(epoll_fd, events, capacity, timeout);
#else
    return (int)syscall(SYS_epoll_pwait, epoll_fd, events, capacity, timeout, NULL, (size_t)8);
#endif
}

static inline ssize_t skc_send(int fd, const void *buffer, size_t count, int flags) {
    return skc_sendto(fd, buffer, count, flags, NULL, 0);
}

/* The C API's event sink (CAPI/CEventRecords.swift) of the sk_poll_events running on this
 * thread, or NULL: read for every event delivered (SKC_THREAD_LOCAL, above). */
extern SKC_THREAD_LOCAL void *skc_event_sink;

static inline void *skc_event_sink_current(void) {
    return skc_event_sink;
}

static inline void skc_event_sink_set(void *sink) {
    skc_event_sink = sink;
}

/* FIONREAD is a plain integer on Linux, but keep the ioctl typed. */
static inline int skc_bytes_readable(int fd, int *count) {
    return ioctl(fd, FIONREAD, count);
}

/* recvmmsg(2) / sendmmsg(2), which <sys/socket.h> declares only under _GNU_SOURCE (out of
 * Swift's sight, with struct mmsghdr): skc_mmsghdr has mmsghdr's layout (checked in shim.c),
 * so the engine keeps its batch headers in the form the kernel reads and nothing is copied
 * per call. At most SKC_MAX_DATAGRAM_BATCH messages; each message's msg_len receives its
 * byte count. Return the number of messages handled, or -1 with errno. */
#define SKC_MAX_DATAGRAM_BATCH 64
typedef struct skc_mmsghdr {
    struct msghdr msg_hdr;
    unsigned int msg_len;
} skc_mmsghdr;
int skc_recv_datagrams(int fd, skc_mmsghdr *messages, unsigned int count);
int skc_send_datagrams(int fd, skc_mmsghdr *messages, unsigned int count);

/* Unix-domain extras, whose structs (struct ucred) need _GNU_SOURCE and whose control
 * messages are built with macros (CMSG_*) Swift cannot import. */

/* The most descriptors one SCM_RIGHTS message carries (the kernel's SCM_MAX_FD). */
#define SKC_MAX_PASSED_DESCRIPTORS 253

/* SO_PEERCRED: the peer's process, user and group at connect time. 0, or -1 with errno. */
int skc_peer_credentials(int fd, int32_t *pid, uint32_t *uid, uint32_t *gid);

/* recvmsg(2) of up to `count` bytes with room for SCM_RIGHTS (MSG_CMSG_CLOEXEC): returns
 * what read(2) would; the descriptors that came with the bytes are stored in `fds` (room
 * for SKC_MAX_PASSED_DESCRIPTORS) and counted in *fd_count (0 when none). *truncated is set
 * when the kernel dropped some (MSG_CTRUNC: it closed them). */
ssize_t skc_read_with_descriptors(int fd, void *buffer, size_t count, int *fds, int *fd_count, int *truncated);

/* sendmsg(2) of `iovcnt` vectors with one SCM_RIGHTS message carrying `fd_count` (1...
 * SKC_MAX_PASSED_DESCRIPTORS) descriptors, MSG_NOSIGNAL: the kernel attaches them to the
 * first byte sent. Returns what sendmsg returns. */
ssize_t skc_send_with_descriptors(int fd, const struct iovec *vectors, int iovcnt, const int *fds, int fd_count);

/* Source-specific multicast: MCAST_JOIN_SOURCE_GROUP (`join` nonzero) or
 * MCAST_LEAVE_SOURCE_GROUP at `level` (IPPROTO_IP or IPPROTO_IPV6) with a struct
 * group_source_req (which needs _GNU_SOURCE's view of <netinet/in.h>). 0, or -1 with errno. */
int skc_source_membership(int fd, int join, int level, unsigned interface, const struct sockaddr *group,
                          socklen_t group_length, const struct sockaddr *source, socklen_t source_length);

/* Packet info (IP_PKTINFO / IPV6_RECVPKTINFO), whose structs need _GNU_SOURCE and whose
 * control messages are read with CMSG_* macros. skc_set_packet_info turns it on or off on
 * a socket of `family` (AF_INET or AF_INET6): 0, or -1 with errno. skc_packet_info finds it
 * in a received message: 1 with the address the datagram was sent to (port 0) in
 * `destination` / `length` and the interface it came in on in `interface`, or 0 when the
 * message carries none (the option was off when it was queued). SKC_PACKET_INFO_CONTROL
 * is the control room one message needs for it (with room to spare). */
#define SKC_PACKET_INFO_CONTROL 128
/* UDP segmentation offload (UDP_SEGMENT: the kernel cuts each send into datagrams of
 * `size` bytes, 0: off) and receive offload (UDP_GRO: the kernel may hand over several
 * datagrams of one sender, of one size but the last, in one buffer). 0, or -1 with errno
 * (ENOPROTOOPT: a kernel without them, before 4.18 and 5.0). skc_coalesced_segment_size:
 * the size of each datagram in a received buffer (its UDP_GRO control message), or 0 when
 * the buffer is one datagram. */
int skc_set_udp_segment(int fd, int size);
int skc_set_udp_gro(int fd, int enabled);
int skc_coalesced_segment_size(const struct msghdr *message);
int skc_set_packet_info(int fd, int family, int enabled);
int skc_packet_info(const struct msghdr *message, struct sockaddr_storage *destination, socklen_t *length,
                    unsigned *interface);

/* sendfile(2) of `count` bytes of `file` from `offset` (the file's own position untouched)
 * to the socket `fd`: the bytes sent, or -1 with errno. */
ssize_t skc_sendfile(int fd, int file, int64_t offset, size_t count);

/* OpenSSL: the macros Swift cannot import (BUILDING.md §10), one thin wrapper each. */

/* OPENSSL_init_ssl with OPENSSL_INIT_NO_ATEXIT: OpenSSL must not tear itself down in an
 * atexit handler while SocketKit's loop threads may still be in a handshake (it did: a
 * NULL lock in RAND_bytes during exit, seen under valgrind). 1 on success. */
int skc_openssl_init(void);

/* The calling thread's one-shot wait hook (sk_thread_set_wait_hook): set, and run (then
 * forgotten) just before the thread blocks inside SocketKit. Swift reaches them only through
 * ThreadWaitHook (Sources/SocketKit/Support/ThreadWaitHook.swift). */
void skc_set_thread_wait_hook(void (*hook)(void *context), void *context);
void skc_thread_will_wait(void);

/* SSL_CTX_set_min_proto_version / _max_ (0 = no bound). 1 on success. */
int skc_tls_ctx_set_versions(SSL_CTX *context, int minimum, int maximum);
/* SSL_CTX_set_options(SSL_OP_NO_COMPRESSION | SSL_OP_NO_RENEGOTIATION |
 * SSL_OP_CIPHER_SERVER_PREFERENCE) and SSL_CTX_set_mode(SSL_MODE_ENABLE_PARTIAL_WRITE |
 * SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER): the engine's fixed choices. Not
 * SSL_MODE_RELEASE_BUFFERS: the engine frees the record buffers itself, once a connection
 * is idle (TCPSocketCore.noteTLSBuffersUsed). */
void skc_tls_ctx_set_engine_options(SSL_CTX *context);
/* SSL_CTX_set_session_cache_mode(SSL_SESS_CACHE_CLIENT | SSL_SESS_CACHE_NO_INTERNAL_STORE):
 * client sessions go to the new-session callback only. */
void skc_tls_ctx_set_client_session_cache(SSL_CTX *context);
/* SSL_CTX_set_session_cache_mode(SSL_SESS_CACHE_OFF) and SSL_OP_NO_TICKET. */
void skc_tls_ctx_disable_sessions(SSL_CTX *context);
/* SSL_set_tlsext_host_name (SNI). 1 on success. */
int skc_tls_set_server_name(SSL *ssl, const char *name);
/* Servers: `callback` runs with the client's SNI, before the certificate is chosen
 * (SSL_CTX_set_tlsext_servername_callback is a macro). */
/* SSL_set1_verify_cert_store (a macro): the store that verifies the peer's chain. */
int skc_tls_set_verify_store(SSL *ssl, X509_STORE *store);
void skc_tls_ctx_set_servername_callback(SSL_CTX *context, int (*callback)(SSL *ssl, int *alert, void *argument));
/* OCSP stapling (the SSL_*_tlsext_status_* calls are macros). The status callback runs on a
 * server when a client asked for a staple (return SSL_TLSEXT_ERR_OK with a response set, or
 * SSL_TLSEXT_ERR_NOACK), and on a client that asked, after the server's chain was verified,
 * staple or not (return 1 to go on, 0 to fail the handshake). */
void skc_tls_ctx_set_status_callback(SSL_CTX *context, int (*callback)(SSL *ssl, void *argument));
/* Clients: ask the server for a stapled OCSP response (status_request). 1 on success. */
int skc_tls_request_status(SSL *ssl);
/* The stapled response a client received: its length and bytes (owned by the SSL), or -1. */
long skc_tls_status_response(SSL *ssl, const unsigned char **bytes);
/* Servers: staple a copy of `bytes`. 1 on success. */
int skc_tls_set_status_response(SSL *ssl, const unsigned char *bytes, size_t length);
/* What a DER OCSP response says (skc_ocsp_parse, skc_ocsp_check). */
enum {
    SKC_OCSP_GOOD = 0,
    SKC_OCSP_REVOKED = 1,
    SKC_OCSP_UNKNOWN = 2,        /* the responder does not know the certificate */
    SKC_OCSP_MALFORMED = 3,      /* not DER OCSP, or its basic response does not parse */
    SKC_OCSP_UNSUCCESSFUL = 4,   /* the response status is not successful (tryLater, ...) */
    SKC_OCSP_UNVERIFIED = 5,     /* the signature or the responder's chain does not verify */
    SKC_OCSP_NO_STATUS = 6,      /* no status for this leaf and issuer */
    SKC_OCSP_NOT_CURRENT = 7,    /* thisUpdate in the future or nextUpdate past */
    SKC_OCSP_NO_CHAIN = 8,       /* no verified chain with the leaf's issuer to check against */
};
/* SKC_OCSP_GOOD when `bytes` is a successful OCSP response with a basic response, else
 * SKC_OCSP_MALFORMED or SKC_OCSP_UNSUCCESSFUL (servers check their file with it). */
int skc_ocsp_parse(const unsigned char *bytes, size_t length);
/* Checks a stapled response against the chain the SSL verified: the signature against the
 * SSL's verify store (OCSP_basic_verify), the status of the leaf issued by the next
 * certificate (OCSP_resp_find_status) and its validity with `leeway` seconds. The
 * revocation reason goes to *reason (-1 if none). */
int skc_ocsp_check(SSL *ssl, const unsigned char *bytes, size_t length, long leeway, int *reason);
/* BIO_set_mem_eof_return. */
void skc_bio_set_mem_eof_return(BIO *bio, int value);
/* ERR_GET_LIB / ERR_GET_REASON. */
int skc_err_lib(unsigned long error);
int skc_err_reason(unsigned long error);
/* XN_FLAG_RFC2253 (built from several macros). */
static inline unsigned long skc_xn_flag_rfc2253(void) { return XN_FLAG_RFC2253; }
/* sk_X509_num / sk_X509_value on a STACK_OF(X509). */
int skc_x509_stack_count(const STACK_OF(X509) *stack);
X509 *skc_x509_stack_value(const STACK_OF(X509) *stack, int index);
/* sk_X509_new_null / sk_X509_push / sk_X509_pop_free(X509_free). */
STACK_OF(X509) *skc_x509_stack_new(void);
int skc_x509_stack_push(STACK_OF(X509) *stack, X509 *certificate);
void skc_x509_stack_free(STACK_OF(X509) *stack);

/* Why skc_pkcs12_parse failed (OpenSSL's error queue has the detail). */
enum {
    SKC_PKCS12_NOT_PKCS12 = 1,    /* the bytes are no DER PKCS#12 */
    SKC_PKCS12_WRONG_PASSWORD = 2, /* the MAC does not verify with the password */
    SKC_PKCS12_UNSUPPORTED = 3,   /* an algorithm the loaded providers lack (RC2-40: legacy) */
    SKC_PKCS12_NO_IDENTITY = 4,   /* parsed, but without a private key or its certificate */
    SKC_PKCS12_OTHER = 5
};
/* d2i_PKCS12 and PKCS12_parse on `length` bytes. 1: *key, *certificate and *chain (NULL
 * or a stack, maybe empty) are the caller's. 0: nothing is, and *why says what failed. */
int skc_pkcs12_parse(const unsigned char *bytes, size_t length, const char *password, EVP_PKEY **key,
                     X509 **certificate, STACK_OF(X509) **chain, int *why);


/* The Swift runtime's reference counting entry points (exported C functions of libswiftCore,
   declared in swift/Runtime/HeapObject.h, which the toolchain does not install). Swift calls
   them only through RuntimeShortcuts (Sources/SocketKit/Support/RuntimeShortcuts.swift). */
/* A +1 strong reference to `object`, or NULL when it is being deinitialized. */
void *swift_tryRetain(void *object);
/* The unowned count keeps an object's memory (not the object) alive after its deinit. */
void *swift_unownedRetain(void *object);
void swift_unownedRelease(void *object);
/* Whether the strong reference count of `object` is one (the caller's reference is the only one). */
_Bool swift_isUniquelyReferenced_nonNull_native(const void *object);

#endif
