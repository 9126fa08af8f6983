/*
 * pubrun.c -- a run of PUB/MPUB commands from a connection's read buffer to
 * its topic's segment file in one call: pub_run.  The pure-Python twin is
 * nsqmp/diskqueue/pubrun.py (same API, same bytes; the tests run both).
 *
 * Why: a publisher sending one message per command (go-nsq's Publish,
 * pynsq's Writer.pub, nsq's bench_writer: MPUB of one) paid a scan, a handler,
 * the span checks, the encoder, the ID block and the append as a dozen Python
 * frames per command.  Here the commands of one read that the general path
 * would answer OK are framed, checked, stamped, encoded and appended together.
 *
 * It takes, from buf[pos:], commands of exactly these forms, back to back:
 *
 *   PUB <topic>\n  <size i32 BE>  <body: size bytes>     1 <= size <= max_msg
 *   MPUB <topic>\n <size i32 BE>  <count i32 BE> count x (<size i32 BE> <body>)
 *        4 <= size <= max_body, 1 <= count <= (max_body - 4) / 5,
 *        1 <= each message's size <= max_msg, the messages inside the body
 *
 * with <topic> the caller's (already checked and allowed) topic.  It stops
 * before the first command that is anything else (another command or topic,
 * a \r, extra parameters, a size the general path answers with an error), is
 * not all in the buffer yet, or would not fit in `room` bytes of the file:
 * the caller's general parse loop takes that one, with nsqd's exact answers.
 *
 * Every accepted message becomes one segment record (native/layouts.h;
 * encoded as publish.h's nqe_encode does, attempts 0) stamped ts_ns, with the
 * id of nsqmp/protocol/ids.py's generator: the state (ms, seq) is passed in
 * and the new one returned, one id per message (a run never waits: past 4096
 * in a millisecond it borrows the next, as next_block does).  The records of
 * a run of at most PR_MAPPED_MAX bytes are copied into `window` at window_pos
 * (a shared mapping of the file at file_pos, made by the segment writer), with
 * no system call; a longer run, or one past the window's end, is written with
 * one pwrite at file_pos.  nsqmp/diskqueue/segment.py gives the measurements
 * behind the split.  A failed write raises OSError and nothing counts as
 * written (the caller gives the commands to the general path, which answers
 * the error).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

#include "publish.h"
#include "pubrun.h"

static int32_t
be32(const uint8_t *p)
{
    return (int32_t)(((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3]);
}

static int
run_reserve(Run *r, size_t more)
{
    if (r->len + more <= r->cap)
        return 0;
    size_t cap = r->cap ? r->cap : 4096;
    while (cap < r->len + more)
        cap *= 2;
    uint8_t *out = realloc(r->out, cap);
    if (out == NULL)
        return -1;
    r->out = out;
    r->cap = cap;
    return 0;
}

/* one record: length word, crc32c, message header (ts, attempts 0, id), body */
static void
run_encode(Run *r, const uint8_t *body, uint32_t size)
{
    static const char hex[] = "0123456789abcdef";
    if (r->seq >= PR_SEQ_MAX) {
        r->ms += 1;
        r->seq = 0;
    }
    uint64_t id = ((uint64_t)r->ms << 22) | (r->node << 12) | (uint64_t)r->seq;
    r->seq += 1;
    uint8_t *rec = r->out + r->len;
    uint8_t *m = rec + NQL_RECORD_HEAD;
    nqe_put_u64be(m, (uint64_t)r->ts);
    m[NQL_ATTEMPTS_AT] = 0;
    m[NQL_ATTEMPTS_AT + 1] = 0;
    for (int i = 0; i < NQL_ID; i++)
        m[NQL_ID_AT + i] = (uint8_t)hex[(id >> (60 - 4 * i)) & 0xF];
    memcpy(m + NQL_MESSAGE_HEAD, body, size);
    uint32_t length = NQL_MESSAGE_HEAD + size;
    nqe_put_u32le(rec, length);
    nqe_put_u32le(rec + 4, nqe_crc32c(0, m, length));
    r->len += NQL_RECORD_HEAD + length;
}

/* the command line "<verb><topic>\n" at p: bytes of the line, 0 if it is another
 * command, -1 if the part that is here matches but the line is not all here */
static Py_ssize_t
line_of(const uint8_t *p, Py_ssize_t avail, const char *verb, Py_ssize_t vlen,
        const uint8_t *topic, Py_ssize_t tlen)
{
    Py_ssize_t need = vlen + tlen + 1;
    for (Py_ssize_t i = 0; i < need; i++) {
        if (i >= avail)
            return -1;
        uint8_t want = i < vlen ? (uint8_t)verb[i] : (i < vlen + tlen ? topic[i - vlen] : '\n');
        if (p[i] != want)
            return 0;
    }
    return need;
}

/* Take the command at p (avail bytes): its size in *used and its messages in *count,
 * or why not (PR_MORE, PR_OTHER, PR_ROOM). */
static int
take_one(Run *r, const Limits *lim, const uint8_t *p, Py_ssize_t avail, Py_ssize_t *used, int64_t *count)
{
    int mpub = avail > 0 && p[0] == 'M';
    Py_ssize_t line = mpub ? line_of(p, avail, "MPUB ", 5, lim->topic, lim->tlen)
                           : line_of(p, avail, "PUB ", 4, lim->topic, lim->tlen);
    if (line == 0)
        return PR_OTHER;
    if (line < 0 || avail - line < 4)
        return PR_MORE;
    int64_t size = be32(p + line);
    const uint8_t *body = p + line + 4;
    if (!mpub) {
        if (size <= 0 || size > lim->max_msg)
            return PR_OTHER;
        if (avail - line - 4 < size)
            return PR_MORE;
        size_t rec = NQL_RECORD_HEAD + NQL_MESSAGE_HEAD + (size_t)size;
        if (r->len + rec > r->limit)
            return PR_ROOM;
        if (run_reserve(r, rec) < 0)
            return PR_ROOM;
        run_encode(r, body, (uint32_t)size);
        *used = line + 4 + (Py_ssize_t)size;
        *count = 1;
        return PR_END;
    }
    if (size < 4 || size > lim->max_body)
        return PR_OTHER;  /* under 4: nsqd fails reading the count; the general path says so */
    if (avail - line - 4 < size)
        return PR_MORE;
    int64_t n = be32(body);
    if (n <= 0 || n > (lim->max_body - 4) / 5)
        return PR_OTHER;
    /* check every message before encoding any */
    size_t need = 0;
    const uint8_t *q = body + 4, *end = body + size;
    for (int64_t i = 0; i < n; i++) {
        if (end - q < 4)
            return PR_OTHER;
        int64_t m = be32(q);
        if (m <= 0 || m > lim->max_msg || end - q - 4 < m)
            return PR_OTHER;
        need += NQL_RECORD_HEAD + NQL_MESSAGE_HEAD + (size_t)m;
        q += 4 + m;
    }
    if (r->len + need > r->limit || run_reserve(r, need) < 0)
        return PR_ROOM;
    q = body + 4;
    for (int64_t i = 0; i < n; i++) {
        uint32_t m = (uint32_t)be32(q);
        run_encode(r, q + 4, m);
        q += 4 + m;
    }
    *used = line + 4 + (Py_ssize_t)size;
    *count = n;
    return PR_END;
}

int
pr_write_all(int fd, const uint8_t *p, size_t n, int64_t at)
{
    while (n) {
        ssize_t w = pwrite(fd, p, n, (off_t)at);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        p += w;
        n -= (size_t)w;
        at += w;
    }
    return 0;
}

Run *
pr_start(int64_t ts_ns, long long node, long long ms, long long seq, long long room)
{
    static Run r;  /* its buffer is kept between calls (single-threaded under the GIL) */
    r.len = 0;
    r.ts = ts_ns;
    r.node = (uint64_t)node & 0x3FF;
    int64_t now_ms = ts_ns / 1000000 - PR_EPOCH_MS;
    r.ms = now_ms > ms ? now_ms : ms;
    r.seq = now_ms > ms ? 0 : seq;
    r.limit = room < 0 ? 0 : ((unsigned long long)room < PR_MAX_OUT ? (size_t)room : PR_MAX_OUT);
    return &r;
}

Taken
pr_take(Run *r, const Limits *lim, const uint8_t *data, Py_ssize_t len, Py_ssize_t pos)
{
    Taken t = {pos, 0, 0, PR_END};
    while (t.end < len) {
        Py_ssize_t used = 0;
        int64_t count = 0;
        t.status = take_one(r, lim, data + t.end, len - t.end, &used, &count);
        if (t.status != PR_END)
            break;
        t.end += used;
        t.commands += 1;
        t.messages += count;
    }
    return t;
}

PyDoc_STRVAR(pub_run_doc,
"pub_run(buf, pos, topic, fd, file_pos, room, max_msg_size, max_body_size, ts_ns, node, ms, seq,\n"
"        window=None, window_pos=0, /)\n--\n\n"
"Take the PUB/MPUB commands for topic from buf[pos:] and append their segment records to\n"
"fd at file_pos (at most room bytes): copied into window (a writable mapping of the file)\n"
"at window_pos when they are at most PUB_RUN_MAPPED_MAX bytes and fit, else with one\n"
"pwrite; returns\n"
"(end, commands, messages, written, ms, seq, status): where the first command not taken\n"
"starts, how many commands and messages were taken, the bytes written, the id\n"
"generator's new (ms, seq), and why it stopped (PUB_RUN_END, _MORE, _OTHER, _ROOM).\n"
"Raises OSError if the write fails (nothing is taken then).");

static PyObject *
py_pub_run(PyObject *Py_UNUSED(self), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 12 && nargs != 14) {
        PyErr_SetString(PyExc_TypeError, "pub_run() takes 12 or 14 positional arguments");
        return NULL;
    }
    PyObject *window = nargs == 14 ? args[12] : Py_None;
    Py_ssize_t window_pos = nargs == 14 ? PyLong_AsSsize_t(args[13]) : 0;
    Py_ssize_t pos = PyLong_AsSsize_t(args[1]);
    long long fd = PyLong_AsLongLong(args[3]);
    long long file_pos = PyLong_AsLongLong(args[4]);
    long long room = PyLong_AsLongLong(args[5]);
    long long max_msg = PyLong_AsLongLong(args[6]);
    long long max_body = PyLong_AsLongLong(args[7]);
    long long ts = PyLong_AsLongLong(args[8]);
    long long node = PyLong_AsLongLong(args[9]);
    long long ms = PyLong_AsLongLong(args[10]);
    long long seq = PyLong_AsLongLong(args[11]);
    if (PyErr_Occurred())
        return NULL;
    Py_buffer buf, topic;
    if (PyObject_GetBuffer(args[0], &buf, PyBUF_SIMPLE) < 0)
        return NULL;
    if (PyObject_GetBuffer(args[2], &topic, PyBUF_SIMPLE) < 0) {
        PyBuffer_Release(&buf);
        return NULL;
    }
    Py_buffer win;
    int have_win = window != Py_None;
    if (have_win && PyObject_GetBuffer(window, &win, PyBUF_WRITABLE) < 0) {
        PyBuffer_Release(&topic);
        PyBuffer_Release(&buf);
        return NULL;
    }
    if (pos < 0 || pos > buf.len || topic.len < 1 || (have_win && (window_pos < 0 || window_pos > win.len))) {
        if (have_win)
            PyBuffer_Release(&win);
        PyBuffer_Release(&topic);
        PyBuffer_Release(&buf);
        PyErr_SetString(PyExc_ValueError, "pos outside the buffer, window_pos outside the window, or an empty topic");
        return NULL;
    }
    Run *r = pr_start(ts, node, ms, seq, room);
    Limits lim = {topic.buf, topic.len, max_msg, max_body};
    Taken t = pr_take(r, &lim, buf.buf, buf.len, pos);
    int failed = 0;
    /* the GIL is kept: a write into the page cache takes microseconds, and the static
     * Run must not be entered again meanwhile */
    if (r->len && have_win && r->len <= PR_MAPPED_MAX && r->len <= (size_t)(win.len - window_pos))
        memcpy((uint8_t *)win.buf + window_pos, r->out, r->len);
    else if (r->len && fd >= 0)
        failed = pr_write_all((int)fd, r->out, r->len, file_pos);
    if (have_win)
        PyBuffer_Release(&win);
    PyBuffer_Release(&topic);
    PyBuffer_Release(&buf);
    if (failed)
        return PyErr_SetFromErrno(PyExc_OSError);
    return Py_BuildValue("(nLLnLLi)", t.end, t.commands, t.messages, (Py_ssize_t)r->len,
                         (long long)r->ms, (long long)r->seq, t.status);
}

static PyMethodDef pubrun_functions[] = {
    {"pub_run", (PyCFunction)(void (*)(void))py_pub_run, METH_FASTCALL, pub_run_doc},
    {NULL, NULL, 0, NULL},
};

int
nsqmp_pubrun_add(PyObject *module)
{
    if (PyModule_AddFunctions(module, pubrun_functions) < 0)
        return -1;
    if (PyModule_AddIntConstant(module, "PUB_RUN_END", PR_END) < 0 ||
        PyModule_AddIntConstant(module, "PUB_RUN_MORE", PR_MORE) < 0 ||
        PyModule_AddIntConstant(module, "PUB_RUN_OTHER", PR_OTHER) < 0)
        return -1;
    if (PyModule_AddIntConstant(module, "PUB_RUN_MAPPED_MAX", PR_MAPPED_MAX) < 0)
        return -1;
    return PyModule_AddIntConstant(module, "PUB_RUN_ROOM", PR_ROOM);
}
