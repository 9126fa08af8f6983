/*
 * flight.c -- nsqmp._native.Flight: the struct of flight.h as a Python type
 * (fields read and written as attributes, like the slots of a dataclass).
 * Added to the module by nsqmp_inflight_add (inflight.c), its only reader.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stddef.h>
#include <structmember.h>

#include "flight.h"

static PyObject *
Flight_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"token", "consumer", "deadline", "delivered", "live", "members", NULL};
    long long deadline, delivered;
    Py_ssize_t live = 0;
    PyObject *token_obj, *consumer, *members = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOLL|nO:Flight", kwlist, &token_obj, &consumer, &deadline,
                                     &delivered, &live, &members))
        return NULL;
    unsigned long long token = PyLong_AsUnsignedLongLong(token_obj);
    if (token == (unsigned long long)-1 && PyErr_Occurred())
        return NULL;
    nsqmp_Flight *self = (nsqmp_Flight *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->members = members != NULL && members != Py_None ? Py_NewRef(members) : PyList_New(0);
    if (self->members == NULL) {
        Py_DECREF(self);
        return NULL;
    }
    self->token = token;
    self->consumer = Py_NewRef(consumer);
    self->deadline = deadline;
    self->delivered = delivered;
    self->live = live;
    return (PyObject *)self;
}

static int
Flight_traverse(nsqmp_Flight *self, visitproc visit, void *arg)
{
    Py_VISIT(self->consumer);
    Py_VISIT(self->members);
    return 0;
}

static int
Flight_clear(nsqmp_Flight *self)
{
    Py_CLEAR(self->consumer);
    Py_CLEAR(self->members);
    return 0;
}

static void
Flight_dealloc(nsqmp_Flight *self)
{
    PyObject_GC_UnTrack(self);
    Flight_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *
Flight_repr(nsqmp_Flight *self)
{
    return PyUnicode_FromFormat("Flight(token=%llu, consumer=%R, deadline=%lld, delivered=%lld, live=%zd)",
                                self->token, self->consumer ? self->consumer : Py_None, self->deadline,
                                self->delivered, self->live);
}

/* consumer and members are T_OBJECT_EX: never NULL after the constructor, and
 * "del flight.consumer" (which would make them so) is refused below. */
static PyMemberDef Flight_members[] = {
    {"token", T_ULONGLONG, offsetof(nsqmp_Flight, token), 0, "its timer entry"},
    {"consumer", T_OBJECT_EX, offsetof(nsqmp_Flight, consumer), 0, "the Consumer it went to"},
    {"deadline", T_LONGLONG, offsetof(nsqmp_Flight, deadline), 0, "CLOCK_MONOTONIC ns"},
    {"delivered", T_LONGLONG, offsetof(nsqmp_Flight, delivered), 0, "CLOCK_MONOTONIC ns of the delivery"},
    {"live", T_PYSSIZET, offsetof(nsqmp_Flight, live), 0, "members still in this flight"},
    {"members", T_OBJECT_EX, offsetof(nsqmp_Flight, members), 0,
     "what it went out with, flat: Message, attempts, Message, attempts, ..."},
    {NULL, 0, 0, 0, NULL},
};

static int
Flight_setattro(PyObject *self, PyObject *name, PyObject *value)
{
    if (value == NULL) {
        PyErr_Format(PyExc_AttributeError, "cannot delete attribute %R of a Flight", name);
        return -1;
    }
    return PyObject_GenericSetAttr(self, name, value);
}

PyDoc_STRVAR(Flight_doc,
"Flight(token, consumer, deadline, delivered, live=0, members=None)\n--\n\n"
"The messages one delivery pass handed to one consumer: one deadline, one\n"
"timer entry (native/flight.h; members None: a new empty list).");

PyTypeObject nsqmp_Flight_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "nsqmp._native.Flight",
    .tp_basicsize = sizeof(nsqmp_Flight),
    .tp_dealloc = (destructor)Flight_dealloc,
    .tp_repr = (reprfunc)Flight_repr,
    .tp_setattro = Flight_setattro,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = Flight_doc,
    .tp_traverse = (traverseproc)Flight_traverse,
    .tp_clear = (inquiry)Flight_clear,
    .tp_members = Flight_members,
    .tp_new = Flight_new,
};
