/*
 * parser.c -- the Python type nsqmp._native.Parser (the command scanner of
 * parser.h) and the MPUB splitter mpub_spans.  The pure-Python
 * twin is nsqmp/protocol/pyparser.py; both have the same API, the same
 * results and the same error texts.
 *
 * One scan() call walks a whole read buffer and returns every complete
 * command in it as plain tuples
 *
 *     (params, body_off, body_len, next)
 *
 * params is a tuple of bytes split on single spaces, params[0] the token
 * (the known tokens are shared objects, not new bytes); a body is given by
 * its offset and size in the buffer, never copied.  Nothing here calls back
 * into Python code, so no Python exception can cross a foreign frame.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "layouts.h"
#include "parser.h"

typedef struct {
    PyObject_HEAD
    int64_t max_msg_size;
    int64_t max_body_size;
    Py_ssize_t max_line;
} ParserObject;

static PyTypeObject Parser_Type;

/* the known tokens, shared by every params tuple */
static PyObject *token_objects[NQP_T_COUNT];

/* ------------------------------------------------------------------ */
/* helpers                                                             */
/* ------------------------------------------------------------------ */

static PyObject *
error_tuple(const nqp_error *err)
{
    return Py_BuildValue("(ss)", err->code, err->text);
}

/* The params tuple of the line buf[line .. line+len), split on every space. */
static PyObject *
make_params(const uint8_t *buf, size_t line, size_t len, int token)
{
    const uint8_t *p = buf + line;
    const uint8_t *end = p + len;
    Py_ssize_t count = 1;
    for (const uint8_t *q = p; (q = memchr(q, ' ', (size_t)(end - q))) != NULL; q++)
        count++;
    PyObject *params = PyTuple_New(count);
    if (params == NULL)
        return NULL;
    Py_ssize_t i = 0;
    const uint8_t *start = p;
    for (;;) {
        const uint8_t *sp = start < end ? memchr(start, ' ', (size_t)(end - start)) : NULL;
        const uint8_t *stop = sp ? sp : end;
        PyObject *item;
        if (i == 0 && token != NQP_T_OTHER)
            item = Py_NewRef(token_objects[token]);
        else
            item = PyBytes_FromStringAndSize((const char *)start, stop - start);
        if (item == NULL) {
            Py_DECREF(params);
            return NULL;
        }
        PyTuple_SET_ITEM(params, i++, item);
        if (sp == NULL)
            break;
        start = sp + 1;
    }
    return params;
}

/* The buffer of obj, which must reach pos; -1 with an exception otherwise. */
static int
get_view(PyObject *obj, Py_ssize_t pos, Py_buffer *view)
{
    if (PyObject_GetBuffer(obj, view, PyBUF_SIMPLE) < 0)
        return -1;
    if (pos > view->len) {
        PyBuffer_Release(view);
        PyErr_SetString(PyExc_ValueError, "pos is past the end of the buffer");
        return -1;
    }
    return 0;
}

static int
get_index(PyObject *obj, const char *what, Py_ssize_t lo, Py_ssize_t *out)
{
    Py_ssize_t v = PyNumber_AsSsize_t(obj, PyExc_OverflowError);
    if (v == -1 && PyErr_Occurred())
        return -1;
    if (v < lo) {
        PyErr_Format(PyExc_ValueError, "%s must be >= %zd", what, lo);
        return -1;
    }
    *out = v;
    return 0;
}

static int
get_limit(PyObject *obj, const char *what, int64_t *out)
{
    long long v = PyLong_AsLongLong(obj);
    if (v == -1 && PyErr_Occurred())
        return -1;
    if (v < 0) {
        PyErr_Format(PyExc_ValueError, "%s must be >= 0", what);
        return -1;
    }
    *out = (int64_t)v;
    return 0;
}

/* ------------------------------------------------------------------ */
/* Parser                                                              */
/* ------------------------------------------------------------------ */

static PyObject *
Parser_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"max_msg_size", "max_body_size", "max_line", NULL};
    PyObject *max_msg, *max_body;
    Py_ssize_t max_line = NQP_MAX_LINE;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OO|n:Parser", kwlist, &max_msg, &max_body, &max_line))
        return NULL;
    int64_t msg, body;
    if (get_limit(max_msg, "max_msg_size", &msg) < 0 || get_limit(max_body, "max_body_size", &body) < 0)
        return NULL;
    if (max_line < 1) {
        PyErr_SetString(PyExc_ValueError, "max_line must be >= 1");
        return NULL;
    }
    ParserObject *self = (ParserObject *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->max_msg_size = msg;
    self->max_body_size = body;
    self->max_line = max_line;
    return (PyObject *)self;
}

PyDoc_STRVAR(Parser_scan_doc,
"scan($self, buf, pos=0, max_commands=1024)\n--\n\n"
"The complete commands in buf from pos: (commands, end, status, error).\n\n"
"commands: list of (params, body_off, body_len, next); params[0] is the\n"
"token; body_off is the body's offset, or NO_BODY, or BODY_PENDING /\n"
"BODY_INVALID for the last command when its body is not ready / its size\n"
"breaks a limit; next is where the following command starts.\n"
"end: where the next scan starts.  status: SCAN_*.  error: (code, text)\n"
"with status SCAN_BAD_BODY, else None.");

static PyObject *
Parser_scan(ParserObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    static const char *const names[] = {"buf", "pos", "max_commands"};
    PyObject *argv[3] = {NULL, NULL, NULL};
    Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    if (nargs > 3) {
        PyErr_Format(PyExc_TypeError, "scan() takes at most 3 arguments (%zd given)", nargs);
        return NULL;
    }
    for (Py_ssize_t i = 0; i < nargs; i++)
        argv[i] = args[i];
    for (Py_ssize_t k = 0; k < nkw; k++) {
        PyObject *key = PyTuple_GET_ITEM(kwnames, k);
        int found = 0;
        for (int i = 0; i < 3; i++) {
            if (PyUnicode_CompareWithASCIIString(key, names[i]) == 0) {
                if (argv[i] != NULL) {
                    PyErr_Format(PyExc_TypeError, "scan() got multiple values for argument '%s'", names[i]);
                    return NULL;
                }
                argv[i] = args[nargs + k];
                found = 1;
            }
        }
        if (!found) {
            PyErr_Format(PyExc_TypeError, "scan() got an unexpected keyword argument '%U'", key);
            return NULL;
        }
    }
    if (argv[0] == NULL) {
        PyErr_SetString(PyExc_TypeError, "scan() missing required argument 'buf'");
        return NULL;
    }
    Py_ssize_t pos = 0, max_commands = 1024;
    if (argv[1] != NULL && get_index(argv[1], "pos", 0, &pos) < 0)
        return NULL;
    if (argv[2] != NULL && get_index(argv[2], "max_commands", 1, &max_commands) < 0)
        return NULL;

    Py_buffer view;
    if (get_view(argv[0], pos, &view) < 0)
        return NULL;
    const uint8_t *buf = (const uint8_t *)view.buf;
    size_t n = (size_t)view.len;
    PyObject *commands = PyList_New(0);
    PyObject *error = NULL;
    int status = NQP_SCAN_NEED_MORE;
    if (commands == NULL)
        goto fail;
    for (;;) {
        if (PyList_GET_SIZE(commands) >= max_commands) {
            status = NQP_SCAN_MORE;
            break;
        }
        nqp_frame f;
        nqp_error err;
        int r = nqp_frame_next(buf, n, (size_t)pos, (size_t)self->max_line,
                               self->max_msg_size, self->max_body_size, &f, &err);
        if (r == NQP_FRAME_NEED_MORE) {
            status = NQP_SCAN_NEED_MORE;
            break;
        }
        if (r == NQP_FRAME_TOO_LONG) {
            status = NQP_SCAN_LINE_TOO_LONG;
            break;
        }
        PyObject *params = make_params(buf, f.line, f.line_len, f.token);
        if (params == NULL)
            goto fail;
        PyObject *cmd = Py_BuildValue("(NLLn)", params, (long long)f.body_off, (long long)f.body_len,
                                      (Py_ssize_t)f.next);
        if (cmd == NULL)
            goto fail;
        int rc = PyList_Append(commands, cmd);
        Py_DECREF(cmd);
        if (rc < 0)
            goto fail;
        if (f.body_off == NQP_BODY_PENDING) {
            status = NQP_SCAN_BODY_PENDING;
            break;
        }
        if (f.body_off == NQP_BODY_INVALID) {
            status = NQP_SCAN_BAD_BODY;
            error = error_tuple(&err);
            if (error == NULL)
                goto fail;
            break;
        }
        pos = (Py_ssize_t)f.next;
    }
    PyBuffer_Release(&view);
    if (error == NULL)
        error = Py_NewRef(Py_None);
    return Py_BuildValue("(NniN)", commands, pos, status, error);

fail:
    PyBuffer_Release(&view);
    Py_XDECREF(commands);
    Py_XDECREF(error);
    return NULL;
}

PyDoc_STRVAR(Parser_fins_doc,
"fins($self, buf, pos=0, max_ids=512)\n--\n\n"
"The IDs of the plain FIN lines (parser.h) that start at pos, at most max_ids:\n"
"(ids, end), ids their 16-byte IDs end to end, end where the first other line\n"
"starts.  scan() would return the same lines as (\"FIN\", ID) commands.");

static PyObject *
Parser_fins(ParserObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    Py_ssize_t pos = 0, max_ids = 512;
    if (nargs < 1 || nargs > 3) {
        PyErr_Format(PyExc_TypeError, "fins() takes 1 to 3 arguments (%zd given)", nargs);
        return NULL;
    }
    if (nargs > 1 && get_index(args[1], "pos", 0, &pos) < 0)
        return NULL;
    if (nargs > 2 && get_index(args[2], "max_ids", 1, &max_ids) < 0)
        return NULL;
    Py_buffer view;
    if (get_view(args[0], pos, &view) < 0)
        return NULL;
    const uint8_t *buf = (const uint8_t *)view.buf;
    size_t n = (size_t)view.len, end = (size_t)pos, len;
    Py_ssize_t count = 0;
    while (count < max_ids && (len = nqp_fin_line(buf, n, end, (size_t)self->max_line)) != 0) {
        end += len;
        count++;
    }
    PyObject *ids = PyBytes_FromStringAndSize(NULL, 16 * count);
    if (ids != NULL) {
        char *out = PyBytes_AS_STRING(ids);
        for (size_t at = (size_t)pos; at < end; out += 16) {
            memcpy(out, buf + at + 4, 16);
            at += buf[at + 20] == '\n' ? 21 : 22;
        }
    }
    PyBuffer_Release(&view);
    if (ids == NULL)
        return NULL;
    return Py_BuildValue("(Nn)", ids, (Py_ssize_t)end);
}

static PyObject *
Parser_get_max_msg_size(ParserObject *self, void *Py_UNUSED(closure))
{
    return PyLong_FromLongLong(self->max_msg_size);
}

static PyObject *
Parser_get_max_body_size(ParserObject *self, void *Py_UNUSED(closure))
{
    return PyLong_FromLongLong(self->max_body_size);
}

static PyObject *
Parser_get_max_line(ParserObject *self, void *Py_UNUSED(closure))
{
    return PyLong_FromSsize_t(self->max_line);
}

static PyMethodDef Parser_methods[] = {
    {"scan", (PyCFunction)(void (*)(void))Parser_scan, METH_FASTCALL | METH_KEYWORDS, Parser_scan_doc},
    {"fins", (PyCFunction)(void (*)(void))Parser_fins, METH_FASTCALL, Parser_fins_doc},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Parser_getset[] = {
    {"max_msg_size", (getter)Parser_get_max_msg_size, NULL, "PUB/DPUB/MPUB message size limit", NULL},
    {"max_body_size", (getter)Parser_get_max_body_size, NULL, "IDENTIFY/AUTH/MPUB body size limit", NULL},
    {"max_line", (getter)Parser_get_max_line, NULL, "longest command line, \\n included", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

PyDoc_STRVAR(Parser_doc,
"Parser(max_msg_size, max_body_size, max_line=16384)\n--\n\n"
"Framing of NSQ V2 commands in a connection's read buffer (see native/parser.h).");

static PyTypeObject Parser_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "nsqmp._native.Parser",
    .tp_basicsize = sizeof(ParserObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = Parser_doc,
    .tp_new = Parser_new,
    .tp_methods = Parser_methods,
    .tp_getset = Parser_getset,
};

/* ------------------------------------------------------------------ */
/* MPUB                                                                */
/* ------------------------------------------------------------------ */

/* The body buf[start .. start+length) of mpub_spans. */
static int
mpub_args(PyObject *const *args, Py_ssize_t nargs, const char *name, Py_buffer *view,
          size_t *start, size_t *length, int64_t *max_msg, int64_t *max_body)
{
    if (nargs != 5) {
        PyErr_Format(PyExc_TypeError, "%s() takes exactly 5 positional arguments (%zd given)", name, nargs);
        return -1;
    }
    Py_ssize_t s, l;
    if (get_index(args[1], "start", 0, &s) < 0 || get_index(args[2], "length", 0, &l) < 0)
        return -1;
    if (get_limit(args[3], "max_msg_size", max_msg) < 0 || get_limit(args[4], "max_body_size", max_body) < 0)
        return -1;
    if (PyObject_GetBuffer(args[0], view, PyBUF_SIMPLE) < 0)
        return -1;
    if (s > view->len || l > view->len - s) {
        PyBuffer_Release(view);
        PyErr_SetString(PyExc_ValueError, "start + length is past the end of the buffer");
        return -1;
    }
    *start = (size_t)s;
    *length = (size_t)l;
    return 0;
}

PyDoc_STRVAR(mpub_spans_doc,
"mpub_spans(buf, start, length, max_msg_size, max_body_size, /)\n--\n\n"
"The messages of the MPUB body buf[start:start+length], validated as nsqd\n"
"does, without a Python object per message: (spans, None) where spans is\n"
"bytes of little-endian u32 pairs (offset in buf, size), one pair per\n"
"message; or (None, (code, text)) at the first error.");

static PyObject *
mpub_spans(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    Py_buffer view;
    size_t start, length;
    int64_t max_msg, max_body;
    if (mpub_args(args, nargs, "mpub_spans", &view, &start, &length, &max_msg, &max_body) < 0)
        return NULL;
    if (view.len > (Py_ssize_t)UINT32_MAX) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "mpub_spans() needs a buffer under 4 GiB");
        return NULL;
    }
    const uint8_t *p = (const uint8_t *)view.buf + start;
    nqp_error err;
    int64_t count = nqp_mpub_validate(p, length, max_msg, max_body, &err);
    if (count < 0) {
        PyBuffer_Release(&view);
        PyObject *e = error_tuple(&err);
        return e ? Py_BuildValue("(ON)", Py_None, e) : NULL;
    }
    PyObject *spans = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)count * NQL_SPAN);
    if (spans == NULL) {
        PyBuffer_Release(&view);
        return NULL;
    }
    uint8_t *out = (uint8_t *)PyBytes_AS_STRING(spans);
    size_t pos = 4;
    for (int64_t i = 0; i < count; i++) {
        size_t off, size;
        nqp_mpub_next(p, &pos, &off, &size);
        uint32_t pair[2] = {(uint32_t)(start + off), (uint32_t)size};
        memcpy(out + i * NQL_SPAN, pair, NQL_SPAN);   /* little-endian host (checked in heap.c) */
    }
    PyBuffer_Release(&view);
    return Py_BuildValue("(NO)", spans, Py_None);
}

static PyMethodDef parser_functions[] = {
    {"mpub_spans", (PyCFunction)(void (*)(void))mpub_spans, METH_FASTCALL, mpub_spans_doc},
    {NULL, NULL, 0, NULL},
};

int
nsqmp_parser_add(PyObject *module)
{
    for (int t = 0; t < NQP_T_COUNT; t++) {
        if (token_objects[t] == NULL) {
            token_objects[t] = PyBytes_FromString(nqp_token_names[t]);
            if (token_objects[t] == NULL)
                return -1;
        }
    }
    if (PyType_Ready(&Parser_Type) < 0)
        return -1;
    if (PyModule_AddType(module, &Parser_Type) < 0)
        return -1;
    if (PyModule_AddFunctions(module, parser_functions) < 0)
        return -1;
    static const struct { const char *name; int value; } constants[] = {
        {"MAX_LINE", NQP_MAX_LINE},
        {"NO_BODY", NQP_NO_BODY},
        {"BODY_PENDING", NQP_BODY_PENDING},
        {"BODY_INVALID", NQP_BODY_INVALID},
        {"SCAN_NEED_MORE", NQP_SCAN_NEED_MORE},
        {"SCAN_MORE", NQP_SCAN_MORE},
        {"SCAN_BODY_PENDING", NQP_SCAN_BODY_PENDING},
        {"SCAN_BAD_BODY", NQP_SCAN_BAD_BODY},
        {"SCAN_LINE_TOO_LONG", NQP_SCAN_LINE_TOO_LONG},
    };
    for (size_t i = 0; i < sizeof(constants) / sizeof(constants[0]); i++) {
        if (PyModule_AddIntConstant(module, constants[i].name, constants[i].value) < 0)
            return -1;
    }
    return 0;
}
