/*
 * layouts.c -- nsqmp._native.layouts: the constants of layouts.h (and of the
 * ring's layout in ring.h) by name, so tests/test_layouts.py can hold the
 * Python declarations (nsqmp/layouts.py, nsqmp/ipc/pyring.py, nsqmp/ipc/records.py)
 * equal to C's.
 * Names drop the NQL_ prefix; the ring's keep RING_.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "layouts.h"
#include "ring.h"

static int
put(PyObject *d, const char *name, unsigned long long value)
{
    PyObject *v = PyLong_FromUnsignedLongLong(value);
    if (v == NULL)
        return -1;
    int rc = PyDict_SetItemString(d, name, v);
    Py_DECREF(v);
    return rc;
}

#define PUT(name, value) if (put(d, name, value) < 0) goto fail

int
nsqmp_layouts_add(PyObject *module)
{
    PyObject *d = PyDict_New();
    if (d == NULL)
        return -1;
    PyObject *magic = PyBytes_FromString(NQL_SEGMENT_MAGIC);
    if (magic == NULL || PyDict_SetItemString(d, "SEGMENT_MAGIC", magic) < 0) {
        Py_XDECREF(magic);
        goto fail;
    }
    Py_DECREF(magic);
    PUT("SEGMENT_VERSION", NQL_SEGMENT_VERSION);
    PUT("SEGMENT_HEADER_SIZE", NQL_SEGMENT_HEADER_SIZE);
    PUT("RECORD_HEAD", NQL_RECORD_HEAD);
    PUT("LENGTH_MASK", NQL_LENGTH_MASK);
    PUT("DEFER", NQL_DEFER);
    PUT("DUE", NQL_DUE);
    PUT("MESSAGE_HEAD", NQL_MESSAGE_HEAD);
    PUT("ATTEMPTS_AT", NQL_ATTEMPTS_AT);
    PUT("ID_AT", NQL_ID_AT);
    PUT("ID", NQL_ID);
    PUT("FRAME_SIZE", NQL_FRAME_SIZE);
    PUT("FRAME_HEAD", NQL_FRAME_HEAD);
    PUT("FRAME_RESPONSE", NQL_FRAME_RESPONSE);
    PUT("FRAME_ERROR", NQL_FRAME_ERROR);
    PUT("FRAME_MESSAGE", NQL_FRAME_MESSAGE);
    PUT("MESSAGE_FRAME_HEAD", NQL_MESSAGE_FRAME_HEAD);
    PUT("SPAN", NQL_SPAN);
    PUT("ACK_ENTRY", NQL_ACK_ENTRY);
    PUT("ACK_ACCEPTOR_AT", NQL_ACK_ACCEPTOR_AT);
    PUT("ACK_SEQ_AT", NQL_ACK_SEQ_AT);
    PUT("TOKEN", NQL_TOKEN);
    PUT("ARM_ENTRY", NQL_ARM_ENTRY);
    PUT("RING_MAGIC", NQR_MAGIC);
    PUT("RING_VERSION", NQR_VERSION);
    PUT("RING_HEADER_SIZE", NQR_HEADER_SIZE);
    PUT("RING_MIN_CAPACITY", NQR_MIN_CAPACITY);
    PUT("RING_MAX_CAPACITY", NQR_MAX_CAPACITY);
    PUT("RING_RECORD_HEADER", NQR_RECORD_HEADER);
    PUT("RING_WRAP_MARKER", NQR_WRAP_MARKER);
    PUT("RING_OFF_HEAD", offsetof(nqr_header, head));
    PUT("RING_OFF_TAIL", offsetof(nqr_header, tail));
    PUT("RING_OFF_CONSUMER_SLEEPING", offsetof(nqr_header, consumer_sleeping));
    PUT("RING_OFF_PRODUCER_WAITING", offsetof(nqr_header, producer_waiting));
    PUT("RING_OFF_CAPACITY", offsetof(nqr_header, capacity));
    PUT("RING_OFF_MAX_RECORD", offsetof(nqr_header, max_record));
    if (PyModule_AddObjectRef(module, "layouts", d) < 0)
        goto fail;
    Py_DECREF(d);
    return 0;
fail:
    Py_DECREF(d);
    return -1;
}
