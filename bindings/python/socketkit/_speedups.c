/* socketkit._speedups: the binding's hot paths as a CPython extension.
 *
 * Optional: socketkit works without it (pure ctypes; SOCKETKIT_NO_SPEEDUPS=1 forces that),
 * and _core.py decides. What it does, and nothing else:
 *
 *   - SocketBase / UdpSocketBase: base classes of Socket and UdpSocket whose read(),
 *     write() and send_to_address() call SocketKit directly for the common arguments
 *     (anything else goes to the Python implementation, _read_py, _write_py, ...);
 *   - drain(): one HostQueue batch, polled and dispatched here: read and datagram records
 *     become delegate calls without Python code between; every other record goes to
 *     _core._dispatch_records for that one record, in order;
 *   - run_once(): sk_loop_group_run_once;
 *   - trampolines(): C functions for the did_read and UDP did_receive delegate members, in
 *     place of ctypes callbacks (for sockets on any queue: SocketKit's loop thread, a
 *     SerialQueue's thread), doing what _core._on_read and _on_udp_receive do.
 *
 * It does not link libsocketkit: _core.py passes the addresses of the functions of the
 * library ctypes loaded (configure()), so both always use the same copy. Calls into
 * SocketKit release the GIL, as ctypes does (SocketKit may call back into Python from this
 * thread, or wait for a thread that runs a callback), except from inside the C callbacks
 * (callback_depth) and between the callbacks of one run_once() (in_run_once).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#include "socketkit.h"

/* ---- configuration (set once by configure()) ------------------------------------------ */

static __typeof__(&sk_socket_write) sk_write;
static __typeof__(&sk_socket_read) sk_read;
static __typeof__(&sk_socket_write_no_copy) sk_write_no_copy;
static __typeof__(&sk_udp_socket_send_to_address) sk_send_to_address;
static __typeof__(&sk_callback_queue_poll_events) sk_poll_events;
static __typeof__(&sk_loop_group_run_once) sk_run_once;
static __typeof__(&sk_thread_set_wait_hook) sk_set_wait_hook;

static Py_ssize_t no_copy_threshold;
static PyObject *socket_refs;       /* handle -> weakref(Socket) */
static PyObject *udp_socket_refs;   /* handle -> weakref(UdpSocket) */
static PyObject *address_by_sockaddr; /* raw sockaddr bytes -> (host, port) */
static PyObject *sockaddr_by_address; /* (host, port) -> raw sockaddr bytes */
static PyObject *dispatch_records;  /* _core._dispatch_records(raw, records, stop, start) */
static PyObject *udp_record_address; /* _core._udp_record_address(host, port, address, length) */
static PyObject *udp_address_for_sockaddr; /* _core._udp_address_for_sockaddr(raw) */
static PyObject *udp_did_receive_py; /* _core._udp_did_receive_py(handle, data, length, address, length,
                                        context, userdata): the callback with a filter context */
static PyObject *raise_c_error;     /* _core._raise_c_error(status, code, os_error, message) */
static PyObject *report_error;      /* _core._report_delegate_error(message, target, exception) */

static PyObject *str_write_py, *str_read_py, *str_send_to_address_py, *str_socket_did_read, *str_udp_socket_did_receive,
    *msg_did_read, *msg_did_receive, *empty_bytes;

/* Thread-locals below are initial-exec: one %fs-relative access each, where the default
 * model called __tls_get_addr (~11 instructions, six times per echoed message). They are a
 * few dozen bytes, well within the static TLS glibc keeps for modules loaded by dlopen. */
#define SK_THREAD_LOCAL __thread __attribute__((tls_model("initial-exec")))

/* How deep this thread is in one of the C delegate callbacks below. SocketKit's calls
 * made from inside a callback never wait for another thread's callback (DESIGN: no
 * callback-to-call deadlock; at most for a lock that its holder keeps for a few
 * instructions and without Python), so a read or write from the delegate method keeps the
 * GIL instead of handing it over and taking it back around a call that returns at once. */
static SK_THREAD_LOCAL int callback_depth;

/* The GIL across one sk_loop_group_run_once() (run_once() below): the host thread takes it
 * at the first C callback of the iteration and keeps it until the iteration ends, instead
 * of taking and dropping it around every event (~500 instructions each). Safe because
 * SocketKit calls the wait hook (sk_thread_set_wait_hook) before this thread would wait
 * inside it for another thread (a callback gate, a lock, a join): the hook drops the GIL
 * (another thread's callback may need it), and the next callback takes it again.
 * Thread-local, saved and restored by a nested run_once():
 *   in_run_once      this thread is inside run_once()'s call of sk_loop_group_run_once;
 *   run_once_saved   the thread state while run_once() does not hold the GIL (NULL: held);
 *   run_once_thread  this thread's state;
 *   run_once_ensured its gilstate_counter then: a higher count means a PyGILState_Ensure
 *                    caller (a ctypes callback, release_lent) runs on this thread now, and
 *                    owns the GIL as it left it. */
static SK_THREAD_LOCAL int in_run_once;
static SK_THREAD_LOCAL PyThreadState *run_once_saved;
static SK_THREAD_LOCAL PyThreadState *run_once_thread;
static SK_THREAD_LOCAL int run_once_ensured;

/* Whether this thread holds the GIL (PyGILState_Check says yes to everything once a
 * subinterpreter exists). */
static int holds_gil(void) {
    return _PyThreadState_UncheckedGet() == run_once_thread;
}

/* Whether the engine runs directly under run_once(): no PyGILState_Ensure caller between. */
static int directly_under_run_once(void) {
    return run_once_thread->gilstate_counter == run_once_ensured;
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

/* Set by shutdown() (_core's atexit hook) and read by SocketKit's threads without the GIL:
 * from then on the C callbacks leave Python alone (a thread that takes the GIL while the
 * interpreter finalizes is stopped in the middle of SocketKit's code, or hangs). */
static int stopping;

static int python_gone(void) {
#if PY_VERSION_HEX >= 0x030D0000
    return __atomic_load_n(&stopping, __ATOMIC_ACQUIRE) || Py_IsFinalizing();
#else
    return __atomic_load_n(&stopping, __ATOMIC_ACQUIRE) || _Py_IsFinalizing();
#endif
}

static int configured(void) {
    if (sk_write == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "socketkit._speedups is not configured");
        return 0;
    }
    return 1;
}

/* Raises the error of a failed call (through _core, so its exception types and messages
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

/* The exception being raised goes to sys.unraisablehook with `message` and `target`, as
 * _core._report_unraisable does for the ctypes path. */
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

/* Calls `name` on `self` with the arguments of this call: the Python implementation, for
 * everything the fast paths leave alone. */
static PyObject *call_python(PyObject *self, PyObject *name, PyObject *const *args, Py_ssize_t nargs,
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
    return PyObject_VectorcallMethod(name, stack, (size_t)(nargs + 1) | PY_VECTORCALL_ARGUMENTS_OFFSET, kwnames);
}

/* ---- SocketBase / UdpSocketBase -------------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    PyObject *c_handle; /* what Python stored: None, a c_void_p or an int */
    void *pointer;      /* its value */
    /* The `_delegate` and (Socket) `_pending_buffers` attributes, kept here rather than in
     * the instance dict: the dispatch below reads them for every event (two dict lookups
     * through the generic getattr, ~500 instructions per echoed message). The delegate can
     * refer back to its sockets, hence the GC support. */
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

static PyMemberDef SocketBase_members[] = {
    {"_delegate", T_OBJECT, offsetof(HandleBase, delegate), 0, "The delegate (None: no callbacks)."},
    {"_pending_buffers", T_OBJECT, offsetof(HandleBase, pending_buffers), 0,
     "The program's buffers pinned for reads into them (an empty tuple: none)."},
    {NULL, 0, 0, 0, NULL},
};

static PyMemberDef UdpSocketBase_members[] = {
    {"_delegate", T_OBJECT, offsetof(HandleBase, delegate), 0, "The delegate (None: no callbacks)."},
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

/* The release function of a lent bytes object: drops the reference write() took. */
static void release_lent(void *data, void *context) {
    (void)data;
    if (python_gone()) {
        return; /* the bytes object is left to the process's end */
    }
    PyGILState_STATE gil = PyGILState_Ensure();
    Py_DECREF((PyObject *)context);
    PyGILState_Release(gil);
}

static PyObject *SocketBase_write(HandleBase *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    if (!configured()) {
        return NULL;
    }
    if (nargs == 1 && kwnames == NULL && self->pointer != NULL && PyBytes_CheckExact(args[0])) {
        PyObject *data = args[0];
        Py_ssize_t length = PyBytes_GET_SIZE(data);
        sk_error_t error;
        int status;
        error.code = 0;
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
        if (status < 0) {
            return raise_status(status, &error);
        }
        Py_RETURN_NONE;
    }
    return call_python((PyObject *)self, str_write_py, args, nargs, kwnames);
}

static PyObject *SocketBase_read(HandleBase *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    if (!configured()) {
        return NULL;
    }
    if (nargs == 0 && kwnames == NULL && self->pointer != NULL) {
        sk_error_t error;
        int status;
        error.code = 0;
        void *handle = self->pointer;
        SK_CALL(status, sk_read(handle, 0, -1.0, 0, &error));
        if (status < 0) {
            return raise_status(status, &error);
        }
        Py_RETURN_NONE;
    }
    return call_python((PyObject *)self, str_read_py, args, nargs, kwnames);
}

static PyMethodDef SocketBase_methods[] = {
    {"write", (PyCFunction)(void (*)(void))SocketBase_write, METH_FASTCALL | METH_KEYWORDS,
     "write($self, data, timeout=-1, tag=0)\n--\n\n"
     "Queues `data` (any bytes-like object); ``socket_did_write(sock, tag)`` follows once\n"
     "the kernel accepted it all. Large ``bytes`` objects (immutable) are sent without a\n"
     "copy and kept alive until SocketKit is done with them; anything else is copied."},
    {"read", (PyCFunction)(void (*)(void))SocketBase_read, METH_FASTCALL | METH_KEYWORDS,
     "read($self, max_length=0, timeout=-1, tag=0)\n--\n\n"
     "Reads whatever is available (at least one byte, at most `max_length` if not 0).\n"
     "``socket_did_read(sock, data, tag)`` receives ``bytes``."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject SocketBase_type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "socketkit._speedups.SocketBase",
    .tp_basicsize = sizeof(HandleBase),
    .tp_dealloc = (destructor)HandleBase_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_traverse = (traverseproc)HandleBase_traverse,
    .tp_clear = (inquiry)HandleBase_clear,
    .tp_free = PyObject_GC_Del,
    .tp_doc = "Socket's read and write, in C for their common arguments.",
    .tp_methods = SocketBase_methods,
    .tp_members = SocketBase_members,
    .tp_getset = HandleBase_getset,
    .tp_new = PyType_GenericNew,
};

static PyObject *UdpSocketBase_send_to_address(HandleBase *self, PyObject *const *args, Py_ssize_t nargs,
                                               PyObject *kwnames) {
    if (!configured()) {
        return NULL;
    }
    if (nargs == 2 && kwnames == NULL && self->pointer != NULL && PyBytes_CheckExact(args[0]) &&
        PyTuple_CheckExact(args[1])) {
        PyObject *raw = PyDict_GetItemWithError(sockaddr_by_address, args[1]); /* borrowed */
        if (raw == NULL && PyErr_Occurred()) {
            PyErr_Clear(); /* unhashable: the Python implementation says why */
        } else if (raw != NULL && PyBytes_CheckExact(raw)) {
            PyObject *data = args[0];
            Py_ssize_t length = PyBytes_GET_SIZE(data);
            sk_error_t error;
            int status;
            error.code = 0;
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
            if (status < 0) {
                return raise_status(status, &error);
            }
            Py_RETURN_NONE;
        }
    }
    return call_python((PyObject *)self, str_send_to_address_py, args, nargs, kwnames);
}

static PyMethodDef UdpSocketBase_methods[] = {
    {"send_to_address", (PyCFunction)(void (*)(void))UdpSocketBase_send_to_address, METH_FASTCALL | METH_KEYWORDS,
     "send_to_address($self, data, address, timeout=-1, tag=0)\n--\n\n"
     "Queues a datagram to (\"ip\", port)."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject UdpSocketBase_type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "socketkit._speedups.UdpSocketBase",
    .tp_basicsize = sizeof(HandleBase),
    .tp_dealloc = (destructor)HandleBase_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_traverse = (traverseproc)HandleBase_traverse,
    .tp_clear = (inquiry)HandleBase_clear,
    .tp_free = PyObject_GC_Del,
    .tp_doc = "UdpSocket's send_to_address, in C for its common arguments.",
    .tp_methods = UdpSocketBase_methods,
    .tp_members = UdpSocketBase_members,
    .tp_getset = HandleBase_getset,
    .tp_new = PyType_GenericNew,
};

/* ---- dispatch -------------------------------------------------------------------------- */

/* Whether `object` is what _core's handle tables hold: Socket and UdpSocket derive from
 * SocketBase and UdpSocketBase whenever this extension is in use. */
static int is_handle_base(PyObject *object) {
    return PyObject_TypeCheck(object, &SocketBase_type) || PyObject_TypeCheck(object, &UdpSocketBase_type);
}

/* A direct-mapped cache in front of the handle tables: the dict lookup costs a PyLong for
 * the key, a hash probe and an int comparison (~450 instructions per event). An entry holds
 * the table's weak reference (a strong reference to the weakref object, not to the socket).
 * It is only trusted while its object still carries the handle (`pointer`): _core sets
 * _c_handle when it adds a handle to the table and clears it before removing the handle, and
 * SocketKit never reuses a handle value, so a hit says what the table says; a miss asks the
 * table. Only touched with the GIL held. */
#define HANDLE_CACHE_SIZE 1024
typedef struct {
    const void *handle;
    PyObject *ref;
} HandleCacheEntry;
static HandleCacheEntry socket_cache[HANDLE_CACHE_SIZE], udp_socket_cache[HANDLE_CACHE_SIZE];

static HandleCacheEntry *cache_entry(HandleCacheEntry *cache, const void *handle) {
    /* A handle is (generation << 24 | slot + 1) << 4: the slot is in the low bits. */
    return &cache[((uintptr_t)handle >> 4) & (HANDLE_CACHE_SIZE - 1)];
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

/* The live object a handle -> weakref table holds for `handle` (a new reference, always a
 * HandleBase), or NULL (no exception) when there is none. -1 on error, a TypeError for an
 * object of another type (a bug in _core). */
static int lookup(PyObject *table, HandleCacheEntry *cache, const void *handle, PyObject **found) {
    *found = NULL;
    HandleCacheEntry *entry = cache_entry(cache, handle);
    if (entry->handle == handle && entry->ref != NULL) {
        PyObject *object;
        if (weakref_target(entry->ref, &object) < 0) {
            return -1;
        }
        if (object != NULL) {
            if (is_handle_base(object) && ((HandleBase *)object)->pointer == handle) {
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
    PyObject *ref = PyDict_GetItemWithError(table, key); /* borrowed */
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
    if (*found != NULL && !is_handle_base(*found)) {
        PyErr_Format(PyExc_TypeError, "socketkit: a %.100s in the socket table", Py_TYPE(*found)->tp_name);
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

/* `base._delegate.<name>` (a new reference), or NULL with no exception when the delegate
 * has no such method. `*unbound` says whether it is the class's function, to be called with
 * the delegate first (what CPython's method calls do: no bound method object per call);
 * call it through call_delegate. */
static PyObject *delegate_method(HandleBase *base, PyObject *name, PyObject **delegate_out, int *unbound) {
    *unbound = 0;
    PyObject *delegate = base->delegate ? base->delegate : Py_None;
    Py_INCREF(delegate);
    PyObject *method = NULL;
#if PY_VERSION_HEX < 0x030D0000
    *unbound = _PyObject_GetMethod(delegate, name, &method);
#else
    method = PyObject_GetAttr(delegate, name);
#endif
    if (method == NULL && PyErr_ExceptionMatches(PyExc_AttributeError)) {
        PyErr_Clear();
    } else if (method == Py_None) {
        Py_CLEAR(method); /* None is "not implemented", as for the ctypes path */
    }
    if (method == NULL) {
        *unbound = 0;
    }
    *delegate_out = delegate;
    return method;
}

/* Calls what delegate_method found with `args[1...count]`; args[0] is a free slot. */
static PyObject *call_delegate(PyObject *method, int unbound, PyObject *delegate, PyObject **args, size_t count) {
    if (unbound) {
        args[0] = delegate;
        return PyObject_Vectorcall(method, args, count + 1, NULL);
    }
    return PyObject_Vectorcall(method, args + 1, count | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
}

/* _core._on_read: one read's bytes to its socket's delegate. */
static int deliver_read(const void *handle, const void *data, size_t length, long tag_value) {
    PyObject *sock;
    if (lookup(socket_refs, socket_cache, handle, &sock) < 0) {
        return -1;
    }
    if (sock == NULL) {
        return 0;
    }
    PyObject *payload = NULL, *delegate = NULL, *method = NULL, *tag = NULL;
    int outcome = -1;
    HandleBase *base = (HandleBase *)sock; /* lookup checked the type */
    /* `()` when no read into a caller's buffer is pending (the usual case, no call). */
    PyObject *pending = base->pending_buffers;
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
    if (payload == NULL) {
        goto done;
    }
    int unbound;
    method = delegate_method(base, str_socket_did_read, &delegate, &unbound);
    if (method == NULL) {
        outcome = PyErr_Occurred() ? -1 : 0;
        goto done;
    }
    tag = PyLong_FromLong(tag_value);
    if (tag == NULL) {
        goto done;
    }
    PyObject *call[4] = {NULL, sock, payload, tag};
    PyObject *result = call_delegate(method, unbound, delegate, call, 3);
    if (result == NULL) {
        report_delegate_error(msg_did_read, delegate);
    }
    Py_XDECREF(result);
    outcome = 0;
done:
    Py_XDECREF(tag);
    Py_XDECREF(method);
    Py_XDECREF(delegate);
    Py_XDECREF(payload);
    Py_DECREF(sock);
    return outcome;
}

/* _core._on_udp_receive, for a datagram without a filter context. `event` (a record) gives
 * the peer's text form for an address the cache does not know; without it (a callback)
 * _core decodes the sockaddr. */
static int deliver_udp_receive(const void *handle, const void *bytes, size_t length, const struct sockaddr *peer,
                               socklen_t peer_length, const sk_event_t *event) {
    if (handle == NULL) {
        return 0;
    }
    PyObject *sock;
    if (lookup(udp_socket_refs, udp_socket_cache, handle, &sock) < 0) {
        return -1;
    }
    if (sock == NULL) {
        return 0;
    }
    PyObject *data = NULL, *address = NULL, *delegate = NULL, *method = NULL;
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
    PyObject *key = NULL;
    if (peer != NULL && peer_length > 0) {
        key = PyBytes_FromStringAndSize((const char *)peer, (Py_ssize_t)peer_length);
        if (key == NULL) {
            goto done;
        }
        address = PyDict_GetItemWithError(address_by_sockaddr, key);
        if (address == NULL && PyErr_Occurred()) {
            Py_DECREF(key);
            goto done;
        }
        Py_XINCREF(address);
    }
    if (address == NULL && event != NULL) {
        address = PyObject_CallFunction(udp_record_address, "KiKI", (unsigned long long)(uintptr_t)event->host,
                                        (int)event->port, (unsigned long long)(uintptr_t)event->address,
                                        (unsigned int)event->address_length);
    } else if (address == NULL) {
        address = PyObject_CallFunctionObjArgs(udp_address_for_sockaddr, key ? key : Py_None, NULL);
    }
    Py_XDECREF(key);
    if (address == NULL) {
        goto done;
    }
    int unbound;
    method = delegate_method((HandleBase *)sock, str_udp_socket_did_receive, &delegate, &unbound);
    if (method == NULL) {
        outcome = PyErr_Occurred() ? -1 : 0;
        goto done;
    }
    PyObject *call[5] = {NULL, sock, data, address, Py_None};
    PyObject *result = call_delegate(method, unbound, delegate, call, 4);
    if (result == NULL) {
        report_delegate_error(msg_did_receive, delegate);
    }
    Py_XDECREF(result);
    outcome = 0;
done:
    Py_XDECREF(method);
    Py_XDECREF(delegate);
    Py_XDECREF(address);
    Py_XDECREF(data);
    Py_DECREF(sock);
    return outcome;
}

/* True while _core has not begun shutting down (call with the GIL; the callbacks and the
 * drain check it per event and per batch). _core's atexit hook calls shutdown() before it
 * sets its own _shutting_down, so this flag covers that one: one atomic load where reading
 * _core's global cost a dictionary lookup (~140 instructions per echoed message under
 * callgrind). Re-read under the GIL, as the hook may have run while this thread waited. */
static int running(void) {
    return !__atomic_load_n(&stopping, __ATOMIC_ACQUIRE);
}

/* The sk_delegate_t did_read member: replaces the ctypes trampoline _core._did_read, for
 * every queue (SocketKit threads, the loop thread, SerialQueue). */
static void trampoline_did_read(sk_socket_t *sock, const void *data, size_t length, long tag, void *userdata) {
    (void)userdata;
    if (python_gone()) {
        return;
    }
    int gil = callback_enter();
    callback_depth++;
    if (running() && deliver_read(sock, data, length, tag) < 0) {
        report_delegate_error(NULL, Py_None);
    }
    callback_depth--;
    callback_leave(gil);
}

/* The sk_udp_delegate_t did_receive member: replaces _core._udp_did_receive. */
static void trampoline_udp_did_receive(sk_udp_socket_t *sock, const void *data, size_t length,
                                       const struct sockaddr *address, socklen_t address_length, void *context,
                                       void *userdata) {
    if (python_gone()) {
        return;
    }
    int gil = callback_enter();
    int status = 0;
    callback_depth++;
    if (context != NULL) {
        /* The receive filter's context: _core hands it back (and frees it). */
        PyObject *result = PyObject_CallFunction(udp_did_receive_py, "KKKKIKK", (unsigned long long)(uintptr_t)sock,
                                                 (unsigned long long)(uintptr_t)data, (unsigned long long)length,
                                                 (unsigned long long)(uintptr_t)address, (unsigned int)address_length,
                                                 (unsigned long long)(uintptr_t)context,
                                                 (unsigned long long)(uintptr_t)userdata);
        status = result == NULL ? -1 : 0;
        Py_XDECREF(result);
    } else if (running()) {
        status = deliver_udp_receive(sock, data, length, address, address_length, NULL);
    }
    if (status < 0) {
        report_delegate_error(NULL, Py_None);
    }
    callback_depth--;
    callback_leave(gil);
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
 * _core._dispatch_records takes for the records handled in Python. */
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
    error.code = 0;
    /* Without the GIL until the first C callback, which keeps it for the rest of the
     * iteration (see in_run_once). Nested (a callback running another driven group's
     * iteration; its own is refused), the outer iteration's state is kept aside and the
     * inner one's callbacks count from zero, so its hook may drop the GIL between them. */
    int outer_in_run_once = in_run_once, outer_depth = callback_depth, outer_ensured = run_once_ensured;
    PyThreadState *outer_saved = run_once_saved, *outer_thread = run_once_thread;
    run_once_thread = PyThreadState_Get();
    run_once_ensured = run_once_thread->gilstate_counter;
    in_run_once = 1;
    callback_depth = 0;
    run_once_saved = PyEval_SaveThread();
    status = sk_run_once(handle, &error);
    if (run_once_saved != NULL) {
        PyEval_RestoreThread(run_once_saved);
    }
    in_run_once = outer_in_run_once;
    callback_depth = outer_depth;
    run_once_saved = outer_saved;
    run_once_thread = outer_thread;
    run_once_ensured = outer_ensured;
    if (in_run_once) {
        arm_wait_hook(); /* the outer iteration keeps the GIL after this callback */
    } else {
        sk_set_wait_hook(NULL, NULL);
    }
    if (status < 0) {
        return raise_status(status, &error);
    }
    return PyBool_FromLong(status == 1);
}

/* configure(functions, threshold, core_namespace): `functions` maps names to addresses. */
static PyObject *speedups_configure(PyObject *module, PyObject *args) {
    (void)module;
    PyObject *functions, *namespace;
    Py_ssize_t threshold;
    if (!PyArg_ParseTuple(args, "O!nO!", &PyDict_Type, &functions, &threshold, &PyDict_Type, &namespace)) {
        return NULL;
    }
    static const char *names[] = {"sk_socket_write", "sk_socket_read", "sk_udp_socket_send_to_address",
                                  "sk_callback_queue_poll_events", "sk_loop_group_run_once",
                                  "sk_socket_write_no_copy", "sk_thread_set_wait_hook"};
    void *addresses[7];
    for (int index = 0; index < 7; index++) {
        PyObject *value = PyDict_GetItemString(functions, names[index]);
        addresses[index] = value ? PyLong_AsVoidPtr(value) : NULL;
        if (addresses[index] == NULL) {
            if (!PyErr_Occurred()) {
                PyErr_Format(PyExc_ValueError, "configure: no address for %s", names[index]);
            }
            return NULL;
        }
    }
    static const char *objects[] = {"_socket_refs", "_udp_socket_refs", "_address_by_sockaddr",
                                    "_sockaddr_by_address", "_dispatch_records", "_udp_record_address",
                                    "_raise_c_error", "_report_delegate_error", "_udp_address_for_sockaddr",
                                    "_udp_did_receive_py"};
    PyObject **slots[] = {&socket_refs, &udp_socket_refs, &address_by_sockaddr, &sockaddr_by_address,
                          &dispatch_records, &udp_record_address, &raise_c_error, &report_error,
                          &udp_address_for_sockaddr, &udp_did_receive_py};
    for (int index = 0; index < 10; index++) {
        PyObject *value = PyDict_GetItemString(namespace, objects[index]);
        if (value == NULL) {
            return PyErr_Format(PyExc_ValueError, "configure: _core has no %s", objects[index]);
        }
        if (index < 4 && !PyDict_CheckExact(value)) {
            return PyErr_Format(PyExc_TypeError, "configure: %s must be a dict", objects[index]);
        }
        Py_INCREF(value);
        Py_XSETREF(*slots[index], value);
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
    /* Every field the extension reads, and the header's version: _core compares them with
     * ctypes' view and the loaded library's. */
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
    {"configure", speedups_configure, METH_VARARGS, "configure(functions, no_copy_threshold, core_namespace)"},
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
    INTERN(str_write_py, "_write_py");
    INTERN(str_read_py, "_read_py");
    INTERN(str_send_to_address_py, "_send_to_address_py");
    INTERN(str_socket_did_read, "socket_did_read");
    INTERN(str_udp_socket_did_receive, "udp_socket_did_receive");
    INTERN(msg_did_read, "Exception ignored in socketkit delegate method socket_did_read");
    INTERN(msg_did_receive, "Exception ignored in socketkit delegate method udp_socket_did_receive");
    if ((empty_bytes = PyBytes_FromStringAndSize(NULL, 0)) == NULL) {
        return NULL;
    }
    if (PyType_Ready(&SocketBase_type) < 0 || PyType_Ready(&UdpSocketBase_type) < 0) {
        return NULL;
    }
    PyObject *module = PyModule_Create(&speedups_module);
    if (module == NULL) {
        return NULL;
    }
    Py_INCREF(&SocketBase_type);
    Py_INCREF(&UdpSocketBase_type);
    if (PyModule_AddObject(module, "SocketBase", (PyObject *)&SocketBase_type) < 0 ||
        PyModule_AddObject(module, "UdpSocketBase", (PyObject *)&UdpSocketBase_type) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
