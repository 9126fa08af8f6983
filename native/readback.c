/*
 * readback.c -- the Python side of the router's read-back path (parsing in
 * readback.h, record layout in publish.h): the type Message and the functions
 * read_messages and pack_frames.  The pure-Python twin is
 * nsqmp/router/pyreadback.py (same API, same results).
 *
 * Message is the router's one stored copy of a message, in one allocation
 * (layout drawn in message.h, where inflight.c reads it too).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#include "message.h"
#include "readback.h"

typedef nsqmp_Message MessageObject;
#define Message_Type nsqmp_Message_Type

static void
Message_dealloc(MessageObject *self)
{
    Py_XDECREF(self->segment);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

PyObject *
nsqmp_message_new(const uint8_t *id, long long ts, const char *body, Py_ssize_t body_len,
                  PyObject *segment, long long offset)
{
    MessageObject *m = PyObject_NewVar(MessageObject, &Message_Type, body_len);
    if (m == NULL)
        return NULL;
    m->segment = Py_NewRef(segment);
    m->ts = ts;
    m->offset = offset;
    memcpy(m->id, id, NQL_ID);
    memcpy(m->body, body, (size_t)body_len);
    return (PyObject *)m;
}

static PyObject *
Message_new(PyTypeObject *Py_UNUSED(type), PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"msg_id", "ts", "body", "segment", "offset", NULL};
    Py_buffer id, body;
    PyObject *segment, *m = NULL;
    long long ts, offset;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "y*Ly*OL:Message", kwlist, &id, &ts, &body, &segment, &offset))
        return NULL;
    if (id.len != NQL_ID)
        PyErr_SetString(PyExc_ValueError, "a message id must be 16 bytes");
    else
        m = nsqmp_message_new(id.buf, ts, body.buf, body.len, segment, offset);
    PyBuffer_Release(&id);
    PyBuffer_Release(&body);
    return m;
}

static PyObject *
Message_get_id(MessageObject *self, void *Py_UNUSED(closure))
{
    return PyBytes_FromStringAndSize((const char *)self->id, NQL_ID);
}

static PyObject *
Message_get_body(MessageObject *self, void *Py_UNUSED(closure))
{
    return PyBytes_FromStringAndSize(self->body, Py_SIZE(self));
}

static PyObject *
Message_get_segment(MessageObject *self, void *Py_UNUSED(closure))
{
    return Py_NewRef(self->segment);
}

static int
Message_set_segment(MessageObject *self, PyObject *value, void *Py_UNUSED(closure))
{
    if (value == NULL) {
        PyErr_SetString(PyExc_AttributeError, "cannot delete a message's segment");
        return -1;
    }
    Py_SETREF(self->segment, Py_NewRef(value));
    return 0;
}

static PyGetSetDef Message_getset[] = {
    {"id", (getter)Message_get_id, NULL, "message id (16 bytes of ASCII hex; read-only)", NULL},
    {"body", (getter)Message_get_body, NULL, "message body (read-only)", NULL},
    {"segment", (getter)Message_get_segment, (setter)Message_set_segment,
     "the Segment whose refs count this message, or None", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMemberDef Message_members[] = {
    {"ts", T_LONGLONG, offsetof(MessageObject, ts), 0, "timestamp, ns since the epoch"},
    {"offset", T_LONGLONG, offsetof(MessageObject, offset), 0, "of its record in that segment"},
    {NULL, 0, 0, 0, NULL},
};

PyDoc_STRVAR(Message_doc,
"Message(msg_id, ts, body, segment, offset)\n--\n\n"
"A message as the router holds it; shared by every channel of its topic.\n"
"msg_id (16 bytes) and body are copied into it and read-only.");

PyTypeObject nsqmp_Message_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "nsqmp._native.Message",
    .tp_basicsize = offsetof(MessageObject, body),
    .tp_itemsize = 1,
    .tp_dealloc = (destructor)Message_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = Message_doc,
    .tp_members = Message_members,
    .tp_getset = Message_getset,
    .tp_new = Message_new,
};

/* ------------------------------------------------------------------ */
/* read_messages                                                       */
/* ------------------------------------------------------------------ */

PyDoc_STRVAR(read_messages_doc,
"read_messages(buf, base, want, segment, /)\n--\n\n"
"Up to `want` whole segment records from the start of buf, as\n"
"(entries, consumed, deferred): entries are (Message, due_ns or 0) with\n"
"offset = base + the record's position in buf; consumed = bytes of the whole\n"
"records read; deferred = entries with due_ns != 0.  A partial record at the\n"
"end is left; a length word of 0 or a record too short raises ValueError.\n"
"CRCs are not verified (the records are trusted).");

static PyObject *
py_read_messages(PyObject *Py_UNUSED(self), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "read_messages() takes exactly 4 positional arguments");
        return NULL;
    }
    long long base = PyLong_AsLongLong(args[1]);
    if (base == -1 && PyErr_Occurred())
        return NULL;
    Py_ssize_t want = PyLong_AsSsize_t(args[2]);
    if (want == -1 && PyErr_Occurred())
        return NULL;
    PyObject *segment = args[3];
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0)
        return NULL;
    if (base > LLONG_MAX - (long long)view.len) {  /* every offset base + pos fits a long long */
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_OverflowError, "base + len(buf) does not fit in 64 bits");
        return NULL;
    }
    PyObject *entries = PyList_New(0);
    if (entries == NULL) {
        PyBuffer_Release(&view);
        return NULL;
    }
    const uint8_t *buf = view.buf;
    size_t len = (size_t)view.len, pos = 0;
    Py_ssize_t count = 0, deferred = 0;
    while (count < want) {
        nqb_record r;
        int rc = nqb_parse(buf, len, pos, &r);
        if (rc == NQB_PARTIAL)
            break;
        if (rc != NQB_OK) {
            PyErr_Format(PyExc_ValueError, rc == NQB_EMPTY ? "no record at offset %lld"
                                                           : "record too short at offset %lld",
                         base + (long long)pos);
            goto fail;
        }
        PyObject *m = nsqmp_message_new(r.id, r.ts, (const char *)r.body, (Py_ssize_t)r.body_len,
                                        segment, base + (long long)pos);
        if (m == NULL)
            goto fail;
        PyObject *entry = nsqmp_message_pair(m, r.due);
        Py_DECREF(m);
        if (entry == NULL)
            goto fail;
        int added = PyList_Append(entries, entry);
        Py_DECREF(entry);
        if (added < 0)
            goto fail;
        if (r.due != 0)
            deferred++;
        count++;
        pos += r.size;
    }
    PyBuffer_Release(&view);
    PyObject *result = PyTuple_New(3);
    if (result == NULL) {
        Py_DECREF(entries);
        return NULL;
    }
    PyTuple_SET_ITEM(result, 0, entries);
    PyObject *item = PyLong_FromSize_t(pos);
    if (item == NULL) {
        Py_DECREF(result);
        return NULL;
    }
    PyTuple_SET_ITEM(result, 1, item);
    item = PyLong_FromSsize_t(deferred);
    if (item == NULL) {
        Py_DECREF(result);
        return NULL;
    }
    PyTuple_SET_ITEM(result, 2, item);
    return result;

fail:
    PyBuffer_Release(&view);
    Py_DECREF(entries);
    return NULL;
}

/* ------------------------------------------------------------------ */
/* pack_frames                                                         */
/* ------------------------------------------------------------------ */

PyDoc_STRVAR(pack_frames_doc,
"pack_frames(head, entries, start, max_bytes, /)\n--\n\n"
"head followed by the NSQ message frames of entries[start:] ((Message,\n"
"attempts) pairs) while the frames total at most max_bytes (always at least\n"
"one frame), as (bytes, index of the first entry left out).  The frames are\n"
"nsqmp.protocol.frames.message_frame(m.ts, attempts, m.id, m.body).");

PyDoc_STRVAR(pack_members_doc,
"pack_members(head, members, start, max_bytes, /)\n--\n\n"
"pack_frames over a flight's flat members list (message, attempts, message,\n"
"attempts, ...: what InFlightMap.fly appends): start and the index returned\n"
"count messages, not list items.");

/* Entry i's message and attempts: of the pair items[i], or (flat) of
 * items[2i] and items[2i + 1]; -1 with an exception if a pair is not a 2-tuple. */
static int
entry_at(PyObject **items, Py_ssize_t i, int flat, PyObject **m, PyObject **attempts)
{
    if (flat) {
        *m = items[2 * i];
        *attempts = items[2 * i + 1];
        return 0;
    }
    PyObject *entry = items[i];
    if (!PyTuple_Check(entry) || PyTuple_GET_SIZE(entry) != 2) {
        PyErr_Format(PyExc_TypeError, "entry %zd is not a (Message, attempts) pair", i);
        return -1;
    }
    *m = PyTuple_GET_ITEM(entry, 0);
    *attempts = PyTuple_GET_ITEM(entry, 1);
    return 0;
}

/* The message of entry i, checked for pack_frames; NULL with an exception. */
static MessageObject *
frame_message(PyObject **items, Py_ssize_t i, int flat)
{
    PyObject *m, *attempts;
    if (entry_at(items, i, flat, &m, &attempts) < 0)
        return NULL;
    if (!PyObject_TypeCheck(m, &Message_Type)) {
        PyErr_Format(PyExc_TypeError, "entry %zd: %.100s is not a Message", i, Py_TYPE(m)->tp_name);
        return NULL;
    }
    if (!PyLong_Check(attempts)) {
        PyErr_Format(PyExc_TypeError, "entry %zd: attempts must be an int", i);
        return NULL;
    }
    MessageObject *msg = (MessageObject *)m;
    if (Py_SIZE(msg) > (Py_ssize_t)(INT32_MAX - 4 - NQL_MESSAGE_HEAD)) {
        PyErr_Format(PyExc_ValueError, "entry %zd: a message body too long for a frame", i);
        return NULL;
    }
    return msg;
}

/* pack_frames (flat 0) and pack_members (flat 1) */
static PyObject *
pack(PyObject *const *args, Py_ssize_t nargs, int flat)
{
    if (nargs != 4) {
        PyErr_Format(PyExc_TypeError, "%s() takes exactly 4 positional arguments",
                     flat ? "pack_members" : "pack_frames");
        return NULL;
    }
    Py_ssize_t start = PyLong_AsSsize_t(args[2]);
    if (start == -1 && PyErr_Occurred())
        return NULL;
    if (start < 0) {
        PyErr_SetString(PyExc_ValueError, "start must not be negative");
        return NULL;
    }
    Py_ssize_t max_bytes = PyLong_AsSsize_t(args[3]);
    if (max_bytes == -1 && PyErr_Occurred())
        return NULL;
    PyObject *seq = PySequence_Fast(args[1], "entries must be a sequence");
    if (seq == NULL)
        return NULL;
    if (flat && PySequence_Fast_GET_SIZE(seq) % 2 != 0) {
        Py_DECREF(seq);
        PyErr_SetString(PyExc_TypeError, "members must be a list of message, attempts, ...");
        return NULL;
    }
    Py_buffer head;
    if (PyObject_GetBuffer(args[0], &head, PyBUF_SIMPLE) < 0) {
        Py_DECREF(seq);
        return NULL;
    }
    /* pass 1: how many frames, how many bytes (no Python code runs between the passes) */
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq) / (flat ? 2 : 1);
    PyObject **items = PySequence_Fast_ITEMS(seq);
    Py_ssize_t stop = start, total = 0;
    PyObject *out = NULL;
    while (stop < n) {
        MessageObject *msg = frame_message(items, stop, flat);
        if (msg == NULL)
            goto done;
        Py_ssize_t size = NQL_MESSAGE_FRAME_HEAD + Py_SIZE(msg);
        if (stop > start && (max_bytes < total || size > max_bytes - total))
            break;  /* total + size > max_bytes, without overflowing */
        if (total > PY_SSIZE_T_MAX - head.len - size) {
            PyErr_NoMemory();
            goto done;
        }
        total += size;
        stop++;
    }
    out = PyBytes_FromStringAndSize(NULL, head.len + total);
    if (out == NULL)
        goto done;
    /* pass 2: write them */
    uint8_t *dst = (uint8_t *)PyBytes_AS_STRING(out);
    memcpy(dst, head.buf, (size_t)head.len);
    dst += head.len;
    for (Py_ssize_t i = start; i < stop; i++) {
        PyObject *m, *count;
        entry_at(items, i, flat, &m, &count);  /* checked in pass 1 */
        MessageObject *msg = (MessageObject *)m;
        uint16_t attempts = (uint16_t)(PyLong_AsUnsignedLongLongMask(count) & 0xFFFF);
        size_t body_len = (size_t)Py_SIZE(msg);
        nqb_put_frame(dst, (int64_t)msg->ts, attempts, msg->id, (const uint8_t *)msg->body, body_len);
        dst += NQL_MESSAGE_FRAME_HEAD + body_len;
    }
    /* (PyLong_AsUnsignedLongLongMask cannot fail on an int) */
    PyObject *next = PyLong_FromSsize_t(stop);
    PyObject *pair = next == NULL ? NULL : PyTuple_New(2);
    if (pair == NULL) {
        Py_XDECREF(next);
        Py_CLEAR(out);
        goto done;
    }
    PyTuple_SET_ITEM(pair, 0, out);
    PyTuple_SET_ITEM(pair, 1, next);
    out = pair;
done:
    PyBuffer_Release(&head);
    Py_DECREF(seq);
    return out;
}

static PyObject *
py_pack_frames(PyObject *Py_UNUSED(self), PyObject *const *args, Py_ssize_t nargs)
{
    return pack(args, nargs, 0);
}

static PyObject *
py_pack_members(PyObject *Py_UNUSED(self), PyObject *const *args, Py_ssize_t nargs)
{
    return pack(args, nargs, 1);
}


/* ------------------------------------------------------------------ */
/* frame_ends                                                          */
/* ------------------------------------------------------------------ */

PyDoc_STRVAR(frame_ends_doc,
"frame_ends(frames, /)\n--\n\n"
"Where each whole frame of `frames` ends: bytes of native u32 offsets, one\n"
"per frame.  A frame is a 4-byte big-endian size and that many bytes; a frame\n"
"cut short at the end is not counted.  The acceptor takes them from a record\n"
"of frames sent ahead as it arrives, while its bytes are in the cache: walking\n"
"the frames when a FIN comes, a fraction of a second later, missed the cache\n"
"once a frame (6 % of the acceptor's time under the mixed load).");

/* The whole frames of p[0:len]: how many; their end offsets into ends when given. */
static Py_ssize_t
frame_walk(const uint8_t *p, Py_ssize_t len, uint32_t *ends)
{
    Py_ssize_t pos = 0, n = 0;
    while (len - pos >= NQL_FRAME_SIZE) {
        uint32_t size = (uint32_t)p[pos] << 24 | (uint32_t)p[pos + 1] << 16
                        | (uint32_t)p[pos + 2] << 8 | (uint32_t)p[pos + 3];
        if ((Py_ssize_t)size > len - pos - NQL_FRAME_SIZE)
            break;
        pos += NQL_FRAME_SIZE + (Py_ssize_t)size;
        if (ends != NULL)
            ends[n] = (uint32_t)pos;
        n++;
    }
    return n;
}

static PyObject *
py_frame_ends(PyObject *Py_UNUSED(self), PyObject *arg)
{
    Py_buffer buf;
    if (PyObject_GetBuffer(arg, &buf, PyBUF_SIMPLE) < 0)
        return NULL;
    if (buf.len > (Py_ssize_t)UINT32_MAX) {
        PyBuffer_Release(&buf);
        PyErr_SetString(PyExc_ValueError, "frames longer than 4 GiB");
        return NULL;
    }
    const uint8_t *p = (const uint8_t *)buf.buf;
    /* two walks: the first sizes the result exactly; the frames are in the cache (the
     * record was just copied out of the ring), so the second costs little */
    Py_ssize_t n = frame_walk(p, buf.len, NULL);
    PyObject *out = PyBytes_FromStringAndSize(NULL, n * (Py_ssize_t)sizeof(uint32_t));
    if (out != NULL)
        frame_walk(p, buf.len, (uint32_t *)PyBytes_AS_STRING(out));
    PyBuffer_Release(&buf);
    return out;
}

static PyMethodDef readback_functions[] = {
    {"read_messages", (PyCFunction)(void (*)(void))py_read_messages, METH_FASTCALL, read_messages_doc},
    {"pack_frames", (PyCFunction)(void (*)(void))py_pack_frames, METH_FASTCALL, pack_frames_doc},
    {"pack_members", (PyCFunction)(void (*)(void))py_pack_members, METH_FASTCALL, pack_members_doc},
    {"frame_ends", py_frame_ends, METH_O, frame_ends_doc},
    {NULL, NULL, 0, NULL},
};

int
nsqmp_readback_add(PyObject *module)
{
    if (PyType_Ready(&Message_Type) < 0)
        return -1;
    if (PyModule_AddType(module, &Message_Type) < 0)
        return -1;
    return PyModule_AddFunctions(module, readback_functions);
}
