/* SPDX-License-Identifier: MIT */
/* socketkit._speedups: the binding's hot paths as a CPython extension.
 *
 * Optional: socketkit works without it (pure ctypes; SOCKETKIT_NO_SPEEDUPS=1 forces that),
 * and _native.py decides. It uses only CPython's public C API. What it does, and nothing
 * else:
 *
 *   - HandleBase: the base of Socket and UdpSocket (through _handles.Handle); its slots hold
 *     what the dispatch reads for every event: the handle, the delegate, the buffers pinned
 *     for reads into them;
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
 * (speedups_callback_depth) and between the callbacks of one run_once() (in_run_once).
 *
 * Two files, one module: this one holds the module (init(), the state it hands over, the
 * method table), the errors and the types HandleBase, SocketIO and UdpSocketIO, the methods
 * Python calls; _speedups_dispatch.c holds what SocketKit calls or what runs its events:
 * the GIL across callbacks, the dispatch of read and datagram events to delegates, the
 * trampolines, drain() and run_once(). _speedups.h declares what they share.
 */
#include "_speedups.h"

#include <structmember.h>

/* ---- what init() hands over (set once) ------------------------------------------------- */

/* Those named speedups_ are shared with _speedups_dispatch.c (_speedups.h). */
__typeof__(&sk_socket_write) speedups_sk_write;
static __typeof__(&sk_socket_read) sk_read;
static __typeof__(&sk_socket_write_no_copy) sk_write_no_copy;
static __typeof__(&sk_udp_socket_send_to_address) sk_send_to_address;
__typeof__(&sk_callback_queue_poll_events) speedups_sk_poll_events;
__typeof__(&sk_loop_group_run_once) speedups_sk_run_once;
__typeof__(&sk_thread_set_wait_hook) speedups_sk_set_wait_hook;

static Py_ssize_t no_copy_threshold;
PyObject *speedups_live_sockets;          /* handle -> weakref(Socket or UdpSocket): _handles.live */
PyObject *speedups_address_by_sockaddr;   /* raw sockaddr bytes -> (host, port) */
static PyObject *sockaddr_by_address;     /* (host, port) -> raw sockaddr bytes */
PyObject *speedups_dispatch_records;      /* _dispatch.dispatch_records(raw, records, stop, start) */
PyObject *speedups_record_address;        /* _addresses.record_address(host, port, address, length) */
PyObject *speedups_address_for_sockaddr;  /* _addresses.address_for_sockaddr(raw) */
PyObject *speedups_udp_did_receive;       /* _dispatch.udp_did_receive_py(handle, data, length, address,
                                             length, context, userdata): a datagram with a filter context */
static PyObject *raise_c_error;           /* _status.raise_c_error(status, code, os_error, message) */
static PyObject *report_error;            /* _status.report_delegate_error(message, target, exception) */
static PyObject *python_read, *python_write, *python_send_to_address; /* _hotpaths' methods */

PyObject *speedups_str_socket_did_read, *speedups_str_udp_socket_did_receive, *speedups_msg_did_read,
    *speedups_msg_did_receive, *speedups_empty_bytes;

/* ---- errors -------------------------------------------------------------------------------- */

/* Raises the error of a failed call (through _status, so its exception types and messages
 * are the ones the ctypes path gives). Returns NULL. */
PyObject *speedups_raise_status(int status, const sk_error_t *error) {
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
        return speedups_raise_status(status, error);
    }
    Py_RETURN_NONE;
}

/* The exception being raised goes to sys.unraisablehook with `message` and `target`, as
 * _status.report_unraisable does for the ctypes path. */
void speedups_report_delegate_error(PyObject *message, PyObject *target) {
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
    if (speedups_python_gone()) {
        return; /* the bytes object is left to the process's end */
    }
    PyGILState_STATE gil = PyGILState_Ensure();
    Py_DECREF((PyObject *)context);
    PyGILState_Release(gil);
}

static PyObject *SocketIO_write(HandleBase *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    if (!speedups_configured()) {
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
            SK_CALL(status, speedups_sk_write(handle, PyBytes_AS_STRING(data), (size_t)length, -1.0, 0, &error));
        }
        return none_or_raise(status, &error);
    }
    return call_python(python_write, (PyObject *)self, args, nargs, kwnames);
}

static PyObject *SocketIO_read(HandleBase *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    if (!speedups_configured()) {
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
    if (!speedups_configured()) {
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
PyTypeObject speedups_SocketIO_type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "socketkit._speedups.SocketIO",
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "Socket's read and write, in C for their common arguments.",
    .tp_methods = SocketIO_methods,
    .tp_base = &HandleBase_type,
    .tp_new = PyType_GenericNew,
};

PyTypeObject speedups_UdpSocketIO_type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "socketkit._speedups.UdpSocketIO",
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "UdpSocket's send_to_address, in C for its common arguments.",
    .tp_methods = UdpSocketIO_methods,
    .tp_base = &HandleBase_type,
    .tp_new = PyType_GenericNew,
};

/* ---- the module ---------------------------------------------------------------------------- */

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
    PyObject **slots[] = {&speedups_live_sockets, &speedups_address_by_sockaddr, &sockaddr_by_address,
                          &speedups_dispatch_records, &speedups_record_address, &speedups_address_for_sockaddr,
                          &speedups_udp_did_receive, &raise_c_error, &report_error,
                          &python_read, &python_write, &python_send_to_address};
    for (int index = 0; index < 12; index++) {
        Py_INCREF(objects[index]);
        Py_XSETREF(*slots[index], objects[index]);
    }
    no_copy_threshold = threshold;
    speedups_sk_write = (__typeof__(speedups_sk_write))addresses[0];
    sk_read = (__typeof__(sk_read))addresses[1];
    sk_send_to_address = (__typeof__(sk_send_to_address))addresses[2];
    speedups_sk_poll_events = (__typeof__(speedups_sk_poll_events))addresses[3];
    speedups_sk_run_once = (__typeof__(speedups_sk_run_once))addresses[4];
    sk_write_no_copy = (__typeof__(sk_write_no_copy))addresses[5];
    speedups_sk_set_wait_hook = (__typeof__(speedups_sk_set_wait_hook))addresses[6];
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
    INTERN(speedups_str_socket_did_read, "socket_did_read");
    INTERN(speedups_str_udp_socket_did_receive, "udp_socket_did_receive");
    INTERN(speedups_msg_did_read, "Exception ignored in socketkit delegate method socket_did_read");
    INTERN(speedups_msg_did_receive, "Exception ignored in socketkit delegate method udp_socket_did_receive");
    if ((speedups_empty_bytes = PyBytes_FromStringAndSize(NULL, 0)) == NULL) {
        return NULL;
    }
    if (PyType_Ready(&HandleBase_type) < 0 || PyType_Ready(&speedups_SocketIO_type) < 0 ||
        PyType_Ready(&speedups_UdpSocketIO_type) < 0) {
        return NULL;
    }
    PyObject *module = PyModule_Create(&speedups_module);
    if (module == NULL) {
        return NULL;
    }
    PyTypeObject *types[] = {&HandleBase_type, &speedups_SocketIO_type, &speedups_UdpSocketIO_type};
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
