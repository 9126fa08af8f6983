/*
 * segtail.h -- the segment tail's run, for C callers (the connection's read
 * path, readpath.c): the same as SegmentTail.run(buf, pos) without a Python
 * call or a result tuple.  segtail.c's header comment gives the rules.
 */
#ifndef NSQMP_SEGTAIL_H
#define NSQMP_SEGTAIL_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

extern PyTypeObject nsqmp_SegmentTail_Type;

typedef struct {
    Py_ssize_t end;          /* where the first command not taken starts */
    long long commands, messages;
    PyObject *record;        /* a new reference: the PUBLISH_AT of what was taken; NULL if nothing was */
} TailTaken;

/* Take the publish run at data[pos:len) into tail's file (a SegmentTail).
 * 0 with *out filled (record NULL: nothing taken); -1 with an exception (OSError
 * if the write or a strict sync failed: nothing was taken). */
int nsqmp_tail_take(PyObject *tail, const uint8_t *data, Py_ssize_t len, Py_ssize_t pos, TailTaken *out);

#endif
