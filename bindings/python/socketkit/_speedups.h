/* SPDX-License-Identifier: MIT */
/* What the C files of socketkit._speedups share: _speedups.c (the module, the state init()
 * hands over, the errors, HandleBase / SocketIO / UdpSocketIO) and _speedups_dispatch.c (the
 * GIL across callbacks, the delegate dispatch, the trampolines, drain() and run_once()).
 * Private to the extension: no other program includes it.
 *
 * Every name shared between the two files begins with speedups_ and is hidden: it stays
 * out of the extension's exported symbols (only PyInit__speedups is exported), and a call
 * or an access across the files is as direct as one within a file (no PLT or GOT
 * indirection, nothing interposable).
 */
#ifndef SOCKETKIT_SPEEDUPS_H
#define SOCKETKIT_SPEEDUPS_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "socketkit.h"

#define SPEEDUPS_INTERNAL __attribute__((visibility("hidden")))

/* The extension's thread-locals are initial-exec: one %fs-relative access each instead of a
 * call to __tls_get_addr. They are a few dozen bytes, well within the static TLS glibc keeps
 * for modules loaded by dlopen. */
#define SK_THREAD_LOCAL __thread __attribute__((tls_model("initial-exec")))

/* The instances of HandleBase (_speedups.c): Socket and UdpSocket, through _handles.Handle. */
typedef struct {
    PyObject_HEAD
    PyObject *c_handle; /* what Python stored: None, a c_void_p or an int */
    void *pointer;      /* its value */
    /* The `_delegate` and (Socket) `_pending_buffers` attributes, kept here rather than in
     * the instance dict: the dispatch reads them for every event, where the generic getattr
     * would cost two dict lookups. The delegate can refer back to its sockets, hence the GC
     * support. */
    PyObject *delegate;
    PyObject *pending_buffers;
} HandleBase;

/* ---- _speedups.c --------------------------------------------------------------------------- */

/* What init() hands over (see _speedups.c) that both files read. */
extern SPEEDUPS_INTERNAL __typeof__(&sk_socket_write) speedups_sk_write;
extern SPEEDUPS_INTERNAL __typeof__(&sk_callback_queue_poll_events) speedups_sk_poll_events;
extern SPEEDUPS_INTERNAL __typeof__(&sk_loop_group_run_once) speedups_sk_run_once;
extern SPEEDUPS_INTERNAL __typeof__(&sk_thread_set_wait_hook) speedups_sk_set_wait_hook;
extern SPEEDUPS_INTERNAL PyObject *speedups_live_sockets, *speedups_address_by_sockaddr,
    *speedups_dispatch_records, *speedups_record_address, *speedups_address_for_sockaddr,
    *speedups_udp_did_receive;
extern SPEEDUPS_INTERNAL PyObject *speedups_str_socket_did_read, *speedups_str_udp_socket_did_receive,
    *speedups_msg_did_read, *speedups_msg_did_receive, *speedups_empty_bytes;

extern SPEEDUPS_INTERNAL PyTypeObject speedups_SocketIO_type, speedups_UdpSocketIO_type;

/* Whether init() has run; raises when not. Inline, as it was within one file: write(),
 * drain() and run_once() check it at every call. */
static inline int speedups_configured(void) {
    if (speedups_sk_write == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "socketkit._speedups is not initialised");
        return 0;
    }
    return 1;
}

SPEEDUPS_INTERNAL PyObject *speedups_raise_status(int status, const sk_error_t *error);
SPEEDUPS_INTERNAL void speedups_report_delegate_error(PyObject *message, PyObject *target);

/* ---- _speedups_dispatch.c ------------------------------------------------------------------ */

extern SK_THREAD_LOCAL SPEEDUPS_INTERNAL int speedups_callback_depth;

/* Runs `call` without the GIL, unless inside a C delegate callback (see
 * speedups_callback_depth). */
#define SK_CALL(status, call)                                                                                \
    do {                                                                                                     \
        if (speedups_callback_depth > 0) {                                                                   \
            status = call;                                                                                   \
        } else {                                                                                             \
            Py_BEGIN_ALLOW_THREADS                                                                           \
            status = call;                                                                                   \
            Py_END_ALLOW_THREADS                                                                             \
        }                                                                                                    \
    } while (0)

SPEEDUPS_INTERNAL int speedups_python_gone(void);

/* The module's functions (_speedups.c's method table). */
SPEEDUPS_INTERNAL PyObject *speedups_trampolines(PyObject *module, PyObject *unused);
SPEEDUPS_INTERNAL PyObject *speedups_drain(PyObject *module, PyObject *const *args, Py_ssize_t nargs);
SPEEDUPS_INTERNAL PyObject *speedups_run_once(PyObject *module, PyObject *group);
SPEEDUPS_INTERNAL PyObject *speedups_shutdown(PyObject *module, PyObject *unused);

#endif
