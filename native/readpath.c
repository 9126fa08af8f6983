/*
 * readpath.c -- ReadPath, the base of an acceptor's V2Connection: what the
 * event loop calls with every read (data_received), in C, so that the two reads
 * a busy broker sees most go from the socket to their work without a Python
 * frame in between:
 *
 *   - a publisher's read that starts with PUB/MPUBs on the topic of its last
 *     publish: the segment tail's run (segtail.h) from the read itself, then
 *     its OKs (the publisher waits for them: nothing else goes first), its
 *     PUBLISH_AT to the topic's router, the producer's count and the
 *     acceptor's note of the publish;
 *   - a consumer's read that starts with plain FIN lines: the IDs in one call
 *     of the parser's fins(), handed to the connection's _send_fins.
 *
 * Whatever else the read holds (or all of it, when neither applies) joins the
 * connection's buffer and its parse loop, process(), as before.  The
 * pure-Python twin, and the reference, is nsqmp/acceptor/pyreadpath.py's
 * ReadPath: same calls, in the same order, with the same arguments (the tests
 * drive both).
 *
 * The connection's state that the read path reads lives in this struct, as
 * members under the attribute names the Python code uses (buf, state, closed,
 * ...): the subclass's code reads and writes them as attributes, and the read
 * path reads them without a dictionary lookup.  What the read path needs from
 * the connection's module (the states, the OK frame, the size from which a run
 * first lets deliveries out) is given once by ReadPath.configure().
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <string.h>
#include <time.h>

#include "segtail.h"

typedef struct {
    PyObject_HEAD
    PyObject *buf;          /* bytearray: what the parse loop has not taken yet */
    PyObject *decode;       /* the stream's decompressor, or None */
    PyObject *encode;       /* its compressor, or None */
    PyObject *waiting_for;  /* str: what parsing waits for, or "" */
    PyObject *pubs;         /* _pubs: PUB/DPUBs of this read not yet published, or None */
    PyObject *run_tail;     /* _run_tail: the SegmentTail of the last publish's topic, or None */
    PyObject *run_topic;    /* _run_topic: its topic */
    PyObject *transport;
    PyObject *pub_counts;   /* dict: messages published per topic */
    PyObject *send_now;     /* _send_now(slot, record): a run's PUBLISH_AT for its router */
    PyObject *busy_touch;   /* _busy_touch(): work came (busy polling) */
    PyObject *published;    /* _published(conn): the acceptor's note after a publish */
    PyObject *fins_of;      /* _fins_of(buf, pos) -> (ids, end): the parser's fins */
    double last_read;       /* time.monotonic() of the last read */
    int state;
    int run_slot;           /* _run_slot: the ring slot of the run topic's router */
    char closed, magic_ok, tls, tls_required;
} ReadPath;

/* ReadPath.configure(): the connection module's constants */
static int state_init = -1, fin_state_a = -1, fin_state_b = -1;
static Py_ssize_t deliver_first = 0;
static PyObject *ok_frame = NULL;  /* bytes */

static PyObject *str_process, *str_send_fins, *str_decode_read, *str_host, *str_deliver_waiting,
    *str_write, *str_pub_run;

static int
starts_with(const char *p, Py_ssize_t n, const char *head)
{
    size_t h = strlen(head);
    return (size_t)n >= h && memcmp(p, head, h) == 0;
}

/* o is true; an object whose truth cannot be told counts as true (the slow path) */
static int
is_truthy(PyObject *o)
{
    if (o == NULL || o == Py_None)
        return 0;
    int t = PyObject_IsTrue(o);
    if (t < 0)
        PyErr_Clear();
    return t != 0;
}

static double
monotonic(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);  /* time.monotonic()'s clock */
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static PyObject *
call_or_none(PyObject *f)
{
    if (f == NULL || f == Py_None)
        Py_RETURN_NONE;
    return PyObject_CallNoArgs(f);
}

/* What the connection's write(data) does: nothing once closed, through the
 * stream's compressor if any (then write() itself, which has it). */
static int
write_frames(ReadPath *self, PyObject *frames)
{
    if (self->closed || self->transport == NULL || self->transport == Py_None)
        return 0;
    PyObject *res = self->encode != NULL && self->encode != Py_None
        ? PyObject_CallMethodOneArg((PyObject *)self, str_write, frames)
        : PyObject_CallMethodOneArg(self->transport, str_write, frames);
    if (res == NULL)
        return -1;
    Py_DECREF(res);
    return 0;
}

/* The publisher's run at the start of data (pub_run in pyreadpath.py): where the
 * first command not taken starts in *end (0: none taken); -1 with an exception. */
static int
pub_run(ReadPath *self, const char *p, Py_ssize_t n, Py_ssize_t *end)
{
    *end = 0;
    if (n > deliver_first) {  /* a big MPUB: what consumers wait for goes first */
        PyObject *host = PyObject_GetAttr((PyObject *)self, str_host);
        if (host == NULL)
            return -1;
        PyObject *res = PyObject_CallMethodNoArgs(host, str_deliver_waiting);
        Py_DECREF(host);
        if (res == NULL)
            return -1;
        Py_DECREF(res);
    }
    TailTaken t;
    if (nsqmp_tail_take(self->run_tail, (const uint8_t *)p, n, 0, &t) < 0) {
        if (PyErr_ExceptionMatches(PyExc_OSError)) {  /* the handler writes it again and answers the error */
            PyErr_Clear();
            return 0;
        }
        return -1;
    }
    if (t.record == NULL)
        return 0;
    *end = t.end;
    int rc = -1;
    PyObject *ok = NULL, *res = NULL, *count = NULL, *sum = NULL;
    PyObject *slot = PyLong_FromLong(self->run_slot);
    if (slot == NULL)
        goto done;
    ok = t.commands == 1 ? Py_NewRef(ok_frame) : PySequence_Repeat(ok_frame, (Py_ssize_t)t.commands);
    if (ok == NULL || write_frames(self, ok) < 0)
        goto done;
    PyObject *args[2] = {slot, t.record};
    res = PyObject_Vectorcall(self->send_now, args, 2, NULL);
    if (res == NULL)
        goto done;
    Py_CLEAR(res);
    /* pub_counts[topic] = pub_counts.get(topic, 0) + messages */
    PyObject *before = PyDict_GetItemWithError(self->pub_counts, self->run_topic);
    if (before == NULL && PyErr_Occurred())
        goto done;
    count = PyLong_FromLongLong(t.messages);
    if (count == NULL)
        goto done;
    sum = before == NULL ? Py_NewRef(count) : PyNumber_Add(before, count);
    if (sum == NULL || PyDict_SetItem(self->pub_counts, self->run_topic, sum) < 0)
        goto done;
    res = PyObject_CallOneArg(self->published, (PyObject *)self);
    if (res == NULL)
        goto done;
    rc = 0;
done:
    Py_XDECREF(res);
    Py_XDECREF(sum);
    Py_XDECREF(count);
    Py_XDECREF(ok);
    Py_XDECREF(slot);
    Py_DECREF(t.record);
    return rc;
}

/* _pub_run(data, 0), the connection's own method: for a tail that is not a native one */
static int
py_pub_run(ReadPath *self, PyObject *data, Py_ssize_t *end)
{
    PyObject *zero = PyLong_FromLong(0);
    if (zero == NULL)
        return -1;
    PyObject *args[3] = {(PyObject *)self, data, zero};
    PyObject *res = PyObject_VectorcallMethod(str_pub_run, args, 3 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
    Py_DECREF(zero);
    if (res == NULL)
        return -1;
    *end = PyLong_AsSsize_t(res);
    Py_DECREF(res);
    return *end == -1 && PyErr_Occurred() ? -1 : 0;
}

/* The consumer's FIN lines at the start of data: where they end in *end (0: none). */
static int
fin_run(ReadPath *self, PyObject *data, Py_ssize_t *end)
{
    *end = 0;
    PyObject *zero = PyLong_FromLong(0);
    if (zero == NULL)
        return -1;
    PyObject *args[2] = {data, zero};
    PyObject *res = PyObject_Vectorcall(self->fins_of, args, 2, NULL);
    Py_DECREF(zero);
    if (res == NULL)
        return -1;
    Py_ssize_t stop = 0;
    PyObject *ids = NULL;
    if (!PyTuple_Check(res) || PyTuple_GET_SIZE(res) != 2
        || ((stop = PyLong_AsSsize_t(PyTuple_GET_ITEM(res, 1))) == -1 && PyErr_Occurred())) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_TypeError, "fins() must return (ids, end)");
        Py_DECREF(res);
        return -1;
    }
    ids = PyTuple_GET_ITEM(res, 0);
    int has = PyObject_IsTrue(ids);
    if (has == 1) {
        PyObject *sent = PyObject_CallMethodOneArg((PyObject *)self, str_send_fins, ids);
        if (sent == NULL) {
            Py_DECREF(res);
            return -1;
        }
        Py_DECREF(sent);
        *end = stop;
    }
    Py_DECREF(res);
    return has < 0 ? -1 : 0;
}

/* buf += data[start:]; then the parse loop */
static PyObject *
feed(ReadPath *self, PyObject *data, Py_ssize_t start)
{
    if (self->buf == NULL || !PyByteArray_Check(self->buf)) {
        PyErr_SetString(PyExc_TypeError, "buf must be a bytearray");
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(data, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    Py_ssize_t old = PyByteArray_GET_SIZE(self->buf), add = view.len - start;
    if (add > 0) {
        if (PyByteArray_Resize(self->buf, old + add) < 0) {
            PyBuffer_Release(&view);
            return NULL;
        }
        memcpy(PyByteArray_AS_STRING(self->buf) + old, (const char *)view.buf + start, (size_t)add);
    }
    PyBuffer_Release(&view);
    return PyObject_CallMethodNoArgs((PyObject *)self, str_process);
}

PyDoc_STRVAR(data_received_doc,
"data_received(data)\n--\n\n"
"A read from the socket: a publisher's run or a consumer's FINs at its start are taken\n"
"from the read itself; the rest joins buf and the parse loop (process()).");

static PyObject *
rp_data_received(ReadPath *self, PyObject *data)
{
    if (ok_frame == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "ReadPath.configure() was not called");
        return NULL;
    }
    PyObject *result = NULL;
    Py_INCREF(data);
    if (self->decode != NULL && self->decode != Py_None) {
        PyObject *plain = PyObject_CallMethodOneArg((PyObject *)self, str_decode_read, data);
        Py_DECREF(data);
        if (plain == NULL)
            return NULL;
        if (plain == Py_None)  /* undecodable: the connection is closed */
            return plain;
        data = plain;
    }
    self->last_read = monotonic();
    if (!PyBytes_Check(data)) {  /* a decoder's bytearray, say: no fast path */
        result = feed(self, data, 0);
        Py_DECREF(data);
        return result;
    }
    const char *p = PyBytes_AS_STRING(data);
    Py_ssize_t n = PyBytes_GET_SIZE(data), end = 0;
    int quiet = PyByteArray_Check(self->buf) && PyByteArray_GET_SIZE(self->buf) == 0
        && (self->pubs == NULL || self->pubs == Py_None) && !is_truthy(self->waiting_for) && !self->closed;
    if (self->state == state_init) {
        /* a publisher waits for our answer, and sends again soon after it: be awake then
         * (noted as the read came: the poll's window is judged by when work arrives) */
        PyObject *res = call_or_none(self->busy_touch);
        if (res == NULL)
            goto done;
        Py_DECREF(res);
        if (quiet && self->run_tail != NULL && self->run_tail != Py_None
            && (starts_with(p, n, "PUB ") || starts_with(p, n, "MPUB "))) {
            if (Py_IS_TYPE(self->run_tail, &nsqmp_SegmentTail_Type)) {
                if (pub_run(self, p, n, &end) < 0)
                    goto done;
            } else if (py_pub_run(self, data, &end) < 0) {  /* another tail: the method's run */
                goto done;
            }
        }
    } else if ((self->state == fin_state_a || self->state == fin_state_b) && quiet && self->magic_ok
               && !(self->tls_required && !self->tls) && starts_with(p, n, "FIN ")
               && self->fins_of != NULL && self->fins_of != Py_None) {
        if (fin_run(self, data, &end) < 0)
            goto done;
    }
    if (end > 0 && (end >= n || self->closed)) {
        result = Py_NewRef(Py_None);
        goto done;
    }
    result = feed(self, data, end);
done:
    Py_DECREF(data);
    return result;
}

PyDoc_STRVAR(configure_doc,
"configure(state_init, fin_states, ok_frame, deliver_first)\n--\n\n"
"The connection module's constants, once: the state of a connection that has not\n"
"subscribed, the two states in which FIN is allowed, the OK frame, and the read size\n"
"above which a run first lets the routers' waiting deliveries out.");

static PyObject *
rp_configure(PyObject *Py_UNUSED(cls), PyObject *args)
{
    PyObject *ok;
    int init, a, b;
    Py_ssize_t first;
    if (!PyArg_ParseTuple(args, "i(ii)Sn:configure", &init, &a, &b, &ok, &first))
        return NULL;
    state_init = init;
    fin_state_a = a;
    fin_state_b = b;
    deliver_first = first;
    Py_INCREF(ok);
    Py_XSETREF(ok_frame, ok);
    Py_RETURN_NONE;
}

static int
rp_traverse(ReadPath *self, visitproc visit, void *arg)
{
    Py_VISIT(self->buf);
    Py_VISIT(self->decode);
    Py_VISIT(self->encode);
    Py_VISIT(self->waiting_for);
    Py_VISIT(self->pubs);
    Py_VISIT(self->run_tail);
    Py_VISIT(self->run_topic);
    Py_VISIT(self->transport);
    Py_VISIT(self->pub_counts);
    Py_VISIT(self->send_now);
    Py_VISIT(self->busy_touch);
    Py_VISIT(self->published);
    Py_VISIT(self->fins_of);
    return 0;
}

static int
rp_clear(ReadPath *self)
{
    Py_CLEAR(self->buf);
    Py_CLEAR(self->decode);
    Py_CLEAR(self->encode);
    Py_CLEAR(self->waiting_for);
    Py_CLEAR(self->pubs);
    Py_CLEAR(self->run_tail);
    Py_CLEAR(self->run_topic);
    Py_CLEAR(self->transport);
    Py_CLEAR(self->pub_counts);
    Py_CLEAR(self->send_now);
    Py_CLEAR(self->busy_touch);
    Py_CLEAR(self->published);
    Py_CLEAR(self->fins_of);
    return 0;
}

static void
rp_dealloc(ReadPath *self)
{
    PyObject_GC_UnTrack(self);
    rp_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMethodDef rp_methods[] = {
    {"data_received", (PyCFunction)rp_data_received, METH_O, data_received_doc},
    {"configure", (PyCFunction)rp_configure, METH_VARARGS | METH_CLASS, configure_doc},
    {NULL, NULL, 0, NULL},
};

#define M(name, type, field) {name, type, offsetof(ReadPath, field), 0, NULL}
static PyMemberDef rp_members[] = {
    M("buf", T_OBJECT, buf),
    M("decode", T_OBJECT, decode),
    M("encode", T_OBJECT, encode),
    M("waiting_for", T_OBJECT, waiting_for),
    M("_pubs", T_OBJECT, pubs),
    M("_run_tail", T_OBJECT, run_tail),
    M("_run_topic", T_OBJECT, run_topic),
    M("transport", T_OBJECT, transport),
    M("pub_counts", T_OBJECT, pub_counts),
    M("_send_now", T_OBJECT, send_now),
    M("_busy_touch", T_OBJECT, busy_touch),
    M("_published", T_OBJECT, published),
    M("_fins_of", T_OBJECT, fins_of),
    M("last_read", T_DOUBLE, last_read),
    M("state", T_INT, state),
    M("_run_slot", T_INT, run_slot),
    M("closed", T_BOOL, closed),
    M("magic_ok", T_BOOL, magic_ok),
    M("tls", T_BOOL, tls),
    M("_tls_required", T_BOOL, tls_required),
    {NULL, 0, 0, 0, NULL},
};
#undef M

static PyTypeObject ReadPathType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "nsqmp._native.ReadPath",
    .tp_basicsize = sizeof(ReadPath),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "The base of a V2 connection: data_received in C (see native/readpath.c).",
    .tp_new = PyType_GenericNew,
    .tp_dealloc = (destructor)rp_dealloc,
    .tp_traverse = (traverseproc)rp_traverse,
    .tp_clear = (inquiry)rp_clear,
    .tp_methods = rp_methods,
    .tp_members = rp_members,
};

int
nsqmp_readpath_add(PyObject *module)
{
    str_process = PyUnicode_InternFromString("process");
    str_send_fins = PyUnicode_InternFromString("_send_fins");
    str_decode_read = PyUnicode_InternFromString("_decode_read");
    str_host = PyUnicode_InternFromString("host");
    str_deliver_waiting = PyUnicode_InternFromString("deliver_waiting");
    str_write = PyUnicode_InternFromString("write");
    str_pub_run = PyUnicode_InternFromString("_pub_run");
    if (!str_pub_run || !str_process || !str_send_fins || !str_decode_read || !str_host || !str_deliver_waiting || !str_write)
        return -1;
    if (PyType_Ready(&ReadPathType) < 0)
        return -1;
    Py_INCREF(&ReadPathType);
    if (PyModule_AddObject(module, "ReadPath", (PyObject *)&ReadPathType) < 0) {
        Py_DECREF(&ReadPathType);
        return -1;
    }
    return 0;
}
