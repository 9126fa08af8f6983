/*
 * module.c -- initialisation of the extension module nsqmp._native.
 *
 * Keep this file small: every native type lives in its own translation unit
 * and exposes one `int nsqmp_<name>_add(PyObject *module)` function that adds
 * its types/functions/constants to the module; list it in `adders` below
 * (and its source file in setup.py).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

int nsqmp_ring_add(PyObject *module);   /* ring.c */
int nsqmp_heap_add(PyObject *module);   /* heap.c */
int nsqmp_parser_add(PyObject *module); /* parser.c */
int nsqmp_publish_add(PyObject *module); /* publish.c */
int nsqmp_acklog_add(PyObject *module);  /* acklog.c */
int nsqmp_readback_add(PyObject *module); /* readback.c */
int nsqmp_inflight_add(PyObject *module); /* inflight.c */
int nsqmp_timerfd_add(PyObject *module);  /* timerfd.c */
int nsqmp_layouts_add(PyObject *module);  /* layouts.c */
int nsqmp_pubrun_add(PyObject *module);   /* pubrun.c */
int nsqmp_ids_add(PyObject *module);      /* ids.c */
int nsqmp_segtail_add(PyObject *module);  /* segtail.c */
int nsqmp_coalesce_add(PyObject *module); /* coalesce.c */
int nsqmp_readpath_add(PyObject *module); /* readpath.c */
int nsqmp_spin_add(PyObject *module);     /* spin.c */

static int (*const adders[])(PyObject *) = {
    nsqmp_ring_add,
    nsqmp_heap_add,
    nsqmp_parser_add,
    nsqmp_publish_add,
    nsqmp_acklog_add,
    nsqmp_readback_add,
    nsqmp_inflight_add,
    nsqmp_timerfd_add,
    nsqmp_layouts_add,
    nsqmp_pubrun_add,
    nsqmp_ids_add,
    nsqmp_segtail_add,
    nsqmp_coalesce_add,
    nsqmp_readpath_add,
    nsqmp_spin_add,
};

static int
native_exec(PyObject *module)
{
    for (size_t i = 0; i < sizeof(adders) / sizeof(adders[0]); i++) {
        if (adders[i](module) < 0)
            return -1;
    }
    return 0;
}

static PyModuleDef_Slot native_slots[] = {
    {Py_mod_exec, native_exec},
    {0, NULL},
};

static struct PyModuleDef native_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "nsqmp._native",
    .m_doc = "C core of nsqmp (shared-memory rings, deadline heap, command parser, publish encoder, router read-back).",
    .m_size = 0,
    .m_slots = native_slots,
};

PyMODINIT_FUNC
PyInit__native(void)
{
    return PyModuleDef_Init(&native_module);
}
