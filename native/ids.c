/*
 * ids.c -- IdGenerator: message IDs as nsqd makes them, in C, so that the segment
 * tail (segtail.c) mints them from the same state without a Python call.  The
 * reference, and the twin when the extension is not used, is
 * nsqmp/protocol/ids.py (its docstring gives the scheme); the tests run both.
 */
#include "ids.h"

#include <structmember.h>
#include <time.h>

#include "pubrun.h"

static int
idgen_init(IdGen *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"node", NULL};
    long long node;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "L", kwlist, &node))
        return -1;
    self->node = node & 0x3FF;
    self->ms = 0;
    self->seq = 0;
    return 0;
}

static PyObject *
idgen_next_block(IdGen *self, PyObject *arg)
{
    long long count = PyLong_AsLongLong(arg);
    if (count == -1 && PyErr_Occurred())
        return NULL;
    if (count <= 0 || count > PR_SEQ_MAX) {
        PyErr_SetString(PyExc_ValueError, "1 to 4096 IDs per block");
        return NULL;
    }
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    long long ms = ((long long)now.tv_sec * 1000000000LL + now.tv_nsec) / 1000000 - PR_EPOCH_MS;
    if (ms > self->ms) {
        self->ms = ms;
        self->seq = 0;
    }
    if (self->seq + count > PR_SEQ_MAX) {
        self->ms += 1;
        self->seq = 0;
    }
    unsigned long long first = ((unsigned long long)self->ms << 22) | ((unsigned long long)self->node << 12)
                               | (unsigned long long)self->seq;
    self->seq += count;
    return PyLong_FromUnsignedLongLong(first);
}

static PyMethodDef idgen_methods[] = {
    {"next_block", (PyCFunction)idgen_next_block, METH_O,
     "next_block(count) -> int\n--\n\nReserve count (1..4096) consecutive IDs; returns the first of them."},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef idgen_members[] = {
    {"node", T_LONGLONG, offsetof(IdGen, node), READONLY, "this generator's node (10 bits)"},
    {"ms", T_LONGLONG, offsetof(IdGen, ms), 0, "the millisecond of the last ID"},
    {"seq", T_LONGLONG, offsetof(IdGen, seq), 0, "how many of that millisecond's IDs are taken"},
    {NULL, 0, 0, 0, NULL},
};

PyTypeObject IdGenType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "nsqmp._native.IdGenerator",
    .tp_basicsize = sizeof(IdGen),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "IdGenerator(node)\n--\n\nMessage IDs: 64-bit snowflakes (ms, node, sequence), as nsqd makes them.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)idgen_init,
    .tp_methods = idgen_methods,
    .tp_members = idgen_members,
};

int
nsqmp_ids_add(PyObject *module)
{
    if (PyType_Ready(&IdGenType) < 0)
        return -1;
    Py_INCREF(&IdGenType);
    if (PyModule_AddObject(module, "IdGenerator", (PyObject *)&IdGenType) < 0) {
        Py_DECREF(&IdGenType);
        return -1;
    }
    return 0;
}
