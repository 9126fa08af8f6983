/*
 * acklog.c -- the filter of the ack log's compaction (the entry layout is drawn
 * in layouts.h: channel id u16, acceptor u16, seq u32, offset u64,
 * little-endian, 16 bytes).  The pure-Python twin is
 * nsqmp.diskqueue.acklog.py_keep_entries (same results).
 *
 *   keep_entries(data, live) -> bytes
 *
 * The entries of data, in order, whose file (acceptor, seq) is in live: a
 * sorted array of u64 keys acceptor << 32 | seq in native byte order
 * (array("Q", sorted(keys)).tobytes()).  A trailing partial entry is ignored.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "layouts.h"

#define ACK_ENTRY NQL_ACK_ENTRY

static int
key_in(const uint64_t *keys, Py_ssize_t n, uint64_t key)
{
    Py_ssize_t lo = 0, hi = n;
    while (lo < hi) {
        Py_ssize_t mid = lo + (hi - lo) / 2;
        if (keys[mid] < key)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < n && keys[lo] == key;
}

PyDoc_STRVAR(keep_entries_doc,
"keep_entries(data, live) -> bytes\n\n"
"The 16-byte ack log entries of data whose (acceptor, seq) key\n"
"(acceptor << 32 | seq) is in live, a sorted native-order u64 array.");

static PyObject *
py_keep_entries(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "keep_entries(data, live) takes 2 arguments");
        return NULL;
    }
    Py_buffer data, live;
    if (PyObject_GetBuffer(args[0], &data, PyBUF_SIMPLE) < 0)
        return NULL;
    if (PyObject_GetBuffer(args[1], &live, PyBUF_SIMPLE) < 0) {
        PyBuffer_Release(&data);
        return NULL;
    }
    PyObject *out = NULL;
    if (live.len % 8 != 0) {
        PyErr_SetString(PyExc_ValueError, "live must be a whole number of u64 keys");
        goto done;
    }
    Py_ssize_t n = data.len / ACK_ENTRY, nkeys = live.len / 8, kept = 0;
    uint64_t *keys = PyMem_Malloc(live.len ? (size_t)live.len : 1);
    char *dst = PyMem_Malloc(n ? (size_t)(n * ACK_ENTRY) : 1);
    if (keys == NULL || dst == NULL) {
        PyMem_Free(keys);
        PyMem_Free(dst);
        PyErr_NoMemory();
        goto done;
    }
    memcpy(keys, live.buf, (size_t)live.len);  /* aligned copies of the keys */
    const unsigned char *src = data.buf;
    /* no Python object is touched below: a compaction on the syncing thread lets the
     * router's loop run meanwhile (the buffers stay exported until the end) */
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) {
        const unsigned char *e = src + i * ACK_ENTRY;
        const unsigned char *a = e + NQL_ACK_ACCEPTOR_AT, *q = e + NQL_ACK_SEQ_AT;
        uint64_t acceptor = (uint64_t)a[0] | (uint64_t)a[1] << 8;
        uint64_t seq = (uint64_t)q[0] | (uint64_t)q[1] << 8 | (uint64_t)q[2] << 16 | (uint64_t)q[3] << 24;
        if (key_in(keys, nkeys, acceptor << 32 | seq)) {
            memcpy(dst + kept * ACK_ENTRY, e, ACK_ENTRY);
            kept++;
        }
    }
    Py_END_ALLOW_THREADS
    out = PyBytes_FromStringAndSize(dst, kept * ACK_ENTRY);
    PyMem_Free(keys);
    PyMem_Free(dst);
done:
    PyBuffer_Release(&live);
    PyBuffer_Release(&data);
    return out;
}

static PyMethodDef acklog_functions[] = {
    {"keep_entries", (PyCFunction)(void (*)(void))py_keep_entries, METH_FASTCALL, keep_entries_doc},
    {NULL, NULL, 0, NULL},
};

int
nsqmp_acklog_add(PyObject *module)
{
    return PyModule_AddFunctions(module, acklog_functions);
}
