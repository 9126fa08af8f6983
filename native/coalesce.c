/*
 * coalesce.c -- the router's join of PUBLISH_AT runs, in C: a popped batch of
 * one ring's records, with each run of back-to-back PUBLISH_ATs of one topic
 * whose ranges follow each other in one file made one PUBLISH_AT of the whole
 * range.  The pure-Python twin, and the reference, is
 * nsqmp/ipc/records.py's coalesce_publish_at (same records out, the tests
 * compare them); the record layout is drawn there, and its field offsets come
 * from there as the `layout` argument, so nothing of it is declared twice:
 *
 *   layout = (kind, offset_at, count_at, size_at, topic_len_at)
 *
 *   PUBLISH_AT | kind u8 | seg_acceptor u16 | seg_seq u32 | offset u64 | count u32
 *              | size u32 | topic_len u8 | topic
 *
 * The bytes from 1 up to offset_at name the file (acceptor and seq); the topic
 * follows its length byte.  Other records, and the order of everything, are
 * kept; a run of one record is that record object itself; a run stops before
 * its count or size would pass a u32.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

static uint64_t
get_le(const uint8_t *p, int bytes)
{
    uint64_t v = 0;
    for (int i = bytes - 1; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

static void
put_le(uint8_t *p, uint64_t v, int bytes)
{
    for (int i = 0; i < bytes; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

typedef struct {
    Py_ssize_t offset_at, count_at, size_at, tlen_at;
    int kind;
} Layout;

typedef struct {
    PyObject *first;        /* the run's first record (borrowed from the input list) */
    uint64_t start, end;    /* the file range so far */
    uint64_t count;         /* messages */
    Py_ssize_t merged;      /* records in the run */
} RunState;

/* 1 if rec is a whole PUBLISH_AT of this layout; its topic's length in *tlen */
static int
is_publish_at(PyObject *rec, const Layout *l, Py_ssize_t *tlen)
{
    if (!PyBytes_Check(rec))
        return 0;
    Py_ssize_t n = PyBytes_GET_SIZE(rec);
    const uint8_t *p = (const uint8_t *)PyBytes_AS_STRING(rec);
    if (n <= l->tlen_at || p[0] != l->kind)
        return 0;
    *tlen = p[l->tlen_at];
    return n >= l->tlen_at + 1 + *tlen;
}

/* The run's record: its first record if alone, else a copy of it with the run's
 * offset, count and size.  A new reference, NULL with an exception. */
static PyObject *
run_record(const RunState *run, const Layout *l)
{
    if (run->merged == 1)
        return Py_NewRef(run->first);
    PyObject *rec = PyBytes_FromStringAndSize(PyBytes_AS_STRING(run->first), PyBytes_GET_SIZE(run->first));
    if (rec == NULL)
        return NULL;
    uint8_t *p = (uint8_t *)PyBytes_AS_STRING(rec);
    put_le(p + l->offset_at, run->start, 8);
    put_le(p + l->count_at, run->count, 4);
    put_le(p + l->size_at, run->end - run->start, 4);
    return rec;
}

static int
append_new(PyObject *out, PyObject *rec)
{
    if (rec == NULL)
        return -1;
    int rc = PyList_Append(out, rec);
    Py_DECREF(rec);
    return rc;
}

PyDoc_STRVAR(coalesce_doc,
"coalesce_publish_at(records, layout, /)\n--\n\n"
"records (a list of one ring's records, in order) with each run of back-to-back\n"
"PUBLISH_ATs of one topic whose ranges follow each other in one file as one\n"
"PUBLISH_AT of the whole range. layout = (kind, offset_at, count_at, size_at,\n"
"topic_len_at): the record's kind byte and field offsets (nsqmp.ipc.records).");

static PyObject *
coalesce_publish_at(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2 || !PyList_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "coalesce_publish_at(records: list, layout: tuple)");
        return NULL;
    }
    Layout l;
    if (!PyArg_ParseTuple(args[1], "innnn:layout", &l.kind, &l.offset_at, &l.count_at, &l.size_at, &l.tlen_at))
        return NULL;
    if (l.offset_at < 1 || l.count_at < 0 || l.size_at < 0 || l.tlen_at < 0
        || l.offset_at + 8 > l.tlen_at || l.count_at + 4 > l.tlen_at || l.size_at + 4 > l.tlen_at) {
        PyErr_SetString(PyExc_ValueError, "layout: every field must lie before the topic's length byte");
        return NULL;
    }
    PyObject *recs = args[0];
    Py_ssize_t n = PyList_GET_SIZE(recs);
    PyObject *out = PyList_New(0);
    if (out == NULL)
        return NULL;
    RunState run = {NULL, 0, 0, 0, 0};
    Py_ssize_t run_tlen = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *rec = PyList_GET_ITEM(recs, i);
        Py_ssize_t tlen;
        if (!is_publish_at(rec, &l, &tlen)) {
            if (run.first != NULL && append_new(out, run_record(&run, &l)) < 0)
                goto fail;
            run.first = NULL;
            if (PyList_Append(out, rec) < 0)
                goto fail;
            continue;
        }
        const uint8_t *p = (const uint8_t *)PyBytes_AS_STRING(rec);
        uint64_t offset = get_le(p + l.offset_at, 8);
        uint64_t count = get_le(p + l.count_at, 4);
        uint64_t size = get_le(p + l.size_at, 4);
        if (run.first != NULL && offset == run.end && tlen == run_tlen && run.count + count <= UINT32_MAX
            && offset + size - run.start <= UINT32_MAX) {
            const uint8_t *q = (const uint8_t *)PyBytes_AS_STRING(run.first);
            if (memcmp(p + 1, q + 1, (size_t)(l.offset_at - 1)) == 0
                && memcmp(p + l.tlen_at + 1, q + l.tlen_at + 1, (size_t)tlen) == 0) {
                run.end = offset + size;
                run.count += count;
                run.merged++;
                continue;
            }
        }
        if (run.first != NULL && append_new(out, run_record(&run, &l)) < 0)
            goto fail;
        run.first = rec;
        run.start = offset;
        run.end = offset + size;
        run.count = count;
        run.merged = 1;
        run_tlen = tlen;
    }
    if (run.first != NULL && append_new(out, run_record(&run, &l)) < 0)
        goto fail;
    return out;
fail:
    Py_DECREF(out);
    return NULL;
}

static PyMethodDef coalesce_methods[] = {
    {"coalesce_publish_at", (PyCFunction)(void (*)(void))coalesce_publish_at, METH_FASTCALL, coalesce_doc},
    {NULL, NULL, 0, NULL},
};

int
nsqmp_coalesce_add(PyObject *module)
{
    return PyModule_AddFunctions(module, coalesce_methods);
}
