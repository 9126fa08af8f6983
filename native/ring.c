/*
 * ring.c -- the Python type nsqmp._native.Ring over the shared-memory SPSC
 * byte ring described in ring.h.
 *
 * The object holds a Py_buffer on the (writable, contiguous) buffer for its
 * whole lifetime, so the exporter (mmap, bytearray, ...) cannot be resized
 * or closed under it; release() or deallocation gives it back.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <sys/mman.h>
#include <unistd.h>

#include "ring.h"

/* last_head / released_head before the first release_if_idle() call: no
 * real head reaches it (2^64 bytes). */
#define NO_HEAD UINT64_MAX
/* release_if_idle() calls a ring quiet when less than capacity >> QUIET_SHIFT
 * bytes (256 KiB of an 8 MiB ring) came since the previous call: a trickle
 * (the /stats polls of a bench, a heartbeat) must not keep a burst's pages
 * resident, and re-faulting what a quiet ring writes in a call's period costs
 * at most capacity/32/4096 page faults (64 for 8 MiB; a call every 250 ms). */
#define QUIET_SHIFT 5

typedef struct {
    PyObject_HEAD
    nqr_ring ring;
    Py_buffer view;
    int attached;
    uint64_t last_head;      /* head at the previous release_if_idle() */
    uint64_t released_head;  /* head at the last release of the data pages */
} RingObject;

static PyTypeObject Ring_Type;

/* ------------------------------------------------------------------ */
/* helpers                                                             */
/* ------------------------------------------------------------------ */

/* PyObject_GetBuffer, but BufferError (read-only, non-contiguous) becomes
 * TypeError so that invalid arguments only raise TypeError/ValueError. */
static int
get_buffer(PyObject *obj, Py_buffer *view, int flags, const char *what)
{
    if (PyObject_GetBuffer(obj, view, flags) == 0)
        return 0;
    if (PyErr_ExceptionMatches(PyExc_BufferError)) {
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError, "%s must be a %scontiguous bytes-like object, "
                     "not %.100s", what,
                     (flags & PyBUF_WRITABLE) ? "writable " : "",
                     Py_TYPE(obj)->tp_name);
    }
    return -1;
}

static int
ring_check(RingObject *self)
{
    if (!self->attached) {
        PyErr_SetString(PyExc_ValueError, "operation on a released Ring");
        return -1;
    }
    return 0;
}

static int
parse_capacity(PyObject *obj, uint64_t *out)
{
    if (!PyLong_Check(obj)) {
        PyErr_Format(PyExc_TypeError, "capacity must be an int, not %.100s",
                     Py_TYPE(obj)->tp_name);
        return -1;
    }
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(obj, &overflow);
    if (v == -1 && PyErr_Occurred())
        return -1;
    if (overflow || v < 0 || !nqr_capacity_valid((uint64_t)v)) {
        PyErr_SetString(PyExc_ValueError, nqr_strerror(NQR_ERR_CAPACITY));
        return -1;
    }
    *out = (uint64_t)v;
    return 0;
}

/* An integer argument (anything with __index__), clamped to [LLONG_MIN,
 * LLONG_MAX] so that huge values behave like the Python twin's ints. */
static int
parse_clamped(PyObject *obj, long long *out)
{
    PyObject *idx = PyNumber_Index(obj);
    if (idx == NULL)
        return -1;
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(idx, &overflow);
    Py_DECREF(idx);
    if (v == -1 && PyErr_Occurred())
        return -1;
    if (overflow)
        v = overflow > 0 ? LLONG_MAX : LLONG_MIN;
    *out = v;
    return 0;
}

static PyObject *
raise_corrupt(void)
{
    PyErr_SetString(PyExc_RuntimeError,
                    "ring data area is corrupt (invalid record header)");
    return NULL;
}

/* Payload pointer/length of one item; a borrowed bytes object needs no
 * buffer export (fast path), anything else goes through the buffer API.
 * *held is set when view must be released. */
static inline int
item_payload(PyObject *item, Py_buffer *view, int *held,
             const char **data, Py_ssize_t *len)
{
    if (PyBytes_CheckExact(item)) {
        *data = PyBytes_AS_STRING(item);
        *len = PyBytes_GET_SIZE(item);
        *held = 0;
        return 0;
    }
    if (get_buffer(item, view, PyBUF_SIMPLE, "record") < 0)
        return -1;
    *data = (const char *)view->buf;
    *len = view->len;
    *held = 1;
    return 0;
}

static int
check_record_len(RingObject *self, Py_ssize_t len)
{
    if ((uint64_t)len > self->ring.max_record) {
        PyErr_Format(PyExc_ValueError,
                     "record of %zd bytes exceeds max_record (%u)",
                     len, (unsigned)self->ring.max_record);
        return -1;
    }
    return 0;
}

/* ------------------------------------------------------------------ */
/* construction                                                        */
/* ------------------------------------------------------------------ */

static PyObject *
Ring_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"buf", NULL};
    PyObject *buf;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O:Ring", kwlist, &buf))
        return NULL;

    RingObject *self = (RingObject *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->attached = 0;
    if (get_buffer(buf, &self->view, PyBUF_WRITABLE, "ring buffer") < 0) {
        Py_DECREF(self);
        return NULL;
    }
    nqr_status st = nqr_attach(&self->ring, self->view.buf, (size_t)self->view.len);
    if (st != NQR_OK) {
        PyBuffer_Release(&self->view);
        PyErr_SetString(PyExc_ValueError, nqr_strerror(st));
        Py_DECREF(self);
        return NULL;
    }
    self->attached = 1;
    self->last_head = NO_HEAD;
    self->released_head = NO_HEAD;
    return (PyObject *)self;
}

static void
Ring_dealloc(RingObject *self)
{
    if (self->attached) {
        self->attached = 0;
        PyBuffer_Release(&self->view);
    }
    Py_TYPE(self)->tp_free((PyObject *)self);
}

PyDoc_STRVAR(Ring_format_doc,
"format(buf, capacity) -> Ring\n--\n\n"
"Write a fresh ring header (head, tail and flags zeroed) into buf and\n"
"return a Ring attached to it.  buf needs ring_size(capacity) bytes.");

static PyObject *
Ring_format(PyObject *cls, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"buf", "capacity", NULL};
    PyObject *buf, *capobj;
    uint64_t capacity;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OO:format", kwlist, &buf, &capobj))
        return NULL;
    if (parse_capacity(capobj, &capacity) < 0)
        return NULL;
    Py_buffer view;
    if (get_buffer(buf, &view, PyBUF_WRITABLE, "ring buffer") < 0)
        return NULL;
    nqr_status st = nqr_format(view.buf, (size_t)view.len, capacity);
    PyBuffer_Release(&view);
    if (st != NQR_OK) {
        PyErr_SetString(PyExc_ValueError, nqr_strerror(st));
        return NULL;
    }
    return PyObject_CallOneArg(cls, buf);
}

PyDoc_STRVAR(Ring_release_doc,
"release()\n--\n\n"
"Release the buffer early (e.g. before closing the mmap).  Any later\n"
"operation raises ValueError.  Idempotent.");

static PyObject *
Ring_release(RingObject *self, PyObject *Py_UNUSED(ignored))
{
    if (self->attached) {
        self->attached = 0;
        PyBuffer_Release(&self->view);
    }
    Py_RETURN_NONE;
}

/* ------------------------------------------------------------------ */
/* producer                                                            */
/* ------------------------------------------------------------------ */

PyDoc_STRVAR(Ring_push_doc,
"push(data) -> int\n--\n\n"
"Append one record.  Returns 0 if the ring is full (nothing written),\n"
"1 if written, 2 if written and the consumer had announced sleep: the\n"
"caller must ring the consumer's doorbell.");

static PyObject *
Ring_push(RingObject *self, PyObject *item)
{
    if (ring_check(self) < 0)
        return NULL;
    Py_buffer view;
    int held;
    const char *data;
    Py_ssize_t len;
    if (item_payload(item, &view, &held, &data, &len) < 0)
        return NULL;
    if (check_record_len(self, len) < 0) {
        if (held)
            PyBuffer_Release(&view);
        return NULL;
    }
    const nqr_ring *r = &self->ring;
    uint64_t head = nqr_producer_head(r);
    int ok = nqr_write(r, &head, nqr_producer_tail(r), data, (uint32_t)len);
    if (held)
        PyBuffer_Release(&view);
    if (!ok)
        return PyLong_FromLong(0);
    return PyLong_FromLong(nqr_publish(r, head) ? 2 : 1);
}

PyDoc_STRVAR(Ring_push_many_doc,
"push_many(records, start=0) -> tuple[int, bool]\n--\n\n"
"Append records[start:] in order until one does not fit, publishing head\n"
"once at the end.  Returns (number written, wake_needed).  If an item that\n"
"is examined is invalid (not bytes-like, larger than max_record) the call\n"
"raises and nothing is published.");

static PyObject *
Ring_push_many(RingObject *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"records", "start", NULL};
    PyObject *records, *startobj = NULL;
    long long start = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O|O:push_many", kwlist,
                                     &records, &startobj))
        return NULL;
    if (ring_check(self) < 0)
        return NULL;
    if (startobj != NULL && parse_clamped(startobj, &start) < 0)
        return NULL;
    PyObject *seq = PySequence_Fast(records, "records must be a sequence of bytes-like objects");
    if (seq == NULL)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    if (start < 0 || start > n) {
        Py_DECREF(seq);
        PyErr_Format(PyExc_ValueError, "start %lld out of range for %zd records",
                     start, n);
        return NULL;
    }
    PyObject **items = PySequence_Fast_ITEMS(seq);
    const nqr_ring *r = &self->ring;
    uint64_t head = nqr_producer_head(r);
    const uint64_t head0 = head;
    uint64_t tail = nqr_producer_tail(r);
    int tail_refreshed = 0;
    Py_ssize_t i;
    for (i = (Py_ssize_t)start; i < n; i++) {
        Py_buffer view;
        int held;
        const char *data;
        Py_ssize_t len;
        /* items[] is borrowed from seq; the GIL is held throughout and no
         * Python code runs in this loop (bytes need no export at all;
         * other exporters are C types in 3.11). */
        if (item_payload(items[i], &view, &held, &data, &len) < 0)
            goto error;
        if (check_record_len(self, len) < 0) {
            if (held)
                PyBuffer_Release(&view);
            goto error;
        }
        int ok = nqr_write(r, &head, tail, data, (uint32_t)len);
        if (!ok && !tail_refreshed) {
            /* The consumer may have freed space since we started. */
            tail = nqr_producer_tail(r);
            tail_refreshed = 1;
            ok = nqr_write(r, &head, tail, data, (uint32_t)len);
        }
        if (held)
            PyBuffer_Release(&view);
        if (!ok)
            break;
    }
    Py_DECREF(seq);
    Py_ssize_t written = i - (Py_ssize_t)start;
    int wake = 0;
    if (head != head0)
        wake = nqr_publish(r, head);
    return Py_BuildValue("(nO)", written, wake ? Py_True : Py_False);

error:
    Py_DECREF(seq);
    return NULL;
}

PyDoc_STRVAR(Ring_prepare_wait_doc,
"prepare_wait(needed) -> bool\n--\n\n"
"Producer side, after a push of `needed` payload bytes failed: unless\n"
"it fits already, set producer_waiting, fence, re-read tail.  Returns True when it is safe to\n"
"sleep on the producer doorbell; False (flag cleared) when such a record\n"
"fits now.");

static PyObject *
Ring_prepare_wait(RingObject *self, PyObject *arg)
{
    if (ring_check(self) < 0)
        return NULL;
    long long needed;
    if (parse_clamped(arg, &needed) < 0)
        return NULL;
    if (needed < 0) {
        PyErr_SetString(PyExc_ValueError, "needed must be >= 0");
        return NULL;
    }
    if ((unsigned long long)needed > self->ring.max_record) {
        PyErr_Format(PyExc_ValueError,
                     "record of %lld bytes exceeds max_record (%u)",
                     needed, (unsigned)self->ring.max_record);
        return NULL;
    }
    return PyBool_FromLong(nqr_prepare_wait(&self->ring, (uint32_t)needed));
}

PyDoc_STRVAR(Ring_release_if_idle_doc,
"release_if_idle() -> int\n--\n\n"
"Producer side, on a slow timer (never per record): when the ring is empty\n"
"(head == tail) and quiet (less than capacity/32 bytes pushed since the\n"
"previous call; the first call only looks), give the\n"
"data area's whole pages back to the kernel (madvise MADV_REMOVE: the shared\n"
"memory's pages are freed, in every process mapping them).  The page\n"
"holding the header stays, and so do head, tail and the flags.  Returns the\n"
"bytes released: 0 when the ring is not idle, was released already at\n"
"this head, or its buffer is not shared memory (MADV_REMOVE unsupported).");

/*
 * Why this is safe with a consumer running at the same time: the consumer
 * copies a record out (pop, pop_many) before its release store of tail, and
 * we load tail with acquire, so with head == tail every read of consumed
 * bytes happened before the pages go.  With head == tail nothing is left to
 * read (no record, no wrap marker: the consumer only looks at bytes in
 * [tail, head)), and only this producer moves head: a push after the
 * release writes into fresh zero pages, then publishes head as usual.
 */
static PyObject *
Ring_release_if_idle(RingObject *self, PyObject *Py_UNUSED(ignored))
{
    if (ring_check(self) < 0)
        return NULL;
    const nqr_ring *r = &self->ring;
    uint64_t head = nqr_producer_head(r);
    uint64_t last = self->last_head;
    self->last_head = head;
    if (head != nqr_producer_tail(r) || last == NO_HEAD ||
        head - last >= (r->capacity >> QUIET_SHIFT) || head == self->released_head)
        return PyLong_FromLong(0);  /* not empty, busy, or released already */
    self->released_head = head;
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t start = ((uintptr_t)r->data + page - 1) & ~(page - 1);
    uintptr_t end = ((uintptr_t)r->data + r->capacity) & ~(page - 1);
    if (end <= start)
        return PyLong_FromLong(0);
    if (madvise((void *)start, end - start, MADV_REMOVE) != 0) {
        /* a private buffer (bytearray, private mapping): nothing to free */
        if (errno == EINVAL || errno == EOPNOTSUPP || errno == ENOSYS)
            return PyLong_FromLong(0);
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    return PyLong_FromSize_t((size_t)(end - start));
}

/* ------------------------------------------------------------------ */
/* consumer                                                            */
/* ------------------------------------------------------------------ */

PyDoc_STRVAR(Ring_pop_doc,
"pop() -> bytes | None\n--\n\n"
"Remove and return the oldest record, or None if the ring is empty.");

static PyObject *
Ring_pop(RingObject *self, PyObject *Py_UNUSED(ignored))
{
    if (ring_check(self) < 0)
        return NULL;
    const nqr_ring *r = &self->ring;
    uint64_t head = nqr_consumer_head(r);
    uint64_t tail = nqr_consumer_tail(r);
    const unsigned char *p;
    uint32_t len;
    uint64_t next;
    nqr_read_status st = nqr_peek(r, tail, head, &p, &len, &next);
    if (st == NQR_READ_EMPTY)
        Py_RETURN_NONE;
    if (st == NQR_READ_CORRUPT)
        return raise_corrupt();
    PyObject *res = PyBytes_FromStringAndSize((const char *)p, len);
    if (res == NULL)
        return NULL;
    nqr_consume(r, next);
    return res;
}

PyDoc_STRVAR(Ring_pop_many_doc,
"pop_many(max_records=1<<30, max_bytes=1<<62) -> list[bytes]\n--\n\n"
"Remove up to max_records records whose payloads total at most max_bytes\n"
"(at least one record if any is available, whatever its size); tail is\n"
"stored once at the end.");

static PyObject *
Ring_pop_many(RingObject *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"max_records", "max_bytes", NULL};
    PyObject *mrobj = NULL, *mbobj = NULL;
    long long max_records = (long long)1 << 30;
    long long max_bytes = (long long)1 << 62;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|OO:pop_many", kwlist,
                                     &mrobj, &mbobj))
        return NULL;
    if (ring_check(self) < 0)
        return NULL;
    if ((mrobj != NULL && parse_clamped(mrobj, &max_records) < 0) ||
        (mbobj != NULL && parse_clamped(mbobj, &max_bytes) < 0))
        return NULL;
    if (max_records < 0 || max_bytes < 0) {
        PyErr_SetString(PyExc_ValueError, "max_records and max_bytes must be >= 0");
        return NULL;
    }
    PyObject *out = PyList_New(0);
    if (out == NULL)
        return NULL;
    const nqr_ring *r = &self->ring;
    uint64_t head = nqr_consumer_head(r);
    uint64_t tail = nqr_consumer_tail(r);
    const uint64_t tail0 = tail;
    uint64_t total = 0;
    long long count = 0;
    while (count < max_records) {
        const unsigned char *p;
        uint32_t len;
        uint64_t next;
        nqr_read_status st = nqr_peek(r, tail, head, &p, &len, &next);
        if (st == NQR_READ_EMPTY)
            break;
        if (st == NQR_READ_CORRUPT) {
            Py_DECREF(out);
            return raise_corrupt();
        }
        if (count > 0 && total + len > (uint64_t)max_bytes)
            break;
        PyObject *b = PyBytes_FromStringAndSize((const char *)p, len);
        if (b == NULL || PyList_Append(out, b) < 0) {
            Py_XDECREF(b);
            Py_DECREF(out);
            return NULL;
        }
        Py_DECREF(b);
        total += len;
        count++;
        tail = next;
    }
    if (tail != tail0)
        nqr_consume(r, tail);
    return out;
}

PyDoc_STRVAR(Ring_prepare_sleep_doc,
"prepare_sleep() -> bool\n--\n\n"
"Consumer side: unless data is already visible, set consumer_sleeping,\n"
"fence, re-read head.  True when it\n"
"is safe to sleep on the consumer doorbell; False (flag cleared) when data\n"
"is present.");

static PyObject *
Ring_prepare_sleep(RingObject *self, PyObject *Py_UNUSED(ignored))
{
    if (ring_check(self) < 0)
        return NULL;
    return PyBool_FromLong(nqr_prepare_sleep(&self->ring));
}

PyDoc_STRVAR(Ring_take_producer_wakeup_doc,
"take_producer_wakeup() -> bool\n--\n\n"
"Consumer side, after popping: fence, then if producer_waiting is 1 swap\n"
"it to 0 and return True (the caller must ring the producer's doorbell).");

static PyObject *
Ring_take_producer_wakeup(RingObject *self, PyObject *Py_UNUSED(ignored))
{
    if (ring_check(self) < 0)
        return NULL;
    return PyBool_FromLong(nqr_take_producer_wakeup(&self->ring));
}

/* ------------------------------------------------------------------ */
/* properties                                                          */
/* ------------------------------------------------------------------ */

static PyObject *
Ring_get_capacity(RingObject *self, void *Py_UNUSED(closure))
{
    if (ring_check(self) < 0)
        return NULL;
    return PyLong_FromUnsignedLongLong(self->ring.capacity);
}

static PyObject *
Ring_get_max_record(RingObject *self, void *Py_UNUSED(closure))
{
    if (ring_check(self) < 0)
        return NULL;
    return PyLong_FromUnsignedLong(self->ring.max_record);
}

static PyObject *
Ring_get_used(RingObject *self, void *Py_UNUSED(closure))
{
    if (ring_check(self) < 0)
        return NULL;
    return PyLong_FromUnsignedLongLong(nqr_used(&self->ring));
}

static PyObject *
Ring_get_free(RingObject *self, void *Py_UNUSED(closure))
{
    if (ring_check(self) < 0)
        return NULL;
    return PyLong_FromUnsignedLongLong(self->ring.capacity - nqr_used(&self->ring));
}

static PyGetSetDef Ring_getset[] = {
    {"capacity", (getter)Ring_get_capacity, NULL, "data area size in bytes", NULL},
    {"max_record", (getter)Ring_get_max_record, NULL, "largest payload accepted", NULL},
    {"used", (getter)Ring_get_used, NULL, "bytes in use (head - tail)", NULL},
    {"free", (getter)Ring_get_free, NULL, "capacity - used", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMethodDef Ring_methods[] = {
    {"format", (PyCFunction)(void (*)(void))Ring_format,
     METH_VARARGS | METH_KEYWORDS | METH_CLASS, Ring_format_doc},
    {"push", (PyCFunction)Ring_push, METH_O, Ring_push_doc},
    {"push_many", (PyCFunction)(void (*)(void))Ring_push_many,
     METH_VARARGS | METH_KEYWORDS, Ring_push_many_doc},
    {"prepare_wait", (PyCFunction)Ring_prepare_wait, METH_O, Ring_prepare_wait_doc},
    {"release_if_idle", (PyCFunction)Ring_release_if_idle, METH_NOARGS,
     Ring_release_if_idle_doc},
    {"pop", (PyCFunction)Ring_pop, METH_NOARGS, Ring_pop_doc},
    {"pop_many", (PyCFunction)(void (*)(void))Ring_pop_many,
     METH_VARARGS | METH_KEYWORDS, Ring_pop_many_doc},
    {"prepare_sleep", (PyCFunction)Ring_prepare_sleep, METH_NOARGS,
     Ring_prepare_sleep_doc},
    {"take_producer_wakeup", (PyCFunction)Ring_take_producer_wakeup, METH_NOARGS,
     Ring_take_producer_wakeup_doc},
    {"release", (PyCFunction)Ring_release, METH_NOARGS, Ring_release_doc},
    {NULL, NULL, 0, NULL},
};

PyDoc_STRVAR(Ring_doc,
"Ring(buf)\n--\n\n"
"Single-producer/single-consumer record ring over an already formatted\n"
"writable buffer (see native/ring.h for the layout).  Use Ring.format()\n"
"to initialise a buffer.");

static PyTypeObject Ring_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "nsqmp._native.Ring",
    .tp_basicsize = sizeof(RingObject),
    .tp_dealloc = (destructor)Ring_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = Ring_doc,
    .tp_methods = Ring_methods,
    .tp_getset = Ring_getset,
    .tp_new = Ring_new,
};

/* ------------------------------------------------------------------ */
/* module-level functions and registration                             */
/* ------------------------------------------------------------------ */

PyDoc_STRVAR(ring_size_doc,
"ring_size(capacity) -> int\n--\n\n"
"Bytes of buffer needed for a ring with this data capacity (512 + capacity).");

static PyObject *
ring_size(PyObject *Py_UNUSED(module), PyObject *arg)
{
    uint64_t capacity;
    if (parse_capacity(arg, &capacity) < 0)
        return NULL;
    return PyLong_FromUnsignedLongLong(NQR_HEADER_SIZE + capacity);
}

static PyMethodDef ring_functions[] = {
    {"ring_size", (PyCFunction)ring_size, METH_O, ring_size_doc},
    {NULL, NULL, 0, NULL},
};

/* Called from the module exec slot (module.c). */
int
nsqmp_ring_add(PyObject *module)
{
    if (PyType_Ready(&Ring_Type) < 0)
        return -1;
    if (PyModule_AddType(module, &Ring_Type) < 0)
        return -1;
    if (PyModule_AddFunctions(module, ring_functions) < 0)
        return -1;
    if (PyModule_AddIntConstant(module, "RING_HEADER_SIZE", NQR_HEADER_SIZE) < 0)
        return -1;
    return 0;
}
