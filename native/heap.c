/*
 * heap.c -- the Python type nsqmp._native.DeadlineHeap over the indexed heap
 * of heap.h.  The pure-Python twin is nsqmp/timer/heap.py (PyDeadlineHeap);
 * both have the same API, the same errors and the same results.
 *
 * Buffers of arm_many / disarm_many / pop_due are the payloads of the ARM,
 * DISARM and FIRE records (nsqmp/ipc/records.py): little-endian u64 tokens
 * and i64 deadlines, no per-entry Python object on the way in or out.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "heap.h"
#include "layouts.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "nsqmp record layouts are little-endian; big-endian hosts are not supported"
#endif

typedef struct {
    PyObject_HEAD
    nqh_heap h;
} DeadlineHeapObject;

static PyTypeObject DeadlineHeap_Type;

/* ------------------------------------------------------------------ */
/* argument helpers                                                    */
/* ------------------------------------------------------------------ */

/* An integer in [0, max] (anything with __index__); TypeError for
 * non-integers, ValueError when out of range. */
static int
parse_uint(PyObject *obj, unsigned long long max, const char *what,
           unsigned long long *out)
{
    PyObject *idx;
    if (PyLong_CheckExact(obj)) {
        idx = Py_NewRef(obj);
    } else {
        idx = PyNumber_Index(obj);
        if (idx == NULL)
            return -1;
    }
    unsigned long long v = PyLong_AsUnsignedLongLong(idx);
    Py_DECREF(idx);
    if (v == (unsigned long long)-1 && PyErr_Occurred()) {
        if (!PyErr_ExceptionMatches(PyExc_OverflowError))
            return -1;
        PyErr_Clear();
        v = max;
        goto range;
    }
    if (v > max)
        goto range;
    *out = v;
    return 0;
range:
    PyErr_Format(PyExc_ValueError, "%s must be an integer in [0, %llu]", what, max);
    return -1;
}

static int
parse_owner(PyObject *obj, uint32_t *out)
{
    unsigned long long v;
    if (parse_uint(obj, UINT32_MAX, "owner", &v) < 0)
        return -1;
    *out = (uint32_t)v;
    return 0;
}

static int
parse_token(PyObject *obj, uint64_t *out)
{
    unsigned long long v;
    if (parse_uint(obj, UINT64_MAX, "token", &v) < 0)
        return -1;
    *out = (uint64_t)v;
    return 0;
}

/* A signed 64-bit integer; *overflow is set to -1/+1 (and *out clamped)
 * when it does not fit. */
static int
parse_i64(PyObject *obj, long long *out, int *overflow)
{
    PyObject *idx;
    if (PyLong_CheckExact(obj)) {
        idx = Py_NewRef(obj);
    } else {
        idx = PyNumber_Index(obj);
        if (idx == NULL)
            return -1;
    }
    long long v = PyLong_AsLongLongAndOverflow(idx, overflow);
    Py_DECREF(idx);
    if (v == -1 && PyErr_Occurred())
        return -1;
    if (*overflow)
        v = *overflow > 0 ? LLONG_MAX : LLONG_MIN;
    *out = v;
    return 0;
}

static int
parse_deadline(PyObject *obj, int64_t *out)
{
    long long v;
    int overflow;
    if (parse_i64(obj, &v, &overflow) < 0)
        return -1;
    if (overflow) {
        PyErr_SetString(PyExc_ValueError,
                        "deadline must be an integer in [-2**63, 2**63 - 1]");
        return -1;
    }
    *out = (int64_t)v;
    return 0;
}

/* A C-contiguous bytes-like object whose length is a multiple of unit.
 * BufferError (non-contiguous) becomes TypeError, like the twin. */
static int
get_records(PyObject *obj, Py_buffer *view, Py_ssize_t unit, const char *what)
{
    if (PyObject_GetBuffer(obj, view, PyBUF_SIMPLE) < 0) {
        if (PyErr_ExceptionMatches(PyExc_BufferError)) {
            PyErr_Clear();
            PyErr_Format(PyExc_TypeError,
                         "%s must be a contiguous bytes-like object, not %.100s",
                         what, Py_TYPE(obj)->tp_name);
        }
        return -1;
    }
    if (view->len % unit) {
        PyErr_Format(PyExc_ValueError,
                     "%s length %zd is not a multiple of %zd", what, view->len, unit);
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

static inline uint64_t
load_u64(const unsigned char *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

static int
check_nargs(const char *name, Py_ssize_t nargs, Py_ssize_t expected)
{
    if (nargs == expected)
        return 0;
    PyErr_Format(PyExc_TypeError, "%s() takes exactly %zd positional arguments (%zd given)",
                 name, expected, nargs);
    return -1;
}

static PyObject *
no_memory(void)
{
    return PyErr_NoMemory();
}

/* ------------------------------------------------------------------ */
/* type basics                                                         */
/* ------------------------------------------------------------------ */

static PyObject *
DeadlineHeap_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    if (PyTuple_GET_SIZE(args) != 0 || (kwds != NULL && PyDict_GET_SIZE(kwds) != 0)) {
        PyErr_SetString(PyExc_TypeError, "DeadlineHeap() takes no arguments");
        return NULL;
    }
    DeadlineHeapObject *self = (DeadlineHeapObject *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    nqh_init(&self->h);
    return (PyObject *)self;
}

static void
DeadlineHeap_dealloc(DeadlineHeapObject *self)
{
    nqh_free(&self->h);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static Py_ssize_t
DeadlineHeap_len(DeadlineHeapObject *self)
{
    return (Py_ssize_t)self->h.n;
}

/* ------------------------------------------------------------------ */
/* methods                                                             */
/* ------------------------------------------------------------------ */

PyDoc_STRVAR(DeadlineHeap_arm_doc,
"arm($self, owner, token, deadline, /)\n--\n\n"
"Arm (owner, token) to fire at deadline (monotonic ns); an armed key\n"
"moves to the new deadline.  Returns True if the key was not armed.");

static PyObject *
DeadlineHeap_arm(DeadlineHeapObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    uint32_t owner;
    uint64_t token;
    int64_t deadline;
    if (check_nargs("arm", nargs, 3) < 0)
        return NULL;
    if (parse_owner(args[0], &owner) < 0 || parse_token(args[1], &token) < 0 ||
        parse_deadline(args[2], &deadline) < 0)
        return NULL;
    if (nqh_reserve(&self->h, self->h.n + 1) < 0)
        return no_memory();
    return PyBool_FromLong(nqh_arm(&self->h, owner, token, deadline));
}

PyDoc_STRVAR(DeadlineHeap_disarm_doc,
"disarm($self, owner, token, /)\n--\n\n"
"Disarm (owner, token).  Returns True if it was armed.");

static PyObject *
DeadlineHeap_disarm(DeadlineHeapObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    uint32_t owner;
    uint64_t token;
    if (check_nargs("disarm", nargs, 2) < 0)
        return NULL;
    if (parse_owner(args[0], &owner) < 0 || parse_token(args[1], &token) < 0)
        return NULL;
    int r = nqh_disarm(&self->h, owner, token);
    if (r)
        nqh_maybe_shrink(&self->h);
    return PyBool_FromLong(r);
}

PyDoc_STRVAR(DeadlineHeap_get_doc,
"get($self, owner, token, /)\n--\n\n"
"The deadline of (owner, token), or None when it is not armed.");

static PyObject *
DeadlineHeap_get(DeadlineHeapObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    uint32_t owner;
    uint64_t token;
    if (check_nargs("get", nargs, 2) < 0)
        return NULL;
    if (parse_owner(args[0], &owner) < 0 || parse_token(args[1], &token) < 0)
        return NULL;
    if (self->h.n == 0)
        Py_RETURN_NONE;
    size_t s = nqh_probe(&self->h, owner, token, nqh_tag(owner, token));
    uint32_t pos = self->h.table[s].pos;
    if (pos == NQH_EMPTY)
        Py_RETURN_NONE;
    return PyLong_FromLongLong(self->h.heap[pos].deadline);
}

PyDoc_STRVAR(DeadlineHeap_arm_many_doc,
"arm_many($self, owner, buf, /)\n--\n\n"
"Arm every (token u64, deadline i64) pair packed little-endian in buf (the\n"
"payload of an ARM record), in order: a key seen twice ends at its last\n"
"deadline.  ValueError (and nothing armed) when len(buf) % 16 != 0.\n"
"Returns how many keys were new.");

static PyObject *
DeadlineHeap_arm_many(DeadlineHeapObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    uint32_t owner;
    Py_buffer view;
    if (check_nargs("arm_many", nargs, 2) < 0)
        return NULL;
    if (parse_owner(args[0], &owner) < 0)
        return NULL;
    if (get_records(args[1], &view, NQL_ARM_ENTRY, "buf") < 0)
        return NULL;
    size_t count = (size_t)view.len / NQL_ARM_ENTRY;
    size_t added = 0;
    if (count) {
        if (nqh_reserve(&self->h, self->h.n + count) < 0) {
            PyBuffer_Release(&view);
            return no_memory();
        }
        const unsigned char *p = (const unsigned char *)view.buf;
        for (size_t k = 0; k < count; k++, p += NQL_ARM_ENTRY) {
            added += (size_t)nqh_arm(&self->h, owner, load_u64(p),
                                     (int64_t)load_u64(p + NQL_TOKEN));
        }
    }
    PyBuffer_Release(&view);
    return PyLong_FromSize_t(added);
}

PyDoc_STRVAR(DeadlineHeap_disarm_many_doc,
"disarm_many($self, owner, buf, /)\n--\n\n"
"Disarm every u64 token packed little-endian in buf (the payload of a\n"
"DISARM record); unknown tokens are ignored.  ValueError (and nothing\n"
"disarmed) when len(buf) % 8 != 0.  Returns how many were armed.");

static PyObject *
DeadlineHeap_disarm_many(DeadlineHeapObject *self, PyObject *const *args,
                         Py_ssize_t nargs)
{
    uint32_t owner;
    Py_buffer view;
    if (check_nargs("disarm_many", nargs, 2) < 0)
        return NULL;
    if (parse_owner(args[0], &owner) < 0)
        return NULL;
    if (get_records(args[1], &view, NQL_TOKEN, "buf") < 0)
        return NULL;
    size_t count = (size_t)view.len / NQL_TOKEN;
    size_t removed = 0;
    const unsigned char *p = (const unsigned char *)view.buf;
    for (size_t k = 0; k < count && self->h.n; k++, p += NQL_TOKEN)
        removed += (size_t)nqh_disarm(&self->h, owner, load_u64(p));
    PyBuffer_Release(&view);
    if (removed)
        nqh_maybe_shrink(&self->h);
    return PyLong_FromSize_t(removed);
}

PyDoc_STRVAR(DeadlineHeap_next_deadline_doc,
"next_deadline($self, /)\n--\n\n"
"The earliest deadline, or None when empty.");

static PyObject *
DeadlineHeap_next_deadline(DeadlineHeapObject *self, PyObject *Py_UNUSED(ignored))
{
    if (self->h.n == 0)
        Py_RETURN_NONE;
    return PyLong_FromLongLong(self->h.heap[0].deadline);
}

PyDoc_STRVAR(DeadlineHeap_forget_owner_doc,
"forget_owner($self, owner, /)\n--\n\n"
"Drop every entry of owner; returns how many.");

static PyObject *
DeadlineHeap_forget_owner(DeadlineHeapObject *self, PyObject *arg)
{
    uint32_t owner;
    if (parse_owner(arg, &owner) < 0)
        return NULL;
    return PyLong_FromSize_t(nqh_forget_owner(&self->h, owner));
}

/* pop_due grouping: owner -> group index, open addressing. */
typedef struct {
    uint32_t owner;
    uint32_t count;
    uint32_t index;     /* position in the owner-sorted order */
    uint32_t pad;
    char *out;          /* write cursor in the group's bytes */
} due_group;

static int
cmp_group_owner(const void *a, const void *b)
{
    uint32_t x = ((const due_group *)a)->owner, y = ((const due_group *)b)->owner;
    return (x > y) - (x < y);
}

typedef struct {
    uint32_t *map;      /* group index + 1, 0 = free */
    size_t mask;
    due_group *groups;
    size_t ngroups;
    size_t gcap;
} group_map;

static inline size_t
owner_hash(uint32_t owner)
{
    return (size_t)((owner * 0x9E3779B1u) >> 7) ^ owner;
}

static int
group_map_grow(group_map *g)
{
    size_t cap = g->mask ? (g->mask + 1) * 2 : 16;
    uint32_t *map = (uint32_t *)calloc(cap, sizeof(uint32_t));
    if (map == NULL)
        return -1;
    for (size_t k = 0; k < g->ngroups; k++) {
        size_t i = owner_hash(g->groups[k].owner) & (cap - 1);
        while (map[i])
            i = (i + 1) & (cap - 1);
        map[i] = (uint32_t)k + 1;
    }
    free(g->map);
    g->map = map;
    g->mask = cap - 1;
    size_t gcap = cap / 2;
    if (gcap > g->gcap) {
        due_group *groups = (due_group *)realloc(g->groups, gcap * sizeof(due_group));
        if (groups == NULL)
            return -1;
        g->groups = groups;
        g->gcap = gcap;
    }
    return 0;
}

/* Group index of owner, adding a group when new; -1 on memory failure. */
static long
group_of(group_map *g, uint32_t owner, uint32_t *last_owner, long *last_group)
{
    if (*last_group >= 0 && *last_owner == owner)
        return *last_group;
    if (g->ngroups + 1 > g->gcap || g->mask == 0) {
        if (group_map_grow(g) < 0)
            return -1;
    }
    size_t i = owner_hash(owner) & g->mask;
    while (g->map[i]) {
        size_t k = g->map[i] - 1;
        if (g->groups[k].owner == owner) {
            *last_owner = owner;
            *last_group = (long)k;
            return (long)k;
        }
        i = (i + 1) & g->mask;
    }
    size_t k = g->ngroups++;
    g->groups[k].owner = owner;
    g->groups[k].count = 0;
    g->groups[k].out = NULL;
    g->map[i] = (uint32_t)k + 1;
    *last_owner = owner;
    *last_group = (long)k;
    return (long)k;
}

PyDoc_STRVAR(DeadlineHeap_pop_due_doc,
"pop_due($self, /, now, max_count=None)\n--\n\n"
"Remove every entry with deadline <= now, at most max_count of them (None:\n"
"no limit), earliest first in (deadline, owner, token) order.  Returns\n"
"[(owner, tokens)] sorted by owner, tokens packed as little-endian u64 in\n"
"the order they left the heap: the payload of one FIRE record per owner.");

static PyObject *
DeadlineHeap_pop_due(DeadlineHeapObject *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"now", "max_count", NULL};
    PyObject *now_obj, *max_obj = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O|O:pop_due", kwlist,
                                     &now_obj, &max_obj))
        return NULL;
    long long now;
    int overflow;
    if (parse_i64(now_obj, &now, &overflow) < 0)
        return NULL;
    int before_all = overflow < 0;   /* above the range, clamping is exact */
    size_t limit = SIZE_MAX;
    if (max_obj != Py_None) {
        long long m;
        if (parse_i64(max_obj, &m, &overflow) < 0)
            return NULL;
        if (m < 0) {
            PyErr_SetString(PyExc_ValueError, "max_count must be >= 0 or None");
            return NULL;
        }
        limit = (size_t)m;
    }

    nqh_heap *h = &self->h;
    if (h->n == 0 || limit == 0 || before_all || h->heap[0].deadline > now)
        return PyList_New(0);

    /* 1. pop into a scratch array; shrinking waits until the end so that a
     * failure later on can put everything back without allocating. */
    nqh_entry local[128];
    nqh_entry *popped = local;
    size_t scap = sizeof(local) / sizeof(local[0]), npop = 0;
    group_map g = {NULL, 0, NULL, 0, 0};
    uint32_t last_owner = 0;
    long last_group = -1;
    PyObject *result = NULL;

    while (npop < limit && h->n && h->heap[0].deadline <= now) {
        if (npop == scap) {
            nqh_entry *p;
            if (popped == local) {
                p = (nqh_entry *)nqh_mem_alloc(2 * scap * sizeof(nqh_entry));
                if (p != NULL)
                    memcpy(p, local, sizeof(local));
            } else {
                p = (nqh_entry *)nqh_mem_resize(popped, scap * sizeof(nqh_entry),
                                                2 * scap * sizeof(nqh_entry));
            }
            if (p == NULL)
                goto fail;
            popped = p;
            scap *= 2;
        }
        nqh_pop(h, &popped[npop]);
        long k = group_of(&g, popped[npop].owner, &last_owner, &last_group);
        npop++;
        if (k < 0)
            goto fail;
        g.groups[k].count++;
        popped[npop - 1].slot = (uint32_t)k;   /* reused: group index */
    }

    /* 2. one bytes object per owner, in owner order. */
    due_group *sorted = (due_group *)malloc(g.ngroups * sizeof(due_group));
    if (sorted == NULL)
        goto fail;
    for (size_t k = 0; k < g.ngroups; k++) {
        sorted[k] = g.groups[k];
        sorted[k].index = (uint32_t)k;  /* original group index */
    }
    qsort(sorted, g.ngroups, sizeof(due_group), cmp_group_owner);
    result = PyList_New((Py_ssize_t)g.ngroups);
    if (result == NULL) {
        free(sorted);
        goto fail;
    }
    for (size_t r = 0; r < g.ngroups; r++) {
        due_group *sg = &sorted[r];
        PyObject *blob = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)sg->count * NQL_TOKEN);
        PyObject *own = blob ? PyLong_FromUnsignedLong(sg->owner) : NULL;
        PyObject *pair = own ? PyTuple_New(2) : NULL;
        if (pair == NULL) {
            Py_XDECREF(blob);
            Py_XDECREF(own);
            free(sorted);
            goto fail;
        }
        g.groups[sg->index].out = PyBytes_AS_STRING(blob);
        PyTuple_SET_ITEM(pair, 0, own);
        PyTuple_SET_ITEM(pair, 1, blob);
        PyList_SET_ITEM(result, (Py_ssize_t)r, pair);
    }
    free(sorted);
    for (size_t k = 0; k < npop; k++) {
        due_group *grp = &g.groups[popped[k].slot];
        memcpy(grp->out, &popped[k].token, NQL_TOKEN);
        grp->out += NQL_TOKEN;
    }
    if (popped != local)
        nqh_mem_free(popped, scap * sizeof(nqh_entry));
    free(g.map);
    free(g.groups);
    nqh_maybe_shrink(h);
    return result;

fail:
    Py_XDECREF(result);
    /* put everything back: capacity only grew since the pops */
    for (size_t k = 0; k < npop; k++)
        nqh_reinsert(h, popped[k]);
    if (popped != local)
        nqh_mem_free(popped, scap * sizeof(nqh_entry));
    free(g.map);
    free(g.groups);
    return no_memory();
}

static PyMethodDef DeadlineHeap_methods[] = {
    {"arm", (PyCFunction)(void (*)(void))DeadlineHeap_arm, METH_FASTCALL,
     DeadlineHeap_arm_doc},
    {"disarm", (PyCFunction)(void (*)(void))DeadlineHeap_disarm, METH_FASTCALL,
     DeadlineHeap_disarm_doc},
    {"get", (PyCFunction)(void (*)(void))DeadlineHeap_get, METH_FASTCALL,
     DeadlineHeap_get_doc},
    {"arm_many", (PyCFunction)(void (*)(void))DeadlineHeap_arm_many, METH_FASTCALL,
     DeadlineHeap_arm_many_doc},
    {"disarm_many", (PyCFunction)(void (*)(void))DeadlineHeap_disarm_many,
     METH_FASTCALL, DeadlineHeap_disarm_many_doc},
    {"next_deadline", (PyCFunction)DeadlineHeap_next_deadline, METH_NOARGS,
     DeadlineHeap_next_deadline_doc},
    {"pop_due", (PyCFunction)(void (*)(void))DeadlineHeap_pop_due,
     METH_VARARGS | METH_KEYWORDS, DeadlineHeap_pop_due_doc},
    {"forget_owner", (PyCFunction)DeadlineHeap_forget_owner, METH_O,
     DeadlineHeap_forget_owner_doc},
    {NULL, NULL, 0, NULL},
};

static PySequenceMethods DeadlineHeap_as_sequence = {
    .sq_length = (lenfunc)DeadlineHeap_len,
};

PyDoc_STRVAR(DeadlineHeap_doc,
"DeadlineHeap()\n--\n\n"
"Deadlines (monotonic ns) keyed by (owner u32, token u64): an indexed\n"
"4-ary min-heap plus an open-addressing table, so arm, re-arm and disarm\n"
"are O(log n) with nothing left behind (see native/heap.h).");

static PyTypeObject DeadlineHeap_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "nsqmp._native.DeadlineHeap",
    .tp_basicsize = sizeof(DeadlineHeapObject),
    .tp_dealloc = (destructor)DeadlineHeap_dealloc,
    .tp_as_sequence = &DeadlineHeap_as_sequence,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = DeadlineHeap_doc,
    .tp_methods = DeadlineHeap_methods,
    .tp_new = DeadlineHeap_new,
};

/* Called from the module exec slot (module.c). */
int
nsqmp_heap_add(PyObject *module)
{
    if (PyType_Ready(&DeadlineHeap_Type) < 0)
        return -1;
    if (PyModule_AddType(module, &DeadlineHeap_Type) < 0)
        return -1;
    return 0;
}
