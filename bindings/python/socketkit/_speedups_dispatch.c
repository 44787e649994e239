/* SPDX-License-Identifier: MIT */
/* socketkit._speedups, the half that SocketKit calls or that runs its events (see
 * _speedups.c for the whole): the GIL across the C callbacks and run_once(), the dispatch
 * of read and datagram events to their delegates, the C delegate members (trampolines),
 * drain() and run_once().
 */
#include "_speedups.h"

/* ---- the GIL ------------------------------------------------------------------------------ */

/* How deep this thread is in one of the C delegate callbacks below. SocketKit's calls
 * made from inside a callback never wait for another thread's callback (DESIGN: no
 * callback-to-call deadlock; at most for a lock that its holder keeps for a few
 * instructions and without Python), so a read or write from the delegate method keeps the
 * GIL instead of handing it over and taking it back around a call that returns at once. */
SK_THREAD_LOCAL int speedups_callback_depth;

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
 * except the calls made from inside a C callback, which keep it
 * (speedups_callback_depth > 0).
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
    speedups_sk_set_wait_hook(release_run_once_gil, NULL);
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
    if (speedups_callback_depth == 0 && holds_gil() && directly_under_run_once()) {
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

/* Set by shutdown() (_dispatch's atexit hook) and read by SocketKit's threads without the
 * GIL: from then on the C callbacks leave Python alone (a thread that takes the GIL while
 * the interpreter finalizes is stopped in the middle of SocketKit's code, or hangs). */
static int stopping;

/* Whether Python is out of reach for a callback. The atexit hook sets `stopping` before
 * the interpreter starts finalizing; the interpreter's own flag covers the rest. Before
 * 3.13, where Py_IsFinalizing became public, Py_IsInitialized() is the public form of it:
 * Py_FinalizeEx clears it at the very point where it marks the runtime as finalizing. */
int speedups_python_gone(void) {
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

PyObject *speedups_shutdown(PyObject *module, PyObject *unused) {
    (void)module;
    (void)unused;
    __atomic_store_n(&stopping, 1, __ATOMIC_RELEASE);
    Py_RETURN_NONE;
}

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
    PyObject *ref = PyDict_GetItemWithError(speedups_live_sockets, key); /* borrowed */
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
        speedups_report_delegate_error(message, delegate);
    }
    Py_XDECREF(result);
    Py_DECREF(delegate);
}

/* _dispatch.on_read: one read's bytes to its socket's delegate. */
static int deliver_read(const void *handle, const void *data, size_t length, long tag_value) {
    PyObject *sock;
    if (lookup(handle, &speedups_SocketIO_type, &sock) < 0) {
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
        payload = speedups_empty_bytes;
        Py_INCREF(payload);
    } else {
        payload = PyBytes_FromStringAndSize(data, (Py_ssize_t)length);
    }
    if (payload == NULL || (tag = PyLong_FromLong(tag_value)) == NULL) {
        goto done;
    }
    PyObject *call[4] = {NULL, NULL, payload, tag};
    call_delegate(sock, speedups_str_socket_did_read, speedups_msg_did_read, call, 4);
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
    if (lookup(handle, &speedups_UdpSocketIO_type, &sock) < 0) {
        return -1;
    }
    if (sock == NULL) {
        return 0;
    }
    PyObject *data = NULL, *address = NULL, *key = NULL;
    int outcome = -1;
    if (length == 0) {
        data = speedups_empty_bytes;
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
        address = PyDict_GetItemWithError(speedups_address_by_sockaddr, key);
        if (address == NULL && PyErr_Occurred()) {
            goto done;
        }
        Py_XINCREF(address);
    }
    if (address == NULL && event != NULL) {
        address = PyObject_CallFunction(speedups_record_address, "KiKI", (unsigned long long)(uintptr_t)event->host,
                                        (int)event->port, (unsigned long long)(uintptr_t)event->address,
                                        (unsigned int)event->address_length);
    } else if (address == NULL) {
        address = PyObject_CallFunctionObjArgs(speedups_address_for_sockaddr, key ? key : Py_None, NULL);
    }
    if (address == NULL) {
        goto done;
    }
    PyObject *call[5] = {NULL, NULL, data, address, Py_None};
    call_delegate(sock, speedups_str_udp_socket_did_receive, speedups_msg_did_receive, call, 5);
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
    speedups_callback_depth++;
    return gil;
}

static void end_callback(int gil, int status) {
    if (status < 0) {
        speedups_report_delegate_error(NULL, Py_None);
    }
    speedups_callback_depth--;
    callback_leave(gil);
}

/* The sk_delegate_t did_read member: replaces _dispatch's ctypes trampoline, for every
 * queue (SocketKit threads, the loop thread, SerialQueue). */
static void trampoline_did_read(sk_socket_t *sock, const void *data, size_t length, long tag, void *userdata) {
    (void)userdata;
    if (speedups_python_gone()) {
        return;
    }
    int gil = begin_callback();
    end_callback(gil, running() ? deliver_read(sock, data, length, tag) : 0);
}

/* The sk_udp_delegate_t did_receive member: replaces _dispatch's ctypes trampoline. */
static void trampoline_udp_did_receive(sk_udp_socket_t *sock, const void *data, size_t length,
                                       const struct sockaddr *address, socklen_t address_length, void *context,
                                       void *userdata) {
    if (speedups_python_gone()) {
        return;
    }
    int gil = begin_callback();
    int status = 0;
    if (context != NULL) {
        /* The receive filter's context: _dispatch hands it back (and frees it). */
        PyObject *result = PyObject_CallFunction(speedups_udp_did_receive, "KKKKIKK",
                                                 (unsigned long long)(uintptr_t)sock,
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

PyObject *speedups_trampolines(PyObject *module, PyObject *unused) {
    (void)module;
    (void)unused;
    return Py_BuildValue("{sKsK}", "did_read", (unsigned long long)(uintptr_t)&trampoline_did_read,
                         "udp_did_receive", (unsigned long long)(uintptr_t)&trampoline_udp_did_receive);
}

/* drain(queue, records, capacity, raw, records_object) -> count
 * Polls one batch of at most `capacity` records into the sk_event_t array at address
 * `records` and dispatches them; `raw` and `records_object` are what
 * _dispatch.dispatch_records takes for the records handled in Python. */
PyObject *speedups_drain(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "drain(queue, records, capacity, raw, records_object)");
        return NULL;
    }
    if (!speedups_configured()) {
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
    count = speedups_sk_poll_events(queue, records, capacity);
    Py_END_ALLOW_THREADS
    if (count < 0) {
        sk_error_t error = {.code = 0};
        return speedups_raise_status(count, &error);
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
            PyObject *result =
                PyObject_CallFunction(speedups_dispatch_records, "OOii", args[3], args[4], index + 1, index);
            status = result == NULL ? -1 : 0;
            Py_XDECREF(result);
        }
        if (status < 0) {
            /* The binding's own failure (not a delegate's): reported, the batch goes on. */
            speedups_report_delegate_error(NULL, Py_None);
        }
    }
    return PyLong_FromLong(count);
}

/* run_once(group) -> bool: sk_loop_group_run_once. */
PyObject *speedups_run_once(PyObject *module, PyObject *group) {
    (void)module;
    if (!speedups_configured()) {
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
    int outer_in_run_once = in_run_once, outer_depth = speedups_callback_depth;
    PyThreadState *outer_saved = run_once_saved;
    PyFrameObject *outer_frame = run_once_frame;
    PyFrameObject *caller = PyThreadState_GetFrame(PyThreadState_Get());
    run_once_frame = caller;
    Py_XDECREF(caller); /* identity only: the caller's frame outlives this call */
    speedups_callback_depth = 0;
    run_once_saved = PyEval_SaveThread();
    /* The GIL is dropped: a PyGILState_Check that says otherwise answers yes to everything
     * (see holds_gil), and the callbacks then take and drop it as any thread's do. */
    in_run_once = !holds_gil();
    status = speedups_sk_run_once(handle, &error);
    if (run_once_saved != NULL) {
        PyEval_RestoreThread(run_once_saved);
    }
    in_run_once = outer_in_run_once;
    speedups_callback_depth = outer_depth;
    run_once_saved = outer_saved;
    run_once_frame = outer_frame;
    if (in_run_once) {
        arm_wait_hook(); /* the outer iteration keeps the GIL after this callback */
    } else {
        speedups_sk_set_wait_hook(NULL, NULL);
    }
    return status < 0 ? speedups_raise_status(status, &error) : PyBool_FromLong(status == 1);
}
