/*
 * ids.h -- the message ID generator (nsqmp/protocol/ids.py's IdGenerator, in C):
 * its state is read and advanced in place by the segment tail (segtail.c).
 */
#ifndef NSQMP_IDS_H
#define NSQMP_IDS_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

typedef struct {
    PyObject_HEAD
    long long node;  /* 10 bits */
    long long ms;    /* the millisecond (since the epoch) of the last ID */
    long long seq;   /* how many of its IDs are taken */
} IdGen;

extern PyTypeObject IdGenType;

#endif
