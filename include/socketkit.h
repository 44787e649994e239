/* SPDX-License-Identifier: MIT */
/*
 * socketkit.h - SocketKit: asynchronous TCP, TLS, Unix-domain and UDP sockets with the
 * programming model of CocoaAsyncSocket (GCDAsyncSocket and GCDAsyncUdpSocket): queued
 * reads and writes with tags and timeouts, framing (available bytes, exactly N bytes, up to
 * a separator), listeners whose connections arrive as new sockets, STARTTLS as a marker in
 * the queues, datagrams with filters and multicast, and a delegate of callbacks.
 *
 * Copyright (c) 2026 The SocketKit authors. MIT License: see the LICENSE file that comes
 * with SocketKit (https://github.com/socketkit/socketkit).
 *
 *     cc app.c $(pkg-config --cflags --libs socketkit)
 *
 * ---------------------------------------------------------------------------------------
 * CONVENTIONS
 *
 * Names      sk_<object>_<verb>, after the Objective-C selectors in snake_case:
 *            connectToHost:onPort:withTimeout:error: -> sk_socket_connect_to_host.
 * Results    Functions that can fail return an int: SK_OK (0), or what they are asked for
 *            (1/0 for the is_* questions, a length or count: see Getters), or a negative
 *            SK_ERR_* code. Most take a last `sk_error_t *error` that, when not NULL,
 *            receives the code, the OS errno (or resolver EAI_* value) and a readable
 *            message. sk_strerror() and sk_error_name() name every code.
 * Getters    One rule for every function that hands values back:
 *            - Out-pointers (out_*) may be NULL: that value is not stored. Only the
 *              out-handle of an sk_*_create function is required (SK_ERR_BAD_PARAM: an
 *              object no one could release).
 *            - Text and bytes of a length you cannot know in advance (hosts, paths,
 *              addresses, certificates, lookups) work as snprintf: the function copies
 *              what fits and returns the whole length (text: without its NUL), or a
 *              negative SK_ERR_* code; a buffer that is too small is never an error.
 *              Text is NUL-terminated whenever the capacity is at least 1, so it was cut
 *              exactly when the result is >= the capacity; bytes were cut when the result
 *              is > the capacity. A NULL buffer asks for the length alone, whatever the
 *              capacity. Where the capacity is passed by pointer (socklen_t
 *              *address_length, size_t *inout_length) the pointer is required, and it is
 *              set to the size needed, as getsockname(2) does (for text: with the NUL).
 *            Text in the fixed arrays of a struct (sk_error_t, sk_tls_info_t,
 *            sk_certificate_info_t) is cut to fit at a whole UTF-8 character and always
 *            NUL-terminated; each field says when that can happen.
 * Handles    Opaque pointers created by sk_*_create and given up by sk_*_release.
 *            The library keeps a registry of live handles: a NULL, released, stale or
 *            wrong-kind handle makes a call fail with SK_ERR_INVALID_HANDLE; it never
 *            crashes the process. Objects keep what they use alive internally, so
 *            handles may be released in any order.
 * Memory     Data passed to a callback is borrowed for the duration of the call only,
 *            and stays valid until it returns whatever the callback does: a call that
 *            ends the connection (a disconnect, or a write that fails) takes effect once
 *            the callback has returned.
 *            sk_socket_write() copies; sk_socket_write_no_copy() borrows until its
 *            release function runs. Strings returned by sk_version(), sk_strerror() and
 *            sk_error_name() are static.
 * Text       Host names, interfaces, paths and TLS settings are NUL-terminated UTF-8
 *            strings, so they cannot hold a NUL. Where text comes with a length (PEM
 *            text, the path inside a raw sockaddr_un), a NUL inside it is refused
 *            (SK_ERR_TLS_SETTINGS for TLS settings, else SK_ERR_BAD_PARAM): OpenSSL and
 *            the kernel would see only the text before it. The bindings refuse such text
 *            in their own strings (Python: a ValueError) before it reaches C.
 * Addresses  A struct sockaddr pointer and a length. An IPv4 or IPv6 address may come
 *            with any length from its family's struct (sizeof(struct sockaddr_in) or
 *            sizeof(struct sockaddr_in6)) up to sizeof(struct sockaddr_storage), as
 *            getnameinfo(3) and the kernel accept it; the bytes beyond its struct are
 *            ignored. A sockaddr_un has at most sizeof(struct sockaddr_un) bytes.
 * Timeouts   Seconds, as a double: negative or +INFINITY = none; 0 = fail unless the
 *            operation completes at once, that is by the time the socket's loop next polls
 *            (the same wherever the call is made from, a callback included); positive =
 *            measured from when the operation reaches the front of its queue (one too
 *            large for the clock, decades, never expires either). NaN is SK_ERR_BAD_PARAM.
 *            On expiry the delegate may extend it: a positive extension (+INFINITY: for
 *            good) re-arms it; anything else (0, negative, NaN) ends the connection with
 *            the timeout's error.
 *
 * THREADS
 *
 * Every function may be called from any thread, including from inside callbacks.
 * Each socket lives on one event loop (one thread), the only writer of the socket's
 * state; calls run on it, inline when made on that thread. The rule, for TCP and UDP alike:
 *   - a call that changes the socket's state waits for the loop to make the change and
 *     returns its answer, when made on another thread: sk_socket_connect_*(),
 *     sk_socket_accept_on_*() (sk_socket_accept_on_fds() too), sk_socket_create_from_fd(),
 *     sk_socket_disconnect() and sk_socket_disconnect_after_*(), the configuration setters
 *     (every sk_socket_set_* and sk_socket_clear_socket_options() of Configuration), the
 *     questions only the loop can answer (sk_socket_take_received_descriptors(),
 *     sk_socket_get_peer_credentials()), and every sk_udp_socket_* call but the sends,
 *     sk_udp_socket_perform and the getters (bind, connect, receiving, filters, multicast,
 *     options, close). So a read queued right after
 *     a connect is taken, an accept returns listening, a disconnect returns disconnected (a
 *     listener's descriptors closed and its Unix-domain socket file removed: a new listener
 *     may take the port or path at once; sk_socket_release() of a listener waits likewise),
 *     a bind returns bound and a close closed;
 *   - reads, writes, sk_socket_start_tls() (a marker in the queues), sends, sk_*_perform()
 *     and the answers to timeout and trust questions are queued without waiting, after
 *     checks against what the loop last published; what follows comes through callbacks;
 *   - getters read what the loop last published and never wait;
 *   - sk_socket_release(), sk_socket_set_delegate() and their UDP twins wait for a callback
 *     of that socket running on another thread to return (not when called from inside it);
 *   - sk_loop_group_release() joins the group's threads (unless called on one of them).
 * None of these waits can deadlock: a call never waits for a thread that is, directly or
 * through other waiting threads, waiting for the caller. When such a cycle would form, a
 * wait for a running callback in it gives way: that call goes on without waiting (no
 * callback of that socket starts afterwards, but the running one may still be finishing).
 * Only when every wait of the cycle is for a loop (two loops' callbacks calling each
 * other's sockets at the same moment) does the call that would close it not wait: a call
 * that returns an answer (a connect, an accept, a bind) fails with SK_ERR_BAD_CONFIG
 * and errno EDEADLK and has no effect, and one that does not (the disconnects,
 * sk_udp_socket_pause_receiving, _close, _close_after_sending, the setters, a listener's
 * release) is queued and takes effect when that loop goes on. On a loop that is stopping
 * or has stopped, the first kind fail with SK_ERR_BAD_CONFIG and the second return once
 * the loop has closed its sockets. A driven group (sk_loop_group_create_driven) has no
 * thread: the thread that created it runs it, and calls that wait for its loop from other
 * threads wait until that thread runs it.
 *
 * Callbacks of one socket run on its callback queue, never two at a time, in the order
 * the events happened; did_disconnect is the last callback of a connection (or listener,
 * or connection attempt). Callback queues:
 *   - NULL: the socket's own event loop thread. Fastest; a callback must not block.
 *   - sk_callback_queue_create_serial(): a thread of its own, shared by any number of
 *     sockets (the GCD serial delegate queue).
 *   - sk_callback_queue_create_host(): callbacks wait until the host calls
 *     sk_callback_queue_drain(); sk_callback_queue_fd() is readable while callbacks are
 *     pending, for poll(2), epoll, GLib or asyncio loops.
 *
 * SIGNALS
 *
 * SocketKit never raises SIGPIPE: every send uses MSG_NOSIGNAL. A peer that resets reports
 * SK_ERR_SYSTEM with errno EPIPE or ECONNRESET through did_disconnect, after the bytes that
 * arrived before the reset (see Reading). SocketKit's threads
 * block asynchronous signals, so the host's signal handlers run on the host's threads.
 *
 * FORK
 *
 * The library is not fork-safe once a socket, queue or group exists (its threads do not
 * survive fork). After fork, use SocketKit only in the parent, or exec in the child.
 *
 * ABI
 *
 * The library exports only sk_* symbols, versioned SOCKETKIT_<SK_VERSION_ABI>, with soname
 * libsocketkit.so.<SK_VERSION_ABI>. Compare SK_VERSION_NUMBER with sk_version_number() to
 * detect a header and library mismatch: a library of the same ABI and a version number at
 * least the header's has everything the header declares.
 *
 * Delegate structs are passed with their size: pass sizeof(sk_socket_delegate_t) or
 * sizeof(sk_udp_socket_delegate_t) as `delegate_size`. Members are only ever added at the
 * end, and the size follows the rule of the kernel's extensible structs (openat2, clone3):
 *   - smaller, from a program built with an older header: accepted down to the struct's
 *     first published version (sk_socket_delegate_t: the members up to did_disconnect;
 *     sk_udp_socket_delegate_t: all of them); the members it lacks are NULL;
 *   - larger, from a newer header: accepted when every member this library does not know
 *     is NULL; one that is set would never be called, so it is SK_ERR_BAD_PARAM, not
 *     silence (update the library);
 *   - always a whole number of members (a multiple of sizeof(void *)), at most 64 KiB.
 * Anything else is SK_ERR_BAD_PARAM. A NULL delegate means none; its size is not read.
 * ---------------------------------------------------------------------------------------
 */
#ifndef SOCKETKIT_H
#define SOCKETKIT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ======================================================================================
 * Version
 * ====================================================================================== */

/* The one place SocketKit's version is written: the Makefile, the pkg-config and CMake
 * files, the Swift package (SocketKitVersion) and the Python package (socketkit.__version__)
 * take it from here, and `make test` checks that every face agrees. CHANGELOG.md says what a
 * change of each number promises. */
#define SK_VERSION_MAJOR 0
#define SK_VERSION_MINOR 2
#define SK_VERSION_PATCH 0
/* MAJOR * 10000 + MINOR * 100 + PATCH */
#define SK_VERSION_NUMBER 200
#define SK_VERSION_STRING "0.2.0"
/* The ABI's number: the library's soname is libsocketkit.so.<SK_VERSION_ABI> and its
 * symbols are versioned SOCKETKIT_<SK_VERSION_ABI>. It changes only when a program built
 * against an earlier header could misbehave with this library (CHANGELOG.md). */
#define SK_VERSION_ABI 1

/* The library's version as "MAJOR.MINOR.PATCH". Static string. */
const char *sk_version(void);

/* The library's SK_VERSION_NUMBER. */
unsigned sk_version_number(void);

/* ======================================================================================
 * Errors
 * ====================================================================================== */

typedef enum sk_error_code {
    SK_OK = 0,
    /* Not valid in the socket's state or configuration: already connected, not connected,
     * no delegate, both address families disabled, reads or writes after
     * sk_socket_disconnect_after_*, a stopped event loop. */
    SK_ERR_BAD_CONFIG = -1,
    /* An argument is not acceptable: NULL where a pointer is required, empty host, zero
     * length, empty separator, maximum shorter than the separator, offset outside the
     * buffer, unknown interface, out-of-range number. */
    SK_ERR_BAD_PARAM = -2,
    /* The connect timeout passed before the connection was established. */
    SK_ERR_CONNECT_TIMEOUT = -3,
    /* A read timed out and the delegate did not extend it. */
    SK_ERR_READ_TIMEOUT = -4,
    /* A write timed out and the delegate did not extend it. */
    SK_ERR_WRITE_TIMEOUT = -5,
    /* A read to a separator reached its maximum length without the separator. */
    SK_ERR_READ_MAXED_OUT = -6,
    /* The peer closed the connection while the socket was meant to stay open. */
    SK_ERR_CLOSED = -7,
    /* Anything else; see the message. */
    SK_ERR_OTHER = -8,
    /* An operating-system call failed; os_error holds errno. */
    SK_ERR_SYSTEM = -9,
    /* A host name did not resolve; os_error holds the resolver's EAI_* code. */
    SK_ERR_RESOLUTION = -10,
    /* A handle was NULL, released, stale or of the wrong kind. */
    SK_ERR_INVALID_HANDLE = -11,
    /* UDP: a datagram was not sent within its timeout (through did_not_send). */
    SK_ERR_SEND_TIMEOUT = -12,
    /* UDP: a datagram was larger than the receive limit and was dropped (through
     * did_receive_error). */
    SK_ERR_TRUNCATED = -13,
    /* TLS. Each handshake or TLS failure reaches did_disconnect with one of these; the
     * message carries OpenSSL's reason. os_error holds the X.509 verification result
     * (X509_V_ERR_*) for the certificate codes, else OpenSSL's reason code (or 0). */
    /* TLS failed for a reason without its own code: a handshake_failure alert, no shared
     * cipher, a bad record, the peer rejecting our certificate, a peer that is not TLS. */
    SK_ERR_TLS_FAILED = -14,
    SK_ERR_TLS_CERT_EXPIRED = -15,          /* the peer's certificate has expired */
    SK_ERR_TLS_CERT_NOT_YET_VALID = -16,    /* the peer's certificate is not valid yet */
    SK_ERR_TLS_SELF_SIGNED = -17,           /* self-signed (leaf or root) and not trusted */
    SK_ERR_TLS_UNKNOWN_ISSUER = -18,        /* the chain leads to no trusted root */
    SK_ERR_TLS_HOSTNAME_MISMATCH = -19,     /* the certificate does not name the peer */
    /* The certificate failed verification for another reason: an issuer that is not a CA,
     * a bad signature, a weak key or digest, the wrong purpose (see the message). */
    SK_ERR_TLS_CERT_INVALID = -20,
    SK_ERR_TLS_CLIENT_CERT_REQUIRED = -21,  /* the server requires a client certificate */
    SK_ERR_TLS_PROTOCOL_VERSION = -22,      /* no protocol version both sides accept */
    SK_ERR_TLS_PEER_CLOSED = -23,           /* the peer closed during the handshake */
    SK_ERR_TLS_HANDSHAKE_TIMEOUT = -24,     /* the handshake outlived its timeout */
    /* The peer closed the TCP connection without close_notify: the data may be cut short.
     * Never reported as a clean close. */
    SK_ERR_TLS_TRUNCATED = -25,
    SK_ERR_TLS_PEER_REJECTED = -26,         /* manual trust evaluation answered no */
    /* The TLS settings cannot be used: an unreadable or invalid certificate, key or trust
     * file, a key that does not match its certificate, a wrong key password, an unknown
     * cipher, a server without a certificate, maximum version below minimum, an empty peer
     * name, PEM text with a NUL inside, a key-log file that cannot be opened. */
    SK_ERR_TLS_SETTINGS = -27,
    /* A write would take the socket's queued, unsent bytes above its maximum
     * (sk_socket_set_maximum_queued_write_bytes): it was refused and nothing of it queued.
     * The peer is not keeping up; stop writing until the queue drains (watermarks). */
    SK_ERR_WRITE_QUEUE_FULL = -28,
    /* The proxy (sk_socket_set_proxy) did not connect us to the target: it refused or
     * failed the connection, broke its protocol or closed during its handshake. The
     * error's os_error holds the SOCKS5 reply code (1-8) or the HTTP status when the proxy
     * gave one. An unreachable proxy is SK_ERR_SYSTEM, a silent one SK_ERR_CONNECT_TIMEOUT. */
    SK_ERR_PROXY = -29,
    /* The proxy requires authentication, or rejected the username and password (SOCKS5
     * RFC 1929 status, or HTTP 407 (or 401) in os_error). */
    SK_ERR_PROXY_AUTH = -30
} sk_error_code_t;

#define SK_ERROR_MESSAGE_CAPACITY 256

typedef struct sk_error {
    int code;                                  /* SK_OK or SK_ERR_* */
    int os_error;                              /* errno, EAI_* value, or 0 */
    char message[SK_ERROR_MESSAGE_CAPACITY];   /* NUL-terminated, possibly truncated */
} sk_error_t;

/* A sentence describing `code` ("read timed out"). Static; "unknown error" for others. */
const char *sk_strerror(int code);

/* The name of `code` ("SK_ERR_READ_TIMEOUT"). Static; "SK_ERR_UNKNOWN" for others. */
const char *sk_error_name(int code);

/* ======================================================================================
 * Event loop groups
 *
 * A group is a fixed set of event loops, one thread each. Sockets take the next loop of
 * their group, and a listener spreads the connections it accepts over its group's loops.
 * A process-wide default group (one loop per CPU the process may run on: its affinity
 * mask, so one under `taskset -c 0`) serves sockets created with a NULL group, so simple
 * programs never create one.
 * ====================================================================================== */

typedef struct sk_loop_group sk_loop_group_t;

/* Creates a group of `loop_count` loops (1...1024) and their threads.
 * Errors: SK_ERR_BAD_PARAM (count out of range or out_group NULL), SK_ERR_SYSTEM (no
 * descriptors or threads left). */
int sk_loop_group_create(int loop_count, sk_loop_group_t **out_group, sk_error_t *error);

/* The number of loops of `group` (NULL: the default group), or SK_ERR_INVALID_HANDLE. */
int sk_loop_group_loop_count(sk_loop_group_t *group);

/* A driven group: one loop with no thread of its own, run by the thread that calls this
 * function (the "host thread"), as libuv is embedded with uv_backend_fd() and
 * UV_RUN_NOWAIT. The host watches sk_loop_group_get_fd() in its own poll loop (asyncio,
 * GLib, select) and calls sk_loop_group_run_once() when it is readable. Socket I/O and
 * NULL-queue callbacks of the group's sockets then run on the host thread, and calls the
 * host thread makes on those sockets run inline: no hand-over to another thread, no
 * wake-up. Other threads may still use the sockets; their calls wait in the loop's task
 * queue and make the descriptor readable. Use it to serve connections from one thread
 * that already runs a poll loop, such as an interpreter's.
 * Errors: SK_ERR_BAD_PARAM (out_group NULL), SK_ERR_SYSTEM (no descriptors left). */
int sk_loop_group_create_driven(sk_loop_group_t **out_group, sk_error_t *error);

/* A driven group's descriptor (its epoll instance): readable while the loop has work to
 * do (ready sockets, a due timer, calls queued from any thread, reads and writes queued
 * between iterations). Owned by the group: do not read it or close it.
 * Returns the descriptor, SK_ERR_INVALID_HANDLE, or SK_ERR_BAD_CONFIG for a group with
 * threads. */
int sk_loop_group_get_fd(sk_loop_group_t *group);

/* Runs one iteration of a driven group's loop without waiting: ready sockets, expired
 * timers, queued calls, then the reads and writes they queued. Returns 1 when more work is
 * ready at once (call again before polling), 0 when the loop is idle or stopped, or an
 * error: SK_ERR_INVALID_HANDLE; SK_ERR_BAD_CONFIG for a group with threads, a call from
 * another thread than the one that created the group, or a call from inside a callback of
 * that iteration. */
int sk_loop_group_run_once(sk_loop_group_t *group, sk_error_t *error);

/* Sets a one-shot hook for the calling thread: SocketKit calls hook(context) on this thread
 * before the thread next waits inside SocketKit for something another thread may be doing
 * (a callback running on another thread, a contended lock, a thread to end, events with a
 * timeout), then forgets it; NULL clears it. It may run although the wait then turns out
 * not to block. One hook per thread: setting one replaces the last. For language bindings
 * with an interpreter lock: a host thread may keep the lock from one callback of an
 * sk_loop_group_run_once() iteration to the next instead of releasing and taking it around
 * each one, and the hook releases it before the thread would wait for another thread that
 * needs it. The hook runs on this thread only, perhaps while SocketKit holds a lock of its
 * own: it must not call SocketKit. Returns SK_OK. */
int sk_thread_set_wait_hook(void (*hook)(void *context), void *context);

/* Releases the handle and stops the group: sockets still open on its loops are closed and
 * get did_disconnect with SK_ERR_BAD_CONFIG; then its threads are joined. Called on one
 * of the group's own loop threads, the stop completes in the background instead. A driven
 * group stops at once when released on its host thread between iterations; released from
 * another thread or from a callback, it stops in the host's next sk_loop_group_run_once(),
 * which the handle stays valid for (the descriptor becomes readable for it). The stop takes
 * bounded time: calls made before it on the group's sockets still run, and from the moment
 * a loop starts stopping, calls other threads make on its sockets fail with
 * SK_ERR_BAD_CONFIG (so threads that keep calling cannot hold the stop off), as do all
 * calls once it has stopped.
 * Errors: SK_ERR_INVALID_HANDLE. */
int sk_loop_group_release(sk_loop_group_t *group);

/* ======================================================================================
 * Callback queues
 * ====================================================================================== */

typedef struct sk_callback_queue sk_callback_queue_t;

/* A queue with a thread of its own (named `name`, may be NULL), shareable by any number of
 * sockets. Errors: SK_ERR_BAD_PARAM (out_queue NULL), SK_ERR_SYSTEM (no thread). */
int sk_callback_queue_create_serial(const char *name, sk_callback_queue_t **out_queue, sk_error_t *error);

/* A host-driven queue: callbacks wait until sk_callback_queue_drain() runs them on the
 * calling thread. Errors: SK_ERR_BAD_PARAM, SK_ERR_SYSTEM (no descriptor left). */
int sk_callback_queue_create_host(sk_callback_queue_t **out_queue, sk_error_t *error);

/* The descriptor of a host-driven queue: readable exactly while callbacks are pending.
 * Owned by the queue (do not close it). Returns it, or SK_ERR_INVALID_HANDLE, or
 * SK_ERR_BAD_CONFIG for a serial queue. */
int sk_callback_queue_fd(sk_callback_queue_t *queue);

/* Runs pending callbacks of a host-driven queue on the calling thread, in order: at most
 * `max_callbacks` (0 or negative: no limit). Returns how many ran, or SK_ERR_INVALID_HANDLE,
 * or SK_ERR_BAD_CONFIG for a serial queue. One thread drains at a time: a concurrent or
 * nested call returns 0. */
int sk_callback_queue_drain(sk_callback_queue_t *queue, int max_callbacks);

/* Releases the handle. Sockets using the queue keep it (and its thread) alive; a serial
 * queue's thread ends once nothing uses it. Errors: SK_ERR_INVALID_HANDLE. */
int sk_callback_queue_release(sk_callback_queue_t *queue);

/* ======================================================================================
 * Sockets
 * ====================================================================================== */

typedef struct sk_socket sk_socket_t;
typedef struct sk_udp_socket sk_udp_socket_t;   /* a UDP socket */

/* A certificate in DER (see sk_certificate_get_info and sk_certificate_to_pem). */
typedef struct sk_certificate {
    const uint8_t *der;
    size_t der_length;
} sk_certificate_t;

/* What did_receive_trust shows: the peer's chain as it sent it (leaf first) and what
 * OpenSSL's own verification concluded. Valid only during the callback (or, for an event
 * record, until the next poll); answer with sk_socket_answer_trust(sock, token, ...). */
typedef struct sk_tls_trust {
    uint64_t token;                     /* identifies the question */
    const sk_certificate_t *chain;      /* leaf first; NULL when chain_count is 0 */
    size_t chain_count;                 /* 0: the peer sent no certificate */
    /* NULL when built-in verification (trust roots, validity, peer name) passes; else the
     * error a socket without manual trust would have disconnected with. */
    const sk_error_t *verification_error;
    const char *peer_name;              /* the name checked against, or NULL */
} sk_tls_trust_t;

/*
 * The delegate: what a socket tells you. Every member is optional (NULL = not interested).
 * Each runs on the socket's callback queue with the `userdata` given with the delegate.
 * Pointers passed to a callback are valid only during that call.
 */
typedef struct sk_socket_delegate {
    /* A listener accepted a connection. `new_socket` is yours: one reference, released
     * with sk_socket_release() (if this member is NULL, the connection is closed). It has
     * the listener's delegate, userdata and callback queue; change them here if you like,
     * before queueing reads. */
    void (*did_accept)(sk_socket_t *listener, sk_socket_t *new_socket, void *userdata);

    /* Asked on the listener's event loop thread (not the callback queue) before a new
     * connection is wrapped: the index of the loop of the listener's group it should live
     * on, or -1 for the next one. It may disconnect the listener: that connection is then
     * closed unserved, and the listener's did_disconnect follows once this returns. */
    int (*new_socket_loop_for_connection)(sk_socket_t *listener, const struct sockaddr *address,
                                          socklen_t address_length, void *userdata);

    /* A listener could not accept (out of descriptors or memory) and backs off, retrying
     * by itself from every 50 ms up to every second. Called once per episode. */
    void (*did_pause_accepting)(sk_socket_t *listener, const sk_error_t *error, void *userdata);

    /* A connection is up (outgoing, or adopted with sk_socket_create_from_fd). `host` is
     * the peer's IP address and `port` its port; for Unix-domain sockets `host` is the
     * path and `port` is 0. */
    void (*did_connect)(sk_socket_t *sock, const char *host, uint16_t port, void *userdata);

    /* A read completed: `length` bytes at `data` (for reads into your buffer, `data`
     * points into it, at the offset you gave). */
    void (*did_read)(sk_socket_t *sock, const void *data, size_t length, long tag, void *userdata);

    /* A read to a length or separator made progress: `length` bytes added in this pass. */
    void (*did_read_partial)(sk_socket_t *sock, size_t length, long tag, void *userdata);

    /* The current read timed out. Return a positive number of seconds to extend it
     * (INFINITY: for good); 0, less or NaN (or a NULL member) ends the connection with
     * SK_ERR_READ_TIMEOUT. `elapsed` is the timeout plus the extensions granted so far. */
    double (*should_timeout_read)(sk_socket_t *sock, long tag, double elapsed, size_t bytes_done, void *userdata);

    /* A write was fully accepted by the kernel. */
    void (*did_write)(sk_socket_t *sock, long tag, void *userdata);

    /* A write made progress: `length` bytes written of it by this system call. */
    void (*did_write_partial)(sk_socket_t *sock, size_t length, long tag, void *userdata);

    /* As should_timeout_read, for the current write (SK_ERR_WRITE_TIMEOUT). */
    double (*should_timeout_write)(sk_socket_t *sock, long tag, double elapsed, size_t bytes_done, void *userdata);

    /* The peer closed its side while auto-disconnect-on-closed-read-stream is off: the
     * socket stays open for writing. Called once every byte that arrived before the close
     * has been read (at once when none is unread, read queued or not). */
    void (*did_close_read_stream)(sk_socket_t *sock, void *userdata);

    /* Queued, unwritten bytes reached the high watermark: the peer is not keeping up. */
    void (*did_reach_high_watermark)(sk_socket_t *sock, size_t queued_bytes, void *userdata);

    /* Queued bytes drained to the low watermark after reaching the high one. */
    void (*did_drain_to_low_watermark)(sk_socket_t *sock, size_t queued_bytes, void *userdata);

    /* The connection, attempt or listener ended; always the last callback of it. `error`
     * is NULL after sk_socket_disconnect() or a completed sk_socket_disconnect_after_*(),
     * otherwise why (SK_ERR_CLOSED, SK_ERR_READ_TIMEOUT, SK_ERR_SYSTEM with ECONNREFUSED,
     * SK_ERR_RESOLUTION, ...). The socket may connect or accept again. */
    void (*did_disconnect)(sk_socket_t *sock, const sk_error_t *error, void *userdata);

    /* The TLS handshake queued by sk_socket_start_tls finished (and manual trust, if any,
     * said yes): reads and writes queued after it now run encrypted. */
    void (*did_secure)(sk_socket_t *sock, void *userdata);

    /* Manual trust evaluation (sk_tls_settings_set_manual_trust_evaluation): the handshake
     * is done, and nothing is read or written until sk_socket_answer_trust(sock,
     * trust->token, accept) is called, from any thread, now or later. The handshake
     * timeout keeps running meanwhile (it bounds how long an unauthenticated peer holds a
     * connection, whoever is slow): without an answer in time the connection ends with
     * SK_ERR_TLS_HANDSHAKE_TIMEOUT and a later answer does nothing; a delegate that needs
     * longer raises the timeout (or sets it negative). If this member, or the whole
     * delegate, is NULL the peer is rejected (SK_ERR_TLS_PEER_REJECTED). */
    void (*did_receive_trust)(sk_socket_t *sock, const sk_tls_trust_t *trust, void *userdata);

    /* The answer to sk_socket_cancel_read, once per call: the reads with `tag` that had not
     * completed are withdrawn, and what the current one had gathered is back in front of the
     * unread bytes. `unread_bytes`: what SocketKit holds ahead of the next read (what it can
     * get without waiting for the peer). */
    void (*did_cancel_read)(sk_socket_t *sock, long tag, size_t unread_bytes, void *userdata);
} sk_socket_delegate_t;

/* ---- Lifetime ------------------------------------------------------------------------ */

/* Creates a socket. `delegate` (may be NULL: no callbacks; such a socket cannot connect or
 * accept) is copied; pass sizeof(sk_socket_delegate_t) as `delegate_size` (the rule for
 * other sizes: ABI, at the top). `queue` NULL runs callbacks on the socket's loop; `group`
 * NULL uses the default group.
 * Errors: SK_ERR_BAD_PARAM (out_socket NULL, a delegate_size the ABI rule refuses),
 * SK_ERR_INVALID_HANDLE (queue or group). */
int sk_socket_create(const sk_socket_delegate_t *delegate, size_t delegate_size, void *userdata,
                     sk_callback_queue_t *queue, sk_loop_group_t *group, sk_socket_t **out_socket,
                     sk_error_t *error);

/* Wraps an already connected TCP or Unix-domain stream socket. On success the socket owns
 * `fd` (made non-blocking), returns connected (see THREADS) and did_connect follows. On
 * failure the caller keeps `fd`.
 * Errors: as sk_socket_create, plus SK_ERR_BAD_PARAM (not a stream socket of a supported
 * family) and SK_ERR_SYSTEM (ENOTCONN: not connected; EBADF, ENOTSOCK). */
int sk_socket_create_from_fd(int fd, const sk_socket_delegate_t *delegate, size_t delegate_size,
                             void *userdata, sk_callback_queue_t *queue, sk_loop_group_t *group,
                             sk_socket_t **out_socket, sk_error_t *error);

/* Releases the handle and closes the socket: pending reads and writes are dropped, except
 * after sk_socket_disconnect_after_writing(), when the queued writes are still sent (for
 * at most two minutes) before the connection closes, a graceful fire-and-forget close. That
 * holds while the socket is still resolving or connecting too: it goes on connecting
 * (within its connect timeout) and sends them, through a queued start_tls's handshake if
 * there is one; of the reads, only those queued ahead of such a start_tls are kept (the
 * handshake waits for them).
 * A listener's descriptors are closed before this returns, as by sk_socket_disconnect().
 * Once this returns no callback of the socket starts and its userdata is not touched; a
 * callback running on another thread is waited for (not when called from inside that
 * callback, nor when that would deadlock: see THREADS). Callbacks of other sockets are
 * unaffected. Errors: SK_ERR_INVALID_HANDLE. */
int sk_socket_release(sk_socket_t *sock);

/* Replaces the delegate and its userdata, synchronously (see sk_socket_release);
 * `delegate_size` as for sk_socket_create. */
int sk_socket_set_delegate(sk_socket_t *sock, const sk_socket_delegate_t *delegate, size_t delegate_size,
                           void *userdata);

/* Moves the socket's callbacks to `queue` (NULL: its event loop). Callbacks already queued
 * run first, in order. */
int sk_socket_set_callback_queue(sk_socket_t *sock, sk_callback_queue_t *queue);

/* The delegate's userdata (NULL without a delegate; out_userdata may be NULL).
 * Errors: SK_ERR_INVALID_HANDLE. */
int sk_socket_get_userdata(sk_socket_t *sock, void **out_userdata);

/* ---- Events as records (for hosts whose callbacks are expensive) ----------------------
 *
 * A host-driven queue can hand its pending events over as an array instead of running
 * callbacks: one call moves a batch, and the host (an interpreter behind a foreign-function
 * interface, say) handles it in its own loop. A record is what a delegate member would
 * have received; only events whose member is non-NULL are recorded (the members still say
 * what the host wants). Sockets on the queue with a Swift delegate get their calls during
 * the poll, as with sk_callback_queue_drain(). new_socket_loop_for_connection is not a
 * queued event: it is still called, on the loop thread.
 */
typedef enum sk_event_kind {
    SK_EVENT_ACCEPT = 1,          /* new_socket: the accepted connection, yours (as did_accept) */
    SK_EVENT_PAUSE_ACCEPTING = 2, /* error */
    SK_EVENT_CONNECT = 3,         /* host, port */
    SK_EVENT_READ = 4,            /* data, length, tag */
    SK_EVENT_READ_PARTIAL = 5,    /* length, tag */
    SK_EVENT_READ_TIMEOUT = 6,    /* tag, elapsed, length (bytes done), token: answer it */
    SK_EVENT_WRITE = 7,           /* tag */
    SK_EVENT_WRITE_PARTIAL = 8,   /* length, tag */
    SK_EVENT_WRITE_TIMEOUT = 9,   /* tag, elapsed, length (bytes done), token: answer it */
    SK_EVENT_CLOSE_READ_STREAM = 10,
    SK_EVENT_HIGH_WATERMARK = 11, /* length (queued bytes) */
    SK_EVENT_LOW_WATERMARK = 12,  /* length (queued bytes) */
    SK_EVENT_DISCONNECT = 13,     /* error (NULL: a clean close) */
    SK_EVENT_SECURE = 14,
    SK_EVENT_TRUST = 15,          /* trust, token: answer with sk_socket_answer_trust */
    SK_EVENT_CANCEL_READ = 16,    /* tag, length (unread bytes) */
    /* UDP sockets' events: `udp_sock` is set, `sock` is NULL. */
    SK_EVENT_UDP_CONNECT = 20,    /* address, address_length, host, port */
    SK_EVENT_UDP_NOT_CONNECT = 21,/* error */
    SK_EVENT_UDP_SEND = 22,       /* tag */
    SK_EVENT_UDP_NOT_SEND = 23,   /* tag, error */
    SK_EVENT_UDP_RECEIVE = 24,    /* data, length, address, address_length, host, port, context */
    SK_EVENT_UDP_RECEIVE_ERROR = 25, /* error */
    SK_EVENT_UDP_CLOSE = 26,      /* error (NULL: closed by the program) */
    /* As SK_EVENT_UDP_RECEIVE, with packet info: sk_udp_event_packet_info reads it (through
     * `token`, which is not for reading). */
    SK_EVENT_UDP_RECEIVE_PACKET_INFO = 27 /* data, length, address, address_length, host, port, context, token */
} sk_event_kind_t;

typedef struct sk_event {
    sk_socket_t *sock;
    void *userdata;               /* the delegate's userdata */
    int32_t kind;                 /* sk_event_kind_t */
    uint16_t port;
    long tag;
    const void *data;
    size_t length;
    double elapsed;
    const char *host;
    const sk_error_t *error;
    sk_socket_t *new_socket;
    uint64_t token;               /* timeouts and trust: identifies the question (see below) */
    sk_udp_socket_t *udp_sock;    /* UDP events */
    const struct sockaddr *address;
    socklen_t address_length;
    void *context;                /* UDP receive: what the receive filter set */
    const sk_tls_trust_t *trust;  /* SK_EVENT_TRUST */
} sk_event_t;

/* Moves up to `capacity` pending events of a host-driven queue into `events`, in order,
 * and returns how many (0: nothing pending), or SK_ERR_INVALID_HANDLE, SK_ERR_BAD_PARAM
 * (events NULL, capacity < 1), SK_ERR_BAD_CONFIG (a serial queue). The memory records
 * point to (data, host, error) stays valid until the next poll or drain of the queue. One
 * thread drains or polls a queue at a time: a concurrent or nested call returns 0. */
int sk_callback_queue_poll_events(sk_callback_queue_t *queue, sk_event_t *events, int capacity);

/* Answers a SK_EVENT_READ_TIMEOUT or SK_EVENT_WRITE_TIMEOUT record (or a copy of it), from
 * any thread, now or later: `extension` > 0 seconds (INFINITY: for good) extends the read
 * or write; anything else (0, negative, NaN) ends the connection with SK_ERR_READ_TIMEOUT /
 * SK_ERR_WRITE_TIMEOUT. Until it is answered the operation waits. Only the first answer
 * counts. Errors: SK_ERR_BAD_PARAM (NULL, not a timeout record), SK_ERR_INVALID_HANDLE
 * (the socket was released). */
int sk_socket_answer_timeout(const sk_event_t *event, double extension);

/* ---- Configuration (read when a session starts; TCP options also apply at once) ----- */

/* Setters and getters of this section return SK_OK (the is_* questions 1/0), or
 * SK_ERR_INVALID_HANDLE, or SK_ERR_BAD_PARAM for a value a setter refuses; a getter's
 * out-pointers may each be NULL (see Getters at the top). A setter returns once the loop
 * has the new value (see THREADS): a getter or a connect that follows sees it. */

/* Address families used to connect and accept (both on by default). */
int sk_socket_set_ipv4_enabled(sk_socket_t *sock, int enabled);
int sk_socket_is_ipv4_enabled(sk_socket_t *sock);
int sk_socket_set_ipv6_enabled(sk_socket_t *sock, int enabled);
int sk_socket_is_ipv6_enabled(sk_socket_t *sock);

/* Which family a host name's addresses are tried in first (IPv4 by default). */
int sk_socket_set_ipv4_preferred_over_ipv6(sk_socket_t *sock, int preferred);
int sk_socket_is_ipv4_preferred_over_ipv6(sk_socket_t *sock);

/* Seconds between starting one connection attempt and the next (Happy Eyeballs; 0.3 by
 * default; negative or NaN become 0). */
int sk_socket_set_alternate_address_delay(sk_socket_t *sock, double seconds);
int sk_socket_get_alternate_address_delay(sk_socket_t *sock, double *out_seconds);

/* Happy Eyeballs v2's resolution delay (RFC 8305), in seconds (0.05 by default; negative
 * or NaN become 0): a host name's A and AAAA records are asked for apart and connecting
 * starts with the first answer; when that is the other family's, it waits this long for the
 * preferred family's before connecting with what it has. */
int sk_socket_set_resolution_delay(sk_socket_t *sock, double seconds);
int sk_socket_get_resolution_delay(sk_socket_t *sock, double *out_seconds);

/* 1 (default): a peer close ends the connection with SK_ERR_CLOSED. 0: the socket stays
 * open for writing and did_close_read_stream is called. Either once every byte that arrived
 * before the close has been read: at once when none is unread, read queued or not. */
int sk_socket_set_auto_disconnect_on_closed_read_stream(sk_socket_t *sock, int enabled);
int sk_socket_get_auto_disconnect_on_closed_read_stream(sk_socket_t *sock);

/* The most bytes a read may gather in SocketKit's memory: 16 MiB by default; 1 or more (0
 * is SK_ERR_BAD_PARAM). A read to a separator without an explicit maximum ends the
 * connection with SK_ERR_READ_MAXED_OUT once it holds that many bytes without the
 * separator, and sk_socket_read_to_length above it is refused at once (SK_ERR_BAD_PARAM).
 * Reads into your buffer (*_into) are bounded by the buffer instead.
 * GCDAsyncSocket has no such limit. SocketKit has one because a read's length usually
 * comes from the peer (a length prefix, a Content-Length): without a limit, a peer that
 * announces 4 GiB makes the process hold up to 4 GiB before the application sees any of
 * it. Raise the limit for bigger messages, or read them into a buffer of your own. */
int sk_socket_set_maximum_read_length(sk_socket_t *sock, size_t length);
int sk_socket_get_maximum_read_length(sk_socket_t *sock, size_t *out_length);

/* Write-queue watermarks in bytes (32 KiB / 64 KiB by default); needs low <= high. When a
 * peer reads slower than it is written to, stop writing (or reading what you echo) at
 * did_reach_high_watermark and go on at did_drain_to_low_watermark (see
 * examples/echo_server.c). */
int sk_socket_set_write_watermarks(sk_socket_t *sock, size_t low, size_t high, sk_error_t *error);
int sk_socket_get_write_watermarks(sk_socket_t *sock, size_t *out_low, size_t *out_high);

/* The most bytes the write queue may hold: written, and not yet taken by the kernel
 * (64 MiB by default; 0: no limit). A write that would take the queue above it fails at
 * once with SK_ERR_WRITE_QUEUE_FULL and queues nothing, so a peer that stops reading
 * cannot make the socket's memory grow without bound, even when the watermarks are
 * ignored. A single write larger than the maximum always fails. Applies from the next
 * write; accepted sockets inherit the listener's. Errors: SK_ERR_INVALID_HANDLE,
 * SK_ERR_BAD_PARAM (maximum above SSIZE_MAX). */
int sk_socket_set_maximum_queued_write_bytes(sk_socket_t *sock, size_t maximum);
int sk_socket_get_maximum_queued_write_bytes(sk_socket_t *sock, size_t *out_maximum);

/* TCP_NODELAY: small writes leave at once instead of waiting under Nagle's algorithm for
 * earlier data to be acknowledged. On by default (1), as asyncio, Go and curl set it:
 * SocketKit already sends what is queued together (several writes per system call, a TLS
 * handshake's last flight with the records that follow it), so Nagle adds little, and it
 * costs a delayed-ACK wait (40 ms on Linux) whenever a message leaves in two sends that
 * the peer does not answer in between (a request written in two parts, a response behind
 * a TLS server's session tickets). Set 0 to let the kernel coalesce many tiny writes
 * made from other threads. Accepted sockets take the listener's setting. */
int sk_socket_set_no_delay(sk_socket_t *sock, int enabled);
int sk_socket_get_no_delay(sk_socket_t *sock);

/* TCP keep-alive: probe after `idle` seconds without traffic, every `interval` seconds,
 * give up after `count` probes (idle and interval 1...32767, count 1...127). `enabled` 0
 * turns it off (the other values are then ignored). Off by default. */
int sk_socket_set_keep_alive(sk_socket_t *sock, int enabled, int idle, int interval, int count, sk_error_t *error);
int sk_socket_get_keep_alive(sk_socket_t *sock, int *out_enabled, int *out_idle, int *out_interval, int *out_count);

/* SO_SNDBUF / SO_RCVBUF to request (0: the kernel's default; 0...INT_MAX). */
int sk_socket_set_buffer_sizes(sk_socket_t *sock, int send_size, int receive_size, sk_error_t *error);
int sk_socket_get_buffer_sizes(sk_socket_t *sock, int *out_send_size, int *out_receive_size);

/* SO_REUSEPORT on the listening sockets sk_socket_accept_on_port / _on_interface make (0 by
 * default): other sockets with it set, of this process or another of the same user, may
 * listen on the same address and port, and the kernel spreads new connections among them
 * (several processes, a rolling restart). For one listener spread over the loops of its
 * group, see sk_socket_set_accepts_on_every_loop. */
int sk_socket_set_reuse_port(sk_socket_t *sock, int enabled);
int sk_socket_get_reuse_port(sk_socket_t *sock);

/* A listener with one accepting socket per loop of its group (0 by default):
 * sk_socket_accept_on_port / _on_interface open an SO_REUSEPORT socket on every loop of the
 * socket's group, on the same addresses and port, so the kernel spreads connections over
 * the loops and each connection lives on the loop that accepted it: no hand-off between
 * threads (new_socket_loop_for_connection is not asked). did_accept names this socket as
 * the listener; with callbacks on the loop (queue NULL) it runs on the accepting loop, so
 * the did_accepts of different loops may run at the same time (on a serial or host queue
 * they take turns). Everything else is as one listener: getters, sk_socket_perform and
 * sk_socket_disconnect (which ends every loop's socket before it returns; so does
 * sk_socket_release) are this socket's; delegate and queue changes reach every loop's
 * socket. A group of one loop, and Unix-domain or adopted listeners, listen once. */
int sk_socket_set_accepts_on_every_loop(sk_socket_t *sock, int enabled);
int sk_socket_get_accepts_on_every_loop(sk_socket_t *sock);

/* The PROXY protocol header (HAProxy's: v1 text, v2 binary) every connection a listener
 * accepts must begin with, for a listener behind a load balancer that sends one (HAProxy
 * `send-proxy`, `send-proxy-v2`). SK_PROXY_PROTOCOL_EITHER tells the versions apart by the
 * first byte. A connection is reported in did_accept (and new_socket_loop_for_connection
 * asked) only once its whole header has arrived; its connected host, port and address are
 * then the header's source (the client), its local ones the header's destination, and
 * sk_socket_get_proxy_address the proxy it really came from. A v2 LOCAL header (a health
 * check) or a v1 UNKNOWN one keeps the real addresses; v2 TLVs are skipped, except a
 * CRC32C, which must match the header (a header whose TLVs run past its end is malformed
 * too). Bytes sent
 * after the header are the connection's first read, or its TLS handshake (the header comes
 * before the ClientHello). A malformed header, a v1 line over 107 bytes, a v2 header over
 * 16 + 2048 bytes, one cut short, or one not complete within the header timeout closes that
 * connection alone, with a warning in the engine's log (sk_log_set_callback, subsystem
 * "accept"); the listener goes on. Read when accepting starts. */
typedef enum sk_proxy_protocol {
    SK_PROXY_PROTOCOL_NONE = 0,   /* default: no header, the first bytes are the client's */
    SK_PROXY_PROTOCOL_V1 = 1,
    SK_PROXY_PROTOCOL_V2 = 2,
    SK_PROXY_PROTOCOL_EITHER = 3
} sk_proxy_protocol_t;
/* SK_ERR_BAD_PARAM for a value not in sk_proxy_protocol_t. */
int sk_socket_set_proxy_protocol(sk_socket_t *sock, int mode);
/* The mode (an sk_proxy_protocol_t), or SK_ERR_INVALID_HANDLE. */
int sk_socket_get_proxy_protocol(sk_socket_t *sock);
/* Seconds an accepted connection may take to send its whole header (default 5);
 * SK_ERR_BAD_PARAM unless 0 < seconds <= 86400. */
int sk_socket_set_proxy_header_timeout(sk_socket_t *sock, double seconds, sk_error_t *error);
int sk_socket_get_proxy_header_timeout(sk_socket_t *sock, double *out_seconds);

/* TCP_USER_TIMEOUT, in seconds: how long written data may stay unacknowledged before the
 * kernel gives up on the connection, which then ends with SK_ERR_SYSTEM and ETIMEDOUT (a
 * peer that vanished is noticed in seconds rather than after the ~15 minutes of the
 * kernel's retransmissions). 0 (default) leaves the kernel's. For connections made,
 * accepted (they take the listener's) or adopted; at once on a connected socket;
 * millisecond resolution. Errors: SK_ERR_BAD_PARAM (negative, NaN, infinite, above
 * INT_MAX milliseconds: about 24 days). */
int sk_socket_set_user_timeout(sk_socket_t *sock, double seconds, sk_error_t *error);
int sk_socket_get_user_timeout(sk_socket_t *sock, double *out_seconds);

/* TCP Fast Open (RFC 7413), off (0) by default; TCP only. A listener accepts data in the
 * client's SYN (TCP_FASTOPEN). A connect sends its first write with the SYN when the kernel
 * holds a cookie from an earlier connection to that server (TCP_FASTOPEN_CONNECT), and
 * otherwise asks for one and connects as usual. The kernel must allow it:
 * net.ipv4.tcp_fastopen has bit 1 for clients (its default) and bit 2 for servers.
 * With a cookie the kernel sends the SYN with the first write, so did_connect comes before
 * the handshake: a server that is not there then ends the connection with SK_ERR_SYSTEM
 * and ECONNREFUSED, and the first address of a name wins the Happy Eyeballs race at once.
 * For the first write to ride in the SYN, queue it right after the connect on the socket's
 * loop thread (in a callback or sk_socket_perform); made from another thread it does when
 * it reaches the loop before the kernel reports the socket writable. A connection with
 * nothing queued by then sends a plain SYN once it is reported connected. */
int sk_socket_set_fast_open(sk_socket_t *sock, int enabled);
int sk_socket_get_fast_open(sk_socket_t *sock);

/* The kind of proxy connects go through (sk_socket_set_proxy). */
typedef enum sk_proxy_kind {
    SK_PROXY_NONE = 0,          /* connect directly (default) */
    SK_PROXY_SOCKS5 = 1,        /* SOCKS5 (RFC 1928), username/password by RFC 1929 */
    SK_PROXY_HTTP_CONNECT = 2   /* HTTP CONNECT, username/password as Basic Proxy-Authorization */
} sk_proxy_kind_t;

/* Connects from now on go through a proxy (`kind` SK_PROXY_NONE: directly; the other
 * arguments are then ignored). `host` (required) and `port` (not 0) name the proxy;
 * `username` and `password` are both NULL or both given (SOCKS5: 1-255 bytes each; HTTP: a
 * username without ':'), copied. sk_socket_connect_to_host and sk_socket_connect_to_address
 * with an IP address then connect to the proxy (its name resolved, Happy Eyeballs and the
 * connect timeout as for any host), send it the target unresolved (the proxy resolves a
 * name; IP literals go as addresses), and call did_connect with the target's host and port
 * once the proxy said yes. The connect timeout covers the proxy's handshake; reads, writes
 * and sk_socket_start_tls queued meanwhile run afterwards, TLS verifying the target's name.
 * Unix-domain connects never use it. sk_socket_get_connected_host and _port give the
 * target; sk_socket_get_connected_address gives the proxy's address and the local getters
 * our end of the connection to it. Failures arrive in did_disconnect: SK_ERR_PROXY (refused
 * or failed by the proxy; os_error: its SOCKS5 reply code or HTTP status), SK_ERR_PROXY_AUTH,
 * SK_ERR_SYSTEM (the proxy cannot be reached), SK_ERR_CONNECT_TIMEOUT. Waits (see THREADS).
 * Errors: SK_ERR_INVALID_HANDLE, SK_ERR_BAD_PARAM, SK_ERR_BAD_CONFIG (connected or
 * connecting). */
int sk_socket_set_proxy(sk_socket_t *sock, int kind, const char *host, uint16_t port,
                        const char *username, const char *password, sk_error_t *error);
/* The proxy set: its kind into `*out_kind` and port into `*out_port` (each may be NULL;
 * SK_PROXY_NONE and 0 when there is none), its host as sk_socket_get_connected_host gives
 * a host (snprintf; "" when there is none). The credentials are not given back. */
int sk_socket_get_proxy(sk_socket_t *sock, int *out_kind, char *host, size_t capacity, uint16_t *out_port);

/* Sets the option (setsockopt(2)'s level, name, and `length` bytes at `value`, copied) on
 * every descriptor SocketKit makes for this socket from now on, right after socket(2):
 * before a listener binds and listens, before each connection attempt binds and connects.
 * For what sk_socket_perform, which sees descriptors already listening or connected, comes
 * too late for: TCP_MAXSEG for the SYN, IP_TOS, IP_FREEBIND, SO_BINDTODEVICE, SO_MARK...
 * One value per level and name: setting it again replaces it; descriptors that exist
 * already keep what they have. An option the kernel refuses fails the sk_socket_accept_on_*
 * that makes the listener (SK_ERR_SYSTEM with its errno; the message names the option), or
 * the connection attempt, as a refused connect does (did_disconnect).
 * Errors: SK_ERR_BAD_PARAM (value NULL, length 0 or above 1024, more than 64 options). */
int sk_socket_set_socket_option(sk_socket_t *sock, int level, int name, const void *value, size_t length,
                                sk_error_t *error);
/* Forgets every option sk_socket_set_socket_option set. */
int sk_socket_clear_socket_options(sk_socket_t *sock);

/* ---- Accepting ------------------------------------------------------------------------ */

/* Listens on every interface, IPv4 and IPv6 (as enabled). Port 0 picks one free port for
 * both families (see sk_socket_get_local_port). Accepted connections arrive in did_accept.
 * Returns listening: the loop has taken the listener over (see THREADS). Needs a delegate. Errors (synchronous): SK_ERR_BAD_CONFIG (already connected or
 * accepting, no delegate, no family enabled), SK_ERR_SYSTEM (EADDRINUSE, EACCES, ...). */
int sk_socket_accept_on_port(sk_socket_t *sock, uint16_t port, sk_error_t *error);

/* Listens on `interface`: NULL for any, "localhost"/"loopback", an interface name ("eth0")
 * or an IP address, optionally with a port ("eth0:8080", "[::1]:8080"; used when `port` is
 * 0). Errors: as above, plus SK_ERR_BAD_PARAM (unknown interface). */
int sk_socket_accept_on_interface(sk_socket_t *sock, const char *interface, uint16_t port, sk_error_t *error);

/* Listens on a Unix-domain socket at `path`. A stale socket file there is replaced (a file
 * that is not a socket fails with EADDRINUSE); the file is removed when the listener
 * closes, if it is still the file this listener made (device and inode): a newer
 * listener's file at the same path stays. Errors: SK_ERR_BAD_PARAM (empty path, longer
 * than 107 bytes). */
int sk_socket_accept_on_unix_path(sk_socket_t *sock, const char *path, sk_error_t *error);

/* Listens on descriptors made elsewhere (NIO's withBoundSocket, asyncio's
 * create_server(sock=)): those systemd's socket activation passed (sk_socket_activation_fds),
 * a supervisor's, or sockets made with options SocketKit does not offer. Each of the `count`
 * (1...64) must be a bound stream socket, IPv4, IPv6 or Unix-domain (to a port, a path or
 * an abstract name), listening or not (one that is not is made to). On success the socket
 * owns them: made non-blocking and close-on-exec, closed when the listener stops (a Unix
 * socket file is left where it is: SocketKit did not make it); they keep the options they
 * were made with (sk_socket_set_socket_option, _fast_open and _reuse_port concern
 * descriptors SocketKit makes). Returns listening (see THREADS). On failure they stay the
 * caller's, unchanged (unless listen(2) itself failed on one of several). Errors:
 * SK_ERR_BAD_PARAM (fds NULL, a count out of range, a descriptor negative, of another kind,
 * not bound, connected or given twice), SK_ERR_SYSTEM (EBADF, ENOTSOCK), SK_ERR_BAD_CONFIG
 * (not disconnected, no delegate). */
int sk_socket_accept_on_fds(sk_socket_t *sock, const int *fds, size_t count, sk_error_t *error);

/* systemd's socket activation (sd_listen_fds(3)): the listening descriptors the service
 * manager passed to this process, LISTEN_FDS of them from 3 on, when LISTEN_PID is this
 * process (none otherwise). Writes the first `capacity` to `fds` and returns how many there
 * are, as snprintf (NULL `fds`: the count alone). They are made close-on-exec; with
 * `unset_environment` nonzero LISTEN_PID, LISTEN_FDS and LISTEN_FDNAMES are removed, so a
 * child does not take them for its own (setenv/unsetenv: call it before other threads read
 * the environment). Errors: SK_ERR_BAD_PARAM (a malformed variable). */
int sk_socket_activation_fds(int *fds, size_t capacity, int unset_environment, sk_error_t *error);

/* ---- Connecting ----------------------------------------------------------------------- */

/* Connects to a host name, IP literal or "localhost". Resolution runs off the loop, each
 * enabled family's addresses asked for apart; every resolved address of the enabled
 * families is tried as the answers come, the preferred family first, a new attempt every
 * alternate-address-delay or at once when one fails (Happy Eyeballs v2, RFC 8305: the first
 * answer starts connecting, the other family's after the resolution delay, and addresses
 * answered later join those not yet tried).
 * `interface` (may be NULL) binds the local end: "eth0", an IP, "eth0:5000", or ":5000"
 * for a local port only. `timeout` covers resolution and connecting; with 0 the connect
 * succeeds only if it completes at once (a Unix-domain path does; a TCP handshake over
 * loopback normally does), and a name the resolver must look up always ends with
 * SK_ERR_CONNECT_TIMEOUT. Returns connecting (see THREADS): reads and writes may be queued
 * at once. The result:
 * did_connect, or did_disconnect with SK_ERR_SYSTEM (ECONNREFUSED, ...),
 * SK_ERR_RESOLUTION, SK_ERR_CONNECT_TIMEOUT, or SK_ERR_OTHER (no resolved address is of
 * an enabled family). With a proxy set (sk_socket_set_proxy) the name is the proxy's to
 * resolve, and SK_ERR_PROXY and SK_ERR_PROXY_AUTH may end it too.
 * Errors (synchronous): SK_ERR_BAD_PARAM (empty host, bad interface, NaN timeout, a host
 * name over 255 bytes for a SOCKS5 proxy),
 * SK_ERR_BAD_CONFIG (not disconnected, no delegate, no family enabled). */
int sk_socket_connect_to_host(sk_socket_t *sock, const char *host, uint16_t port, const char *interface,
                              double timeout, sk_error_t *error);

/* Connects to a raw address: struct sockaddr_in, sockaddr_in6 or sockaddr_un;
 * `address_length` as under Addresses (CONVENTIONS). Errors: as above, plus SK_ERR_BAD_PARAM
 * (unsupported address, or a sockaddr_un path with a NUL followed by more bytes: the kernel
 * would end the path at the NUL; an abstract address, first byte NUL, is taken as given). */
int sk_socket_connect_to_address(sk_socket_t *sock, const struct sockaddr *address, socklen_t address_length,
                                 const char *interface, double timeout, sk_error_t *error);

/* Connects to a Unix-domain socket at `path`; did_connect reports the path. */
int sk_socket_connect_to_unix_path(sk_socket_t *sock, const char *path, double timeout, sk_error_t *error);

/* ---- Unix-domain extras --------------------------------------------------------------
 *
 * Linux abstract names (no file: a name in the kernel's namespace, gone with the last
 * socket bound to it), descriptors passed with the bytes (SCM_RIGHTS), and the peer's
 * credentials. Abstract names are given as bytes (NULs allowed), 1...107 of them; where
 * SocketKit shows one as text (did_connect's host, sk_socket_get_connected_unix_path) it is
 * '@' followed by the name, as ss(8) shows it. */

/* Listens on / connects to an abstract name (`length` bytes at `name`). As
 * sk_socket_accept_on_unix_path and sk_socket_connect_to_unix_path otherwise; nothing is
 * created on or removed from the file system. Errors: SK_ERR_BAD_PARAM (name NULL, length
 * 0 or above 107), SK_ERR_SYSTEM (EADDRINUSE: the name is taken). */
int sk_socket_accept_on_abstract_unix_name(sk_socket_t *sock, const void *name, size_t length, sk_error_t *error);
int sk_socket_connect_to_abstract_unix_name(sk_socket_t *sock, const void *name, size_t length, double timeout,
                                            sk_error_t *error);

/* Whether reads of a Unix-domain connection keep the descriptors the peer passes
 * (SCM_RIGHTS) for sk_socket_take_received_descriptors: 0 (default): the kernel closes them
 * as their bytes are read, so a peer cannot fill the process with open files. Accepted
 * sockets take the listener's; a change applies at once. Not under TLS (the kernel then
 * closes them). A configuration setter (see THREADS). */
int sk_socket_set_receives_descriptors(sk_socket_t *sock, int enabled);
int sk_socket_get_receives_descriptors(sk_socket_t *sock);

/* Takes up to `capacity` descriptors the peer passed, in the order they came, into `fds`,
 * and returns how many: yours to close. NULL `fds`: returns how many wait, taking none.
 * They are there by the time the bytes they came with reach a read (its did_read), possibly
 * earlier. Those nobody takes are closed when the next session begins or the socket is
 * released; more than 1024 waiting end the connection (SK_ERR_OTHER). Waits for the loop
 * (inline on it: call it from did_read). Errors: SK_ERR_INVALID_HANDLE, SK_ERR_BAD_CONFIG
 * (stopped loop). */
int sk_socket_take_received_descriptors(sk_socket_t *sock, int *fds, size_t capacity, sk_error_t *error);

/* sk_socket_write with `fd_count` (1...253) descriptors passed along (SCM_RIGHTS): they reach
 * the peer with the first byte of `data`. SocketKit passes duplicates made here, so the
 * caller keeps its own. Queued in order with the other writes (never sent inline); did_write
 * as for any write. Errors: as sk_socket_write, plus SK_ERR_BAD_PARAM (fds NULL, a count out
 * of range, a descriptor that is not open), SK_ERR_BAD_CONFIG (not a Unix-domain
 * connection, or TLS started). */
int sk_socket_write_with_descriptors(sk_socket_t *sock, const void *data, size_t length, const int *fds,
                                     size_t fd_count, double timeout, long tag, sk_error_t *error);

/* The process, user and group at the other end of a connected Unix-domain socket, as the
 * kernel recorded them when the connection was made (SO_PEERCRED); each out-pointer may be
 * NULL. Waits for the loop (inline on it). Errors: SK_ERR_BAD_CONFIG (not a connected
 * Unix-domain socket), SK_ERR_SYSTEM, SK_ERR_INVALID_HANDLE. */
int sk_socket_get_peer_credentials(sk_socket_t *sock, pid_t *out_pid, uid_t *out_uid, gid_t *out_gid,
                                   sk_error_t *error);

/* ---- Reading ---------------------------------------------------------------------------
 * Reads are queued and complete in order, each with one did_read carrying its `tag`.
 * They may be queued from the moment connect is called. All return SK_OK or, at once,
 * SK_ERR_BAD_PARAM (invalid arguments), SK_ERR_BAD_CONFIG (not connected or connecting,
 * a listener, after sk_socket_disconnect_after_*), SK_ERR_INVALID_HANDLE.
 * The end of the peer's stream, a close or a reset, comes after the bytes that arrived
 * before it: reads are served those first. It is reported as soon as nothing unread is left
 * before it, read queued or not: a socket with no read queued and nothing unread reports a
 * close at once (did_disconnect with SK_ERR_CLOSED, or did_close_read_stream with
 * auto-disconnect off) and a reset at once (SK_ERR_SYSTEM, ECONNRESET or EPIPE). A read
 * that needs more bytes than arrived gets no did_read: the connection ends with the close
 * or reset. Under TLS an alert that came before a reset is the error, and a close_notify
 * counts as the close. A write whose send meets the reset does not end the connection
 * itself: the end is reported as above. */

/* Whatever is available (at least one byte), at most `max_length` bytes when it is not 0. */
int sk_socket_read(sk_socket_t *sock, size_t max_length, double timeout, long tag, sk_error_t *error);

/* Whatever is available into `buffer` at `offset` (at most `max_length` when not 0, and no
 * more than fits in `capacity - offset`). `buffer` must stay valid until its did_read, or
 * did_disconnect, or until sk_socket_release() returns (after that SocketKit never writes
 * into it). The same holds for the other *_into reads. */
int sk_socket_read_into(sk_socket_t *sock, void *buffer, size_t capacity, size_t offset, size_t max_length,
                        double timeout, long tag, sk_error_t *error);

/* Exactly `length` bytes: 0 < length <= the maximum read length (see
 * sk_socket_set_maximum_read_length), else SK_ERR_BAD_PARAM. */
int sk_socket_read_to_length(sk_socket_t *sock, size_t length, double timeout, long tag, sk_error_t *error);

/* Exactly `length` bytes into `buffer` at `offset` (capacity - offset >= length). */
int sk_socket_read_to_length_into(sk_socket_t *sock, size_t length, void *buffer, size_t capacity, size_t offset,
                                  double timeout, long tag, sk_error_t *error);

/* Up to and including `separator` (copied; `separator_length` > 0). With `max_length` > 0
 * (it must be >= separator_length) the connection ends with SK_ERR_READ_MAXED_OUT once that
 * many bytes arrived without the separator; with 0 the socket's maximum read length
 * applies. Separators: SK_CRLF, SK_CR, SK_LF with their lengths, or SK_ZERO with length 1. */
int sk_socket_read_to_data(sk_socket_t *sock, const void *separator, size_t separator_length, size_t max_length,
                           double timeout, long tag, sk_error_t *error);

/* Up to and including `separator` into `buffer` at `offset`; the room left caps the length. */
int sk_socket_read_to_data_into(sk_socket_t *sock, const void *separator, size_t separator_length, void *buffer,
                                size_t capacity, size_t offset, size_t max_length, double timeout, long tag,
                                sk_error_t *error);

#define SK_CRLF "\r\n"
#define SK_CR "\r"
#define SK_LF "\n"
#define SK_ZERO "\0"

/* Reads exactly `length` (1 or more; no maximum read length applies) bytes into the
 * regular file open for writing at `fd`, written at its position as they arrive (write(2):
 * the position, shared with the caller's descriptor, advances), so a large body goes to
 * disk without being held in memory. SocketKit writes through a duplicate of `fd`: close
 * yours when you like. Progress as for sk_socket_read_to_length (did_read_partial,
 * sk_socket_read_progress); completion is did_read with `data` NULL, `length` 0 and the tag
 * (no other read completes empty). A write to the file that fails (ENOSPC, EIO) ends the
 * connection with SK_ERR_SYSTEM; a cancelled read keeps what it wrote. Under TLS the file
 * gets the plaintext. Errors: as sk_socket_read_to_length, plus SK_ERR_BAD_PARAM (`fd` not
 * a regular file open for writing). */
int sk_socket_read_to_file(sk_socket_t *sock, size_t length, int fd, double timeout, long tag, sk_error_t *error);

/* Withdraws every queued read with `tag` that has not completed; the bytes the current one
 * had gathered go back in front of the unread bytes, so the next read gets them, in order:
 * a read can be cancelled without losing data. Queued like a read (in order with reads and
 * sk_socket_unread calls made before it) and answered once by did_cancel_read; a read with
 * that tag that had already completed delivered its did_read before that answer. Errors as
 * for reads (SK_ERR_BAD_CONFIG when not connecting or connected). */
int sk_socket_cancel_read(sk_socket_t *sock, long tag, sk_error_t *error);

/* Puts a copy of `length` bytes at `bytes` in front of the socket's unread bytes, as if they
 * had arrived before everything not yet read: the next read gets them first (bytes a read
 * delivered to a caller that no longer wanted them, a protocol sniffed and not consumed).
 * Under TLS they are plaintext. Queued like a read, in order. `length` 0 or `bytes` NULL:
 * SK_ERR_BAD_PARAM. */
int sk_socket_unread(sk_socket_t *sock, const void *bytes, size_t length, sk_error_t *error);

/* The progress of the current read: returns 1 and fills the outputs (each may be NULL) when
 * a read is under way, 0 when none is, or SK_ERR_INVALID_HANDLE. `total` is 0 when not
 * known in advance (reads of available data or to a separator). */
int sk_socket_read_progress(sk_socket_t *sock, long *out_tag, size_t *out_done, size_t *out_total);

/* ---- Writing ---------------------------------------------------------------------------
 * Writes are queued and go out in order (several per system call); did_write reports each
 * once the kernel accepted all its bytes. Same synchronous errors as reads; zero-length
 * writes are SK_ERR_BAD_PARAM, and a write that would take the queue above the socket's
 * maximum (sk_socket_set_maximum_queued_write_bytes) is SK_ERR_WRITE_QUEUE_FULL. */

/* Queues a copy of `length` bytes at `data`. */
int sk_socket_write(sk_socket_t *sock, const void *data, size_t length, double timeout, long tag, sk_error_t *error);

/* Queues `length` bytes at `data` without copying. `release` (may be NULL) is called
 * exactly once, with `data` and `release_context`, on the socket's loop thread, when the
 * bytes are no longer needed (written, or dropped by a disconnect). Called on the loop
 * thread (a callback, or a driven group's host), the write goes to the kernel at once when
 * nothing is queued ahead, and `release` may run before this call returns. If this call
 * fails, `release` is not called: the bytes stay yours. */
int sk_socket_write_no_copy(sk_socket_t *sock, const void *data, size_t length,
                            void (*release)(void *data, void *release_context), void *release_context,
                            double timeout, long tag, sk_error_t *error);

/* Queues `length` bytes (0: to the end) of the regular file open for reading at `fd`, from
 * `offset`, sent with sendfile(2): the kernel copies them from the page cache to the
 * socket, with no copy through this process (NIO's FileRegion, asyncio's loop.sendfile). A
 * write in the queue like any other: in order, with its tag (did_write once the kernel
 * took all of it, did_write_partial as it goes), timeout and progress; its bytes count in
 * sk_socket_get_queued_write_bytes and the watermarks, not against the maximum queued
 * write bytes (they take no memory). SocketKit reads through a duplicate of `fd` at
 * explicit offsets: the file's position is untouched, and the caller may close `fd` at
 * once. A file that shrinks before the region is sent ends the connection (SK_ERR_OTHER).
 * Plaintext only (TCP or Unix-domain). Errors: SK_ERR_BAD_PARAM (`fd` not a regular file
 * open for reading; a negative offset; a region that is empty or passes the end of the
 * file), SK_ERR_BAD_CONFIG (not connected, TLS started, after a disconnect-after or
 * close_write_stream). */
int sk_socket_write_file(sk_socket_t *sock, int fd, int64_t offset, size_t length, double timeout, long tag,
                         sk_error_t *error);

/* The progress of the current write; as sk_socket_read_progress. */
int sk_socket_write_progress(sk_socket_t *sock, long *out_tag, size_t *out_done, size_t *out_total);

/* Bytes queued and not yet accepted by the kernel (out_bytes may be NULL). */
int sk_socket_get_queued_write_bytes(sk_socket_t *sock, size_t *out_bytes);

/* ---- Disconnecting -------------------------------------------------------------------- */

/* Closes now: pending reads and writes are dropped without callbacks, then did_disconnect
 * (error NULL) follows the callbacks already queued. Does nothing on a disconnected
 * socket. Returns disconnected (it waits for the loop: see THREADS): the socket may
 * connect or accept again at once. A listener returns with its descriptors closed and its
 * Unix-domain socket file removed, so a new listener can take the port or the path at
 * once. Errors: SK_ERR_INVALID_HANDLE. */
int sk_socket_disconnect(sk_socket_t *sock);

/* Closes once every queued read completed; new reads and writes are refused. */
int sk_socket_disconnect_after_reading(sk_socket_t *sock);

/* Closes once every queued write was written (a FIN follows the last byte). Followed by
 * sk_socket_release(), the writes are still sent, even while still connecting (see there). */
int sk_socket_disconnect_after_writing(sk_socket_t *sock);

/* Closes once both queues drained. */
int sk_socket_disconnect_after_reading_and_writing(sk_socket_t *sock);

/* Ends the connection abortively: the peer gets a reset (RST, by SO_LINGER 0) instead of
 * an orderly close; queued writes are dropped and under TLS no close_notify is sent (as
 * libuv's uv_tcp_close_reset). Otherwise as sk_socket_disconnect: did_disconnect (error
 * NULL) follows, and the socket may connect again. Errors: SK_ERR_INVALID_HANDLE. */
int sk_socket_disconnect_with_reset(sk_socket_t *sock);

/* Half-close: closes our sending side once the writes queued before it have been written
 * (FIN; under TLS close_notify, then FIN) and keeps reading, so the peer reads to the end of
 * our stream and may go on sending (asyncio's write_eof, libuv's uv_shutdown). Writes and
 * sk_socket_start_tls are refused from then on (SK_ERR_BAD_CONFIG). When the peer then
 * closes its side, the connection ends cleanly: did_disconnect with error NULL. Does nothing
 * when not connecting or connected, or when called before; returns with writes refused (it
 * waits for the loop: see THREADS). Errors: SK_ERR_INVALID_HANDLE. */
int sk_socket_close_write_stream(sk_socket_t *sock);

/* ---- Diagnostics (never wait for the loop) ------------------------------------------- */

/* 1 or 0, or SK_ERR_INVALID_HANDLE. "Connected" is false while connecting; "disconnected"
 * is true when neither connecting, connected nor accepting. */
int sk_socket_is_connected(sk_socket_t *sock);
int sk_socket_is_disconnected(sk_socket_t *sock);
int sk_socket_is_accepting(sk_socket_t *sock);
/* Whether the connection, or one of the listener's sockets, is IPv4 / IPv6 / Unix-domain. */
int sk_socket_is_ipv4(sk_socket_t *sock);
int sk_socket_is_ipv6(sk_socket_t *sock);
int sk_socket_is_unix(sk_socket_t *sock);

/* The getters below follow Getters at the top. Each fails with SK_ERR_BAD_CONFIG when
 * there is no such address (not connected, or not over IP for a host), and with
 * SK_ERR_INVALID_HANDLE. */

/* The peer's IP address as text, NUL-terminated, as snprintf: copies what fits into
 * `buffer` of `capacity` bytes and returns the whole text's length (INET6_ADDRSTRLEN bytes
 * are always enough, except through a proxy: then the target's host as given to connect,
 * up to 256 bytes, and _port the target's port). Cut when the result is >= capacity; NULL
 * `buffer`: the length only. */
int sk_socket_get_connected_host(sk_socket_t *sock, char *buffer, size_t capacity);
/* The peer's port (0 for Unix-domain sockets); `out_port` may be NULL. */
int sk_socket_get_connected_port(sk_socket_t *sock, uint16_t *out_port);
/* The peer's address (IP or Unix-domain), as getsockname(2): `*address_length` (required)
 * is the capacity of `address` on input; what fits is copied, and `*address_length` and
 * the result are the address's whole length (cut when larger than the capacity given;
 * sizeof(struct sockaddr_storage) is always enough). NULL `address`: the length only. */
int sk_socket_get_connected_address(sk_socket_t *sock, struct sockaddr *address, socklen_t *address_length);
/* The Unix-domain path of the other end, as sk_socket_get_connected_host gives a host. */
int sk_socket_get_connected_unix_path(sk_socket_t *sock, char *buffer, size_t capacity);

/* The local address, as the three getters above; for a listener, its IPv4 one if it has
 * one. */
int sk_socket_get_local_host(sk_socket_t *sock, char *buffer, size_t capacity);
int sk_socket_get_local_port(sk_socket_t *sock, uint16_t *out_port);
int sk_socket_get_local_address(sk_socket_t *sock, struct sockaddr *address, socklen_t *address_length);

/* For a connection accepted with a PROXY protocol header that named the client
 * (sk_socket_set_proxy_protocol): the proxy's address, the connection's real TCP peer, as
 * sk_socket_get_connected_address gives one; SK_ERR_BAD_CONFIG otherwise (no header
 * expected, a LOCAL or UNKNOWN header, not connected). */
int sk_socket_get_proxy_address(sk_socket_t *sock, struct sockaddr *address, socklen_t *address_length);
/* 1 or 2: the version of the header that gave the connection's addresses; 0 when none did
 * (as sk_socket_get_proxy_address fails); or SK_ERR_INVALID_HANDLE. */
int sk_socket_get_proxy_protocol_version(sk_socket_t *sock);

/* ---- Advanced ------------------------------------------------------------------------- */

/* The descriptors of a socket, -1 where there is none. A listener may have an IPv4 and an
 * IPv6 descriptor; `primary` is the connection's, or the listener's IPv4 one, else IPv6. */
typedef struct sk_socket_descriptors {
    int primary;
    int ipv4;
    int ipv6;
    int unix_domain;
} sk_socket_descriptors_t;

/* Runs `function` on the socket's loop thread with its descriptors (e.g. for a setsockopt
 * SocketKit does not offer). Do not close them or change their blocking mode. `function`
 * runs as a callback of the socket does: callbacks it causes follow it, and a disconnect it
 * makes takes effect once it returns. Called on the loop thread, it runs before this returns.
 * Errors: SK_ERR_BAD_PARAM (function NULL), SK_ERR_BAD_CONFIG (stopped loop). */
int sk_socket_perform(sk_socket_t *sock, void (*function)(const sk_socket_descriptors_t *descriptors, void *context),
                      void *context);

/* ---- TLS ------------------------------------------------------------------------------
 *
 * sk_socket_start_tls queues the handshake behind every read and write already queued
 * (GCDAsyncSocket's startTLS:): those run in plaintext, the ones queued afterwards run
 * encrypted once did_secure was called. So "write STARTTLS, start_tls, read" can be
 * queued back to back. Bytes that arrived before the handshake are fed to it.
 *
 * Secure by default: a client verifies the server's chain against the system trust store
 * and the host given to connect (IP literals against the certificate's IP addresses, and
 * never sent as SNI); TLS 1.2 minimum; OpenSSL security level 2; a 30 s handshake
 * timeout. An orderly disconnect sends close_notify; a peer's FIN without one is
 * SK_ERR_TLS_TRUNCATED. No SIGPIPE: SocketKit does all socket I/O itself.
 *
 * Each handshake flight leaves in one send, and the last one (a client's Finished, a
 * server's session tickets) together with what follows it at once: writes queued behind
 * sk_socket_start_tls or made in did_secure, and an answer a callback on the loop thread
 * writes to data that came with the peer's Finished. So a first request and its answer
 * do not wait for a delayed ACK even with no-delay off (see sk_socket_set_no_delay).
 *
 * What TLS does not do:
 *   - Renegotiation (TLS 1.2 and older) is refused: SocketKit never starts one and answers
 *     a peer's request with a no_renegotiation alert; a peer that insists ends the
 *     connection (SK_ERR_TLS_FAILED, typically a handshake_failure alert). TLS 1.3 has no
 *     renegotiation; its key updates are answered.
 *   - Revocation is checked against the CRL files given (sk_tls_settings_set_crl_files)
 *     and a stapled OCSP response when a client asks for one
 *     (sk_tls_settings_set_request_ocsp_staple), never by fetching from an OCSP responder
 *     or a CRL distribution point.
 *   - The security level is a floor: a cipher list with "@SECLEVEL=n" below 2 is refused
 *     (SK_ERR_TLS_SETTINGS) rather than silently accepting weak keys and SHA-1 again;
 *     raising it is allowed.
 */

typedef struct sk_tls_settings sk_tls_settings_t;

typedef enum sk_tls_role {
    SK_TLS_CLIENT = 0,
    SK_TLS_SERVER = 1
} sk_tls_role_t;

typedef enum sk_tls_verification {
    SK_TLS_VERIFY_DEFAULT = -1,          /* clients verify the server; servers ask nothing */
    SK_TLS_VERIFY_NONE = 0,              /* accept any peer */
    SK_TLS_VERIFY_PEER = 1,              /* verify the peer's certificate if it sends one */
    SK_TLS_VERIFY_REQUIRE_CERTIFICATE = 2 /* servers: clients must send one that verifies */
} sk_tls_verification_t;

typedef enum sk_tls_version {
    SK_TLS_VERSION_DEFAULT = 0,  /* minimum: TLS 1.2; maximum: the newest OpenSSL knows */
    SK_TLS_VERSION_1_0 = 0x0301,
    SK_TLS_VERSION_1_1 = 0x0302,
    SK_TLS_VERSION_1_2 = 0x0303,
    SK_TLS_VERSION_1_3 = 0x0304
} sk_tls_version_t;

/* Settings are a reference-counted value: a socket takes what they say when
 * sk_socket_start_tls is called, so they may be changed or released afterwards. Sockets
 * started with equal settings share one OpenSSL context (certificates and trust roots are
 * loaded once; client sessions are kept there for resumption).
 * Errors: SK_ERR_BAD_PARAM (role unknown, out_settings NULL). */
int sk_tls_settings_create(int role, sk_tls_settings_t **out_settings, sk_error_t *error);
int sk_tls_settings_release(sk_tls_settings_t *settings);

/* Each setter returns SK_OK, SK_ERR_INVALID_HANDLE or SK_ERR_BAD_PARAM. Strings are
 * copied; NULL resets a string setting to its default. Files are read when the settings
 * are first used (sk_socket_start_tls or sk_tls_settings_check), and again for a new
 * connection when one changed on disk since (renamed over or rewritten: each
 * sk_socket_start_tls stats them); connections already made keep what they had. */

/* The name to send as SNI and to verify the server's certificate against (clients).
 * Default (NULL): the host given to connect (the peer's IP address for a raw address or
 * an adopted descriptor). An empty name is refused by sk_tls_settings_check and
 * sk_socket_start_tls (SK_ERR_TLS_SETTINGS): it would turn host-name verification off.
 * A Unix-domain connection has no host: a client that verifies must be given a name, or
 * its handshake ends at once with SK_ERR_TLS_SETTINGS (did_disconnect). */
int sk_tls_settings_set_peer_name(sk_tls_settings_t *settings, const char *name);
/* Trust roots: the system store (default), a PEM file, a hashed directory, or PEM text
 * (`length` bytes; 0 with a NUL-terminated string). */
int sk_tls_settings_set_trust_system(sk_tls_settings_t *settings);
int sk_tls_settings_set_trust_file(sk_tls_settings_t *settings, const char *path);
int sk_tls_settings_set_trust_directory(sk_tls_settings_t *settings, const char *path);
int sk_tls_settings_set_trust_pem(sk_tls_settings_t *settings, const char *pem, size_t length);
/* Our certificate then its intermediates (PEM), and the private key of the first (PEM,
 * encrypted if `password` is not NULL). Servers need both; clients send them when asked. */
int sk_tls_settings_set_certificate_chain_file(sk_tls_settings_t *settings, const char *path);
int sk_tls_settings_set_certificate_chain_pem(sk_tls_settings_t *settings, const char *pem, size_t length);
int sk_tls_settings_set_private_key_file(sk_tls_settings_t *settings, const char *path, const char *password);
int sk_tls_settings_set_private_key_pem(sk_tls_settings_t *settings, const char *pem, size_t length,
                                        const char *password);
/* Our identity as PKCS#12 (.p12, .pfx: the private key, its certificate and any
 * intermediates) instead of the chain and key above: a file, or `length` bytes (copied),
 * with the password it was exported with (NULL: none; OpenSSL then tries no password
 * and the empty one). Giving both forms of identity is SK_ERR_TLS_SETTINGS; `path` or
 * `bytes` NULL removes the PKCS#12 identity. The file is read as the others are (and
 * again when it changes on disk). A wrong password, bytes that are not PKCS#12, a file
 * that cannot be read (os_error: the errno) or one without a key and its certificate is
 * SK_ERR_TLS_SETTINGS with OpenSSL's reason from sk_tls_settings_check and
 * sk_socket_start_tls: never a handshake without the identity. OpenSSL 3's own format
 * (openssl pkcs12 -export: AES-256, PBKDF2) and the older 3DES/SHA-1 one are read; RC2-40
 * (-legacy, OpenSSL 1.x's default) needs OpenSSL's legacy provider, which SocketKit does
 * not load for the process: such a file is SK_ERR_TLS_SETTINGS saying so (convert it:
 * openssl pkcs12 -legacy -in old.p12 -nodes | openssl pkcs12 -export -out new.p12).
 * Errors here: SK_ERR_INVALID_HANDLE, SK_ERR_BAD_PARAM (`length` 0 with `bytes`). */
int sk_tls_settings_set_pkcs12_file(sk_tls_settings_t *settings, const char *path, const char *password);
int sk_tls_settings_set_pkcs12_data(sk_tls_settings_t *settings, const void *bytes, size_t length,
                                    const char *password);
/* Certificate revocation lists the peer's chain is checked against: `count` files (PEM,
 * one or more CRLs each, or DER), copied; `count` 0 turns the check off (the default).
 * Given, a revoked certificate fails verification (SK_ERR_TLS_CERT_INVALID, os_error
 * X509_V_ERR_CERT_REVOKED = 23, "certificate revoked"), on a client verifying its server
 * as on a server verifying client certificates; so does a certificate whose issuer has no
 * CRL here (os_error X509_V_ERR_UNABLE_TO_GET_CRL = 3: fail closed), or an expired CRL.
 * A file that cannot be read (os_error: the errno) or holds no CRL is SK_ERR_TLS_SETTINGS
 * from sk_tls_settings_check and sk_socket_start_tls, never "no check". The files are
 * read again when they change on disk, as certificates are (publish a new CRL by renaming
 * it over the old one). A server's CRLs are its own, not those of settings given to
 * sk_tls_settings_set_server_name_settings (refused there: SK_ERR_TLS_SETTINGS).
 * Errors here: SK_ERR_INVALID_HANDLE, SK_ERR_BAD_PARAM (`paths`
 * NULL with `count` > 0, a NULL or empty path, more than 256 files). */
int sk_tls_settings_set_crl_files(sk_tls_settings_t *settings, const char *const *paths, size_t count);
/* 1 (default): every certificate of the chain must be covered by a CRL of its issuer
 * (X509_V_FLAG_CRL_CHECK_ALL); 0: the leaf only (X509_V_FLAG_CRL_CHECK). */
int sk_tls_settings_set_crl_check_whole_chain(sk_tls_settings_t *settings, int enabled);
/* Servers: a DER OCSP response for the server's certificate (openssl ocsp -respout),
 * stapled for each client that asks (status_request); copied; NULL: none (the default).
 * It must be a successful OCSP response with a basic response: a file that cannot be read
 * (os_error: the errno) or is not one is SK_ERR_TLS_SETTINGS from sk_tls_settings_check
 * and sk_socket_start_tls, never a handshake without the staple. The file is read again
 * when it changes on disk, as certificates are: a renewed response renamed over the old
 * one is stapled from the next connection on. SocketKit does not fetch responses or check
 * their dates: keep the file current. Settings given to
 * sk_tls_settings_set_server_name_settings may have their own. On a client:
 * SK_ERR_TLS_SETTINGS (from sk_tls_settings_check and sk_socket_start_tls).
 * Errors here: SK_ERR_INVALID_HANDLE, SK_ERR_BAD_PARAM (an empty path). */
int sk_tls_settings_set_ocsp_response_file(sk_tls_settings_t *settings, const char *path);
/* Clients, 1: ask the server to staple an OCSP response (status_request); 0 (default):
 * do not. A stapled response is checked against the chain the handshake verified: signed
 * by the leaf's issuer (or a responder it delegated to) chaining to the trust roots, for
 * the leaf and that issuer, current (five minutes' leeway). "revoked" fails the handshake
 * with SK_ERR_TLS_CERT_INVALID, os_error X509_V_ERR_CERT_REVOKED = 23, "OCSP: certificate
 * revoked"; a staple that does not verify, does not parse, is stale or is for another
 * certificate fails too (os_error X509_V_ERR_OCSP_VERIFY_FAILED = 74; "unknown":
 * X509_V_ERR_OCSP_CERT_UNKNOWN = 75): fail closed. No staple: the handshake goes on (see
 * sk_tls_settings_set_require_ocsp_staple). A resumed session has none (its first
 * handshake checked it). With manual trust evaluation the staple is still checked, in the
 * handshake, before did_receive_trust (against the trust roots). The staple:
 * sk_socket_copy_ocsp_response. On a server:
 * SK_ERR_TLS_SETTINGS (from sk_tls_settings_check and sk_socket_start_tls). */
int sk_tls_settings_set_request_ocsp_staple(sk_tls_settings_t *settings, int enabled);
/* Clients, 1: a server that staples no OCSP response fails the handshake
 * (SK_ERR_TLS_CERT_INVALID, os_error X509_V_ERR_OCSP_VERIFY_NEEDED = 73), as for a
 * must-staple certificate; implies asking for one. 0 (default): a staple is optional. */
int sk_tls_settings_set_require_ocsp_staple(sk_tls_settings_t *settings, int enabled);
/* sk_tls_verification_t. */
int sk_tls_settings_set_verification(sk_tls_settings_t *settings, int verification);
/* sk_tls_version_t bounds (SK_TLS_VERSION_DEFAULT for either). */
int sk_tls_settings_set_versions(sk_tls_settings_t *settings, int minimum, int maximum);
/* OpenSSL cipher list for TLS 1.2 and older, and TLS 1.3 cipher suites. A list that
 * lowers the security level below 2 ("@SECLEVEL=0" or "=1") is refused by
 * sk_tls_settings_check and sk_socket_start_tls (SK_ERR_TLS_SETTINGS). */
int sk_tls_settings_set_cipher_list(sk_tls_settings_t *settings, const char *list);
int sk_tls_settings_set_cipher_suites(sk_tls_settings_t *settings, const char *suites);
/* ALPN: offered by a client in this order, or chosen by a server in its order of
 * preference. `count` 0 turns ALPN off. Each name has 1 to 255 bytes. */
int sk_tls_settings_set_alpn_protocols(sk_tls_settings_t *settings, const char *const *protocols, size_t count);
/* Clients: resume earlier sessions with the same peer name and port (default 1). */
int sk_tls_settings_set_session_resumption(sk_tls_settings_t *settings, int enabled);
/* Seconds from the start of the handshake until the connection is secure (default 30;
 * negative or INFINITY: no limit; NaN: SK_ERR_BAD_PARAM). With manual trust evaluation the
 * delegate's answer counts too. */
int sk_tls_settings_set_handshake_timeout(sk_tls_settings_t *settings, double seconds);
/* Appends the session keys to `path` in NSS key-log format (SSLKEYLOGFILE), for
 * debugging only: anyone with the file can decrypt the traffic. A new file is created
 * readable by its owner only (0600). NULL: off. A path that cannot be opened is
 * SK_ERR_TLS_SETTINGS (os_error: the errno) from sk_tls_settings_check and
 * sk_socket_start_tls. */
int sk_tls_settings_set_key_log_file(sk_tls_settings_t *settings, const char *path);
/* 1: did_receive_trust decides instead of the built-in verdict. */
int sk_tls_settings_set_manual_trust_evaluation(sk_tls_settings_t *settings, int enabled);
/* Servers: the certificate to present to clients that ask for `name` (SNI). `named` is a
 * server's settings, copied now (later changes to it are not seen): its certificate chain
 * and key (and ALPN list and key-log file) serve the name; versions, ciphers and client
 * verification (mode and trust roots) stay those of `settings`. `name` is a host name, matched without regard to
 * case, or "*." and a domain for any one label in front of it; an exact name wins. A name
 * not listed, or no SNI: the certificate of `settings`. `named` NULL removes the name.
 * Their files are stamped and read again as those of `settings` are. Errors:
 * SK_ERR_INVALID_HANDLE, SK_ERR_BAD_PARAM (`name` NULL or empty); a malformed name, names
 * on a client, or `named` a client's or with names of its own: SK_ERR_TLS_SETTINGS from
 * sk_tls_settings_check and sk_socket_start_tls. */
int sk_tls_settings_set_server_name_settings(sk_tls_settings_t *settings, const char *name,
                                             sk_tls_settings_t *named);
/* Loads the files and checks everything now, as sk_socket_start_tls would.
 * Errors: SK_ERR_TLS_SETTINGS (with the reason), SK_ERR_INVALID_HANDLE. */
int sk_tls_settings_check(sk_tls_settings_t *settings, sk_error_t *error);

/* Queues the TLS handshake (see above). `settings` NULL: a client with the defaults.
 * Errors: SK_ERR_TLS_SETTINGS (unusable settings), SK_ERR_BAD_CONFIG (not connecting or
 * connected, a listener, after sk_socket_disconnect_after_*, or TLS already started in
 * this session: only the first call counts), SK_ERR_INVALID_HANDLE. Handshake failures
 * come through did_disconnect (SK_ERR_TLS_*). */
int sk_socket_start_tls(sk_socket_t *sock, sk_tls_settings_t *settings, sk_error_t *error);

/* Answers did_receive_trust (or an SK_EVENT_TRUST record) from any thread, now or later:
 * `accept` 1 trusts the peer (did_secure follows), 0 disconnects with
 * SK_ERR_TLS_PEER_REJECTED. Only the first answer counts. Errors: SK_ERR_INVALID_HANDLE. */
int sk_socket_answer_trust(sk_socket_t *sock, uint64_t token, int accept);

/* 1 once the connection is secure, 0 before, or SK_ERR_INVALID_HANDLE. */
int sk_socket_is_secure(sk_socket_t *sock);

/* What the handshake settled. Every name fits its array, except a server name longer than
 * a DNS name (255 bytes), which is cut. */
typedef struct sk_tls_info {
    char protocol_version[16];    /* "TLSv1.2", "TLSv1.3" */
    char cipher[64];              /* OpenSSL's name, e.g. "TLS_AES_256_GCM_SHA384" */
    char alpn_protocol[256];      /* "" when ALPN chose nothing (names have 1 to 255 bytes) */
    char server_name[256];        /* SNI sent (client) or received (server); "" if none */
    int session_reused;           /* 1 when an earlier session was resumed */
    int peer_certificate_count;   /* see sk_socket_copy_peer_certificate */
} sk_tls_info_t;

/* SK_OK and the info in `*out_info` (may be NULL: only whether the connection is secure).
 * Errors: SK_ERR_BAD_CONFIG (not secure), SK_ERR_INVALID_HANDLE.
 *
 * Each of these getters reads the session as it is at the call; the session can end at
 * any moment on the loop thread (a peer that closes right after the handshake ends it
 * while did_secure runs, or before it runs on another queue). SK_ERR_BAD_CONFIG after
 * sk_socket_is_secure() returned 1, after did_secure, or between the calls below means
 * the session ended meanwhile: treat it as "not secure". To read the info and the
 * certificates of one session, read the info again after the certificates and start over
 * if it changed (a new session may have started; SK_ERR_BAD_PARAM from
 * sk_socket_copy_peer_certificate can also mean that). */
int sk_socket_get_tls_info(sk_socket_t *sock, sk_tls_info_t *out_info);

/* The DER of the peer's certificate `index` (0: the leaf), as getsockname(2) and Getters at
 * the top: `*inout_length` (required) is the capacity of `buffer` on input; what fits is
 * copied, and `*inout_length` and the result are the certificate's whole size (cut when
 * larger than the capacity given). NULL `buffer`: the size only, whatever *inout_length
 * held. Errors: SK_ERR_BAD_PARAM (index out of range, inout_length NULL),
 * SK_ERR_BAD_CONFIG (not secure), SK_ERR_INVALID_HANDLE. */
int sk_socket_copy_peer_certificate(sk_socket_t *sock, int index, void *buffer, size_t *inout_length);

/* Clients that asked (sk_tls_settings_set_request_ocsp_staple): the DER OCSP response the
 * server stapled, checked before the handshake succeeded. Copied as by
 * sk_socket_copy_peer_certificate: `*inout_length` (required) is the capacity of `buffer`
 * on input; what fits is copied, and `*inout_length` and the result are the response's
 * whole size. 0 (and `*inout_length` 0): no response was stapled (or none was asked for,
 * or the session was resumed). Errors: SK_ERR_BAD_PARAM (inout_length NULL),
 * SK_ERR_BAD_CONFIG (not secure), SK_ERR_INVALID_HANDLE. */
int sk_socket_copy_ocsp_response(sk_socket_t *sock, void *buffer, size_t *inout_length);

/* A certificate's subject, issuer (RFC 2253 text, cut to fit: a field of 511 bytes may
 * have been cut) and validity (seconds since 1970, UTC). */
typedef struct sk_certificate_info {
    char subject[512];
    char issuer[512];
    int64_t not_before;
    int64_t not_after;
} sk_certificate_info_t;

/* SK_OK and the info in `*out_info` (may be NULL: only whether `der` is a certificate).
 * Errors: SK_ERR_BAD_PARAM (der NULL, or not a DER certificate). */
int sk_certificate_get_info(const void *der, size_t length, sk_certificate_info_t *out_info, sk_error_t *error);

/* The certificate as PEM text, as Getters at the top: `*inout_length` (required) is the
 * capacity of `buffer` on input; what fits is copied, NUL-terminated, the result is the
 * text's whole length (without the NUL: cut when >= the capacity given), and
 * `*inout_length` the size needed (result + 1, with the NUL). NULL `buffer`: the length
 * only, whatever *inout_length held. Errors: SK_ERR_BAD_PARAM (not a certificate,
 * inout_length NULL). */
int sk_certificate_to_pem(const void *der, size_t length, char *buffer, size_t *inout_length);

/* ======================================================================================
 * UDP sockets (GCDAsyncUdpSocket)
 *
 * Descriptors are made lazily, one per address family (IPv6 with IPV6_V6ONLY), by the
 * first bind, connect or send. Sends are queued (with tags and timeouts) and answered by
 * did_send / did_not_send; a datagram that cannot be sent fails alone and the socket stays
 * open. Receiving is off until sk_udp_socket_receive_once or _begin_receiving.
 *
 * Threads: every function may be called from any thread. Sends, sk_udp_socket_perform and
 * the getters return at once; every other call waits for the socket's event loop to run it
 * and returns its answer (see THREADS at the top: inline on the loop's thread, and never
 * a deadlock). The same lifetime rules as for sk_socket_t apply: after
 * sk_udp_socket_release returns, no callback and no filter call of that socket starts.
 * ====================================================================================== */

/* Which of a host name's addresses a UDP socket uses (one address per send or connect). */
typedef enum sk_udp_address_preference {
    SK_UDP_PREFER_NEUTRAL = 0,   /* the resolver's first address (default) */
    SK_UDP_PREFER_IPV4 = 1,
    SK_UDP_PREFER_IPV6 = 2
} sk_udp_address_preference_t;

/* Where a datagram arrived (packet info: sk_udp_socket_set_receives_packet_info). */
typedef struct sk_udp_packet_info {
    /* The address the datagram was sent to, as its IP header says (a multicast group, a
     * broadcast address, or one of this host's), port 0: a sockaddr_in or sockaddr_in6. */
    struct sockaddr_storage destination;
    socklen_t destination_length;
    /* The index of the interface it came in on (if_indextoname gives its name). */
    unsigned interface_index;
} sk_udp_packet_info_t;

/* A UDP socket's callbacks (NULL members: not interested). Addresses and data are
 * borrowed for the call only. did_close is the last callback of a session. */
typedef struct sk_udp_socket_delegate {
    /* The connect succeeded: only `address` can send to this socket now. */
    void (*did_connect)(sk_udp_socket_t *sock, const struct sockaddr *address, socklen_t address_length,
                        void *userdata);
    /* The connect failed (resolution, family, connect(2)); the socket stays usable. */
    void (*did_not_connect)(sk_udp_socket_t *sock, const sk_error_t *error, void *userdata);
    /* The kernel accepted the datagram queued with `tag` (or the send filter dropped it). */
    void (*did_send)(sk_udp_socket_t *sock, long tag, void *userdata);
    /* The datagram was not sent: SK_ERR_SEND_TIMEOUT, SK_ERR_RESOLUTION, SK_ERR_BAD_CONFIG
     * (no destination on an unconnected socket, a destination on a connected one),
     * SK_ERR_OTHER (no usable family), SK_ERR_SYSTEM (EMSGSIZE, EACCES, ENETUNREACH, ...). */
    void (*did_not_send)(sk_udp_socket_t *sock, long tag, const sk_error_t *error, void *userdata);
    /* One datagram (`length` may be 0) from `address`; `context` is what the receive
     * filter set (NULL without one). */
    void (*did_receive)(sk_udp_socket_t *sock, const void *data, size_t length, const struct sockaddr *address,
                        socklen_t address_length, void *context, void *userdata);
    /* A receive problem that does not close the socket: SK_ERR_SYSTEM for an ICMP error
     * about an earlier datagram (ECONNREFUSED, ...), SK_ERR_TRUNCATED for a datagram larger
     * than the receive limit (dropped). */
    void (*did_receive_error)(sk_udp_socket_t *sock, const sk_error_t *error, void *userdata);
    /* The socket closed: error NULL after sk_udp_socket_close / _close_after_sending,
     * SK_ERR_CLOSED when its loop stopped. Only if it had descriptors. */
    void (*did_close)(sk_udp_socket_t *sock, const sk_error_t *error, void *userdata);
    /* Added in 0.2.0 (the members above are the first published version). A datagram that
     * carries packet info (sk_udp_socket_set_receives_packet_info): as did_receive, with
     * where it arrived in `info` (borrowed for the call). When this member is NULL such
     * datagrams go to did_receive, without it. */
    void (*did_receive_with_packet_info)(sk_udp_socket_t *sock, const void *data, size_t length,
                                         const struct sockaddr *address, socklen_t address_length,
                                         const sk_udp_packet_info_t *info, void *context, void *userdata);
} sk_udp_socket_delegate_t;

/* Receive filter: return nonzero to pass the datagram to did_receive (with *out_context
 * as its context), 0 to drop it. Send filter: nonzero to send, 0 to drop (the datagram is
 * still reported by did_send). `data` and `address` are borrowed for the call. */
typedef int (*sk_udp_receive_filter_fn)(sk_udp_socket_t *sock, const void *data, size_t length,
                                        const struct sockaddr *address, socklen_t address_length,
                                        void **out_context, void *filter_userdata);
typedef int (*sk_udp_send_filter_fn)(sk_udp_socket_t *sock, const void *data, size_t length,
                                     const struct sockaddr *address, socklen_t address_length, long tag,
                                     void *filter_userdata);

/* Creates a UDP socket (no descriptors yet). `delegate` is copied (NULL: none; nothing a
 * UDP socket does needs one); pass sizeof(sk_udp_socket_delegate_t) as `delegate_size`
 * (the rule for other sizes: ABI, at the top). `queue` NULL runs callbacks on the event
 * loop thread; `group` NULL uses the default loop group. Errors: SK_ERR_BAD_PARAM
 * (out_socket NULL, a delegate_size the ABI rule refuses), SK_ERR_INVALID_HANDLE. */
int sk_udp_socket_create(const sk_udp_socket_delegate_t *delegate, size_t delegate_size, void *userdata,
                         sk_callback_queue_t *queue, sk_loop_group_t *group, sk_udp_socket_t **out_socket,
                         sk_error_t *error);
/* Drops your reference: the socket closes without callbacks (no did_close). Once this
 * returns no callback or filter call of it starts (one running on another thread has
 * finished). Do not call it from inside one of the socket's filters. Queued datagrams are
 * dropped, unless sk_udp_socket_close_after_sending came first and no send filter is set:
 * then the socket still sends them (the lingering close, as sk_socket_release after
 * sk_socket_disconnect_after_writing): those waiting for a name too, each within its own
 * timeout and all within two minutes, then closes its descriptors and frees itself;
 * receiving stops. A loop that stops ends it. */
int sk_udp_socket_release(sk_udp_socket_t *sock);
/* Replaces the delegate and userdata, synchronously (as sk_socket_set_delegate). */
int sk_udp_socket_set_delegate(sk_udp_socket_t *sock, const sk_udp_socket_delegate_t *delegate,
                               size_t delegate_size, void *userdata);
int sk_udp_socket_set_callback_queue(sk_udp_socket_t *sock, sk_callback_queue_t *queue);
/* The delegate's userdata (NULL without a delegate; out_userdata may be NULL). */
int sk_udp_socket_get_userdata(sk_udp_socket_t *sock, void **out_userdata);

/* Configuration: families (both on by default; set before the first bind, connect or
 * send), address preference, the largest datagram delivered per family (1...65535, 65535
 * by default; larger ones give SK_ERR_TRUNCATED), SO_SNDBUF/SO_RCVBUF requested when
 * descriptors are made (0: the kernel's default). Setters return SK_OK or
 * SK_ERR_BAD_PARAM for a value out of range; getters return 1/0 (is_*) or SK_OK with the
 * values in their out-pointers, each of which may be NULL (see Getters at the top). */
int sk_udp_socket_set_ipv4_enabled(sk_udp_socket_t *sock, int enabled);
int sk_udp_socket_is_ipv4_enabled(sk_udp_socket_t *sock);
int sk_udp_socket_set_ipv6_enabled(sk_udp_socket_t *sock, int enabled);
int sk_udp_socket_is_ipv6_enabled(sk_udp_socket_t *sock);
int sk_udp_socket_set_address_preference(sk_udp_socket_t *sock, int preference);
int sk_udp_socket_get_address_preference(sk_udp_socket_t *sock);
int sk_udp_socket_set_max_receive_sizes(sk_udp_socket_t *sock, size_t ipv4_size, size_t ipv6_size, sk_error_t *error);
int sk_udp_socket_get_max_receive_sizes(sk_udp_socket_t *sock, size_t *out_ipv4_size, size_t *out_ipv6_size);
int sk_udp_socket_set_buffer_sizes(sk_udp_socket_t *sock, int send_size, int receive_size, sk_error_t *error);
int sk_udp_socket_get_buffer_sizes(sk_udp_socket_t *sock, int *out_send_size, int *out_receive_size);

/* Binds every enabled family on `interface` (NULL: any; "localhost"/"loopback"; a name;
 * an IP address) to `port`; 0 picks one free port for both families. Families without an
 * address there are given up. Errors: SK_ERR_BAD_CONFIG (bound twice, after a connect or a
 * send), SK_ERR_BAD_PARAM (unknown interface), SK_ERR_SYSTEM (EADDRINUSE, EACCES). */
int sk_udp_socket_bind_to_port(sk_udp_socket_t *sock, const char *interface, uint16_t port, sk_error_t *error);
/* Binds the address's family only (the other is given up). */
int sk_udp_socket_bind_to_address(sk_udp_socket_t *sock, const struct sockaddr *address, socklen_t address_length,
                                  sk_error_t *error);

/* Connects (queued behind earlier sends; the name resolved off the loop): did_connect or
 * did_not_connect follows. Errors: SK_ERR_BAD_CONFIG (connected or connecting already),
 * SK_ERR_BAD_PARAM. */
int sk_udp_socket_connect_to_host(sk_udp_socket_t *sock, const char *host, uint16_t port, sk_error_t *error);
int sk_udp_socket_connect_to_address(sk_udp_socket_t *sock, const struct sockaddr *address, socklen_t address_length,
                                     sk_error_t *error);

/* Queues a datagram (copied; 0...65535 bytes, `data` may be NULL when `length` is 0): to
 * the connected peer, to a host (resolved off the loop), or to an address. `timeout`
 * seconds (negative: none) count from when it reaches the head of the queue. Errors
 * (synchronous): SK_ERR_BAD_PARAM (length, NULL, NaN timeout), SK_ERR_BAD_CONFIG (stopped
 * loop); everything else comes through did_not_send. */
int sk_udp_socket_send(sk_udp_socket_t *sock, const void *data, size_t length, double timeout, long tag,
                       sk_error_t *error);
int sk_udp_socket_send_to_host(sk_udp_socket_t *sock, const void *data, size_t length, const char *host, uint16_t port,
                               double timeout, long tag, sk_error_t *error);
int sk_udp_socket_send_to_address(sk_udp_socket_t *sock, const void *data, size_t length,
                                  const struct sockaddr *address, socklen_t address_length, double timeout, long tag,
                                  sk_error_t *error);

/* Filters (NULL function: none). `asynchronous` 0 runs it on the event loop thread as each
 * datagram passes (`queue` must be NULL); nonzero on `queue` (NULL: the socket's callback
 * queue), in order. In receive-once mode a dropped datagram does not count. */
int sk_udp_socket_set_send_filter(sk_udp_socket_t *sock, sk_udp_send_filter_fn filter, void *filter_userdata,
                                  sk_callback_queue_t *queue, int asynchronous, sk_error_t *error);
int sk_udp_socket_set_receive_filter(sk_udp_socket_t *sock, sk_udp_receive_filter_fn filter, void *filter_userdata,
                                     sk_callback_queue_t *queue, int asynchronous, sk_error_t *error);

/* Receiving: the next datagram only, every datagram, or none (datagrams wait in the
 * kernel; callbacks already queued still come). Errors: SK_ERR_BAD_CONFIG (no descriptors
 * yet: bind, connect or send first). */
int sk_udp_socket_receive_once(sk_udp_socket_t *sock, sk_error_t *error);
int sk_udp_socket_begin_receiving(sk_udp_socket_t *sock, sk_error_t *error);
int sk_udp_socket_pause_receiving(sk_udp_socket_t *sock);

/* Multicast: join or leave `group` (a numeric IPv4 or IPv6 address) on `interface` (NULL:
 * the kernel's choice; a name, "localhost", or an IP address of one); each family on its
 * own descriptor, the other family stays open. Needs a bound, unconnected socket.
 * Errors: SK_ERR_BAD_CONFIG, SK_ERR_BAD_PARAM, SK_ERR_SYSTEM (e.g. EADDRNOTAVAIL when
 * leaving a group not joined). */
int sk_udp_socket_join_multicast_group(sk_udp_socket_t *sock, const char *group, const char *interface,
                                       sk_error_t *error);
int sk_udp_socket_leave_multicast_group(sk_udp_socket_t *sock, const char *group, const char *interface,
                                        sk_error_t *error);
/* Source-specific multicast (RFC 4607, IGMPv3/MLDv2): receive what `source` sends to
 * `group`, and nothing others send to it (MCAST_JOIN_SOURCE_GROUP), or stop
 * (MCAST_LEAVE_SOURCE_GROUP). Both numeric and of one family (IPv4's SSM range is
 * 232.0.0.0/8); otherwise as sk_udp_socket_join_multicast_group. Several sources of a group
 * may be joined; a group joined without a source cannot also be joined with one (the
 * kernel's EINVAL). Errors: as above, plus SK_ERR_BAD_PARAM (source NULL, not numeric, or
 * of the other family); leaving a source not joined is SK_ERR_SYSTEM (EADDRNOTAVAIL, or
 * EINVAL when the group has no source joined). */
int sk_udp_socket_join_multicast_source(sk_udp_socket_t *sock, const char *group, const char *source,
                                        const char *interface, sk_error_t *error);
int sk_udp_socket_leave_multicast_source(sk_udp_socket_t *sock, const char *group, const char *source,
                                         const char *interface, sk_error_t *error);
/* Packet info (IP_PKTINFO / IPV6_RECVPKTINFO; off by default): each datagram comes with the
 * address it was sent to and the interface it arrived on, through
 * did_receive_with_packet_info (SK_EVENT_UDP_RECEIVE_PACKET_INFO records). Applies to the
 * descriptors there are and those made later; datagrams the kernel queued before it was
 * turned on come without it (did_receive). Errors: SK_ERR_SYSTEM, SK_ERR_INVALID_HANDLE.
 * The getter returns 1 or 0. */
int sk_udp_socket_set_receives_packet_info(sk_udp_socket_t *sock, int enabled, sk_error_t *error);
int sk_udp_socket_get_receives_packet_info(sk_udp_socket_t *sock);
/* UDP segmentation offload (UDP_SEGMENT; 0, the default: off): each datagram sent larger
 * than `size` bytes leaves as datagrams of `size` bytes (the last shorter), cut by the kernel
 * (or the network card) after one trip through the stack; one of `size` or less goes as it
 * is. The kernel's limits hold (at most 64 segments; `size` plus headers within the route's
 * MTU): sends beyond them fail alone through did_not_send (SK_ERR_SYSTEM, EINVAL or
 * EMSGSIZE). Applies to the descriptors there are and those made later. Errors:
 * SK_ERR_BAD_PARAM (above 65535), SK_ERR_SYSTEM ENOPROTOOPT on a kernel without it (before
 * Linux 4.18): no silent fallback, since the datagrams the peer sees would differ. */
int sk_udp_socket_set_send_segment_size(sk_udp_socket_t *sock, size_t size, sk_error_t *error);
int sk_udp_socket_get_send_segment_size(sk_udp_socket_t *sock, size_t *out_size);
/* UDP receive offload (UDP_GRO; off by default): the kernel may hand over several datagrams
 * of one sender in one buffer; SocketKit cuts them apart again, so did_receive sees the same
 * datagrams, in order, each held to the receive limit (in receive-once mode those of one
 * buffer come together). Errors: SK_ERR_SYSTEM ENOPROTOOPT on a kernel without it (before
 * Linux 5.0). The getter returns 1 or 0. */
int sk_udp_socket_set_receive_offload(sk_udp_socket_t *sock, int enabled, sk_error_t *error);
int sk_udp_socket_get_receive_offload(sk_udp_socket_t *sock);
/* The packet info of an SK_EVENT_UDP_RECEIVE_PACKET_INFO record (valid as long as the
 * record's other memory), NULL for any other record. */
const sk_udp_packet_info_t *sk_udp_event_packet_info(const sk_event_t *event);
/* The interface multicast leaves through, per family (IP_MULTICAST_IF / IPV6_MULTICAST_IF). */
int sk_udp_socket_send_ipv4_multicast_on_interface(sk_udp_socket_t *sock, const char *interface, sk_error_t *error);
int sk_udp_socket_send_ipv6_multicast_on_interface(sk_udp_socket_t *sock, const char *interface, sk_error_t *error);
/* Multicast TTL / hop limit (0...255) and loopback, both families, now and for
 * descriptors made later. */
int sk_udp_socket_set_multicast_ttl(sk_udp_socket_t *sock, int ttl, sk_error_t *error);
int sk_udp_socket_set_multicast_loopback(sk_udp_socket_t *sock, int enabled, sk_error_t *error);
/* SO_BROADCAST (IPv4); SO_REUSEPORT and SO_REUSEADDR (both off by default; before bind:
 * SK_ERR_BAD_CONFIG after). */
int sk_udp_socket_enable_broadcast(sk_udp_socket_t *sock, int enabled, sk_error_t *error);
int sk_udp_socket_enable_reuse_port(sk_udp_socket_t *sock, int enabled, sk_error_t *error);
int sk_udp_socket_enable_reuse_address(sk_udp_socket_t *sock, int enabled, sk_error_t *error);

/* Closes now (queued datagrams dropped without callbacks; did_close follows if the socket
 * had descriptors), or once every queued datagram has been sent. The socket can be bound,
 * connected or used to send again afterwards. sk_udp_socket_release after
 * sk_udp_socket_close_after_sending still sends the queued datagrams (see there). */
int sk_udp_socket_close(sk_udp_socket_t *sock);
int sk_udp_socket_close_after_sending(sk_udp_socket_t *sock);

/* Diagnostics. `family` is AF_UNSPEC (IPv4 if the socket has it, else IPv6), AF_INET or
 * AF_INET6 (anything else: SK_ERR_BAD_PARAM). Host, port and address getters work as
 * sk_socket_get_connected_host, _port and _address (snprintf and getsockname, see Getters
 * at the top), and fail with SK_ERR_BAD_CONFIG when there is no such address. */
int sk_udp_socket_get_local_host(sk_udp_socket_t *sock, int family, char *buffer, size_t capacity);
int sk_udp_socket_get_local_port(sk_udp_socket_t *sock, int family, uint16_t *out_port);
int sk_udp_socket_get_local_address(sk_udp_socket_t *sock, int family, struct sockaddr *address,
                                    socklen_t *address_length);
int sk_udp_socket_get_connected_host(sk_udp_socket_t *sock, char *buffer, size_t capacity);
int sk_udp_socket_get_connected_port(sk_udp_socket_t *sock, uint16_t *out_port);
int sk_udp_socket_get_connected_address(sk_udp_socket_t *sock, struct sockaddr *address, socklen_t *address_length);
/* 1/0 or SK_ERR_INVALID_HANDLE. is_closed: no descriptors. is_ipv4/is_ipv6: with
 * descriptors, whether that family has one; before, whether it is enabled. */
int sk_udp_socket_is_connected(sk_udp_socket_t *sock);
int sk_udp_socket_is_closed(sk_udp_socket_t *sock);
int sk_udp_socket_is_ipv4(sk_udp_socket_t *sock);
int sk_udp_socket_is_ipv6(sk_udp_socket_t *sock);
/* Runs `function` on the socket's loop with its descriptors (-1 where absent). */
int sk_udp_socket_perform(sk_udp_socket_t *sock,
                          void (*function)(const sk_socket_descriptors_t *descriptors, void *context), void *context);


/* ======================================================================================
 * Logging
 *
 * What the engine has to say that no return code or callback carries: a listener out of
 * descriptors that backs off, a TLS handshake that failed and OpenSSL's reason, a name that
 * did not resolve, events dropped for want of a delegate, every connection that ended with
 * an error. Off by default; off, it costs one relaxed atomic load at the places that could
 * log, none of them on the path of a read or a write.
 *
 * The callback runs on the thread where the engine met what it reports: an event loop
 * thread, a resolver thread, a callback queue's thread, or yours inside an sk_* call; on
 * several threads at once, possibly. No SocketKit lock is held while it runs (a delegate
 * callback of that thread may be running around it). Keep it short: a loop thread serving
 * many sockets waits for it. It must not call SocketKit functions other than
 * sk_log_set_callback, sk_version, sk_strerror and sk_error_name; what the engine would log
 * on the same thread while it runs is dropped, not passed to it again. `subsystem` ("accept",
 * "connection", "tls", "resolver", "callbacks") and `message` are NUL-terminated UTF-8,
 * valid for the call only. One callback per process (the Python binding's
 * socketkit.enable_logging and Swift's SocketKitLog set the same one).
 * ====================================================================================== */

typedef enum sk_log_level {
    SK_LOG_OFF = 0,
    SK_LOG_ERROR = 1,    /* SocketKit cannot do what it was asked: a thread it needs did not start */
    SK_LOG_WARNING = 2,  /* service degraded: a listener out of descriptors stops accepting */
    SK_LOG_INFO = 3,     /* a connection failed: a TLS handshake or verification (OpenSSL's
                          * reason), a name that did not resolve; a listener accepting again */
    SK_LOG_DEBUG = 4     /* every connection ended by an error, and why; events dropped for
                          * want of a delegate; each retry of a paused listener */
} sk_log_level_t;

/* `level` is an sk_log_level_t other than SK_LOG_OFF. */
typedef void (*sk_log_callback_t)(int level, const char *subsystem, const char *message, void *userdata);

/* Sends the records of `level` and more serious ones (SK_LOG_ERROR is the most serious) to
 * `callback` with `userdata`, replacing the callback set before; a NULL callback or
 * SK_LOG_OFF turns logging off. Once this returns, the previous callback is not running on
 * any other thread and is not called again, so its userdata may go (called from inside the
 * callback, it does not wait for that call itself).
 * Errors: SK_ERR_BAD_PARAM (a level outside SK_LOG_OFF..SK_LOG_DEBUG; nothing changes). */
int sk_log_set_callback(sk_log_callback_t callback, int level, void *userdata);

/* ======================================================================================
 * Utilities
 * ====================================================================================== */

/* An address and its length, as getaddrinfo(3) gives them (ai_addr, ai_addrlen). */
typedef struct sk_address {
    struct sockaddr_storage address;   /* a struct sockaddr_in or struct sockaddr_in6 */
    socklen_t length;                  /* sizeof(struct sockaddr_in) or sizeof(struct sockaddr_in6) */
} sk_address_t;

/* Resolves `host` synchronously (this blocks: do not call it on an event loop thread).
 * "localhost" and "loopback" give 127.0.0.1 and ::1 without asking the resolver; an IP
 * literal gives itself; a name under .invalid fails at once (RFC 6761: SK_ERR_RESOLUTION,
 * EAI_NONAME). Writes the first `capacity` addresses found, in resolver order, to
 * `addresses` and returns how many were found (at least 1), as snprintf does: more than
 * `capacity` means some were left out. `addresses` NULL asks for the count only.
 * Errors: SK_ERR_RESOLUTION (os_error: the EAI_* code), SK_ERR_BAD_PARAM (host NULL or
 * empty), SK_ERR_SYSTEM. */
int sk_lookup_host_addresses(const char *host, uint16_t port, sk_address_t *addresses, size_t capacity,
                             sk_error_t *error);

/* The older form of sk_lookup_host_addresses, kept for the programs that use it: the
 * addresses without their lengths (each is its family's struct; see Addresses under
 * CONVENTIONS: passing sizeof(struct sockaddr_storage) along is fine). Writes up to
 * `capacity` addresses and their count to `*out_count` (may be NULL), and returns SK_OK.
 * Errors: SK_ERR_RESOLUTION, SK_ERR_BAD_PARAM (also `addresses` NULL with `capacity` > 0). */
int sk_lookup_host(const char *host, uint16_t port, struct sockaddr_storage *addresses, size_t capacity,
                   size_t *out_count, sk_error_t *error);

/* The numeric host of an IPv4 or IPv6 address, as sk_socket_get_connected_host gives it
 * (snprintf: the whole length, what fits copied). SK_ERR_BAD_PARAM for anything else. */
int sk_address_get_host(const struct sockaddr *address, socklen_t address_length, char *buffer, size_t capacity);
/* The port of an IPv4 or IPv6 address into `*out_port` (may be NULL). SK_ERR_BAD_PARAM
 * for anything else. */
int sk_address_get_port(const struct sockaddr *address, socklen_t address_length, uint16_t *out_port);
/* 1 if the address is a complete IPv4 (sockaddr_in) / IPv6 (sockaddr_in6) address (see
 * Addresses under CONVENTIONS), else 0. */
int sk_address_is_ipv4(const struct sockaddr *address, socklen_t address_length);
int sk_address_is_ipv6(const struct sockaddr *address, socklen_t address_length);

#ifdef __cplusplus
}
#endif

#endif /* SOCKETKIT_H */
