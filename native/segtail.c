/*
 * segtail.c -- SegmentTail: where an acceptor appends to one topic's segment file,
 * with everything a publish run needs held in one object, so that a publisher's
 * read goes from the connection to the file and back to its OK through one C
 * call: run(buf, pos).  The pure-Python twin is nsqmp/diskqueue/pubrun.py's
 * SegmentTail (same API, same bytes; the tests run both).
 *
 * The tail holds the file's state that the segment writer's general path
 * (nsqmp/diskqueue/segment.py: rolls, growth, DPUB, HTTP) shares with the runs:
 * the descriptor, the append position, the end of the reserved space, the appends
 * not yet synced.  A run also needs the topic, the acceptor's IdGenerator (ids.c,
 * advanced in place), the size limits, and the PUBLISH_AT record of the current
 * file: a copy of `head` with its offset, count and size fields (at the byte
 * offsets `fields`, little-endian u64, u32, u32: nsqmp/ipc/records.py draws the
 * record) filled in, for the caller to queue for the topic's router.
 *
 * Small runs are copied into a shared mapping of the file (a window of `window`
 * bytes of the reserved space, moved on as the file fills: munmap, mmap), longer
 * ones written with one pwrite; segment.py's docstring gives the measurements.
 * If a window cannot be mapped the run is written with pwrite.  Every 
 * sync_every-th append calls on_sync() (the writer's background sync);
 * sync_every 1 syncs before run() returns.
 */
#include "segtail.h"
#include "pubrun.h"

#include <errno.h>
#include <structmember.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "ids.h"

typedef struct {
    PyObject_HEAD
    PyObject *topic;     /* bytes; empty: the tail takes no run */
    PyObject *ids;       /* IdGenerator, or None: no run */
    PyObject *head;      /* bytes: the current file's PUBLISH_AT (fields zero), or None: no run */
    PyObject *on_sync;   /* callable, or None */
    long long fd, pos, end, unsynced, sync_every, max_msg, max_body;
    Py_ssize_t at_offset, at_count, at_size;  /* the fields of head that a run fills in */
    char taking;         /* False while the topic refuses publishes (full) */
    uint8_t *map;        /* the window, or NULL */
    long long map_start, map_len, window;
} Tail;

static void
tail_unmap(Tail *self)
{
    if (self->map != NULL)
        munmap(self->map, (size_t)self->map_len);
    self->map = NULL;
    self->map_start = self->map_len = 0;
}

/* map the reserved space from at's page on (window bytes at most); none if it fails */
static void
tail_remap(Tail *self, long long at)
{
    tail_unmap(self);
    long long page = sysconf(_SC_PAGESIZE);
    long long start = at - at % page;
    long long len = self->end - start < self->window ? self->end - start : self->window;
    if (len <= 0)
        return;
    void *p = mmap(NULL, (size_t)len, PROT_READ | PROT_WRITE, MAP_SHARED, (int)self->fd, (off_t)start);
    if (p == MAP_FAILED)
        return;  /* runs go by pwrite */
    self->map = p;
    self->map_start = start;
    self->map_len = len;
}

static int
tail_init(Tail *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"topic", "ids", "max_msg", "max_body", "fields", "window", NULL};
    PyObject *topic = NULL, *ids = Py_None;
    long long max_msg = 0, max_body = 0, window = 4 << 20;
    Py_ssize_t at_offset = 0, at_count = 0, at_size = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|SOLL(nnn)L", kwlist, &topic, &ids, &max_msg,
                                     &max_body, &at_offset, &at_count, &at_size, &window))
        return -1;
    if (ids != Py_None && !PyObject_TypeCheck(ids, &IdGenType)) {
        PyErr_SetString(PyExc_TypeError, "ids must be nsqmp._native.IdGenerator or None");
        return -1;
    }
    if (window <= 0 || window % sysconf(_SC_PAGESIZE) || at_offset < 0 || at_count < 0 || at_size < 0) {
        PyErr_SetString(PyExc_ValueError, "window must be a positive multiple of the page, fields >= 0");
        return -1;
    }
    if (topic == NULL)
        topic = PyBytes_FromStringAndSize("", 0);
    else
        Py_INCREF(topic);
    if (topic == NULL)
        return -1;
    Py_XSETREF(self->topic, topic);
    Py_INCREF(ids);
    Py_XSETREF(self->ids, ids);
    Py_INCREF(Py_None);
    Py_XSETREF(self->head, Py_None);
    Py_INCREF(Py_None);
    Py_XSETREF(self->on_sync, Py_None);
    self->max_msg = max_msg;
    self->max_body = max_body;
    self->at_offset = at_offset;
    self->at_count = at_count;
    self->at_size = at_size;
    self->window = window;
    self->fd = -1;
    self->pos = self->end = self->unsynced = self->sync_every = 0;
    self->taking = 1;
    tail_unmap(self);
    return 0;
}

static int
tail_traverse(Tail *self, visitproc visit, void *arg)
{
    Py_VISIT(self->topic);
    Py_VISIT(self->ids);
    Py_VISIT(self->head);
    Py_VISIT(self->on_sync);
    return 0;
}

static int
tail_clear(Tail *self)
{
    Py_CLEAR(self->topic);
    Py_CLEAR(self->ids);
    Py_CLEAR(self->head);
    Py_CLEAR(self->on_sync);
    return 0;
}

static void
tail_dealloc(Tail *self)
{
    PyObject_GC_UnTrack(self);
    tail_unmap(self);
    tail_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *
tail_attach(Tail *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "attach() takes 4 positional arguments (fd, pos, end, head)");
        return NULL;
    }
    long long fd = PyLong_AsLongLong(args[0]);
    long long pos = PyLong_AsLongLong(args[1]);
    long long end = PyLong_AsLongLong(args[2]);
    if (PyErr_Occurred())
        return NULL;
    PyObject *head = args[3];
    if (head != Py_None) {
        if (!PyBytes_Check(head)) {
            PyErr_SetString(PyExc_TypeError, "head must be bytes or None");
            return NULL;
        }
        Py_ssize_t n = PyBytes_GET_SIZE(head);
        if (self->at_offset + 8 > n || self->at_count + 4 > n || self->at_size + 4 > n) {
            PyErr_SetString(PyExc_ValueError, "head is shorter than its fields");
            return NULL;
        }
    }
    tail_unmap(self);
    self->fd = fd;
    self->pos = pos;
    self->end = end;
    Py_INCREF(head);
    Py_SETREF(self->head, head);
    Py_RETURN_NONE;
}

static PyObject *
tail_detach(Tail *self, PyObject *Py_UNUSED(ignored))
{
    tail_unmap(self);
    self->fd = -1;
    Py_INCREF(Py_None);
    Py_SETREF(self->head, Py_None);
    Py_RETURN_NONE;
}

static void
put_le(uint8_t *p, uint64_t v, int bytes)
{
    for (int i = 0; i < bytes; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

int
nsqmp_tail_take(PyObject *tail, const uint8_t *data, Py_ssize_t len, Py_ssize_t pos, TailTaken *out)
{
    Tail *self = (Tail *)tail;
    out->end = pos;
    out->commands = out->messages = 0;
    out->record = NULL;
    Py_ssize_t tlen = PyBytes_GET_SIZE(self->topic);
    if (!self->taking || self->fd < 0 || self->head == Py_None || self->ids == Py_None || tlen == 0)
        return 0;
    long long at = self->pos;
    long long win_end = self->map_start + self->map_len;
    if (self->map == NULL || at < self->map_start
        || (win_end - at < PR_MAPPED_MAX && win_end < self->end))
        tail_remap(self, at);
    IdGen *ids = (IdGen *)self->ids;
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    Run *r = pr_start((int64_t)now.tv_sec * 1000000000LL + now.tv_nsec, ids->node, ids->ms, ids->seq,
                      self->end - at);
    Limits lim = {(const uint8_t *)PyBytes_AS_STRING(self->topic), tlen, self->max_msg, self->max_body};
    Taken t = pr_take(r, &lim, data, len, pos);
    if (!t.commands)
        return 0;
    /* the GIL is kept: the scratch run is the process's one */
    if (self->map != NULL && r->len <= PR_MAPPED_MAX && at + (long long)r->len <= self->map_start + self->map_len)
        memcpy(self->map + (at - self->map_start), r->out, r->len);
    else if (pr_write_all((int)self->fd, r->out, r->len, at) < 0) {
        PyErr_SetFromErrno(PyExc_OSError);  /* nothing taken: the ids stay as they were */
        return -1;
    }
    ids->ms = r->ms;
    ids->seq = r->seq;
    self->pos = at + (long long)r->len;
    self->unsynced += 1;
    Py_ssize_t hlen = PyBytes_GET_SIZE(self->head);
    PyObject *record = PyBytes_FromStringAndSize(NULL, hlen);
    if (record == NULL)
        return -1;
    uint8_t *rec = (uint8_t *)PyBytes_AS_STRING(record);
    memcpy(rec, PyBytes_AS_STRING(self->head), (size_t)hlen);
    put_le(rec + self->at_offset, (uint64_t)at, 8);
    put_le(rec + self->at_count, (uint64_t)t.messages, 4);
    put_le(rec + self->at_size, (uint64_t)r->len, 4);
    if (self->sync_every == 1) {  /* strict: the run's OKs wait for its sync */
        int rc, fd = (int)self->fd;
        Py_BEGIN_ALLOW_THREADS
        do {
            rc = fdatasync(fd);
        } while (rc < 0 && errno == EINTR);
        Py_END_ALLOW_THREADS
        if (rc < 0) {
            Py_DECREF(record);
            PyErr_SetFromErrno(PyExc_OSError);
            return -1;
        }
        self->unsynced = 0;
    } else if (self->sync_every > 0 && self->unsynced >= self->sync_every && self->on_sync != NULL
               && self->on_sync != Py_None) {
        PyObject *res = PyObject_CallNoArgs(self->on_sync);
        if (res == NULL) {
            Py_DECREF(record);
            return -1;
        }
        Py_DECREF(res);
    }
    out->end = t.end;
    out->commands = t.commands;
    out->messages = t.messages;
    out->record = record;
    return 0;
}

static PyObject *
tail_run(Tail *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "run() takes 2 positional arguments (buf, pos)");
        return NULL;
    }
    Py_ssize_t pos = PyLong_AsSsize_t(args[1]);
    if (pos == -1 && PyErr_Occurred())
        return NULL;
    Py_buffer buf;
    if (PyObject_GetBuffer(args[0], &buf, PyBUF_SIMPLE) < 0)
        return NULL;
    if (pos < 0 || pos > buf.len) {
        PyBuffer_Release(&buf);
        PyErr_SetString(PyExc_ValueError, "pos outside the buffer");
        return NULL;
    }
    TailTaken t;
    int rc = nsqmp_tail_take((PyObject *)self, buf.buf, buf.len, pos, &t);
    PyBuffer_Release(&buf);
    if (rc < 0)
        return NULL;
    if (t.record == NULL)
        return Py_BuildValue("(niiO)", pos, 0, 0, Py_None);
    return Py_BuildValue("(nLLN)", t.end, t.commands, t.messages, t.record);
}

static PyMethodDef tail_methods[] = {
    {"attach", (PyCFunction)(void (*)(void))tail_attach, METH_FASTCALL,
     "attach(fd, pos, end, head)\n--\n\nAppend to the file fd from pos, up to end (the reserved "
     "space); head: its PUBLISH_AT record, or None (no run). Unmaps the window."},
    {"detach", (PyCFunction)tail_detach, METH_NOARGS,
     "detach()\n--\n\nNo file (fd -1): runs take nothing. Unmaps the window."},
    {"run", (PyCFunction)(void (*)(void))tail_run, METH_FASTCALL,
     "run(buf, pos) -> (end, commands, messages, record)\n--\n\n"
     "Append the PUB/MPUB commands for the topic from buf[pos:] (as pub_run takes them) at "
     "pos, and return where the first command not taken starts, the commands and messages "
     "taken, and the PUBLISH_AT record for them (None when none was taken). Raises OSError "
     "if the write (or a strict sync) fails."},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef tail_members[] = {
    {"topic", T_OBJECT, offsetof(Tail, topic), READONLY, "the topic a run takes"},
    {"ids", T_OBJECT, offsetof(Tail, ids), READONLY, "the IdGenerator a run advances"},
    {"head", T_OBJECT, offsetof(Tail, head), READONLY, "the current file's PUBLISH_AT (fields zero), or None"},
    {"on_sync", T_OBJECT, offsetof(Tail, on_sync), 0, "called when sync_every appends are unsynced"},
    {"fd", T_LONGLONG, offsetof(Tail, fd), READONLY, "the file's descriptor, -1 for none"},
    {"pos", T_LONGLONG, offsetof(Tail, pos), 0, "where the next append goes"},
    {"end", T_LONGLONG, offsetof(Tail, end), 0, "where the space a run may write ends"},
    {"unsynced", T_LONGLONG, offsetof(Tail, unsynced), 0, "appends since the last sync"},
    {"sync_every", T_LONGLONG, offsetof(Tail, sync_every), 0, "appends between syncs (0: none; 1: each)"},
    {"taking", T_BOOL, offsetof(Tail, taking), 0, "False: runs take nothing (the topic is full)"},
    {"window_start", T_LONGLONG, offsetof(Tail, map_start), READONLY, "the file offset of the window"},
    {"window_len", T_LONGLONG, offsetof(Tail, map_len), READONLY, "the window's bytes (0: none)"},
    {NULL, 0, 0, 0, NULL},
};

PyTypeObject nsqmp_SegmentTail_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "nsqmp._native.SegmentTail",
    .tp_basicsize = sizeof(Tail),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "SegmentTail(topic=b'', ids=None, max_msg=0, max_body=0, fields=(0, 0, 0), window=4 MiB)\n--\n\n"
              "Where an acceptor appends to a topic's segment file; run() takes a publish run.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)tail_init,
    .tp_dealloc = (destructor)tail_dealloc,
    .tp_traverse = (traverseproc)tail_traverse,
    .tp_clear = (inquiry)tail_clear,
    .tp_methods = tail_methods,
    .tp_members = tail_members,
};

int
nsqmp_segtail_add(PyObject *module)
{
    if (PyType_Ready(&nsqmp_SegmentTail_Type) < 0)
        return -1;
    Py_INCREF(&nsqmp_SegmentTail_Type);
    if (PyModule_AddObject(module, "SegmentTail", (PyObject *)&nsqmp_SegmentTail_Type) < 0) {
        Py_DECREF(&nsqmp_SegmentTail_Type);
        return -1;
    }
    return 0;
}
