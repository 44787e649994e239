/* socketkit._speedups: the binding's hot paths as a CPython extension.
 *
 * Optional: socketkit works without it (pure ctypes; SOCKETKIT_NO_SPEEDUPS=1 forces that),
 * and _native.py decides. It uses only CPython's public C API. What it does, and nothing
 * else:
 *
 *   - HandleBase: the base of Socket and UdpSocket (through _handles.Handle); its slots hold
 *     what the dispatch below reads for every event: the handle, the delegate, the buffers
 *     pinned for reads into them;
 *   - SocketIO / UdpSocketIO: Socket's read() and write(), UdpSocket's send_to_address(),
 *     calling SocketKit directly for their common arguments (anything else goes to the
 *     Python methods of _hotpaths, given to init());
 *   - drain(): one HostQueue batch, polled and dispatched here: read and datagram records
 *     become delegate calls without Python code between; every other record goes to
 *     _dispatch.dispatch_records for that one record, in order;
 *   - run_once(): sk_loop_group_run_once, keeping the GIL across the iteration's callbacks;
 *   - trampolines(): C functions for the did_read and UDP did_receive delegate members, in
 *     place of ctypes callbacks (for sockets on any queue: SocketKit's loop thread, a
 *     SerialQueue's thread), doing what _dispatch.on_read and on_udp_receive do.
 *
 * It does not link libsocketkit: _hotpaths passes the addresses of the functions of the
 * library ctypes loaded (init()), so both always use the same copy. Calls into SocketKit
 * release the GIL, as ctypes does (SocketKit may call back into Python from this thread,
 * or wait for a thread that runs a callback), except from inside the C callbacks
 * (callback_depth) and between the callbacks of one run_once() (in_run_once).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#include "socketkit.h"

/* ---- what init() hands over (set once) ------------------------------------------------- */

static __typeof__(&sk_socket_write) sk_write;
static __typeof__(&sk_socket_read) sk_read;
static __typeof__(&sk_socket_write_no_copy) sk_write_no_copy;
static __typeof__(&sk_udp_socket_send_to_address) sk_send_to_address;
static __typeof__(&sk_callback_queue_poll_events) sk_poll_events;
static __typeof__(&sk_loop_group_run_once) sk_run_once;
static __typeof__(&sk_thread_set_wait_hook) sk_set_wait_hook;

static Py_ssize_t no_copy_threshold;
static PyObject *live_sockets;         /* handle -> weakref(Socket or UdpSocket): _handles.live */
static PyObject *address_by_sockaddr;  /* raw sockaddr bytes -> (host, port) */
static PyObject *sockaddr_by_address;  /* (host, port) -> raw sockaddr bytes */
static PyObject *dispatch_records;     /* _dispatch.dispatch_records(raw, records, stop, start) */
static PyObject *record_address;       /* _addresses.record_address(host, port, address, length) */
static PyObject *address_for_sockaddr; /* _addresses.address_for_sockaddr(raw) */
static PyObject *udp_did_receive;      /* _dispatch.udp_did_receive_py(handle, data, length, address,
                                          length, context, userdata): a datagram with a filter context */
static PyObject *raise_c_error;        /* _status.raise_c_error(status, code, os_error, message) */
static PyObject *report_error;         /* _status.report_delegate_error(message, target, exception) */
static PyObject *python_read, *python_write, *python_send_to_address; /* _hotpaths' methods */

static PyObject *str_socket_did_read, *str_udp_socket_did_receive, *msg_did_read,
    *msg_did_receive, *empty_bytes;

static int configured(void) {
    if (sk_write == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "socketkit._speedups is not initialised");
        return 0;
    }
    return 1;
}

/* ---- the GIL ------------------------------------------------------------------------------ */

/* Thread-locals below are initial-exec: one %fs-relative access each instead of a call to
 * __tls_get_addr. They are a few dozen bytes, well within the static TLS glibc keeps for
 * modules loaded by dlopen. */
#define SK_THREAD_LOCAL __thread __attribute__((tls_model("initial-exec")))

/* How deep this thread is in one of the C delegate callbacks below. SocketKit's calls
 * made from inside a callback never wait for another thread's callback (DESIGN: no
 * callback-to-call deadlock; at most for a lock that its holder keeps for a few
 * instructions and without Python), so a read or write from the delegate method keeps the
 * GIL instead of handing it over and taking it back around a call that returns at once. */
static SK_THREAD_LOCAL int callback_depth;

/* The GIL across one sk_loop_group_run_once() (run_once() below): the host thread takes it
 * at the first C callback of the iteration and keeps it until the iteration ends, instead
 * of taking and dropping it around every event. Safe because SocketKit calls the wait hook
 * (sk_thread_set_wait_hook) before this thread would wait inside it for another thread (a
 * callback gate, a lock, a join): the hook drops the GIL (another thread's callback may
 * need it), and the next callback takes it again.
 *
 * The one thing that may stand between the engine and run_once() on this thread is a
 * PyGILState_Ensure caller: a ctypes callback (a delegate member without a C version) or
 * release_lent. Such a caller owns the GIL as it left it, and the GIL may be kept only
 * where none is running. Invariant: every entry into SocketKit from Python drops the GIL
 * first (ctypes calls, SK_CALL outside a C callback, send_to_address, drain, run_once),
 * except the calls made from inside a C callback, which keep it (callback_depth > 0).
 *
 * Thread-local, saved and restored by a nested run_once():
 *   in_run_once      this thread is inside run_once()'s call of sk_loop_group_run_once,
 *                    and may keep the GIL between its callbacks;
 *   run_once_saved   the thread state while run_once() does not hold the GIL (NULL: held);
 *   run_once_frame   the Python frame that called run_once(): identity only (it is alive
 *                    while run_once() runs, its code waiting for it). */
static SK_THREAD_LOCAL int in_run_once;
static SK_THREAD_LOCAL PyThreadState *run_once_saved;
static SK_THREAD_LOCAL PyFrameObject *run_once_frame;

/* Whether this thread holds the GIL. From 3.13, PyThreadState_GetUnchecked says it
 * exactly. Before, PyGILState_Check does as long as the interpreter has not disabled it
 * (it then answers yes to everything, which it does once a subinterpreter has been
 * created): run_once() checks that it answers no right after dropping the GIL, and keeps
 * the GIL between callbacks only when it does. */
static int holds_gil(void) {
#if PY_VERSION_HEX >= 0x030D0000
    return PyThreadState_GetUnchecked() != NULL;
#else
    return PyGILState_Check();
#endif
}

/* Whether the engine runs directly under run_once(): no PyGILState_Ensure caller between.
 * Such a caller runs Python code (a ctypes callback's function), whose frame stands above
 * the frame that called run_once() until it returns; with none running, that frame is the
 * thread's top one. (release_lent runs no Python code, and never enters the engine.) Call
 * with the GIL held. */
static int directly_under_run_once(void) {
    PyFrameObject *frame = PyThreadState_GetFrame(PyThreadState_Get());
    int direct = frame == run_once_frame;
    Py_XDECREF(frame);
    return direct;
}

static void release_run_once_gil(void *context);

static void arm_wait_hook(void) {
    sk_set_wait_hook(release_run_once_gil, NULL);
}

/* The wait hook: drops the GIL if run_once() keeps it between callbacks of the iteration.
 * Anything else (a callback running, whose SocketKit calls keep the GIL; a ctypes callback,
 * whose calls drop it themselves) leaves it as it is, and the hook is set again for the
 * iteration's next wait. */
static void release_run_once_gil(void *context) {
    (void)context;
    if (!in_run_once || run_once_saved != NULL) {
        return;
    }
    if (callback_depth == 0 && holds_gil() && directly_under_run_once()) {
        run_once_saved = PyEval_SaveThread();
    } else {
        arm_wait_hook();
    }
}

enum { GIL_KEEP = -1, GIL_LEND = -2 };

/* Takes the GIL for a C callback. On run_once()'s thread directly under the engine, to
 * keep after the callback (GIL_KEEP). On that thread inside a call made by a PyGILState
 * caller that dropped the GIL (a ctypes call from a ctypes callback): lent back to
 * run_once()'s saved state after the callback (GIL_LEND). Anywhere else, as any thread. */
static int callback_enter(void) {
    if (in_run_once) {
        if (run_once_saved != NULL) {
            PyEval_RestoreThread(run_once_saved);
            run_once_saved = NULL;
            return directly_under_run_once() ? GIL_KEEP : GIL_LEND;
        }
        if (holds_gil()) {
            return GIL_KEEP; /* kept since an earlier callback, or held by the one around this */
        }
    }
    return (int)PyGILState_Ensure();
}

static void callback_leave(int gil) {
    if (gil == GIL_KEEP) {
        arm_wait_hook(); /* the GIL stays taken: dropped when the iteration ends or waits */
    } else if (gil == GIL_LEND) {
        run_once_saved = PyEval_SaveThread();
    } else {
        PyGILState_Release((PyGILState_STATE)gil);
    }
}

/* Runs `call` without the GIL, unless inside a C delegate callback (see callback_depth). */
#define SK_CALL(status, call)                                                                                \
    do {                                                                                                     \
        if (callback_depth > 0) {                                                                            \
            status = call;                                                                                   \
        } else {                                                                                             \
            Py_BEGIN_ALLOW_THREADS                                                                           \
            status = call;                                                                                   \
            Py_END_ALLOW_THREADS                                                                             \
        }                                                                                                    \
    } while (0)

/* Set by shutdown() (_dispatch's atexit hook) and read by SocketKit's threads without the
 * GIL: from then on the C callbacks leave Python alone (a thread that takes the GIL while
 * the interpreter finalizes is stopped in the middle of SocketKit's code, or hangs). */
static int stopping;

/* Whether Python is out of reach for a callback. The atexit hook sets `stopping` before
 * the interpreter starts finalizing; the interpreter's own flag covers the rest. Before
 * 3.13, where Py_IsFinalizing became public, Py_IsInitialized() is the public form of it:
 * Py_FinalizeEx clears it at the very point where it marks the runtime as finalizing. */
static int python_gone(void) {
    if (__atomic_load_n(&stopping, __ATOMIC_ACQUIRE)) {
        return 1;
    }
#if PY_VERSION_HEX >= 0x030D0000
    return Py_IsFinalizing();
#else
    return !Py_IsInitialized();
#endif
}

/* True while _dispatch has not begun shutting down (call with the GIL; the callbacks and
 * the drain check it per event and per batch). The atexit hook calls shutdown() before it
 * sets _dispatch.shutting_down, so this flag covers that one. Re-read under the GIL, as the
 * hook may have run while this thread waited. */
static int running(void) {
    return !__atomic_load_n(&stopping, __ATOMIC_ACQUIRE);
}

/* ---- errors -------------------------------------------------------------------------------- */

/* Raises the error of a failed call (through _status, so its exception types and messages
 * are the ones the ctypes path gives). Returns NULL. */
static PyObject *raise_status(int status, const sk_error_t *error) {
    PyObject *result = PyObject_CallFunction(raise_c_error, "iiiy", status, error->code, error->os_error,
                                             error->code == status ? error->message : "");
    Py_XDECREF(result);
    if (!PyErr_Occurred()) {
        PyErr_Format(PyExc_RuntimeError, "socketkit: status %d raised nothing", status);
    }
    return NULL;
}

/* None after a call that succeeded, the exception of one that failed. */
static PyObject *none_or_raise(int status, const sk_error_t *error) {
    if (status < 0) {
        return raise_status(status, error);
    }
    Py_RETURN_NONE;
}

/* The exception being raised goes to sys.unraisablehook with `message` and `target`, as
 * _status.report_unraisable does for the ctypes path. */
static void report_delegate_error(PyObject *message, PyObject *target) {
    PyObject *type, *value, *traceback;
    PyErr_Fetch(&type, &value, &traceback);
    PyErr_NormalizeException(&type, &value, &traceback);
    if (value != NULL && traceback != NULL) {
        PyException_SetTraceback(value, traceback);
    }
    PyObject *result = PyObject_CallFunctionObjArgs(report_error, message, target ? target : Py_None,
                                                    value ? value : Py_None, NULL);
    if (result == NULL) {
        PyErr_WriteUnraisable(report_error);
    }
    Py_XDECREF(result);
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(traceback);
}

/* Calls `python_method(self, *args)`: the Python version, for everything the fast paths
 * leave alone. */
static PyObject *call_python(PyObject *python_method, PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                             PyObject *kwnames) {
    PyObject *stack[8];
    Py_ssize_t total = nargs + (kwnames ? PyTuple_GET_SIZE(kwnames) : 0);
    if (total + 1 > (Py_ssize_t)(sizeof stack / sizeof stack[0])) {
        PyErr_SetString(PyExc_TypeError, "too many arguments");
        return NULL;
    }
    stack[0] = self;
    for (Py_ssize_t index = 0; index < total; index++) {
        stack[index + 1] = args[index];
    }
    return PyObject_Vectorcall(python_method, stack, (size_t)(nargs + 1), kwnames);
}

/* ---- HandleBase, SocketIO, UdpSocketIO ----------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    PyObject *c_handle; /* what Python stored: None, a c_void_p or an int */
    void *pointer;      /* its value */
    /* The `_delegate` and (Socket) `_pending_buffers` attributes, kept here rather than in
     * the instance dict: the dispatch below reads them for every event, where the generic
     * getattr would cost two dict lookups. The delegate can refer back to its sockets,
     * hence the GC support. */
    PyObject *delegate;
    PyObject *pending_buffers;
} HandleBase;

static int HandleBase_traverse(HandleBase *self, visitproc visit, void *arg) {
    Py_VISIT(self->c_handle);
    Py_VISIT(self->delegate);
    Py_VISIT(self->pending_buffers);
    return 0;
}

static int HandleBase_clear(HandleBase *self) {
    Py_CLEAR(self->delegate);
    Py_CLEAR(self->pending_buffers);
    return 0;
}

static void HandleBase_dealloc(HandleBase *self) {
    PyObject_GC_UnTrack(self);
    Py_CLEAR(self->c_handle);
    HandleBase_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMemberDef HandleBase_members[] = {
    {"_delegate", T_OBJECT, offsetof(HandleBase, delegate), 0, "The delegate (None: no callbacks)."},
    {"_pending_buffers", T_OBJECT, offsetof(HandleBase, pending_buffers), 0,
     "Socket: the program's buffers pinned for reads into them (an empty tuple: none)."},
    {NULL, 0, 0, 0, NULL},
};

static PyObject *HandleBase_get_c_handle(HandleBase *self, void *closure) {
    (void)closure;
    PyObject *value = self->c_handle ? self->c_handle : Py_None;
    Py_INCREF(value);
    return value;
}

static int HandleBase_set_c_handle(HandleBase *self, PyObject *value, void *closure) {
    (void)closure;
    void *pointer = NULL;
    if (value == NULL) {
        PyErr_SetString(PyExc_AttributeError, "_c_handle cannot be deleted (set it to None)");
        return -1;
    }
    if (value != Py_None) {
        PyObject *number = value;
        if (!PyLong_Check(value)) {
            number = PyObject_GetAttrString(value, "value"); /* ctypes.c_void_p */
            if (number == NULL) {
                return -1;
            }
        } else {
            Py_INCREF(number);
        }
        if (number != Py_None) {
            pointer = PyLong_AsVoidPtr(number);
        }
        Py_DECREF(number);
        if (pointer == NULL && PyErr_Occurred()) {
            return -1;
        }
    }
    PyObject *previous = self->c_handle;
    Py_XINCREF(value);
    self->c_handle = value;
    self->pointer = pointer;
    Py_XDECREF(previous);
    return 0;
}

static PyGetSetDef HandleBase_getset[] = {
    {"_c_handle", (getter)HandleBase_get_c_handle, (setter)HandleBase_set_c_handle,
     "The SocketKit handle the fast paths use (None once closed).", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject HandleBase_type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "socketkit._speedups.HandleBase",
    .tp_basicsize = sizeof(HandleBase),
    .tp_dealloc = (destructor)HandleBase_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_traverse = (traverseproc)HandleBase_traverse,
    .tp_clear = (inquiry)HandleBase_clear,
    .tp_free = PyObject_GC_Del,
    .tp_doc = "The slots of Socket and UdpSocket that the C dispatch reads for every event.",
    .tp_members = HandleBase_members,
    .tp_getset = HandleBase_getset,
    .tp_new = PyType_GenericNew,
};

/* The release function of a lent bytes object: drops the reference write() took. SocketKit
 * calls it on a loop thread whenever the bytes are done with, which may be while the
 * interpreter finalizes, or after (a write completing, or dropped, as the process exits):
 * it is C code of this module, which is never unloaded, and from the atexit hook on it
 * leaves Python alone. (The ctypes path copies instead: a ctypes callback would be freed by
 * then.) */
static void release_lent(void *data, void *context) {
    (void)data;
    if (python_gone()) {
        return; /* the bytes object is left to the process's end */
    }
    PyGILState_STATE gil = PyGILState_Ensure();
    Py_DECREF((PyObject *)context);
    PyGILState_Release(gil);
}

static PyObject *SocketIO_write(HandleBase *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    if (!configured()) {
        return NULL;
    }
    if (nargs == 1 && kwnames == NULL && self->pointer != NULL && PyBytes_CheckExact(args[0])) {
        PyObject *data = args[0];
        Py_ssize_t length = PyBytes_GET_SIZE(data);
        sk_error_t error;
        int status;
        error.code = 0; /* SocketKit fills the rest when the call fails */
        void *handle = self->pointer;
        if (length >= no_copy_threshold) {
            /* Large bytes (immutable) are lent, not copied: SocketKit holds a reference
             * until its release function runs (refused: it never will). */
            Py_INCREF(data);
            SK_CALL(status,
                    sk_write_no_copy(handle, PyBytes_AS_STRING(data), (size_t)length, release_lent, data, -1.0, 0, &error));
            if (status < 0) {
                Py_DECREF(data);
            }
        } else {
            SK_CALL(status, sk_write(handle, PyBytes_AS_STRING(data), (size_t)length, -1.0, 0, &error));
        }
        return none_or_raise(status, &error);
    }
    return call_python(python_write, (PyObject *)self, args, nargs, kwnames);
}

static PyObject *SocketIO_read(HandleBase *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    if (!configured()) {
        return NULL;
    }
    if (nargs == 0 && kwnames == NULL && self->pointer != NULL) {
        sk_error_t error;
        int status;
        error.code = 0; /* SocketKit fills the rest when the call fails */
        void *handle = self->pointer;
        SK_CALL(status, sk_read(handle, 0, -1.0, 0, &error));
        return none_or_raise(status, &error);
    }
    return call_python(python_read, (PyObject *)self, args, nargs, kwnames);
}

static PyMethodDef SocketIO_methods[] = {
    {"write", (PyCFunction)(void (*)(void))SocketIO_write, METH_FASTCALL | METH_KEYWORDS,
     "write($self, data, timeout=-1, tag=0)\n--\n\n"
     "Queues `data` (any bytes-like object); ``socket_did_write(sock, tag)`` follows once\n"
     "the kernel accepted it all. SocketKit copies it before this returns, except a\n"
     "``bytes`` object of 16 KiB or more written with the default timeout and tag, which is\n"
     "lent instead: immutable, it is kept alive until SocketKit is done with it.\n"
     "Raises WriteQueueFullError (nothing queued) when the write would take the queue\n"
     "above maximum_queued_write_bytes."},
    {"read", (PyCFunction)(void (*)(void))SocketIO_read, METH_FASTCALL | METH_KEYWORDS,
     "read($self, max_length=0, timeout=-1, tag=0)\n--\n\n"
     "Reads whatever is available (at least one byte, at most `max_length` if not 0).\n"
     "``socket_did_read(sock, data, tag)`` receives ``bytes``."},
    {NULL, NULL, 0, NULL},
};

static PyObject *UdpSocketIO_send_to_address(HandleBase *self, PyObject *const *args, Py_ssize_t nargs,
                                             PyObject *kwnames) {
    if (!configured()) {
        return NULL;
    }
    if (nargs == 2 && kwnames == NULL && self->pointer != NULL && PyBytes_CheckExact(args[0]) &&
        PyTuple_CheckExact(args[1])) {
        PyObject *raw = PyDict_GetItemWithError(sockaddr_by_address, args[1]); /* borrowed */
        if (raw == NULL && PyErr_Occurred()) {
            PyErr_Clear(); /* unhashable: the Python version says why */
        } else if (raw != NULL && PyBytes_CheckExact(raw)) {
            PyObject *data = args[0];
            Py_ssize_t length = PyBytes_GET_SIZE(data);
            sk_error_t error;
            int status;
            error.code = 0; /* SocketKit fills the rest when the call fails */
            void *handle = self->pointer;
            Py_INCREF(raw); /* the cache may be cleared by another thread meanwhile */
            /* Always without the GIL, even inside a callback: a UDP call from another thread
             * may wait for a driven group's host thread (socketkit.h). */
            Py_BEGIN_ALLOW_THREADS
            status = sk_send_to_address(handle, length ? PyBytes_AS_STRING(data) : NULL, (size_t)length,
                                        (const struct sockaddr *)PyBytes_AS_STRING(raw),
                                        (socklen_t)PyBytes_GET_SIZE(raw), -1.0, 0, &error);
            Py_END_ALLOW_THREADS
            Py_DECREF(raw);
            return none_or_raise(status, &error);
        }
    }
    return call_python(python_send_to_address, (PyObject *)self, args, nargs, kwnames);
}

static PyMethodDef UdpSocketIO_methods[] = {
    {"send_to_address", (PyCFunction)(void (*)(void))UdpSocketIO_send_to_address, METH_FASTCALL | METH_KEYWORDS,
     "send_to_address($self, data, address, timeout=-1, tag=0)\n--\n\n"
     "Queues a datagram to (\"ip\", port)."},
    {NULL, NULL, 0, NULL},
};

/* SocketIO and UdpSocketIO add methods only: their instances are HandleBases, whose
 * deallocation and garbage-collector support they inherit. */
static PyTypeObject SocketIO_type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "socketkit._speedups.SocketIO",
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "Socket's read and write, in C for their common arguments.",
    .tp_methods = SocketIO_methods,
    .tp_base = &HandleBase_type,
    .tp_new = PyType_GenericNew,
};

static PyTypeObject UdpSocketIO_type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "socketkit._speedups.UdpSocketIO",
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "UdpSocket's send_to_address, in C for its common arguments.",
    .tp_methods = UdpSocketIO_methods,
    .tp_base = &HandleBase_type,
    .tp_new = PyType_GenericNew,
};

/* ---- dispatch ------------------------------------------------------------------------------ */

/* A direct-mapped cache in front of the table of live sockets: the dict lookup costs a
 * PyLong for the key, a hash probe and an int comparison per event. An entry holds the
 * table's weak reference (a strong reference to the weakref object, not to the socket).
 * It is only trusted while its object still carries the handle (`pointer`): _handles sets
 * _c_handle when it adds a handle to the table and clears it before removing the handle,
 * and SocketKit never reuses a handle value, so a hit says what the table says; a miss asks
 * the table. Only touched with the GIL held. */
#define HANDLE_CACHE_SIZE 1024
typedef struct {
    const void *handle;
    PyObject *ref;
} HandleCacheEntry;
static HandleCacheEntry handle_cache[HANDLE_CACHE_SIZE];

static HandleCacheEntry *cache_entry(const void *handle) {
    /* A handle is (generation << 24 | slot + 1) << 4: the slot is in the low bits. */
    return &handle_cache[((uintptr_t)handle >> 4) & (HANDLE_CACHE_SIZE - 1)];
}

/* The object a weakref refers to (a new reference), or NULL when it is gone. -1 on error. */
static int weakref_target(PyObject *ref, PyObject **found) {
    *found = NULL;
#if PY_VERSION_HEX >= 0x030D0000
    return PyWeakref_GetRef(ref, found) < 0 ? -1 : 0;
#else
    PyObject *object = PyWeakref_GetObject(ref); /* borrowed */
    if (object == NULL) {
        return -1;
    }
    if (object != Py_None) {
        Py_INCREF(object);
        *found = object;
    }
    return 0;
#endif
}

/* The live socket of `handle` (a new reference), which SocketKit says is of type `kind`, or
 * NULL (no exception) when there is none. -1 on error, a TypeError for an object of another
 * type (a bug in the binding). */
static int lookup(const void *handle, PyTypeObject *kind, PyObject **found) {
    *found = NULL;
    HandleCacheEntry *entry = cache_entry(handle);
    if (entry->handle == handle && entry->ref != NULL) {
        PyObject *object;
        if (weakref_target(entry->ref, &object) < 0) {
            return -1;
        }
        if (object != NULL) {
            if (PyObject_TypeCheck(object, kind) && ((HandleBase *)object)->pointer == handle) {
                *found = object;
                return 0;
            }
            Py_DECREF(object);
        }
    }
    PyObject *key = PyLong_FromVoidPtr((void *)handle);
    if (key == NULL) {
        return -1;
    }
    PyObject *ref = PyDict_GetItemWithError(live_sockets, key); /* borrowed */
    Py_DECREF(key);
    if (ref == NULL) {
        if (entry->handle == handle) {
            entry->handle = NULL;
            Py_CLEAR(entry->ref);
        }
        return PyErr_Occurred() ? -1 : 0;
    }
    if (!PyWeakref_Check(ref)) {
        return 0;
    }
    if (weakref_target(ref, found) < 0) {
        return -1;
    }
    if (*found != NULL && !PyObject_TypeCheck(*found, kind)) {
        PyErr_Format(PyExc_TypeError, "socketkit: a %.100s where SocketKit reports a %.100s",
                     Py_TYPE(*found)->tp_name, kind->tp_name);
        Py_CLEAR(*found);
        return -1;
    }
    if (*found != NULL) {
        Py_INCREF(ref);
        PyObject *previous = entry->ref;
        entry->handle = handle;
        entry->ref = ref;
        Py_XDECREF(previous);
    }
    return 0;
}

/* After a failed call of the delegate method `name`: whether the failure only says that the
 * delegate has no such method (or has None), which skips the event as the ctypes path
 * does, rather than an exception the method raised. */
static int method_missing(PyObject *delegate, PyObject *name) {
    if (!PyErr_ExceptionMatches(PyExc_AttributeError) && !PyErr_ExceptionMatches(PyExc_TypeError)) {
        return 0;
    }
    PyObject *type, *value, *traceback;
    PyErr_Fetch(&type, &value, &traceback);
    PyObject *method = PyObject_GetAttr(delegate, name);
    int missing = method == Py_None || (method == NULL && PyErr_ExceptionMatches(PyExc_AttributeError));
    Py_XDECREF(method);
    PyErr_Clear();
    if (missing) {
        Py_XDECREF(type);
        Py_XDECREF(value);
        Py_XDECREF(traceback);
    } else {
        PyErr_Restore(type, value, traceback);
    }
    return missing;
}

/* Calls the delegate method `name` of `sock` with args[2...count] (args[0] and args[1] are
 * filled here: the delegate and the socket). PyObject_VectorcallMethod calls a method
 * defined in the delegate's class without making a bound method first. A delegate without
 * the method (or with None) is skipped; what the method raises goes to
 * sys.unraisablehook with `message`. */
static void call_delegate(PyObject *sock, PyObject *name, PyObject *message, PyObject **args, size_t count) {
    PyObject *delegate = ((HandleBase *)sock)->delegate;
    if (delegate == NULL || delegate == Py_None) {
        return;
    }
    Py_INCREF(delegate);
    args[0] = delegate;
    args[1] = sock;
    PyObject *result = PyObject_VectorcallMethod(name, args, count, NULL);
    if (result == NULL && !method_missing(delegate, name)) {
        report_delegate_error(message, delegate);
    }
    Py_XDECREF(result);
    Py_DECREF(delegate);
}

/* _dispatch.on_read: one read's bytes to its socket's delegate. */
static int deliver_read(const void *handle, const void *data, size_t length, long tag_value) {
    PyObject *sock;
    if (lookup(handle, &SocketIO_type, &sock) < 0) {
        return -1;
    }
    if (sock == NULL) {
        return 0;
    }
    PyObject *payload = NULL, *tag = NULL;
    int outcome = -1;
    /* `()` when no read into a caller's buffer is pending (the usual case, no call). */
    PyObject *pending = ((HandleBase *)sock)->pending_buffers;
    int pinned = pending == NULL || (PyTuple_CheckExact(pending) && PyTuple_GET_SIZE(pending) == 0)
                     ? 0
                     : PyObject_IsTrue(pending);
    if (pinned < 0) {
        goto done;
    }
    if (pinned) {
        payload = PyObject_CallMethod(sock, "_take_read_result", "KK", (unsigned long long)(uintptr_t)data,
                                      (unsigned long long)length);
    } else if (length == 0) {
        payload = empty_bytes;
        Py_INCREF(payload);
    } else {
        payload = PyBytes_FromStringAndSize(data, (Py_ssize_t)length);
    }
    if (payload == NULL || (tag = PyLong_FromLong(tag_value)) == NULL) {
        goto done;
    }
    PyObject *call[4] = {NULL, NULL, payload, tag};
    call_delegate(sock, str_socket_did_read, msg_did_read, call, 4);
    outcome = 0;
done:
    Py_XDECREF(tag);
    Py_XDECREF(payload);
    Py_DECREF(sock);
    return outcome;
}

/* _dispatch.on_udp_receive, for a datagram without a filter context. `event` (a record)
 * gives the peer's text form for an address the cache does not know; without it (a
 * callback) _addresses decodes the sockaddr. */
static int deliver_udp_receive(const void *handle, const void *bytes, size_t length, const struct sockaddr *peer,
                               socklen_t peer_length, const sk_event_t *event) {
    if (handle == NULL) {
        return 0;
    }
    PyObject *sock;
    if (lookup(handle, &UdpSocketIO_type, &sock) < 0) {
        return -1;
    }
    if (sock == NULL) {
        return 0;
    }
    PyObject *data = NULL, *address = NULL, *key = NULL;
    int outcome = -1;
    if (length == 0) {
        data = empty_bytes;
        Py_INCREF(data);
    } else {
        data = PyBytes_FromStringAndSize(bytes, (Py_ssize_t)length);
    }
    if (data == NULL) {
        goto done;
    }
    if (peer != NULL && peer_length > 0) {
        key = PyBytes_FromStringAndSize((const char *)peer, (Py_ssize_t)peer_length);
        if (key == NULL) {
            goto done;
        }
        address = PyDict_GetItemWithError(address_by_sockaddr, key);
        if (address == NULL && PyErr_Occurred()) {
            goto done;
        }
        Py_XINCREF(address);
    }
    if (address == NULL && event != NULL) {
        address = PyObject_CallFunction(record_address, "KiKI", (unsigned long long)(uintptr_t)event->host,
                                        (int)event->port, (unsigned long long)(uintptr_t)event->address,
                                        (unsigned int)event->address_length);
    } else if (address == NULL) {
        address = PyObject_CallFunctionObjArgs(address_for_sockaddr, key ? key : Py_None, NULL);
    }
    if (address == NULL) {
        goto done;
    }
    PyObject *call[5] = {NULL, NULL, data, address, Py_None};
    call_delegate(sock, str_udp_socket_did_receive, msg_did_receive, call, 5);
    outcome = 0;
done:
    Py_XDECREF(key);
    Py_XDECREF(address);
    Py_XDECREF(data);
    Py_DECREF(sock);
    return outcome;
}

/* Around the work of a C delegate member: the GIL taken (callback_enter), then given back;
 * a failure of the binding's own (not a delegate's) reported. */
static int begin_callback(void) {
    int gil = callback_enter();
    callback_depth++;
    return gil;
}

static void end_callback(int gil, int status) {
    if (status < 0) {
        report_delegate_error(NULL, Py_None);
    }
    callback_depth--;
    callback_leave(gil);
}

/* The sk_delegate_t did_read member: replaces _dispatch's ctypes trampoline, for every
 * queue (SocketKit threads, the loop thread, SerialQueue). */
static void trampoline_did_read(sk_socket_t *sock, const void *data, size_t length, long tag, void *userdata) {
    (void)userdata;
    if (python_gone()) {
        return;
    }
    int gil = begin_callback();
    end_callback(gil, running() ? deliver_read(sock, data, length, tag) : 0);
}

/* The sk_udp_delegate_t did_receive member: replaces _dispatch's ctypes trampoline. */
static void trampoline_udp_did_receive(sk_udp_socket_t *sock, const void *data, size_t length,
                                       const struct sockaddr *address, socklen_t address_length, void *context,
                                       void *userdata) {
    if (python_gone()) {
        return;
    }
    int gil = begin_callback();
    int status = 0;
    if (context != NULL) {
        /* The receive filter's context: _dispatch hands it back (and frees it). */
        PyObject *result = PyObject_CallFunction(udp_did_receive, "KKKKIKK", (unsigned long long)(uintptr_t)sock,
                                                 (unsigned long long)(uintptr_t)data, (unsigned long long)length,
                                                 (unsigned long long)(uintptr_t)address, (unsigned int)address_length,
                                                 (unsigned long long)(uintptr_t)context,
                                                 (unsigned long long)(uintptr_t)userdata);
        status = result == NULL ? -1 : 0;
        Py_XDECREF(result);
    } else if (running()) {
        status = deliver_udp_receive(sock, data, length, address, address_length, NULL);
    }
    end_callback(gil, status);
}

static PyObject *speedups_trampolines(PyObject *module, PyObject *unused) {
    (void)module;
    (void)unused;
    return Py_BuildValue("{sKsK}", "did_read", (unsigned long long)(uintptr_t)&trampoline_did_read,
                         "udp_did_receive", (unsigned long long)(uintptr_t)&trampoline_udp_did_receive);
}

/* drain(queue, records, capacity, raw, records_object) -> count
 * Polls one batch of at most `capacity` records into the sk_event_t array at address
 * `records` and dispatches them; `raw` and `records_object` are what
 * _dispatch.dispatch_records takes for the records handled in Python. */
static PyObject *speedups_drain(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "drain(queue, records, capacity, raw, records_object)");
        return NULL;
    }
    if (!configured()) {
        return NULL;
    }
    void *queue = PyLong_AsVoidPtr(args[0]);
    sk_event_t *records = PyLong_AsVoidPtr(args[1]);
    int capacity = PyLong_AsLong(args[2]) > INT_MAX ? INT_MAX : (int)PyLong_AsLong(args[2]);
    if (PyErr_Occurred()) {
        return NULL;
    }
    int count;
    Py_BEGIN_ALLOW_THREADS
    count = sk_poll_events(queue, records, capacity);
    Py_END_ALLOW_THREADS
    if (count < 0) {
        sk_error_t error = {.code = 0};
        return raise_status(count, &error);
    }
    int stopping_now = !running();
    for (int index = 0; index < count; index++) {
        const sk_event_t *event = &records[index];
        int status = 0;
        if (event->kind == SK_EVENT_READ) {
            if (!stopping_now) {
                status = deliver_read(event->sock, event->data, event->length, event->tag);
            }
        } else if (event->kind == SK_EVENT_UDP_RECEIVE && event->context == NULL) {
            if (!stopping_now) {
                status = deliver_udp_receive(event->udp_sock, event->data, event->length, event->address,
                                             event->address_length, event);
            }
        } else {
            PyObject *result = PyObject_CallFunction(dispatch_records, "OOii", args[3], args[4], index + 1, index);
            status = result == NULL ? -1 : 0;
            Py_XDECREF(result);
        }
        if (status < 0) {
            /* The binding's own failure (not a delegate's): reported, the batch goes on. */
            report_delegate_error(NULL, Py_None);
        }
    }
    return PyLong_FromLong(count);
}

/* run_once(group) -> bool: sk_loop_group_run_once. */
static PyObject *speedups_run_once(PyObject *module, PyObject *group) {
    (void)module;
    if (!configured()) {
        return NULL;
    }
    void *handle = PyLong_AsVoidPtr(group);
    if (handle == NULL && PyErr_Occurred()) {
        return NULL;
    }
    sk_error_t error;
    int status;
    error.code = 0; /* SocketKit fills the rest when the call fails */
    /* Without the GIL until the first C callback, which keeps it for the rest of the
     * iteration (see in_run_once). Nested (a callback running another driven group's
     * iteration; its own is refused), the outer iteration's state is kept aside and the
     * inner one's callbacks count from zero, so its hook may drop the GIL between them. */
    int outer_in_run_once = in_run_once, outer_depth = callback_depth;
    PyThreadState *outer_saved = run_once_saved;
    PyFrameObject *outer_frame = run_once_frame;
    PyFrameObject *caller = PyThreadState_GetFrame(PyThreadState_Get());
    run_once_frame = caller;
    Py_XDECREF(caller); /* identity only: the caller's frame outlives this call */
    callback_depth = 0;
    run_once_saved = PyEval_SaveThread();
    /* The GIL is dropped: a PyGILState_Check that says otherwise answers yes to everything
     * (see holds_gil), and the callbacks then take and drop it as any thread's do. */
    in_run_once = !holds_gil();
    status = sk_run_once(handle, &error);
    if (run_once_saved != NULL) {
        PyEval_RestoreThread(run_once_saved);
    }
    in_run_once = outer_in_run_once;
    callback_depth = outer_depth;
    run_once_saved = outer_saved;
    run_once_frame = outer_frame;
    if (in_run_once) {
        arm_wait_hook(); /* the outer iteration keeps the GIL after this callback */
    } else {
        sk_set_wait_hook(NULL, NULL);
    }
    return status < 0 ? raise_status(status, &error) : PyBool_FromLong(status == 1);
}

/* init(functions, no_copy_threshold, live_sockets, address_by_sockaddr,
 *      sockaddr_by_address, dispatch_records, record_address, address_for_sockaddr,
 *      udp_did_receive, raise_c_error, report_delegate_error, read, write, send_to_address)
 * `functions` maps the library's function names to their addresses. */
static PyObject *speedups_init(PyObject *module, PyObject *args, PyObject *kwargs) {
    (void)module;
    static char *keywords[] = {"functions", "no_copy_threshold", "live_sockets", "address_by_sockaddr",
                               "sockaddr_by_address", "dispatch_records", "record_address", "address_for_sockaddr",
                               "udp_did_receive", "raise_c_error", "report_delegate_error", "read", "write",
                               "send_to_address", NULL};
    PyObject *functions;
    Py_ssize_t threshold;
    PyObject *objects[12];
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O!nO!O!O!OOOOOOOOO:init", keywords, &PyDict_Type, &functions,
                                     &threshold, &PyDict_Type, &objects[0], &PyDict_Type, &objects[1], &PyDict_Type,
                                     &objects[2], &objects[3], &objects[4], &objects[5], &objects[6], &objects[7],
                                     &objects[8], &objects[9], &objects[10], &objects[11])) {
        return NULL;
    }
    for (int index = 3; index < 12; index++) {
        if (!PyCallable_Check(objects[index])) {
            return PyErr_Format(PyExc_TypeError, "init: %s must be callable", keywords[index + 2]);
        }
    }
    static const char *names[] = {"sk_socket_write", "sk_socket_read", "sk_udp_socket_send_to_address",
                                  "sk_callback_queue_poll_events", "sk_loop_group_run_once",
                                  "sk_socket_write_no_copy", "sk_thread_set_wait_hook"};
    void *addresses[7];
    for (int index = 0; index < 7; index++) {
        PyObject *value = PyDict_GetItemString(functions, names[index]); /* borrowed */
        addresses[index] = value ? PyLong_AsVoidPtr(value) : NULL;
        if (addresses[index] == NULL) {
            if (!PyErr_Occurred()) {
                PyErr_Format(PyExc_ValueError, "init: no address for %s", names[index]);
            }
            return NULL;
        }
    }
    PyObject **slots[] = {&live_sockets, &address_by_sockaddr, &sockaddr_by_address, &dispatch_records,
                          &record_address, &address_for_sockaddr, &udp_did_receive, &raise_c_error, &report_error,
                          &python_read, &python_write, &python_send_to_address};
    for (int index = 0; index < 12; index++) {
        Py_INCREF(objects[index]);
        Py_XSETREF(*slots[index], objects[index]);
    }
    no_copy_threshold = threshold;
    sk_write = (__typeof__(sk_write))addresses[0];
    sk_read = (__typeof__(sk_read))addresses[1];
    sk_send_to_address = (__typeof__(sk_send_to_address))addresses[2];
    sk_poll_events = (__typeof__(sk_poll_events))addresses[3];
    sk_run_once = (__typeof__(sk_run_once))addresses[4];
    sk_write_no_copy = (__typeof__(sk_write_no_copy))addresses[5];
    sk_set_wait_hook = (__typeof__(sk_set_wait_hook))addresses[6];
    Py_RETURN_NONE;
}

static PyObject *speedups_shutdown(PyObject *module, PyObject *unused) {
    (void)module;
    (void)unused;
    __atomic_store_n(&stopping, 1, __ATOMIC_RELEASE);
    Py_RETURN_NONE;
}

static PyObject *speedups_event_layout(PyObject *module, PyObject *unused) {
    (void)module;
    (void)unused;
    /* Every field the extension reads, and the header's version: _native compares them
     * with ctypes' view and the loaded library's. */
    return Py_BuildValue("{sns{snsnsnsnsnsnsnsnsnsnsnsn}sI}", "sizeof", (Py_ssize_t)sizeof(sk_event_t),
                         "offsets", "sock", (Py_ssize_t)offsetof(sk_event_t, sock),
                         "kind", (Py_ssize_t)offsetof(sk_event_t, kind), "port", (Py_ssize_t)offsetof(sk_event_t, port),
                         "tag", (Py_ssize_t)offsetof(sk_event_t, tag), "data", (Py_ssize_t)offsetof(sk_event_t, data),
                         "length", (Py_ssize_t)offsetof(sk_event_t, length),
                         "host", (Py_ssize_t)offsetof(sk_event_t, host),
                         "udp_sock", (Py_ssize_t)offsetof(sk_event_t, udp_sock),
                         "address", (Py_ssize_t)offsetof(sk_event_t, address),
                         "address_length", (Py_ssize_t)offsetof(sk_event_t, address_length),
                         "context", (Py_ssize_t)offsetof(sk_event_t, context),
                         "trust", (Py_ssize_t)offsetof(sk_event_t, trust),
                         "version", (unsigned int)SK_VERSION_NUMBER);
}

static PyMethodDef speedups_functions[] = {
    {"init", (PyCFunction)(void (*)(void))speedups_init, METH_VARARGS | METH_KEYWORDS,
     "init(functions, no_copy_threshold, live_sockets, address_by_sockaddr, sockaddr_by_address, "
     "dispatch_records, record_address, address_for_sockaddr, udp_did_receive, raise_c_error, "
     "report_delegate_error, read, write, send_to_address): what the extension works with (once)"},
    {"drain", (PyCFunction)(void (*)(void))speedups_drain, METH_FASTCALL,
     "drain(queue, records, capacity, raw, records_object) -> records handled"},
    {"run_once", speedups_run_once, METH_O, "run_once(group) -> True when more work is ready"},
    {"shutdown", speedups_shutdown, METH_NOARGS,
     "From now on the C callbacks do not enter Python (the interpreter is finishing)."},
    {"trampolines", speedups_trampolines, METH_NOARGS,
     "{member: address}: C delegate members that replace the ctypes trampolines (did_read, udp_did_receive)"},
    {"event_layout", speedups_event_layout, METH_NOARGS,
     "{sizeof, offsets, version}: the sk_event_t this was built for and socketkit.h's version, checked at import"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef speedups_module = {
    PyModuleDef_HEAD_INIT, "socketkit._speedups", "The binding's hot paths in C (optional).", -1,
    speedups_functions, NULL, NULL, NULL, NULL,
};

#define INTERN(variable, text)                                                                               \
    do {                                                                                                     \
        if ((variable = PyUnicode_InternFromString(text)) == NULL) {                                         \
            return NULL;                                                                                     \
        }                                                                                                    \
    } while (0)

PyMODINIT_FUNC PyInit__speedups(void) {
    INTERN(str_socket_did_read, "socket_did_read");
    INTERN(str_udp_socket_did_receive, "udp_socket_did_receive");
    INTERN(msg_did_read, "Exception ignored in socketkit delegate method socket_did_read");
    INTERN(msg_did_receive, "Exception ignored in socketkit delegate method udp_socket_did_receive");
    if ((empty_bytes = PyBytes_FromStringAndSize(NULL, 0)) == NULL) {
        return NULL;
    }
    if (PyType_Ready(&HandleBase_type) < 0 || PyType_Ready(&SocketIO_type) < 0 ||
        PyType_Ready(&UdpSocketIO_type) < 0) {
        return NULL;
    }
    PyObject *module = PyModule_Create(&speedups_module);
    if (module == NULL) {
        return NULL;
    }
    PyTypeObject *types[] = {&HandleBase_type, &SocketIO_type, &UdpSocketIO_type};
    const char *type_names[] = {"HandleBase", "SocketIO", "UdpSocketIO"};
    for (int index = 0; index < 3; index++) {
        Py_INCREF(types[index]);
        if (PyModule_AddObject(module, type_names[index], (PyObject *)types[index]) < 0) {
            Py_DECREF(types[index]);
            Py_DECREF(module);
            return NULL;
        }
    }
    return module;
}
