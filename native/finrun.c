/*
 * finrun.c -- a FIN record's file accounting (drawn in finrun.h).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "finrun.h"
#include "layouts.h"

static PyObject *str_refs, *str_acked, *str_acceptor, *str_seq;

static int
names_ready(void)
{
    if (str_refs != NULL)
        return 0;
    str_refs = PyUnicode_InternFromString("refs");
    str_acked = PyUnicode_InternFromString("acked");
    str_acceptor = PyUnicode_InternFromString("acceptor");
    str_seq = PyUnicode_InternFromString("seq");
    return str_refs && str_acked && str_acceptor && str_seq ? 0 : -1;
}

static void
put_le(uint8_t *p, uint64_t v, int n)
{
    for (int i = 0; i < n; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

/* The integer attribute `name` of o; -1 with an exception (a value of -1 is
 * told apart by PyErr_Occurred). */
static long long
get_int(PyObject *o, PyObject *name)
{
    PyObject *v = PyObject_GetAttr(o, name);
    if (v == NULL)
        return -1;
    long long x = PyLong_AsLongLong(v);
    Py_DECREF(v);
    return x;
}

/* o.name += delta; the new value in *now.  -1 with an exception. */
static int
add_int(PyObject *o, PyObject *name, Py_ssize_t delta, long long *now)
{
    long long x = get_int(o, name);
    if (x == -1 && PyErr_Occurred())
        return -1;
    x += delta;
    PyObject *v = PyLong_FromLongLong(x);
    if (v == NULL)
        return -1;
    int rc = PyObject_SetAttr(o, name, v);
    Py_DECREF(v);
    if (now != NULL)
        *now = x;
    return rc;
}

int
finrun_open(finrun_t *r, PyObject *acks, PyObject *drained, unsigned channel)
{
    r->acks = r->drained = r->segment = NULL;
    r->used = r->count = 0;
    if (!PyByteArray_Check(acks) || !PyList_Check(drained)) {
        PyErr_SetString(PyExc_TypeError, "acks must be a bytearray and drained a list");
        return -1;
    }
    if (names_ready() < 0)
        return -1;
    r->acks = acks;
    r->drained = drained;
    r->channel = channel;
    return 0;
}

/* The gathered entries appended to acks (one resize: the bytearray grows with
 * headroom, so a run of appends reallocates rarely). */
static int
flush_batch(finrun_t *r)
{
    if (r->used == 0)
        return 0;
    Py_ssize_t at = PyByteArray_GET_SIZE(r->acks), n = r->used * NQL_ACK_ENTRY;
    r->used = 0;
    if (PyByteArray_Resize(r->acks, at + n) < 0)
        return -1;
    memcpy(PyByteArray_AS_STRING(r->acks) + at, r->batch, (size_t)n);
    return 0;
}

/* The open run's counts written to its segment. */
static int
settle(finrun_t *r)
{
    PyObject *seg = r->segment;
    if (seg == NULL)
        return 0;
    r->segment = NULL;
    long long refs;
    if (add_int(seg, str_refs, -r->count, &refs) < 0)
        return -1;
    if (r->channel != 0 && add_int(seg, str_acked, r->count, NULL) < 0)
        return -1;
    if (refs <= 0 && refs + r->count > 0)
        return PyList_Append(r->drained, seg);
    return 0;
}

int
finrun_add(finrun_t *r, PyObject *segment, long long offset)
{
    if (segment != r->segment) {
        if (settle(r) < 0)
            return -1;
        if (r->channel != 0) {
            long long acceptor = get_int(segment, str_acceptor);
            if (acceptor == -1 && PyErr_Occurred())
                return -1;
            long long seq = get_int(segment, str_seq);
            if (seq == -1 && PyErr_Occurred())
                return -1;
            put_le(r->head, r->channel, 2);
            put_le(r->head + NQL_ACK_ACCEPTOR_AT, (uint64_t)acceptor, 2);
            put_le(r->head + NQL_ACK_SEQ_AT, (uint64_t)seq, 4);
        }
        r->segment = segment;
        r->count = 0;
    }
    r->count++;
    if (r->channel != 0) {
        if (r->used == FINRUN_BATCH && flush_batch(r) < 0)
            return -1;
        uint8_t *e = r->batch + r->used * NQL_ACK_ENTRY;
        memcpy(e, r->head, 8);
        put_le(e + 8, (uint64_t)offset, 8);
        r->used++;
    }
    return 0;
}

int
finrun_close(finrun_t *r)
{
    if (r->acks == NULL)
        return 0;
    /* after an error of the loop too: the messages taken so far left the map, so their
     * references and entries are settled; that error is the one raised */
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    int rc = settle(r);
    if (flush_batch(r) < 0)
        rc = -1;
    if (type != NULL) {
        PyErr_Clear();
        PyErr_Restore(type, value, tb);
    }
    r->acks = NULL;
    return rc;
}
