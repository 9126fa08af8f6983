/*
 * publish.c -- CRC-32C and the Python functions of the publish-path encoder
 * (layouts in publish.h): crc32c (crc32c_table: the table fallback, for the
 * tests), records_size, encode_records.  The
 * pure-Python twin is nsqmp/diskqueue/pyencoder.py.
 *
 * encode_records writes every record of a batch into a writable buffer (the
 * PUBLISH record that also fills the segment) straight from the read buffer:
 * no Python object per message.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "publish.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <nmmintrin.h>
#define NQE_HAVE_SSE42 1
#endif

/* ------------------------------------------------------------------ */
/* CRC-32C                                                             */
/* ------------------------------------------------------------------ */

static uint32_t crc_table[8][256];
static int crc_hw = -1;  /* -1: not decided yet */

static void
crc_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int b = 0; b < 8; b++)
            c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1)));
        crc_table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++) {
        for (int t = 1; t < 8; t++)
            crc_table[t][i] = (crc_table[t - 1][i] >> 8) ^ crc_table[0][crc_table[t - 1][i] & 0xFF];
    }
#ifdef NQE_HAVE_SSE42
    crc_hw = __builtin_cpu_supports("sse4.2") ? 1 : 0;
#else
    crc_hw = 0;
#endif
}

/* slicing-by-8 on the raw (inverted) state */
static uint32_t
crc_soft(uint32_t c, const uint8_t *p, size_t n)
{
    while (n >= 8) {
        uint32_t lo = c ^ nqe_u32le(p);
        uint32_t hi = nqe_u32le(p + 4);
        c = crc_table[7][lo & 0xFF] ^ crc_table[6][(lo >> 8) & 0xFF] ^
            crc_table[5][(lo >> 16) & 0xFF] ^ crc_table[4][lo >> 24] ^
            crc_table[3][hi & 0xFF] ^ crc_table[2][(hi >> 8) & 0xFF] ^
            crc_table[1][(hi >> 16) & 0xFF] ^ crc_table[0][hi >> 24];
        p += 8;
        n -= 8;
    }
    while (n--)
        c = (c >> 8) ^ crc_table[0][(c ^ *p++) & 0xFF];
    return c;
}

#ifdef NQE_HAVE_SSE42
__attribute__((target("sse4.2"))) static uint32_t
crc_sse42(uint32_t c, const uint8_t *p, size_t n)
{
    uint64_t c64 = c;
    while (n >= 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        c64 = _mm_crc32_u64(c64, v);
        p += 8;
        n -= 8;
    }
    c = (uint32_t)c64;
    while (n--)
        c = _mm_crc32_u8(c, *p++);
    return c;
}
#endif

uint32_t
nqe_crc32c(uint32_t value, const uint8_t *p, size_t n)
{
    uint32_t c = ~value;
#ifdef NQE_HAVE_SSE42
    if (crc_hw)
        return ~crc_sse42(c, p, n);
#endif
    return ~crc_soft(c, p, n);
}

int
nqe_crc32c_hardware(void)
{
    return crc_hw;
}

/* ------------------------------------------------------------------ */
/* Python functions                                                    */
/* ------------------------------------------------------------------ */

PyDoc_STRVAR(crc32c_doc,
"crc32c(data, value=0, /)\n--\n\n"
"CRC-32C of data, continuing from value (as the crc32c package computes it).");

static PyObject *
py_crc32c(PyObject *Py_UNUSED(self), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs < 1 || nargs > 2) {
        PyErr_SetString(PyExc_TypeError, "crc32c() takes 1 or 2 positional arguments");
        return NULL;
    }
    uint32_t value = 0;
    if (nargs == 2) {
        unsigned long long v = PyLong_AsUnsignedLongLong(args[1]);
        if (v == (unsigned long long)-1 && PyErr_Occurred())
            return NULL;
        if (v > 0xFFFFFFFFull) {
            PyErr_SetString(PyExc_ValueError, "value must fit in 32 bits");
            return NULL;
        }
        value = (uint32_t)v;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0)
        return NULL;
    uint32_t crc = nqe_crc32c(value, view.buf, (size_t)view.len);
    PyBuffer_Release(&view);
    return PyLong_FromUnsignedLong(crc);
}

PyDoc_STRVAR(crc32c_table_doc,
"crc32c_table(data, value=0, /)\n--\n\n"
"crc32c() always through the portable table (the fallback without SSE4.2), for the tests.");

static PyObject *
py_crc32c_table(PyObject *Py_UNUSED(self), PyObject *const *args, Py_ssize_t nargs)
{
    int saved = crc_hw;
    crc_hw = 0;  /* single-threaded under the GIL; restored before returning */
    PyObject *result = py_crc32c(NULL, args, nargs);
    crc_hw = saved;
    return result;
}

static int
get_spans(PyObject *obj, Py_buffer *view)
{
    if (PyObject_GetBuffer(obj, view, PyBUF_SIMPLE) < 0)
        return -1;
    if (view->len % 8) {
        PyBuffer_Release(view);
        PyErr_SetString(PyExc_ValueError, "spans must be packed (offset u32, size u32) pairs");
        return -1;
    }
    return 0;
}

PyDoc_STRVAR(records_size_doc,
"records_size(spans, deferred, /)\n--\n\n"
"Bytes of the segment records encode_records writes for these spans.");

static PyObject *
py_records_size(PyObject *Py_UNUSED(self), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "records_size() takes exactly 2 positional arguments");
        return NULL;
    }
    int deferred = PyObject_IsTrue(args[1]);
    if (deferred < 0)
        return NULL;
    Py_buffer spans;
    if (get_spans(args[0], &spans) < 0)
        return NULL;
    size_t total = nqe_records_size(spans.buf, (size_t)spans.len / 8, deferred);
    PyBuffer_Release(&spans);
    if (total == (size_t)-1) {
        PyErr_SetString(PyExc_ValueError, "a message is too long for a segment record");
        return NULL;
    }
    return PyLong_FromSize_t(total);
}

PyDoc_STRVAR(encode_records_doc,
"encode_records(dst, dst_pos, src, spans, ts_ns, first_id, due_ns, /)\n--\n\n"
"Write the segment records of every span of src into dst at dst_pos (message k\n"
"gets id first_id + k; due_ns != 0 makes them deferred); returns the bytes written.\n"
"Raises ValueError, writing nothing, if a span is outside src or dst is too small.");

static PyObject *
py_encode_records(PyObject *Py_UNUSED(self), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 7) {
        PyErr_SetString(PyExc_TypeError, "encode_records() takes exactly 7 positional arguments");
        return NULL;
    }
    Py_ssize_t pos = PyLong_AsSsize_t(args[1]);
    if (pos == -1 && PyErr_Occurred())
        return NULL;
    long long ts = PyLong_AsLongLong(args[4]);
    if (ts == -1 && PyErr_Occurred())
        return NULL;
    unsigned long long first = PyLong_AsUnsignedLongLong(args[5]);
    if (first == (unsigned long long)-1 && PyErr_Occurred())
        return NULL;
    long long due = PyLong_AsLongLong(args[6]);
    if (due == -1 && PyErr_Occurred())
        return NULL;
    Py_buffer dst, src, spans;
    if (PyObject_GetBuffer(args[0], &dst, PyBUF_WRITABLE) < 0)
        return NULL;
    if (PyObject_GetBuffer(args[2], &src, PyBUF_SIMPLE) < 0) {
        PyBuffer_Release(&dst);
        return NULL;
    }
    if (get_spans(args[3], &spans) < 0) {
        PyBuffer_Release(&src);
        PyBuffer_Release(&dst);
        return NULL;
    }
    size_t written = 0;
    int rc;
    if (pos < 0 || pos > dst.len)
        rc = NQE_NO_ROOM;
    else
        rc = nqe_encode((uint8_t *)dst.buf + pos, (size_t)(dst.len - pos), src.buf, (size_t)src.len,
                        spans.buf, (size_t)spans.len / 8, (int64_t)ts, (uint64_t)first, (int64_t)due,
                        &written);
    PyBuffer_Release(&spans);
    PyBuffer_Release(&src);
    PyBuffer_Release(&dst);
    switch (rc) {
    case NQE_OK:
        return PyLong_FromSize_t(written);
    case NQE_SPAN_OUTSIDE:
        PyErr_SetString(PyExc_ValueError, "a span is outside src");
        return NULL;
    case NQE_TOO_LONG:
        PyErr_SetString(PyExc_ValueError, "a message is too long for a segment record");
        return NULL;
    default:
        PyErr_SetString(PyExc_ValueError, "dst is too small for the records");
        return NULL;
    }
}

static PyMethodDef publish_functions[] = {
    {"crc32c", (PyCFunction)(void (*)(void))py_crc32c, METH_FASTCALL, crc32c_doc},
    {"crc32c_table", (PyCFunction)(void (*)(void))py_crc32c_table, METH_FASTCALL, crc32c_table_doc},
    {"records_size", (PyCFunction)(void (*)(void))py_records_size, METH_FASTCALL, records_size_doc},
    {"encode_records", (PyCFunction)(void (*)(void))py_encode_records, METH_FASTCALL, encode_records_doc},
    {NULL, NULL, 0, NULL},
};

int
nsqmp_publish_add(PyObject *module)
{
    if (crc_hw < 0)
        crc_init();
    if (PyModule_AddFunctions(module, publish_functions) < 0)
        return -1;
    return PyModule_AddIntConstant(module, "CRC32C_HARDWARE", crc_hw);
}
