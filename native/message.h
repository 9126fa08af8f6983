/*
 * message.h -- the router's Message (bindings in readback.c; pure-Python twin
 * in nsqmp/router/pyreadback.py), shared with inflight.c, which reads its id,
 * segment and offset straight from the struct.
 *
 * One allocation per message: the id and the body live in the object itself
 * (a million queued 200-byte messages are one object each, not three).  id and
 * body are read-only; reading them from Python makes a bytes copy.
 *
 *   PyObject_VAR_HEAD (ob_size = body length) | segment * | ts | offset |
 *   id[16] | body[ob_size]
 *
 * A Message compares and hashes by identity and is not tracked by the cycle
 * collector: it refers only to its segment (a router Segment, which never
 * refers back to messages), so it cannot be part of a reference cycle in the
 * router.  That keeps millions of queued messages out of every collection.
 */
#ifndef NSQMP_MESSAGE_H
#define NSQMP_MESSAGE_H

#include <Python.h>
#include <stdint.h>

#include "layouts.h"

typedef struct {
    PyObject_VAR_HEAD
    PyObject *segment;  /* the Segment whose refs count this message, or None */
    long long ts;       /* ns */
    long long offset;   /* of its record in the segment */
    uint8_t id[NQL_ID];
    char body[];        /* ob_size bytes */
} nsqmp_Message;

extern PyTypeObject nsqmp_Message_Type;

#define NSQMP_MESSAGE_CHECK(o) Py_IS_TYPE((o), &nsqmp_Message_Type)

/* A new Message (a copy of id and body); NULL with an exception. */
PyObject *nsqmp_message_new(const uint8_t *id, long long ts, const char *body, Py_ssize_t body_len,
                            PyObject *segment, long long offset);

/* A new (message, number) tuple, with a new reference to message; NULL with an
 * exception.  When message is a Message the tuple is untracked at once: it can
 * be part of no cycle, and the queue entries and frames a router makes by the
 * million would otherwise each be walked by the next young collection (which
 * untracks such a tuple only when it first sees it). */
static inline PyObject *
nsqmp_message_pair(PyObject *message, long long number)
{
    PyObject *count = PyLong_FromLongLong(number);
    if (count == NULL)
        return NULL;
    PyObject *pair = PyTuple_New(2);
    if (pair == NULL) {
        Py_DECREF(count);
        return NULL;
    }
    Py_INCREF(message);
    PyTuple_SET_ITEM(pair, 0, message);
    PyTuple_SET_ITEM(pair, 1, count);
    if (NSQMP_MESSAGE_CHECK(message))
        PyObject_GC_UnTrack(pair);
    return pair;
}

#endif
